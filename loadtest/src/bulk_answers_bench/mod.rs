//! A real backfill with its answers on Kafka (issue 43's benchmark): one
//! worker, one run, each step on a fleet of its own (broker, Redis, worker
//! started here):
//!
//! 0. capacity: mixed-length texts sent at once, texts answered per second;
//! 1. interactive alone: open-loop at a share of that capacity;
//! 2. the backfill sent and collected by `fleet-produce bulk --out` (the
//!    real command) beside the same interactive load: its rows per second
//!    (first send to its last answer on the topic), the answers file's
//!    books (missing, repeated), the answer's size, interactive p99;
//! 3. the same backfill with its answers sent to Redis (`--reply-to
//!    redis`): its rows per second, the baseline of step 2's;
//! 4. with `--faults`: step 2 with the worker killed (SIGKILL) twice and the
//!    collector once, restarted with `fleet-produce collect`: the file's
//!    books again.
//!
//! The command's flags and the files it writes are `loadtest
//! bulk-answers`'s (loadtest/src/commands/bulk_answers.rs); [`books`]
//! counts an answers file and writes the `RESULT` lines.

mod books;

pub use books::{backfill_texts, faults_line, file_books, result_line, BulkAnswersReport, FileBooks};

use crate::fleet::{Binaries, LocalWorker};
use crate::lanes_bench::{latency, Fleet, Latency};
use crate::profile::Profile;
use crate::runner::{self, RunConfig};
use crate::timeline::throughput;
use anyhow::{bail, Context, Result};
use fleet_testkit::metric_value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

const MODEL: &str = "minilm";
/// Texts a fresh worker answers before anything is measured.
const WARM_UP_TEXTS: usize = 64;
/// Interactive requests' deadline: far, so nothing expires and latency shows.
const FAR: Duration = Duration::from_secs(24 * 3600);
/// How long a backfill may take at most before the run gives up.
const BACKFILL_LIMIT: Duration = Duration::from_secs(4 * 3600);

pub struct BulkAnswersBench {
    pub binaries: Binaries,
    /// The `fleet-produce` binary: the backfill goes through the real command.
    pub produce: PathBuf,
    /// Sentences the interactive requests are made of.
    pub corpus: Vec<String>,
    /// The backfill's texts, one a line, in a file `fleet-produce` reads.
    pub backfill_file: PathBuf,
    pub backfill_texts: usize,
    pub interactive_fraction: f64,
    /// The interactive window of each step.
    pub duration: Duration,
    pub capacity_texts: usize,
    pub partitions: i32,
    pub seed: u64,
    /// Where the answers files go.
    pub work_dir: PathBuf,
    /// The backfill of step 4 (a file, its texts); `None`: no step 4.
    pub faults: Option<(PathBuf, usize)>,
}

pub async fn run(bench: &BulkAnswersBench) -> Result<BulkAnswersReport> {
    let pid = std::process::id();
    let mut report = BulkAnswersReport { texts: bench.backfill_texts, ..BulkAnswersReport::default() };
    let capacity = {
        let fleet = start(bench, "capacity").await?;
        let burst = fleet.burst(&bench.corpus, bench.capacity_texts, bench.seed + 2, format!("ba-cap-{pid}")).await?;
        throughput(&burst.records).context("the capacity burst measured no rate")?
    };
    let rate = bench.interactive_fraction * capacity;
    println!("capacity: {capacity:.1} texts/s; interactive load {rate:.1} req/s for {:?}", bench.duration);

    let fleet = start(bench, "alone").await?;
    let alone = interactive(&fleet, bench, rate, format!("ba-alone-{pid}")).await?;
    println!("1 interactive alone: p99 {:.1} ms over {} answers", alone.p99_ms, alone.ok);
    report.alone = Some(alone);
    drop(fleet);

    let fleet = start(bench, "kafka").await?;
    let out = bench.work_dir.join("answers.jsonl");
    let _ = std::fs::remove_file(&out);
    let job = format!("backfill-kafka-{pid}");
    let started = Instant::now();
    let mut sender = bulk(bench, &fleet, &job, &bench.backfill_file, &["--out", &out.to_string_lossy()])?;
    let (window, done) = tokio::join!(
        interactive(&fleet, bench, rate, format!("ba-kafka-{pid}")),
        answered(&fleet, "kafka", bench.backfill_texts)
    );
    let seconds = done?.duration_since(started).as_secs_f64();
    wait_exit(&mut sender, "fleet-produce bulk --out").await?;
    report.interactive = Some(window?);
    report.rows_per_s = bench.backfill_texts as f64 / seconds;
    report.kafka = file_books(&out)?;
    println!(
        "2 backfill, answers on Kafka: {} texts in {seconds:.1} s ({:.1}/s); file: {} lines, {} distinct, {} ok; \
         interactive p99 {:.1} ms",
        bench.backfill_texts,
        report.rows_per_s,
        report.kafka.lines,
        report.kafka.distinct,
        report.kafka.ok,
        report.interactive.map_or(f64::NAN, |l| l.p99_ms)
    );
    drop(fleet);

    let fleet = start(bench, "redis").await?;
    let job = format!("backfill-redis-{pid}");
    let started = Instant::now();
    let mut sender = bulk(bench, &fleet, &job, &bench.backfill_file, &["--reply-to", "redis"])?;
    let (_, done) = tokio::join!(
        interactive(&fleet, bench, rate, format!("ba-redis-{pid}")),
        answered(&fleet, "redis", bench.backfill_texts)
    );
    let seconds = done?.duration_since(started).as_secs_f64();
    wait_exit(&mut sender, "fleet-produce bulk --reply-to redis").await?;
    report.redis_rows_per_s = bench.backfill_texts as f64 / seconds;
    println!("3 backfill, answers in Redis: {seconds:.1} s ({:.1}/s)", report.redis_rows_per_s);
    drop(fleet);

    if let Some((file, texts)) = &bench.faults {
        report.faults = Some(with_faults(bench, file, *texts).await?);
    }
    Ok(report)
}

