//! The fleet against the service a user would write instead: the same
//! texts, the same broker and Redis setup, one side after the other with
//! the whole machine each. The peer is `loadtest/peer/plain_consumer.py`
//! (confluent-kafka, batches of 32 in arrival order, sentence-transformers
//! with its defaults, redis-py, offsets committed after the write), run in
//! fp32 and, where the CPU computes bf16 natively, in bf16 too: the fleet
//! picks bf16 there, so an fp32-only peer would not be the strongest one a
//! Python engineer could write.
//!
//! Each side is started and waits, ready and owning its partitions; then
//! every text is sent at once (far deadlines: nothing may expire on either
//! side), and the side's rate is texts ÷ (last answer seen − first send).
//! One run of a side is noisy on a shared box, so the sides run in rounds,
//! the order reversed every other round so a drift (heat, a neighbour's
//! load) weighs on all alike; each side's figure is its median.
//!
//! Here the bench and how each side runs; [`precision`] is which peers run
//! on this CPU, [`rounds`] the order, the figures and the `RESULT` line.

mod precision;
mod rounds;

pub use precision::{fast_bf16, peer_precisions, Precision};
pub use rounds::{min_cosine, result_line, round_order, round_texts, side_line, Contender, Medians, Round, Side};

use crate::collect;
use crate::fleet::{Binaries, LocalWorker};
use anyhow::{bail, Context, Result};
use fleet_connect::redis::Connection;
use fleet_producer::{FleetProducer, Request};
use fleet_proto::clock::now_ms;
use fleet_proto::{ModelName, Namespace, RequestId};
use fleet_testkit::{Broker, Killed, Redis};
use rounds::id_prefix;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MODEL: &str = "minilm";
/// How often the answers are looked for (the rate's resolution).
const POLL_EVERY: Duration = Duration::from_millis(100);

pub struct PeerBench {
    pub binaries: Binaries,
    /// The workload; each round sends these made unique to it ([`round_texts`]).
    pub texts: Vec<String>,
    pub partitions: i32,
    /// Extra fleet-worker arguments.
    pub worker_args: Vec<String>,
    /// The peer's Python (the setup's venv) and script.
    pub python: PathBuf,
    pub script: PathBuf,
    /// The peer's precisions, one peer run each per round ([`peer_precisions`]).
    pub peers: Vec<Precision>,
    /// Longest a side may take for all texts.
    pub timeout: Duration,
}

/// How many answers each side keeps for the comparison of outputs.
const SAMPLE: usize = 32;

/// Round `number`: every side in [`round_order`] on the round's texts;
/// `on_side` sees each as it completes (a side takes a minute or more).
pub async fn round(bench: &PeerBench, number: usize, mut on_side: impl FnMut(Contender, &Side)) -> Result<Round> {
    let texts = round_texts(&bench.texts, number);
    let mut sides = Vec::new();
    for contender in round_order(number, &bench.peers) {
        let side = match contender {
            Contender::Fleet => fleet(bench, &texts, number).await?,
            Contender::Peer(precision) => peer(bench, &texts, precision, number).await?,
        };
        on_side(contender, &side);
        sides.push((contender, side));
    }
    Ok(Round { number, sides })
}

pub async fn fleet(bench: &PeerBench, texts: &[String], round: usize) -> Result<Side> {
    let (broker, redis, model) = servers(bench).await?;
    let worker =
        LocalWorker::start_async(&bench.binaries, MODEL, &broker.addr, &redis.url(), &bench.worker_args).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while worker.metric("fleet_assigned_partitions") < f64::from(bench.partitions) {
        if Instant::now() > deadline {
            bail!("the worker did not get all {} partitions", bench.partitions);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let side = measure(bench, texts, &broker, &redis, &model, &id_prefix(Contender::Fleet, round)).await;
    drop(worker);
    side
}

pub async fn peer(bench: &PeerBench, texts: &[String], precision: Precision, round: usize) -> Result<Side> {
    let (broker, redis, model) = servers(bench).await?;
    let log = format!("peer-consumer-{}-r{round}", precision.name());
    let mut child = Command::new(&bench.python)
        .arg(&bench.script)
        .args(["--brokers", &broker.addr, "--redis", &redis.url(), "--topic", &Namespace::default().topic(&model)])
        .args(["--group", "peer.minilm", "--model-name", MODEL, "--precision", precision.name()])
        .stdout(Stdio::piped())
        .stderr(fleet_testkit::log_file(&log))
        .spawn()
        .with_context(|| format!("starting {} {}", bench.python.display(), bench.script.display()))?;
    let stdout = child.stdout.take().context("the peer's stdout")?;
    let peer = Killed(child);
    let ready = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout).lines().map_while(Result::ok).any(|line| line.trim() == "READY")
    });
    if !tokio::time::timeout(Duration::from_secs(180), ready).await.context("the peer was not ready in 180 s")?? {
        bail!("the peer exited before it was ready (log: fleet-test-logs/{log}-*.log)");
    }
    let side = measure(bench, texts, &broker, &redis, &model, &id_prefix(Contender::Peer(precision), round)).await;
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
async fn measure(
    bench: &PeerBench,
    texts: &[String],
    broker: &Broker,
    redis: &Redis,
    model: &ModelName,
    name: &str,
) -> Result<Side> {
    let producer = FleetProducer::new(&broker.kafka(), "peer-bench")?;
    let ids: Vec<RequestId> =
        (0..texts.len()).map(|i| RequestId::parse(&format!("{name}-{i}"))).collect::<Result<_, _>>()?;
    let far = now_ms() + 3_600_000;
    let started = Instant::now();
    let mut deliveries = Vec::with_capacity(ids.len());
    for (id, text) in ids.iter().zip(texts) {
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
