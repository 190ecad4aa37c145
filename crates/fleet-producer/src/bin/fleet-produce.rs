//! `fleet-produce`: send texts or images to a model's topic (an image with a
//! caption to two models at once), on the interactive or the bulk lane,
//! optionally wait for the answers; stream a file into the bulk lane as one
//! job, collect its answers into a file, see its progress, cancel it;
//! create the fleet's topics. A thin shell over the library.

// A subcommand's module lives in src/bin/fleet-produce/: a file directly in
// src/bin/ would be taken by cargo for a binary of its own.
#[path = "fleet-produce/bulk.rs"]
mod bulk;
#[path = "fleet-produce/jobs.rs"]
mod jobs;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use fleet_connect::acl;
use fleet_connect::kafka::KafkaArgs;
use fleet_connect::namespace::NamespaceArgs;
use fleet_connect::redis::RedisConfig;
use fleet_producer::results::DEFAULT_CANCEL_KEEP;
use fleet_producer::summary::summarise;
use fleet_producer::topics::{ensure_topics, TopicChange, TopicSettings};
use fleet_producer::{BacklogGuard, FleetProducer, KafkaConfig, Request, ResultClient, SendError};
use fleet_proto::{ContentType, JobId, Lane, ModelName, Namespace, RequestId};
use futures::future::join_all;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Parser)]
#[command(version, about = "Send inference requests to the fleet and read the answers")]
struct Cli {
    #[command(flatten)]
    kafka: KafkaArgs,
    #[command(flatten)]
    namespace: NamespaceArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Send texts (from --text and/or --file, one per line) to infer.<model>
    /// (or infer.<model>.bulk with --lane bulk).
    Send(SendArgs),
    /// Send image files to an image model; with --caption, each also goes
    /// with its caption to --text-model as one two-part request.
    Image(ImageArgs),
    /// Stream a file of texts (one per line, or JSONL) into infer.<model>.bulk
    /// as one job, with a progress bar; prints the job id to cancel it by.
    /// With --out, collects its answers into a file as they come.
    Bulk(bulk::BulkArgs),
    /// Collect a job's answers from its answers topic into a file (JSONL,
    /// or Parquet for a path ending in .parquet), each request once, until
    /// every request has its final answer. Run again, it skips what the
    /// file holds. Exit status 4 when some answers are not ok.
    Collect(jobs::CollectArgs),
    /// A job at a glance: sent, answered by status, waiting, rate, ETA.
    Job(jobs::JobArgs),
    /// Cancel a job (ce_fleetjob): workers answer its requests `cancelled`
    /// instead of computing them, from within a second.
    Cancel(CancelArgs),
    /// Create infer.<model>, infer.<model>.bulk, infer.<model>.dlq, the
    /// answers topics (infer.<model>.answers, infer.<model>.bulk.answers)
    /// and the job records (infer.fleet.jobs) with these settings, grow
    /// existing lanes to --partitions (never shrink), report what differs.
    Topics(TopicArgs),
    /// Print the ACL SETUSER commands of the worker and client Redis users
    /// for this release's key prefix (put the passwords in).
    RedisAcl(AclArgs),
}

#[derive(Args)]
struct AclArgs {
    #[arg(long, default_value = "fleet-worker")]
    worker_user: String,
    #[arg(long, default_value = "fleet-client")]
    client_user: String,
}

/// Which lane requests travel in and the job they belong to; the same for
/// `send` and `image`.
#[derive(Args)]
struct LaneArgs {
    /// interactive (infer.<model>: a person waits) or bulk
    /// (infer.<model>.bulk: read with the capacity interactive work leaves).
    #[arg(long, default_value_t = Lane::Interactive)]
    lane: Lane,
    /// The job the requests belong to (ce_fleetjob): `fleet-produce cancel
    /// --job <id>` cancels them all.
    #[arg(long)]
    job: Option<JobId>,
}

impl LaneArgs {
    fn apply(&self, request: Request) -> Request {
        let request = request.in_lane(self.lane);
        match &self.job {
            Some(job) => request.with_job(job.clone()),
            None => request,
        }
    }
}

