//! `fleet-produce send`: sends texts to a model's topic, stopping at the
//! first the backlog guard refuses (exit status 3); with `--wait`, prints
//! each answer or a summary of them all.

use super::routing::LaneArgs;
use anyhow::{bail, Context, Result};
use clap::Args;
use fleet_connect::redis::RedisConfig;
use fleet_producer::summary::summarise;
use fleet_producer::{BacklogGuard, FleetProducer, KafkaConfig, Overloaded, Request, ResultClient, SendError};
use fleet_proto::{ModelName, Namespace, RequestId};
use futures::future::join_all;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Exit status that tells scripts "overloaded, shed or retry", apart from errors (1).
const OVERLOADED: i32 = 3;

#[derive(Args)]
pub struct SendArgs {
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
    pub routing: LaneArgs,
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

pub async fn run(kafka: &KafkaConfig, names: &Namespace, args: SendArgs) -> Result<()> {
    let texts = texts(&args)?;
    let requests = requests(&args, &texts)?;
    let producer = producer(kafka, names, &args).await?;
    let started = Instant::now();
    let (sent, overloaded) = send_until_refused(&producer, &args.model, &requests).await?;
    // Only what was sent is awaited and waited for.
    let requests = &requests[..sent];
    let topic = names.lane_topic(&args.model, args.routing.lane);
    eprintln!("sent {} requests to {topic} in {:.2?}", requests.len(), started.elapsed());
    if let Some(e) = &overloaded {
        eprintln!("refused the remaining {}: {e}", texts.len() - requests.len());
    }
    if args.wait {
        wait_and_print(names, &args, requests, &texts, started).await?;
    }
    exit_for(overloaded)
}

/// `--text`s, then the lines of `--file` that are not blank.
fn texts(args: &SendArgs) -> Result<Vec<String>> {
    let mut texts = args.text.clone();
    if let Some(path) = &args.file {
        let body = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        texts.extend(body.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned));
    }
    if texts.is_empty() {
        bail!("nothing to send: give --text or --file");
    }
    Ok(texts)
}

/// One request a text, named `<prefix>-<n>`, in the lane and job asked,
/// with the deadline `--ttl-ms` sets.
fn requests(args: &SendArgs, texts: &[String]) -> Result<Vec<Request>> {
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64;
    let prefix = args.id_prefix.clone().unwrap_or_else(|| format!("req-{now_ms}"));
    texts
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
        .collect()
}

/// The producer, behind the backlog guard when `--max-backlog` or
/// `--predicted-wait` asks for one.
async fn producer(kafka: &KafkaConfig, names: &Namespace, args: &SendArgs) -> Result<FleetProducer> {
    let producer = FleetProducer::new(kafka, &args.source)?.with_namespace(names.clone());
    if args.max_backlog.is_none() && !args.predicted_wait {
        return Ok(producer);
    }
    let guard = BacklogGuard::adaptive(&args.redis.target()?, names.clone())
        .await?
        .with_predicted_wait(args.predicted_wait)
        .with_max_backlog(args.max_backlog);
    Ok(producer.with_admission(guard))
}

/// Sends the requests in order until the guard refuses one, then waits for
/// the broker to take those sent: how many were sent, and the refusal.
async fn send_until_refused(
    producer: &FleetProducer,
    model: &ModelName,
    requests: &[Request],
) -> Result<(usize, Option<Overloaded>)> {
    let mut pending = Vec::with_capacity(requests.len());
    let mut overloaded = None;
    for request in requests {
        match producer.send(model, request).await {
            Ok(delivery) => pending.push(delivery),
            Err(SendError::Overloaded(e)) => {
                overloaded = Some(e);
                break;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let sent = pending.len();
    for (request, delivered) in requests.iter().zip(join_all(pending).await) {
        delivered.with_context(|| format!("delivering {}", request.id))?;
    }
    Ok((sent, overloaded))
}

/// Waits for every sent request's answer and prints it (or, with
/// `--summary`, a summary of them all); an error when some got none.
async fn wait_and_print(
    names: &Namespace,
    args: &SendArgs,
    requests: &[Request],
    texts: &[String],
    started: Instant,
) -> Result<()> {
    let results = ResultClient::connect_to(&args.redis.target()?, names.clone()).await?;
    let models = [args.model.clone()];
    let mut answered = Vec::with_capacity(requests.len());
    let mut failures = 0usize;
    // All at once over one connection: an answer lives only the model's
    // result_ttl_s, so waiting for one id after another could look for an
    // early answer after it expired.
    let ids: Vec<_> = requests.iter().map(|request| request.id.clone()).collect();
    let outcomes = results.wait_all(&ids, &models, args.timeout).await;
    for ((request, text), outcome) in requests.iter().zip(texts).zip(outcomes) {
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
    Ok(())
}

/// Exit status 3 when the guard refused some requests.
fn exit_for(overloaded: Option<Overloaded>) -> Result<()> {
    match overloaded {
        Some(_) => std::process::exit(OVERLOADED),
        None => Ok(()),
    }
}
