//! Prometheus metrics. The names are a contract (dashboards, alerts and the
//! HPA read them, see docs/metrics.md), so they live here as constants and
//! are recorded where each decision is made. Every series a worker can
//! have is registered at start with its HELP text and zero, so a scrape of
//! a fresh worker already shows the full set (and `rate()` starts at 0, not
//! at the first event).
//!
//! A worker serves one model: the `model` label is the exporter's global
//! label, set once here, not at each call site. A leaf: the label values
//! of labelled series are given by their owners (`SeriesLabels`).

mod register;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

pub const REQUESTS_TOTAL: &str = "fleet_requests_total";
pub const ERRORS_TOTAL: &str = "fleet_errors_total";
pub const TTL_DROPPED_TOTAL: &str = "fleet_ttl_dropped_total";
pub const DLQ_TOTAL: &str = "fleet_dlq_total";
pub const QUEUE_DEPTH: &str = "fleet_queue_depth";
pub const BATCH_SIZE: &str = "fleet_batch_size";
pub const BATCH_TOKENS: &str = "fleet_batch_tokens";
pub const PADDING_EFFICIENCY: &str = "fleet_padding_efficiency";
pub const QUEUE_WAIT_SECONDS: &str = "fleet_queue_wait_seconds";
pub const INFERENCE_SECONDS: &str = "fleet_inference_seconds";
pub const E2E_SECONDS: &str = "fleet_e2e_seconds";
/// Rows handed to the model (a batch of n counts n): proves what was *not*
/// computed (expired, cached) without relying on timings.
pub const MODEL_ROWS_TOTAL: &str = "fleet_model_rows_total";
pub const CACHE_HITS_TOTAL: &str = "fleet_feature_cache_hits_total";
pub const CACHE_MISSES_TOTAL: &str = "fleet_feature_cache_misses_total";
/// Per hit, the model time it did not spend (what computing it had cost):
/// the histogram's `_sum` is the total time saved.
pub const CACHE_SAVED_SECONDS: &str = "fleet_feature_cache_saved_seconds";
/// Bytes reserved by image decodes running now (`decode_budget`).
pub const IMAGE_DECODE_BYTES_IN_USE: &str = "fleet_image_decode_bytes_in_use";
/// 1 while the worker has stopped reading because it holds its limit.
pub const CONSUMER_PAUSED: &str = "fleet_consumer_paused";
/// 1 while `/ready` answers 200 (the alert rules read it).
pub const WORKER_READY: &str = "fleet_worker_ready";
/// Device memory, per visible GPU, only when serving on CUDA.
pub const GPU_MEMORY_USED_BYTES: &str = "nv_gpu_memory_used_bytes";
pub const GPU_MEMORY_TOTAL_BYTES: &str = "nv_gpu_memory_total_bytes";

/// The model version serving now.
pub const MODEL_VERSION: &str = "fleet_model_version";
/// 1 for the precision the serving version computes in (fp32, bf16, fp16),
/// 0 for the others.
pub const MODEL_PRECISION: &str = "fleet_model_precision";
/// Versions swapped in while serving (the first load is not a swap).
pub const MODEL_SWAPS_TOTAL: &str = "fleet_model_swaps_total";
/// Versions refused, by reason (load, warm_up, tokenizer_changed).
pub const MODEL_LOAD_FAILURES_TOTAL: &str = "fleet_model_load_failures_total";
/// Batches halved because they did not fit in device memory.
pub const OOM_SPLITS_TOTAL: &str = "fleet_oom_splits_total";

/// The rate this worker's backlog drains at (`status::drain_rate::DrainMeter`; published
/// with the backlog: producers predict waits from it).
pub const DRAIN_RATE: &str = "fleet_drain_rate";
/// The in-flight limit now (adaptive: moves with batch latency).
pub const IN_FLIGHT_LIMIT: &str = "fleet_in_flight_limit";

