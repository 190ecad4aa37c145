//! `loadtest peer`: the fleet against a plain Python consumer (the usual
//! design) on the same texts, broker and Redis, one after the other, in
//! rounds; each side's figure is its median ([`loadtest::peer_bench`]).

use super::read_corpus;
use anyhow::{bail, Result};
use clap::Args;
use fleet_ops::stats::median;
use loadtest::fleet::Binaries;
use loadtest::machine;
use loadtest::peer_bench::{self, Medians, PeerBench, Round};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct PeerArgs {
    /// Texts sent to each side.
    #[arg(long, default_value_t = 3000)]
    count: usize,
    /// Median text length, words (log-normal lengths).
    #[arg(long, default_value_t = 15.0)]
    median_words: f64,
    /// σ of the log-normal: 1.05 puts the 99.9th percentile near 380 words.
    #[arg(long, default_value_t = 1.05)]
    sigma: f64,
    #[arg(long, default_value_t = 380)]
    max_words: usize,
    #[arg(long, default_value_t = 11)]
    seed: u64,
    #[arg(long, default_value_t = 8)]
    partitions: i32,
    /// Rounds of every side in turn (the order reversed every other round);
    /// each side's figure is its median.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The peer's precisions, e.g. fp32,bf16; default: fp32, plus bf16 where
    /// the CPU has it in hardware (avx512_bf16 or amx_bf16).
    #[arg(long, value_delimiter = ',', value_parser = loadtest::peer_bench::Precision::parse)]
    peer_precisions: Vec<loadtest::peer_bench::Precision>,
    /// An extra fleet-worker argument (repeatable).
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
    /// The peer's Python: the setup's venv (env.sh puts it first on PATH).
    #[arg(long, default_value = "python3")]
    python: PathBuf,
    #[arg(long, default_value = "loadtest/peer/plain_consumer.py")]
    script: PathBuf,
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Real English sentences the texts are cut from.
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
}

pub async fn execute(args: PeerArgs) -> Result<()> {
    if args.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    let texts = workload(&args)?;
    // Unreadable (not Linux): no bf16 found, the model unknown.
    let cpuinfo = machine::cpuinfo();
    let cpu = machine::cpu_model(&cpuinfo).unwrap_or_else(|| "unknown CPU".to_owned());
    let peers = peer_bench::peer_precisions(&args.peer_precisions, &cpuinfo);
    let names: Vec<&str> = peers.iter().map(|p| p.name()).collect();
    println!(
        "machine: {cpu}, bf16 in hardware: {}; peer precisions: {}; {} rounds",
        if peer_bench::fast_bf16(&cpuinfo) { "yes" } else { "no" },
        names.join(", "),
        args.rounds
    );
    let bench = PeerBench {
        binaries: Binaries::from_env()?,
        texts,
        partitions: args.partitions,
        worker_args: args.worker_args,
        python: args.python,
        script: args.script,
        peers,
        timeout: args.timeout,
    };
    let rounds = rounds(&bench, args.rounds).await?;
    let medians = Medians::of(&rounds);
    println!("median of {} rounds: fleet {:.1}/s", rounds.len(), medians.fleet);
    for (precision, rate) in &medians.peers {
        println!("median of {} rounds: peer-{} {rate:.1}/s", rounds.len(), precision.name());
    }
    println!("{}", peer_bench::result_line(&cpu, &medians));
    Ok(())
}

/// The texts every side is sent, cut from the corpus with log-normal
/// lengths; their lengths printed.
fn workload(args: &PeerArgs) -> Result<Vec<String>> {
    let corpus = read_corpus(&args.corpus)?;
    // Each round makes them its own (peer_bench::round_texts).
    let texts = loadtest::workload::generate_words(
        &corpus,
        args.count,
        args.seed,
        args.median_words,
        args.sigma,
        args.max_words,
    );
    let words: Vec<usize> = texts.iter().map(|t| t.split_whitespace().count()).collect();
    let counts: Vec<f64> = words.iter().map(|&w| w as f64).collect();
    println!(
        "workload: {} texts, median {:.0} words, longest {} words",
        texts.len(),
        median(&counts),
        words.iter().max().copied().unwrap_or(0)
    );
    Ok(texts)
}

/// `count` rounds of every side, each side's line and each peer's cosine
/// against the fleet printed as they come.
async fn rounds(bench: &PeerBench, count: usize) -> Result<Vec<Round>> {
    let mut rounds = Vec::with_capacity(count);
    for number in 1..=count {
        let round = peer_bench::round(bench, number, |contender, side| {
            println!("{}", peer_bench::side_line(number, contender, side));
        })
        .await?;
        for (precision, cosine) in round.cosines() {
            println!("round {number} min cosine, fleet vs peer-{}: {cosine:.5}", precision.name());
        }
        rounds.push(round);
    }
    Ok(rounds)
}
