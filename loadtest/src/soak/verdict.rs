//! A soak's verdict against its budgets: memory that keeps growing after the
//! warm-up, p99 latency that does not come back after a fault, and answers
//! missing or delivered twice.
//!
//! Pure: the run hands in what it sampled and counted, this says which
//! budgets broke and writes the `RESULT` line CI reads.

use crate::soak::schedule::{Fault, Planned};

/// How far a soak may drift before it fails.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budgets {
    /// RSS growth after the warm-up, percent of the worker's mean per hour.
    /// A leak of a few bytes per request shows as a steady slope; a cache
    /// filling up flattens out before the warm-up ends.
    pub rss_growth_pct_per_hour: f64,
    /// After a fault, p99 must be back within this factor of its value
    /// before the fault...
    pub p99_recovery_factor: f64,
    /// ...within this many seconds of the fault's end.
    pub p99_recovery_s: f64,
    /// Requests computed twice where no kill forced it.
    pub allowed_duplicates: u64,
}

impl Default for Budgets {
    fn default() -> Self {
        Self { rss_growth_pct_per_hour: 2.0, p99_recovery_factor: 1.2, p99_recovery_s: 60.0, allowed_duplicates: 0 }
    }
}

/// The answers before a fault whose p99 is its baseline: long enough to
/// hold hundreds of answers at the soak's rates (about 440 images at 3.7 a
/// second), so one slow batch does not move it, and short enough to stay
/// clear of the previous fault's recovery (faults come minutes apart).
pub const BEFORE_WINDOW_S: f64 = 120.0;

/// After a fault, p99 is taken over the answers of this long a window. One
/// 10 s interval holds too few answers for a p99: at 9.4 texts a second its
/// p99 is its slowest answer, and the rule then failed a fifth of
/// fault-free moments.
pub const AFTER_WINDOW_S: f64 = 30.0;

/// A window starts this often after a fault's end.
pub const AFTER_WINDOW_STEP_S: f64 = 10.0;

/// Under this span of samples a slope per hour is noise: a model swap, a
/// burst or an allocator returning memory moves RSS by more in minutes
/// than a leak does in hours (a 3-minute soak with a swap read 900 %/h).
const MIN_SPAN_S: f64 = 1800.0;
const MIN_SAMPLES: usize = 3;

/// Slack for interval boundaries that were computed in floating point
/// (10 intervals of 0.1 s do not end at exactly 1.0).
const EPSILON_S: f64 = 1e-6;

const SECONDS_PER_HOUR: f64 = 3600.0;

/// RSS samples of one worker process: (seconds from the run's start, bytes).
/// Growth after warm-up: the least-squares slope of the samples at
/// `t >= warm_up_s`, as percent of their mean per hour. A slope rather than
/// last minus first, so one sample taken mid-burst or right after a GC does
/// not decide the verdict. `None` with fewer than 3 such samples or a span
/// under 30 minutes (too little to say), or a mean that is not positive.
pub fn rss_growth_pct_per_hour(samples: &[(f64, f64)], warm_up_s: f64) -> Option<f64> {
    let kept: Vec<(f64, f64)> =
        samples.iter().copied().filter(|&(t, bytes)| t.is_finite() && bytes.is_finite() && t >= warm_up_s).collect();
    if kept.len() < MIN_SAMPLES {
        return None;
    }
    let (first_s, last_s) =
        kept.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(first, last), &(t, _)| (first.min(t), last.max(t)));
    if last_s - first_s < MIN_SPAN_S {
        return None;
    }
    let count = kept.len() as f64;
    let mean_s = kept.iter().map(|&(t, _)| t).sum::<f64>() / count;
    let mean_bytes = kept.iter().map(|&(_, bytes)| bytes).sum::<f64>() / count;
    if mean_bytes <= 0.0 {
        return None;
    }
    let (covariance, variance) = kept.iter().fold((0.0, 0.0), |(covariance, variance), &(t, bytes)| {
        let from_mean = t - mean_s;
        (covariance + from_mean * (bytes - mean_bytes), variance + from_mean * from_mean)
    });
    // variance > 0: the samples span at least MIN_SPAN_S.
    let bytes_per_s = covariance / variance;
    Some(bytes_per_s / mean_bytes * 100.0 * SECONDS_PER_HOUR)
}

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

