//! `fleet-lag`: consumer-group lag for the fleet's models, for autoscalers.
//!
//! - `fleet-lag serve`: the cluster's lag exporter. For each model it
//!   measures every partition of both lanes' topics, `infer.<model>`
//!   (interactive) and `infer.<model>.bulk` (bulk), against group
//!   `fleet.<model>`, including partitions no worker owns (at zero replicas,
//!   or before the first assignment), which a worker cannot see. The series
//!   carry the topic (as kafka_exporter's do) and `lane`. A bulk topic that
//!   does not exist yet reads as lag 0 (logged once) and never holds back
//!   the interactive series or readiness. Workers export the same series
//!   for their topics; queries dedupe with `max by (consumergroup, topic, partition)`.
//! - `fleet-lag record`: the same measurement of one lane written as CSV
//!   over time (to record a burst).
//! - `fleet-lag replay`: a recorded CSV through the HPA's arithmetic: what
//!   the autoscaler would have done (docs/autoscaling.md).

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use fleet_connect::kafka::KafkaArgs;
use fleet_connect::namespace::NamespaceArgs;
use fleet_ops::endpoints::{self, Checks};
use fleet_ops::hpa::{self, HpaSpec};
use fleet_ops::lag::TopicLag;
use fleet_ops::probe;
use fleet_proto::clock::now_ms;
use fleet_proto::{Lane, ModelName, Namespace};
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
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
    /// Export kafka_consumergroup_lag of both lanes of every model on /metrics.
    Serve(ServeArgs),
    /// Write one lane's total lag of one model as CSV (seconds,lag) until stopped or drained.
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
    /// The lane whose topic is recorded: interactive (infer.<model>) or
    /// bulk (infer.<model>.bulk).
    #[arg(long, default_value = "interactive")]
    lane: Lane,
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
    let mut watched: Vec<(LaneLag, Arc<BaseConsumer>)> = Vec::new();
    for model in &args.models {
        let consumer = Arc::new(offsets_consumer(&args.kafka, &names.consumer_group(model))?);
        for lane in Lane::ALL {
            watched.push((LaneLag::new(&names, model, lane), consumer.clone()));
        }
    }
    // Ready while every model was measured within three intervals (a bulk
    // topic that does not exist counts as measured: nothing waits on it).
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
        for (watch, consumer) in &mut watched {
            let (consumer, lane) = (consumer.clone(), watch.lane);
            let (group, topic) = (watch.group.clone(), watch.topic.clone());
            let timeout = args.interval.max(Duration::from_secs(1));
            let measured = tokio::task::spawn_blocking(move || {
                probe::measure_lane(consumer.as_ref(), &group, &topic, lane, timeout)
            })
            .await?;
            complete &= watch.take(measured);
        }
        if complete {
            last_success.store(now_ms(), Ordering::Relaxed);
        }
    }
}

/// One lane of one model as `serve` measures it, and what it last saw.
#[derive(Debug)]
struct LaneLag {
    model: ModelName,
    lane: Lane,
    group: String,
    topic: String,
    /// Partitions last published (zeroed if the topic goes away).
    partitions: Vec<i32>,
    /// The topic did not exist at the last measurement (logged once).
    absent: bool,
}

impl LaneLag {
    fn new(names: &Namespace, model: &ModelName, lane: Lane) -> Self {
        Self {
            model: model.clone(),
            lane,
            group: names.consumer_group(model),
            topic: names.lane_topic(model, lane),
            partitions: Vec::new(),
            absent: false,
        }
    }

