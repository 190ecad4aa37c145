//! The worker's configuration: command line and environment (clap) for where
//! things are, the model's `config.toml` for how the model is served. Both
//! are validated at start, and a bad value names its key.

use crate::batcher::{default_boundaries, BucketLimits};
use clap::Parser;
use fleet_proto::ModelName;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Parser)]
#[command(version, about = "Kafka-fed inference worker: one consumer group per model")]
pub struct WorkerArgs {
    /// The model to serve: consumes infer.<model> in group fleet.<model>.
    #[arg(long, env = "FLEET_MODEL")]
    pub model: ModelName,
    /// The model repository (models/<model>/config.toml, models/<model>/<version>/).
    #[arg(long, env = "FLEET_MODEL_REPO", default_value = "models")]
    pub model_repo: PathBuf,
    /// Brokers, librdkafka properties (file and flags), TLS and SASL: for
    /// the consumer and the dead-letter producer.
    #[command(flatten)]
    pub kafka: fleet_connect::kafka::KafkaArgs,
    #[command(flatten)]
    pub redis: fleet_connect::redis::RedisConfig,
    /// Where /metrics, /healthz and /ready are served.
    #[arg(long, env = "FLEET_METRICS_ADDR", default_value = "127.0.0.1:9464")]
    pub metrics_addr: SocketAddr,
    /// libtorch intra-op threads; default: one fewer than the cores this
    /// process may use (cgroup-aware), at least 1. The worker's own threads
    /// (consumer, tokenizer, Redis writes) and librdkafka's need a core: an
    /// OpenMP thread they preempt stalls its barrier. Measured on 2 cores,
    /// bf16, whole path: 1 thread 555-580 texts/s, 2 threads 450-500
    /// (docs/benchmarks.md).
    #[arg(long, env = "FLEET_INTRA_OP_THREADS")]
    pub intra_op_threads: Option<usize>,
    /// Most messages held between reading and answering; above it the
    /// worker stops reading (fleet_queue_depth never exceeds it).
    #[arg(long, env = "FLEET_MAX_IN_FLIGHT", default_value_t = 1024)]
    pub max_in_flight: usize,
    /// Most bytes (key + value + headers) held between reading and answering.
    #[arg(long, env = "FLEET_MAX_IN_FLIGHT_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_in_flight_bytes: usize,
    /// Adaptive in-flight limit: the most it shrinks to (its ceiling is
    /// --max-in-flight).
    #[arg(long, env = "FLEET_MIN_IN_FLIGHT", default_value_t = 64)]
    pub min_in_flight: usize,
    /// Adaptive in-flight limit: the longest a request should wait inside the
    /// worker before its batch runs. Batches held longer shrink the limit
    /// (×0.8), shorter grow it (+1). 0s: a fixed --max-in-flight.
    #[arg(long, env = "FLEET_IN_FLIGHT_TARGET_WAIT", default_value = "2s", value_parser = humantime::parse_duration)]
    pub in_flight_target_wait: std::time::Duration,
    /// Reading resumes once both holdings fall to this percentage of their limits.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u8).range(1..=99))]
    pub low_water_percent: u8,
    /// librdkafka's prefetch cap per assigned partition, KiB
    /// (queued.max.messages.kbytes: each partition has its own queue).
    #[arg(long, env = "FLEET_PREFETCH_KBYTES", default_value_t = 2 * 1024)]
    pub prefetch_kbytes: usize,
    /// On SIGTERM: how long to finish, write and commit in-flight work
    /// (keep it below the pod's terminationGracePeriodSeconds).
    #[arg(long, env = "FLEET_DRAIN_TIMEOUT", default_value = "25s", value_parser = humantime::parse_duration)]
    pub drain_timeout: std::time::Duration,
    /// Liveness fails when the worker holds messages and has written no
    /// answer for longer than this (a stuck sink or engine): Kubernetes
    /// restarts it instead of leaving its partitions served by nobody.
    #[arg(long, env = "FLEET_STALL_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub stall_timeout: std::time::Duration,
    /// This worker's name in the backlog report; default: $HOSTNAME (the pod), else pid.
    #[arg(long, env = "FLEET_WORKER_ID")]
    pub worker_id: Option<String>,
    /// cpu, cuda, or auto (CUDA when available).
    #[arg(long, env = "FLEET_DEVICE", default_value = "auto")]
    pub device: DeviceChoice,
    /// The CPU features `precision = "auto"` looks for: `auto` reads them
    /// from /proc/cpuinfo; `none`, or a list such as `avx512_bf16,amx_bf16`,
    /// says instead (a host that reports features it runs slowly).
    #[arg(long, env = "FLEET_CPU_FEATURES", default_value = "auto")]
    pub cpu_features: String,
    /// Image models: bytes all concurrent decodes may hold together (estimated
    /// from each header before decoding); a decode waits for room instead.
    #[arg(long, env = "FLEET_DECODE_BUDGET_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub decode_budget_bytes: u64,
    /// Image models: most decodes running at once (they also wait for budget).
    #[arg(long, env = "FLEET_DECODE_THREADS", default_value_t = 2)]
    pub decode_threads: usize,
    /// Activation bytes one batch may use, by the model's `[device]` estimate;
    /// a batch over it is split. Default: none on CPU; on CUDA the device's
    /// `memory_fraction` minus what the loaded model takes.
    #[arg(long, env = "FLEET_ENGINE_MEMORY_LIMIT_BYTES")]
    pub engine_memory_limit_bytes: Option<u64>,
    /// How often the model repository is checked for a new version or pin.
    #[arg(long, env = "FLEET_MODEL_POLL_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    pub model_poll_interval: std::time::Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DeviceChoice {
    Auto,
    Cpu,
    Cuda,
}

