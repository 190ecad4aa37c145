//! The fleet each step of the lanes bench starts for itself (broker, Redis,
//! one worker owning every partition of both lanes), and what a step does
//! with it: a burst, the interactive load, a backfill. Apart from the steps
//! so that the bulk-answers bench starts the same fleet.

use super::{Counters, LanesBench};
use crate::fleet::{scrape_metrics, Binaries, LocalWorker};
use crate::profile::Profile;
use crate::runner::{self, RunConfig, RunOutcome};
use anyhow::{bail, Context, Result};
use fleet_producer::{FleetProducer, Request};
use fleet_proto::clock::now_ms;
use fleet_proto::{JobId, Lane, ModelName, RequestId};
use fleet_testkit::{metric_value, Broker, Redis};
use std::time::Duration;
use tokio::time::Instant;

const MODEL: &str = "minilm";
/// Every request's deadline after its send: nothing the bench sends expires.
const FAR: Duration = Duration::from_secs(24 * 3600);

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
        let worker = LocalWorker::start_async(binaries, MODEL, &broker.addr, &redis.url(), worker_args).await?;
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
        scrape_metrics(self.worker.metrics).await
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
    pub(super) async fn interactive(
        &self,
        bench: &LanesBench,
        rate: f64,
        run_id: String,
        drain: Duration,
    ) -> Result<RunOutcome> {
        let config = self.run_config(&bench.corpus, Profile::Steady { rate }, bench.duration, run_id)?;
        runner::run(RunConfig { seed: bench.seed, ttl: Some(FAR), drain, ..config }).await
    }

    /// Sends `texts` at once on `lane`, all in `job`, many in flight; the
    /// seconds until the broker had them all.
    pub(super) async fn backfill(&self, texts: &[String], lane: Lane, job: &JobId) -> Result<f64> {
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
