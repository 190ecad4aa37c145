//! A soak's verdict against its budgets: memory that keeps growing after the
//! warm-up, p99 latency that does not come back after a fault, and answers
//! missing or delivered twice.
//!
//! Pure: the run hands in what it sampled and counted, this says which
//! budgets broke and writes the `RESULT` line CI reads.
//!
//! The budgets and the verdict are here; how memory grows is in
//! [`super::memory`] and how latency comes back in [`super::recovery`]
//! (both re-exported here, where the report reads them).

pub use super::memory::{rss_growth_pct_per_hour, WorkerMemory};
pub use super::recovery::{
    fault_free_checks, recovery, Answers, Recovery, AFTER_WINDOW_S, AFTER_WINDOW_STEP_S, BEFORE_WINDOW_S,
};

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
    use crate::soak::schedule::{Fault, Planned};

    const MIB: f64 = 1024.0 * 1024.0;

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
            fault: Planned { fault: Fault::BrokerRestart, at_s: 120.0, lasts_s: 20.0 },
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
}
