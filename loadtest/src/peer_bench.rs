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

/// The peer's precision: plain_consumer.py's `--precision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Precision {
    Fp32,
    Bf16,
}

impl Precision {
    pub const ALL: [Precision; 2] = [Precision::Fp32, Precision::Bf16];

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
        }
    }

    /// `fp32` or `bf16` (the command line's value parser).
    pub fn parse(raw: &str) -> Result<Self, String> {
        Precision::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(raw.trim()))
            .ok_or_else(|| format!("expected fp32 or bf16, not {raw:?}"))
    }
}

/// Whether the CPU has bf16 in hardware (AVX-512 BF16 or AMX): without it
/// torch emulates bf16 and a bf16 peer would only be a slower strawman.
pub fn fast_bf16(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .filter_map(|line| line.split_once(':'))
        .filter(|(key, _)| key.trim() == "flags")
        .any(|(_, flags)| flags.split_whitespace().any(|flag| flag == "avx512_bf16" || flag == "amx_bf16"))
}

/// The peer precisions to run, sorted, each once: those asked for, else fp32
/// plus bf16 where the CPU computes it natively ([`fast_bf16`]).
pub fn peer_precisions(asked: &[Precision], cpuinfo: &str) -> Vec<Precision> {
    let bf16 = fast_bf16(cpuinfo);
    let mut precisions: Vec<Precision> = if asked.is_empty() {
        Precision::ALL.into_iter().filter(|&p| p == Precision::Fp32 || bf16).collect()
    } else {
        asked.to_vec()
    };
    precisions.sort_unstable();
    precisions.dedup();
    precisions
}

/// One side of the comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    Fleet,
    Peer(Precision),
}

impl Contender {
    pub fn label(self) -> &'static str {
        match self {
            Contender::Fleet => "fleet",
            Contender::Peer(Precision::Fp32) => "peer-fp32",
            Contender::Peer(Precision::Bf16) => "peer-bf16",
        }
    }
}

/// Round `round`'s order (rounds count from 1): the fleet, then the peers
/// in odd rounds, the reverse in even ones, so no side always goes first.
pub fn round_order(round: usize, peers: &[Precision]) -> Vec<Contender> {
    let mut order: Vec<Contender> =
        std::iter::once(Contender::Fleet).chain(peers.iter().map(|&p| Contender::Peer(p))).collect();
    if round % 2 == 0 {
        order.reverse();
    }
    order
}

