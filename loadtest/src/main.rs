//! `loadtest`: open-loop load against a running fleet (`run`), fault drills
//! on a fleet it starts itself (`drill`), and replica planning from
//! measured capacity (`plan`). Every run ends with its ledger; a run that
//! lost a request exits with status 1.

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use fleet_connect::namespace::NamespaceArgs;
use fleet_connect::redis::RedisConfig;
use fleet_producer::KafkaConfig;
use fleet_proto::ModelName;
use loadtest::admission_bench::{self, AdmissionBench};
use loadtest::capacity;
use loadtest::drill::{self, Drill, DrillConfig};
use loadtest::fleet::Binaries;
use loadtest::plan::{self, Capacity};
use loadtest::profile::Profile;
use loadtest::report;
use loadtest::runner::{self, RunConfig, RunOutcome};
use loadtest::{bulk_answers_bench, lanes_bench};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Parser)]
#[command(version, about = "Open-loop load tests, fault drills and capacity planning for the fleet")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Open-loop load against a running fleet; writes a report folder.
    Run(Box<RunArgs>),
    /// Start a fleet here, load it, inject a fault, and check the ledger.
    Drill(DrillArgs),
    /// One worker's capacity per batching setting: steady load at rising
    /// rates on a fleet started here; writes points, capacities and a plot.
    Capacity(CapacityArgs),
    /// Replicas needed for a target rate, from a capacity CSV.
    Plan(PlanArgs),
    /// The same burst through fixed and adaptive producer admission, each on
    /// a fleet started here: wasted (expired) and served (ok) answers.
    Admission(AdmissionArgs),
    /// The fleet against a plain Python consumer (the usual design) on the
    /// same texts, broker and Redis, one after the other.
    Peer(PeerArgs),
    /// Interactive latency alone, behind a backfill on the same topic, and
    /// with the backfill on the bulk lane; then the backfill cancelled
    /// mid-run. One worker, each step on a fleet started here.
    Lanes(LanesArgs),
    /// Hours of steady texts and images on a fleet started here, with
    /// faults on a schedule; a report (memory, latency, ledger per
    /// partition) and a verdict against budgets.
    Soak(Box<SoakArgs>),
    /// A real backfill sent and collected with `fleet-produce bulk --out`
    /// beside interactive load: its answers on Kafka against the same
    /// backfill with its answers in Redis; optionally with kills.
    BulkAnswers(Box<bulk_answers_bench::BulkAnswersArgs>),
}

