//! Whether p99 latency came back after a fault: the baseline before it,
//! windows of answers after it, and the same rule applied where nothing
//! happened to say how far its verdicts hold. Apart from the verdict
//! because the windows are the one subtle rule a soak judges by.

use super::verdict::Budgets;
use crate::soak::schedule::{Fault, Planned};

/// The answers before a fault whose p99 is its baseline: long enough to
/// hold hundreds of answers at the soak's rates (docs/soak.md has them),
/// so one slow batch does not move it, and short enough to stay clear of
/// the previous fault's recovery (faults come minutes apart).
pub const BEFORE_WINDOW_S: f64 = 120.0;

/// After a fault, p99 is taken over the answers of this long a window. One
/// 10 s interval holds too few answers for a p99 at the soak's rates: its
/// p99 is its slowest answer, and a rule on such intervals failed many
/// fault-free moments (docs/soak.md, The budgets, has the figures).
pub const AFTER_WINDOW_S: f64 = 30.0;

/// A window starts this often after a fault's end.
pub const AFTER_WINDOW_STEP_S: f64 = 10.0;

/// Slack for interval boundaries that were computed in floating point
/// (10 intervals of 0.1 s do not end at exactly 1.0).
const EPSILON_S: f64 = 1e-6;

/// How p99 latency came back after one fault.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recovery {
    pub fault: Planned,
    /// The p99 (ms) of the ok answers seen in the [`BEFORE_WINDOW_S`]
    /// before the fault; `None` when none was seen then (nothing to
    /// compare with).
    pub before_p99_ms: Option<f64>,
    /// Seconds after the fault ended to the start of the first
    /// [`AFTER_WINDOW_S`] window whose p99 <= factor × before, once the
    /// last window over it has passed (`None`: not by the end of the
    /// budget). 0 when the first window after the end is back.
    pub recovered_after_s: Option<f64>,
    /// The highest window p99 (ms) from the fault's start to the end of the
    /// recovery budget: how bad it got.
    pub worst_p99_ms: Option<f64>,
}

impl Recovery {
    /// True when p99 was back within the budget, or when there was no
    /// baseline to judge against ([`Recovery::judged`] is then false, and
    /// the report should say so).
    pub fn within(&self, budgets: &Budgets) -> bool {
        match (self.before_p99_ms, self.recovered_after_s) {
            (None, _) => true,
            (Some(_), Some(after_s)) => after_s + AFTER_WINDOW_S <= budgets.p99_recovery_s + EPSILON_S,
            (Some(_), None) => false,
        }
    }

    /// Whether there was a p99 before the fault to compare with.
    pub fn judged(&self) -> bool {
        self.before_p99_ms.is_some()
    }

    /// One line for the report: the fault, p99 before and at worst, and
    /// whether (and when) it came back.
    pub fn summary(&self, budgets: &Budgets) -> String {
        let fault = &self.fault;
        let lasting = if fault.lasts_s > 0.0 { format!(" for {:.0} s", fault.lasts_s) } else { String::new() };
        let head = format!("{} at {:.0} s{lasting}", fault.fault.name(), fault.at_s);
        let worst = self.worst_p99_ms.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.0} ms"));
        let Some(before) = self.before_p99_ms else {
            let window_s = BEFORE_WINDOW_S;
            return format!("{head}: no ok answer in the {window_s:.0} s before it, not judged (worst p99 {worst})");
        };
        let back = format!("back within {}×", budgets.p99_recovery_factor);
        // `recovery` looks no further than the budget: a time found is within it.
        let outcome = match self.recovered_after_s {
            Some(after_s) => format!("{back} from {after_s:.0} s after its end"),
            None => format!("not {back} in the {:.0} s after its end", budgets.p99_recovery_s),
        };
        format!("{head}: p99 {before:.0} ms before, worst {worst}, {outcome}")
    }
}

/// One model's ok answers, in the order they were seen: (seconds
/// answered, ms end to end). Sorted once, so a window is two binary
/// searches, not a scan (a day's soak holds about a million answers).
pub struct Answers(Vec<(f64, f64)>);

