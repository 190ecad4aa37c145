//! One open-loop run against a fleet: send on the profile's Poisson clock
//! without ever waiting for an answer, collect every answer from Redis,
//! sample the consumer lag each second, and keep the books.
//!
//! The sender and the delivery reports feed one loop that owns all the
//! state (no locks): it polls Redis for answers every 250 ms and stops when
//! every acknowledged request has an outcome, or when the drain time after
//! the last send has passed (what is still unanswered then is `missing`).
//!
//! Every name (topic, consumer group, Redis key) is the measured release's,
//! from its [`Namespace`]; Redis is one server or a Redis Cluster
//! ([`RedisTarget`]), as the fleet itself runs.
//!
//! Here the run's settings and its steps; [`send`] is the clock that sends,
//! [`answers`] the loop that collects and the books it keeps, [`sampler`]
//! the lag and backlog sampled beside them.

mod answers;
mod sampler;
mod send;

use crate::ledger::Ledger;
use crate::profile::{self, Profile};
use crate::timeline::Record;
use anyhow::{Context, Result};
use fleet_connect::redis::RedisTarget;
use fleet_producer::{BacklogGuard, FleetProducer, KafkaConfig};
use fleet_proto::backlog::Load;
use fleet_proto::{ModelName, Namespace, RequestId};
use rdkafka::consumer::BaseConsumer;
use send::{Payloads, SendPlan};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

pub struct RunConfig {
    pub kafka: KafkaConfig,
    /// Where the answers and the workers' backlog reports are read.
    pub redis: RedisTarget,
    /// The measured release's prefixes: the topics sent to, the group whose
    /// lag is sampled, the Redis keys read.
    pub names: Namespace,
    pub model: ModelName,
    pub profile: Profile,
    pub duration: Duration,
    pub seed: u64,
    /// A bound on the requests of the run, whatever the profile says.
    pub max_requests: usize,
    /// Sentences the texts are made of.
    pub corpus: Vec<String>,
    /// Each request's deadline after its send; `None`: the model's TTL.
    pub ttl: Option<Duration>,
    /// How long to keep collecting answers after the last send.
    pub drain: Duration,
    /// Prefix of every request id (unique per run).
    pub run_id: String,
    pub progress: bool,
    /// Producer admission for this run (`None`: every request is sent).
    pub admission: Option<AdmissionRule>,
    /// Arrival times (seconds from the start, sorted) to send at instead of
    /// drawing them from `profile` (a soak's bursts come from its schedule).
    pub arrivals: Option<Vec<f64>>,
    /// Encoded images to send, in turn, instead of texts (empty: texts).
    pub images: Vec<ImageInput>,
}

/// One real image a run sends, as its file holds it.
#[derive(Debug, Clone)]
pub struct ImageInput {
    pub content_type: fleet_proto::ContentType,
    pub bytes: Arc<Vec<u8>>,
}

impl RunConfig {
    /// A quiet run of `profile` for `duration` with seed 0 under the default
    /// names: no bound on the requests, the model's TTL, 60 s to collect
    /// answers, no progress bar, every request sent. Callers set what
    /// differs with `..`.
    pub fn new(
        kafka: KafkaConfig,
        redis: RedisTarget,
        model: ModelName,
        profile: Profile,
        duration: Duration,
        corpus: Vec<String>,
        run_id: String,
    ) -> Self {
        Self {
            kafka,
            redis,
            names: Namespace::default(),
            model,
            profile,
            duration,
            seed: 0,
            max_requests: usize::MAX,
            corpus,
            ttl: None,
            drain: Duration::from_secs(60),
            run_id,
            progress: false,
            admission: None,
            arrivals: None,
            images: Vec::new(),
        }
    }

    /// [`new`](Self::new) against a broker and Redis started here.
    pub fn on_local_fleet(
        broker: &fleet_testkit::Broker,
        redis_url: &str,
        model: &ModelName,
        profile: Profile,
        duration: Duration,
        corpus: &[String],
        run_id: String,
    ) -> Result<Self> {
        let redis = RedisTarget::Server(redis::Client::open(redis_url).context("the local Redis URL")?);
        Ok(Self::new(broker.kafka(), redis, model.clone(), profile, duration, corpus.to_vec(), run_id))
    }
}

/// How the run's producer admits requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AdmissionRule {
    /// Refuse above a fixed backlog (the constant someone guessed).
    FixedBacklog(u64),
    /// Refuse what the predicted wait says would expire.
    PredictedWait,
}