#[derive(Args)]
struct SoakArgs {
    /// How long the load lasts (the capacity measurement and the drain come on top).
    #[arg(long, default_value = "2h", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// No fault before this, and memory growth is judged from here on.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    warm_up: Duration,
    /// Time between the starts of two faults (they cycle: join, leave, model
    /// swap, broken model, broker restart, Redis freeze, burst).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    fault_every: Duration,
    /// Every fault once, spread over the run (the short soak of make test),
    /// instead of a fault every --fault-every.
    #[arg(long)]
    every_fault_once: bool,
    /// No fault starts within this of the end, so the last one is seen to recover.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    settle: Duration,
    #[arg(long, default_value = "8s", value_parser = humantime::parse_duration)]
    broker_down: Duration,
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    redis_frozen: Duration,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    burst_for: Duration,
    #[arg(long, default_value_t = 10.0)]
    burst_factor: f64,
    /// The offered rates as a share of what each worker answers alone.
    #[arg(long, default_value_t = 0.25)]
    capacity_fraction: f64,
    /// How often every worker is sampled.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    sample_every: Duration,
    /// The peak RSS a worker may reach (default: the chart's smaller memory limit, 3 GiB).
    #[arg(long, default_value_t = 3072)]
    rss_limit_mib: u64,
    #[arg(long, default_value_t = 1000)]
    capacity_texts: usize,
    #[arg(long, default_value_t = 48)]
    capacity_images: usize,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    #[arg(long, default_value_t = 34)]
    seed: u64,
    /// An extra fleet-worker argument for every worker (repeatable).
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
    /// The photos sent to the image model (PNG, JPEG, WebP).
    #[arg(long, default_value = "models/efficientnet_lite0/1/reference")]
    images: PathBuf,
    /// The report folder; default loadtest-report/soak-<unix time>.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Soak a fleet that runs elsewhere (staging) instead of one started
    /// here: --brokers, --redis and the prefixes name it, --worker its
    /// workers' metrics, --fault-command its faults; --text-rate and
    /// --image-rate the load (docs/operations.md, section 9).
    #[arg(long, requires_all = ["text_rate", "image_rate"])]
    staging: bool,
    #[command(flatten)]
    kafka: fleet_connect::kafka::KafkaArgs,
    #[command(flatten)]
    redis: RedisConfig,
    #[command(flatten)]
    namespace: NamespaceArgs,
    /// Texts per second (open loop; bursts multiply it). Required with
    /// --staging; on a local fleet it replaces --capacity-fraction (with
    /// --image-rate), so a rerun can offer an earlier run's load.
    #[arg(long, requires = "image_rate")]
    text_rate: Option<f64>,
    /// Images per second (see --text-rate).
    #[arg(long, requires = "text_rate")]
    image_rate: Option<f64>,
    #[arg(long, default_value = "minilm")]
    text_model: ModelName,
    #[arg(long, default_value = "efficientnet_lite0")]
    image_model: ModelName,
    /// --staging: a worker's name and metrics address, NAME=HOST:PORT
    /// (repeatable; e.g. through kubectl port-forward).
    #[arg(long = "worker", value_parser = parse_worker)]
    workers: Vec<(String, std::net::SocketAddr)>,
    /// --staging: the command that makes a fault, FAULT=COMMAND (repeatable;
    /// run with sh -c, with FLEET_SOAK_FAULT and FLEET_SOAK_FAULT_SECONDS
    /// set). Faults without one are left out; bursts need none.
    #[arg(long = "fault-command", value_parser = loadtest::soak::run::FaultCommands::parse_one)]
    fault_commands: Vec<(loadtest::soak::schedule::Fault, String)>,
    /// --staging: how long a fault's command may run beyond the fault's own
    /// length before it is killed and the fault counted as not injected.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    fault_command_timeout: Duration,
}

/// `NAME=HOST:PORT`, the host resolved now.
fn parse_worker(arg: &str) -> Result<(String, std::net::SocketAddr), String> {
    use std::net::ToSocketAddrs;
    let (name, address) = arg.split_once('=').ok_or("expected NAME=HOST:PORT")?;
    let resolved = address
        .to_socket_addrs()
        .map_err(|e| format!("{address}: {e}"))?
        .next()
        .ok_or_else(|| format!("{address} resolves to no address"))?;
    Ok((name.to_owned(), resolved))
}

#[derive(Args)]
struct LanesArgs {
    /// Each step's interactive window.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Texts of the backfill, sent at once just before the window.
    #[arg(long, default_value_t = 50_000)]
    backfill: usize,
    /// The interactive rate as a share of the worker's measured capacity.
    #[arg(long, default_value_t = 0.3)]
    interactive_fraction: f64,
    /// When, into the last step's window, the backfill's job is cancelled.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    cancel_at: Duration,
    /// Texts sent at once to measure the worker's capacity.
    #[arg(long, default_value_t = 2000)]
    capacity_texts: usize,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    #[arg(long, default_value_t = 32)]
    seed: u64,
    /// An extra fleet-worker argument (repeatable), e.g. --worker-arg=--bulk-share=0.2.
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
}

#[derive(Args)]
struct PeerArgs {
    /// Texts sent to each side.
    #[arg(long, default_value_t = 3000)]
    count: usize,
    /// Median text length, words (log-normal lengths).
    #[arg(long, default_value_t = 15.0)]
    median_words: f64,
    /// σ of the log-normal: 1.05 puts the 99.9th percentile near 380 words.
    #[arg(long, default_value_t = 1.05)]
    sigma: f64,
    #[arg(long, default_value_t = 380)]
    max_words: usize,
    #[arg(long, default_value_t = 11)]
    seed: u64,
    #[arg(long, default_value_t = 8)]
    partitions: i32,
    /// Rounds of every side in turn (the order reversed every other round);
    /// each side's figure is its median.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The peer's precisions, e.g. fp32,bf16; default: fp32, plus bf16 where
    /// the CPU has it in hardware (avx512_bf16 or amx_bf16).
    #[arg(long, value_delimiter = ',', value_parser = loadtest::peer_bench::Precision::parse)]
    peer_precisions: Vec<loadtest::peer_bench::Precision>,
    /// An extra fleet-worker argument (repeatable).
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
    /// The peer's Python: the setup's venv (env.sh puts it first on PATH).
    #[arg(long, default_value = "python3")]
    python: PathBuf,
    #[arg(long, default_value = "loadtest/peer/plain_consumer.py")]
    script: PathBuf,
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Real English sentences the texts are cut from.
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
}

