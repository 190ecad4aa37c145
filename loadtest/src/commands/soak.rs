//! `loadtest soak`: hours of steady texts and images on a fleet started
//! here (or one elsewhere, with `--staging`), faults on a schedule; a
//! report and a verdict against budgets ([`loadtest::soak`]).

use super::{command_line, read_corpus, unix_s};
use anyhow::{bail, Context, Result};
use clap::Args;
use fleet_connect::namespace::NamespaceArgs;
use fleet_connect::redis::RedisConfig;
use fleet_producer::KafkaConfig;
use fleet_proto::ModelName;
use loadtest::fleet::Binaries;
use loadtest::machine;
use loadtest::soak::report;
use loadtest::soak::run::{self, SoakLoad, SoakOutcome};
use loadtest::soak::schedule::{self, Planned};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Args)]
pub struct SoakArgs {
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

pub async fn execute(args: SoakArgs) -> Result<()> {
    if !(args.capacity_fraction > 0.0 && args.capacity_fraction < 1.0) {
        bail!("--capacity-fraction must be in (0, 1)");
    }
    if [args.text_rate, args.image_rate].iter().flatten().any(|rate| !(rate.is_finite() && *rate > 0.0)) {
        bail!("--text-rate and --image-rate must be above 0");
    }
    let plan = fault_plan(&args)?;
    let machine = format!(
        "{}, {}",
        machine::cpu_and_cores(&machine::cpuinfo()),
        machine::memory_total().unwrap_or_else(|| "memory unknown".to_owned())
    );
    let command = command_line();
    println!("machine: {machine}");
    println!("command: {command}");
    println!("{} faults planned over {:?}", plan.len(), args.duration);
    let dir = args.out.clone().unwrap_or_else(|| PathBuf::from(format!("loadtest-report/soak-{}", unix_s())));
    let load = SoakLoad {
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
    let outcome = if args.staging { staging(&args, load).await? } else { local(&args, load, &dir).await? };
    judge(&args, &dir, machine, command, &outcome)
}

/// When each fault comes: one every --fault-every, or every fault once.
fn fault_plan(args: &SoakArgs) -> Result<Vec<Planned>> {
    let config = schedule::ScheduleConfig {
        duration_s: args.duration.as_secs_f64(),
        warm_up_s: args.warm_up.as_secs_f64(),
        every_s: args.fault_every.as_secs_f64(),
        settle_s: args.settle.as_secs_f64(),
        broker_down_s: args.broker_down.as_secs_f64(),
        redis_frozen_s: args.redis_frozen.as_secs_f64(),
        burst_s: args.burst_for.as_secs_f64(),
    };
    Ok(if args.every_fault_once {
        // A fault's effects (a rebalance, a reconnect) take seconds to pass:
        // at least 15 s of quiet between one fault's end and the next.
        schedule::every_fault_once(&config, 15.0)
            .context("--duration is too short for every fault once after --warm-up and before --settle")?
    } else {
        schedule::plan(&config)
    })
}

/// The soak of a fleet elsewhere: its brokers, Redis, names and workers,
/// the faults that have a command.
async fn staging(args: &SoakArgs, load: SoakLoad) -> Result<SoakOutcome> {
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
    .await
}

/// The soak of a fleet started here, its work files under `dir`.
async fn local(args: &SoakArgs, load: SoakLoad, dir: &Path) -> Result<SoakOutcome> {
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
    .await
}

/// Writes the report and prints the verdict; fails when a budget broke.
fn judge(args: &SoakArgs, dir: &Path, machine: String, command: String, outcome: &SoakOutcome) -> Result<()> {
    let about = report::About {
        machine,
        command,
        warm_up_s: args.warm_up.as_secs_f64(),
        interval_s: args.sample_every.as_secs_f64(),
        rss_limit_bytes: args.rss_limit_mib as f64 * 1024.0 * 1024.0,
    };
    let judged = report::write(dir, &about, outcome)?;
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
