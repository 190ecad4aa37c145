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
}

impl InFlightLimit {
    /// Starts at the ceiling: a fresh worker should not refuse work it
    /// can do; the first slow batches bring it down.
    pub fn new(settings: LimitSettings) -> Self {
        let floor = settings.floor.max(1);
        let settings = LimitSettings { floor, ceiling: settings.ceiling.max(floor), ..settings };
        Self { limit: settings.ceiling as f64, settings }
    }

    pub fn limit(&self) -> usize {
        self.limit.round() as usize
    }

    /// Feeds one batch's latency (its queue wait plus its model time); returns
    /// the new limit.
    pub fn observe(&mut self, batch_latency_ms: f64) -> usize {
        let s = self.settings;
        self.limit = if batch_latency_ms > s.target_ms {
            self.limit * s.backoff
        } else {
            // One more per good batch: a batch is this worker's round trip.
            self.limit + 1.0
        }
        .clamp(s.floor as f64, s.ceiling as f64);
        self.limit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SETTINGS: LimitSettings = LimitSettings { floor: 8, ceiling: 256, target_ms: 100.0, backoff: 0.8 };

    #[test]
    fn slow_batches_shrink_it_fast_and_good_ones_grow_it_back_slowly() {
        let mut l = InFlightLimit::new(SETTINGS);
        assert_eq!(l.limit(), 256);
        for _ in 0..5 {
            l.observe(500.0);
        }
        let shrunk = l.limit();
        assert!(shrunk < 100, "{shrunk}");
        let mut steps = 0;
        while l.limit() < 200 {
            l.observe(20.0);
            steps += 1;
        }
        assert!(steps > 5, "growth is gradual: {steps} steps");
        for _ in 0..100 {
            l.observe(10_000.0);
        }
        assert_eq!(l.limit(), 8, "never below the floor");
    }

    proptest! {
        #[test]
        fn the_limit_stays_within_floor_and_ceiling(latencies in proptest::collection::vec(0.0f64..1000.0, 0..300)) {
            let mut l = InFlightLimit::new(SETTINGS);
            for ms in latencies {
                let limit = l.observe(ms);
                prop_assert!((8..=256).contains(&limit));
            }
        }

        #[test]
        fn a_slow_batch_never_raises_it(start in proptest::collection::vec(0.0f64..300.0, 0..50), slow in 100.1f64..5000.0) {
            let mut l = InFlightLimit::new(SETTINGS);
            for ms in start { l.observe(ms); }
            let before = l.limit();
            prop_assert!(l.observe(slow) <= before);
        }
    }
}
