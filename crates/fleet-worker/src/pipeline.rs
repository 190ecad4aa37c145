//! The worker's data path, wired: source → admission → tokenize (text) or
//! decode under the memory budget (images) → batcher → feature cache →
//! engine (its own thread) → sink. Each stage is a task joined to the next by
//! a bounded channel, so a slow stage stops the ones before it instead of
//! letting memory grow; the consumer simply stops reading.
//!
//! Shutdown is the same path run dry: the source stops reading, each stage
//! finishes what it holds and closes its output, the sink writes the last
//! answers, and the stored offsets are committed before `run` returns.

use crate::admission::{image_error_code, Admission, AdmissionPolicy, ImageRequest, InputPolicy};
use crate::batcher::{Batch, BucketBatcher, BucketLimits};
use crate::cache::{CachedOutput, FeatureCache};
use crate::config::{ModelKind, WorkerArgs};
use crate::decode_budget::DecodeBudget;
use crate::drain::DrainMeter;
use crate::engine::{choose_device, EngineError};
use crate::flow::{FlowGate, FlowLimits, Transition};
use crate::gpu::GpuMemory;
use crate::health::{self, Health};
use crate::in_flight_limit::{InFlightLimit, LimitSettings};
use crate::lifecycle::{Refusals, ServingVersion};
use crate::message::{Inbound, Position};
use crate::metrics as m;
use crate::model::ModelInput;
use crate::repository::{self, ModelVersion};
use crate::serve::{EngineCommand, EngineThread, Feedback};
use crate::sink::{BacklogPublisher, DeadLetters, Finished, ResultSink};
use crate::source::{Committer, Source};
use crate::tokenize::{TextTokenizer, TokenizeError};
use crate::watcher::{load_version, record_refusal, LoadContext, Refused, Warmed, Watcher};
use anyhow::{bail, Context, Result};
use fleet_image::InputGeometry;
use fleet_ops::endpoints::{self, Checks};
use fleet_proto::clock::now_ms;
use fleet_proto::{Answer, ErrorCode, ModelName, RequestId, Status, Timings};
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, Semaphore};

/// A prepared request (tokenized or decoded) waiting for a batch.
#[derive(Debug)]
pub(crate) struct Job {
    pub(crate) position: Position,
    pub(crate) id: RequestId,
    pub(crate) input: ModelInput,
    /// Feature-cache address of `input`.
    pub(crate) input_hash: String,
    pub(crate) created_ms: u64,
    pub(crate) deadline_ms: u64,
    /// When the worker read it: how long it has been held since.
    pub(crate) read_ms: u64,
}

impl Job {
    fn new(position: Position, id: RequestId, input: ModelInput, created_ms: u64, deadline_ms: u64) -> Self {
        Self { position, id, input_hash: input.hash(), input, created_ms, deadline_ms, read_ms: now_ms() }
    }
}

/// How consumed requests become model inputs.
enum Preparation {
    /// Tokenized inline: microseconds per request. Boxed: a tokenizer is
    /// a kilobyte, the image variant a few words.
    Text(Box<TextTokenizer>),
    /// Decoded on blocking threads, each decode holding its share of the
    /// memory budget, at most `slots` at once.
    Image { budget: DecodeBudget, slots: Arc<Semaphore>, geometry: InputGeometry },
}

