//! `fleet-produce image`: sends image files to an image model, each with its
//! caption to a text model as one two-part request when asked; with
//! `--wait`, prints each image's answers.

use super::routing::LaneArgs;
use anyhow::{Context, Result};
use clap::Args;
use fleet_connect::redis::RedisConfig;
use fleet_producer::results::Answers;
use fleet_producer::{FleetProducer, KafkaConfig, Request, ResultClient};
use fleet_proto::{Answer, ContentType, ModelName, Namespace, RequestId};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[derive(Args)]
pub struct ImageArgs {
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
    pub routing: LaneArgs,
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

pub async fn run(kafka: &KafkaConfig, names: &Namespace, args: ImageArgs) -> Result<()> {
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as u64;
    let prefix = args.id_prefix.clone().unwrap_or_else(|| format!("img-{now_ms}"));
    let producer = FleetProducer::new(kafka, &args.source)?.with_namespace(names.clone());
    let mut sent = Vec::new();
    for (n, path) in args.files.iter().enumerate() {
        let id = RequestId::parse(&format!("{prefix}-{n}")).context("building a request id from --id-prefix")?;
        let image = image_request(&args, id.clone(), path)?;
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
    print_answers(names, &args, &sent).await
}

/// The image file at `path` as a request: its type read from its bytes,
/// shrunk to `--max-side` unless that is 0.
fn image_request(args: &ImageArgs, id: RequestId, path: &Path) -> Result<Request> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let content_type = fleet_image::Format::sniff(&bytes)
        .and_then(|f| ContentType::parse(f.mime()))
        .with_context(|| format!("{} is not a JPEG, PNG or WebP file", path.display()))?;
    Ok(if args.max_side > 0 {
        Request::image_within(id, content_type, bytes, args.max_side)
            .with_context(|| format!("preparing {}", path.display()))?
    } else {
        Request::image(id, content_type, bytes)
    })
}

/// Waits for each image's answers, every model's, and prints a line an
/// image: the answers' JSON with `--json`, else a few words a model.
async fn print_answers(names: &Namespace, args: &ImageArgs, sent: &[(RequestId, &PathBuf)]) -> Result<()> {
    let mut models = vec![args.model.clone()];
    models.extend(args.text_model.clone().filter(|_| args.caption.is_some()));
    let results = ResultClient::connect_to(&args.redis.target()?, names.clone()).await?;
    for (id, path) in sent {
        let answers = results.wait(id, &models, args.timeout).await?;
        if args.json {
            println!("{}\t{}\t{}", id, path.display(), json_line(&answers));
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

/// One image's answers as one JSON object, by model.
fn json_line(answers: &Answers) -> serde_json::Value {
    let line: serde_json::Map<String, serde_json::Value> = answers
        .iter()
        .map(|(model, answer)| (model.clone(), serde_json::from_str(&answer.to_json()).unwrap_or_default()))
        .collect();
    serde_json::Value::Object(line)
}

/// One answer in a few words: the top class, an embedding's size, or the error.
fn brief(answer: &Answer) -> String {
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