#[derive(Args)]
struct CancelArgs {
    /// The job to cancel, as its requests' ce_fleetjob names it (a single
    /// request is cancellable when it was sent with a job of its own).
    #[arg(long)]
    job: JobId,
    /// How long the cancel lasts, e.g. 7d, 12h or seconds (default 7 days):
    /// a message of the job read after it ends is computed, so keep it past
    /// the bulk topic's retention.
    #[arg(long, value_parser = duration_or_seconds)]
    keep: Option<Duration>,
    #[command(flatten)]
    redis: RedisConfig,
}

#[derive(Args)]
struct ImageArgs {
    #[arg(long, env = "FLEET_MODEL")]
    model: ModelName,
    /// Image files (JPEG, PNG, WebP; the type is read from the bytes).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Shrink images whose longer side is over this many pixels before
    /// sending (gateway-side cap); 0 sends the files unchanged.
    #[arg(long, default_value_t = 2048)]
    max_side: u32,
    /// A caption sent with every image to --text-model (ce_parts = 2).
    #[arg(long, requires = "text_model")]
    caption: Option<String>,
    #[arg(long)]
    text_model: Option<ModelName>,
    /// Request ids are <prefix>-<n>; default: img-<unix ms>.
    #[arg(long)]
    id_prefix: Option<String>,
    #[command(flatten)]
    routing: LaneArgs,
    /// Wait for the answers and print one line per request.
    #[arg(long)]
    wait: bool,
    /// With --wait: print the answers' full JSON instead of a short line.
    #[arg(long, requires = "wait")]
    json: bool,
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    redis: RedisConfig,
    #[arg(long, default_value = "fleet-produce")]
    source: String,
}

#[derive(Args)]
struct SendArgs {
    #[arg(long, env = "FLEET_MODEL")]
    model: ModelName,
    /// A text to send (repeatable).
    #[arg(long)]
    text: Vec<String>,
    /// A file of texts, one per line; blank lines are skipped.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Request ids are <prefix>-<n>; default: req-<unix ms>.
    #[arg(long)]
    id_prefix: Option<String>,
    #[command(flatten)]
    routing: LaneArgs,
    /// Deadline relative to now, in ms (sets ce_deadline).
    #[arg(long)]
    ttl_ms: Option<u64>,
    /// Wait for every answer in Redis.
    #[arg(long)]
    wait: bool,
    /// How long to wait for each request's answer.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    redis: RedisConfig,
    /// Print a human summary (counts, throughput, latency, neighbours) instead of answer lines.
    #[arg(long, requires = "wait")]
    summary: bool,
    /// With --summary: how many nearest-neighbour pairs to show (0: none; every pair of answers is compared).
    #[arg(long, default_value_t = 5)]
    pairs: usize,
    /// Refuse to send (exit 3) while the model's reported backlog is above this.
    #[arg(long)]
    max_backlog: Option<u64>,
    /// Refuse to send (exit 3) a request whose predicted wait (the workers'
    /// backlog ÷ their drain rate) exceeds its deadline.
    #[arg(long)]
    predicted_wait: bool,
    /// Name written into ce_source.
    #[arg(long, default_value = "fleet-produce")]
    source: String,
}

