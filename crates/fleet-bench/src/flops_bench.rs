//! `fleet-bench flops`: how far the text model runs from this CPU's
//! practical limit, in the chosen precision and thread count.
//!
//! - The limit: a square matrix product (n = 1024 and 2048, the faster one
//!   counts), the densest work libtorch does on a CPU; a model made of
//!   matrix products cannot beat it, so its share of it is how much room the
//!   model's own calls leave.
//! - The model: one batch per representative padded length, as many rows as
//!   the batching limits allow there, of real token ids, through the
//!   worker's `TextModule` (the same call a batch makes); then half and a
//!   quarter of those rows, because a smaller batch may stay in this CPU's
//!   caches and compute more tokens per second than the full one.
//!
//! FLOPs are counted from the module's parameters ([`ModelShape`]), not
//! hard-coded, so another encoder is counted as it is. Last lines:
//! `RESULT gemm …` and `RESULT flops … smaller_batch_faster=<len:rows,…|none>`.

use crate::common::Common;
use crate::flop_count::{model_flops, ModelShape};
use crate::text_bench::{max_rows, token_rows, TextBench, TextBenchArgs};
use anyhow::Result;
use clap::Args;
use fleet_worker::stages::engine::torch::TextModule;
use std::path::PathBuf;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

#[derive(Args)]
pub struct FlopsCommand {
    /// Real sentences the batches' token ids are cut from.
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
    /// Print the module's parameter names and shapes: what the FLOP count reads.
    #[arg(long)]
    list_parameters: bool,
}

const GEMM_SIZES: [i64; 2] = [1024, 2048];
/// Padded lengths measured, those up to the model's max_seq_len.
const LENGTHS: [usize; 6] = [16, 32, 64, 128, 256, 512];
/// Each timing repeats its call for at least this long (and `MIN_CALLS`).
const MIN_SECONDS: f64 = 1.0;
const MIN_CALLS: usize = 3;
/// Untimed calls per batch shape: libtorch's profiling executor optimises a
/// graph only after its first runs of a shape.
const MODEL_WARM_UP: usize = 3;
/// A smaller batch counts as faster only above this tokens/s ratio, so that
/// timing noise does not call it.
const SMALLER_WINS_BY: f64 = 1.05;

pub fn run(common: &Common, command: &FlopsCommand) -> Result<()> {
    let args = TextBenchArgs::start(common, &command.corpus);
    measure(&args, command.list_parameters)
}

/// The GEMM peak, then the model's batches against it. `list_parameters`:
/// print every parameter's name and shape, to check what the FLOP count
/// reads from them.
fn measure(args: &TextBenchArgs<'_>, list_parameters: bool) -> Result<()> {
    let peak = gemm_peak(args)?;
    let bench = TextBench::load(args)?;
    let shape = model_shape(&bench, list_parameters)?;
    let points = time_buckets(&bench, &shape, peak)?;
    print_table(&points, peak);
    print_results(args, &points, peak);
    Ok(())
}

/// The model's shape, read from its parameters and printed.
fn model_shape(bench: &TextBench, list_parameters: bool) -> Result<ModelShape> {
    let parameters = bench.module.parameter_shapes()?;
    if list_parameters {
        for (name, shape) in &parameters {
            println!("parameter {name} {shape:?}");
        }
    }
    let shape = ModelShape::from_parameters(&parameters)?;
    println!(
        "model: {} version {}, {} parameters: {} linear weights per token, {} attention layers, hidden {}",
        bench.version.name,
        bench.version.version,
        parameters.len(),
        shape.linear_params,
        shape.layers,
        shape.hidden
    );
    // For the whole-path figure (scripts/path_figures.py --shape).
    println!("RESULT shape linear_params={} layers={} hidden={}", shape.linear_params, shape.layers, shape.hidden);
    Ok(shape)
}