impl WorkerArgs {
    pub fn worker_id(&self) -> String {
        self.worker_id
            .clone()
            .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
            .unwrap_or_else(|| format!("pid-{}", std::process::id()))
    }

    /// The librdkafka config: brokers, `--kafka-properties-file`, then
    /// `--kafka-property` entries. Errors name the file and line, never a
    /// value (it may be a password).
    pub fn kafka_config(&self) -> Result<rdkafka::ClientConfig, fleet_connect::kafka::KafkaConfigError> {
        self.kafka.client_config()
    }

    pub fn cpu_features(&self) -> crate::precision::CpuFeatures {
        match self.cpu_features.trim() {
            "auto" => crate::precision::CpuFeatures::detect(),
            list => crate::precision::CpuFeatures::from_names(&list.split(',').map(str::trim).collect::<Vec<_>>()),
        }
    }

    pub fn intra_op_threads(&self) -> usize {
        self.intra_op_threads
            .unwrap_or_else(|| default_intra_op_threads(std::thread::available_parallelism().map_or(1, usize::from)))
            .max(1)
    }
}

/// The cores left for the model: all but one for the rest of the worker.
pub fn default_intra_op_threads(cores: usize) -> usize {
    cores.saturating_sub(1).max(1)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    Text,
    Image,
}

/// `models/<model>/config.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub kind: ModelKind,
    /// Serve this version instead of the highest one.
    pub version: Option<u64>,
    pub text: Option<TextConfig>,
    pub image: Option<ImageConfig>,
    pub batching: BatchingConfig,
    #[serde(default)]
    pub ttl: TtlConfig,
    #[serde(default)]
    pub device: DeviceConfig,
}

/// `[device]`: precision and device memory. The memory fraction applies on
/// CUDA; on CPU the memory limit is `--engine-memory-limit-bytes`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    #[serde(default)]
    pub precision: Precision,
    /// Share of the device's memory the worker may use (weights, context and
    /// batches together).
    #[serde(default = "default_memory_fraction")]
    pub memory_fraction: f64,
    /// Activation memory estimate per batch, for fp32: per row, per token
    /// (rows × padded length) and per attention cell (rows × padded
    /// length²). Halved for a version served in bf16 or fp16.
    #[serde(default)]
    pub bytes_per_row: u64,
    #[serde(default)]
    pub bytes_per_token: u64,
    #[serde(default)]
    pub bytes_per_attention_cell: u64,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            precision: Precision::default(),
            memory_fraction: default_memory_fraction(),
            bytes_per_row: 0,
            bytes_per_token: 0,
            bytes_per_attention_cell: 0,
        }
    }
}