#[derive(Args)]
struct TopicArgs {
    #[arg(long = "model", required = true)]
    models: Vec<ModelName>,
    #[command(flatten)]
    settings: TopicSettings,
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .init();
    let cli = Cli::parse();
    let names = cli.namespace.namespace()?;
    match cli.command {
        Command::Topics(args) => {
            let kafka = connect_kafka(&cli.kafka).await?;
            for model in &args.models {
                let changes = ensure_topics(&kafka, &names, model, args.settings)
                    .await
                    .with_context(|| format!("creating topics of {model}"))?;
                for change in &changes {
                    let verdict = match change {
                        TopicChange::KeptMorePartitions { .. } | TopicChange::ConfigDiffers { .. } => "left",
                        TopicChange::Unchanged { .. } => "ok",
                        TopicChange::Created { .. } | TopicChange::Grown { .. } => "changed",
                    };
                    println!("{verdict}: {change}");
                }
            }
            Ok(())
        }
        Command::Send(args) => send(&connect_kafka(&cli.kafka).await?, &names, args).await,
        Command::Image(args) => send_images(&connect_kafka(&cli.kafka).await?, &names, args).await,
        Command::Bulk(args) => bulk::run(&connect_kafka(&cli.kafka).await?, &names, args).await,
        Command::Collect(args) => jobs::run_collect(&connect_kafka(&cli.kafka).await?, &names, args).await,
        Command::Job(args) => jobs::run_job(&connect_kafka(&cli.kafka).await?, &names, args).await,
        Command::Cancel(args) => cancel(&names, args).await,
        Command::RedisAcl(args) => {
            println!("{}", acl::setuser_command(acl::Role::Worker, &args.worker_user, &names));
            println!("{}", acl::setuser_command(acl::Role::Client, &args.client_user, &names));
            Ok(())
        }
    }
}

/// `--keep`: a humantime duration (`7d`, `12h`, `90m`) or whole seconds.
fn duration_or_seconds(raw: &str) -> Result<Duration, String> {
    let keep = match raw.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => humantime::parse_duration(raw).map_err(|e| format!("{raw:?} is not a duration: {e}"))?,
    };
    // Redis keeps a key whole seconds; a cancel shorter than one is a mistake.
    if keep < Duration::from_secs(1) {
        return Err(format!("{raw:?} is under a second"));
    }
    Ok(keep)
}

async fn cancel(names: &Namespace, args: CancelArgs) -> Result<()> {
    let keep = args.keep.unwrap_or(DEFAULT_CANCEL_KEEP);
    let results =
        ResultClient::connect_to(&args.redis.target()?, names.clone()).await.context("connecting to Redis")?;
    results.cancel(&args.job, keep).await.with_context(|| format!("cancelling job {}", args.job))?;
    println!(
        "cancelled job {}: {} set for {}; workers answer its requests `cancelled` instead of computing them",
        args.job,
        names.cancel_key(&args.job),
        humantime::format_duration(Duration::from_secs(keep.as_secs()))
    );
    Ok(())
}

/// The Kafka settings, checked: a wrong password or an untrusted
/// certificate ends the command with one clear line, now.
async fn connect_kafka(args: &KafkaArgs) -> Result<KafkaConfig> {
    let kafka = KafkaConfig::from_args(args)?;
    let probe = kafka.client_config();
    tokio::task::spawn_blocking(move || fleet_connect::kafka_check::check_at_start(&probe, Duration::from_secs(10)))
        .await??;
    Ok(kafka)
}

async fn send_images(kafka: &KafkaConfig, names: &Namespace, args: ImageArgs) -> Result<()> {
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64;
    let prefix = args.id_prefix.clone().unwrap_or_else(|| format!("img-{now_ms}"));
    let producer = FleetProducer::new(kafka, &args.source)?.with_namespace(names.clone());
    let mut models = vec![args.model.clone()];
    models.extend(args.text_model.clone().filter(|_| args.caption.is_some()));
    let mut sent = Vec::new();
    for (n, path) in args.files.iter().enumerate() {
        let id = RequestId::parse(&format!("{prefix}-{n}")).context("building a request id from --id-prefix")?;
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let content_type = fleet_image::Format::sniff(&bytes)
            .and_then(|f| ContentType::parse(f.mime()))
            .with_context(|| format!("{} is not a JPEG, PNG or WebP file", path.display()))?;
        let image = if args.max_side > 0 {
            Request::image_within(id.clone(), content_type, bytes, args.max_side)
                .with_context(|| format!("preparing {}", path.display()))?
        } else {
            Request::image(id.clone(), content_type, bytes)
        };
        let mut parts = vec![(&args.model, args.routing.apply(image))];
        if let (Some(caption), Some(text_model)) = (&args.caption, &args.text_model) {
            parts.push((text_model, args.routing.apply(Request::text(id.clone(), caption.clone()))));
        }
        for delivery in producer.send_fanout(&parts).await? {
            delivery.await.with_context(|| format!("delivering {id}"))?;
        }
        sent.push((id, path));
    }
    eprintln!("sent {} images to {}", sent.len(), names.lane_topic(&args.model, args.routing.lane));
    if !args.wait {
        return Ok(());
    }
    let results = ResultClient::connect_to(&args.redis.target()?, names.clone()).await?;
    for (id, path) in &sent {
        let answers = results.wait(id, &models, args.timeout).await?;
        if args.json {
            let line: serde_json::Map<String, serde_json::Value> = answers
                .iter()
                .map(|(model, answer)| (model.clone(), serde_json::from_str(&answer.to_json()).unwrap_or_default()))
                .collect();
            println!("{}\t{}\t{}", id, path.display(), serde_json::Value::Object(line));
        } else {
            let parts: Vec<String> = models
                .iter()
                .filter_map(|model| Some(format!("{model}: {}", brief(answers.get(model.as_str())?))))
                .collect();
            println!("{}  {}  {}", id, path.display(), parts.join("  |  "));
        }
    }
    Ok(())
}

