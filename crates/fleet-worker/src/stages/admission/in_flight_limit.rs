//! The in-flight bound, adapted to measured batch latency: additive
//! increase while batches finish within the target, multiplicative decrease
//! when they do not (AIMD, as TCP's congestion window and the adaptive
//! concurrency limiters of Netflix and Envoy), always within a floor and a
//! ceiling. Pure: the pipeline feeds it each batch's time and applies the
//! limit to the flow gate.
//!
//! Why latency and not a guessed constant: the work a request costs varies
//! tenfold with its length and with the machine, so a fixed `max_in_flight`
//! is either too small for short texts on a fast box or lets a queue of long
//! ones outgrow every deadline. Holding batch latency near a target keeps
//! the queue the worker holds to what it drains in that time.

/// AIMD settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LimitSettings {
    pub floor: usize,
    pub ceiling: usize,
    /// A batch slower than this shrinks the limit.
    pub target_ms: f64,
    /// Decrease factor on a slow batch (0.5–0.95 sensible).
    pub backoff: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct InFlightLimit {
    settings: LimitSettings,
    limit: f64,
    /// When the limit was last cut. A slow batch holding any request read
    /// before then shows the queue the old limit let in, not the new one,
    /// and does not cut again.
    last_cut_ms: Option<u64>,
}

impl InFlightLimit {
    /// Starts at the ceiling: a fresh worker should not refuse work it
    /// can do; the first slow batches bring it down.
    pub fn new(settings: LimitSettings) -> Self {
        let floor = settings.floor.max(1);
        let settings = LimitSettings { floor, ceiling: settings.ceiling.max(floor), ..settings };
        Self { limit: settings.ceiling as f64, settings, last_cut_ms: None }
    }

    pub fn limit(&self) -> usize {
        self.limit.round() as usize
    }

    /// Feeds one batch: how long its longest-held request waited inside the
    /// worker (`held_ms`), when that request was read, and the time now.
    /// Returns the new limit.
    ///
    /// A slow batch cuts the limit at most once per round, as TCP halves its
    /// window once per loss event: the batches that follow a cut still hold
    /// requests read under the old limit, and cutting again for each of them
    /// (10–20 batches a second) drove the limit from its ceiling to its
    /// floor within a second of a burst, far below what the target allows.
    pub fn observe(&mut self, held_ms: f64, first_read_ms: u64, now_ms: u64) -> usize {
        let s = self.settings;
        if held_ms > s.target_ms {
            let read_since_cut = self.last_cut_ms.is_none_or(|cut| first_read_ms >= cut);
            if read_since_cut {
                self.limit = (self.limit * s.backoff).max(s.floor as f64);
                self.last_cut_ms = Some(now_ms);
            }
        } else {
            // One more per good batch: a batch is this worker's round trip.
            self.limit = (self.limit + 1.0).min(s.ceiling as f64);
        }
        self.limit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SETTINGS: LimitSettings = LimitSettings { floor: 8, ceiling: 256, target_ms: 100.0, backoff: 0.8 };

    /// Feeds a batch read `held_ms` before `now_ms`.
    fn batch(l: &mut InFlightLimit, held_ms: u64, now_ms: u64) -> usize {
        l.observe(held_ms as f64, now_ms - held_ms, now_ms)
    }

    #[test]
    fn slow_rounds_shrink_it_fast_and_good_batches_grow_it_back_slowly() {
        let mut l = InFlightLimit::new(SETTINGS);
        assert_eq!(l.limit(), 256);
        // Five rounds of slow batches, each read after the previous cut.
        for round in 1..=5 {
            batch(&mut l, 500, round * 1_000);
        }
        let shrunk = l.limit();
        assert_eq!(shrunk, (256.0 * 0.8f64.powi(5)).round() as usize);
        let mut steps = 0;
        let mut now = 10_000;
        while l.limit() < 200 {
            now += 10;
            batch(&mut l, 20, now);
            steps += 1;
        }
        assert!(steps > 5, "growth is gradual: {steps} steps");
        for round in 0..100 {
            now += 20_000;
            batch(&mut l, 10_000 + round, now);
        }
        assert_eq!(l.limit(), 8, "never below the floor");
    }

    #[test]
    fn a_slow_round_cuts_once_however_many_batches_it_holds() {
        let mut l = InFlightLimit::new(SETTINGS);
        // A burst: requests read from 0 ms on wait 500 ms; twenty batches of
        // them finish 10 ms apart.
        for i in 0..20 {
            l.observe(500.0, i * 10, 500 + i * 10);
        }
        assert_eq!(l.limit(), 205, "one cut of ×0.8, not twenty");
        // A batch read after that cut, still slow: the next round's cut.
        l.observe(400.0, 600, 1_000);
        assert_eq!(l.limit(), 164);
    }

    proptest! {
        #[test]
        fn the_limit_stays_within_floor_and_ceiling(batches in proptest::collection::vec((0u64..1000, 0u64..50), 0..300)) {
            let mut l = InFlightLimit::new(SETTINGS);
            let mut now = 1_000;
            for (held, gap) in batches {
                now += gap;
                let limit = l.observe(held as f64, now.saturating_sub(held), now);
                prop_assert!((8..=256).contains(&limit));
            }
        }

        #[test]
        fn a_slow_batch_never_raises_it(
            start in proptest::collection::vec((0u64..300, 0u64..50), 0..50),
            slow in 101u64..5000,
            read_gap in 0u64..5000,
        ) {
            let mut l = InFlightLimit::new(SETTINGS);
            let mut now = 10_000;
            for (held, gap) in start {
                now += gap;
                l.observe(held as f64, now - held, now);
            }
            let before = l.limit();
            prop_assert!(l.observe(slow as f64, now.saturating_sub(read_gap), now) <= before);
        }

        #[test]
        fn cuts_are_at_most_one_per_round(helds in proptest::collection::vec(101u64..2000, 1..100)) {
            // Slow batches 10 ms apart, each read `held` before it ran: a cut
            // at t counts only batches read at or after t.
            let mut l = InFlightLimit::new(SETTINGS);
            let (mut now, mut last_cut, mut cuts) = (5_000u64, None::<u64>, 0);
            for held in helds {
                now += 10;
                let before = l.limit;
                l.observe(held as f64, now - held, now);
                if l.limit < before {
                    prop_assert!(last_cut.is_none_or(|cut| now - held >= cut), "cut again within a round");
                    last_cut = Some(now);
                    cuts += 1;
                }
            }
            prop_assert!(cuts >= 1, "the first slow batch always cuts");
        }
    }
}