impl Answers {
    pub fn new(mut answers: Vec<(f64, f64)>) -> Self {
        answers.retain(|&(at_s, ms)| at_s.is_finite() && ms.is_finite());
        answers.sort_by(|a, b| a.0.total_cmp(&b.0));
        Self(answers)
    }

    /// The p99 (nearest rank) of the answers seen in `[from_s, to_s)`;
    /// `None` without any.
    fn p99(&self, from_s: f64, to_s: f64) -> Option<f64> {
        let first = self.0.partition_point(|&(at_s, _)| at_s < from_s);
        let end = self.0.partition_point(|&(at_s, _)| at_s < to_s);
        let mut latencies: Vec<f64> = self.0.get(first..end)?.iter().map(|&(_, ms)| ms).collect();
        if latencies.is_empty() {
            return None;
        }
        latencies.sort_by(f64::total_cmp);
        Some(super::books::nearest_rank(&latencies, 0.99))
    }
}

/// How p99 came back after `fault`.
///
/// before = the p99 of the answers seen in the [`BEFORE_WINDOW_S`] before
/// the fault starts. After: windows [`AFTER_WINDOW_S`] long, starting at
/// the fault's end and every [`AFTER_WINDOW_STEP_S`] after, the last ending
/// `budgets.p99_recovery_s` after the end. Recovered from the first window
/// after the last one whose p99 is over `factor × before` (a window
/// without answers is over: a stall does not pass), so a fault whose spike
/// comes late (a swapped-in version's first batches, a rebalance seconds
/// after a join) is judged by that spike, not by a calm window before it.
pub fn recovery(answers: &Answers, fault: &Planned, budgets: &Budgets) -> Recovery {
    let before_p99_ms = answers.p99(fault.at_s - BEFORE_WINDOW_S, fault.at_s);
    let ends_s = fault.ends_s();
    let last_start_s = ends_s + budgets.p99_recovery_s - AFTER_WINDOW_S;
    let after_windows = window_starts(ends_s, last_start_s, AFTER_WINDOW_STEP_S);
    let recovered_after_s = before_p99_ms.and_then(|before| {
        let limit_ms = before * budgets.p99_recovery_factor;
        let calm = |start_s: f64| answers.p99(start_s, start_s + AFTER_WINDOW_S).is_some_and(|ms| ms <= limit_ms);
        let first_calm = match after_windows.iter().rposition(|&start_s| !calm(start_s)) {
            Some(last_over) => *after_windows.get(last_over + 1)?,
            None => *after_windows.first()?,
        };
        Some(first_calm - ends_s)
    });
    let worst_p99_ms = window_starts(fault.at_s, last_start_s, AFTER_WINDOW_STEP_S)
        .into_iter()
        .filter_map(|start_s| answers.p99(start_s, start_s + AFTER_WINDOW_S))
        .max_by(f64::total_cmp);
    Recovery { fault: *fault, before_p99_ms, recovered_after_s, worst_p99_ms }
}

/// `from_s`, `from_s + step_s`, … up to `last_s`; none when `last_s` is
/// before `from_s` (a budget shorter than a window has no window).
fn window_starts(from_s: f64, last_s: f64, step_s: f64) -> Vec<f64> {
    /// Slack for a last start computed in floating point.
    const SLACK: f64 = 1e-9;
    if last_s < from_s {
        return Vec::new();
    }
    let count = ((last_s - from_s) / step_s + SLACK).floor() as usize + 1;
    (0..count).map(|i| from_s + i as f64 * step_s).collect()
}