    /// Publishes one measurement; false when the lane is not measured (the
    /// exporter is then not ready). A bulk topic that does not exist is
    /// measured: its lag is 0, said once in the log, and the interactive
    /// series go on as before. The interactive topic missing stays an
    /// error: the model's requests have nowhere to go.
    fn take(&mut self, measured: Result<TopicLag, KafkaError>) -> bool {
        match measured {
            Ok(lag) => {
                if self.absent {
                    tracing::info!(model = %self.model, lane = %self.lane, topic = %self.topic, "the topic exists now");
                    self.absent = false;
                }
                self.partitions = lag.partitions.iter().map(|p| p.partition).collect();
                probe::publish(&lag);
                true
            }
            Err(e) if self.lane == Lane::Bulk && probe::is_unknown_topic(&e) => {
                if !self.absent {
                    tracing::warn!(
                        model = %self.model,
                        topic = %self.topic,
                        "the bulk topic does not exist (yet); its lag reads 0 until `fleet-produce topics` creates it"
                    );
                    self.absent = true;
                }
                probe::publish_absent(&self.group, &self.topic, self.lane, &self.partitions);
                true
            }
            Err(e) => {
                tracing::warn!(model = %self.model, lane = %self.lane, error = %e, "lag not measured");
                false
            }
        }
    }
}

async fn record(args: RecordArgs) -> Result<()> {
    let names = args.namespace.namespace()?;
    check_kafka(&args.kafka)?;
    let (group, topic) = (names.consumer_group(&args.model), names.lane_topic(&args.model, args.lane));
    let consumer = Arc::new(offsets_consumer(&args.kafka, &group)?);
    let mut out = std::fs::File::create(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    writeln!(out, "seconds,lag")?;
    let started = Instant::now();
    let mut tick = tokio::time::interval(args.interval);
    let mut seen_lag = false;
    while started.elapsed() < args.duration {
        tick.tick().await;
        let (consumer, group, topic, lane) = (consumer.clone(), group.clone(), topic.clone(), args.lane);
        let lag = tokio::task::spawn_blocking(move || {
            probe::measure_lane(consumer.as_ref(), &group, &topic, lane, Duration::from_secs(5))
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

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_ops::lag::PartitionOffsets;
    use rdkafka::error::RDKafkaErrorCode;

    fn lane(lane: Lane) -> LaneLag {
        LaneLag::new(&Namespace::default(), &ModelName::parse("m").unwrap(), lane)
    }

    fn measured(lane: &LaneLag, partitions: i32) -> Result<TopicLag, KafkaError> {
        let partitions =
            (0..partitions).map(|partition| PartitionOffsets { partition, low: 0, high: 5, committed: None }).collect();
        Ok(TopicLag { group: lane.group.clone(), topic: lane.topic.clone(), lane: lane.lane, partitions })
    }

    fn unknown_topic() -> Result<TopicLag, KafkaError> {
        Err(KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition))
    }

    #[test]
    fn each_lane_watches_its_own_topic_in_the_one_group() {
        let (interactive, bulk) = (lane(Lane::Interactive), lane(Lane::Bulk));
        assert_eq!((interactive.topic.as_str(), interactive.group.as_str()), ("infer.m", "fleet.m"));
        assert_eq!((bulk.topic.as_str(), bulk.group.as_str()), ("infer.m.bulk", "fleet.m"));
    }

    #[test]
    fn a_missing_bulk_topic_is_measured_as_absent_and_comes_back() {
        let mut bulk = lane(Lane::Bulk);
        assert!(bulk.take(unknown_topic()), "a missing bulk topic must not make the exporter unready");
        assert!(bulk.absent);
        assert!(bulk.take(unknown_topic()) && bulk.absent, "still absent, still measured");
        let created = measured(&bulk, 3);
        assert!(bulk.take(created));
        assert_eq!((bulk.absent, bulk.partitions.clone()), (false, vec![0, 1, 2]));
        // Deleted again: the partitions it had are kept, to be zeroed.
        assert!(bulk.take(unknown_topic()));
        assert_eq!((bulk.absent, bulk.partitions.len()), (true, 3));
    }

    #[test]
    fn a_missing_interactive_topic_or_an_unreachable_broker_is_not_measured() {
        let mut interactive = lane(Lane::Interactive);
        assert!(!interactive.take(unknown_topic()), "the interactive topic missing is an error");
        assert!(!interactive.absent);
        let mut bulk = lane(Lane::Bulk);
        assert!(!bulk.take(Err(KafkaError::MetadataFetch(RDKafkaErrorCode::BrokerTransportFailure))));
        assert!(!bulk.absent);
        let fine = measured(&interactive, 2);
        assert!(interactive.take(fine));
    }
}
