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

use fleet_proto::{ErrorCode, Lane, Status};
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
    use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit};
    describe_counter!(REQUESTS_TOTAL, "Answers written, by status (ok, error, expired, cancelled) and lane");
    describe_counter!(ERRORS_TOTAL, "Error answers written, by error code");
    describe_counter!(TTL_DROPPED_TOTAL, "Requests answered expired without being computed, by lane");
    describe_counter!(DLQ_TOTAL, "Messages copied to the dead-letter topic, by reason");
    describe_gauge!(QUEUE_DEPTH, "Messages read and not yet answered, by lane");
    describe_histogram!(BATCH_SIZE, "Rows per model call");
    describe_histogram!(BATCH_TOKENS, "Rows x padded length per model call (images: rows)");
    describe_histogram!(PADDING_EFFICIENCY, "Real tokens / computed tokens per model call");
    describe_histogram!(QUEUE_WAIT_SECONDS, Unit::Seconds, "From the request's creation to its model call");
    describe_histogram!(INFERENCE_SECONDS, Unit::Seconds, "Model call time per batch");
    describe_histogram!(
        E2E_SECONDS,
        Unit::Seconds,
        "From the request's creation to its answer formed and written everywhere it goes, by lane"
    );
    describe_counter!(MODEL_ROWS_TOTAL, "Rows handed to the model (retries included)");
    describe_counter!(CACHE_HITS_TOTAL, "Requests answered from the feature cache");
    describe_counter!(CACHE_MISSES_TOTAL, "Requests the feature cache did not have");
    describe_histogram!(CACHE_SAVED_SECONDS, Unit::Seconds, "Model time each cache hit did not spend");
    describe_gauge!(IMAGE_DECODE_BYTES_IN_USE, Unit::Bytes, "Bytes reserved by image decodes running now");
    describe_gauge!(
        CONSUMER_PAUSED,
        "1 while the worker has stopped reading: at its in-flight limit, or a write no retry cures is failing"
    );
    describe_gauge!(WORKER_READY, "1 while /ready passes: model warm, broker and Redis reachable");
    describe_gauge!(GPU_MEMORY_USED_BYTES, Unit::Bytes, "Device memory in use (NVML), CUDA workers only");
    describe_gauge!(GPU_MEMORY_TOTAL_BYTES, Unit::Bytes, "Device memory in all (NVML), CUDA workers only");
    describe_gauge!(MODEL_VERSION, "The model version serving now");
    describe_counter!(MODEL_SWAPS_TOTAL, "Model versions swapped in while serving");
    describe_gauge!(MODEL_PRECISION, "1 for the precision the serving version computes in, by precision");
    describe_counter!(MODEL_LOAD_FAILURES_TOTAL, "Model versions refused (failed to load or warm up), by reason");
    describe_counter!(OOM_SPLITS_TOTAL, "Batches halved because they did not fit in device memory");
    describe_gauge!(
        DRAIN_RATE,
        "Answers per second over the last 10 s: per wall second while saturated, else per busy engine second"
    );
    describe_gauge!(IN_FLIGHT_LIMIT, "Messages the worker may hold now (adaptive: follows batch latency)");
    describe_counter!(
        SINK_FAILURES_TOTAL,
        "Failed writes, by target (redis, answers: the answers topics, dlq) and class (transient, message, fleet)"
    );
    describe_gauge!(
        SINK_STALLED_SECONDS,
        Unit::Seconds,
        "How long messages have been held with no answer written (liveness fails past --stall-timeout)"
    );
    describe_counter!(DLQ_LOCAL_TOTAL, "Dead letters the DLQ topic refused, kept in the local record (/dead-letters)");
    describe_counter!(PANICS_TOTAL, "Panics contained to one message or batch, by stage");
    describe_gauge!(ASSIGNED_PARTITIONS, "Partitions of the model's topics this worker owns now, by lane");
    describe_counter!(REVOKED_DROPPED_TOTAL, "Requests dropped before compute: their partition was revoked");
    describe_gauge!(
        BATCH_ROW_CAP,
        "Most rows a batch of the bucket (label: its token bound) may hold now; lowered by out-of-memory splits"
    );
    describe_counter!(PARTITIONS_REVOKED_TOTAL, "Partitions taken from this worker by rebalances");
    describe_counter!(REPLAYED_TOTAL, "Messages read again because Redis lost the answers written for them");
    describe_counter!(
        REPLAY_DELIVERED_TOTAL,
        "Replayed messages whose answer went only to Kafka, where it still is: ended without compute, by lane"
    );
    describe_counter!(
        ANSWERS_DELIVERED_TOTAL,
        "Answers written, by destination (redis; kafka: the lane's answers topic) and lane"
    );
    describe_counter!(
        REDIS_MEMORY_LOST_TOTAL,
        "Times Redis was found to have lost what the fleet wrote (restart without persistence, failover, flush)"
    );
    describe_gauge!(MODEL_BROKEN, "1 while the model fails its known-good probe: the worker reads nothing");
    describe_gauge!(ENGINE_INTRA_OP_THREADS, "libtorch intra-op threads of the engine now (tuned unless fixed)");
    describe_gauge!(ENGINE_BATCH_PERCENT, "Percent of each bucket's row and token budgets batches use now (tuned)");
    describe_gauge!(
        ENGINE_TUNED_ROWS_PER_SECOND,
        "Rows per wall second each candidate answered under backlog while tuning, by knob and value"
    );
    describe_counter!(
        DUPLICATE_ANSWERS_TOTAL,
        "Answers not written because the request already had one: a message read and computed twice"
    );
    describe_gauge!(
        KAFKA_FETCH_QUEUE_MESSAGES,
        "Messages librdkafka holds fetched for the partition, not yet read by the worker, by lane and partition"
    );
    describe_gauge!(
        KAFKA_FETCH_QUEUE_BYTES,
        Unit::Bytes,
        "Bytes librdkafka holds fetched for the partition (bounded by queued.max.messages.kbytes), by lane and partition"
    );
    describe_gauge!(KAFKA_REPLY_QUEUE, "Operations waiting in the lane's consumer's reply queue (librdkafka replyq)");
    describe_counter!(
        KAFKA_REBALANCES_TOTAL,
        "Rebalances the lane's consumer has been through (librdkafka rebalance_cnt)"
    );
    describe_gauge!(
        HEAP_IN_USE_BYTES,
        Unit::Bytes,
        "Bytes the C heap (malloc: libtorch's tensors) has handed out and not had back: flat while RSS grows is retention, not a leak"
    );
    describe_counter!(
        HEAP_TRIMMED_BYTES_TOTAL,
        Unit::Bytes,
        "Resident bytes the periodic heap trim (--heap-trim-interval) gave back to the kernel"
    );
    describe_histogram!(
        HEAP_TRIM_SECONDS,
        Unit::Seconds,
        "How long each periodic heap trim took (each arena locked in turn while it runs); the pages it hands back cost a zero-fill fault when reused"
    );
    fleet_ops::probe::describe();

    for lane in Lane::ALL.map(Lane::as_str) {
        for status in Status::ALL {
            counter!(REQUESTS_TOTAL, "status" => status.as_str(), "lane" => lane).absolute(0);
        }
        counter!(TTL_DROPPED_TOTAL, "lane" => lane).absolute(0);
        gauge!(QUEUE_DEPTH, "lane" => lane).set(0.0);
        gauge!(ASSIGNED_PARTITIONS, "lane" => lane).set(0.0);
        gauge!(KAFKA_REPLY_QUEUE, "lane" => lane).set(0.0);
        counter!(KAFKA_REBALANCES_TOTAL, "lane" => lane).absolute(0);
        counter!(REPLAY_DELIVERED_TOTAL, "lane" => lane).absolute(0);
        for destination in fleet_proto::Destination::ALL.map(fleet_proto::Destination::as_str) {
            counter!(ANSWERS_DELIVERED_TOTAL, "destination" => destination, "lane" => lane).absolute(0);
        }
        let _ = histogram!(E2E_SECONDS, "lane" => lane);
    }
    for code in ErrorCode::ALL {
        counter!(ERRORS_TOTAL, "code" => code.as_str()).absolute(0);
    }
    for &reason in labels.dlq_reasons {
        counter!(DLQ_TOTAL, "reason" => reason).absolute(0);
        counter!(DLQ_LOCAL_TOTAL, "reason" => reason).absolute(0);
    }
    for &target in labels.failure_targets {
        for &class in &labels.failure_classes {
            counter!(SINK_FAILURES_TOTAL, "target" => target, "class" => class).absolute(0);
        }
    }
    for &stage in &labels.panic_stages {
        counter!(PANICS_TOTAL, "stage" => stage).absolute(0);
    }
    for &reason in &labels.refusal_reasons {
        counter!(MODEL_LOAD_FAILURES_TOTAL, "reason" => reason).absolute(0);
    }
    for &precision in &labels.precisions {
        gauge!(MODEL_PRECISION, "precision" => precision).set(0.0);
    }
    for name in [
        MODEL_ROWS_TOTAL,
        CACHE_HITS_TOTAL,
        CACHE_MISSES_TOTAL,
        MODEL_SWAPS_TOTAL,
        OOM_SPLITS_TOTAL,
        REVOKED_DROPPED_TOTAL,
        REPLAYED_TOTAL,
        REDIS_MEMORY_LOST_TOTAL,
        PARTITIONS_REVOKED_TOTAL,
        DUPLICATE_ANSWERS_TOTAL,
        HEAP_TRIMMED_BYTES_TOTAL,
    ] {
        counter!(name).absolute(0);
    }
    for name in [CONSUMER_PAUSED, WORKER_READY, MODEL_VERSION, DRAIN_RATE, SINK_STALLED_SECONDS, MODEL_BROKEN] {
        gauge!(name).set(0.0);
    }
    gauge!(IMAGE_DECODE_BYTES_IN_USE).set(0.0);
    gauge!(HEAP_IN_USE_BYTES).set(0.0);
    // A histogram handle registers the series; it renders with zero counts.
    for name in [
        BATCH_SIZE,
        BATCH_TOKENS,
        PADDING_EFFICIENCY,
        QUEUE_WAIT_SECONDS,
        INFERENCE_SECONDS,
        CACHE_SAVED_SECONDS,
        HEAP_TRIM_SECONDS,
    ] {
        let _ = histogram!(name);
    }
}
