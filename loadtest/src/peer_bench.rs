//! The fleet against the service a user would write instead: the same
//! texts, the same broker and Redis setup, one side after the other with
//! the whole machine each. The peer is `loadtest/peer/plain_consumer.py`
//! (confluent-kafka, batches of 32 in arrival order, sentence-transformers
//! with its defaults, redis-py, offsets committed after the write).
//!
//! Each side is started and waits, ready and owning its partitions; then
//! every text is sent at once (far deadlines: nothing may expire on either
//! side), and the side's rate is texts ÷ (last answer seen − first send).

use crate::collect;
use crate::fleet::{Binaries, LocalWorker};
use anyhow::{bail, Context, Result};
use fleet_connect::redis::Connection;
use fleet_producer::{FleetProducer, Request};
use fleet_proto::clock::now_ms;
use fleet_proto::{ModelName, Namespace, RequestId};
use fleet_testkit::{Broker, Killed, Redis};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MODEL: &str = "minilm";
/// How often the answers are looked for (the rate's resolution).
const POLL_EVERY: Duration = Duration::from_millis(100);

pub struct PeerBench {
    pub binaries: Binaries,
    pub texts: Vec<String>,
    pub partitions: i32,
    /// Extra fleet-worker arguments.
    pub worker_args: Vec<String>,
    /// The peer's Python (the setup's venv) and script.
    pub python: PathBuf,
    pub script: PathBuf,
    /// Longest a side may take for all texts.
    pub timeout: Duration,
}

/// One side's run.
#[derive(Debug, Clone)]
pub struct Side {
    pub answered: usize,
    pub seconds: f64,
    /// The first few texts' embeddings (in text order), for checking that
    /// both sides computed the same.
    pub sample: Vec<Option<Vec<f32>>>,
}

impl Side {
    pub fn per_second(&self) -> f64 {
        self.answered as f64 / self.seconds.max(1e-9)
    }
}

/// How many answers each side keeps for the comparison of outputs.
const SAMPLE: usize = 32;

pub async fn fleet(bench: &PeerBench) -> Result<Side> {
    let (broker, redis, model) = servers(bench).await?;
    let (binaries, brokers, redis_url, args) =
        (bench.binaries.clone(), broker.addr.clone(), redis.url(), bench.worker_args.clone());
    let worker = tokio::task::spawn_blocking(move || {
        let extra: Vec<&str> = args.iter().map(String::as_str).collect();
        LocalWorker::start(&binaries, MODEL, &brokers, &redis_url, &extra)
    })
    .await??;
    let deadline = Instant::now() + Duration::from_secs(60);
    while worker.metric("fleet_assigned_partitions") < f64::from(bench.partitions) {
        if Instant::now() > deadline {
            bail!("the worker did not get all {} partitions", bench.partitions);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let side = measure(bench, &broker, &redis, &model, "fleet").await;
    drop(worker);
    side
}

pub async fn peer(bench: &PeerBench) -> Result<Side> {
    let (broker, redis, model) = servers(bench).await?;
    let mut child = Command::new(&bench.python)
        .arg(&bench.script)
        .args(["--brokers", &broker.addr, "--redis", &redis.url(), "--topic", &Namespace::default().topic(&model)])
        .args(["--group", "peer.minilm", "--model-name", MODEL])
        .stdout(Stdio::piped())
        .stderr(fleet_testkit::log_file("peer-consumer"))
        .spawn()
        .with_context(|| format!("starting {} {}", bench.python.display(), bench.script.display()))?;
    let stdout = child.stdout.take().context("the peer's stdout")?;
    let peer = Killed(child);
    let ready = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout).lines().map_while(Result::ok).any(|line| line.trim() == "READY")
    });
    if !tokio::time::timeout(Duration::from_secs(180), ready).await.context("the peer was not ready in 180 s")?? {
        bail!("the peer exited before it was ready (log: fleet-test-logs/peer-consumer-*.log)");
    }
    let side = measure(bench, &broker, &redis, &model, "peer").await;
    drop(peer);
    side
}

async fn servers(bench: &PeerBench) -> Result<(Broker, Redis, ModelName)> {
    let model = ModelName::parse(MODEL)?;
    let (broker, redis) = (Broker::start(), Redis::start());
    broker.create_topics(&model, bench.partitions).await;
    Ok((broker, redis, model))
}