/// Step 4: the backfill collected while the worker is killed twice and the
/// collector once.
async fn with_faults(bench: &BulkAnswersBench, file: &Path, texts: usize) -> Result<FileBooks> {
    let mut fleet = start(bench, "faults").await?;
    let out = bench.work_dir.join("answers-faults.jsonl");
    let _ = std::fs::remove_file(&out);
    let job = format!("backfill-faults-{}", std::process::id());
    let mut collector = bulk(bench, &fleet, &job, file, &["--out", &out.to_string_lossy()])?;
    wait_for_lines(&out, texts / 4).await?;
    restart_worker(bench, &mut fleet, "at a quarter").await?;
    wait_for_lines(&out, texts / 2).await?;
    collector.kill()?;
    let _ = collector.wait();
    println!("4 faults: the collector killed at half the answers; collecting again");
    let mut collector = produce_command(bench, &fleet)
        .args(["collect", "--job", &job, "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting fleet-produce collect")?;
    wait_for_lines(&out, texts * 3 / 4).await?;
    restart_worker(bench, &mut fleet, "at three quarters").await?;
    wait_exit(&mut collector, "fleet-produce collect").await?;
    file_books(&out)
}

async fn restart_worker(bench: &BulkAnswersBench, fleet: &mut Fleet, when: &str) -> Result<()> {
    fleet.worker.kill();
    println!("4 faults: the worker killed (SIGKILL) {when}; restarting it");
    fleet.worker =
        LocalWorker::start_async(&bench.binaries, MODEL, &fleet.broker.addr, &fleet.redis.url(), &[]).await?;
    Ok(())
}

async fn wait_for_lines(path: &Path, lines: usize) -> Result<()> {
    let deadline = Instant::now() + BACKFILL_LIMIT;
    while std::fs::read(path).map_or(0, |b| bytecount(&b)) < lines {
        if Instant::now() > deadline {
            bail!("{} never reached {lines} lines", path.display());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

fn bytecount(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'\n').count()
}

/// A fresh fleet, warmed up with a few texts.
async fn start(bench: &BulkAnswersBench, name: &str) -> Result<Fleet> {
    let fleet = Fleet::start(&bench.binaries, bench.partitions, &[]).await?;
    let run_id = format!("ba-warm-{name}-{}", std::process::id());
    fleet.burst(&bench.corpus, WARM_UP_TEXTS, bench.seed + 3, run_id).await?;
    Ok(fleet)
}

/// The step's interactive load: open-loop at `rate` for the window.
async fn interactive(fleet: &Fleet, bench: &BulkAnswersBench, rate: f64, run_id: String) -> Result<Latency> {
    let config = fleet.run_config(&bench.corpus, Profile::Steady { rate }, bench.duration, run_id)?;
    let outcome =
        runner::run(RunConfig { seed: bench.seed, ttl: Some(FAR), drain: Duration::from_secs(120), ..config }).await?;
    if outcome.ledger.ok as usize != outcome.records.len() {
        bail!("interactive requests not all ok: {}", outcome.ledger.result_line());
    }
    Ok(latency(&outcome.records))
}

fn produce_command(bench: &BulkAnswersBench, fleet: &Fleet) -> Command {
    let mut command = Command::new(&bench.produce);
    command.args(["--brokers", &fleet.broker.addr]).env("RUST_LOG", "warn");
    command
}

/// `fleet-produce bulk` of `file` as `job`, with `extra` flags.
fn bulk(bench: &BulkAnswersBench, fleet: &Fleet, job: &str, file: &Path, extra: &[&str]) -> Result<Child> {
    produce_command(bench, fleet)
        .args(["bulk", "--model", MODEL, "--job", job, "--file"])
        .arg(file)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting fleet-produce bulk")
}

async fn wait_exit(child: &mut Child, what: &str) -> Result<()> {
    let deadline = Instant::now() + BACKFILL_LIMIT;
    loop {
        if let Some(status) = child.try_wait()? {
            // 4: every answer is there, some not ok: the books say which.
            if status.success() || status.code() == Some(4) {
                return Ok(());
            }
            bail!("{what} ended with {status}");
        }
        if Instant::now() > deadline {
            bail!("{what} did not end within {BACKFILL_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// When the worker had delivered `texts` bulk answers to `destination`.
async fn answered(fleet: &Fleet, destination: &str, texts: usize) -> Result<Instant> {
    let deadline = Instant::now() + BACKFILL_LIMIT;
    loop {
        let scrape = fleet.scrape().await?.unwrap_or_default();
        let labels = [("destination", destination), ("lane", "bulk")];
        if metric_value(&scrape, "fleet_answers_delivered_total", &labels) >= texts as f64 {
            return Ok(Instant::now());
        }
        if Instant::now() > deadline {
            bail!("the backfill was not answered within {BACKFILL_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
