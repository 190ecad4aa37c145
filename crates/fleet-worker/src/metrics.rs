//! Prometheus metrics. The names are a contract (dashboards, alerts and the
//! HPA read them, see docs/metrics.md), so they live here as constants and
//! are recorded where each decision is made.

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
use std::net::SocketAddr;

pub const REQUESTS_TOTAL: &str = "fleet_requests_total";
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
/// 1 while the source has paused its partitions because it holds its limit.
pub const CONSUMER_PAUSED: &str = "fleet_consumer_paused";

const SECONDS_BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
const BATCH_SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0];
const TOKEN_BUCKETS: &[f64] = &[16.0, 64.0, 256.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0];
const RATIO_BUCKETS: &[f64] = &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0];

/// Serves `/metrics` on `addr` in the background.
pub fn install(addr: SocketAddr) -> Result<(), metrics_exporter_prometheus::BuildError> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(BATCH_SIZE.into()), BATCH_SIZE_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(BATCH_TOKENS.into()), TOKEN_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(PADDING_EFFICIENCY.into()), RATIO_BUCKETS)?
        .install()
}
