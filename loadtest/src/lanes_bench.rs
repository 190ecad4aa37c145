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

use crate::fleet::{Binaries, LocalWorker};
use crate::ledger::{Ledger, Outcome};
use crate::profile::Profile;
use crate::runner::{self, RunConfig, RunOutcome};
use crate::timeline::{latency_histogram, quantile_ms, record_ms, Record};
use anyhow::{bail, Context, Result};
use fleet_producer::{FleetProducer, Request, ResultClient};
use fleet_proto::clock::now_ms;
use fleet_proto::{JobId, Lane, ModelName, RequestId, Status};
use fleet_testkit::{http_get, metric_value, Broker, Redis};
use std::time::Duration;
use tokio::time::Instant;

const MODEL: &str = "minilm";
/// Every request's deadline after its send: nothing the bench sends expires.
const FAR: Duration = Duration::from_secs(24 * 3600);
/// How long a cancel is kept (the bench's fleet lives far less).
const CANCEL_KEEP: Duration = Duration::from_secs(3600);
/// Texts a fresh worker answers before anything is measured (first shapes).
const WARM_UP_TEXTS: usize = 64;
/// How often the worker's counters are read after a cancel: the resolution
/// of `seconds_to_stop`.
const WATCH_EVERY: Duration = Duration::from_millis(50);
/// After the interactive window, the longest wait for every backfill request
/// to be answered once its job is cancelled.
const SETTLE: Duration = Duration::from_secs(300);
/// The interactive lane's default deadline (a model's `request_ttl_ms`):
/// what the one-topic latencies are held against.
pub const DEFAULT_TTL_MS: f64 = 30_000.0;
const REQUESTS_TOTAL: &str = "fleet_requests_total";
const MODEL_ROWS_TOTAL: &str = "fleet_model_rows_total";

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

/// End-to-end latency (the answers' `timings_ms.total`) of the `ok` answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    pub ok: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// `ok` answers slower than the interactive lane's default deadline:
    /// with it they would have come back `expired`.
    pub over_default_ttl: usize,
}

pub fn latency(records: &[Record]) -> Latency {
    let mut e2e = latency_histogram();
    let (mut ok, mut over_default_ttl) = (0, 0);
    for ms in records.iter().filter(|r| r.outcome == Outcome::Ok).filter_map(|r| r.e2e_ms) {
        record_ms(&mut e2e, ms);
        ok += 1;
        over_default_ttl += usize::from(ms > DEFAULT_TTL_MS);
    }
    Latency {
        ok,
        p50_ms: quantile_ms(&e2e, 0.50).unwrap_or(f64::NAN),
        p99_ms: quantile_ms(&e2e, 0.99).unwrap_or(f64::NAN),
        over_default_ttl,
    }
}

/// Texts answered `ok` per second, from the first send to the last answer
/// seen; `None` without an answer.
pub fn throughput(records: &[Record]) -> Option<f64> {
    let first_sent = records.iter().map(|r| r.sent_s).fold(f64::INFINITY, f64::min);
    let ok: Vec<f64> = records.iter().filter(|r| r.outcome == Outcome::Ok).filter_map(|r| r.answered_s).collect();
    let last_answer = ok.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if ok.is_empty() || last_answer <= first_sent {
        return None;
    }
    Some(ok.len() as f64 / (last_answer - first_sent))
}

/// The worker's answer and row counters in one scrape.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    pub interactive_ok: f64,
    pub bulk_ok: f64,
    pub bulk_cancelled: f64,
    /// Bulk answers of any status.
    pub bulk_answered: f64,
    /// Rows handed to the model.
    pub rows: f64,
}

impl Counters {
    pub fn from_scrape(scrape: &str) -> Self {
        let answers = |lane: Lane, status: Option<Status>| match status {
            Some(status) => {
                metric_value(scrape, REQUESTS_TOTAL, &[("lane", lane.as_str()), ("status", status.as_str())])
            }
            None => metric_value(scrape, REQUESTS_TOTAL, &[("lane", lane.as_str())]),
        };
        Self {
            interactive_ok: answers(Lane::Interactive, Some(Status::Ok)),
            bulk_ok: answers(Lane::Bulk, Some(Status::Ok)),
            bulk_cancelled: answers(Lane::Bulk, Some(Status::Cancelled)),
            bulk_answered: answers(Lane::Bulk, None),
            rows: metric_value(scrape, MODEL_ROWS_TOTAL, &[]),
        }
    }