/// Sends every text at once, then waits for every answer.
async fn measure(bench: &PeerBench, broker: &Broker, redis: &Redis, model: &ModelName, name: &str) -> Result<Side> {
    let producer = FleetProducer::new(&broker.kafka(), "peer-bench")?;
    let ids: Vec<RequestId> =
        (0..bench.texts.len()).map(|i| RequestId::parse(&format!("{name}-{i}"))).collect::<Result<_, _>>()?;
    let far = now_ms() + 3_600_000;
    let started = Instant::now();
    let mut deliveries = Vec::with_capacity(ids.len());
    for (id, text) in ids.iter().zip(&bench.texts) {
        let mut request = Request::text(id.clone(), text.clone());
        request.deadline_ms = Some(far);
        deliveries.push(producer.send(model, &request).await?);
    }
    for delivered in futures::future::join_all(deliveries).await {
        delivered.context("delivery")?;
    }
    // Its own Redis, one server, the default names (as the peer's script).
    let mut conn = Connection::Plain(redis::Client::open(redis.url())?.get_multiplexed_async_connection().await?);
    let mut pending: Vec<usize> = (0..ids.len()).collect();
    let mut sample = vec![None; SAMPLE];
    let mut last_seen = started;
    while !pending.is_empty() {
        if started.elapsed() > bench.timeout {
            bail!("{name}: {} of {} texts unanswered after {:?}", pending.len(), ids.len(), bench.timeout);
        }
        tokio::time::sleep(POLL_EVERY).await;
        let asked: Vec<RequestId> = pending.iter().map(|&i| ids[i].clone()).collect();
        let seen = collect::poll(&mut conn, &Namespace::default(), model, &asked).await?;
        let now = Instant::now();
        let mut still = Vec::new();
        for (&i, answer) in pending.iter().zip(seen) {
            match answer {
                Some(_) => {
                    last_seen = now;
                    // Read at once: an answer lives 30 s, a side may take longer.
                    if i < SAMPLE {
                        sample[i] = embedding(&mut conn, &ids[i]).await;
                    }
                }
                None => still.push(i),
            }
        }
        pending = still;
    }
    Ok(Side { answered: ids.len(), seconds: last_seen.duration_since(started).as_secs_f64(), sample })
}

async fn embedding(conn: &mut Connection, id: &RequestId) -> Option<Vec<f32>> {
    let raw: Option<String> =
        redis::cmd("HGET").arg(Namespace::default().result_key(id)).arg(MODEL).query_async(conn).await.ok().flatten();
    raw.as_deref().and_then(embedding_of)
}

fn embedding_of(answer: &str) -> Option<Vec<f32>> {
    let value: serde_json::Value = serde_json::from_str(answer).ok()?;
    value["output"]["embedding"].as_array()?.iter().map(|x| x.as_f64().map(|x| x as f32)).collect()
}

/// The middle value (the upper one of an even count); 0 when empty.
pub fn median(values: &[usize]) -> usize {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted.get(sorted.len() / 2).copied().unwrap_or(0)
}

/// The smallest cosine between the two sides' answers to the same texts
/// (texts one side has no embedding of are left out).
pub fn min_cosine(a: &[Option<Vec<f32>>], b: &[Option<Vec<f32>>]) -> f64 {
    a.iter()
        .zip(b)
        .filter_map(|(x, y)| Some((x.as_ref()?, y.as_ref()?)))
        .map(|(x, y)| {
            let dot: f64 = x.iter().zip(y).map(|(p, q)| f64::from(*p) * f64::from(*q)).sum();
            let norm = |v: &[f32]| v.iter().map(|p| f64::from(*p).powi(2)).sum::<f64>().sqrt();
            dot / (norm(x) * norm(y)).max(1e-12)
        })
        .fold(f64::INFINITY, f64::min)
}

pub fn result_line(fleet: &Side, peer: &Side) -> String {
    format!(
        "RESULT peer fleet_sent_per_s={:.1} peer_sent_per_s={:.1} ratio={:.2}",
        fleet.per_second(),
        peer.per_second(),
        fleet.per_second() / peer.per_second().max(1e-9)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_answers_over_seconds_and_the_ratio_fleet_over_peer() {
        let fleet = Side { answered: 3000, seconds: 6.0, sample: vec![] };
        let peer = Side { answered: 3000, seconds: 60.0, sample: vec![] };
        assert_eq!(result_line(&fleet, &peer), "RESULT peer fleet_sent_per_s=500.0 peer_sent_per_s=50.0 ratio=10.00");
        let v = vec![Some(vec![1.0, 0.0]), None];
        assert!((min_cosine(&v, &v) - 1.0).abs() < 1e-9);
    }
}
