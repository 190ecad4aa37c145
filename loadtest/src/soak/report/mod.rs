//! What a soak leaves in its folder: samples.csv (every worker every
//! interval), latency-<model>.csv (p50/p99 per interval), the plots (RSS
//! and each model's latency over time, the faults marked), and report.md:
//! the machine, the command, the schedule as injected, the ledger per
//! partition, memory per worker, latency after each fault, and the verdict,
//! whose last line is the RESULT line.
//!
//! Here the judging and the files; [`markdown`] writes report.md.

mod markdown;

use super::books::{self, PartitionBooks};
use super::plot;
use super::run::SoakOutcome;
use super::samples::{self, CSV_HEADER};
use super::schedule::Planned;
use super::verdict::{self, Answers, Budgets, Verdict, WorkerMemory};
use anyhow::{Context, Result};
use std::fmt::Write as _;
use std::path::Path;

/// What the report says of the run beside the outcome.
pub struct About {
    pub machine: String,
    pub command: String,
    pub warm_up_s: f64,
    pub interval_s: f64,
    /// The peak RSS any worker may reach (the chart's smallest memory limit).
    pub rss_limit_bytes: f64,
}

/// Everything the verdict judged, for the caller (a test asserts on it).
pub struct Judged {
    pub verdict: Verdict,
    pub budgets: Budgets,
    /// The books of every partition summed.
    pub books: PartitionBooks,
    /// Requests computed twice where a kill forced it (not judged).
    pub forced_duplicates: u64,
    /// The p99 rule at fault-free moments, texts then images: (judged,
    /// failed). Not judged: it says how far the rule's verdicts hold.
    pub fault_free: [(usize, usize); 2],
    pub result_line: String,
}

impl Judged {
    /// Every budget broken.
    pub fn failures(&self) -> Vec<String> {
        self.verdict.failures(&self.budgets)
    }
}

/// Judges the soak and writes its folder.
pub fn write(dir: &Path, about: &About, outcome: &SoakOutcome) -> Result<Judged> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // Each model's p50 and p99 per interval: the CSV and the plot.
    let latency = [(&outcome.text_model, &outcome.texts), (&outcome.image_model, &outcome.images)]
        .map(|(model, run)| (model, books::latency_by_interval(&run.records, about.interval_s)));
    let answers = [&outcome.texts, &outcome.images].map(|run| Answers::new(books::ok_answers(&run.records)));
    let judged = judge(about, outcome, &answers);

    let mut csv = String::from(CSV_HEADER);
    csv.push('\n');
    for sample in &outcome.samples {
        csv.push_str(&sample.csv_row());
        csv.push('\n');
    }
    std::fs::write(dir.join("samples.csv"), csv)?;

    let faults: Vec<Planned> = outcome.faults.iter().map(|f| f.as_happened()).collect();
    let rss: Vec<(String, Vec<(f64, f64)>)> = samples::by_worker(&outcome.samples)
        .into_iter()
        .map(|(name, series)| (name, series.iter().map(|s| (s.at_s, s.rss_bytes)).collect()))
        .collect();
    plot::rss(&dir.join("rss.png"), "worker memory (RSS)", &rss, &faults)
        .map_err(|e| anyhow::anyhow!("plotting RSS: {e}"))?;
    for (model, (p50, p99)) in &latency {
        let mut csv = String::from("interval_start_s,p50_ms,p99_ms\n");
        for (&(t, p50), &(_, p99)) in p50.iter().zip(p99.iter()) {
            let _ = writeln!(csv, "{t:.0},{p50:.1},{p99:.1}");
        }
        std::fs::write(dir.join(format!("latency-{model}.csv")), csv)?;
        let title = format!("{model}: end-to-end latency of ok answers per {:.0} s", about.interval_s);
        plot::latency(&dir.join(format!("latency-{model}.png")), &title, p50, p99, &faults)
            .map_err(|e| anyhow::anyhow!("plotting {model}'s latency: {e}"))?;
    }
    std::fs::write(dir.join("report.md"), markdown::markdown(about, outcome, &judged))?;
    Ok(judged)
}