/// Each length's full batch, half and quarter, timed and printed as it goes.
fn time_buckets(bench: &TextBench, shape: &ModelShape, peak: f64) -> Result<Vec<Point>> {
    let mut points = Vec::new();
    for len in LENGTHS.into_iter().filter(|&len| len <= bench.max_seq_len) {
        let full_rows = max_rows(&bench.limits, len);
        let rows = token_rows(&bench.corpus, len, full_rows);
        for count in row_counts(full_rows) {
            let point = time_batch(&bench.module, &rows[..count], len, full_rows, shape)?;
            println!(
                "bucket len={} rows={} tokens={}: {:.1} ms, {:.0} tokens/s, {:.1} GFLOP/s = {:.2} of the GEMM peak",
                point.len,
                point.rows,
                point.tokens(),
                point.seconds * 1e3,
                point.tokens_per_s(),
                point.gflops(),
                point.gflops() / peak
            );
            points.push(point);
        }
    }
    Ok(points)
}

/// The `RESULT gemm` and `RESULT flops` lines.
fn print_results(args: &TextBenchArgs<'_>, points: &[Point], peak: f64) {
    let best = points.iter().map(|p| p.gflops() / peak).fold(0.0, f64::max);
    let len64 = points
        .iter()
        .find(|p| p.len == 64 && p.is_full())
        .map_or_else(|| "none".to_owned(), |p| format!("{:.3}", p.gflops() / peak));
    let smaller = faster_smaller_batches(points);
    let smaller = if smaller.is_empty() { "none".to_owned() } else { smaller.join(",") };
    println!("RESULT gemm precision={} threads={} gflops={peak:.1}", args.precision, args.threads);
    println!(
        "RESULT flops precision={} threads={} best_bucket_fraction={best:.3} len64_fraction={len64} \
         smaller_batch_faster={smaller}",
        args.precision, args.threads
    );
}

/// The faster of the GEMM sizes, GFLOP/s: the practical peak the model is
/// compared with.
fn gemm_peak(args: &TextBenchArgs<'_>) -> Result<f64> {
    let mut peak: f64 = 0.0;
    for n in GEMM_SIZES {
        let gflops = gemm_gflops(n, args.kind)?;
        println!("gemm n={n} precision={} threads={}: {gflops:.1} GFLOP/s", args.precision, args.threads);
        peak = peak.max(gflops);
    }
    Ok(peak)
}

/// GFLOP/s of an `n × n` by `n × n` product in `kind` (2·n³ FLOPs), written
/// into one preallocated output so that only the product is timed.
fn gemm_gflops(n: i64, kind: Kind) -> Result<f64> {
    let _no_grad = tch::no_grad_guard();
    // Drawn in fp32 and converted: not every kind has a CPU random kernel.
    let a = Tensor::f_randn([n, n], (Kind::Float, Device::Cpu))?.f_to_kind(kind)?;
    let b = Tensor::f_randn([n, n], (Kind::Float, Device::Cpu))?.f_to_kind(kind)?;
    let out = Tensor::f_zeros([n, n], (kind, Device::Cpu))?;
    let product = || -> Result<()> {
        drop(a.f_mm_out(&out, &b)?);
        Ok(())
    };
    product()?;
    let seconds = median_call_seconds(product)?;
    Ok(2.0 * (n as f64).powi(3) / seconds / 1e9)
}

/// The full batch, half and a quarter of it (at least one row), each once.
fn row_counts(full: usize) -> Vec<usize> {
    let mut counts: Vec<usize> = [full, full / 2, full / 4].into_iter().map(|rows| rows.max(1)).collect();
    counts.dedup();
    counts
}

