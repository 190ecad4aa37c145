//! How fast this worker drains its backlog: answers per second of *busy*
//! engine time over the last few seconds, published with its backlog so
//! producers can predict the wait a new request would see
//! (`fleet_proto::backlog::predicted_wait_ms`). Pure: fed running totals.
//!
//! Why busy time and not wall time: a worker offered 20 req/s answers 20/s
//! whatever it could do, so answers per wall second would predict a burst's
//! wait from the calm before it, twice too long on this box, and refuse
//! requests it could have served. Per busy second it is what the worker
//! does when it has work, which is the rate a backlog drains at.

use std::collections::VecDeque;

/// The rate is measured over this window: long enough to smooth batch
/// rhythm, short enough to follow a change of model or machine load.
pub const WINDOW_MS: u64 = 5_000;

/// Less busy time than this in the window says nothing: no rate.
pub const MIN_BUSY_US: u64 = 250_000;

#[derive(Debug, Default)]
pub struct DrainMeter {
    /// (time, answers written so far, engine busy µs so far), oldest first.
    samples: VecDeque<(u64, u64, u64)>,
}

impl DrainMeter {
    /// Records the running totals at `now_ms`; returns answers per busy
    /// second over the window, 0 while the engine was too little busy to say.
    pub fn observe(&mut self, now_ms: u64, answered_total: u64, busy_us_total: u64) -> f64 {
        self.samples.push_back((now_ms, answered_total, busy_us_total));
        while self.samples.len() > 2 && self.samples.front().is_some_and(|&(at, _, _)| at + WINDOW_MS < now_ms) {
            self.samples.pop_front();
        }
        let (Some(&(_, first_answers, first_busy)), Some(&(_, last_answers, last_busy))) =
            (self.samples.front(), self.samples.back())
        else {
            return 0.0;
        };
        let busy_us = last_busy.saturating_sub(first_busy);
        if busy_us < MIN_BUSY_US {
            return 0.0;
        }
        last_answers.saturating_sub(first_answers) as f64 * 1e6 / busy_us as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_answers_per_busy_second_over_the_window() {
        let mut meter = DrainMeter::default();
        assert_eq!(meter.observe(0, 0, 0), 0.0);
        // 20 answers a second, each second 400 ms of engine time: 50 per busy second.
        for s in 1..=10u64 {
            meter.observe(s * 1_000, 20 * s, 400_000 * s);
        }
        assert_eq!(meter.observe(11_000, 220, 4_400_000), 50.0);
        // Idle: too little busy time in the window to say anything.
        let mut rate = 50.0;
        for s in 12..=17u64 {
            rate = meter.observe(s * 1_000, 220, 4_400_000);
        }
        assert_eq!(rate, 0.0);
    }
}