/// `answers`: each model's ok answers (seconds answered, ms), texts first.
fn judge(about: &About, outcome: &SoakOutcome, answers: &[Answers; 2]) -> Judged {
    let budgets = Budgets::default();
    let partitions = partition_books(outcome);
    let total = books::total(&partitions);
    let memory: Vec<WorkerMemory> = samples::by_worker(&outcome.samples)
        .iter()
        .map(|(name, series)| {
            let rss: Vec<(f64, f64)> = series.iter().map(|s| (s.at_s, s.rss_bytes)).collect();
            WorkerMemory::of(name, &rss, about.warm_up_s)
        })
        .collect();
    let faults: Vec<Planned> = outcome.faults.iter().map(|f| f.as_happened()).collect();
    let mut recoveries = Vec::new();
    for model_answers in answers {
        for fault in &faults {
            recoveries.push(verdict::recovery(model_answers, fault, &budgets));
        }
    }
    let end_s = last_sample_s(outcome);
    let fault_free =
        answers.each_ref().map(|a| verdict::fault_free_checks(a, &faults, &budgets, about.warm_up_s, end_s));
    let dlq = outcome.texts.ledger.dlq + outcome.images.ledger.dlq;
    let duplicates = samples::duplicates(&outcome.samples, &outcome.initial_workers, &kill_windows(outcome));

    let mut other = Vec::new();
    for death in &outcome.deaths {
        other.push(format!("a worker was lost: {death}"));
    }
    for name in samples::restarted(&outcome.samples) {
        other.push(format!("{name} restarted"));
    }
    for fault in outcome.faults.iter().filter(|f| f.failed) {
        other.push(format!("{} at {:.0} s: {}", fault.planned.fault.name(), fault.at_s, fault.note));
    }
    if total.error > 0 {
        other.push(format!("{} error answers to valid requests (budget 0)", total.error));
    }
    if dlq > 0 {
        other.push(format!("{dlq} messages dead-lettered (budget 0)"));
    }
    for worker in &memory {
        if worker.peak_bytes > about.rss_limit_bytes {
            other.push(format!(
                "{} reached {:.0} MiB of RSS, over the limit of {:.0} MiB",
                worker.worker,
                mib(worker.peak_bytes),
                mib(about.rss_limit_bytes)
            ));
        }
    }
    let verdict = Verdict { memory, recoveries, missing: total.missing, duplicates: duplicates.unforced, dlq, other };
    let result_line = verdict.result_line(&budgets);
    Judged { verdict, budgets, books: total, forced_duplicates: duplicates.forced, fault_free, result_line }
}

/// How long after a broker comes back its consumers may still read again
/// what it lost: a rejoin, a session timeout and a fetch.
const KILL_AFTERMATH_S: f64 = 30.0;

/// Where a kill forces work to be done twice: each broker restart, from
/// its kill to a while after it is back.
fn kill_windows(outcome: &SoakOutcome) -> Vec<(f64, f64)> {
    outcome
        .faults
        .iter()
        .filter(|f| f.planned.fault == super::schedule::Fault::BrokerRestart)
        .map(|f| (f.at_s, f.ended_s + KILL_AFTERMATH_S))
        .collect()
}

fn partition_books(outcome: &SoakOutcome) -> std::collections::BTreeMap<(String, i32), PartitionBooks> {
    books::per_partition([
        (outcome.text_model.as_str(), outcome.texts.records.as_slice()),
        (outcome.image_model.as_str(), outcome.images.records.as_slice()),
    ])
}

/// When the last sample was taken: where the run's load ended.
fn last_sample_s(outcome: &SoakOutcome) -> f64 {
    outcome.samples.iter().map(|s| s.at_s).fold(0.0f64, f64::max)
}

fn mib(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}
