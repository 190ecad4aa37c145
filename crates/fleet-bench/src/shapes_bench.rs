//! `fleet-bench shapes`: what the C heap keeps for each batch shape the
//! text model meets.
//!
//! In the one-hour soak (docs/soak.md) the text worker's heap in use grew
//! in steps, at a model swap and at the burst (whose batches had shapes
//! none before had), and hardly between them. A cache keyed by shape does
//! that: libtorch's kernels are planned per input shape and kept, by
//! oneDNN (up to `ONEDNN_PRIMITIVE_CACHE_CAPACITY`, 1 024 by default) and
//! by ideep, its C++ face in libtorch (up to `LRU_CACHE_CAPACITY`, 1 024),
//! and nearly every batch has a shape of its own (its rows × its longest
//! text). This runs a grid of shapes once (each one new), the same
//! grid again (each one seen), then a second grid (new again), reading
//! glibc's bytes in use after each pass: a cache per shape grows in the
//! new passes and not in the seen one. The seen pass's time per batch,
//! run with the caches on and off, is what a miss costs. Last line:
//! `RESULT shapes precision=… threads=… shapes=… new_kib_per_shape=…
//! seen_kib_per_shape=… seen_ms_per_batch=… onednn_cache=… lru_cache=…`.

use crate::common::Common;
use crate::text_bench::{max_rows, token_rows, Corpus, TextBench, TextBenchArgs};
use anyhow::{Context, Result};
use clap::Args;
use fleet_worker::config::BucketLimits;
use fleet_worker::heap;
use fleet_worker::stages::engine::torch::TextModule;
use std::path::PathBuf;
use std::time::Instant;

/// The grid's padded lengths; the second grid's are 4 tokens longer.
const LENGTHS: [usize; 12] = [8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128];
const SECOND_GRID_OFFSET: usize = 4;
/// Shapes run before anything is counted (lengths in neither grid): the
/// first calls set up thread pools and the executor's plans once.
const WARM_SHAPES: [(usize, usize); 4] = [(1, 7), (2, 7), (1, 9), (3, 9)];

#[derive(Args)]
pub struct ShapesCommand {
    /// Real sentences the batches' token ids are cut from.
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
    /// The kernel caches' capacity, set in this process the way the worker
    /// sets it (its --kernel-cache-capacity; `auto` is the worker's
    /// default). `libtorch`: as the environment says.
    #[arg(long, default_value = "libtorch")]
    kernel_cache_capacity: fleet_worker::kernel_caches::KernelCacheCapacity,
}

pub fn run(common: &Common, command: &ShapesCommand) -> Result<()> {
    // First: it sets the environment libtorch reads as it starts, which is
    // only sound before any other thread runs.
    fleet_worker::kernel_caches::apply_before_libtorch(
        command.kernel_cache_capacity,
        &common.model_repo,
        common.model.as_str(),
    );
    measure(&TextBenchArgs::start(common, &command.corpus))
}

fn measure(args: &TextBenchArgs<'_>) -> Result<()> {
    let TextBench { version, module, corpus, limits, max_seq_len } = TextBench::load(args)?;
    let setting = |name: &str| std::env::var(name).unwrap_or_else(|_| "default".to_owned());
    let (onednn_cache, lru_cache) = (setting("ONEDNN_PRIMITIVE_CACHE_CAPACITY"), setting("LRU_CACHE_CAPACITY"));
    println!(
        "model: {} version {}, {}, {} threads, ONEDNN_PRIMITIVE_CACHE_CAPACITY={onednn_cache} \
         LRU_CACHE_CAPACITY={lru_cache}",
        version.name, version.version, args.precision, args.threads
    );
    run_shapes(&module, &corpus, &WARM_SHAPES)?;
    let first = grid(&limits, max_seq_len, 0);
    let second = grid(&limits, max_seq_len, SECOND_GRID_OFFSET);
    let mut kib_per_shape = Vec::new();
    let mut seen_ms_per_batch = 0.0;
    for (pass, shapes) in [("new", &first), ("seen", &first), ("new", &second)] {
        let before = in_use()?;
        let started = Instant::now();
        run_shapes(&module, &corpus, shapes)?;
        let ms_per_batch = started.elapsed().as_secs_f64() * 1e3 / shapes.len() as f64;
        let grew = in_use()? as f64 - before as f64;
        let per_shape = grew / 1024.0 / shapes.len() as f64;
        println!(
            "pass of {} {pass} shapes: heap in use {:+.2} MiB, {per_shape:+.2} KiB a shape; {ms_per_batch:.2} ms a batch",
            shapes.len(),
            grew / (1 << 20) as f64
        );
        kib_per_shape.push((pass, per_shape, shapes.len()));
        if pass == "seen" {
            // With the caches on every seen shape hits them; with them off
            // each batch plans its kernels again: the two runs' figures
            // differ by what a miss costs.
            seen_ms_per_batch = ms_per_batch;
        }
    }
    let mean = |which: &str| {
        let passes: Vec<_> = kib_per_shape.iter().filter(|(pass, _, _)| *pass == which).collect();
        let shapes: usize = passes.iter().map(|(_, _, n)| n).sum();
        passes.iter().map(|(_, kib, n)| kib * *n as f64).sum::<f64>() / shapes.max(1) as f64
    };
    println!(
        "RESULT shapes precision={} threads={} shapes={} new_kib_per_shape={:.2} seen_kib_per_shape={:.2} \
         seen_ms_per_batch={seen_ms_per_batch:.2} onednn_cache={onednn_cache} lru_cache={lru_cache}",
        args.precision,
        args.threads,
        first.len() + second.len(),
        mean("new"),
        mean("seen")
    );
    Ok(())
}

/// Every (rows, padded length) the batching limits allow at the grid's
/// lengths, moved by `offset` tokens.
fn grid(limits: &BucketLimits, max_seq_len: usize, offset: usize) -> Vec<(usize, usize)> {
    LENGTHS
        .iter()
        .map(|len| len + offset)
        .filter(|&len| len <= max_seq_len)
        .flat_map(|len| (1..=max_rows(limits, len)).map(move |rows| (rows, len)))
        .collect()
}

fn run_shapes(module: &TextModule, corpus: &Corpus, shapes: &[(usize, usize)]) -> Result<()> {
    for &(rows, len) in shapes {
        let ids = token_rows(corpus, len, rows);
        let batch: Vec<&[i64]> = ids.iter().map(Vec::as_slice).collect();
        module.vectors(&batch)?;
    }
    Ok(())
}

fn in_use() -> Result<u64> {
    heap::in_use_bytes().context("the heap's figures need glibc (Linux)")
}
