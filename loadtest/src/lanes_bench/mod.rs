//! Priority lanes and cancellation, measured (issue 32's benchmark): one
//! worker, the same machine, all in one run, each step on a fleet of its
//! own (broker, Redis, worker started here) so that no step's backlog leaks
//! into the next:
//!
//! 0. capacity: mixed-length texts sent at once, texts answered per second;
//! 1. interactive alone: open-loop at a share of that capacity (runner);
//! 2. the same, behind a backfill sent just before **on the same topic**
//!    (what a plain Kafka consumer does): the interactive requests wait for
//!    the backfill, so this step waits until they are all answered;
//! 3. the same with the backfill on the bulk lane: interactive latency, and
//!    the bulk rows answered during the interactive window (the worker's
//!    `fleet_requests_total{lane="bulk",status="ok"}`);
//! 4. as 3, the backfill's job cancelled mid-window: how long bulk answers
//!    go on after the cancel, the rows computed after it
//!    (`fleet_model_rows_total` less the interactive rows), and every
//!    remaining backfill request answered `cancelled`.
//!
//! Every request has a far deadline: nothing expires, the latency shows.
//! Steps 3 and 4 do not wait for the backfill to end; every interactive
//! request of every step must be answered (the runner's ledger).
//!
//! Here the bench and its steps in order; [`step_fleet`] is the fleet each
//! step starts, [`bulk_lane`] steps 3 and 4, [`measures`] what is read off
//! a step (latency, the worker's counters, the split, the cancel's stop)
//! and the `RESULT` lines.

mod bulk_lane;
mod measures;
mod step_fleet;

pub use measures::{
    cancel_line, cancel_problems, lanes_line, latency, one_topic_drain, rows_after_cancel, seconds_to_stop, shares,
    Counters, Latency, Shares, Stop, DEFAULT_TTL_MS,
};
pub use step_fleet::Fleet;

use crate::fleet::Binaries;
use crate::ledger::Ledger;
use crate::runner;
use crate::timeline::throughput;
use anyhow::{Context, Result};
use fleet_proto::{JobId, Lane};
use std::time::Duration;

/// Texts a fresh worker answers before anything is measured (first shapes).
const WARM_UP_TEXTS: usize = 64;
/// After the interactive window, the longest wait for every backfill request
/// to be answered once its job is cancelled.
const SETTLE: Duration = Duration::from_secs(300);

pub struct LanesBench {
    pub binaries: Binaries,
    pub corpus: Vec<String>,
    /// The interactive window of each step.
    pub duration: Duration,
    /// Texts of the backfill, sent at once just before the window.
    pub backfill: usize,
    /// The interactive rate as a share of the measured capacity.
    pub interactive_fraction: f64,
    /// When, into the window of step 4, the backfill's job is cancelled.
    pub cancel_at: Duration,
    /// Texts of the capacity burst.
    pub capacity_texts: usize,
    pub partitions: i32,
    pub seed: u64,
    /// Extra fleet-worker arguments (e.g. `--bulk-share 0.2`).
    pub worker_args: Vec<String>,
}

/// What the run measured; `problems` lists what must fail the run.
#[derive(Debug, Clone)]
pub struct LanesReport {
    pub capacity_per_s: f64,
    pub interactive_rate: f64,
    pub alone: Latency,
    pub one_topic: Latency,
    pub lanes: Latency,
    pub shares: Shares,
    pub cancel: Stop,
    pub problems: Vec<String>,
}

/// Runs the four steps (after the capacity) and prints each as it ends.
pub async fn run(bench: &LanesBench) -> Result<LanesReport> {
    let mut problems = Vec::new();
    let capacity_per_s = capacity(bench).await?;
    let rate = bench.interactive_fraction * capacity_per_s;
    println!("capacity: {capacity_per_s:.1} texts/s ({} mixed-length texts sent at once)", bench.capacity_texts);
    println!(
        "interactive load: {rate:.1} req/s open-loop ({:.0} % of capacity) for {} s, mixed lengths",
        bench.interactive_fraction * 100.0,
        bench.duration.as_secs_f64()
    );
    let alone = alone(bench, rate, &mut problems).await?;
    let backfill = backfill_texts(bench);
    let one_topic = one_topic(bench, &backfill, rate, capacity_per_s, &mut problems).await?;
    let (lanes, shares) = bulk_lane::lanes(bench, &backfill, rate, capacity_per_s, &mut problems).await?;
    let cancel = bulk_lane::cancelled(bench, &backfill, rate, capacity_per_s, &mut problems).await?;
    Ok(LanesReport { capacity_per_s, interactive_rate: rate, alone, one_topic, lanes, shares, cancel, problems })
}

