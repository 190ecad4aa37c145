//! The worker, wired: builds each stage from the arguments and the first
//! model version, joins them by bounded channels, runs them, and stops them
//! in order. A slow stage stops the ones before it instead of letting memory
//! grow: the admission stage simply stops reading.
//!
//! The worker starts without its dependencies: the model loads and warms
//! whether or not Redis answers, `/healthz` passes and `/ready` names what
//! it waits for, and reading begins once Redis answers (a broker that is
//! away is waited for by librdkafka itself). A rollout during an outage
//! completes instead of crash-looping.
//!
//! Shutdown is the same path run dry: reading and the repository watcher
//! stop, each stage finishes what it holds and closes its output, the sink
//! writes the last answers, the status reporter withdraws this worker's
//! backlog, and the stored offsets are committed before `run` returns.

use crate::config::{ModelKind, WorkerArgs};
use crate::guard;
use crate::job::{Job, SinkItem};
use crate::serving::ServingVersion;
use crate::shutdown;
use crate::stages::admission::flow::FlowLimits;
use crate::stages::admission::in_flight_limit::{InFlightLimit, LimitSettings};
use crate::stages::admission::intake::DecodeSettings;
use crate::stages::admission::policy::AdmissionPolicy;
use crate::stages::admission::{AdmissionStage, Ended};
use crate::stages::batch::bucket::Batch;
use crate::stages::batch::downstream::BatchesAhead;
use crate::stages::batch::BatchStage;
use crate::stages::cache::{CacheStage, FeatureCache};
use crate::stages::cancel::{CancelLookup, CancelWatch, CancelledJobs};
use crate::stages::engine::torch::choose_device;
use crate::stages::engine::{BatchFeedback, EngineCommand, EngineStage};
use crate::stages::sink::failure::redis_error_class;
use crate::stages::sink::results::ReplicaWait;
use crate::stages::sink::{AnswerRecords, DeadLetters, LocalRecord, ResultSink, SinkStage};
use crate::stages::source::lanes::LaneTopics;
use crate::stages::source::ledger::Ledger;
use crate::stages::source::Source;
use crate::status::backlog::BacklogPublisher;
use crate::status::endpoints;
use crate::status::gpu::GpuMemory;
use crate::status::health::{Health, SinkProblem};
use crate::status::redis_memory::RedisMemory;
use crate::status::reporter::StatusReporter;
use crate::versions::first::{load_first, FirstVersion};
use crate::versions::handover::{Handover, Piped, VersionTtls};
use crate::versions::load::LoadSettings;
use crate::versions::watcher::Watcher;
use anyhow::{bail, Context, Result};
use fleet_connect::redis::RedisTarget;
use fleet_proto::clock::now_ms;
use fleet_proto::{ModelName, Namespace};
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How many prepared requests may wait for the batch stage, beyond what it holds.
const JOB_QUEUE: usize = 256;
/// Batches formed ahead of the engine: one runs while the next is formed.
const BATCH_QUEUE: usize = 1;
const SINK_QUEUE: usize = 64;
/// How long the first contact with Kafka may take before the worker goes on
/// (unreachable: librdkafka keeps trying) or stops (a settings problem).
const KAFKA_CHECK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the final commit may take at shutdown.
const FINAL_COMMIT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the status reporter may take to withdraw at shutdown.
const REPORTER_STOP_TIMEOUT: Duration = Duration::from_secs(3);