/// The texts of round `round`, each made unique to the round and its place:
/// the fleet's feature cache (fleet:feat:*) must answer none of them, within
/// a round or from an earlier one, whatever the workload repeats.
pub fn round_texts(texts: &[String], round: usize) -> Vec<String> {
    texts.iter().enumerate().map(|(i, text)| format!("{text} #{round}-{i}")).collect()
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

/// Every side's run in one round, in the order they ran.
#[derive(Debug, Clone)]
pub struct Round {
    pub number: usize,
    pub sides: Vec<(Contender, Side)>,
}

impl Round {
    pub fn side(&self, contender: Contender) -> Option<&Side> {
        self.sides.iter().find(|(c, _)| *c == contender).map(|(_, side)| side)
    }

    /// Each peer's smallest cosine against the fleet on this round's sample
    /// (the same texts: the round's own).
    pub fn cosines(&self) -> Vec<(Precision, f64)> {
        let Some(fleet) = self.side(Contender::Fleet) else {
            return Vec::new();
        };
        Precision::ALL
            .into_iter()
            .filter_map(|p| Some((p, min_cosine(&fleet.sample, &self.side(Contender::Peer(p))?.sample))))
            .collect()
    }
}

/// `round 2 peer-bf16: 3000 texts in 95.1 s (31.5/s)`.
pub fn side_line(round: usize, contender: Contender, side: &Side) -> String {
    format!(
        "round {round} {}: {} texts in {:.1} s ({:.1}/s)",
        contender.label(),
        side.answered,
        side.seconds,
        side.per_second()
    )
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

/// Request ids unique to the side and the round (`peer-bf16-r2-…`).
fn id_prefix(contender: Contender, round: usize) -> String {
    format!("{}-r{round}", contender.label())
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

/// The median of the rounds' rates (the mean of the middle two of an even
/// count): one slow or fast run moves it little; 0 when empty.
pub fn median_rate(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return 0.0;
    }
    (sorted[(n - 1) / 2] + sorted[n / 2]) / 2.0
}

/// Each side's median rate over the rounds, texts per second.
#[derive(Debug, Clone, PartialEq)]
pub struct Medians {
    pub fleet: f64,
    /// The precisions that ran, fp32 first.
    pub peers: Vec<(Precision, f64)>,
}

impl Medians {
    pub fn of(rounds: &[Round]) -> Medians {
        let rates = |wanted: Contender| -> Vec<f64> {
            rounds
                .iter()
                .flat_map(|round| &round.sides)
                .filter(|(contender, _)| *contender == wanted)
                .map(|(_, side)| side.per_second())
                .collect()
        };
        let peers = Precision::ALL
            .into_iter()
            .map(|p| (p, rates(Contender::Peer(p))))
            .filter(|(_, rates)| !rates.is_empty())
            .map(|(p, rates)| (p, median_rate(&rates)))
            .collect();
        Medians { fleet: median_rate(&rates(Contender::Fleet)), peers }
    }

    /// The fastest peer (the first of equals): the one the fleet must beat.
    pub fn best_peer(&self) -> Option<(Precision, f64)> {
        self.peers.iter().copied().reduce(|best, p| if p.1 > best.1 { p } else { best })
    }
}

/// `RESULT peer cpu="…" fleet_per_s=… peer_fp32_per_s=… [peer_bf16_per_s=…]
/// ratio_fp32=… ratio_best=… best=…`: medians of the rounds; a precision
/// that did not run is left out rather than written as 0.
pub fn result_line(cpu: &str, medians: &Medians) -> String {
    let ratio = |peer: f64| medians.fleet / peer.max(1e-9);
    let mut fields = vec![format!("cpu=\"{}\"", cpu.replace('"', "'")), format!("fleet_per_s={:.1}", medians.fleet)];
    fields.extend(medians.peers.iter().map(|(p, rate)| format!("peer_{}_per_s={rate:.1}", p.name())));
    if let Some((_, fp32)) = medians.peers.iter().find(|(p, _)| *p == Precision::Fp32) {
        fields.push(format!("ratio_fp32={:.2}", ratio(*fp32)));
    }
    if let Some((best, rate)) = medians.best_peer() {
        fields.push(format!("ratio_best={:.2} best={}", ratio(rate), best.name()));
    }
    format!("RESULT peer {}", fields.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(seconds: f64) -> Side {
        Side { answered: 3000, seconds, sample: vec![] }
    }

    fn round_of(number: usize, fleet_s: f64, fp32_s: f64, bf16_s: f64) -> Round {
        let sides = vec![
            (Contender::Fleet, side(fleet_s)),
            (Contender::Peer(Precision::Fp32), side(fp32_s)),
            (Contender::Peer(Precision::Bf16), side(bf16_s)),
        ];
        Round { number, sides }
    }

    #[test]
    fn bf16_runs_only_where_the_cpu_has_it_in_hardware() {
        let amx = "processor\t: 0\nflags\t\t: fpu sse avx512f avx512_vnni amx_bf16 amx_tile\nbugs\t\t: spectre_v1\n";
        let avx512 = "flags\t\t: fpu avx512f avx512_bf16\n";
        let epyc = "flags\t\t: fpu avx2 avx512f\nbugs\t\t: amx_bf16\n";
        assert!(fast_bf16(amx) && fast_bf16(avx512));
        assert!(!fast_bf16(epyc));
        assert!(!fast_bf16(""));
        assert_eq!(peer_precisions(&[], amx), [Precision::Fp32, Precision::Bf16]);
        assert_eq!(peer_precisions(&[], epyc), [Precision::Fp32]);
        // Asked for: as asked, whatever the CPU, sorted and each once.
        let asked = [Precision::Bf16, Precision::Fp32, Precision::Bf16];
        assert_eq!(peer_precisions(&asked, epyc), [Precision::Fp32, Precision::Bf16]);
        assert_eq!(peer_precisions(&[Precision::Bf16], amx), [Precision::Bf16]);
        assert_eq!(Precision::parse(" BF16"), Ok(Precision::Bf16));
        assert!(Precision::parse("fp16").is_err());
    }

    #[test]
    fn the_order_reverses_every_other_round_and_texts_and_ids_are_the_round_s_own() {
        let peers = [Precision::Fp32, Precision::Bf16];
        let labels = |round| round_order(round, &peers).into_iter().map(Contender::label).collect::<Vec<_>>();
        assert_eq!(labels(1), ["fleet", "peer-fp32", "peer-bf16"]);
        assert_eq!(labels(2), ["peer-bf16", "peer-fp32", "fleet"]);
        assert_eq!(labels(3), labels(1));
        assert_eq!(round_order(2, &[Precision::Fp32]), [Contender::Peer(Precision::Fp32), Contender::Fleet]);
        let texts = vec!["a b".to_owned(), "a b".to_owned()];
        assert_eq!(round_texts(&texts, 2), ["a b #2-0", "a b #2-1"]);
        assert_ne!(round_texts(&texts, 1), round_texts(&texts, 2));
        assert_eq!(id_prefix(Contender::Peer(Precision::Bf16), 2), "peer-bf16-r2");
        assert!(RequestId::parse(&format!("{}-2999", id_prefix(Contender::Fleet, 3))).is_ok());
    }

    #[test]
    fn a_side_s_line_is_its_rate_and_its_figure_the_median_of_the_rounds() {
        assert_eq!(
            side_line(2, Contender::Peer(Precision::Bf16), &side(95.1)),
            "round 2 peer-bf16: 3000 texts in 95.1 s (31.5/s)"
        );
        assert_eq!(median_rate(&[]), 0.0);
        assert_eq!(median_rate(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median_rate(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        // Rates: fleet 300, 250, 400; fp32 50, 60, 40; bf16 60, 75, 30.
        let rounds = [round_of(1, 10.0, 60.0, 50.0), round_of(2, 12.0, 50.0, 40.0), round_of(3, 7.5, 75.0, 100.0)];
        let medians = Medians::of(&rounds);
        assert_eq!(medians, Medians { fleet: 300.0, peers: vec![(Precision::Fp32, 50.0), (Precision::Bf16, 60.0)] });
        assert_eq!(
            result_line("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", &medians),
            "RESULT peer cpu=\"Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz\" fleet_per_s=300.0 \
             peer_fp32_per_s=50.0 peer_bf16_per_s=60.0 ratio_fp32=6.00 ratio_best=5.00 best=bf16"
        );
    }

    #[test]
    fn without_bf16_the_line_leaves_it_out_and_fp32_is_the_best() {
        let medians = Medians { fleet: 300.0, peers: vec![(Precision::Fp32, 50.0)] };
        assert_eq!(
            result_line("AMD EPYC 7B13", &medians),
            "RESULT peer cpu=\"AMD EPYC 7B13\" fleet_per_s=300.0 peer_fp32_per_s=50.0 ratio_fp32=6.00 \
             ratio_best=6.00 best=fp32"
        );
        // Equal peers: fp32, the first, is named.
        let tied = Medians { fleet: 100.0, peers: vec![(Precision::Fp32, 50.0), (Precision::Bf16, 50.0)] };
        assert_eq!(tied.best_peer(), Some((Precision::Fp32, 50.0)));
    }

    #[test]
    fn each_peer_is_compared_with_the_fleet_of_its_own_round() {
        let v = vec![Some(vec![1.0, 0.0]), None];
        assert!((min_cosine(&v, &v) - 1.0).abs() < 1e-9);
        let with_sample = |seconds, sample: Vec<Option<Vec<f32>>>| Side { sample, ..side(seconds) };
        let round = Round {
            number: 1,
            sides: vec![
                (Contender::Fleet, with_sample(10.0, vec![Some(vec![1.0, 0.0])])),
                (Contender::Peer(Precision::Bf16), with_sample(50.0, vec![Some(vec![1.0, 1.0])])),
            ],
        };
        let cosines = round.cosines();
        assert_eq!(cosines.len(), 1);
        assert_eq!(cosines[0].0, Precision::Bf16);
        assert!((cosines[0].1 - std::f64::consts::FRAC_1_SQRT_2).abs() < 1e-9);
    }
}