/// Step 0: texts answered per second, a burst sent at once.
async fn capacity(bench: &LanesBench) -> Result<f64> {
    let fleet = start(bench, "capacity").await?;
    let run_id = format!("lanes-cap-{}", std::process::id());
    let burst = fleet.burst(&bench.corpus, bench.capacity_texts, bench.seed + 2, run_id).await?;
    throughput(&burst.records).context("the capacity burst measured no rate")
}

/// Step 1: the interactive load alone.
async fn alone(bench: &LanesBench, rate: f64, problems: &mut Vec<String>) -> Result<Latency> {
    let fleet = start(bench, "alone").await?;
    let run_id = format!("lanes-alone-{}", std::process::id());
    let alone = fleet.interactive(bench, rate, run_id, Duration::from_secs(60)).await?;
    Ok(step("1 interactive alone", &alone.ledger, latency(&alone.records), problems))
}

/// The backfill's texts: the same mixed lengths, their own seed, tagged so
/// that none is an interactive text (the feature cache would answer it).
fn backfill_texts(bench: &LanesBench) -> Vec<String> {
    runner::texts(&bench.corpus, bench.backfill, bench.seed + 1)
        .into_iter()
        .map(|text| format!("{text} bulk"))
        .collect()
}

/// Step 2: the backfill sent just before, on the interactive topic.
async fn one_topic(
    bench: &LanesBench,
    backfill: &[String],
    rate: f64,
    capacity_per_s: f64,
    problems: &mut Vec<String>,
) -> Result<Latency> {
    let pid = std::process::id();
    let fleet = start(bench, "one-topic").await?;
    let job = JobId::parse(&format!("lanes-one-topic-{pid}"))?;
    let seconds = fleet.backfill(backfill, Lane::Interactive, &job).await?;
    let drain = one_topic_drain(bench.backfill, capacity_per_s);
    println!(
        "2 one topic: backfill of {} sent in {seconds:.1} s to the interactive topic; the interactive requests \
         wait behind it (collecting for up to {:.0} s after the window)",
        bench.backfill,
        drain.as_secs_f64()
    );
    let outcome = fleet.interactive(bench, rate, format!("lanes-one-{pid}"), drain).await?;
    let one_topic = step("2 one topic", &outcome.ledger, latency(&outcome.records), problems);
    println!(
        "  with the interactive lane's default {:.0} s deadline, {} of these {} answers would have been `expired`",
        DEFAULT_TTL_MS / 1000.0,
        one_topic.over_default_ttl,
        one_topic.ok
    );
    Ok(one_topic)
}

/// A fresh fleet for `name`, warmed up with a few texts.
async fn start(bench: &LanesBench, name: &str) -> Result<Fleet> {
    let fleet = Fleet::start(&bench.binaries, bench.partitions, &bench.worker_args).await?;
    let run_id = format!("lanes-warm-{name}-{}", std::process::id());
    fleet.burst(&bench.corpus, WARM_UP_TEXTS, bench.seed + 3, run_id).await?;
    Ok(fleet)
}

/// Prints a step's interactive books and latency; a request not answered
/// `ok` is a problem (nothing should expire, fail or go missing).
fn step(name: &str, ledger: &Ledger, latency: Latency, problems: &mut Vec<String>) -> Latency {
    println!(
        "{name}: interactive sent {}, ok {}, expired {}, error {}, missing {}: p50 {:.0} ms, p99 {:.0} ms",
        ledger.sent, ledger.ok, ledger.expired, ledger.error, ledger.missing, latency.p50_ms, latency.p99_ms
    );
    if ledger.send_failed > 0 || ledger.ok != ledger.sent {
        problems.push(format!("{name}: {}", ledger.result_line()));
    }
    latency
}
