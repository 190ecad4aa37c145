//! `fleet-bench batching`: FIFO batches of 32 (the seed service) against
//! the bucket batcher with the model's limits, on one seeded workload in one
//! run, then a sweep of `max_batch_tokens`, drawn into a plot. Last line:
//! `RESULT batching throughput_ratio=<bucket/fifo> padding_efficiency=<bucket>`.

use crate::measure::{measure, print_table, warm_up, Measured};
use crate::text_engine::{read_lines, TextEngine};
use crate::{plot, strategy};
use anyhow::Result;
use clap::Args;
use fleet_worker::config::BucketLimits;
use std::path::PathBuf;

#[derive(Args)]
pub struct BatchingArgs {
    /// Sentences the workload is made of.
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
    #[arg(long, default_value_t = 1000)]
    count: usize,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    #[arg(long, default_value_t = 32)]
    fifo_batch: usize,
    /// max_batch_tokens values to sweep (attention budget scaled along, ×128).
    #[arg(long, value_delimiter = ',', default_value = "512,1024,2048,4096,8192,16384")]
    sweep: Vec<usize>,
    /// Texts per sweep point (the workload's first ones).
    #[arg(long, default_value_t = 1000)]
    sweep_count: usize,
    #[arg(long, default_value = "docs/img/batching.png")]
    plot: PathBuf,
}

pub fn run(args: &BatchingArgs, engine: &TextEngine) -> Result<()> {
    let corpus = read_lines(&args.corpus)?;
    let texts = loadtest::workload::generate(&corpus, args.count, args.seed);
    let tokens = engine.tokenize_all(&texts)?;
    let lens: Vec<usize> = tokens.iter().map(Vec::len).collect();
    describe_workload(args, &lens);
    let limits = engine.version.config.batching.limits(engine.max_seq_len);
    let (fifo, bucket) = fifo_against_buckets(args, engine, &tokens, &lens, &limits)?;
    let sweep = sweep(args, engine, &tokens, &lens, &limits)?;
    if let Err(e) = plot::batching_png(&args.plot, &[fifo.clone(), bucket.clone()], &sweep) {
        eprintln!("plot not written: {e}");
    } else {
        println!("\nplot: {}", args.plot.display());
    }
    println!(
        "RESULT batching throughput_ratio={:.2} padding_efficiency={:.3}",
        bucket.throughput() / fifo.throughput(),
        bucket.padding_efficiency
    );
    Ok(())
}

/// The workload's size and its token lengths' spread.
fn describe_workload(args: &BatchingArgs, lens: &[usize]) {
    let mut sorted = lens.to_vec();
    sorted.sort_unstable();
    let q = |p: f64| sorted[((p * sorted.len() as f64) as usize).min(sorted.len() - 1)];
    println!(
        "workload: {} texts (seed {}), tokens p50 {} p90 {} p99 {} max {}, {} total",
        lens.len(),
        args.seed,
        q(0.5),
        q(0.9),
        q(0.99),
        sorted[sorted.len() - 1],
        lens.iter().sum::<usize>()
    );
}

/// The whole workload in FIFO batches and in the batcher's, measured and
/// printed side by side.
fn fifo_against_buckets(
    args: &BatchingArgs,
    engine: &TextEngine,
    tokens: &[Vec<i64>],
    lens: &[usize],
    limits: &BucketLimits,
) -> Result<(Measured, Measured)> {
    println!(
        "bucket limits (config.toml): {} buckets, max_batch_size {}, max_batch_tokens {}, max_attention_cells {}",
        limits.boundaries.len(),
        limits.max_batch_size,
        limits.max_batch_tokens,
        limits.max_attention_cells
    );
    let fifo_batches = strategy::fifo(lens, args.fifo_batch);
    let bucket_batches = strategy::bucketed(lens, limits);
    warm_up(&engine.module, tokens, &fifo_batches)?;
    let fifo = measure(&format!("fifo-{}", args.fifo_batch), &engine.module, tokens, &fifo_batches)?;
    warm_up(&engine.module, tokens, &bucket_batches)?;
    let bucket = measure("bucket", &engine.module, tokens, &bucket_batches)?;
    print_table(&[&fifo, &bucket]);
    Ok((fifo, bucket))
}

/// The batcher at each `--sweep` token budget over the workload's first
/// `--sweep-count` texts, the batch size left unbounded.
fn sweep(
    args: &BatchingArgs,
    engine: &TextEngine,
    tokens: &[Vec<i64>],
    lens: &[usize],
    limits: &BucketLimits,
) -> Result<Vec<(usize, Measured)>> {
    let max_seq_len = engine.max_seq_len;
    let sweep_lens = &lens[..args.sweep_count.min(lens.len())];
    let sweep_tokens = &tokens[..sweep_lens.len()];
    let mut sweep = Vec::new();
    println!("\nsweep of max_batch_tokens over the first {} texts (max_attention_cells = 128 × tokens, at least one full row):", sweep_lens.len());
    for &budget in &args.sweep {
        let mut l = limits.clone();
        l.max_batch_tokens = budget.max(max_seq_len);
        l.max_attention_cells = (budget * 128).max(max_seq_len * max_seq_len);
        l.max_batch_size = usize::MAX;
        let batches = strategy::bucketed(sweep_lens, &l);
        warm_up(&engine.module, sweep_tokens, &batches)?;
        let m = measure(&format!("tokens={budget}"), &engine.module, sweep_tokens, &batches)?;
        sweep.push((budget, m));
    }
    print_table(&sweep.iter().map(|(_, m)| m).collect::<Vec<_>>());
    Ok(sweep)
}