fn time_batch(
    module: &TextModule,
    rows: &[Vec<i64>],
    len: usize,
    full_rows: usize,
    shape: &ModelShape,
) -> Result<Point> {
    let batch: Vec<&[i64]> = rows.iter().map(Vec::as_slice).collect();
    for _ in 0..MODEL_WARM_UP {
        module.vectors(&batch)?;
    }
    let seconds = median_call_seconds(|| {
        module.vectors(&batch)?;
        Ok(())
    })?;
    Ok(Point { len, rows: batch.len(), full_rows, seconds, flops: model_flops(batch.len(), len, shape) })
}

/// Median seconds of one call. Calls repeat for `MIN_SECONDS` (at least
/// `MIN_CALLS`), so a short call is timed many times and the median leaves
/// out the odd one that the scheduler or a page fault slowed.
fn median_call_seconds(mut call: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut times = Vec::new();
    let started = Instant::now();
    while times.len() < MIN_CALLS || started.elapsed().as_secs_f64() < MIN_SECONDS {
        let t = Instant::now();
        call()?;
        times.push(t.elapsed().as_secs_f64());
    }
    Ok(fleet_ops::stats::median(&times))
}

/// One timed batch: `rows` rows of `len` tokens, where `full_rows` is the
/// most the batching limits allow at that length.
#[derive(Debug, Clone)]
struct Point {
    len: usize,
    rows: usize,
    full_rows: usize,
    /// Median seconds per call.
    seconds: f64,
    flops: f64,
}

impl Point {
    fn tokens(&self) -> usize {
        self.rows * self.len
    }

    fn tokens_per_s(&self) -> f64 {
        self.tokens() as f64 / self.seconds.max(1e-12)
    }

    fn gflops(&self) -> f64 {
        self.flops / self.seconds.max(1e-12) / 1e9
    }

    fn is_full(&self) -> bool {
        self.rows == self.full_rows
    }
}

/// Tokens/s of `point` over that of the full batch at its length.
fn vs_full(point: &Point, points: &[Point]) -> Option<f64> {
    let full = points.iter().find(|p| p.len == point.len && p.is_full())?;
    Some(point.tokens_per_s() / full.tokens_per_s())
}

/// `len:rows` of every smaller batch that computed more tokens per second
/// than the full one at its length, by more than `SMALLER_WINS_BY`.
fn faster_smaller_batches(points: &[Point]) -> Vec<String> {
    points
        .iter()
        .filter(|p| !p.is_full() && vs_full(p, points).is_some_and(|ratio| ratio > SMALLER_WINS_BY))
        .map(|p| format!("{}:{}", p.len, p.rows))
        .collect()
}

fn print_table(points: &[Point], peak: f64) {
    println!(
        "\n{:>5} {:>5} {:>7} {:>10} {:>10} {:>9} {:>8} {:>8}",
        "len", "rows", "tokens", "batch ms", "tokens/s", "GFLOP/s", "of peak", "vs full"
    );
    for p in points {
        println!(
            "{:>5} {:>5} {:>7} {:>10.1} {:>10.0} {:>9.1} {:>8.2} {:>8.2}",
            p.len,
            p.rows,
            p.tokens(),
            p.seconds * 1e3,
            p.tokens_per_s(),
            p.gflops(),
            p.gflops() / peak,
            vs_full(p, points).unwrap_or(1.0)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_counts_halve_and_quarter_without_repeats() {
        assert_eq!(row_counts(32), vec![32, 16, 8]);
        assert_eq!(row_counts(2), vec![2, 1]);
        assert_eq!(row_counts(1), vec![1]);
    }

    #[test]
    fn only_a_clearly_faster_smaller_batch_counts() {
        let point = |len, rows, seconds| Point { len, rows, full_rows: 32, seconds, flops: 0.0 };
        let points = [
            point(64, 32, 1.0),
            point(64, 16, 0.45), // 1.11× the full batch's tokens/s
            point(64, 8, 0.245), // 1.02×: noise
            point(128, 32, 1.0),
            point(128, 16, 0.6),
        ];
        assert_eq!(faster_smaller_batches(&points), vec!["64:16".to_owned()]);
    }
}