#[derive(Args)]
struct AdmissionArgs {
    /// Base rate, requests per second; the burst is --burst-factor times it.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    #[arg(long, default_value_t = 10.0)]
    burst_factor: f64,
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    burst_at: Duration,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    burst_for: Duration,
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Every request's deadline after its send.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    deadline: Duration,
    /// The fixed rule's backlog limit (a guessed constant).
    #[arg(long, default_value_t = 1000)]
    fixed_backlog: u64,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    #[arg(long, default_value_t = 3)]
    seed: u64,
    /// How many times the pair of runs is repeated (books summed): one
    /// run's noise is larger than the difference measured.
    #[arg(long, default_value_t = 3)]
    rounds: u64,
    /// Write each run's report folder (records, seconds, plots) under this.
    #[arg(long)]
    out: Option<PathBuf>,
    /// An extra fleet-worker argument (repeatable).
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
}

#[derive(Args)]
struct CapacityArgs {
    /// max_batch_size:max_batch_tokens (repeatable).
    #[arg(long = "setting", value_parser = capacity::Setting::parse, required_unless_present = "from_points")]
    settings: Vec<capacity::Setting>,
    /// Judge an earlier sweep's points.csv against --slo-p99 instead of measuring.
    #[arg(long)]
    from_points: Option<PathBuf>,
    /// Offered rates to step through, req/s (a setting stops at its first overload).
    #[arg(long, value_delimiter = ',', default_value = "25,50,75,100,125,150,175,200")]
    rates: Vec<f64>,
    /// How long each rate is offered.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    step: Duration,
    /// The p99 end-to-end latency a sustained rate must stay within.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    slo_p99: Duration,
    #[arg(long, default_value_t = 2)]
    intra_op_threads: usize,
    /// An extra fleet-worker argument (repeatable), e.g. --worker-arg=--kafka-property=fetch.wait.max.ms=50.
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
    /// Where points.csv, capacity.csv and capacity.png go.
    #[arg(long, default_value = "docs/data")]
    out: PathBuf,
}

#[derive(Clone, Copy, ValueEnum)]
enum ProfileName {
    Steady,
    Ramp,
    Burst,
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    kafka: fleet_connect::kafka::KafkaArgs,
    /// One Redis server, or a Redis Cluster with --redis-cluster.
    #[command(flatten)]
    redis: RedisConfig,
    /// The measured release's topic, group and Redis key prefixes, as its
    /// workers were given them.
    #[command(flatten)]
    namespace: NamespaceArgs,
    #[arg(long, default_value = "minilm")]
    model: ModelName,
    #[arg(long, value_enum, default_value = "steady")]
    profile: ProfileName,
    /// Requests per second (steady; the base of a burst; the end of a ramp).
    #[arg(long, default_value_t = 50.0)]
    rate: f64,
    /// Ramp: the rate at the start.
    #[arg(long, default_value_t = 1.0)]
    ramp_from: f64,
    /// Burst: how many times the base rate.
    #[arg(long, default_value_t = 10.0)]
    burst_factor: f64,
    /// Burst: when it starts.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    burst_at: Duration,
    /// Burst: how long it lasts.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    burst_for: Duration,
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// At most this many requests, whatever the profile.
    #[arg(long, default_value_t = 200_000)]
    max_requests: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Each request's deadline after its send; default: the model's TTL.
    #[arg(long, value_parser = humantime::parse_duration)]
    ttl: Option<Duration>,
    /// How long to keep collecting answers after the last send.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    drain: Duration,
    /// The report folder; default loadtest-report/<profile>-<unix time>.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Sentences the texts are made of.
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
    #[arg(long)]
    no_progress: bool,
}

