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
//! Shutdown is the same path run dry ([`drain`]).
//!
//! Inside: [`pipes`] (the channels between the stages), [`build`] (each
//! stage built), [`redis`] (the connections, waited for), [`tasks`] (every
//! task started), [`drain`].

mod build;
mod drain;
mod pipes;
mod redis;
mod tasks;

use crate::config::{ModelKind, ModelVersion, WorkerArgs};
use crate::core::batches_ahead::BatchesAhead;
use crate::core::cancel_tracking::{CancelLookup, CancelledJobs};
use crate::core::health::Health;
use crate::core::precision::{CpuFeatures, Precision};
use crate::core::serving::ServingVersion;
use crate::stages::admission::intake::{DecodeSettings, Intake};
use crate::stages::engine::torch::choose_device;
use crate::stages::engine::BatchFeedback;
use crate::stages::handover::VersionTtls;
use crate::stages::sink::results::ReplicaWait;
use crate::stages::sink::{AnswerRecords, DeadLetters, LocalRecord};
use crate::stages::source::ledger::Ledger;
use crate::status::endpoints;
use crate::status::gpu::GpuMemory;
use crate::versions::first::{load_first, FirstVersion};
use crate::versions::load::{LoadSettings, Loader};
use anyhow::{bail, Result};
use fleet_connect::redis::RedisTarget;
use fleet_proto::Namespace;
use pipes::Pipes;
use rdkafka::ClientConfig;
use redis::{wait_for_redis, Connected, RedisParts};
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How long the first contact with Kafka may take before the worker goes on
/// (unreachable: librdkafka keeps trying) or stops (a settings problem).
const KAFKA_CHECK_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn run(args: WorkerArgs, signal: impl Future<Output = ()>) -> Result<()> {
    tokio::pin!(signal);
    let start = start(&args).await?;
    let first = load_first(&args.model_repo, &args.model, &start.settings).await?;
    let warm = warm_up(&args, start, first)?;
    let connecting = warm.connect_redis(&args);
    let connected = tokio::select! {
        connected = connecting => connected,
        _ = &mut signal => {
            tracing::info!("stopped before Redis answered");
            return Ok(());
        }
    };
    tracing::info!(model = %args.model, "Redis answers; subscribing");
    let (running, admission) = tasks::start_tasks(&args, warm, connected)?;
    // Not spawned: reading runs on the thread that runs `run` (`main`'s
    // `block_on`), a thread of its own beside the runtime's workers. On a
    // small machine whose cores the engine and the clients keep busy, a
    // spawned admission task shares two workers with every other task and
    // the whole path runs slower (docs/benchmarks.md).
    drain::serve_until_stopped(running, admission.run(), signal).await
}

/// The worker once its first version is warm on the engine thread: what
/// the rest of the start needs.
struct Warm {
    shared: Shared,
    pipes: Pipes,
    engine: std::thread::JoinHandle<()>,
    version: ModelVersion,
    /// The version and precision the first batches are looked up under in
    /// the feature cache.
    first_served: (u64, Precision),
    intake: Intake,
    tokenizer: Option<Vec<u8>>,
    loader: Loader,
    settings: LoadSettings,
    kafka: ClientConfig,
    local_record: Arc<LocalRecord>,
    ttls: VersionTtls,
    redis: RedisTarget,
    replica_wait: Option<ReplicaWait>,
    dead_letters: DeadLetters,
    answer_records: AnswerRecords,
}

/// Makes the shared state and the channels, and starts the engine thread
/// on the first version (warm: `/ready` no longer waits for the model).
fn warm_up(args: &WorkerArgs, start: Start, first: FirstVersion) -> Result<Warm> {
    let Start { names, device, health, local_record, mut kafka, settings } = start;
    let FirstVersion { version, warmed, intake, tokenizer, loader } = first;
    fit_messages_of(&version, &mut kafka);
    let (redis, replica_wait) = redis_settings(args)?;
    let (dead_letters, answer_records) = answer_producers(args, &names, &kafka)?;
    let shared = Shared {
        names,
        device,
        threads: settings.threads,
        ledger: Arc::new(Ledger::new(health.clone())),
        health,
        serving: ServingVersion::new(version.version),
        cancelled: Arc::new(CancelledJobs::default()),
        cancel_lookup: Arc::new(OnceLock::new()),
        ahead: Arc::new(BatchesAhead::default()),
        busy_us: Arc::new(AtomicU64::new(0)),
        answered: Arc::new(AtomicU64::new(0)),
    };
    let (pipes, engine_ends) = Pipes::new();
    for &(bucket, rows) in &warmed.warm.row_caps {
        let _ = engine_ends.batch_feedback.send(BatchFeedback::RowCap { version: version.version, bucket, rows });
    }
    let first_served = (version.version, warmed.loaded.model.precision);
    let engine = build::engine(args, &shared, engine_ends, &version).spawn(warmed.loaded)?;
    shared.health.set_warm();
    tracing::info!(model = %args.model, version = version.version, "model warm");
    Ok(Warm {
        ttls: VersionTtls::new(version.version, version.config.ttl.clone()),
        shared,
        pipes,
        engine,
        version,
        first_served,
        intake,
        tokenizer,
        loader,
        settings,
        kafka,
        local_record,
        redis,
        replica_wait,
        dead_letters,
        answer_records,
    })
}

