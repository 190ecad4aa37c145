//! `fleet-lag`: consumer-group lag for the fleet's models, for autoscalers.
//!
//! - `fleet-lag serve`: the cluster's lag exporter. It measures every
//!   partition of `infer.<model>` against group `fleet.<model>`, including
//!   partitions no worker owns (at zero replicas, or before the first
//!   assignment), which a worker cannot see. Workers export the same series
//!   for their topic; queries dedupe with `max by (consumergroup, topic, partition)`.
//! - `fleet-lag record`: the same measurement written as CSV over time (to
//!   record a burst).
//! - `fleet-lag replay`: a recorded CSV through the HPA's arithmetic: what
//!   the autoscaler would have done (docs/autoscaling.md).

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use fleet_connect::kafka::KafkaArgs;
use fleet_connect::namespace::NamespaceArgs;
use fleet_ops::endpoints::{self, Checks};
use fleet_ops::hpa::{self, HpaSpec};
use fleet_ops::probe;
use fleet_proto::clock::now_ms;
use fleet_proto::ModelName;
use rdkafka::consumer::BaseConsumer;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(version, about = "Consumer-group lag of the fleet's models: exporter, recorder, HPA replay")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Export kafka_consumergroup_lag for every model on /metrics.
    Serve(ServeArgs),
    /// Write one model's total lag as CSV (seconds,lag) until stopped or drained.
    Record(RecordArgs),
    /// Replay a recorded lag CSV through the HPA algorithm and print its decisions.
    Replay(ReplayArgs),
}

/// A consumer in `group` that never subscribes: it reads offsets only.
fn offsets_consumer(kafka: &KafkaArgs, group: &str) -> Result<BaseConsumer> {
    let mut config = kafka.client_config()?;
    config.set("group.id", group).set("enable.auto.commit", "false");
    Ok(config.create()?)
}

/// Stops the start within seconds, naming the reason, when the settings
/// cannot work (wrong password, untrusted certificate, …): once per process.
fn check_kafka(kafka: &KafkaArgs) -> Result<()> {
    fleet_connect::kafka_check::check_at_start(&kafka.client_config()?, std::time::Duration::from_secs(10))?;
    Ok(())
}

#[derive(Args)]
struct ServeArgs {
    #[command(flatten)]
    kafka: KafkaArgs,
    #[command(flatten)]
    namespace: NamespaceArgs,
    /// Models to watch (repeatable, or comma-separated in FLEET_LAG_MODELS).
    #[arg(long = "model", env = "FLEET_LAG_MODELS", value_delimiter = ',', required = true)]
    models: Vec<ModelName>,
    /// Where /metrics, /healthz and /ready are served.
    #[arg(long, env = "FLEET_METRICS_ADDR", default_value = "127.0.0.1:9466")]
    metrics_addr: SocketAddr,
    /// How often the offsets are read.
    #[arg(long, env = "FLEET_LAG_INTERVAL", default_value = "5s", value_parser = humantime::parse_duration)]
    interval: Duration,
}

#[derive(Args)]
struct RecordArgs {
    #[command(flatten)]
    kafka: KafkaArgs,
    #[command(flatten)]
    namespace: NamespaceArgs,
    #[arg(long)]
    model: ModelName,
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    interval: Duration,
    /// Stop after this long at the latest.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Stop once the lag, having been above zero, is back to zero.
    #[arg(long)]
    until_drained: bool,
    /// The CSV file (seconds since start, total lag).
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
struct ReplayArgs {
    /// A CSV of `seconds,lag` (a header line is allowed).
    #[arg(long)]
    csv: PathBuf,
    #[arg(long, default_value_t = 1)]
    min_replicas: u32,
    /// At most the topic's partitions (the chart enforces it).
    #[arg(long, default_value_t = 8)]
    max_replicas: u32,
    /// The HPA controller's sync period.
    #[arg(long, default_value_t = 15)]
    sync_period_s: u64,
    /// Hold the last sample this many seconds more (a recording stops when
    /// the lag is gone; the scale-down happens minutes later).
    #[arg(long, default_value_t = 0)]
    extend_s: u64,
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info,librdkafka=warn".into()),
        )
        .init();
    match Cli::parse().command {
        Command::Serve(args) => serve(args).await,
        Command::Record(args) => record(args).await,
        Command::Replay(args) => replay(args),
    }
}

