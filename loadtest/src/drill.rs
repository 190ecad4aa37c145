//! Fault drills: the fleet runs on this machine under steady open-loop
//! load, one fault is injected mid-run and later undone, and the ledger
//! must still close (`lost = 0`).
//!
//! | drill | fault | undone by |
//! | --- | --- | --- |
//! | `kill-worker` | SIGKILL one of two workers mid-batch | restarting it |
//! | `restart-broker` | SIGKILL the broker (PostgreSQL storage) | starting it again on the same port and database |
//! | `redis-outage` | SIGSTOP Redis: connections stay, nothing answers | SIGCONT |
//! | `rebalance` | a second worker joins the group | SIGTERM: it drains and leaves |

use crate::fleet::{Binaries, LocalWorker};
use crate::profile::Profile;
use crate::runner::{self, RunConfig, RunOutcome};
use anyhow::{Context, Result};
use fleet_proto::ModelName;
use fleet_testkit::{Broker, PostgresDatabase, Redis, Storage};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Drill {
    KillWorker,
    RestartBroker,
    RedisOutage,
    Rebalance,
}

impl Drill {
    pub fn name(self) -> &'static str {
        match self {
            Self::KillWorker => "kill-worker",
            Self::RestartBroker => "restart-broker",
            Self::RedisOutage => "redis-outage",
            Self::Rebalance => "rebalance",
        }
    }
}

#[derive(Debug, Clone)]
pub struct DrillConfig {
    pub binaries: Binaries,
    pub corpus: Vec<String>,
    /// Offered load, requests per second (steady).
    pub rate: f64,
    pub duration: Duration,
    /// When the fault starts, and how long until it is undone.
    pub fault_at: Duration,
    pub fault_for: Duration,
    pub partitions: i32,
    pub seed: u64,
}

const MODEL: &str = "minilm";

/// A drill's run, and what shows that its fault took effect.
pub struct DrillOutcome {
    pub run: RunOutcome,
    /// Rebalance: answers the joining worker wrote before it left.
    pub joiner_answers: Option<f64>,
}

impl DrillOutcome {
    /// The slowest `ok` answer, end to end (ms): a fault that held requests
    /// up shows here.
    pub fn slowest_ok_ms(&self) -> f64 {
        self.run
            .records
            .iter()
            .filter(|r| r.outcome == crate::ledger::Outcome::Ok)
            .filter_map(|r| r.e2e_ms)
            .fold(0.0, f64::max)
    }
}

/// Runs `drill` and returns the run (records, lag, ledger).
pub async fn run(drill: Drill, config: DrillConfig) -> Result<DrillOutcome> {
    let model = ModelName::parse(MODEL).context("model name")?;
    // The durable broker only where the drill restarts it: PostgreSQL
    // storage is what makes a restart lose nothing.
    let database = (drill == Drill::RestartBroker).then(|| PostgresDatabase::create("fleet_drill"));
    let storage = database.as_ref().map_or(Storage::Memory, |db| Storage::Postgres { url: db.url() });
    let mut broker = Broker::start_with(storage);
    let redis = Redis::start();
    broker.create_topics(&model, config.partitions).await;
    let (brokers, redis_url) = (broker.addr.clone(), redis.url());
    let start_worker = || LocalWorker::start_async(&config.binaries, MODEL, &brokers, &redis_url, &[]);
    let mut first = start_worker().await?;
    let mut second = match drill {
        Drill::KillWorker => Some(start_worker().await?),
        _ => None,
    };

    let run = runner::run(RunConfig {
        seed: config.seed,
        // Long enough for a request held up by the fault to be answered
        // after it (or expire: the default TTL is 30 s).
        drain: Duration::from_secs(90),
        ..RunConfig::on_local_fleet(
            &broker,
            &redis_url,
            &model,
            Profile::Steady { rate: config.rate },
            config.duration,
            &config.corpus,
            format!("drill-{}-{}", drill.name(), std::process::id()),
        )?
    });
    let mut joiner_answers = None;
    let fault = async {
        tokio::time::sleep(config.fault_at).await;
        tracing::info!(drill = drill.name(), "fault injected");
        match drill {
            Drill::KillWorker => first.kill(),
            Drill::RestartBroker => broker.kill(),
            Drill::RedisOutage => redis.freeze(),
            Drill::Rebalance => second = Some(start_worker().await?),
        }
        tokio::time::sleep(config.fault_for).await;
        tracing::info!(drill = drill.name(), "fault undone");
        match drill {
            Drill::KillWorker => first = start_worker().await?,
            Drill::RestartBroker => tokio::task::block_in_place(|| broker.start_again()),
            Drill::RedisOutage => redis.thaw(),
            Drill::Rebalance => {
                if let Some(mut leaving) = second.take() {
                    joiner_answers = Some(leaving.answers());
                    tokio::task::spawn_blocking(move || leaving.stop()).await??;
                }
            }
        }
        anyhow::Ok(())
    };
    let (outcome, faulted) = tokio::join!(run, fault);
    faulted.with_context(|| format!("injecting the {} fault", drill.name()))?;
    // The broker lets go of its database before the database goes.
    drop((first, second, broker));
    drop(database);
    Ok(DrillOutcome { run: outcome?, joiner_answers })
}