impl Warm {
    /// Every Redis connection, waited for (`redis`).
    fn connect_redis<'a>(&'a self, args: &'a WorkerArgs) -> impl Future<Output = Connected> + 'a {
        let parts = RedisParts {
            target: &self.redis,
            names: &self.shared.names,
            model: &args.model,
            worker_id: args.worker_id(),
            ttls: self.ttls.clone(),
            task_tag: self.version.config.task.tag(),
            replica_wait: self.replica_wait,
            cancelled: self.shared.cancelled.clone(),
        };
        wait_for_redis(parts, &self.shared.health, args.redis.redacted_url())
    }
}

/// What the stages share, made once.
struct Shared {
    names: Namespace,
    device: tch::Device,
    /// The engine's intra-op threads at start.
    threads: i32,
    health: Arc<Health>,
    ledger: Arc<Ledger>,
    serving: ServingVersion,
    cancelled: Arc<CancelledJobs>,
    /// Set once Redis answers: the engine's last look before compute.
    cancel_lookup: Arc<OnceLock<CancelLookup>>,
    ahead: Arc<BatchesAhead>,
    busy_us: Arc<AtomicU64>,
    answered: Arc<AtomicU64>,
}

/// What the worker has before its model loads.
struct Start {
    names: Namespace,
    device: tch::Device,
    health: Arc<Health>,
    local_record: Arc<LocalRecord>,
    kafka: ClientConfig,
    settings: LoadSettings,
}

/// The namespace and device, the probes served, and Kafka's settings checked
/// against the broker.
async fn start(args: &WorkerArgs) -> Result<Start> {
    let names = args.namespace.namespace()?;
    let device = choose_device(args.device)?;
    // Once, before any libtorch work: batches run one at a time on the
    // engine thread, each parallel inside (intra-op threads).
    tch::set_num_interop_threads(1);
    let health = Arc::new(Health::new(args.stall_timeout.as_millis() as u64));
    let local_record = Arc::new(LocalRecord::default());
    endpoints::serve(args.metrics_addr, &args.model, health.clone(), local_record.clone()).await?;
    let kafka = args.kafka_config()?;
    // Wrong credentials or an untrusted certificate end the worker here,
    // with the reason, before the model loads (not as endless retries).
    let probe = kafka.clone().remove("statistics.interval.ms").clone();
    tokio::task::spawn_blocking(move || fleet_connect::kafka_check::check_at_start(&probe, KAFKA_CHECK_TIMEOUT))
        .await??;
    let settings = LoadSettings {
        device,
        threads: args.intra_op_threads() as i32,
        memory_limit: args.engine_memory_limit_bytes,
        cpu: CpuFeatures::of_worker(args),
        decode: DecodeSettings { budget_bytes: args.decode_budget_bytes, threads: args.decode_threads },
    };
    Ok(Start { names, device, health, local_record, kafka, settings })
}

/// One image message (up to 20 MB + headers) must fit a fetch (librdkafka's
/// default: 1 MB per partition). Text models keep the default: their
/// messages are small and the flow tests rely on it.
fn fit_messages_of(version: &ModelVersion, kafka: &mut ClientConfig) {
    if version.config.kind == ModelKind::Image && kafka.get("max.partition.fetch.bytes").is_none() {
        kafka.set("max.partition.fetch.bytes", "20971520");
    }
}

fn redis_settings(args: &WorkerArgs) -> Result<(RedisTarget, Option<ReplicaWait>)> {
    let redis = args.redis.target()?;
    if args.redis_wait_replicas > 0 && args.redis.redis_cluster {
        bail!("--redis-wait-replicas is not supported with --redis-cluster (WAIT covers one node's replicas)");
    }
    let replica_wait = (args.redis_wait_replicas > 0)
        .then_some(ReplicaWait { replicas: args.redis_wait_replicas, timeout: args.redis_wait_timeout });
    Ok((redis, replica_wait))
}

/// The sink's Kafka producers: dead letters, and answers for the lanes
/// whose answers go to Kafka.
fn answer_producers(
    args: &WorkerArgs,
    names: &Namespace,
    kafka: &ClientConfig,
) -> Result<(DeadLetters, AnswerRecords)> {
    // librdkafka's statistics are the consumers' (published as metrics);
    // an operator's statistics.interval.ms would make these producers (and
    // the check at start) log a full report at every interval instead.
    let producer_config = kafka.clone().remove("statistics.interval.ms").clone();
    let dead_letters = DeadLetters::new(&producer_config, names.dlq_topic(&args.model), names.topic(&args.model))?;
    let answer_records = AnswerRecords::new(&producer_config, names, &args.model, args.worker_id())?;
    Ok((dead_letters, answer_records))
}

fn open_gpu_memory() -> Option<GpuMemory> {
    GpuMemory::open().map_err(|e| tracing::warn!(error = %e, "no NVML: GPU memory gauges are off")).ok()
}
