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
use crate::guard::{self, Stage};
use crate::health::{self, Health};
use crate::in_flight_limit::{InFlightLimit, LimitSettings};
use crate::lifecycle::{Refusals, ServingVersion};
use crate::message::{Inbound, Position};
use crate::metrics as m;
use crate::model::ModelInput;
use crate::repository::{self, ModelVersion};
use crate::serve::{EngineCommand, EngineThread, Feedback};
use crate::sink::{BacklogPublisher, DeadLetter, DeadLetters, Finished, LocalRecord, ResultSink, SinkItem, SinkStage};
use crate::source::{Inbox, Ledger, Source};
use crate::tokenize::{TextTokenizer, TokenizeError};
use crate::watcher::{load_version, record_refusal, LoadContext, Refused, Warmed, Watcher};
use anyhow::{bail, Context, Result};
use fleet_image::InputGeometry;
use fleet_ops::endpoints::{self, Checks};
use fleet_proto::clock::now_ms;
use fleet_proto::{Answer, ErrorCode, RequestId, Status, Timings};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    let health = Arc::new(Health::new(args.stall_timeout.as_millis() as u64));
    let local_record = Arc::new(LocalRecord::default());
    serve_endpoints(&args, health.clone(), local_record.clone()).await?;
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
    let dead_letters = DeadLetters::new(&kafka, args.model.dlq_topic(), args.model.topic())?;

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

    let ledger = Arc::new(Ledger::new(args.model.as_str(), health.clone()));
    let (source, mut inbox) = Source::subscribe(
        kafka,
        ledger.clone(),
        &args.model.consumer_group(),
        &args.model.topic(),
        args.prefetch_kbytes,
    )?;
    let source = Arc::new(source);
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
        stalled_gauge: metrics::gauge!(m::SINK_STALLED_SECONDS, "model" => args.model.to_string()),
        source: source.clone(),
        publisher: backlog,
        health: health.clone(),
        gpu,
        ready_gauge,
    };
    let reporter = tokio::spawn(report_status(status, reporting_stopped));
    // Set once the drain starts: a stage ending after it is not a failure.
    let stopping = Arc::new(AtomicBool::new(false));
    let sink = SinkStage {
        model: args.model.clone(),
        items: sink_rx,
        results,
        dead_letters,
        local: local_record,
        committer: committer.clone(),
        answered,
        health: health.clone(),
    };
    let sink = tokio::spawn(watched("sink", health.clone(), stopping.clone(), sink.run()));
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
        ledger: ledger.clone(),
    };
    let batcher = tokio::spawn(watched(
        "batcher",
        health.clone(),
        stopping.clone(),
        run_batcher(stages, ctx.limits.clone(), policy.clone()),
    ));
    let cache_stage = run_cache(batch_rx, command_tx, sink_tx.clone(), cache, policy.clone(), ledger.clone());
    let cached = tokio::spawn(watched("cache", health.clone(), stopping.clone(), cache_stage));

    let flow = FlowLimits {
        max_messages: args.max_in_flight.max(1),
        max_bytes: args.max_in_flight_bytes.max(1),
        low_water_percent: usize::from(args.low_water_percent),
    };
    let gates = Gates { flow, in_flight_now, health: health.clone() };
    let outlets = Outlets { jobs: &job_tx, sink: &sink_tx };
    let ended = consume(&mut inbox, gates, &policy, &preparation, outlets, shutdown).await;
    stopping.store(true, Ordering::Relaxed);
    tracing::info!(in_flight = source.in_flight(), timeout = ?args.drain_timeout, "draining");
    // The watcher holds a sender of the engine's queue: stop it first, or
    // the queue never closes and the engine never finishes. Aborted, not
    // awaited: it may be waiting to hand a swap to a stuck engine.
    let _ = stop_watching.send(());
    watching.abort();
    let _ = watching.await;
    drop((job_tx, sink_tx, inbox));
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
    let _ = tokio::time::timeout(Duration::from_secs(3), reporter).await;
    match drained {
        Ok(result) => result?,
        // What is not answered yet keeps its offset uncommitted: the next
        // owner of the partition reads it again.
        Err(_) => tracing::warn!(left = source.in_flight(), "drain timed out; unanswered messages will be redelivered"),
    }
    // Bounded: a broker that does not answer must not keep a stopping pod.
    let commit = tokio::task::spawn_blocking(move || committer.commit_now());
    match tokio::time::timeout(FINAL_COMMIT_TIMEOUT, commit).await {
        Ok(Ok(result)) => result.context("final offset commit")?,
        Ok(Err(e)) => tracing::warn!(error = %e, "final offset commit panicked"),
        Err(_) => tracing::warn!("final offset commit timed out; the last auto-commit stands"),
    }
    if let Ok(mut source) = Arc::try_unwrap(source) {
        source.close();
    }
    if ended == Ended::PipelineClosed {
        bail!("a stage of the pipeline stopped; see the log above");
    }
    tracing::info!("stopped");
    Ok(())
}