async fn serve(args: ServeArgs) -> Result<()> {
    let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    probe::describe();
    let names = args.namespace.namespace()?;
    check_kafka(&args.kafka)?;
    let watched: Vec<(ModelName, Arc<BaseConsumer>)> = args
        .models
        .iter()
        .map(|model| Ok((model.clone(), Arc::new(offsets_consumer(&args.kafka, &names.consumer_group(model))?))))
        .collect::<Result<_>>()?;
    // Ready while every model was measured within three intervals.
    let last_success = Arc::new(AtomicU64::new(0));
    let stale_after_ms = args.interval.as_millis() as u64 * 3;
    let seen = last_success.clone();
    let checks = Checks {
        live: Arc::new(|| Ok(())),
        ready: Arc::new(move || {
            let age = now_ms().saturating_sub(seen.load(Ordering::Relaxed));
            if age <= stale_after_ms {
                Ok(())
            } else {
                Err(format!("no complete lag measurement for {age} ms"))
            }
        }),
        pages: Vec::new(),
    };
    let bound = endpoints::serve(args.metrics_addr, recorder, checks).await.context("binding the metrics address")?;
    tracing::info!(%bound, models = args.models.len(), "serving lag");
    let mut tick = tokio::time::interval(args.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        let mut complete = true;
        for (model, consumer) in &watched {
            let (consumer, group, topic) = (consumer.clone(), names.consumer_group(model), names.topic(model));
            let timeout = args.interval.max(Duration::from_secs(1));
            let measured =
                tokio::task::spawn_blocking(move || probe::measure(consumer.as_ref(), &group, &topic, timeout)).await?;
            match measured {
                Ok(lag) => probe::publish(&lag),
                Err(e) => {
                    complete = false;
                    tracing::warn!(model = %model, error = %e, "lag not measured");
                }
            }
        }
        if complete {
            last_success.store(now_ms(), Ordering::Relaxed);
        }
    }
}

async fn record(args: RecordArgs) -> Result<()> {
    let names = args.namespace.namespace()?;
    check_kafka(&args.kafka)?;
    let consumer = Arc::new(offsets_consumer(&args.kafka, &names.consumer_group(&args.model))?);
    let mut out = std::fs::File::create(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    writeln!(out, "seconds,lag")?;
    let started = Instant::now();
    let mut tick = tokio::time::interval(args.interval);
    let mut seen_lag = false;
    while started.elapsed() < args.duration {
        tick.tick().await;
        let (consumer, group, topic) = (consumer.clone(), names.consumer_group(&args.model), names.topic(&args.model));
        let lag = tokio::task::spawn_blocking(move || {
            probe::measure(consumer.as_ref(), &group, &topic, Duration::from_secs(5))
        })
        .await??;
        let total = lag.total();
        writeln!(out, "{:.1},{total}", started.elapsed().as_secs_f64())?;
        out.flush()?;
        seen_lag |= total > 0;
        if args.until_drained && seen_lag && total == 0 {
            break;
        }
    }
    Ok(())
}

fn replay(args: ReplayArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.csv).with_context(|| format!("reading {}", args.csv.display()))?;
    let mut samples = parse_lag_csv(&text)?;
    if let Some(&(last_t, last_lag)) = samples.last() {
        samples.push((last_t + args.extend_s as f64, last_lag));
    }
    if args.min_replicas == 0 || args.max_replicas < args.min_replicas {
        bail!("need 1 <= --min-replicas <= --max-replicas");
    }
    let spec = HpaSpec::fleet_default(args.min_replicas, args.max_replicas);
    let decisions = hpa::replay(spec, &samples, args.sync_period_s, args.min_replicas);
    print!("{}", hpa::render(&decisions));
    Ok(())
}

/// `seconds,lag` lines; a first line that is not numbers is a header.
fn parse_lag_csv(text: &str) -> Result<Vec<(f64, f64)>> {
    let mut samples = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Some((t, lag)) = line.split_once(',') else { continue };
        match (t.trim().parse::<f64>(), lag.trim().parse::<f64>()) {
            (Ok(t), Ok(lag)) => samples.push((t, lag)),
            _ if i == 0 => {}
            _ => bail!("line {}: expected seconds,lag", i + 1),
        }
    }
    Ok(samples)
}