#[derive(Args)]
struct DrillArgs {
    #[arg(value_enum)]
    drill: Drill,
    /// Offered load, requests per second.
    #[arg(long, default_value_t = 40.0)]
    rate: f64,
    #[arg(long, default_value = "40s", value_parser = humantime::parse_duration)]
    duration: Duration,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    fault_at: Duration,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    fault_for: Duration,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
    /// The report folder; default loadtest-report/drill-<name>-<unix time>.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args)]
struct PlanArgs {
    #[arg(long)]
    target_qps: f64,
    /// CSV `label,sustained_rps,p99_ms` (from a capacity run).
    #[arg(long, default_value = "docs/data/capacity.csv")]
    capacity: PathBuf,
    /// Spare share kept for bursts and a lost pod.
    #[arg(long, default_value_t = 0.3)]
    headroom: f64,
    /// The topic's partitions: more replicas than that would idle.
    #[arg(long, default_value_t = 64)]
    max_replicas: u32,
}

fn unix_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn read_corpus(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let corpus: Vec<String> = text.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect();
    if corpus.is_empty() {
        bail!("{} holds no sentences", path.display());
    }
    Ok(corpus)
}

/// Writes the report, prints the summary; fails when anything was lost.
fn finish(dir: &Path, title: &str, outcome: &RunOutcome) -> Result<()> {
    let summary = report::write(dir, title, outcome)?;
    println!("report: {}", dir.display());
    print!("{summary}");
    if outcome.ledger.lost() > 0 {
        bail!("{} requests lost", outcome.ledger.lost());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn,loadtest=info".into()),
        )
        .init();
    let command = Cli::parse().command;
    // Interrupted, the command's future is dropped, and with it every
    // broker, Redis and worker it started (their handles kill on drop).
    tokio::select! {
        outcome = execute(command) => outcome,
        signal = interrupted() => bail!("interrupted by {signal}"),
    }
}

async fn interrupted() -> &'static str {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return "Ctrl-C";
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "Ctrl-C",
        _ = term.recv() => "SIGTERM",
    }
}