/// How long the final commit may take at shutdown.
const FINAL_COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs a stage task; if it ends (or panics) before the drain began, the
/// worker is broken beyond one message: liveness fails, naming the stage.
async fn watched(stage: &'static str, health: Arc<Health>, stopping: Arc<AtomicBool>, task: impl Future<Output = ()>) {
    use futures::FutureExt;
    let outcome = std::panic::AssertUnwindSafe(task).catch_unwind().await;
    if let Err(panic) = &outcome {
        tracing::error!(stage, panic = guard::panic_message(panic.as_ref()), "a stage panicked");
    }
    if outcome.is_err() || !stopping.load(Ordering::Relaxed) {
        tracing::error!(stage, "a stage stopped while the worker runs");
        health.set_stage_stopped(stage);
    }
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
        let VersionInputs { inputs, preparation, sample, probes, tokenizer } = match prepare_version(args, &version) {
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
            probes,
            cpu: args.cpu_features(),
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

/// How a version's inputs are admitted and prepared, and what it is loaded
/// with.
struct VersionInputs {
    inputs: InputPolicy,
    preparation: Preparation,
    /// One real input to warm it up with.
    sample: ModelInput,
    /// Real inputs a lower precision must agree with fp32 on.
    probes: Vec<ModelInput>,
    /// tokenizer.json's bytes (text models).
    tokenizer: Option<Vec<u8>>,
}

fn prepare_version(args: &WorkerArgs, version: &ModelVersion) -> Result<VersionInputs> {
    match version.config.kind {
        ModelKind::Text => {
            let text = version.config.text().context("text model without [text]")?;
            let path = version.file("tokenizer.json");
            let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            let tokenizer = TextTokenizer::from_bytes(&path, &bytes, text.max_seq_len, text.truncate)?;
            let tokens = |text: &str| -> Result<ModelInput> {
                let tokens = tokenizer.tokenize(text)?;
                Ok(ModelInput::Tokens { ids: tokens.ids, truncated: false })
            };
            let sample = tokens(WARM_UP_TEXT)?;
            let probes = PROBE_TEXTS.iter().map(|text| tokens(text)).collect::<Result<_>>()?;
            Ok(VersionInputs {
                inputs: InputPolicy::Text { max_text_bytes: text.max_text_bytes },
                preparation: Preparation::Text(Box::new(tokenizer)),
                sample,
                probes,
                tokenizer: Some(bytes),
            })
        }
        ModelKind::Image => {
            let image = version.config.image().context("image model without [image]")?;
            let preparation = Preparation::Image {
                budget: DecodeBudget::new(args.decode_budget_bytes),
                slots: Arc::new(Semaphore::new(args.decode_threads.max(1))),
                geometry: image.geometry(),
            };
            let photo = ModelInput::Pixels(fleet_image::synthetic::photo(image.size, image.size, 1).pixels);
            Ok(VersionInputs {
                inputs: InputPolicy::Image { limits: image.limits() },
                preparation,
                probes: vec![photo.clone()],
                sample: photo,
                tokenizer: None,
            })
        }
    }
}

/// Texts of several lengths and kinds a lower precision's embeddings must
/// match fp32's on (cosine per row), run as one padded batch.
const PROBE_TEXTS: &[&str] = &[
    WARM_UP_TEXT,
    "A man is eating food.",
    "Stock markets fell sharply on Tuesday after the central bank raised interest rates by half a point, \
     the largest increase in two decades, citing inflation that has proved more persistent than expected.",
    "How do I reset my password?",
    "The cat sat quietly on the warm windowsill, watching the rain trace slow lines down the glass while \
     the kettle began to whistle in the kitchen behind her.",
    "ok",
];

/// Real text for warm-up batches: each bucket's rows are its tokens repeated
/// to the bucket's length.
const WARM_UP_TEXT: &str = "A fleet of workers reads requests from Kafka, batches them by length, \
    and writes each answer to Redis before its client gives up waiting.";

/// `/metrics`, `/healthz` and `/ready`, up before the model loads: a probe
/// during warm-up gets "not ready" rather than a refused connection.
async fn serve_endpoints(args: &WorkerArgs, health: Arc<Health>, local: Arc<LocalRecord>) -> Result<()> {
    let recorder = m::install().context("installing the metrics recorder")?;
    m::register(args.model.as_str());
    let (live, ready) = (health.clone(), health);
    let checks = Checks {
        live: Arc::new(move || health::liveness(&live.facts(), now_ms())),
        ready: Arc::new(move || health::readiness(&ready.facts(), now_ms())),
        pages: vec![("/dead-letters", Arc::new(move || local.to_json()))],
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
    stalled_gauge: metrics::Gauge,
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
    let StatusReport { answered, busy_us, source, mut publisher, health, gpu, ready_gauge, drain_gauge, stalled_gauge } =
        report;
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
        let facts = health.facts();
        stalled_gauge.set(health::stalled_ms(&facts, now_ms()) as f64 / 1000.0);
        ready_gauge.set(if health::readiness(&facts, now_ms()).is_ok() { 1.0 } else { 0.0 });
    }
    ready_gauge.set(0.0);
    // Bounded: Redis may be what is away.
    let _ = tokio::time::timeout(Duration::from_secs(2), publisher.withdraw()).await;
}

/// The consumer's bounds: the flow limits, the in-flight limit as the
/// batcher's AIMD has set it, and the sink's health (a write failure no
/// retry can cure stops the reading).
struct Gates {
    flow: FlowLimits,
    in_flight_now: Arc<AtomicUsize>,
    health: Arc<Health>,
}

/// Where a prepared message goes.
#[derive(Clone, Copy)]
struct Outlets<'a> {
    jobs: &'a mpsc::Sender<Job>,
    sink: &'a mpsc::Sender<SinkItem>,
}

/// How often an idle consumer loop looks at its gates again.
const GATE_RECHECK: Duration = Duration::from_millis(250);

/// Why the consumer loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    Shutdown,
    /// A stage after it is gone: the worker cannot go on.
    PipelineClosed,
}

