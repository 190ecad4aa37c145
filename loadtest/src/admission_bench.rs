//! Fixed vs adaptive admission on the same burst: each mode gets a fresh
//! fleet here (nisshi, Redis, one worker) and the same seeded burst of
//! requests with a short deadline. With a fixed backlog limit the producer
//! lets in requests that will wait past their deadline and come back
//! `expired`; with the predicted wait (backlog ÷ drain rate against the
//! deadline) it refuses those at once. Counted from each run's ledger.
//! Run-to-run noise on this box is several percent, more than the gap the
//! comparison is about, so the pair is repeated (`rounds`, each with its own
//! seed, the two rules alternating) and the books summed.

use crate::fleet::{Binaries, LocalWorker};
use crate::ledger::Ledger;
use crate::profile::Profile;
use crate::report;
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
    pub rounds: u64,
    pub corpus: Vec<String>,
    pub partitions: i32,
    pub worker_args: Vec<String>,
    /// Where each run's report folder goes (`round<N>-fixed`, …), if anywhere.
    pub out: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone, Default)]
pub struct Compared {
    pub fixed: Ledger,
    pub adaptive: Ledger,
}

impl Compared {
    /// The rounds' books summed, rule by rule.
    pub fn total(rounds: &[Compared]) -> Compared {
        rounds.iter().fold(Compared::default(), |mut total, round| {
            total.fixed.add(&round.fixed);
            total.adaptive.add(&round.adaptive);
            total
        })
    }
}

/// `RESULT admission wasted_… served_…`: wasted = answered `expired`
/// (admitted, queued, never served in time); served = answered `ok`.
pub fn result_line(c: &Compared) -> String {
    format!(
        "RESULT admission wasted_fixed={} wasted_adaptive={} served_fixed={} served_adaptive={}",
        c.fixed.expired, c.adaptive.expired, c.fixed.ok, c.adaptive.ok
    )
}

/// Every round's pair of books; `on_round` sees each as it completes.
pub async fn run(bench: &AdmissionBench, mut on_round: impl FnMut(u64, &Compared)) -> Result<Vec<Compared>> {
    let mut rounds = Vec::new();
    for round in 0..bench.rounds.max(1) {
        let seed = bench.seed + round * 1_000;
        let fixed = one(bench, AdmissionRule::FixedBacklog(bench.fixed_backlog), "fixed", seed, round + 1).await?;
        let adaptive = one(bench, AdmissionRule::PredictedWait, "adaptive", seed, round + 1).await?;
        let compared = Compared { fixed, adaptive };
        on_round(round + 1, &compared);
        rounds.push(compared);
    }
    Ok(rounds)
}

async fn one(bench: &AdmissionBench, rule: AdmissionRule, name: &str, seed: u64, round: u64) -> Result<Ledger> {
    let model = ModelName::parse(MODEL)?;
    let broker = Broker::start();
    let redis = Redis::start();
    broker.create_topics(&model, bench.partitions).await;
    let worker =
        LocalWorker::start_async(&bench.binaries, MODEL, &broker.addr, &redis.url(), &bench.worker_args).await?;
    // The worker publishes its drain rate once it has answered for a few
    // seconds: the same short warm-up for both modes.
    let (redis_url, corpus) = (redis.url(), &bench.corpus);
    let run = |profile, duration, run_id| {
        RunConfig::on_local_fleet(&broker, &redis_url, &model, profile, duration, corpus, run_id)
    };
    let warm = run(
        Profile::Steady { rate: 10.0 },
        Duration::from_secs(5),
        format!("adm-warm-{name}-{seed}-{}", std::process::id()),
    )?;
    runner::run(RunConfig { seed: seed + 1, drain: Duration::from_secs(30), ..warm }).await?;
    let burst = run(bench.profile, bench.duration, format!("adm-{name}-{seed}-{}", std::process::id()))?;
    let outcome = runner::run(RunConfig {
        seed,
        ttl: Some(bench.deadline),
        drain: bench.deadline + Duration::from_secs(30),
        admission: Some(rule),
        ..burst
    })
    .await?;
    drop(worker);
    if let Some(out) = &bench.out {
        report::write(
            &out.join(format!("round{round}-{name}")),
            &format!("admission: {name}, round {round}"),
            &outcome,
        )?;
    }
    Ok(outcome.ledger)
}