pub struct RunOutcome {
    pub records: Vec<Record>,
    /// (seconds from the start, the group's total lag).
    pub lag: Vec<(f64, u64)>,
    /// (seconds from the start, the workers' backlog report as producers
    /// read it): what admission judged by.
    pub load: Vec<(f64, Load)>,
    pub ledger: Ledger,
}

/// Bounds on each Redis connect and reply, on one server or a cluster: the
/// redis crate's defaults for a multiplexed connection, so a Redis that
/// stops answering (the redis-outage drill) costs a poll or a sample, which
/// is tried again at the next tick, never a hang.
const REDIS_CONNECT: Duration = Duration::from_secs(1);
const REDIS_RESPOND: Duration = Duration::from_millis(500);

/// The run's texts: the seeded mixed-length workload, each made unique by
/// its number so that the feature cache answers none of them.
pub fn texts(corpus: &[String], count: usize, seed: u64) -> Vec<String> {
    crate::workload::generate(corpus, count, seed).into_iter().enumerate().map(|(i, t)| format!("{t} #{i}")).collect()
}

pub async fn run(config: RunConfig) -> Result<RunOutcome> {
    let (arrivals, payloads) = what_to_send(&config);
    let ids: Vec<RequestId> = (0..arrivals.len())
        .map(|i| RequestId::parse(&format!("{}-{i}", config.run_id)).context("run id"))
        .collect::<Result<_>>()?;
    let producer = Arc::new(producer(&config).await?);
    let offsets = Arc::new(offsets_reader(&config)?);
    let dlq_topic = config.names.dlq_topic(&config.model);
    let dlq_before = sampler::dlq_high_watermark(&offsets, &dlq_topic).await?;

    let start = Instant::now();
    let (events, inbox) = mpsc::unbounded_channel();
    let sender = tokio::spawn(send::send_all(SendPlan {
        producer,
        model: config.model.clone(),
        arrivals,
        payloads,
        ids: ids.clone(),
        ttl: config.ttl,
        start,
        events,
    }));
    let (stop_sampler, sampler_stopped) = oneshot::channel();
    let reports = config.redis.connection(REDIS_CONNECT, Some(REDIS_RESPOND)).await.context("connecting to Redis")?;
    let fleet_sampler = tokio::spawn(sampler::sample_fleet(
        offsets.clone(),
        reports,
        config.names.clone(),
        config.model.clone(),
        start,
        sampler_stopped,
    ));
    let states = answers::collect_answers(&config, &ids, inbox, start).await?;
    sender.await.context("sender task")?;
    let _ = stop_sampler.send(());
    let sampler::Samples { lag, load } = fleet_sampler.await.context("fleet sampler")?;
    let dlq_after = sampler::dlq_high_watermark(&offsets, &dlq_topic).await?;
    let (records, ledger) = answers::books(&ids, states, dlq_after.saturating_sub(dlq_before));
    Ok(RunOutcome { records, lag, load, ledger })
}

/// When each request goes (the config's arrivals, else the profile's
/// clock, at most `max_requests`) and what it carries.
fn what_to_send(config: &RunConfig) -> (Vec<f64>, Payloads) {
    let duration_s = config.duration.as_secs_f64();
    let arrivals = match config.arrivals.clone() {
        Some(arrivals) => arrivals.into_iter().take(config.max_requests).collect(),
        None => profile::arrivals(config.profile, duration_s, config.seed, config.max_requests),
    };
    let payloads = if config.images.is_empty() {
        Payloads::Texts(texts(&config.corpus, arrivals.len(), config.seed))
    } else {
        Payloads::Images(config.images.clone())
    };
    (arrivals, payloads)
}

/// The run's producer, under the measured release's names, with the
/// config's admission.
async fn producer(config: &RunConfig) -> Result<FleetProducer> {
    let producer = FleetProducer::new(&config.kafka, "loadtest")?.with_namespace(config.names.clone());
    let Some(rule) = config.admission else { return Ok(producer) };
    let guard = match rule {
        AdmissionRule::FixedBacklog(limit) => {
            BacklogGuard::connect_to(&config.redis, config.names.clone(), limit).await?
        }
        AdmissionRule::PredictedWait => BacklogGuard::adaptive(&config.redis, config.names.clone()).await?,
    };
    Ok(producer.with_admission(guard))
}

/// A consumer in the model's group that never joins it: it reads the
/// group's committed offsets (its lag) and the dead-letter topic's
/// watermarks.
fn offsets_reader(config: &RunConfig) -> Result<BaseConsumer> {
    Ok(config
        .kafka
        .client_config()
        .set("group.id", config.names.consumer_group(&config.model))
        .set("enable.auto.commit", "false")
        .create()?)
}
