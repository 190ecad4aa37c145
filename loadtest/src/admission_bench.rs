//! Fixed vs adaptive admission on the same burst: each mode gets a fresh
//! fleet here (nisshi, Redis, one worker) and the same seeded burst of
//! requests with a short deadline. With a fixed backlog limit the producer
//! lets in requests that will wait past their deadline and come back
//! `expired`; with the predicted wait (backlog ÷ drain rate against the
//! deadline) it refuses those at once. Counted from each run's ledger.

use crate::fleet::{Binaries, LocalWorker};
use crate::ledger::Ledger;
use crate::profile::Profile;
use crate::runner::{self, AdmissionRule, RunConfig};
use anyhow::Result;
use fleet_proto::ModelName;
use fleet_testkit::{Broker, Redis};
use std::time::Duration;

const MODEL: &str = "minilm";

pub struct AdmissionBench {
    pub binaries: Binaries,
    pub profile: Profile,
    pub duration: Duration,
    pub deadline: Duration,
    pub fixed_backlog: u64,
    pub seed: u64,
    pub corpus: Vec<String>,
    pub partitions: i32,
    pub worker_args: Vec<String>,
}

pub struct Compared {
    pub fixed: Ledger,
    pub adaptive: Ledger,
}

/// `RESULT admission wasted_… served_…`: wasted = answered `expired`
/// (admitted, queued, never served in time); served = answered `ok`.
pub fn result_line(c: &Compared) -> String {
    format!(
        "RESULT admission wasted_fixed={} wasted_adaptive={} served_fixed={} served_adaptive={}",
        c.fixed.expired, c.adaptive.expired, c.fixed.ok, c.adaptive.ok
    )
}

pub async fn run(bench: &AdmissionBench) -> Result<Compared> {
    let fixed = one(bench, AdmissionRule::FixedBacklog(bench.fixed_backlog), "fixed").await?;
    let adaptive = one(bench, AdmissionRule::PredictedWait, "adaptive").await?;
    Ok(Compared { fixed, adaptive })
}

async fn one(bench: &AdmissionBench, rule: AdmissionRule, name: &str) -> Result<Ledger> {
    let model = ModelName::parse(MODEL)?;
    let broker = Broker::start();
    let redis = Redis::start();
    broker.create_topics(&model, bench.partitions).await;
    let (binaries, brokers, redis_url) = (bench.binaries.clone(), broker.addr.clone(), redis.url());
    let args = bench.worker_args.clone();
    let worker = tokio::task::spawn_blocking(move || {
        let extra: Vec<&str> = args.iter().map(String::as_str).collect();
        LocalWorker::start(&binaries, MODEL, &brokers, &redis_url, &extra)
    })
    .await??;
    // The worker publishes its drain rate once it has answered for a few
    // seconds: the same short warm-up for both modes.
    let warm = RunConfig {
        kafka: broker.kafka(),
        redis: redis::Client::open(redis.url().as_str())?,
        model: model.clone(),
        profile: Profile::Steady { rate: 10.0 },
        duration: Duration::from_secs(5),
        seed: bench.seed + 1,
        max_requests: usize::MAX,
        corpus: bench.corpus.clone(),
        ttl: None,
        drain: Duration::from_secs(30),
        run_id: format!("adm-warm-{name}-{}", std::process::id()),
        progress: false,
        admission: None,
    };
    runner::run(warm).await?;
    let outcome = runner::run(RunConfig {
        kafka: broker.kafka(),
        redis: redis::Client::open(redis.url().as_str())?,
        model,
        profile: bench.profile,
        duration: bench.duration,
        seed: bench.seed,
        max_requests: usize::MAX,
        corpus: bench.corpus.clone(),
        ttl: Some(bench.deadline),
        drain: bench.deadline + Duration::from_secs(30),
        run_id: format!("adm-{name}-{}", std::process::id()),
        progress: false,
        admission: Some(rule),
    })
    .await?;
    drop(worker);
    Ok(outcome.ledger)
}