    /// What the counters grew by since `earlier`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            interactive_ok: self.interactive_ok - earlier.interactive_ok,
            bulk_ok: self.bulk_ok - earlier.bulk_ok,
            bulk_cancelled: self.bulk_cancelled - earlier.bulk_cancelled,
            bulk_answered: self.bulk_answered - earlier.bulk_answered,
            rows: self.rows - earlier.rows,
        }
    }
}

/// How the worker's capacity was split during an interactive window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shares {
    pub interactive_per_s: f64,
    pub bulk_rows_per_s: f64,
    /// Bulk rows answered ÷ all rows answered.
    pub bulk_share: f64,
    /// Bulk rows per second ÷ the capacity the interactive load left.
    pub leftover_fraction: f64,
}

/// `window`: the counters' growth over `seconds`; `capacity`: texts/s.
pub fn shares(window: &Counters, seconds: f64, capacity: f64) -> Shares {
    let seconds = seconds.max(1e-9);
    let (interactive_per_s, bulk_rows_per_s) = (window.interactive_ok / seconds, window.bulk_ok / seconds);
    let all = window.interactive_ok + window.bulk_ok;
    let left = capacity - interactive_per_s;
    Shares {
        interactive_per_s,
        bulk_rows_per_s,
        bulk_share: if all > 0.0 { window.bulk_ok / all } else { 0.0 },
        leftover_fraction: if left > 0.0 { bulk_rows_per_s / left } else { f64::NAN },
    }
}

/// What a cancel stopped, and how fast.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stop {
    /// From the cancel to the last bulk `ok` answer seen after it (0: none).
    pub seconds_to_stop: f64,
    /// Rows the model computed after the cancel, less the interactive rows
    /// answered after it: the cancelled job's rows.
    pub rows_computed_after_cancel: f64,
    pub bulk_ok_after_cancel: f64,
    /// Backfill requests answered `ok` (before the cancel, or computing when it came).
    pub ok: f64,
    /// Backfill requests answered `cancelled`.
    pub cancelled: f64,
    /// Backfill requests answered at all (of any status), from its send on.
    pub answered: f64,
    /// Every backfill request was answered before the wait ended.
    pub complete: bool,
}

/// Seconds from the cancel to the last bulk `ok` seen after it, or 0.
pub fn seconds_to_stop(cancel_s: f64, last_bulk_ok_s: Option<f64>) -> f64 {
    last_bulk_ok_s.map_or(0.0, |t| (t - cancel_s).max(0.0))
}

/// What is wrong with a cancelled backfill of `backfill` requests: not
/// all answered, answered other than `ok` or `cancelled`, none cancelled.
pub fn cancel_problems(stop: &Stop, backfill: usize) -> Vec<String> {
    let mut problems = Vec::new();
    if !stop.complete || stop.answered < backfill as f64 {
        problems.push(format!(
            "cancel: {:.0} of {backfill} backfill requests answered {} s after the window",
            stop.answered,
            SETTLE.as_secs()
        ));
    }
    let other = stop.answered - stop.ok - stop.cancelled;
    if other > 0.0 {
        problems.push(format!("cancel: {other:.0} backfill requests answered neither ok nor cancelled"));
    }
    if stop.cancelled <= 0.0 {
        problems.push("cancel: no backfill request was answered cancelled".to_owned());
    }
    problems
}

/// The rows computed after the cancel that were not interactive.
pub fn rows_after_cancel(after_cancel: &Counters) -> f64 {
    (after_cancel.rows - after_cancel.interactive_ok).max(0.0)
}

/// How long step 2 keeps collecting after its window: the backfill ahead of
/// the interactive requests at the measured capacity, twice over, plus two
/// minutes.
pub fn one_topic_drain(backfill: usize, capacity_per_s: f64) -> Duration {
    Duration::from_secs_f64(backfill as f64 / capacity_per_s.max(1.0) * 2.0 + 120.0)
}