/// Failed writes of the sink, by target (redis, dlq) and class (transient,
/// message, fleet: `failure::FailureClass`).
pub const SINK_FAILURES_TOTAL: &str = "fleet_sink_failures_total";
/// How long the worker has held messages without writing an answer (0 when
/// it holds none or answers): what liveness compares with --stall-timeout.
pub const SINK_STALLED_SECONDS: &str = "fleet_sink_stalled_seconds";
/// Dead letters the DLQ topic refused, kept in the local record.
pub const DLQ_LOCAL_TOTAL: &str = "fleet_dlq_local_total";
/// Panics contained to one message or batch, by stage (`guard::Stage`).
pub const PANICS_TOTAL: &str = "fleet_panics_total";
/// Partitions of the model's topic this worker owns now.
pub const ASSIGNED_PARTITIONS: &str = "fleet_assigned_partitions";
/// Requests dropped before compute because their partition was revoked
/// after they were read (the new owner reads them again).
pub const REVOKED_DROPPED_TOTAL: &str = "fleet_revoked_dropped_total";
/// The most rows a batch of each length bucket may hold now (lowered when
/// a batch of it did not fit in device memory), labelled by the bucket's
/// token bound.
pub const BATCH_ROW_CAP: &str = "fleet_batch_row_cap";
/// Partitions taken from this worker by rebalances.
pub const PARTITIONS_REVOKED_TOTAL: &str = "fleet_partitions_revoked_total";
/// Messages read again because Redis lost the answers written for them.
pub const REPLAYED_TOTAL: &str = "fleet_replayed_total";
/// Replayed messages whose answer went only to Kafka, where it still is:
/// ended without compute, by lane.
pub const REPLAY_DELIVERED_TOTAL: &str = "fleet_replay_delivered_total";
/// Answers written to each destination (redis, kafka), by lane: an answer
/// going to both counts once in each.
pub const ANSWERS_DELIVERED_TOTAL: &str = "fleet_answers_delivered_total";
/// Times this worker found that Redis had lost what the fleet wrote.
pub const REDIS_MEMORY_LOST_TOTAL: &str = "fleet_redis_memory_lost_total";
/// 1 while the model fails its known-good probe: the worker reads nothing.
pub const MODEL_BROKEN: &str = "fleet_model_broken";
/// libtorch intra-op threads of the engine now (tuned on live traffic
/// unless --intra-op-threads fixes them: `stages::engine::tuning`).
pub const ENGINE_INTRA_OP_THREADS: &str = "fleet_engine_intra_op_threads";
/// The percent of each bucket's row and token budgets batches use now.
pub const ENGINE_BATCH_PERCENT: &str = "fleet_engine_batch_percent";
/// Rows per wall second each candidate setting answered while tuning, by
/// `knob` (threads, batch_percent) and `value`; set once a knob is decided.
pub const ENGINE_TUNED_ROWS_PER_SECOND: &str = "fleet_engine_tuned_rows_per_second";
/// Answers not written on their first try because the request already
/// had one: work done twice.
pub const DUPLICATE_ANSWERS_TOTAL: &str = "fleet_duplicate_answers_total";
/// librdkafka's statistics, per lane's consumer (stages/source/statistics.rs).
pub const KAFKA_FETCH_QUEUE_MESSAGES: &str = "fleet_kafka_fetch_queue_messages";
pub const KAFKA_FETCH_QUEUE_BYTES: &str = "fleet_kafka_fetch_queue_bytes";
pub const KAFKA_REPLY_QUEUE: &str = "fleet_kafka_reply_queue_ops";
pub const KAFKA_REBALANCES_TOTAL: &str = "fleet_kafka_rebalances_total";
/// The C heap (heap.rs): bytes in use, resident bytes trims released and
/// the time they took.
pub const HEAP_IN_USE_BYTES: &str = "fleet_heap_in_use_bytes";
pub const HEAP_TRIMMED_BYTES_TOTAL: &str = "fleet_heap_trimmed_bytes_total";
pub const HEAP_TRIM_SECONDS: &str = "fleet_heap_trim_seconds";

const SECONDS_BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
const BATCH_SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];
const TOKEN_BUCKETS: &[f64] = &[16.0, 64.0, 256.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0];
const RATIO_BUCKETS: &[f64] = &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0];

/// Installs the recorder, every series labelled `model`; the caller serves
/// the handle (fleet_ops::endpoints).
pub fn install(model: &str) -> Result<PrometheusHandle, BuildError> {
    PrometheusBuilder::new()
        .add_global_label("model", model)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(BATCH_SIZE.into()), BATCH_SIZE_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(BATCH_TOKENS.into()), TOKEN_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(PADDING_EFFICIENCY.into()), RATIO_BUCKETS)?
        .install_recorder()
}

/// The label values of the labelled series, from the modules that decide
/// them, so that each starts at zero.
pub struct SeriesLabels {
    pub dlq_reasons: &'static [&'static str],
    pub failure_targets: &'static [&'static str],
    pub failure_classes: Vec<&'static str>,
    pub panic_stages: Vec<&'static str>,
    pub refusal_reasons: Vec<&'static str>,
    pub precisions: Vec<&'static str>,
}

/// HELP texts and zero-valued series for everything a worker exports.
pub fn register(labels: &SeriesLabels) {
    register::describe_answers();
    register::describe_batches_and_the_model();
    register::describe_flow_and_dependencies();
    register::describe_kafka_client_and_heap();
    fleet_ops::probe::describe();
    register::zero_per_lane();
    register::zero_per_label(labels);
    register::zero_unlabelled();
}