pub async fn run(args: WorkerArgs, signal: impl Future<Output = ()>) -> Result<()> {
    tokio::pin!(signal);
    let names = args.namespace.namespace()?;
    let device = choose_device(args.device)?;
    // Once, before any libtorch work: batches run one at a time on the
    // engine thread, each parallel inside (intra-op threads).
    tch::set_num_interop_threads(1);
    let health = Arc::new(Health::new(args.stall_timeout.as_millis() as u64));
    let local_record = Arc::new(LocalRecord::default());
    endpoints::serve(args.metrics_addr, &args.model, health.clone(), local_record.clone()).await?;
    let mut kafka = args.kafka_config()?;
    // Wrong credentials or an untrusted certificate end the worker here,
    // with the reason, before the model loads (not as endless retries).
    let probe = kafka.clone().remove("statistics.interval.ms").clone();
    tokio::task::spawn_blocking(move || fleet_connect::kafka_check::check_at_start(&probe, KAFKA_CHECK_TIMEOUT))
        .await??;
    let settings = LoadSettings {
        device,
        threads: args.intra_op_threads() as i32,
        memory_limit: args.engine_memory_limit_bytes,
        cpu: args.cpu_features(),
        decode: DecodeSettings { budget_bytes: args.decode_budget_bytes, threads: args.decode_threads },
    };
    let FirstVersion { version, warmed, intake, tokenizer, loader } =
        load_first(&args.model_repo, &args.model, &settings).await?;
    let serving = ServingVersion::new(version.version);
    if version.config.kind == ModelKind::Image && kafka.get("max.partition.fetch.bytes").is_none() {
        // One image message (up to 20 MB + headers) must fit a fetch
        // (librdkafka's default: 1 MB per partition). Text models keep the
        // default: their messages are small and the flow tests rely on it.
        kafka.set("max.partition.fetch.bytes", "20971520");
    }
    let ttl = &version.config.ttl;
    let ttls = VersionTtls::new(version.version, ttl.clone());
    let redis = args.redis.target()?;
    if args.redis_wait_replicas > 0 && args.redis.redis_cluster {
        bail!("--redis-wait-replicas is not supported with --redis-cluster (WAIT covers one node's replicas)");
    }
    let replica_wait = (args.redis_wait_replicas > 0)
        .then_some(ReplicaWait { replicas: args.redis_wait_replicas, timeout: args.redis_wait_timeout });
    // librdkafka's statistics are the consumers' (published as metrics);
    // an operator's statistics.interval.ms would make this producer (and
    // the check above) log a full report at every interval instead.
    let producer_config = kafka.clone().remove("statistics.interval.ms").clone();
    let dead_letters = DeadLetters::new(&producer_config, names.dlq_topic(&args.model), names.topic(&args.model))?;
    let answer_records = AnswerRecords::new(&producer_config, &names, &args.model, args.worker_id())?;

    let (job_tx, job_rx) = mpsc::channel::<Piped<Job>>(JOB_QUEUE);
    let (batch_tx, batch_rx) = mpsc::channel::<Piped<Batch<Job>>>(BATCH_QUEUE);
    // One at a time: the watcher loads the next version only once the
    // engine serves the last one.
    let (handover_tx, handover_rx) = mpsc::channel::<Box<Handover>>(1);
    let (command_tx, command_rx) = mpsc::channel::<EngineCommand>(BATCH_QUEUE);
    let (sink_tx, sink_rx) = mpsc::channel::<SinkItem>(SINK_QUEUE);
    let (batch_feedback_tx, batch_feedback_rx) = mpsc::unbounded_channel::<BatchFeedback>();
    let (held_tx, held_rx) = mpsc::unbounded_channel();
    for &(bucket, rows) in &warmed.warm.row_caps {
        let _ = batch_feedback_tx.send(BatchFeedback::RowCap { version: version.version, bucket, rows });
    }
    let (stop_reading, reading) = shutdown::channel();
    let cancelled = Arc::new(CancelledJobs::default());
    let cancel_lookup = Arc::new(std::sync::OnceLock::new());
    let ahead = Arc::new(BatchesAhead::default());
    let (stop_reporting, reporting) = shutdown::channel();
    let busy_us = Arc::new(AtomicU64::new(0));
    let answered = Arc::new(AtomicU64::new(0));

    // What the first batches are looked up under in the feature cache.
    let first_served = (version.version, warmed.loaded.model.precision);
    let ledger = Arc::new(Ledger::new(health.clone()));
    // A backlog: more held than the batch running, the next one and a
    // third (the engine is what the path waits for), or, where the
    // in-flight limit is smaller, half its floor: reading resumes at half
    // the limit, so a worker at its limit never holds less.
    let floor = args.min_in_flight.min(args.max_in_flight);
    let backlog_messages = (3 * version.config.batching.max_batch_size).min(floor / 2).max(1);
    let held = ledger.clone();
    let engine = EngineStage {
        model: args.model.clone(),
        namespace: names.clone(),
        threads: settings.threads,
        busy_us: busy_us.clone(),
        serving: serving.clone(),
        health: health.clone(),
        commands: command_rx,
        sink: sink_tx.clone(),
        batch_feedback: batch_feedback_tx,
        held_feedback: held_tx,
        cancelled: cancelled.clone(),
        cancel_lookup: cancel_lookup.clone(),
        runtime: tokio::runtime::Handle::current(),
        ahead: ahead.clone(),
        tuner: args.engine_tuner(device),
        backlog: Box::new(move || held.held().0 >= backlog_messages),
    }
    .spawn(warmed.loaded)?;
    health.set_warm();
    tracing::info!(model = %args.model, version = version.version, "model warm");
    let redis_parts = RedisParts {
        target: &redis,
        names: &names,
        model: &args.model,
        worker_id: args.worker_id(),
        ttls: ttls.clone(),
        task_tag: version.config.task.tag(),
        replica_wait,
        cancelled: cancelled.clone(),
    };
    let redacted_url = args.redis.redacted_url();
    let connecting = wait_for_redis(redis_parts, &health, &redacted_url);
    let Connected { results, cache, cancel_watch, backlog, memory } = tokio::select! {
        connected = connecting => connected,
        _ = &mut signal => {
            tracing::info!("stopped before Redis answered");
            return Ok(());
        }
    };
    tracing::info!(model = %args.model, "Redis answers; subscribing");
    let batch_limits = version.config.batching.limits(version.config.max_input_len());
    let watcher = Watcher {
        repo: args.model_repo.clone(),
        model: args.model.clone(),
        settings,
        serving: serving.clone(),
        loader,
        interval: args.model_poll_interval,
        tokenizer,
        serving_config: version.config.clone(),
        shared_decoding: intake.decoding().cloned(),
        ttls: ttls.clone(),
        handovers: handover_tx,
        shutdown: reading.clone(),
    };
    let watching = tokio::spawn(watcher.run());
    let batch_cancel_lookup = cancel_watch.lookup.clone();
    let _ = cancel_lookup.set(cancel_watch.lookup.clone());
    let cancel_watching = tokio::spawn(cancel_watch.run(reading.clone()));

    let (source, inbox) = Source::subscribe(
        kafka,
        ledger.clone(),
        &names.consumer_group(&args.model),
        LaneTopics::of(&names, &args.model),
        args.prefetch_kbytes,
        args.bulk_share,
    )?;
    let source = Arc::new(source);
    let committer = source.committer();
    let reporter = StatusReporter {
        answered: answered.clone(),
        busy_us,
        source: source.clone(),
        backlog,
        memory,
        ttls,
        health: health.clone(),
        gpu: device.is_cuda().then(open_gpu_memory).flatten(),
        shutdown: reporting,
    };
    let reporter = tokio::spawn(reporter.run());
    let heap_trim = (!args.heap_trim_interval.is_zero()).then_some(args.heap_trim_interval);
    let heap = tokio::spawn(crate::heap::keep_trimmed(heap_trim));
    // Set once the drain starts: a stage ending after it is not a failure.
    let stopping = Arc::new(AtomicBool::new(false));
    let sink = SinkStage {
        items: sink_rx,
        results,
        answer_records,
        dead_letters,
        local: local_record,
        committer: committer.clone(),
        answered,
        health: health.clone(),
    };
    let sink = tokio::spawn(watched("sink", health.clone(), stopping.clone(), sink.run()));
    let batch = BatchStage {
        model: args.model.clone(),
        limits: batch_limits,
        version: version.version,
        jobs: job_rx,
        batches: batch_tx,
        feedback: batch_feedback_rx,
        sink: sink_tx.clone(),
        ledger: ledger.clone(),
        cancelled: cancelled.clone(),
        bulk_share: args.bulk_share,
        // Where rows are nearly free (a GPU) bulk fills interactive
        // batches; on a CPU each row costs the interactive rows beside it.
        bulk_fill: args.bulk_fill.unwrap_or(device.is_cuda()),
        ahead: ahead.clone(),
        batch_percent: 100,
        // Chosen on the engine's timings where the engine tunes itself.
        speed_caps: args.engine_tuning && !device.is_cuda(),
    };
    let batch = tokio::spawn(watched("batcher", health.clone(), stopping.clone(), batch.run()));
    let cache = CacheStage {
        batches: batch_rx,
        engine: command_tx,
        sink: sink_tx.clone(),
        cache,
        version: first_served,
        ledger,
        cancelled: cancelled.clone(),
        cancel_lookup: batch_cancel_lookup,
        ahead,
    };
    let cache = tokio::spawn(watched("cache", health.clone(), stopping.clone(), cache.run()));
    let admission = AdmissionStage {
        inbox,
        policy: AdmissionPolicy {
            model: args.model.clone(),
            version: version.version,
            intake,
            request_ttls: ttl.request_ttls(),
            answers: version.config.answers,
            cancelled,
        },
        flow: FlowLimits {
            max_messages: args.max_in_flight.max(1),
            max_bytes: args.max_in_flight_bytes.max(1),
            low_water_percent: usize::from(args.low_water_percent),
        },
        in_flight: adaptive_in_flight_limit(&args),
        held: held_rx,
        health: health.clone(),
        jobs: job_tx,
        sink: sink_tx,
        handovers: handover_rx,
        shutdown: reading,
    };
    // Not spawned: reading runs on the thread that runs `run` (`main`'s
    // `block_on`), a thread of its own beside the runtime's workers. On a
    // small machine whose cores the engine and the clients keep busy, a
    // spawned admission task shared two workers with every other task and
    // the whole path ran at 0.6 of the engine instead of 0.8
    // (docs/benchmarks.md).
    let admission = admission.run();
    tokio::pin!(admission);

    // Runs until the signal, or until reading ends on its own (a stage
    // after it is gone).
    let ended_early = tokio::select! {
        _ = &mut signal => None,
        ended = &mut admission => Some(ended),
    };
    stop_reading.fire();
    stopping.store(true, Ordering::Relaxed);
    tracing::info!(in_flight = source.in_flight(), timeout = ?args.drain_timeout, "draining");
    // Aborted, not only told: it may be loading a version, or waiting to
    // hand one to an admission stage that no longer reads.
    watching.abort();
    let _ = watching.await;
    cancel_watching.abort();
    heap.abort();
    let drain = async {
        let ended = match ended_early {
            Some(ended) => ended,
            None => admission.await,
        };
        batch.await.context("batch task")?;
        cache.await.context("cache task")?;
        let joined = tokio::task::spawn_blocking(move || engine.join()).await.context("engine join")?;
        if joined.is_err() {
            bail!("engine thread panicked");
        }
        sink.await.context("sink task")?;
        Ok(ended)
    };
    let drained = tokio::time::timeout(args.drain_timeout, drain).await;
    stop_reporting.fire();
    let _ = tokio::time::timeout(REPORTER_STOP_TIMEOUT, reporter).await;
    let ended = match drained {
        Ok(result) => Some(result?),
        // What is not answered yet keeps its offset uncommitted: the next
        // owner of the partition reads it again.
        Err(_) => {
            tracing::warn!(left = source.in_flight(), "drain timed out; unanswered messages will be redelivered");
            None
        }
    };
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
    if ended_early.is_some() || ended == Some(Ended::PipelineClosed) {
        bail!("a stage of the pipeline stopped; see the log above");
    }
    tracing::info!("stopped");
    Ok(())
}