impl DeviceConfig {
    pub fn activation_cost(&self) -> crate::memory::ActivationCost {
        crate::memory::ActivationCost {
            bytes_per_row: self.bytes_per_row,
            bytes_per_token: self.bytes_per_token,
            bytes_per_attention_cell: self.bytes_per_attention_cell,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// bf16 on a CPU with AVX-512 BF16 or AMX, fp16 on CUDA, each when its
    /// outputs match fp32's on real inputs (`precision::choose`); else fp32.
    #[default]
    Auto,
    Fp32,
    /// bf16 even where its outputs differ from fp32's (logged), or the CPU
    /// computes it slowly; fp32 only where the model cannot run in it.
    Bf16,
    /// fp16, likewise (meant for CUDA).
    Fp16,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextConfig {
    pub max_seq_len: usize,
    #[serde(default = "default_true")]
    pub truncate: bool,
    #[serde(default = "default_max_text_bytes")]
    pub max_text_bytes: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageConfig {
    /// The model's input is `size × size` RGB.
    pub size: u32,
    /// Shorter side resized to this, then a centre crop of `size`.
    pub resize_shorter: u32,
    #[serde(default = "default_max_image_bytes")]
    pub max_image_bytes: usize,
    #[serde(default = "default_max_image_pixels")]
    pub max_image_pixels: u64,
    #[serde(default = "default_formats")]
    pub formats: Vec<String>,
    #[serde(default = "default_top_k")]
    pub top_k: usize,
}

impl ImageConfig {
    pub fn limits(&self) -> fleet_image::ImageLimits {
        fleet_image::ImageLimits {
            max_bytes: self.max_image_bytes,
            max_pixels: self.max_image_pixels,
            formats: self.formats.iter().filter_map(|f| fleet_image::Format::from_name(f)).collect(),
        }
    }

    pub fn geometry(&self) -> fleet_image::InputGeometry {
        fleet_image::InputGeometry { resize_shorter: self.resize_shorter, crop: self.size }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchingConfig {
    pub max_batch_size: usize,
    /// Rows × padded length per batch (text models; required there).
    pub max_batch_tokens: Option<usize>,
    /// Rows × padded length² per batch: the attention memory budget (text
    /// models; required there).
    pub max_attention_cells: Option<usize>,
    /// One wait for every bucket, or one per bucket.
    pub max_wait_ms: OneOrPerBucket,
    /// Upper token bounds of the length buckets; default: fine-grained
    /// bounds up to max_seq_len (`batcher::default_boundaries`).
    pub buckets: Option<Vec<usize>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrPerBucket {
    One(u64),
    PerBucket(Vec<u64>),
}

impl BatchingConfig {
    /// The batcher's limits for a model of `max_seq_len` tokens.
    pub fn limits(&self, max_seq_len: usize) -> BucketLimits {
        let boundaries = self.buckets.clone().unwrap_or_else(|| default_boundaries(max_seq_len));
        let max_wait_ms = match &self.max_wait_ms {
            OneOrPerBucket::One(ms) => vec![*ms; boundaries.len()],
            OneOrPerBucket::PerBucket(list) => list.clone(),
        };
        BucketLimits {
            boundaries,
            max_batch_size: self.max_batch_size,
            // Image models have one shape: only the row limit applies.
            max_batch_tokens: self.max_batch_tokens.unwrap_or(usize::MAX),
            max_attention_cells: self.max_attention_cells.unwrap_or(usize::MAX),
            max_wait_ms,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtlConfig {
    #[serde(default = "default_request_ttl_ms")]
    pub request_ttl_ms: u64,
    #[serde(default = "default_result_ttl_s")]
    pub result_ttl_s: u64,
    #[serde(default = "default_feature_ttl_s")]
    pub feature_ttl_s: u64,
}

impl Default for TtlConfig {
    fn default() -> Self {
        Self {
            request_ttl_ms: default_request_ttl_ms(),
            result_ttl_s: default_result_ttl_s(),
            feature_ttl_s: default_feature_ttl_s(),
        }
    }
}

fn default_true() -> bool {
    true
}
fn default_max_text_bytes() -> usize {
    64 * 1024
}
fn default_max_image_bytes() -> usize {
    20_000_000
}
fn default_max_image_pixels() -> u64 {
    50_000_000
}
fn default_formats() -> Vec<String> {
    fleet_image::Format::ALL.iter().map(|f| f.name().to_owned()).collect()
}
fn default_top_k() -> usize {
    5
}
fn default_memory_fraction() -> f64 {
    0.9
}
fn default_request_ttl_ms() -> u64 {
    30_000
}
fn default_result_ttl_s() -> u64 {
    30
}
fn default_feature_ttl_s() -> u64 {
    300
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Parse { path: PathBuf, source: toml::de::Error },
    #[error("{path}: {key} {problem}")]
    Invalid { path: PathBuf, key: &'static str, problem: String },
}

impl ModelConfig {
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let raw =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        let config: Self =
            toml::from_str(&raw).map_err(|source| ConfigError::Parse { path: path.to_owned(), source })?;
        config.validate().map_err(|(key, problem)| ConfigError::Invalid { path: path.to_owned(), key, problem })?;
        Ok(config)
    }

    /// The text section; validation guarantees it for text models.
    pub fn text(&self) -> Option<&TextConfig> {
        self.text.as_ref()
    }

    /// The image section; validation guarantees it for image models.
    pub fn image(&self) -> Option<&ImageConfig> {
        self.image.as_ref()
    }

    /// The longest input in batcher units: tokens for text, 1 for an image.
    pub fn max_input_len(&self) -> usize {
        self.text.as_ref().map_or(1, |t| t.max_seq_len)
    }

    fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.kind == ModelKind::Text {
            let Some(text) = &self.text else {
                return Err(("text", "section is required for kind = \"text\"".into()));
            };
            if !(2..=8192).contains(&text.max_seq_len) {
                return Err(("text.max_seq_len", format!("= {} must be within 2..=8192", text.max_seq_len)));
            }
            if text.max_text_bytes == 0 {
                return Err(("text.max_text_bytes", "must be above 0".into()));
            }
            if self.batching.max_batch_tokens.is_none() {
                return Err(("batching.max_batch_tokens", "is required for text models".into()));
            }
            if self.batching.max_attention_cells.is_none() {
                return Err(("batching.max_attention_cells", "is required for text models".into()));
            }
        }
        if self.kind == ModelKind::Image {
            let Some(image) = &self.image else {
                return Err(("image", "section is required for kind = \"image\"".into()));
            };
            if !(1..=4096).contains(&image.size) || image.resize_shorter < image.size {
                return Err(("image.size", "must be within 1..=4096 and at most image.resize_shorter".into()));
            }
            if let Some(bad) = image.formats.iter().find(|f| fleet_image::Format::from_name(f).is_none()) {
                return Err(("image.formats", format!("has {bad:?}; known: jpeg, png, webp")));
            }
            if image.formats.is_empty() || image.max_image_bytes == 0 || image.max_image_pixels == 0 {
                return Err((
                    "image",
                    "formats, max_image_bytes and max_image_pixels must be non-empty/above 0".into(),
                ));
            }
            if !(1..=1000).contains(&image.top_k) {
                return Err(("image.top_k", "must be within 1..=1000".into()));
            }
        }
        if !(1..=4096).contains(&self.batching.max_batch_size) {
            return Err((
                "batching.max_batch_size",
                format!("= {} must be within 1..=4096", self.batching.max_batch_size),
            ));
        }
        let max_seq_len = self.max_input_len();
        let limits = self.batching.limits(max_seq_len);
        if limits.max_wait_ms.iter().any(|&ms| ms > 60_000) {
            return Err(("batching.max_wait_ms", "must be at most 60000".into()));
        }
        limits.validate(max_seq_len).map_err(|e| (e.key, e.problem))?;
        if !(self.device.memory_fraction > 0.0 && self.device.memory_fraction <= 1.0) {
            return Err(("device.memory_fraction", format!("= {} must be within (0, 1]", self.device.memory_fraction)));
        }
        for (key, value) in [
            ("ttl.request_ttl_ms", self.ttl.request_ttl_ms),
            ("ttl.result_ttl_s", self.ttl.result_ttl_s),
            ("ttl.feature_ttl_s", self.ttl.feature_ttl_s),
        ] {
            if value == 0 {
                return Err((key, "must be above 0".into()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(raw: &str) -> Result<ModelConfig, String> {
        let config: ModelConfig = toml::from_str(raw).map_err(|e| e.to_string())?;
        config.validate().map_err(|(key, problem)| format!("{key} {problem}"))?;
        Ok(config)
    }

    const GOOD: &str = r#"
        kind = "text"
        [text]
        max_seq_len = 256
        [batching]
        max_batch_size = 32
        max_batch_tokens = 4096
        max_attention_cells = 524288
        max_wait_ms = 5
    "#;

    #[test]
    fn the_model_gets_all_cores_but_one() {
        assert_eq!((default_intra_op_threads(1), default_intra_op_threads(2)), (1, 1));
        assert_eq!(default_intra_op_threads(8), 7);
    }

    #[test]
    fn defaults_fill_ttls_and_text_limits() {
        let c = parse(GOOD).unwrap();
        assert_eq!((c.ttl.request_ttl_ms, c.ttl.result_ttl_s, c.ttl.feature_ttl_s), (30_000, 30, 300));
        let text = c.text().unwrap();
        assert!(text.truncate);
        assert_eq!(text.max_text_bytes, 65536);
    }

    #[test]
    fn the_shipped_config_is_valid() {
        let raw = include_str!("../../../scripts/models/minilm.config.toml");
        parse(raw).unwrap();
    }

    #[test]
    fn the_shipped_image_config_is_valid_and_batches_on_rows_only() {
        let c = parse(include_str!("../../../scripts/models/efficientnet_lite0.config.toml")).unwrap();
        let image = c.image().unwrap();
        assert_eq!(image.limits().formats.len(), 3);
        assert_eq!((image.geometry().crop, image.geometry().resize_shorter), (224, 256));
        let limits = c.batching.limits(c.max_input_len());
        assert_eq!(limits.boundaries, vec![1]);
        assert!(limits.fits(8, 1) && !limits.fits(9, 1));
    }

    #[test]
    fn image_configs_name_their_bad_key() {
        let image = include_str!("../../../scripts/models/efficientnet_lite0.config.toml");
        let err = parse(&image.replace(r#"formats = ["jpeg", "png", "webp"]"#, r#"formats = ["gif"]"#)).unwrap_err();
        assert!(err.starts_with("image.formats"), "{err}");
        let err = parse(&image.replace("resize_shorter = 256", "resize_shorter = 100")).unwrap_err();
        assert!(err.starts_with("image.size"), "{err}");
        let err = parse(&GOOD.replace("max_attention_cells = 524288", "")).unwrap_err();
        assert!(err.starts_with("batching.max_attention_cells"), "{err}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let err = parse(&GOOD.replace("max_batch_size = 32", "max_batch_size = 0")).unwrap_err();
        assert!(err.starts_with("batching.max_batch_size"), "{err}");
        let err = parse(&GOOD.replace("max_seq_len = 256", "max_seq_len = 1")).unwrap_err();
        assert!(err.starts_with("text.max_seq_len"), "{err}");
        let err = parse(&GOOD.replace("max_wait_ms = 5", "max_wait_ms = 5\nmax_wiat = 1")).unwrap_err();
        assert!(err.contains("max_wiat"), "{err}");
        let err = parse(&GOOD.replace("max_batch_tokens = 4096", "max_batch_tokens = 100")).unwrap_err();
        assert!(err.starts_with("batching.max_batch_tokens"), "{err}");
        let err = parse(&GOOD.replace("max_wait_ms = 5", "max_wait_ms = [1, 2]")).unwrap_err();
        assert!(err.starts_with("batching.max_wait_ms"), "{err}");
        let err = parse(&GOOD.replace("[text]\n        max_seq_len = 256\n", "")).unwrap_err();
        assert!(err.starts_with("text "), "{err}");
    }

    #[test]
    fn the_device_section_defaults_and_validates() {
        let c = parse(GOOD).unwrap();
        assert_eq!((c.device.precision, c.device.memory_fraction), (Precision::Auto, 0.9));
        assert_eq!(c.device.activation_cost().estimate(4, 100), 0);
        let c = parse(&format!("{GOOD}\n[device]\nprecision = \"fp32\"\nbytes_per_token = 10\n")).unwrap();
        assert_eq!((c.device.precision, c.device.activation_cost().estimate(2, 5)), (Precision::Fp32, 100));
        let err = parse(&format!("{GOOD}\n[device]\nmemory_fraction = 1.5\n")).unwrap_err();
        assert!(err.starts_with("device.memory_fraction"), "{err}");
    }

    #[test]
    fn per_bucket_waits_and_explicit_buckets() {
        let c = parse(&GOOD.replace("max_wait_ms = 5", "max_wait_ms = [1, 2, 3]\nbuckets = [16, 64, 256]")).unwrap();
        let limits = c.batching.limits(256);
        assert_eq!((limits.boundaries, limits.max_wait_ms), (vec![16, 64, 256], vec![1, 2, 3]));
        let default = parse(GOOD).unwrap().batching.limits(256);
        assert_eq!(default.boundaries.last(), Some(&256));
        assert!(default.max_wait_ms.iter().all(|&ms| ms == 5));
    }
}