/// The rule of [`recovery`] applied where nothing happened: a fault of no
/// length at each minute mark from `from_s` to `to_s` whose baseline and
/// recovery budget are clear of every fault's own. How often it fails there
/// says how far its verdicts on real faults can be trusted; the report
/// prints it. Returns (judged, failed).
pub fn fault_free_checks(
    answers: &Answers,
    faults: &[Planned],
    budgets: &Budgets,
    from_s: f64,
    to_s: f64,
) -> (usize, usize) {
    const EVERY_S: f64 = 60.0;
    let clear = |t: f64| {
        let (reach_from_s, reach_to_s) = (t - BEFORE_WINDOW_S, t + budgets.p99_recovery_s);
        faults.iter().all(|f| f.ends_s() + budgets.p99_recovery_s <= reach_from_s || f.at_s >= reach_to_s)
    };
    let judged: Vec<Recovery> = window_starts(from_s + BEFORE_WINDOW_S, to_s - budgets.p99_recovery_s, EVERY_S)
        .into_iter()
        .filter(|&t| clear(t))
        .map(|t| {
            // Its kind is not read: only whether latency stayed within.
            let zero_length_fault = Planned { fault: Fault::Burst, at_s: t, lasts_s: 0.0 };
            recovery(answers, &zero_length_fault, budgets)
        })
        .filter(Recovery::judged)
        .collect();
    (judged.len(), judged.iter().filter(|r| !r.within(budgets)).count())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker_restart() -> Planned {
        Planned { fault: Fault::BrokerRestart, at_s: 120.0, lasts_s: 20.0 }
    }

    /// Ten ok answers in each 10 s interval from 0 to 300 s, 100 ms each,
    /// except as `overrides` say for the interval starting there (`None`:
    /// no answer in it; `Some(ms)`: all ten took `ms`).
    fn answers(overrides: &[(f64, Option<f64>)]) -> Vec<(f64, f64)> {
        (0..30)
            .map(|i| i as f64 * 10.0)
            .flat_map(|start| {
                let ms = match overrides.iter().find(|(at, _)| *at == start) {
                    Some(&(_, ms)) => ms,
                    None => Some(100.0),
                };
                (0..10).filter_map(move |k| ms.map(|ms| (start + 0.5 + k as f64, ms)))
            })
            .collect()
    }

    #[test]
    fn recovery_is_the_first_window_back_within_the_factor_after_the_last_over_it() {
        // Fault 120..140: nothing answered during it, a slow backlog after,
        // 130 ms (over 1.2 × 100) at 150, 115 ms at 160. The 30 s windows
        // from 140 and 150 hold a slow interval; the one from 160 is back.
        let series =
            answers(&[(120.0, None), (130.0, None), (140.0, Some(900.0)), (150.0, Some(130.0)), (160.0, Some(115.0))]);
        let recovery = recovery(&Answers::new(series.clone()), &broker_restart(), &Budgets::default());
        assert_eq!(recovery.before_p99_ms, Some(100.0));
        assert_eq!(recovery.recovered_after_s, Some(20.0));
        assert_eq!(recovery.worst_p99_ms, Some(900.0));
        assert!(recovery.judged());
        assert!(recovery.within(&Budgets::default()));
        // A 40 s budget ends with the window from 150: still slow.
        assert!(!recovery.within(&Budgets { p99_recovery_s: 40.0, ..Budgets::default() }));
    }

    #[test]
    fn a_late_spike_is_what_recovery_is_judged_by() {
        // Calm at 140 and 150, the spike at 160 (a swapped-in version's
        // first batches), calm again from 170: the window from 170 is the
        // last, ending 60 s after the fault's end.
        let series = answers(&[(160.0, Some(600.0))]);
        let recovery = recovery(&Answers::new(series.clone()), &broker_restart(), &Budgets::default());
        assert_eq!(recovery.recovered_after_s, Some(30.0));
        assert_eq!(recovery.worst_p99_ms, Some(600.0));
        assert!(recovery.within(&Budgets::default()));
        // One interval later and no window after it is left in the budget.
        let later =
            super::recovery(&Answers::new(answers(&[(170.0, Some(600.0))])), &broker_restart(), &Budgets::default());
        assert_eq!(later.recovered_after_s, None);
    }

    #[test]
    fn the_baseline_is_the_p99_of_the_answers_in_the_two_minutes_before() {
        // 120 answers of 100 ms in 0..120, one of them 5 000 ms: the p99
        // (the 119th of 120) is 100, where a per-interval rule would see 5 000.
        let mut series = answers(&[(120.0, Some(5000.0))]);
        series[55].1 = 5000.0;
        let recovery = recovery(&Answers::new(series.clone()), &broker_restart(), &Budgets::default());
        assert_eq!(recovery.before_p99_ms, Some(100.0));
        // Two slow answers in it are over 1 %: the baseline is then slow.
        series[56].1 = 5000.0;
        let slow_before = super::recovery(&Answers::new(series.clone()), &broker_restart(), &Budgets::default());
        assert_eq!(slow_before.before_p99_ms, Some(5000.0));
        // What came before the two minutes is not in it.
        let shifted = Planned { at_s: 300.0, lasts_s: 0.0, ..broker_restart() };
        assert_eq!(
            super::recovery(&Answers::new(series.clone()), &shifted, &Budgets::default()).before_p99_ms,
            Some(100.0)
        );
    }

    #[test]
    fn recovery_is_none_when_p99_stays_high_past_the_window() {
        // Still 500 ms up to 200 (60 s after the end at 140); back at 210.
        let slow: Vec<(f64, Option<f64>)> = (12..=20).map(|i| (i as f64 * 10.0, Some(500.0))).collect();
        let recovery = recovery(&Answers::new(answers(&slow)), &broker_restart(), &Budgets::default());
        assert_eq!(recovery.before_p99_ms, Some(100.0));
        assert_eq!(recovery.recovered_after_s, None);
        assert!(!recovery.within(&Budgets::default()));
        // A stall (no ok answer at all after the fault) does not recover either.
        let stalled: Vec<(f64, Option<f64>)> = (12..30).map(|i| (i as f64 * 10.0, None)).collect();
        let recovery = super::recovery(&Answers::new(answers(&stalled)), &broker_restart(), &Budgets::default());
        assert_eq!((recovery.recovered_after_s, recovery.worst_p99_ms), (None, None));
        assert!(!recovery.within(&Budgets::default()));
    }

    #[test]
    fn without_a_baseline_a_fault_is_not_judged() {
        let quiet_before: Vec<(f64, Option<f64>)> = (0..12).map(|i| (i as f64 * 10.0, None)).collect();
        let recovery = recovery(&Answers::new(answers(&quiet_before)), &broker_restart(), &Budgets::default());
        assert_eq!(recovery.before_p99_ms, None);
        assert_eq!(recovery.recovered_after_s, None);
        assert!(!recovery.judged());
        assert!(recovery.within(&Budgets::default()));
        assert!(recovery.summary(&Budgets::default()).contains("not judged"));
    }

    #[test]
    fn fault_free_checks_judge_the_minute_marks_clear_of_faults() {
        // Steady answers over 0..1000 s and one fault at 500..510: the marks
        // 120..420 and 720..900 are clear of it (6 + 4).
        let steady: Vec<(f64, f64)> = (0..10_000).map(|i| (i as f64 * 0.1, 100.0)).collect();
        let fault = Planned { fault: Fault::RedisFreeze, at_s: 500.0, lasts_s: 10.0 };
        let budgets = Budgets::default();
        assert_eq!(fault_free_checks(&Answers::new(steady.clone()), &[fault], &budgets, 0.0, 1000.0), (10, 0));
        // Slow answers in 810..840 are the last window after the mark at
        // 780: that one fails; the marks after it take them into their
        // baseline, which 30 of 120 s of slow answers make slow.
        let mut slow = steady.clone();
        for answer in slow.iter_mut().filter(|(t, _)| (810.0..840.0).contains(t)) {
            answer.1 = 600.0;
        }
        assert_eq!(fault_free_checks(&Answers::new(slow), &[fault], &budgets, 0.0, 1000.0), (10, 1));
    }
}
