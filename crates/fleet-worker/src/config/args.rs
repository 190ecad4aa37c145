//! The worker's command line and environment (clap): where things are and
//! how much it may hold. Validated at start; a bad value names its flag.

use clap::Parser;
use fleet_proto::ModelName;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, Clone, Parser)]
#[command(version, about = "Kafka-fed inference worker: one consumer group per model")]
pub struct WorkerArgs {
    /// The model to serve: consumes infer.<model> in group fleet.<model>
    /// (with the default prefixes).
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
    /// Topic, group and Redis key prefixes (one release = one namespace).
    #[command(flatten)]
    pub namespace: fleet_connect::namespace::NamespaceArgs,
    /// Where /metrics, /healthz and /ready are served.
    #[arg(long, env = "FLEET_METRICS_ADDR", default_value = "127.0.0.1:9464")]
    pub metrics_addr: SocketAddr,
    /// libtorch intra-op threads, fixed. Default: chosen on live traffic
    /// (--engine-tuning), starting from one fewer than the cores this
    /// process may use (cgroup-aware, at least 1). The best count differs
    /// by CPU, even between machines of the same core count
    /// (docs/benchmarks.md).
    #[arg(long, env = "FLEET_INTRA_OP_THREADS")]
    pub intra_op_threads: Option<usize>,
    /// Whether the engine tries the thread counts (unless
    /// --intra-op-threads fixes them) and smaller batch budgets while the
    /// worker holds a backlog, and keeps what answers most, and caps a
    /// length bucket's rows where its smaller batches compute faster
    /// (true/false; a CPU only: on CUDA all stay).
    #[arg(long, env = "FLEET_ENGINE_TUNING", default_value_t = true, action = clap::ArgAction::Set)]
    pub engine_tuning: bool,
    /// How long each tuning window lasts (of held backlog; each candidate
    /// gets two).
    #[arg(long, env = "FLEET_ENGINE_TUNING_WINDOW", default_value = "3s", value_parser = humantime::parse_duration)]
    pub engine_tuning_window: std::time::Duration,
    /// Most messages held between reading and answering; above it the
    /// worker stops reading (fleet_queue_depth never exceeds it).
    #[arg(long, env = "FLEET_MAX_IN_FLIGHT", default_value_t = 1024)]
    pub max_in_flight: usize,
    /// Most bytes (key + value + headers) held between reading and answering.
    #[arg(long, env = "FLEET_MAX_IN_FLIGHT_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_in_flight_bytes: usize,
    /// The bulk lane's (infer.<model>.bulk) least share of the messages read
    /// and of the batches run while interactive work waits too: interactive
    /// requests go first, and a backfill still always ends.
    #[arg(long, env = "FLEET_BULK_SHARE", default_value_t = 0.1, value_parser = parse_share)]
    pub bulk_share: f64,
    /// Whether bulk rows fill interactive batches where interactive rows
    /// leave room (true/false). Default: on CUDA, off on a CPU, whose batch
    /// time grows with every row (docs/benchmarks.md, lanes).
    #[arg(long, env = "FLEET_BULK_FILL")]
    pub bulk_fill: Option<bool>,
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
    #[arg(long, env = "FLEET_LOW_WATER_PERCENT", default_value_t = 50, value_parser = clap::value_parser!(u8).range(1..=99))]
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
    /// answer for longer than this while Redis and the broker answer (a
    /// stuck sink or engine), or when its model has failed its known-good
    /// probe for longer: Kubernetes restarts it. A dependency that is away
    /// never fails liveness (only /ready).
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
    /// Before an answer's offset may move on, wait until this many Redis
    /// replicas have acknowledged the write (Redis WAIT): a failover to a
    /// replica then cannot lose it. 0: the primary's acknowledgement is
    /// enough (a loss is noticed and replayed instead). Not with
    /// --redis-cluster.
    #[arg(long, env = "FLEET_REDIS_WAIT_REPLICAS", default_value_t = 0)]
    pub redis_wait_replicas: u32,
    /// How long one WAIT may take; fewer replicas by then is a failed write,
    /// retried (the answer is held, uncommitted).
    #[arg(long, env = "FLEET_REDIS_WAIT_TIMEOUT", default_value = "1s", value_parser = humantime::parse_duration)]
    pub redis_wait_timeout: std::time::Duration,
    /// How often the model repository is checked for a new version or pin.
    #[arg(long, env = "FLEET_MODEL_POLL_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    pub model_poll_interval: std::time::Duration,
    /// How often the C heap's free pages are handed back to the kernel
    /// (malloc_trim): batches of ever new shapes leave glibc's arenas
    /// holding freed memory, and RSS grows without a leak (docs/soak.md).
    /// 0s: never (fleet_heap_in_use_bytes is still read every 30 s).
    #[arg(long, env = "FLEET_HEAP_TRIM_INTERVAL", default_value = "30s", value_parser = humantime::parse_duration)]
    pub heap_trim_interval: std::time::Duration,
    /// Entries in each of libtorch's kernel caches (oneDNN's and ideep's),
    /// which keep the kernels planned per input shape: `auto` (64 for a
    /// text model, whose batches bring ever new shapes; libtorch's 1 024
    /// for an image model), `libtorch`, or a number. An
    /// ONEDNN_PRIMITIVE_CACHE_CAPACITY or LRU_CACHE_CAPACITY already in
    /// the environment stands (docs/operations.md).
    #[arg(long, env = "FLEET_KERNEL_CACHE_CAPACITY", default_value = "auto")]
    pub kernel_cache_capacity: crate::kernel_caches::KernelCacheCapacity,
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

    pub fn intra_op_threads(&self) -> usize {
        self.intra_op_threads.unwrap_or_else(|| default_intra_op_threads(cores())).max(1)
    }
}

/// The cores this process may use (cgroup-aware), at least 1.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The cores left for the model at start: all but one for the rest of the worker.
pub fn default_intra_op_threads(cores: usize) -> usize {
    cores.saturating_sub(1).max(1)
}

/// Bulk's least share of the contested turns: above 0 (bulk must never
/// starve) and at most a half (past it, bulk would go first).
fn parse_share(raw: &str) -> Result<f64, String> {
    match raw.parse::<f64>() {
        Ok(share) if share > 0.0 && share <= 0.5 => Ok(share),
        _ => Err(format!("{raw:?} is not a share in (0, 0.5], e.g. 0.1")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_gets_all_cores_but_one() {
        assert_eq!((default_intra_op_threads(1), default_intra_op_threads(2)), (1, 1));
        assert_eq!(default_intra_op_threads(8), 7);
    }

    #[test]
    fn a_share_is_within_zero_and_one() {
        assert_eq!(parse_share("0.1"), Ok(0.1));
        assert_eq!(parse_share("0.5"), Ok(0.5));
        for bad in ["0", "-0.1", "0.6", "1", "ten", "NaN"] {
            assert!(parse_share(bad).is_err(), "{bad} accepted");
        }
    }
}