async fn execute(command: Command) -> Result<()> {
    match command {
        Command::Run(args) => {
            let args = *args;
            let profile = match args.profile {
                ProfileName::Steady => Profile::Steady { rate: args.rate },
                ProfileName::Ramp => Profile::Ramp { from: args.ramp_from, to: args.rate },
                ProfileName::Burst => Profile::Burst {
                    rate: args.rate,
                    factor: args.burst_factor,
                    start_s: args.burst_at.as_secs_f64(),
                    burst_s: args.burst_for.as_secs_f64(),
                },
            };
            let name = match args.profile {
                ProfileName::Steady => "steady",
                ProfileName::Ramp => "ramp",
                ProfileName::Burst => "burst",
            };
            // Settings that cannot work fail here, before the Kafka check's wait.
            let (redis, names) = (args.redis.target()?, args.namespace.namespace()?);
            // What is measured, said once: a prefix exported for the workers
            // (FLEET_*_PREFIX) applies here too.
            let server = if matches!(redis, fleet_connect::redis::RedisTarget::Cluster(_)) {
                "a Redis Cluster"
            } else {
                "one Redis server"
            };
            println!(
                "measuring topic {}, group {}, answers on {server}",
                names.topic(&args.model),
                names.consumer_group(&args.model)
            );
            let kafka = KafkaConfig::from_args(&args.kafka)?;
            fleet_connect::kafka_check::check_at_start(&kafka.client_config(), std::time::Duration::from_secs(10))?;
            let started = unix_s();
            let outcome = runner::run(RunConfig {
                kafka,
                redis,
                names,
                model: args.model.clone(),
                profile,
                duration: args.duration,
                seed: args.seed,
                max_requests: args.max_requests,
                corpus: read_corpus(&args.corpus)?,
                ttl: args.ttl,
                drain: args.drain,
                run_id: format!("lt-{name}-{started}"),
                progress: !args.no_progress,
                admission: None,
                arrivals: None,
                images: Vec::new(),
            })
            .await?;
            let dir = args.out.unwrap_or_else(|| PathBuf::from(format!("loadtest-report/{name}-{started}")));
            let title = format!("{name} {} req/s, {:?}, {}", args.rate, args.duration, args.model);
            finish(&dir, &title, &outcome)
        }
        Command::Peer(args) => {
            use loadtest::peer_bench::{self, Medians, PeerBench};
            if args.rounds == 0 {
                bail!("--rounds must be at least 1");
            }
            let corpus = read_corpus(&args.corpus)?;
            // Each round makes them its own (peer_bench::round_texts).
            let texts = loadtest::workload::generate_words(
                &corpus,
                args.count,
                args.seed,
                args.median_words,
                args.sigma,
                args.max_words,
            );
            let words: Vec<usize> = texts.iter().map(|t| t.split_whitespace().count()).collect();
            println!(
                "workload: {} texts, median {} words, longest {} words",
                texts.len(),
                peer_bench::median(&words),
                words.iter().max().copied().unwrap_or(0)
            );
            // Unreadable (not Linux): no bf16 found, the model unknown.
            let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
            let cpu = lanes_bench::cpu_model(&cpuinfo).unwrap_or_else(|| "unknown CPU".to_owned());
            let peers = peer_bench::peer_precisions(&args.peer_precisions, &cpuinfo);
            let names: Vec<&str> = peers.iter().map(|p| p.name()).collect();
            println!(
                "machine: {cpu}, bf16 in hardware: {}; peer precisions: {}; {} rounds",
                if peer_bench::fast_bf16(&cpuinfo) { "yes" } else { "no" },
                names.join(", "),
                args.rounds
            );
            let bench = PeerBench {
                binaries: Binaries::from_env()?,
                texts,
                partitions: args.partitions,
                worker_args: args.worker_args,
                python: args.python,
                script: args.script,
                peers,
                timeout: args.timeout,
            };
            let mut rounds = Vec::with_capacity(args.rounds);
            for number in 1..=args.rounds {
                let round = peer_bench::round(&bench, number, |contender, side| {
                    println!("{}", peer_bench::side_line(number, contender, side));
                })
                .await?;
                for (precision, cosine) in round.cosines() {
                    println!("round {number} min cosine, fleet vs peer-{}: {cosine:.5}", precision.name());
                }
                rounds.push(round);
            }
            let medians = Medians::of(&rounds);
            println!("median of {} rounds: fleet {:.1}/s", rounds.len(), medians.fleet);
            for (precision, rate) in &medians.peers {
                println!("median of {} rounds: peer-{} {rate:.1}/s", rounds.len(), precision.name());
            }
            println!("{}", peer_bench::result_line(&cpu, &medians));
            Ok(())
        }
        Command::BulkAnswers(args) => {
            let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().as_deref().and_then(lanes_bench::cpu_model);
            let cores = std::thread::available_parallelism().map_or(0, usize::from);
            println!("machine: {}, {cores} cores", cpu.as_deref().unwrap_or("unknown CPU"));
            println!("command: {}", std::env::args().collect::<Vec<_>>().join(" "));
            let corpus = read_corpus(args.corpus())?;
            bulk_answers_bench::command(*args, corpus).await
        }
        Command::Lanes(args) => {
            if args.interactive_fraction <= 0.0 || args.interactive_fraction >= 1.0 {
                bail!("--interactive-fraction must be in (0, 1)");
            }
            if args.cancel_at >= args.duration {
                bail!("--cancel-at must fall inside --duration");
            }
            if args.backfill == 0 || args.capacity_texts == 0 {
                bail!("--backfill and --capacity-texts must be at least 1");
            }
            let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().as_deref().and_then(lanes_bench::cpu_model);
            let cores = std::thread::available_parallelism().map_or(0, usize::from);
            println!("machine: {}, {cores} cores", cpu.as_deref().unwrap_or("unknown CPU"));
            println!("command: {}", std::env::args().collect::<Vec<_>>().join(" "));
            let bench = lanes_bench::LanesBench {
                binaries: Binaries::from_env()?,
                corpus: read_corpus(&args.corpus)?,
                duration: args.duration,
                backfill: args.backfill,
                interactive_fraction: args.interactive_fraction,
                cancel_at: args.cancel_at,
                capacity_texts: args.capacity_texts,
                partitions: args.partitions,
                seed: args.seed,
                worker_args: args.worker_args,
            };
            let report = lanes_bench::run(&bench).await?;
            println!("{}", lanes_bench::lanes_line(&report));
            println!("{}", lanes_bench::cancel_line(&report.cancel));
            if !report.problems.is_empty() {
                bail!("{}", report.problems.join("; "));
            }
            Ok(())
        }
        Command::Soak(args) => soak(*args).await,
        Command::Admission(args) => {
            let bench = AdmissionBench {
                binaries: Binaries::from_env()?,
                profile: Profile::Burst {
                    rate: args.rate,
                    factor: args.burst_factor,
                    start_s: args.burst_at.as_secs_f64(),
                    burst_s: args.burst_for.as_secs_f64(),
                },
                duration: args.duration,
                deadline: args.deadline,
                fixed_backlog: args.fixed_backlog,
                seed: args.seed,
                rounds: args.rounds,
                corpus: read_corpus(&args.corpus)?,
                partitions: args.partitions,
                worker_args: args.worker_args,
                out: args.out,
            };
            let rounds = admission_bench::run(&bench, |round, compared| {
                println!("round {round}:");
                print_admission_books(compared);
            })
            .await?;
            let total = admission_bench::Compared::total(&rounds);
            println!("all {} rounds:", rounds.len());
            print_admission_books(&total);
            println!("{}", admission_bench::result_line(&total));
            Ok(())
        }
        Command::Drill(args) => {
            let config = DrillConfig {
                binaries: Binaries::from_env()?,
                corpus: read_corpus(&args.corpus)?,
                rate: args.rate,
                duration: args.duration,
                fault_at: args.fault_at,
                fault_for: args.fault_for,
                partitions: args.partitions,
                seed: args.seed,
            };
            let outcome = drill::run(args.drill, config).await?.run;
            let dir = args
                .out
                .unwrap_or_else(|| PathBuf::from(format!("loadtest-report/drill-{}-{}", args.drill.name(), unix_s())));
            let title = format!("drill {} at {} req/s", args.drill.name(), args.rate);
            finish(&dir, &title, &outcome)
        }
        Command::Capacity(args) => {
            let points = match &args.from_points {
                Some(path) => capacity::read_points(
                    &std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
                )?,
                None => {
                    capacity::sweep(capacity::SweepConfig {
                        binaries: Binaries::from_env()?,
                        corpus: read_corpus(&args.corpus)?,
                        settings: args.settings,
                        rates: args.rates,
                        step: args.step,
                        slo_p99_ms: args.slo_p99.as_secs_f64() * 1000.0,
                        intra_op_threads: args.intra_op_threads,
                        worker_args: args.worker_args.clone(),
                    })
                    .await?
                }
            };
            let slo_ms = args.slo_p99.as_secs_f64() * 1000.0;
            capacity::write(&args.out, &points, slo_ms)?;
            loadtest::plot::capacity(&args.out.join("capacity.png"), &points, slo_ms)
                .map_err(|e| anyhow::anyhow!("plotting capacity: {e}"))?;
            println!("setting                       offered   ok/s    p50 ms   p99 ms  expired");
            for p in &points {
                println!(
                    "{:<28} {:>8.0} {:>7.1} {:>9.0} {:>8.0} {:>8}",
                    p.setting.label(),
                    p.offered_rps,
                    p.ok_rps,
                    p.p50_ms,
                    p.p99_ms,
                    p.expired
                );
            }
            for c in capacity::capacities(&points, slo_ms) {
                println!(
                    "capacity {}: {:.1} req/s at p99 {:.0} ms (SLO {slo_ms:.0} ms)",
                    c.label, c.sustained_rps, c.p99_ms
                );
            }
            println!("wrote {}/points.csv, capacity.csv, capacity.png", args.out.display());
            Ok(())
        }
        Command::Plan(args) => {
            let text = std::fs::read_to_string(&args.capacity)
                .with_context(|| format!("reading {}", args.capacity.display()))?;
            let capacities = parse_capacity(&text)?;
            let best = plan::best(&capacities).context("the capacity file is empty")?;
            match plan::replicas_for(args.target_qps, best.sustained_rps, args.headroom, args.max_replicas) {
                Some(replicas) => println!(
                    "{} req/s: {replicas} replicas of the best setting ({}: {:.0} req/s each at p99 {:.0} ms), {:.0} % headroom",
                    args.target_qps,
                    best.label,
                    best.sustained_rps,
                    best.p99_ms,
                    args.headroom * 100.0
                ),
                None => bail!(
                    "{} req/s needs more than {} replicas at {:.0} req/s each: add partitions or faster replicas",
                    args.target_qps,
                    args.max_replicas,
                    best.sustained_rps
                ),
            }
            Ok(())
        }
    }
}