/// One worker process's memory over the run.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerMemory {
    pub worker: String,
    /// The earliest sample of the whole run, warm-up included (bytes).
    pub first_bytes: f64,
    /// The latest sample (bytes).
    pub last_bytes: f64,
    pub peak_bytes: f64,
    /// See [`rss_growth_pct_per_hour`]; `None`: too few samples to judge.
    pub growth_pct_per_hour: Option<f64>,
}

impl WorkerMemory {
    /// From one worker's RSS samples (seconds from the start, bytes), in
    /// any order. No samples: all zero, growth `None`.
    pub fn of(worker: &str, samples: &[(f64, f64)], warm_up_s: f64) -> WorkerMemory {
        let finite = || samples.iter().copied().filter(|&(t, bytes)| t.is_finite() && bytes.is_finite());
        let first_bytes = finite().min_by(|a, b| a.0.total_cmp(&b.0)).map_or(0.0, |(_, bytes)| bytes);
        let last_bytes = finite().max_by(|a, b| a.0.total_cmp(&b.0)).map_or(0.0, |(_, bytes)| bytes);
        let peak_bytes = finite().map(|(_, bytes)| bytes).fold(0.0, f64::max);
        WorkerMemory {
            worker: worker.to_owned(),
            first_bytes,
            last_bytes,
            peak_bytes,
            growth_pct_per_hour: rss_growth_pct_per_hour(samples, warm_up_s),
        }
    }
}

/// What a soak measured, to judge against [`Budgets`].
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub memory: Vec<WorkerMemory>,
    pub recoveries: Vec<Recovery>,
    /// Requests sent and never answered.
    pub missing: u64,
    /// Requests computed a second time (the workers'
    /// `fleet_duplicate_answers_total`; the first answer stays, so no
    /// client sees two) outside what a broker kill forces.
    pub duplicates: u64,
    /// Messages dead-lettered during the run: reported, not judged apart
    /// (each stands for a request without an answer, which `missing` must
    /// count).
    pub dlq: u64,
    /// Budgets judged where the facts are (a worker's death or restart, a
    /// fault that could not be injected, RSS over its limit), one line each.
    pub other: Vec<String>,
}

impl Verdict {
    /// Lines naming each budget broken; empty when all hold. A worker whose
    /// growth is `None` is not judged (the run was too short to say), and
    /// the list says nothing of it; [`Verdict::memory_judged`] tells whether
    /// any was.
    pub fn failures(&self, budgets: &Budgets) -> Vec<String> {
        let mut failures = self.other.clone();
        for worker in &self.memory {
            if let Some(growth) = worker.growth_pct_per_hour.filter(|&growth| growth > budgets.rss_growth_pct_per_hour)
            {
                failures.push(format!(
                    "rss growth: {} grows {growth:.2} %/h after the warm-up (budget {} %/h)",
                    worker.worker, budgets.rss_growth_pct_per_hour
                ));
            }
        }
        for recovery in self.recoveries.iter().filter(|recovery| !recovery.within(budgets)) {
            failures.push(format!("p99 recovery: {}", recovery.summary(budgets)));
        }
        if self.missing > 0 {
            failures.push(format!("missing: {} requests never answered (budget 0)", self.missing));
        }
        if self.duplicates > budgets.allowed_duplicates {
            failures.push(format!(
                "duplicates: {} requests computed twice where no kill forced it (budget {})",
                self.duplicates, budgets.allowed_duplicates
            ));
        }
        failures
    }

    pub fn passed(&self, budgets: &Budgets) -> bool {
        self.failures(budgets).is_empty()
    }

    /// Whether any worker's memory growth could be judged.
    pub fn memory_judged(&self) -> bool {
        self.memory.iter().any(|worker| worker.growth_pct_per_hour.is_some())
    }

