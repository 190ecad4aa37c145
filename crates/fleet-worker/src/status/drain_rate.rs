//! How fast this worker drains its backlog, published with the backlog so
//! producers can predict the wait a new request would see
//! (`fleet_proto::backlog::predicted_wait_ms`). Pure: fed running totals.
//!
//! Two measures, the first that has enough data wins:
//!
//! 1. **Answers per wall second while saturated**: over the sampling
//!    intervals that began with more backlog than the worker answered in
//!    them (it never ran out of work) and in which its engine was busy at
//!    least half the time (it was working on it, not stalled or idle beside
//!    a message it cannot take yet), so it went as fast as it could. This
//!    is the rate a backlog really shrinks at, with everything that costs
//!    time (tokenizing, batching, Redis) and everything that is nearly free
//!    (requests dropped as expired), at the depth the queue then had. Of
//!    the window, the best rate over
//!    [`SUSTAINED_INTERVALS`] successive saturated intervals counts, not
//!    the mean: the seconds in which the queue was still filling
//!    understate what the worker drains once it is full, and admission
//!    judged on the mean held the queue short of what the worker could
//!    serve (docs/benchmarks.md, admission).
//! 2. **Answers per second of busy engine time**, when the worker was not
//!    saturated lately: a worker offered 20 req/s answers 20/s whatever it
//!    could do, so per wall second it would predict a burst's wait from the
//!    calm before it and refuse what it could have served. Per busy second
//!    it is what the worker does when it has work; it underestimates a
//!    saturated worker (small batches, engine time only), which the first
//!    measure takes over from within a few seconds of a burst.

use std::collections::VecDeque;

/// Rates are measured over this window: long enough to smooth batch
/// rhythm, short enough to follow a burst as the queue deepens.
pub const WINDOW_MS: u64 = 10_000;

/// The saturated rate is the best over this many successive saturated
/// intervals (about seconds): one interval alone swings 2× as answers
/// leave in lumps (a long batch, then a run of expired drops).
pub const SUSTAINED_INTERVALS: usize = 2;

/// Less busy (or saturated) time than this in the window says nothing.
pub const MIN_MEASURED_US: u64 = 250_000;

/// An interval counts as saturated only if the engine was busy at least
/// this share of it. Without it an idle second that began with a message
/// or two counted (and not yet answered) read as "saturated at 0 answers a
/// second", and a window of such seconds before a burst made the first
/// seconds of the burst look three times slower than they were.
pub const MIN_SATURATED_BUSY_SHARE: f64 = 0.5;

#[derive(Debug, Clone, Copy)]
struct Sample {
    at_ms: u64,
    answered: u64,
    busy_us: u64,
    /// The backlog measured with this sample (`None`: not measured).
    backlog: Option<u64>,
}

#[derive(Debug, Default)]
pub struct DrainMeter {
    /// Oldest first, spanning about the window.
    samples: VecDeque<Sample>,
}

impl DrainMeter {
    /// Records the running totals and the backlog at `now_ms`; returns the
    /// drain rate (answers per second), 0 when there is too little to say.
    pub fn observe(&mut self, now_ms: u64, answered_total: u64, busy_us_total: u64, backlog: Option<u64>) -> f64 {
        self.samples.push_back(Sample { at_ms: now_ms, answered: answered_total, busy_us: busy_us_total, backlog });
        while self.samples.len() > 2 && self.samples.front().is_some_and(|s| s.at_ms + WINDOW_MS < now_ms) {
            self.samples.pop_front();
        }
        self.saturated_rate().or_else(|| self.busy_rate()).unwrap_or(0.0)
    }

    /// The saturated intervals of the window, oldest first: (answers, wall µs).
    fn saturated_intervals(&self) -> Vec<(u64, u64)> {
        let mut intervals = Vec::new();
        for (from, to) in self.samples.iter().zip(self.samples.iter().skip(1)) {
            let answered = to.answered.saturating_sub(from.answered);
            let interval_us = to.at_ms.saturating_sub(from.at_ms) * 1_000;
            let busy_us = to.busy_us.saturating_sub(from.busy_us);
            let had_work_left = from.backlog.is_some_and(|backlog| backlog > answered);
            let worked = busy_us as f64 >= interval_us as f64 * MIN_SATURATED_BUSY_SHARE;
            if had_work_left && worked {
                intervals.push((answered, interval_us));
            }
        }
        intervals
    }

    /// The best rate over `SUSTAINED_INTERVALS` successive saturated
    /// intervals; with fewer, the rate over those there are.
    fn saturated_rate(&self) -> Option<f64> {
        let intervals = self.saturated_intervals();
        let rate = |run: &[(u64, u64)]| {
            let (answers, wall_us) = run.iter().fold((0, 0), |(a, w), &(answered, us)| (a + answered, w + us));
            (wall_us >= MIN_MEASURED_US).then(|| answers as f64 * 1e6 / wall_us as f64)
        };
        if intervals.len() < SUSTAINED_INTERVALS {
            return rate(&intervals);
        }
        intervals.windows(SUSTAINED_INTERVALS).filter_map(rate).reduce(f64::max)
    }