async fn soak(args: SoakArgs) -> Result<()> {
    use loadtest::soak::{report, run, schedule};
    if !(args.capacity_fraction > 0.0 && args.capacity_fraction < 1.0) {
        bail!("--capacity-fraction must be in (0, 1)");
    }
    if [args.text_rate, args.image_rate].iter().flatten().any(|rate| !(rate.is_finite() && *rate > 0.0)) {
        bail!("--text-rate and --image-rate must be above 0");
    }
    let config = schedule::ScheduleConfig {
        duration_s: args.duration.as_secs_f64(),
        warm_up_s: args.warm_up.as_secs_f64(),
        every_s: args.fault_every.as_secs_f64(),
        settle_s: args.settle.as_secs_f64(),
        broker_down_s: args.broker_down.as_secs_f64(),
        redis_frozen_s: args.redis_frozen.as_secs_f64(),
        burst_s: args.burst_for.as_secs_f64(),
    };
    let plan = if args.every_fault_once {
        // A fault's effects (a rebalance, a reconnect) take seconds to pass:
        // at least 15 s of quiet between one fault's end and the next.
        schedule::every_fault_once(&config, 15.0)
            .context("--duration is too short for every fault once after --warm-up and before --settle")?
    } else {
        schedule::plan(&config)
    };
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let machine = format!(
        "{}, {cores} cores, {}",
        lanes_bench::cpu_model(&cpuinfo).unwrap_or_else(|| "unknown CPU".to_owned()),
        memory_total().unwrap_or_else(|| "memory unknown".to_owned())
    );
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    println!("machine: {machine}");
    println!("command: {command}");
    println!("{} faults planned over {:?}", plan.len(), args.duration);
    let dir = args.out.clone().unwrap_or_else(|| PathBuf::from(format!("loadtest-report/soak-{}", unix_s())));
    let load = run::SoakLoad {
        corpus: read_corpus(&args.corpus)?,
        images: run::read_images(&args.images)?,
        duration: args.duration,
        plan,
        burst_factor: args.burst_factor,
        sample_every: args.sample_every,
        seed: args.seed,
        samples_file: Some(dir.join("samples.csv")),
    };
    // Samples are written here as they are taken.
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let outcome = if args.staging {
        if args.workers.is_empty() {
            bail!("--staging needs at least one --worker NAME=HOST:PORT to sample");
        }
        let commands = run::FaultCommands(args.fault_commands.clone());
        let load = run::SoakLoad { plan: commands.keep(load.plan), ..load };
        let (redis, names) = (args.redis.target()?, args.namespace.namespace()?);
        let kafka = KafkaConfig::from_args(&args.kafka)?;
        fleet_connect::kafka_check::check_at_start(&kafka.client_config(), Duration::from_secs(10))?;
        println!(
            "staging: topics {} and {}, {} workers sampled, {} faults with a command or a burst",
            names.topic(&args.text_model),
            names.topic(&args.image_model),
            args.workers.len(),
            load.plan.len()
        );
        run::run_staging(run::StagingConfig {
            kafka,
            redis,
            names,
            text_model: args.text_model.clone(),
            image_model: args.image_model.clone(),
            load,
            text_rate: args.text_rate.unwrap_or_default(),
            image_rate: args.image_rate.unwrap_or_default(),
            workers: args.workers.clone(),
            commands,
            command_timeout: args.fault_command_timeout,
        })
        .await?
    } else {
        run::run(run::SoakConfig {
            binaries: Binaries::from_env()?,
            load,
            capacity_fraction: args.capacity_fraction,
            fixed_rates: args.text_rate.zip(args.image_rate),
            partitions: args.partitions,
            worker_args: args.worker_args.clone(),
            capacity_texts: args.capacity_texts,
            capacity_images: args.capacity_images,
            work_dir: dir.join("work"),
        })
        .await?
    };
    let about = report::About {
        machine,
        command,
        warm_up_s: args.warm_up.as_secs_f64(),
        interval_s: args.sample_every.as_secs_f64(),
        rss_limit_bytes: args.rss_limit_mib as f64 * 1024.0 * 1024.0,
    };
    let judged = report::write(&dir, &about, &outcome)?;
    let _ = std::fs::remove_dir_all(dir.join("work"));
    println!("report: {}/report.md", dir.display());
    for failure in judged.failures() {
        println!("broken: {failure}");
    }
    println!("{}", judged.result_line);
    if !judged.failures().is_empty() {
        bail!("the soak broke {} budgets", judged.failures().len());
    }
    Ok(())
}