    /// The highest growth of any judged worker (%/h).
    pub fn max_rss_growth_pct_per_hour(&self) -> Option<f64> {
        self.memory.iter().filter_map(|worker| worker.growth_pct_per_hour).max_by(f64::total_cmp)
    }

    /// The verdict's last line, the one docs and CI read:
    /// `RESULT soak verdict=pass|fail missing=.. duplicates=.. dlq=..
    /// max_rss_growth_pct_per_hour=..|- faults_recovered=k/n`, where k counts
    /// the faults [`Recovery::within`] budget (those without a baseline
    /// included).
    pub fn result_line(&self, budgets: &Budgets) -> String {
        let verdict = if self.passed(budgets) { "pass" } else { "fail" };
        let growth = self.max_rss_growth_pct_per_hour().map_or_else(|| "-".to_owned(), |growth| format!("{growth:.2}"));
        let recovered = self.recoveries.iter().filter(|recovery| recovery.within(budgets)).count();
        format!(
            "RESULT soak verdict={verdict} missing={} duplicates={} dlq={} max_rss_growth_pct_per_hour={growth} \
             faults_recovered={recovered}/{}",
            self.missing,
            self.duplicates,
            self.dlq,
            self.recoveries.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::schedule::Fault;

    const MIB: f64 = 1024.0 * 1024.0;

    /// A sample every 10 s for two hours, from `bytes(t)`.
    fn samples(bytes: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        (0..=720).map(|i| i as f64 * 10.0).map(|t| (t, bytes(t))).collect()
    }

    #[test]
    fn a_flat_series_with_noise_grows_by_about_nothing() {
        // ±8 MiB of sawtooth (a collector coming round every minute).
        let flat = samples(|t| 500.0 * MIB + ((t / 10.0) as u64 % 6) as f64 * 3.2 * MIB - 8.0 * MIB);
        let growth = rss_growth_pct_per_hour(&flat, 600.0).unwrap();
        assert!(growth.abs() < 0.05, "{growth}");
    }

    #[test]
    fn a_series_growing_one_percent_an_hour_grows_one_percent_an_hour() {
        // 1 % of its mean (after the warm-up) per hour, around t = 3900 s;
        // the warm-up climbs steeply from 100 MiB and must not count.
        let mean = 400.0 * MIB;
        let series = samples(|t| {
            if t < 600.0 {
                100.0 * MIB + t / 600.0 * 300.0 * MIB
            } else {
                mean * (1.0 + 0.01 * (t - 3900.0) / 3600.0)
            }
        });
        let growth = rss_growth_pct_per_hour(&series, 600.0).unwrap();
        assert!((growth - 1.0).abs() < 1e-6, "{growth}");
        let everything = rss_growth_pct_per_hour(&series, 0.0).unwrap();
        assert!(everything > 5.0, "the warm-up counted would look like a leak: {everything}");
    }

    #[test]
    fn growth_is_none_when_too_short() {
        let two = [(700.0, MIB), (800.0, MIB)];
        assert_eq!(rss_growth_pct_per_hour(&two, 600.0), None);
        let brief: Vec<(f64, f64)> = (0..180).map(|i| (600.0 + i as f64 * 10.0, MIB + i as f64)).collect();
        assert_eq!(rss_growth_pct_per_hour(&brief, 600.0), None, "1790 s is too short");
        let only_warm_up = samples(|_| MIB);
        assert_eq!(rss_growth_pct_per_hour(&only_warm_up, 7201.0), None);
        let enough: Vec<(f64, f64)> = (0..181).map(|i| (600.0 + i as f64 * 10.0, MIB)).collect();
        assert_eq!(rss_growth_pct_per_hour(&enough, 600.0), Some(0.0));
    }

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

    fn worker(name: &str, growth: Option<f64>) -> WorkerMemory {
        WorkerMemory {
            worker: name.into(),
            first_bytes: 100.0 * MIB,
            last_bytes: 120.0 * MIB,
            peak_bytes: 130.0 * MIB,
            growth_pct_per_hour: growth,
        }
    }

    fn recovered(after_s: Option<f64>) -> Recovery {
        Recovery {
            fault: broker_restart(),
            before_p99_ms: Some(100.0),
            recovered_after_s: after_s,
            worst_p99_ms: Some(900.0),
        }
    }

    fn passing() -> Verdict {
        Verdict {
            memory: vec![worker("text-0", Some(0.4)), worker("image-0", None)],
            recoveries: vec![recovered(Some(20.0)), Recovery { before_p99_ms: None, ..recovered(None) }],
            missing: 0,
            duplicates: 0,
            dlq: 0,
            other: Vec::new(),
        }
    }

    #[test]
    fn a_run_within_every_budget_passes() {
        let budgets = Budgets::default();
        let verdict = passing();
        assert_eq!(verdict.failures(&budgets), Vec::<String>::new());
        assert!(verdict.passed(&budgets));
        assert!(verdict.memory_judged());
        assert_eq!(
            verdict.result_line(&budgets),
            "RESULT soak verdict=pass missing=0 duplicates=0 dlq=0 max_rss_growth_pct_per_hour=0.40 \
             faults_recovered=2/2"
        );
    }

    #[test]
    fn failures_name_each_broken_budget() {
        let budgets = Budgets::default();
        let verdict = Verdict {
            memory: vec![worker("text-0", Some(3.5)), worker("text-1", Some(1.0)), worker("image-0", None)],
            recoveries: vec![recovered(Some(20.0)), recovered(None)],
            missing: 3,
            duplicates: 1,
            dlq: 2,
            other: vec!["text-1 restarted".to_owned()],
        };
        let failures = verdict.failures(&budgets);
        assert_eq!(failures.len(), 5, "{failures:#?}");
        assert_eq!(failures[0], "text-1 restarted");
        assert!(failures[1].starts_with("rss growth: text-0 grows 3.50 %/h"), "{}", failures[1]);
        assert!(failures[2].starts_with("p99 recovery: broker-restart at 120 s for 20 s"), "{}", failures[2]);
        assert!(failures[2].contains("not back within 1.2×"), "{}", failures[2]);
        assert!(failures[3].starts_with("missing: 3 "), "{}", failures[3]);
        assert!(failures[4].starts_with("duplicates: 1 "), "{}", failures[4]);
        assert!(!verdict.passed(&budgets));
        assert_eq!(
            verdict.result_line(&budgets),
            "RESULT soak verdict=fail missing=3 duplicates=1 dlq=2 max_rss_growth_pct_per_hour=3.50 \
             faults_recovered=1/2"
        );
        let lenient = Budgets { allowed_duplicates: 1, ..budgets };
        assert_eq!(verdict.failures(&lenient).len(), 4);
    }

    #[test]
    fn workers_too_short_to_judge_are_not_failed_and_show_as_a_dash() {
        let verdict = Verdict { memory: vec![worker("text-0", None)], recoveries: Vec::new(), ..passing() };
        assert!(verdict.passed(&Budgets::default()));
        assert!(!verdict.memory_judged());
        assert_eq!(
            verdict.result_line(&Budgets::default()),
            "RESULT soak verdict=pass missing=0 duplicates=0 dlq=0 max_rss_growth_pct_per_hour=- faults_recovered=0/0"
        );
    }

    #[test]
    fn worker_memory_takes_first_last_and_peak_by_time() {
        let series = [(20.0, 300.0), (0.0, 100.0), (10.0, 400.0)];
        let memory = WorkerMemory::of("text-0", &series, 0.0);
        assert_eq!((memory.first_bytes, memory.last_bytes, memory.peak_bytes), (100.0, 300.0, 400.0));
        assert_eq!(memory.growth_pct_per_hour, None, "20 s is too short");
        let empty = WorkerMemory::of("text-1", &[], 0.0);
        assert_eq!((empty.first_bytes, empty.last_bytes, empty.peak_bytes), (0.0, 0.0, 0.0));
        assert_eq!(empty.growth_pct_per_hour, None);
        let growing = WorkerMemory::of("text-2", &samples(|t| MIB * (100.0 + t / 3600.0)), 600.0);
        assert!(growing.growth_pct_per_hour.unwrap() > 0.5);
    }
}