    fn busy_rate(&self) -> Option<f64> {
        let (first, last) = (self.samples.front()?, self.samples.back()?);
        let busy_us = last.busy_us.saturating_sub(first.busy_us);
        (busy_us >= MIN_MEASURED_US).then(|| last.answered.saturating_sub(first.answered) as f64 * 1e6 / busy_us as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Enough one-second samples to fill the window.
    const WINDOW_S: u64 = WINDOW_MS / 1_000;

    #[test]
    fn unsaturated_the_rate_is_answers_per_busy_second() {
        let mut meter = DrainMeter::default();
        assert_eq!(meter.observe(0, 0, 0, Some(0)), 0.0);
        // 20 answers a second, each second 400 ms of engine time, a backlog
        // of 2 at each sample: 50 per busy second.
        for s in 1..=10u64 {
            meter.observe(s * 1_000, 20 * s, 400_000 * s, Some(2));
        }
        assert_eq!(meter.observe(11_000, 220, 4_400_000, Some(2)), 50.0);
        // Idle: too little busy time in the window to say anything.
        let mut rate = 50.0;
        for s in 12..=12 + WINDOW_S {
            rate = meter.observe(s * 1_000, 220, 4_400_000, Some(0));
        }
        assert_eq!(rate, 0.0);
    }

    #[test]
    fn saturated_the_rate_is_answers_per_wall_second() {
        let mut meter = DrainMeter::default();
        // A backlog of 500 each second, 150 answers a second (many of them
        // cheap expired drops), the engine busy 900 ms a second: 150/s,
        // not 167 per busy second.
        let mut rate = 0.0;
        let saturated_until = WINDOW_S + 1;
        for s in 0..=saturated_until {
            rate = meter.observe(s * 1_000, 150 * s, 900_000 * s, Some(500));
        }
        assert_eq!(rate, 150.0);
        // The backlog falls below what a second answers: once the saturated
        // intervals have left the window, the busy-second rate is back.
        let (answered, busy_us) = (150 * saturated_until, 900_000 * saturated_until);
        for calm in 1..=WINDOW_S + 1 {
            let at = (saturated_until + calm) * 1_000;
            rate = meter.observe(at, answered + 20 * calm, busy_us + 100_000 * calm, Some(3));
        }
        assert_eq!(rate, 200.0, "20 answers per 100 ms of engine time");
    }

    #[test]
    fn an_idle_second_beside_an_unanswered_message_is_not_saturation() {
        let mut meter = DrainMeter::default();
        // Calm: 20 answers a second in 300 ms of engine time (66.7 per busy
        // second), then idle seconds with one message counted but nothing
        // answered and the engine still.
        for s in 0..=4u64 {
            meter.observe(s * 1_000, 20 * s, 300_000 * s, Some(2));
        }
        let mut rate = 0.0;
        for s in 5..=WINDOW_S {
            rate = meter.observe(s * 1_000, 80, 1_200_000, Some(1));
        }
        assert!((rate - 66.7).abs() < 0.1, "the busy-second rate, not 0: {rate}");
        // A burst: the engine busy 900 ms a second, 120 answers a second
        // from a backlog of 400: saturated, and only those seconds count.
        for burst in 1..=3u64 {
            let s = WINDOW_S + burst;
            rate = meter.observe(s * 1_000, 80 + 120 * burst, 1_200_000 + 900_000 * burst, Some(400));
        }
        assert_eq!(rate, 120.0);
    }

    #[test]
    fn saturated_the_best_sustained_rate_counts_not_a_lump_or_the_mean() {
        let mut meter = DrainMeter::default();
        // A queue that deepens: 80 and 60 answers a second, then lumps of 200
        // and 40 (a run of expired drops, then a long batch), then 150 and
        // 140 once batches are full. Always saturated (backlog 1000).
        let mut answered = 0;
        let mut rate = 0.0;
        for (s, per_second) in [0, 80, 60, 200, 40, 150, 140].into_iter().enumerate() {
            answered += per_second;
            rate = meter.observe(s as u64 * 1_000, answered, 900_000 * s as u64, Some(1_000));
        }
        // Best two successive seconds: 150 + 140. Not the lone 200, not the
        // window's mean (112).
        assert_eq!(rate, 145.0);
    }

    #[test]
    fn a_single_saturated_interval_is_measured_on_its_own() {
        let mut meter = DrainMeter::default();
        meter.observe(0, 0, 0, Some(2));
        meter.observe(1_000, 20, 300_000, Some(500));
        assert_eq!(meter.observe(2_000, 140, 1_200_000, Some(400)), 120.0);
    }

    #[test]
    fn an_unmeasured_backlog_is_not_taken_for_saturation() {
        let mut meter = DrainMeter::default();
        for s in 0..=WINDOW_S + 3 {
            meter.observe(s * 1_000, 100 * s, 500_000 * s, None);
        }
        let s = WINDOW_S + 4;
        assert_eq!(meter.observe(s * 1_000, 100 * s, 500_000 * s, None), 200.0, "per busy second");
    }

    proptest! {
        /// Saturated throughout: the rate lies between the slowest and the
        /// fastest single interval of the window.
        #[test]
        fn the_saturated_rate_is_bounded_by_its_intervals(per_second in proptest::collection::vec(1u64..400, 2..12)) {
            let mut meter = DrainMeter::default();
            meter.observe(0, 0, 0, Some(10_000));
            let mut answered = 0;
            let mut rate = 0.0;
            for (i, n) in per_second.iter().enumerate() {
                answered += n;
                let s = i as u64 + 1;
                rate = meter.observe(s * 1_000, answered, 900_000 * s, Some(10_000));
            }
            let in_window = &per_second[per_second.len().saturating_sub(WINDOW_S as usize)..];
            let (low, high) = (*in_window.iter().min().unwrap() as f64, *in_window.iter().max().unwrap() as f64);
            prop_assert!(rate >= low - 1e-9 && rate <= high + 1e-9, "{rate} outside {low}..{high}");
        }
    }
}