/// MemTotal of /proc/meminfo, in GiB.
fn memory_total() -> Option<String> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: f64 = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(format!("{:.0} GiB", kib / 1024.0 / 1024.0))
}

/// `label,sustained_rps,p99_ms` lines after a header.
fn parse_capacity(text: &str) -> Result<Vec<Capacity>> {
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, line)| {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            match fields.as_slice() {
                [label, rps, p99, ..] => Ok(Capacity {
                    label: (*label).to_owned(),
                    sustained_rps: rps.parse().with_context(|| format!("line {}: sustained_rps", i + 2))?,
                    p99_ms: p99.parse().with_context(|| format!("line {}: p99_ms", i + 2))?,
                }),
                _ => bail!("line {}: expected label,sustained_rps,p99_ms", i + 2),
            }
        })
        .collect()
}

fn print_admission_books(compared: &admission_bench::Compared) {
    for (name, ledger) in [("fixed backlog limit", &compared.fixed), ("predicted wait", &compared.adaptive)] {
        println!(
            "  {name}: offered {}, refused by the producer {}, ok {}, expired {}, error {}, dlq {}, missing {}",
            ledger.sent + ledger.send_failed,
            ledger.send_failed,
            ledger.ok,
            ledger.expired,
            ledger.error,
            ledger.dlq,
            ledger.missing
        );
        println!("    {}", ledger.result_line());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use fleet_connect::redis::RedisTarget;
    use fleet_proto::Namespace;

    fn run_args(argv: &[&str]) -> RunArgs {
        match Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}")).command {
            Command::Run(args) => *args,
            _ => panic!("not a run"),
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_lanes_bench_defaults_to_the_issue_s_benchmark() {
        let Command::Lanes(args) = Cli::try_parse_from(["loadtest", "lanes", "--worker-arg=--bulk-share=0.2"])
            .unwrap_or_else(|e| panic!("{e}"))
            .command
        else {
            panic!("not lanes");
        };
        assert_eq!((args.duration, args.cancel_at), (Duration::from_secs(60), Duration::from_secs(30)));
        assert_eq!((args.backfill, args.interactive_fraction), (50_000, 0.3));
        assert_eq!(args.worker_args, ["--bulk-share=0.2"]);
    }

    #[test]
    fn a_run_measures_a_prefixed_release_on_a_cluster() {
        let args = run_args(&[
            "loadtest",
            "run",
            "--topic-prefix",
            "blue.infer.",
            "--group-prefix",
            "blue-fleet.",
            "--redis-prefix",
            "blue:fleet:",
            "--redis-cluster",
            "--redis",
            "redis://a:7000,redis://b:7001",
        ]);
        let names = args.namespace.namespace().unwrap();
        assert_eq!(names, Namespace::new("blue.infer.", "blue-fleet.", "blue:fleet:").unwrap());
        assert!(matches!(args.redis.target(), Ok(RedisTarget::Cluster(_))));
    }
}
