//! What `register` does, step by step: the HELP text of every series, by
//! concept, then each series set to zero, so a fresh worker's first scrape
//! shows them all.

use super::*;
use fleet_proto::{ErrorCode, Lane, Status};
use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Unit};

/// Answers, by status, code and lane; dead letters.
pub(super) fn describe_answers() {
    describe_counter!(REQUESTS_TOTAL, "Answers written, by status (ok, error, expired, cancelled) and lane");
    describe_counter!(ERRORS_TOTAL, "Error answers written, by error code");
    describe_counter!(TTL_DROPPED_TOTAL, "Requests answered expired without being computed, by lane");
    describe_counter!(DLQ_TOTAL, "Messages copied to the dead-letter topic, by reason");
    describe_gauge!(QUEUE_DEPTH, "Messages read and not yet answered, by lane");
}

/// Batches, the feature cache and the model serving them.
pub(super) fn describe_batches_and_the_model() {
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
}

/// Reading, probes, the sink's writes, partitions, replay and tuning.
pub(super) fn describe_flow_and_dependencies() {
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
}

/// librdkafka's statistics and the C heap.
pub(super) fn describe_kafka_client_and_heap() {
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
}

/// The series of each lane.
pub(super) fn zero_per_lane() {
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
}

/// The series of each label value their owners give.
pub(super) fn zero_per_label(labels: &SeriesLabels) {
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
}

/// The series without labels.
pub(super) fn zero_unlabelled() {
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