/// One answer in a few words: the top class, an embedding's size, or the error.
fn brief(answer: &fleet_proto::Answer) -> String {
    if let Some(error) = &answer.error {
        return format!("{} {}", answer.status.as_str(), error.code.as_str());
    }
    let output = answer.output.clone().unwrap_or_default();
    if let Some(best) = output["classes"].get(0) {
        return format!(
            "{} (p={:.3})",
            best["label"].as_str().unwrap_or("?"),
            best["probability"].as_f64().unwrap_or(0.0)
        );
    }
    if let Some(embedding) = output["embedding"].as_array() {
        return format!("embedding of {} dims", embedding.len());
    }
    answer.status.as_str().to_owned()
}

async fn send(kafka: &KafkaConfig, names: &Namespace, args: SendArgs) -> Result<()> {
    let mut texts = args.text.clone();
    if let Some(path) = &args.file {
        let body = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        texts.extend(body.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned));
    }
    if texts.is_empty() {
        bail!("nothing to send: give --text or --file");
    }
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64;
    let prefix = args.id_prefix.clone().unwrap_or_else(|| format!("req-{now_ms}"));
    let requests: Vec<Request> = texts
        .iter()
        .enumerate()
        .map(|(n, text)| {
            let id = RequestId::parse(&format!("{prefix}-{n}")).context("building a request id from --id-prefix")?;
            let request = args.routing.apply(Request::text(id, text.clone()));
            Ok(match args.ttl_ms {
                Some(ttl) => request.with_deadline_ms(now_ms + ttl),
                None => request,
            })
        })
        .collect::<Result<_>>()?;

    let mut producer = FleetProducer::new(kafka, &args.source)?.with_namespace(names.clone());
    if args.max_backlog.is_some() || args.predicted_wait {
        let guard = BacklogGuard::adaptive(&args.redis.target()?, names.clone())
            .await?
            .with_predicted_wait(args.predicted_wait)
            .with_max_backlog(args.max_backlog);
        producer = producer.with_admission(guard);
    }
    let started = Instant::now();
    let mut pending = Vec::with_capacity(requests.len());
    let mut overloaded = None;
    for request in &requests {
        match producer.send(&args.model, request).await {
            Ok(delivery) => pending.push(delivery),
            Err(SendError::Overloaded(e)) => {
                overloaded = Some(e);
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    // Only what was sent is awaited and waited for.
    let requests = &requests[..pending.len()];
    for (request, delivered) in requests.iter().zip(join_all(pending).await) {
        delivered.with_context(|| format!("delivering {}", request.id))?;
    }
    let topic = names.lane_topic(&args.model, args.routing.lane);
    eprintln!("sent {} requests to {topic} in {:.2?}", requests.len(), started.elapsed());
    if let Some(e) = &overloaded {
        eprintln!("refused the remaining {}: {e}", texts.len() - requests.len());
    }
    if !args.wait {
        return exit_for(overloaded);
    }

    let results = ResultClient::connect_to(&args.redis.target()?, names.clone()).await?;
    let models = [args.model.clone()];
    let mut answered = Vec::with_capacity(requests.len());
    let mut failures = 0usize;
    // All at once over one connection: an answer lives only the model's
    // result_ttl_s, so waiting for one id after another could look for an
    // early answer after it expired.
    let ids: Vec<_> = requests.iter().map(|request| request.id.clone()).collect();
    let outcomes = results.wait_all(&ids, &models, args.timeout).await;
    for ((request, text), outcome) in requests.iter().zip(&texts).zip(outcomes) {
        match outcome {
            Ok(mut answers) => {
                if let Some(answer) = answers.remove(args.model.as_str()) {
                    if !args.summary {
                        println!("{}\t{}", request.id, answer.to_json());
                    }
                    answered.push((text.clone(), answer));
                }
            }
            Err(e) => {
                failures += 1;
                eprintln!("{e}");
            }
        }
    }
    if args.summary {
        print!("{}", summarise(&answered, started.elapsed(), args.pairs).render());
    }
    if failures > 0 {
        bail!("{failures} of {} requests got no answer", requests.len());
    }
    exit_for(overloaded)
}

/// Exit status 3 tells scripts "overloaded, shed or retry", apart from errors (1).
fn exit_for(overloaded: Option<fleet_producer::Overloaded>) -> Result<()> {
    match overloaded {
        Some(_) => std::process::exit(3),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn send_and_image_take_a_lane_and_a_job() {
        let cli = Cli::try_parse_from(["fleet-produce", "send", "--model", "m", "--text", "t"]).unwrap();
        let Command::Send(args) = cli.command else { panic!("not send") };
        assert_eq!((args.routing.lane, args.routing.job), (Lane::Interactive, None));
        let image = ["fleet-produce", "image", "--model", "m", "a.png", "--lane", "bulk", "--job", "j-1"];
        let Command::Image(args) = Cli::try_parse_from(image).unwrap().command else { panic!("not image") };
        assert_eq!(args.routing.lane, Lane::Bulk);
        let request = args.routing.apply(Request::text(RequestId::parse("r").unwrap(), "t"));
        assert_eq!((request.lane, request.job.as_ref().map(JobId::as_str)), (Lane::Bulk, Some("j-1")));
        for bad in [["--lane", "urgent"], ["--job", "a job"]] {
            let args = ["fleet-produce", "send", "--model", "m", "--text", "t", bad[0], bad[1]];
            assert!(Cli::try_parse_from(args).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_cancel_lasts_a_week_unless_told_in_a_duration_or_seconds() {
        fn keep(extra: &[&str]) -> Duration {
            let args = [&["fleet-produce", "cancel", "--job", "j-1"][..], extra].concat();
            let Command::Cancel(args) = Cli::try_parse_from(args).unwrap().command else { panic!("not cancel") };
            args.keep.unwrap_or(DEFAULT_CANCEL_KEEP)
        }
        assert_eq!(keep(&[]), Duration::from_secs(7 * 24 * 3600));
        assert_eq!(keep(&["--keep", "3600"]), Duration::from_secs(3600));
        assert_eq!(keep(&["--keep", "12h"]), Duration::from_secs(12 * 3600));
        assert_eq!(keep(&["--keep", "7days"]), DEFAULT_CANCEL_KEEP);
        for bad in ["0", "500ms", "soon", "-5"] {
            assert!(duration_or_seconds(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn bulk_needs_a_file_and_takes_a_job() {
        assert!(Cli::try_parse_from(["fleet-produce", "bulk", "--model", "m"]).is_err());
        let args = ["fleet-produce", "bulk", "--model", "m", "--file", "texts.jsonl", "--jsonl", "--job", "reembed-1"];
        assert!(matches!(Cli::try_parse_from(args).map(|c| c.command), Ok(Command::Bulk(_))));
    }

    #[test]
    fn prefixes_may_follow_the_subcommand_like_the_kafka_settings() {
        let cli = Cli::try_parse_from(["fleet-produce", "topics", "--model", "m", "--topic-prefix", "blue.infer."]);
        assert_eq!(cli.map(|c| c.namespace.topic_prefix).ok().as_deref(), Some("blue.infer."));
    }
}