pub(crate) enum SinkItem {
    Answers(Vec<Finished>),
    DeadLetter { inbound: Box<Inbound>, reason: &'static str, detail: String },
}

/// How many tokenized requests may wait for the batcher, beyond what it holds.
const JOB_QUEUE: usize = 256;
/// Batches formed ahead of the engine: one runs while the next is formed.
const BATCH_QUEUE: usize = 1;
const SINK_QUEUE: usize = 64;
/// How long the first contact with Kafka may take before the worker goes on
/// (unreachable: librdkafka keeps trying) or stops (a settings problem).
const KAFKA_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn run(args: WorkerArgs, shutdown: impl Future<Output = ()>) -> Result<()> {
    let device = choose_device(args.device)?;
    // Once, before any libtorch work: batches run one at a time on the
    // engine thread, each parallel inside (intra-op threads).
    tch::set_num_interop_threads(1);
    let health = Arc::new(Health::default());
    serve_endpoints(&args, health.clone()).await?;
    let mut kafka = args.kafka_config()?;
    // Wrong credentials or an untrusted certificate end the worker here,
    // with the reason, before the model loads (not as endless retries).
    let probe = kafka.clone();
    tokio::task::spawn_blocking(move || fleet_connect::kafka_check::check_at_start(&probe, KAFKA_CHECK_TIMEOUT))
        .await??;
    let first = load_first_version(&args, device).await?;
    let FirstVersion { version, warmed, preparation, inputs, tokenizer, ctx, refusals } = first;
    let serving = ServingVersion::new(version.version);
    let policy = AdmissionPolicy {
        model: args.model.clone(),
        version: serving.clone(),
        inputs,
        request_ttl_ms: version.config.ttl.request_ttl_ms,
    };

    if version.config.kind == ModelKind::Image && kafka.get("max.partition.fetch.bytes").is_none() {
        // One image message (up to 20 MB + headers) must fit a fetch
        // (librdkafka's default: 1 MB per partition). Text models keep the
        // default: their messages are small and the flow tests rely on it.
        kafka.set("max.partition.fetch.bytes", "20971520");
    }
    let ttl = &version.config.ttl;
    let redis = args.redis.client()?;
    let results = ResultSink::connect(redis.clone(), ttl.result_ttl_s, ttl.feature_ttl_s)
        .await
        .with_context(|| format!("connecting to Redis at {}", args.redis.redacted_url()))?;
    let cache = FeatureCache::connect(redis.clone(), args.model.clone()).await?;
    let dead_letters = DeadLetters::new(&kafka, args.model.dlq_topic())?;

    let (batch_tx, batch_rx) = mpsc::channel::<Batch<Job>>(BATCH_QUEUE);
    let (command_tx, command_rx) = mpsc::channel::<EngineCommand>(BATCH_QUEUE);
    let (sink_tx, sink_rx) = mpsc::channel::<SinkItem>(SINK_QUEUE);
    let (feedback_tx, feedback_rx) = mpsc::unbounded_channel::<Feedback>();
    for &(bucket, rows) in &warmed.warm.row_caps {
        let _ = feedback_tx.send(Feedback::RowCap { bucket, rows });
    }
    let busy_us = Arc::new(AtomicU64::new(0));
    let engine = EngineThread {
        model: args.model.clone(),
        busy_us: busy_us.clone(),
        threads: ctx.threads,
        serving: serving.clone(),
        health: health.clone(),
        commands: command_rx,
        sink: sink_tx.clone(),
        feedback: feedback_tx.clone(),
    }
    .spawn(warmed.loaded)?;
    health.set_warm();
    tracing::info!(model = %args.model, version = version.version, "model warm; subscribing");
    let watcher = Watcher {
        repo: args.model_repo.clone(),
        model: args.model.clone(),
        ctx: ctx.clone(),
        serving: serving.clone(),
        refusals,
        interval: args.model_poll_interval,
        tokenizer,
        commands: command_tx.clone(),
        feedback: feedback_tx,
    };
    let (stop_watching, watching_stopped) = oneshot::channel::<()>();
    let watching = tokio::spawn(watcher.run(watching_stopped));

    let source = Arc::new(Source::subscribe(
        kafka,
        args.model.as_str(),
        &args.model.consumer_group(),
        &args.model.topic(),
        args.prefetch_kbytes,
    )?);
    let committer = source.committer();
    let backlog = BacklogPublisher::connect(redis, &args.model, args.worker_id()).await?;
    let (stop_reporting, reporting_stopped) = oneshot::channel::<()>();
    let gpu = device.is_cuda().then(open_gpu_memory).flatten();
    let ready_gauge = metrics::gauge!(m::WORKER_READY, "model" => args.model.to_string());
    let answered = Arc::new(AtomicU64::new(0));
    let status = StatusReport {
        answered: answered.clone(),
        busy_us: busy_us.clone(),
        drain_gauge: metrics::gauge!(m::DRAIN_RATE, "model" => args.model.to_string()),
        source: source.clone(),
        publisher: backlog,
        health: health.clone(),
        gpu,
        ready_gauge,
    };
    let reporter = tokio::spawn(report_status(status, reporting_stopped));
    let outlets = SinkOutlets { results, dead_letters, committer: committer.clone(), answered };
    let sink = tokio::spawn(run_sink(args.model.clone(), sink_rx, outlets));
    let (job_tx, job_rx) = mpsc::channel::<Job>(JOB_QUEUE);
    let in_flight_now = Arc::new(AtomicUsize::new(args.max_in_flight.max(1)));
    let in_flight = (!args.in_flight_target_wait.is_zero()).then(|| {
        InFlightLimit::new(LimitSettings {
            floor: args.min_in_flight.min(args.max_in_flight).max(1),
            ceiling: args.max_in_flight.max(1),
            target_ms: args.in_flight_target_wait.as_secs_f64() * 1000.0,
            backoff: 0.8,
        })
    });
    metrics::gauge!(m::IN_FLIGHT_LIMIT, "model" => args.model.to_string()).set(args.max_in_flight as f64);
    let stages = BatcherStages {
        jobs: job_rx,
        batches: batch_tx,
        feedback: feedback_rx,
        sink: sink_tx.clone(),
        in_flight,
        in_flight_now: in_flight_now.clone(),
    };
    let batcher = tokio::spawn(run_batcher(stages, ctx.limits.clone(), policy.clone()));
    let cached = tokio::spawn(run_cache(batch_rx, command_tx, sink_tx.clone(), cache, policy.clone()));

    let flow = FlowLimits {
        max_messages: args.max_in_flight.max(1),
        max_bytes: args.max_in_flight_bytes.max(1),
        low_water_percent: usize::from(args.low_water_percent),
    };
    let gates = Gates { flow, in_flight_now };
    consume(&source, gates, &policy, &preparation, &job_tx, &sink_tx, shutdown).await;
    tracing::info!(in_flight = source.in_flight(), timeout = ?args.drain_timeout, "draining");
    // The watcher holds a sender of the engine's queue: stop it first, or
    // the queue never closes and the engine never finishes.
    let _ = stop_watching.send(());
    let _ = watching.await;
    drop((job_tx, sink_tx));
    let drain = async {
        batcher.await.context("batcher task")?;
        cached.await.context("cache task")?;
        let joined = tokio::task::spawn_blocking(move || engine.join()).await.context("engine join")?;
        if joined.is_err() {
            bail!("engine thread panicked");
        }
        sink.await.context("sink task")
    };
    let drained = tokio::time::timeout(args.drain_timeout, drain).await;
    let _ = stop_reporting.send(());
    let _ = reporter.await;
    match drained {
        Ok(result) => result?,
        // What is not answered yet keeps its offset uncommitted: the next
        // owner of the partition reads it again.
        Err(_) => tracing::warn!(left = source.in_flight(), "drain timed out; unanswered messages will be redelivered"),
    }
    committer.commit_now().context("final offset commit")?;
    tracing::info!("stopped");
    Ok(())
}

/// The version the worker starts with, loaded and warm, and what was made
/// from it: the tokenizer (text) and the warm-up sample.
struct FirstVersion {
    version: ModelVersion,
    warmed: Warmed,
    preparation: Preparation,
    inputs: InputPolicy,
    /// tokenizer.json's bytes (text models): later versions must match.
    tokenizer: Option<Vec<u8>>,
    ctx: Arc<LoadContext>,
    refusals: Refusals,
}

/// Loads the version the repository asks for; one that fails to load or
/// warm up is refused and the next best tried, so a broken newest version
/// does not keep a fresh worker down while an older one works.
async fn load_first_version(args: &WorkerArgs, device: tch::Device) -> Result<FirstVersion> {
    let mut refusals = Refusals::default();
    loop {
        let version = repository::resolve_with(&args.model_repo, &args.model, &refusals)?;
        let fingerprint = repository::fingerprint(&version.file("model.pt"));
        let (inputs, preparation, sample, tokenizer) = match prepare(args, &version) {
            Ok(prepared) => prepared,
            Err(e) => {
                let source = EngineError::Incompatible(format!("{e:#}"));
                record_refusal(&args.model, &Refused { version: version.version, reason: "load", source });
                refusals.refuse(version.version, fingerprint);
                continue;
            }
        };
        let ctx = Arc::new(LoadContext {
            device,
            threads: args.intra_op_threads() as i32,
            memory_limit: args.engine_memory_limit_bytes,
            limits: version.config.batching.limits(version.config.max_input_len()),
            sample,
        });
        let (candidate, loader) = (version.clone(), ctx.clone());
        let loaded = tokio::task::spawn_blocking(move || load_version(&candidate, &loader)).await?;
        match loaded {
            Ok(warmed) => return Ok(FirstVersion { version, warmed, preparation, inputs, tokenizer, ctx, refusals }),
            Err(refused) => {
                record_refusal(&args.model, &refused);
                refusals.refuse(version.version, fingerprint);
            }
        }
    }
}

/// How `version`'s inputs are admitted and prepared, one real input to warm
/// it up with, and its tokenizer's bytes.
fn prepare(
    args: &WorkerArgs,
    version: &ModelVersion,
) -> Result<(InputPolicy, Preparation, ModelInput, Option<Vec<u8>>)> {
    match version.config.kind {
        ModelKind::Text => {
            let text = version.config.text().context("text model without [text]")?;
            let path = version.file("tokenizer.json");
            let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            let tokenizer = TextTokenizer::from_bytes(&path, &bytes, text.max_seq_len, text.truncate)?;
            let tokens = tokenizer.tokenize(WARM_UP_TEXT)?;
            let sample = ModelInput::Tokens { ids: tokens.ids, truncated: false };
            let inputs = InputPolicy::Text { max_text_bytes: text.max_text_bytes };
            Ok((inputs, Preparation::Text(Box::new(tokenizer)), sample, Some(bytes)))
        }
        ModelKind::Image => {
            let image = version.config.image().context("image model without [image]")?;
            let preparation = Preparation::Image {
                budget: DecodeBudget::new(args.decode_budget_bytes),
                slots: Arc::new(Semaphore::new(args.decode_threads.max(1))),
                geometry: image.geometry(),
            };
            let photo = fleet_image::synthetic::photo(image.size, image.size, 1).pixels;
            Ok((InputPolicy::Image { limits: image.limits() }, preparation, ModelInput::Pixels(photo), None))
        }
    }
}

/// Real text for warm-up batches: each bucket's rows are its tokens repeated
/// to the bucket's length.
const WARM_UP_TEXT: &str = "A fleet of workers reads requests from Kafka, batches them by length, \
    and writes each answer to Redis before its client gives up waiting.";

/// `/metrics`, `/healthz` and `/ready`, up before the model loads: a probe
/// during warm-up gets "not ready" rather than a refused connection.
async fn serve_endpoints(args: &WorkerArgs, health: Arc<Health>) -> Result<()> {
    let recorder = m::install().context("installing the metrics recorder")?;
    m::register(args.model.as_str());
    let (live, ready) = (health.clone(), health);
    let checks = Checks {
        live: Arc::new(move || health::liveness(live.facts())),
        ready: Arc::new(move || health::readiness(ready.facts(), now_ms())),
    };
    let bound = endpoints::serve(args.metrics_addr, recorder, checks)
        .await
        .with_context(|| format!("serving metrics on {}", args.metrics_addr))?;
    tracing::info!(%bound, "serving /metrics, /healthz, /ready");
    Ok(())
}

fn open_gpu_memory() -> Option<GpuMemory> {
    GpuMemory::open().map_err(|e| tracing::warn!(error = %e, "no NVML: GPU memory gauges are off")).ok()
}

/// The group's lag is read every this many status ticks (one per second):
/// it asks the broker about every partition of the topic.
const LAG_EVERY_TICKS: u64 = 5;

struct StatusReport {
    /// Answers written so far (the sink counts) and the engine's busy time
    /// so far (µs): the drain rate's inputs.
    answered: Arc<AtomicU64>,
    busy_us: Arc<AtomicU64>,
    drain_gauge: metrics::Gauge,
    source: Arc<Source>,
    publisher: BacklogPublisher,
    health: Arc<Health>,
    gpu: Option<GpuMemory>,
    ready_gauge: metrics::Gauge,
}

/// Every second: this worker's backlog into Redis (producer admission),
/// which doubles as the broker and Redis health check; every few seconds
/// the group's lag and the GPU's memory into the metrics.
async fn report_status(report: StatusReport, mut stop: oneshot::Receiver<()>) {
    let StatusReport { answered, busy_us, source, mut publisher, health, gpu, ready_gauge, drain_gauge } = report;
    let mut drain = DrainMeter::default();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for count in 0u64.. {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {}
        }
        let with_lag = count % LAG_EVERY_TICKS == 0;
        let probe = source.clone();
        match tokio::task::spawn_blocking(move || probe.backlog(Duration::from_secs(1))).await {
            Ok(backlog) => {
                let measured = backlog.as_ref().ok().map(|snapshot| snapshot.messages);
                let rate = drain.observe(
                    now_ms(),
                    answered.load(Ordering::Relaxed),
                    busy_us.load(Ordering::Relaxed),
                    measured,
                );
                drain_gauge.set(rate);
                match backlog {
                    Ok(snapshot) => {
                        health.broker_answered(now_ms());
                        // Dated when measured, not when written: producers
                        // add their sends after that time to it.
                        match publisher.publish(snapshot.messages, snapshot.as_of_ms, rate).await {
                            Ok(()) => health.redis_answered(now_ms()),
                            Err(e) => tracing::debug!(error = %e, "backlog not published"),
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, "backlog not measured"),
                }
            }
            Err(e) => tracing::warn!(error = %e, "backlog probe panicked"),
        }
        // After the backlog is out: the lag asks about every partition of
        // the topic and may take seconds on a loaded broker.
        if with_lag {
            let probe = source.clone();
            match tokio::task::spawn_blocking(move || probe.lag(Duration::from_secs(2))).await {
                Ok(Ok(lag)) => fleet_ops::probe::publish(&lag),
                Ok(Err(e)) => tracing::debug!(error = %e, "lag not measured"),
                Err(e) => tracing::warn!(error = %e, "lag probe panicked"),
            }
        }
        if let Some(gpu) = gpu.as_ref().filter(|_| with_lag) {
            if let Err(e) = gpu.publish() {
                tracing::debug!(error = %e, "GPU memory not read");
            }
        }
        ready_gauge.set(if health::readiness(health.facts(), now_ms()).is_ok() { 1.0 } else { 0.0 });
    }
    ready_gauge.set(0.0);
    let _ = publisher.withdraw().await;
}

/// The consumer's bounds: the flow limits, and the in-flight limit as the
/// batcher's AIMD has set it.
struct Gates {
    flow: FlowLimits,
    in_flight_now: Arc<AtomicUsize>,
}

async fn consume(
    source: &Source,
    gates: Gates,
    policy: &AdmissionPolicy,
    preparation: &Preparation,
    jobs: &mpsc::Sender<Job>,
    sink: &mpsc::Sender<SinkItem>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    let mut gate = FlowGate::new(gates.flow);
    let paused_gauge = metrics::gauge!(m::CONSUMER_PAUSED, "model" => policy.model.to_string());
    loop {
        gate.set_max_messages(gates.in_flight_now.load(Ordering::Relaxed));
        let (messages, bytes) = source.held();
        match gate.update(messages, bytes) {
            Some(Transition::Pause) => {
                tracing::info!(messages, bytes, "in-flight limit reached; reading stops");
                paused_gauge.set(1.0);
            }
            Some(Transition::Resume) => {
                tracing::info!(messages, bytes, "below the low-water mark; reading again");
                paused_gauge.set(0.0);
            }
            None => {}
        }
        if gate.is_paused() {
            // Not `consumer.pause()`: a pause drops librdkafka's prefetch and
            // the resume refetches each partition's backlog in one chunk, and
            // a broker that answers partition by partition then hands one
            // partition's backlog over first at every resume while the
            // others' requests expire (docs/operations.md §2). Not reading
            // lets the capped prefetch fill and stop fetching instead, with
            // the partitions interleaved as messages arrived.
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            continue;
        }
        let mut inbound = tokio::select! {
            _ = &mut shutdown => return,
            received = source.recv() => match received {
                Ok(inbound) => inbound,
                Err(e) => {
                    tracing::warn!(error = %e, "kafka receive failed; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            },
        };
        let position = inbound.position.clone();
        let sent = match policy.admit(&inbound, now_ms()) {
            Admission::Text(request) => match preparation {
                Preparation::Text(tokenizer) => {
                    let (id, created_ms) = (request.envelope.id.clone(), request.envelope.created_ms);
                    match tokenizer.tokenize(&request.text) {
                        Ok(tokens) => {
                            let input = ModelInput::Tokens { ids: tokens.ids, truncated: tokens.truncated };
                            jobs.send(Job::new(position, id, input, created_ms, request.deadline_ms)).await.is_ok()
                        }
                        Err(e) => {
                            let code = match e {
                                TokenizeError::TooLong { .. } => ErrorCode::TextTooLong,
                                _ => ErrorCode::DecodeFailed,
                            };
                            let answer = refusal(policy, code, e.to_string(), created_ms);
                            sink.send(SinkItem::Answers(vec![Finished { position, id, answer, feature: None }]))
                                .await
                                .is_ok()
                        }
                    }
                }
                Preparation::Image { .. } => unreachable!("admission gives text requests to text models only"),
            },
            Admission::Image(request) => match preparation {
                Preparation::Image { budget, slots, geometry } => {
                    let bytes = inbound.payload.take().unwrap_or_default();
                    let decode = ImageDecode { request, bytes, position, geometry: *geometry };
                    decode.start(budget, slots, policy, jobs, sink).await
                }
                Preparation::Text(_) => unreachable!("admission gives image requests to image models only"),
            },
            Admission::Answer { id, answer } => {
                if answer.status == Status::Expired {
                    metrics::counter!(m::TTL_DROPPED_TOTAL, "model" => policy.model.to_string()).increment(1);
                }
                sink.send(SinkItem::Answers(vec![Finished { position, id, answer, feature: None }])).await.is_ok()
            }
            Admission::DeadLetter { reason, detail } => {
                sink.send(SinkItem::DeadLetter { inbound: Box::new(inbound), reason, detail }).await.is_ok()
            }
        };
        if !sent {
            tracing::error!("pipeline closed under the consumer; stopping");
            return;
        }
    }
}

/// An `error` answer for a request refused before compute.
fn refusal(policy: &AdmissionPolicy, code: ErrorCode, message: String, created_ms: u64) -> Answer {
    Answer::error(policy.model.as_str(), policy.version.get(), code, message, timings(created_ms, None, now_ms()))
}

/// One image on its way from encoded bytes to a job.
struct ImageDecode {
    request: ImageRequest,
    bytes: Vec<u8>,
    position: Position,
    geometry: InputGeometry,
}

impl ImageDecode {
    /// Reserves the decode's memory (waiting while the budget is spent, which
    /// holds up the consumer: backpressure, not buffering) and a decode slot,
    /// then decodes on a blocking thread; the job or an error answer follows
    /// on its own. Returns false when the pipeline is closed.
    async fn start(
        self,
        budget: &DecodeBudget,
        slots: &Arc<Semaphore>,
        policy: &AdmissionPolicy,
        jobs: &mpsc::Sender<Job>,
        sink: &mpsc::Sender<SinkItem>,
    ) -> bool {
        let (id, created_ms) = (self.request.envelope.id.clone(), self.request.envelope.created_ms);
        let cost = self.request.header.decode_cost(self.geometry.resize_shorter);
        let reservation = match budget.reserve(cost).await {
            Ok(reservation) => reservation,
            Err(over) => {
                let answer = refusal(policy, ErrorCode::ImageTooLarge, over.to_string(), created_ms);
                let finished = Finished { position: self.position, id, answer, feature: None };
                return sink.send(SinkItem::Answers(vec![finished])).await.is_ok();
            }
        };
        let Ok(slot) = slots.clone().acquire_owned().await else { return false };
        let (jobs, sink, policy) = (jobs.clone(), sink.clone(), policy.clone());
        tokio::spawn(async move {
            let ImageDecode { request, bytes, position, geometry } = self;
            let header = request.header;
            let decoded = tokio::task::spawn_blocking(move || {
                let _held = (reservation, slot);
                let image = fleet_image::decode(&bytes, &header, geometry.resize_shorter)?;
                fleet_image::model_input(&image, geometry)
            })
            .await;
            let answer = match decoded {
                Ok(Ok(pixels)) => {
                    let job = Job::new(position, id, ModelInput::Pixels(pixels), created_ms, request.deadline_ms);
                    let _ = jobs.send(job).await;
                    return;
                }
                Ok(Err(e)) => refusal(&policy, image_error_code(&e), e.to_string(), created_ms),
                Err(e) => refusal(&policy, ErrorCode::DecodeFailed, format!("the decoder failed: {e}"), created_ms),
            };
            let _ = sink.send(SinkItem::Answers(vec![Finished { position, id, answer, feature: None }])).await;
        });
        true
    }
}

pub(crate) fn timings(created_ms: u64, infer: Option<(u64, f64)>, now_ms: u64) -> Timings {
    let total = now_ms.saturating_sub(created_ms) as f64;
    match infer {
        Some((started_ms, infer_ms)) => {
            Timings { queue: started_ms.saturating_sub(created_ms) as f64, infer: infer_ms, total }
        }
        None => Timings { queue: total, infer: 0.0, total },
    }
}

struct BatcherStages {
    jobs: mpsc::Receiver<Job>,
    batches: mpsc::Sender<Batch<Job>>,
    feedback: mpsc::UnboundedReceiver<Feedback>,
    sink: mpsc::Sender<SinkItem>,
    /// The adaptive in-flight limit (None: fixed at --max-in-flight) and
    /// where the consumer reads its current value.
    in_flight: Option<InFlightLimit>,
    in_flight_now: Arc<AtomicUsize>,
}

/// Owns the batcher: the only task that touches it, so it needs no lock.
///
/// A batch is formed only once the stage after it can take one, from
/// everything the worker holds at that moment. Forming batches as soon as a
/// bucket was due, and waiting to hand each over before reading more jobs,
/// left the jobs read meanwhile queued outside the batcher: under load the
/// batches were cut from a few milliseconds of arrivals spread over dozens
/// of length buckets (2–13 rows where 32 would fit), and the engine paid its
/// per-call cost for every few rows.
async fn run_batcher(mut stages: BatcherStages, limits: BucketLimits, policy: AdmissionPolicy) {
    let mut batcher: BucketBatcher<Job> = BucketBatcher::new(limits);
    let mut open = true;
    while open || !batcher.is_empty() {
        // Feedback is drained here: the limit it moves lives in this task.
        apply_feedback(&mut stages, &mut batcher, &policy);
        open &= take_waiting_jobs(&mut stages.jobs, &mut batcher);
        let now = now_ms();
        if !answer_expired(batcher.expire(now), &stages.sink, &policy, now).await {
            return;
        }
        // Once the input is closed, whatever is held goes without waiting.
        let ready = if open { batcher.has_due_batch(now) } else { !batcher.is_empty() };
        // Ready: wait for room downstream, still taking jobs and expiring.
        // Not ready: wait for a job or for a bucket's wait to end.
        let wake = if ready { batcher.next_expiry_ms() } else { batcher.next_wake_ms(now) };
        let wait = wake.map(|at| Duration::from_millis(at.saturating_sub(now)));
        tokio::select! {
            permit = stages.batches.reserve(), if ready => {
                let Ok(permit) = permit else { return };
                // Jobs that arrived while the engine was busy join this batch.
                open &= take_waiting_jobs(&mut stages.jobs, &mut batcher);
                let now = now_ms();
                let polled = if open { batcher.poll(now) } else { batcher.flush(now) };
                if !answer_expired(polled.expired, &stages.sink, &policy, now).await {
                    return;
                }
                if let Some(batch) = polled.batch {
                    permit.send(batch);
                }
            }
            job = stages.jobs.recv(), if open => match job {
                Some(job) => push_job(&mut batcher, job),
                None => open = false,
            },
            _ = sleep_or_forever(wait) => {}
        }
    }
}

fn apply_feedback(stages: &mut BatcherStages, batcher: &mut BucketBatcher<Job>, policy: &AdmissionPolicy) {
    while let Ok(feedback) = stages.feedback.try_recv() {
        match feedback {
            Feedback::Timing { bucket, infer_ms, held_ms, first_read_ms } => {
                batcher.observe_inference(bucket, infer_ms);
                if let Some(limit) = stages.in_flight.as_mut() {
                    let now = limit.observe(held_ms, first_read_ms, now_ms());
                    stages.in_flight_now.store(now, Ordering::Relaxed);
                    metrics::gauge!(m::IN_FLIGHT_LIMIT, "model" => policy.model.to_string()).set(now as f64);
                }
            }
            Feedback::RowCap { bucket, rows } => batcher.cap_rows(bucket, rows),
        }
    }
}

/// Moves every job already queued into the batcher; false once the queue
/// is closed and empty.
fn take_waiting_jobs(jobs: &mut mpsc::Receiver<Job>, batcher: &mut BucketBatcher<Job>) -> bool {
    loop {
        match jobs.try_recv() {
            Ok(job) => push_job(batcher, job),
            Err(mpsc::error::TryRecvError::Empty) => return true,
            Err(mpsc::error::TryRecvError::Disconnected) => return false,
        }
    }
}

fn push_job(batcher: &mut BucketBatcher<Job>, job: Job) {
    let (len, deadline) = (job.input.len(), job.deadline_ms);
    batcher.push(job, len, deadline, now_ms());
}

/// Sends `expired` answers for requests the batcher gave up on; false when
/// the sink is gone.
async fn answer_expired(expired: Vec<Job>, sink: &mpsc::Sender<SinkItem>, policy: &AdmissionPolicy, now: u64) -> bool {
    if expired.is_empty() {
        return true;
    }
    metrics::counter!(m::TTL_DROPPED_TOTAL, "model" => policy.model.to_string()).increment(expired.len() as u64);
    let answers = expired
        .into_iter()
        .map(|job| Finished {
            answer: Answer::expired(policy.model.as_str(), policy.version.get(), timings(job.created_ms, None, now)),
            position: job.position,
            id: job.id,
            feature: None,
        })
        .collect();
    sink.send(SinkItem::Answers(answers)).await.is_ok()
}

/// Between batcher and engine: answers what the feature cache already has,
/// hands the rest on as a smaller batch of the same bucket.
async fn run_cache(
    mut batches: mpsc::Receiver<Batch<Job>>,
    compute: mpsc::Sender<EngineCommand>,
    sink: mpsc::Sender<SinkItem>,
    mut cache: FeatureCache,
    policy: AdmissionPolicy,
) {
    let model = policy.model.to_string();
    while let Some(batch) = batches.recv().await {
        let hashes: Vec<&str> = batch.items.iter().map(|j| j.input_hash.as_str()).collect();
        // Hits are answered with the version whose keys they came from.
        let version = policy.version.get();
        let found = cache.lookup(version, &hashes).await;
        let now = now_ms();
        let mut hits = Vec::new();
        let mut misses = Batch { bucket: batch.bucket, items: Vec::new(), lens: Vec::new() };
        for ((job, len), cached) in batch.items.into_iter().zip(batch.lens).zip(found) {
            match cached {
                Some(CachedOutput { output, infer_ms }) => {
                    metrics::histogram!(m::CACHE_SAVED_SECONDS, "model" => model.clone()).record(infer_ms / 1000.0);
                    let t = timings(job.created_ms, Some((now, 0.0)), now);
                    let answer = Answer::ok(policy.model.as_str(), version, output, t);
                    hits.push(Finished { position: job.position, id: job.id, answer, feature: None });
                }
                None => {
                    misses.items.push(job);
                    misses.lens.push(len);
                }
            }
        }
        metrics::counter!(m::CACHE_HITS_TOTAL, "model" => model.clone()).increment(hits.len() as u64);
        metrics::counter!(m::CACHE_MISSES_TOTAL, "model" => model.clone()).increment(misses.items.len() as u64);
        if !hits.is_empty() && sink.send(SinkItem::Answers(hits)).await.is_err() {
            return;
        }
        if !misses.items.is_empty() && compute.send(EngineCommand::Run(misses)).await.is_err() {
            return;
        }
    }
}

async fn sleep_or_forever(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

/// Where the sink's items go, and its count of answers written.
struct SinkOutlets {
    results: ResultSink,
    dead_letters: DeadLetters,
    committer: Committer,
    answered: Arc<AtomicU64>,
}

async fn run_sink(model: ModelName, mut items: mpsc::Receiver<SinkItem>, outlets: SinkOutlets) {
    let SinkOutlets { mut results, dead_letters, committer, answered } = outlets;
    while let Some(item) = items.recv().await {
        match item {
            SinkItem::Answers(finished) => {
                let mut backoff = Backoff::new();
                while let Err(e) = results.write(&finished).await {
                    backoff.wait("redis write", &e).await;
                }
                for f in &finished {
                    let model = f.answer.model.clone();
                    metrics::counter!(m::REQUESTS_TOTAL, "model" => model.clone(), "status" => f.answer.status.as_str()).increment(1);
                    metrics::histogram!(m::E2E_SECONDS, "model" => model).record(f.answer.timings_ms.total / 1000.0);
                    tracing::debug!(id = %f.id, status = f.answer.status.as_str(), "answered");
                    committer.done(&f.position);
                }
                answered.fetch_add(finished.len() as u64, Ordering::Relaxed);
            }
            SinkItem::DeadLetter { inbound, reason, detail } => {
                let mut backoff = Backoff::new();
                while let Err(e) = dead_letters.send(&inbound, reason, &detail).await {
                    backoff.wait("dead-letter send", &e).await;
                }
                metrics::counter!(m::DLQ_TOTAL, "model" => model.to_string(), "reason" => reason).increment(1);
                tracing::warn!(
                    reason,
                    detail,
                    partition = inbound.position.partition,
                    offset = inbound.position.offset,
                    "dead-lettered"
                );
                committer.done(&inbound.position);
            }
        }
    }
}

/// Capped exponential backoff for retrying a write. The item is held
/// meanwhile; the bounded channels behind it stop the consumer, so nothing
/// piles up while Redis or the broker is away.
struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);
    const CAP: Duration = Duration::from_secs(5);

    fn new() -> Self {
        Self { next: Self::FIRST }
    }

    async fn wait(&mut self, what: &str, error: &(dyn std::fmt::Display + Sync)) {
        tracing::warn!(error = %error, retry_in = ?self.next, "{what} failed");
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(Self::CAP);
    }
}