/// What the worker's Redis connections are made from.
struct RedisParts<'a> {
    target: &'a RedisTarget,
    names: &'a Namespace,
    model: &'a ModelName,
    worker_id: String,
    ttls: VersionTtls,
    task_tag: String,
    replica_wait: Option<ReplicaWait>,
    cancelled: Arc<CancelledJobs>,
}

/// The worker's Redis connections: answers, the feature cache, the cancel
/// watch, the backlog report and the memory marker.
struct Connected {
    results: ResultSink,
    cache: FeatureCache,
    cancel_watch: CancelWatch,
    backlog: BacklogPublisher,
    memory: RedisMemory,
}

/// Redis is waited for, not required at start: tried again with a capped
/// backoff for as long as it takes, each failure on `/ready` ("cannot write
/// to redis (transient failure): ...", or "fleet failure" for a refusal
/// such as a wrong password) and in the log, never an exit.
async fn wait_for_redis(parts: RedisParts<'_>, health: &Health, url: &str) -> Connected {
    const FIRST: Duration = Duration::from_millis(200);
    const CAP: Duration = Duration::from_secs(5);
    let mut backoff = FIRST;
    let mut attempt = 0u64;
    loop {
        attempt += 1;
        match connect_redis(&parts).await {
            Ok(connected) => {
                health.set_sink_problem("redis", None, now_ms());
                return connected;
            }
            Err(e) => {
                // A refusal (wrong password, ACL) is waited for too, as the
                // sink waits for it: the probe names it as a fleet failure.
                let class = redis_error_class(&e).as_str();
                let reason = e.to_string();
                // Once, then every ~minute: the probe carries it meanwhile.
                if attempt == 1 || attempt % 12 == 0 {
                    tracing::warn!(redis = url, error = %reason, class, attempt, "Redis does not answer; waiting for it");
                }
                let problem = SinkProblem { class, target: "redis", reason };
                health.set_sink_problem("redis", Some(problem), now_ms());
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(CAP);
    }
}

async fn connect_redis(parts: &RedisParts<'_>) -> Result<Connected, redis::RedisError> {
    let RedisParts { target, names, model, .. } = parts;
    Ok(Connected {
        results: ResultSink::connect(target, (*names).clone(), parts.ttls.clone())
            .await?
            .with_replica_wait(parts.replica_wait),
        cache: FeatureCache::connect(target, (*names).clone(), (*model).clone(), parts.task_tag.clone()).await?,
        cancel_watch: CancelWatch {
            lookup: CancelLookup::connect(target, (*names).clone()).await?,
            jobs: parts.cancelled.clone(),
        },
        backlog: BacklogPublisher::connect(target, names.backlog_key(model), parts.worker_id.clone()).await?,
        memory: RedisMemory::connect(target, names.memory_marker_key(), parts.worker_id.clone()).await?,
    })
}

/// The AIMD in-flight limit the arguments ask for; `None` (fixed at
/// `--max-in-flight`) with `--in-flight-target-wait 0`.
fn adaptive_in_flight_limit(args: &WorkerArgs) -> Option<InFlightLimit> {
    (!args.in_flight_target_wait.is_zero()).then(|| {
        InFlightLimit::new(LimitSettings {
            floor: args.min_in_flight.min(args.max_in_flight).max(1),
            ceiling: args.max_in_flight.max(1),
            target_ms: args.in_flight_target_wait.as_secs_f64() * 1000.0,
            backoff: 0.8,
        })
    })
}

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

fn open_gpu_memory() -> Option<GpuMemory> {
    GpuMemory::open().map_err(|e| tracing::warn!(error = %e, "no NVML: GPU memory gauges are off")).ok()
}