async fn consume(
    inbox: &mut Inbox,
    gates: Gates,
    policy: &AdmissionPolicy,
    preparation: &Preparation,
    outlets: Outlets<'_>,
    shutdown: impl Future<Output = ()>,
) -> Ended {
    tokio::pin!(shutdown);
    let mut gate = FlowGate::new(gates.flow);
    let paused_gauge = metrics::gauge!(m::CONSUMER_PAUSED, "model" => policy.model.to_string());
    let mut blocked = false;
    loop {
        gate.set_max_messages(gates.in_flight_now.load(Ordering::Relaxed));
        let (messages, bytes) = inbox.held();
        match gate.update(messages, bytes) {
            Some(Transition::Pause) => tracing::info!(messages, bytes, "in-flight limit reached; reading stops"),
            Some(Transition::Resume) => tracing::info!(messages, bytes, "below the low-water mark; reading again"),
            None => {}
        }
        if gates.health.sink_blocked() != blocked {
            blocked = !blocked;
            if blocked {
                tracing::error!("a write no retry cures is failing; reading stops until it works (see /ready)");
            } else {
                tracing::info!("writes work again; reading again");
            }
        }
        let paused = gate.is_paused() || blocked;
        paused_gauge.set(if paused { 1.0 } else { 0.0 });
        if paused {
            // Not `consumer.pause()`: not reading lets each partition's
            // capped prefetch fill and stop fetching, and resuming needs no
            // refetch (docs/operations.md §2). The group protocol is served
            // by the source's own task meanwhile.
            tokio::select! {
                _ = &mut shutdown => return Ended::Shutdown,
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            continue;
        }
        let inbound = tokio::select! {
            _ = &mut shutdown => return Ended::Shutdown,
            received = inbox.recv() => match received {
                Some(inbound) => inbound,
                None => return Ended::PipelineClosed,
            },
            // Looks at the gates again now and then while nothing arrives
            // (`recv` is cancel-safe: nothing is lost).
            _ = tokio::time::sleep(GATE_RECHECK) => continue,
        };
        let span =
            tracing::debug_span!("message", partition = inbound.position.partition, offset = inbound.position.offset);
        let prepared = span.in_scope(|| prepare_contained(policy, preparation, inbound, now_ms()));
        if !hand_on(prepared, policy, preparation, outlets).await {
            tracing::error!("pipeline closed under the consumer; stopping");
            return Ended::PipelineClosed;
        }
    }
}

/// One message, prepared: where it goes next.
enum Prepared {
    Job(Job),
    Answer(Finished),
    DeadLetter(DeadLetter),
    Image(ImageDecode),
}

/// Admits and prepares one message; a panic anywhere in it becomes that
/// message's `internal_error` answer, or a dead letter when it has no
/// readable id. The message is borrowed by the work and owned here, so it
/// is still whole when the work panics.
fn prepare_contained(policy: &AdmissionPolicy, preparation: &Preparation, mut inbound: Inbound, now: u64) -> Prepared {
    let model = policy.model.as_str();
    match guard::contain(model, Stage::Prepare, || prepare_message(policy, preparation, &mut inbound, now)) {
        Ok(prepared) => prepared,
        Err(panic) => {
            let detail = format!("preparing the request failed: {panic}");
            let id = guard::contain(model, Stage::Prepare, || {
                let ce_id = inbound.header_pairs().find(|(n, _)| n.eq_ignore_ascii_case(fleet_proto::headers::ID));
                fleet_proto::envelope::readable_id(inbound.key.as_deref(), ce_id.and_then(|(_, v)| v))
            });
            match id {
                Ok(Some(id)) => {
                    let answer = refusal(policy, ErrorCode::InternalError, detail, now);
                    Prepared::Answer(Finished { position: inbound.position, id, answer, feature: None })
                }
                _ => Prepared::DeadLetter(DeadLetter::of_message(inbound, PREPARE_PANICKED, detail)),
            }
        }
    }
}

/// The dead-letter reason of a message whose preparation panicked and that
/// has no readable id.
pub const PREPARE_PANICKED: &str = "prepare_panicked";

fn prepare_message(policy: &AdmissionPolicy, preparation: &Preparation, inbound: &mut Inbound, now: u64) -> Prepared {
    let position = inbound.position.clone();
    match policy.admit(inbound, now) {
        Admission::Text(request) => {
            let Preparation::Text(tokenizer) = preparation else {
                unreachable!("admission gives text requests to text models only")
            };
            let (id, created_ms) = (request.envelope.id.clone(), request.envelope.created_ms);
            match tokenizer.tokenize(&request.text) {
                Ok(tokens) => {
                    let input = ModelInput::Tokens { ids: tokens.ids, truncated: tokens.truncated };
                    Prepared::Job(Job::new(position, id, input, created_ms, request.deadline_ms))
                }
                Err(e) => {
                    let code = match e {
                        TokenizeError::TooLong { .. } => ErrorCode::TextTooLong,
                        _ => ErrorCode::DecodeFailed,
                    };
                    let answer = refusal(policy, code, e.to_string(), created_ms);
                    Prepared::Answer(Finished { position, id, answer, feature: None })
                }
            }
        }
        Admission::Image(request) => {
            let Preparation::Image { geometry, .. } = preparation else {
                unreachable!("admission gives image requests to image models only")
            };
            let bytes = inbound.payload.take().unwrap_or_default();
            Prepared::Image(ImageDecode { request, bytes, position, geometry: *geometry })
        }
        Admission::Answer { id, answer } => {
            if answer.status == Status::Expired {
                metrics::counter!(m::TTL_DROPPED_TOTAL, "model" => policy.model.to_string()).increment(1);
            }
            Prepared::Answer(Finished { position, id, answer, feature: None })
        }
        Admission::DeadLetter { reason, detail } => {
            Prepared::DeadLetter(DeadLetter::of_message(std::mem::replace(inbound, empty(position)), reason, detail))
        }
    }
}

/// What is left of a message once it was moved into a dead letter.
fn empty(position: Position) -> Inbound {
    Inbound { position, key: None, headers: Vec::new(), payload: None }
}

/// Sends a prepared message on; false when the pipeline is closed.
async fn hand_on(prepared: Prepared, policy: &AdmissionPolicy, preparation: &Preparation, out: Outlets<'_>) -> bool {
    match prepared {
        Prepared::Job(job) => out.jobs.send(job).await.is_ok(),
        Prepared::Answer(finished) => out.sink.send(SinkItem::Answers(vec![finished])).await.is_ok(),
        Prepared::DeadLetter(letter) => out.sink.send(SinkItem::DeadLetter(Box::new(letter))).await.is_ok(),
        Prepared::Image(decode) => {
            let Preparation::Image { budget, slots, .. } = preparation else { return true };
            decode.start(budget, slots, policy, out.jobs, out.sink).await
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
                Err(e) => {
                    let panic =
                        if e.is_panic() { guard::panic_message(e.into_panic().as_ref()) } else { e.to_string() };
                    guard::record(policy.model.as_str(), Stage::Decode, &panic);
                    refusal(&policy, ErrorCode::DecodeFailed, format!("the decoder failed: {panic}"), created_ms)
                }
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
    /// Which partitions this worker owns: work of revoked ones is dropped
    /// before compute (their next owner reads it again).
    ledger: Arc<Ledger>,
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
    let mut revocations_seen = stages.ledger.revocations();
    while open || !batcher.is_empty() {
        // Feedback is drained here: the limit it moves lives in this task.
        apply_feedback(&mut stages, &mut batcher, &policy);
        open &= take_waiting_jobs(&mut stages.jobs, &mut batcher, &stages.ledger, &policy);
        let revocations = stages.ledger.revocations();
        if revocations != revocations_seen {
            revocations_seen = revocations;
            let dropped = batcher.retain(|job| stages.ledger.is_current(&job.position));
            count_revoked(&policy, dropped);
        }
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
                open &= take_waiting_jobs(&mut stages.jobs, &mut batcher, &stages.ledger, &policy);
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
                Some(job) => push_job(&mut batcher, job, &stages.ledger, &policy),
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
fn take_waiting_jobs(
    jobs: &mut mpsc::Receiver<Job>,
    batcher: &mut BucketBatcher<Job>,
    ledger: &Ledger,
    policy: &AdmissionPolicy,
) -> bool {
    loop {
        match jobs.try_recv() {
            Ok(job) => push_job(batcher, job, ledger, policy),
            Err(mpsc::error::TryRecvError::Empty) => return true,
            Err(mpsc::error::TryRecvError::Disconnected) => return false,
        }
    }
}

/// Holds `job` for a batch, unless its partition was revoked since it was read.
fn push_job(batcher: &mut BucketBatcher<Job>, job: Job, ledger: &Ledger, policy: &AdmissionPolicy) {
    if !ledger.is_current(&job.position) {
        count_revoked(policy, 1);
        return;
    }
    let (len, deadline) = (job.input.len(), job.deadline_ms);
    batcher.push(job, len, deadline, now_ms());
}

fn count_revoked(policy: &AdmissionPolicy, dropped: usize) {
    if dropped > 0 {
        tracing::debug!(dropped, "dropped work of revoked partitions before compute");
        metrics::counter!(m::REVOKED_DROPPED_TOTAL, "model" => policy.model.to_string()).increment(dropped as u64);
    }
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
    ledger: Arc<Ledger>,
) {
    let model = policy.model.to_string();
    while let Some(mut batch) = batches.recv().await {
        // The last look before compute: a rebalance may have come since the
        // batch was formed.
        count_revoked(&policy, batch.retain(|job| ledger.is_current(&job.position)));
        if batch.items.is_empty() {
            continue;
        }
        let hashes: Vec<&str> = batch.items.iter().map(|j| j.input_hash.as_str()).collect();
        // Hits are answered with the version whose keys they came from.
        let (version, precision) = policy.version.get_with_precision();
        let found = cache.lookup(version, precision, &hashes).await;
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
