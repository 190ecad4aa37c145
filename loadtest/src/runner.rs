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

use crate::collect::{self, Seen};
use crate::ledger::{Ledger, Outcome};
use crate::profile::{self, Profile};
use crate::timeline::Record;
use anyhow::{Context, Result};
use fleet_connect::redis::{Connection, RedisTarget};
use fleet_producer::{admission, BacklogGuard, FleetProducer, KafkaConfig, Request, SendError};
use fleet_proto::backlog::Load;
use fleet_proto::clock::now_ms;
use fleet_proto::{ModelName, Namespace, RequestId};
use indicatif::{ProgressBar, ProgressStyle};
use rdkafka::consumer::BaseConsumer;
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

enum Event {
    Sent {
        index: usize,
        at_s: f64,
    },
    NotSent {
        index: usize,
    },
    /// The broker has it (in `partition`), or refused it (`None`).
    Delivered {
        index: usize,
        partition: Option<i32>,
    },
    SenderDone,
}

#[derive(Clone, Default)]
struct State {
    sent_s: Option<f64>,
    delivered: Option<bool>,
    partition: Option<i32>,
    seen: Option<(f64, Seen)>,
}

const POLL_EVERY: Duration = Duration::from_millis(250);

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
    let ids: Vec<RequestId> = (0..arrivals.len())
        .map(|i| RequestId::parse(&format!("{}-{i}", config.run_id)).context("run id"))
        .collect::<Result<_>>()?;
    let mut producer = FleetProducer::new(&config.kafka, "loadtest")?.with_namespace(config.names.clone());
    if let Some(rule) = config.admission {
        let guard = match rule {
            AdmissionRule::FixedBacklog(limit) => {
                BacklogGuard::connect_to(&config.redis, config.names.clone(), limit).await?
            }
            AdmissionRule::PredictedWait => BacklogGuard::adaptive(&config.redis, config.names.clone()).await?,
        };
        producer = producer.with_admission(guard);
    }
    let producer = Arc::new(producer);
    let offsets: BaseConsumer = config
        .kafka
        .client_config()
        .set("group.id", config.names.consumer_group(&config.model))
        .set("enable.auto.commit", "false")
        .create()?;
    let offsets = Arc::new(offsets);
    let dlq_topic = config.names.dlq_topic(&config.model);
    let dlq_before = dlq_high_watermark(&offsets, &dlq_topic).await?;

    let start = Instant::now();
    let (events, mut inbox) = mpsc::unbounded_channel();
    let sender = tokio::spawn(send_all(SendPlan {
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
    let sampler = tokio::spawn(sample_fleet(
        offsets.clone(),
        reports,
        config.names.clone(),
        config.model.clone(),
        start,
        sampler_stopped,
    ));

    let progress = if config.progress { ProgressBar::new(ids.len() as u64) } else { ProgressBar::hidden() };
    progress.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} answered {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut conn = config.redis.connection(REDIS_CONNECT, Some(REDIS_RESPOND)).await.context("connecting to Redis")?;
    let mut states = vec![State::default(); ids.len()];
    // Sent, not refused, not answered yet: what each poll asks for. Kept as
    // the events come, so a tick costs what is in flight, not the whole run
    // (a soak sends millions).
    let mut pending = std::collections::BTreeSet::new();
    let (mut sent, mut answered) = (0usize, 0usize);
    let mut sender_done = false;
    let mut last_send = start;
    let mut tick = tokio::time::interval(POLL_EVERY);
    loop {
        tokio::select! {
            event = inbox.recv() => match event {
                Some(Event::Sent { index, at_s }) => {
                    states[index].sent_s = Some(at_s);
                    last_send = Instant::now();
                    sent += 1;
                    pending.insert(index);
                }
                Some(Event::NotSent { index }) => {
                    states[index].delivered = Some(false);
                    pending.remove(&index);
                }
                Some(Event::Delivered { index, partition }) => {
                    states[index].delivered = Some(partition.is_some());
                    states[index].partition = partition;
                    if partition.is_none() {
                        pending.remove(&index);
                    }
                }
                Some(Event::SenderDone) => sender_done = true,
                None => sender_done = true,
            },
            _ = tick.tick() => {
                let polled: Vec<usize> = pending.iter().copied().collect();
                let polled_ids: Vec<RequestId> = polled.iter().map(|&i| ids[i].clone()).collect();
                match collect::poll(&mut conn, &config.names, &config.model, &polled_ids).await {
                    Ok(found) => {
                        let at = start.elapsed().as_secs_f64();
                        for (&i, seen) in polled.iter().zip(found) {
                            if let Some(seen) = seen {
                                pending.remove(&i);
                                states[i].seen = Some((at, seen));
                                answered += 1;
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "answer poll failed; retrying"),
                }

                progress.set_position(answered as u64);
                progress.set_message(format!("({sent} sent)"));
                if sender_done && (pending.is_empty() || last_send.elapsed() > config.drain) {
                    break;
                }
            }
        }
    }
    progress.finish_and_clear();
    sender.await.context("sender task")?;
    let _ = stop_sampler.send(());
    let Samples { lag, load } = sampler.await.context("fleet sampler")?;
    let dlq_after = dlq_high_watermark(&offsets, &dlq_topic).await?;

    let mut ledger = Ledger { dlq: dlq_after.saturating_sub(dlq_before), ..Ledger::default() };
    let mut records = Vec::with_capacity(ids.len());
    for (id, state) in ids.iter().zip(states) {
        let Some(sent_s) = state.sent_s else { continue };
        match state.delivered {
            Some(false) => {
                ledger.send_failed += 1;
                continue;
            }
            _ => ledger.sent += 1,
        }
        let record = match state.seen {
            Some((answered_s, seen)) => Record {
                id: id.to_string(),
                sent_s,
                outcome: seen.outcome,
                answered_s: Some(answered_s),
                e2e_ms: Some(seen.e2e_ms),
                queue_ms: Some(seen.queue_ms),
                infer_ms: Some(seen.infer_ms),
                partition: state.partition,
            },
            None => Record {
                id: id.to_string(),
                sent_s,
                outcome: Outcome::Missing,
                answered_s: None,
                e2e_ms: None,
                queue_ms: None,
                infer_ms: None,
                partition: state.partition,
            },
        };
        ledger.record(&record.outcome);
        records.push(record);
    }
    Ok(RunOutcome { records, lag, load, ledger })
}

/// What a run sends: a text per request, or real images in turn.
enum Payloads {
    Texts(Vec<String>),
    Images(Vec<ImageInput>),
}

impl Payloads {
    fn request(&self, index: usize, id: RequestId) -> Request {
        match self {
            Self::Texts(texts) => Request::text(id, texts[index].clone()),
            Self::Images(images) => {
                let image = &images[index % images.len()];
                Request::image(id, image.content_type, image.bytes.as_ref().clone())
            }
        }
    }
}

struct SendPlan {
    producer: Arc<FleetProducer>,
    model: ModelName,
    arrivals: Vec<f64>,
    payloads: Payloads,
    ids: Vec<RequestId>,
    ttl: Option<Duration>,
    start: Instant,
    events: mpsc::UnboundedSender<Event>,
}

/// Sends each request at its arrival time; delivery reports come back as
/// events from their own tasks, so a slow broker never delays the clock.
async fn send_all(plan: SendPlan) {
    let SendPlan { producer, model, arrivals, payloads, ids, ttl, start, events } = plan;
    for (index, (at, id)) in arrivals.iter().zip(ids).enumerate() {
        tokio::time::sleep_until(start + Duration::from_secs_f64(*at)).await;
        let mut request = payloads.request(index, id);
        if let Some(ttl) = ttl {
            request.deadline_ms = Some(now_ms() + ttl.as_millis() as u64);
        }
        match producer.send(&model, &request).await {
            Ok(delivery) => {
                let _ = events.send(Event::Sent { index, at_s: start.elapsed().as_secs_f64() });
                let events = events.clone();
                // The producer lives until every delivery is known: dropped
                // earlier (a burst is sent within milliseconds), it would
                // purge what it still holds.
                let producer = producer.clone();
                tokio::spawn(async move {
                    let delivered = delivery.await;
                    drop(producer);
                    if let Err(e) = &delivered {
                        tracing::warn!(error = %e, "delivery failed");
                    }
                    let partition = delivered.ok().map(|d| d.partition);
                    let _ = events.send(Event::Delivered { index, partition });
                });
            }
            Err(e) => {
                match e {
                    // Admission's refusals are the point of some runs: counted, not logged one by one.
                    SendError::Overloaded(refused) => tracing::debug!(%refused, "refused by admission"),
                    other => tracing::warn!(error = %other, "send failed"),
                }
                let _ = events.send(Event::Sent { index, at_s: start.elapsed().as_secs_f64() });
                let _ = events.send(Event::NotSent { index });
            }
        }
    }
    let _ = events.send(Event::SenderDone);
}

#[derive(Default)]
struct Samples {
    lag: Vec<(f64, u64)>,
    load: Vec<(f64, Load)>,
}

/// Once a second until stopped: the group's total lag, and the backlog
/// report the workers published (as a producer's admission reads it).
async fn sample_fleet(
    consumer: Arc<BaseConsumer>,
    mut redis: Connection,
    names: Namespace,
    model: ModelName,
    start: Instant,
    mut stop: oneshot::Receiver<()>,
) -> Samples {
    let mut samples = Samples::default();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = &mut stop => return samples,
            _ = tick.tick() => {}
        }
        if let Ok(Some(load)) = admission::read_load(&mut redis, &names.backlog_key(&model)).await {
            samples.load.push((start.elapsed().as_secs_f64(), load));
        }
        let (consumer, group, topic) = (consumer.clone(), names.consumer_group(&model), names.topic(&model));
        let measured = tokio::task::spawn_blocking(move || {
            fleet_ops::probe::measure(consumer.as_ref(), &group, &topic, Duration::from_secs(2))
        })
        .await;
        if let Ok(Ok(lag)) = measured {
            samples.lag.push((start.elapsed().as_secs_f64(), lag.total()));
        }
    }
}

/// Messages ever written to the model's dead-letter topic (partition 0).
async fn dlq_high_watermark(consumer: &Arc<BaseConsumer>, dlq_topic: &str) -> Result<u64> {
    use rdkafka::consumer::Consumer;
    let (consumer, topic) = (consumer.clone(), dlq_topic.to_owned());
    let (_, high) = tokio::task::spawn_blocking(move || consumer.fetch_watermarks(&topic, 0, Duration::from_secs(10)))
        .await?
        .context("reading the dead-letter topic's watermark")?;
    Ok(u64::try_from(high).unwrap_or(0))
}