/// The first `model name` of /proc/cpuinfo.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_owned())
    })
}

pub fn lanes_line(report: &LanesReport) -> String {
    format!(
        "RESULT lanes p99_alone_ms={:.0} p99_one_topic_ms={:.0} p99_lanes_ms={:.0} bulk_share={:.2} bulk_rows_per_s={:.1} leftover_fraction={:.2}",
        report.alone.p99_ms,
        report.one_topic.p99_ms,
        report.lanes.p99_ms,
        report.shares.bulk_share,
        report.shares.bulk_rows_per_s,
        report.shares.leftover_fraction
    )
}

pub fn cancel_line(stop: &Stop) -> String {
    format!(
        "RESULT cancel seconds_to_stop={:.2} rows_computed_after_cancel={:.0}",
        stop.seconds_to_stop, stop.rows_computed_after_cancel
    )
}

/// A broker, Redis and one minilm worker started here, owning every
/// partition of both lanes. Fields drop in order: the worker first.
pub struct Fleet {
    pub worker: LocalWorker,
    pub redis: Redis,
    pub broker: Broker,
    pub model: ModelName,
}

impl Fleet {
    pub async fn start(binaries: &Binaries, partitions: i32, worker_args: &[String]) -> Result<Self> {
        let model = ModelName::parse(MODEL)?;
        let (broker, redis) = (Broker::start(), Redis::start());
        broker.create_topics(&model, partitions).await;
        let (binaries, brokers, redis_url, args) =
            (binaries.clone(), broker.addr.clone(), redis.url(), worker_args.to_vec());
        let worker = tokio::task::spawn_blocking(move || {
            let extra: Vec<&str> = args.iter().map(String::as_str).collect();
            LocalWorker::start(&binaries, MODEL, &brokers, &redis_url, &extra)
        })
        .await??;
        let fleet = Self { worker, redis, broker, model };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let scrape = fleet.scrape().await?.unwrap_or_default();
            let owned = |lane: Lane| metric_value(&scrape, "fleet_assigned_partitions", &[("lane", lane.as_str())]);
            if Lane::ALL.iter().all(|&lane| owned(lane) >= f64::from(partitions)) {
                return Ok(fleet);
            }
            if Instant::now() > deadline {
                bail!("the worker did not get all {partitions} partitions of both lanes in 60 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The worker's /metrics, `None` while it does not answer.
    pub(crate) async fn scrape(&self) -> Result<Option<String>> {
        let addr = self.worker.metrics;
        let got = tokio::task::spawn_blocking(move || http_get(addr, "/metrics")).await?;
        Ok(got.and_then(|(status, body)| (status == 200).then_some(body)))
    }

    pub async fn counters(&self) -> Result<Counters> {
        let scrape = self.scrape().await?.context("the worker's /metrics did not answer")?;
        Ok(Counters::from_scrape(&scrape))
    }

    pub(crate) fn run_config(
        &self,
        corpus: &[String],
        profile: Profile,
        duration: Duration,
        run_id: String,
    ) -> Result<RunConfig> {
        RunConfig::on_local_fleet(&self.broker, &self.redis.url(), &self.model, profile, duration, corpus, run_id)
    }

    /// `count` mixed-length texts sent at once on the interactive lane, every
    /// answer waited for.
    pub(crate) async fn burst(&self, corpus: &[String], count: usize, seed: u64, run_id: String) -> Result<RunOutcome> {
        // Arrivals at a hundred times the count per second, capped at the
        // count: all of them within the first few milliseconds.
        let profile = Profile::Steady { rate: count as f64 * 100.0 };
        let config = self.run_config(corpus, profile, Duration::from_secs(1), run_id)?;
        let outcome = runner::run(RunConfig {
            seed,
            max_requests: count,
            ttl: Some(FAR),
            drain: Duration::from_secs(600),
            ..config
        })
        .await?;
        if outcome.ledger.ok < count as u64 {
            bail!("a burst of {count} texts: {}", outcome.ledger.result_line());
        }
        Ok(outcome)
    }

    /// The step's interactive load: open-loop at `rate` for the window.
    async fn interactive(&self, bench: &LanesBench, rate: f64, run_id: String, drain: Duration) -> Result<RunOutcome> {
        let config = self.run_config(&bench.corpus, Profile::Steady { rate }, bench.duration, run_id)?;
        runner::run(RunConfig { seed: bench.seed, ttl: Some(FAR), drain, ..config }).await
    }

    /// Sends `texts` at once on `lane`, all in `job`, many in flight; the
    /// seconds until the broker had them all.
    async fn backfill(&self, texts: &[String], lane: Lane, job: &JobId) -> Result<f64> {
        let producer = FleetProducer::new(&self.broker.kafka(), "lanes-bench")?;
        let deadline_ms = now_ms() + FAR.as_millis() as u64;
        let started = Instant::now();
        let mut deliveries = Vec::with_capacity(texts.len());
        for (i, text) in texts.iter().enumerate() {
            let id = RequestId::parse(&format!("{job}-{i}"))?;
            let request =
                Request::text(id, text.clone()).in_lane(lane).with_job(job.clone()).with_deadline_ms(deadline_ms);
            deliveries.push(producer.send(&self.model, &request).await?);
        }
        for delivered in futures::future::join_all(deliveries).await {
            delivered.context("a backfill message was not delivered")?;
        }
        Ok(started.elapsed().as_secs_f64())
    }
}

/// Runs the four steps (after the capacity) and prints each as it ends.
pub async fn run(bench: &LanesBench) -> Result<LanesReport> {
    let pid = std::process::id();
    let mut problems = Vec::new();

    let capacity_per_s = {
        let fleet = start(bench, "capacity").await?;
        let burst =
            fleet.burst(&bench.corpus, bench.capacity_texts, bench.seed + 2, format!("lanes-cap-{pid}")).await?;
        throughput(&burst.records).context("the capacity burst measured no rate")?
    };
    let rate = bench.interactive_fraction * capacity_per_s;
    println!("capacity: {capacity_per_s:.1} texts/s ({} mixed-length texts sent at once)", bench.capacity_texts);
    println!(
        "interactive load: {rate:.1} req/s open-loop ({:.0} % of capacity) for {} s, mixed lengths",
        bench.interactive_fraction * 100.0,
        bench.duration.as_secs_f64()
    );

    let alone = {
        let fleet = start(bench, "alone").await?;
        fleet.interactive(bench, rate, format!("lanes-alone-{pid}"), Duration::from_secs(60)).await?
    };
    let alone = step("1 interactive alone", &alone.ledger, latency(&alone.records), &mut problems);

    // The backfill's texts: the same mixed lengths, their own seed, tagged
    // so that none is an interactive text (the feature cache would answer it).
    let backfill: Vec<String> = runner::texts(&bench.corpus, bench.backfill, bench.seed + 1)
        .into_iter()
        .map(|text| format!("{text} bulk"))
        .collect();

    let one_topic = {
        let fleet = start(bench, "one-topic").await?;
        let job = JobId::parse(&format!("lanes-one-topic-{pid}"))?;
        let seconds = fleet.backfill(&backfill, Lane::Interactive, &job).await?;
        let drain = one_topic_drain(bench.backfill, capacity_per_s);
        println!(
            "2 one topic: backfill of {} sent in {seconds:.1} s to the interactive topic; the interactive requests \
             wait behind it (collecting for up to {:.0} s after the window)",
            bench.backfill,
            drain.as_secs_f64()
        );
        fleet.interactive(bench, rate, format!("lanes-one-{pid}"), drain).await?
    };
    let one_topic = step("2 one topic", &one_topic.ledger, latency(&one_topic.records), &mut problems);
    println!(
        "  with the interactive lane's default {:.0} s deadline, {} of these {} answers would have been `expired`",
        DEFAULT_TTL_MS / 1000.0,
        one_topic.over_default_ttl,
        one_topic.ok
    );

    let lanes = with_lanes(bench, &backfill, rate, capacity_per_s, None).await?;
    let shares = lanes.shares;
    let lanes_latency = step("3 lanes", &lanes.outcome.ledger, latency(&lanes.outcome.records), &mut problems);
    println!(
        "  during the window: interactive {:.1}/s, bulk {:.1} rows/s, bulk share {:.2}, {:.2} of the capacity left",
        shares.interactive_per_s, shares.bulk_rows_per_s, shares.bulk_share, shares.leftover_fraction
    );

    let cancelled = with_lanes(bench, &backfill, rate, capacity_per_s, Some(bench.cancel_at)).await?;
    step("4 lanes, cancel", &cancelled.outcome.ledger, latency(&cancelled.outcome.records), &mut problems);
    let stop = cancelled.stop.unwrap_or_default();
    println!(
        "  cancel at {} s: bulk ok answers after it {:.0}, last {:.2} s after it; rows computed after it {:.0} \
         (interactive rows left out); backfill answered {:.0} of {}: ok {:.0}, cancelled {:.0}",
        bench.cancel_at.as_secs_f64(),
        stop.bulk_ok_after_cancel,
        stop.seconds_to_stop,
        stop.rows_computed_after_cancel,
        stop.answered,
        bench.backfill,
        stop.ok,
        stop.cancelled
    );
    problems.extend(cancel_problems(&stop, bench.backfill));

    Ok(LanesReport {
        capacity_per_s,
        interactive_rate: rate,
        alone,
        one_topic,
        lanes: lanes_latency,
        shares,
        cancel: stop,
        problems,
    })
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

struct LanesRun {
    outcome: RunOutcome,
    shares: Shares,
    stop: Option<Stop>,
}

/// Steps 3 and 4: the backfill on the bulk lane, then the interactive
/// window; with `cancel_at`, the backfill's job is cancelled that far into
/// the window and watched until every backfill request is answered.
async fn with_lanes(
    bench: &LanesBench,
    texts: &[String],
    rate: f64,
    capacity_per_s: f64,
    cancel_at: Option<Duration>,
) -> Result<LanesRun> {
    let (label, name) = if cancel_at.is_some() { ("4 lanes, cancel", "cancel") } else { ("3 lanes", "lanes") };
    let pid = std::process::id();
    let fleet = start(bench, name).await?;
    let job = JobId::parse(&format!("lanes-{name}-backfill-{pid}"))?;
    let before = fleet.counters().await?;
    let seconds = fleet.backfill(texts, Lane::Bulk, &job).await?;
    println!("{label}: backfill of {} sent in {seconds:.1} s to the bulk lane", texts.len());

    let start = Instant::now();
    let at_start = fleet.counters().await?;
    let interactive = fleet.interactive(bench, rate, format!("lanes-{name}-{pid}"), Duration::from_secs(60));
    let window = async {
        tokio::time::sleep_until(start + bench.duration).await;
        fleet.counters().await
    };
    let watch = async {
        match cancel_at {
            None => Ok(None),
            Some(at) => {
                let settle_until = start + bench.duration + SETTLE;
                watch_cancel(&fleet, &job, start + at, settle_until, &before, texts.len()).await.map(Some)
            }
        }
    };
    let (outcome, at_end, watched) = tokio::join!(interactive, window, watch);
    let (outcome, at_end, watched) = (outcome?, at_end?, watched?);
    let shares = shares(&at_end.since(&at_start), bench.duration.as_secs_f64(), capacity_per_s);
    // Every interactive request is answered and the backfill settled: what
    // grew since the cancel is final.
    let stop = match watched {
        Some(watched) => {
            let after = fleet.counters().await?;
            let after_cancel = after.since(&watched.at_cancel);
            let backfill = after.since(&before);
            Some(Stop {
                seconds_to_stop: watched.seconds_to_stop,
                rows_computed_after_cancel: rows_after_cancel(&after_cancel),
                bulk_ok_after_cancel: after_cancel.bulk_ok,
                ok: backfill.bulk_ok,
                cancelled: backfill.bulk_cancelled,
                answered: backfill.bulk_answered,
                complete: watched.complete,
            })
        }
        None => None,
    };
    Ok(LanesRun { outcome, shares, stop })
}

struct Watched {
    at_cancel: Counters,
    seconds_to_stop: f64,
    complete: bool,
}

/// At `at`, cancels `job`; then reads the worker's counters every
/// [`WATCH_EVERY`] until all `backfill` requests are answered (counted from
/// `before`) or `until`, noting when bulk `ok` answers last grew.
async fn watch_cancel(
    fleet: &Fleet,
    job: &JobId,
    at: Instant,
    until: Instant,
    before: &Counters,
    backfill: usize,
) -> Result<Watched> {
    let client = ResultClient::connect(&fleet.redis.url()).await?;
    tokio::time::sleep_until(at).await;
    let at_cancel = fleet.counters().await?;
    let cancelled = Instant::now();
    client.cancel(job, CANCEL_KEEP).await?;
    tracing::info!(%job, "backfill cancelled");
    let (mut bulk_ok, mut last_bulk_ok) = (at_cancel.bulk_ok, None);
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        if let Ok(now) = fleet.counters().await {
            if now.bulk_ok > bulk_ok {
                bulk_ok = now.bulk_ok;
                last_bulk_ok = Some(cancelled.elapsed().as_secs_f64());
            }
            if now.since(before).bulk_answered >= backfill as f64 {
                return Ok(Watched { at_cancel, seconds_to_stop: seconds_to_stop(0.0, last_bulk_ok), complete: true });
            }
        }
        if Instant::now() > until {
            return Ok(Watched { at_cancel, seconds_to_stop: seconds_to_stop(0.0, last_bulk_ok), complete: false });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(sent_s: f64, outcome: Outcome, answered_s: Option<f64>, e2e_ms: Option<f64>) -> Record {
        Record { id: "r".into(), sent_s, outcome, answered_s, e2e_ms, queue_ms: None, infer_ms: None, partition: None }
    }

    #[test]
    fn latency_is_of_ok_answers_and_counts_those_past_the_default_deadline() {
        let mut records: Vec<Record> =
            (1..=100).map(|ms| record(0.0, Outcome::Ok, Some(1.0), Some(f64::from(ms)))).collect();
        records.push(record(0.0, Outcome::Missing, None, None));
        records.push(record(0.0, Outcome::Expired, Some(1.0), Some(90_000.0)));
        records.push(record(0.0, Outcome::Ok, Some(40.0), Some(40_000.0)));
        let l = latency(&records);
        assert_eq!((l.ok, l.over_default_ttl), (101, 1));
        assert!((50.0..=51.1).contains(&l.p50_ms), "{}", l.p50_ms);
        assert!((99.0..=101.0).contains(&l.p99_ms), "{}", l.p99_ms);
        assert!(latency(&[]).p99_ms.is_nan());
    }

    #[test]
    fn throughput_is_ok_answers_from_the_first_send_to_the_last_answer() {
        let records = vec![
            record(0.5, Outcome::Ok, Some(2.0), Some(1.0)),
            record(0.6, Outcome::Ok, Some(10.5), Some(1.0)),
            record(0.7, Outcome::Error("x".into()), Some(20.0), None),
        ];
        assert_eq!(throughput(&records), Some(0.2));
        assert_eq!(throughput(&[record(0.5, Outcome::Missing, None, None)]), None);
    }

    const SCRAPE: &str = "\
# HELP fleet_requests_total Answers written
# TYPE fleet_requests_total counter
fleet_requests_total{status=\"ok\",lane=\"interactive\"} 600
fleet_requests_total{status=\"expired\",lane=\"interactive\"} 3
fleet_requests_total{status=\"ok\",lane=\"bulk\"} 1400
fleet_requests_total{status=\"cancelled\",lane=\"bulk\"} 250
fleet_requests_total{status=\"error\",lane=\"bulk\"} 1
fleet_requests_total_extra{status=\"ok\",lane=\"bulk\"} 99
fleet_model_rows_total 2010
";

    #[test]
    fn counters_are_read_by_lane_and_status_and_subtract() {
        let c = Counters::from_scrape(SCRAPE);
        let want = Counters {
            interactive_ok: 600.0,
            bulk_ok: 1400.0,
            bulk_cancelled: 250.0,
            bulk_answered: 1651.0,
            rows: 2010.0,
        };
        assert_eq!(c, want);
        let earlier =
            Counters { interactive_ok: 100.0, bulk_ok: 400.0, bulk_cancelled: 0.0, bulk_answered: 400.0, rows: 500.0 };
        assert_eq!(
            c.since(&earlier),
            Counters {
                interactive_ok: 500.0,
                bulk_ok: 1000.0,
                bulk_cancelled: 250.0,
                bulk_answered: 1251.0,
                rows: 1510.0
            }
        );
    }

    #[test]
    fn shares_split_the_window_and_the_capacity_left() {
        let window = Counters { interactive_ok: 600.0, bulk_ok: 1400.0, ..Counters::default() };
        let s = shares(&window, 20.0, 120.0);
        assert_eq!((s.interactive_per_s, s.bulk_rows_per_s), (30.0, 70.0));
        assert!((s.bulk_share - 0.7).abs() < 1e-12);
        assert!((s.leftover_fraction - 70.0 / 90.0).abs() < 1e-12);
        let idle = shares(&Counters::default(), 20.0, 120.0);
        assert_eq!((idle.bulk_share, idle.leftover_fraction), (0.0, 0.0));
        assert!(shares(&window, 20.0, 30.0).leftover_fraction.is_nan());
    }

    #[test]
    fn a_cancel_is_measured_by_the_last_bulk_answer_and_the_rows_after_it() {
        assert_eq!(seconds_to_stop(30.0, None), 0.0);
        assert!((seconds_to_stop(30.0, Some(30.45)) - 0.45).abs() < 1e-9);
        assert_eq!(seconds_to_stop(30.0, Some(29.0)), 0.0);
        let after = Counters { rows: 340.0, interactive_ok: 308.0, ..Counters::default() };
        assert_eq!(rows_after_cancel(&after), 32.0);
        assert_eq!(rows_after_cancel(&Counters { rows: 10.0, interactive_ok: 12.0, ..Counters::default() }), 0.0);
    }

    #[test]
    fn a_cancel_is_complete_when_every_backfill_request_is_ok_or_cancelled() {
        let stop = Stop { ok: 3_000.0, cancelled: 47_000.0, answered: 50_000.0, complete: true, ..Stop::default() };
        assert!(cancel_problems(&stop, 50_000).is_empty());
        let late = Stop { cancelled: 40_000.0, answered: 43_000.0, complete: false, ..stop };
        assert_eq!(cancel_problems(&late, 50_000).len(), 1);
        let expired = Stop { answered: 50_000.0, ok: 2_990.0, ..stop };
        assert_eq!(
            cancel_problems(&expired, 50_000),
            ["cancel: 10 backfill requests answered neither ok nor cancelled"]
        );
        let never = Stop { ok: 50_000.0, cancelled: 0.0, ..stop };
        assert_eq!(cancel_problems(&never, 50_000), ["cancel: no backfill request was answered cancelled"]);
    }

    #[test]
    fn the_one_topic_step_waits_for_the_backfill_twice_over() {
        assert_eq!(one_topic_drain(50_000, 100.0), Duration::from_secs(1120));
        assert_eq!(one_topic_drain(10, 0.0), Duration::from_secs(140));
    }

    #[test]
    fn the_cpu_model_is_the_first_model_name() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(cpu_model(cpuinfo).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(cpu_model("processor : 0\n"), None);
    }

    #[test]
    fn the_result_lines_carry_every_figure() {
        let latency = |p99_ms| Latency { ok: 10, p50_ms: 1.0, p99_ms, over_default_ttl: 0 };
        let report = LanesReport {
            capacity_per_s: 100.0,
            interactive_rate: 30.0,
            alone: latency(88.6),
            one_topic: latency(512_000.0),
            lanes: latency(104.2),
            shares: Shares {
                interactive_per_s: 30.0,
                bulk_rows_per_s: 61.24,
                bulk_share: 0.671,
                leftover_fraction: 0.876,
            },
            cancel: Stop::default(),
            problems: vec![],
        };
        assert_eq!(
            lanes_line(&report),
            "RESULT lanes p99_alone_ms=89 p99_one_topic_ms=512000 p99_lanes_ms=104 bulk_share=0.67 bulk_rows_per_s=61.2 leftover_fraction=0.88"
        );
        let stop = Stop { seconds_to_stop: 0.4, rows_computed_after_cancel: 32.0, ..Stop::default() };
        assert_eq!(cancel_line(&stop), "RESULT cancel seconds_to_stop=0.40 rows_computed_after_cancel=32");
    }
}
