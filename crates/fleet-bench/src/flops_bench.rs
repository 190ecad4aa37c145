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

use anyhow::{Context, Result};
use fleet_worker::config::ModelVersion;
use fleet_worker::stages::admission::tokenize::TextTokenizer;
use fleet_worker::stages::batch::bucket::BucketLimits;
use fleet_worker::stages::engine::torch::TextModule;
use fleet_worker::versions::repository;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Instant;
use tch::{Device, Kind, Tensor};

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
/// BERT's name for a layer's query projection; one per attention layer.
const QUERY_WEIGHT: &str = "attention.self.query.weight";

/// What a benchmark of the text model alone runs on (`flops`, `shapes`).
pub struct TextBenchArgs<'a> {
    pub repo: &'a Path,
    pub model: &'a fleet_proto::ModelName,
    pub corpus: &'a Path,
    pub kind: Kind,
    pub precision: &'a str,
    pub threads: i32,
}

/// The text model in the benchmark's precision, on the CPU, with the
/// corpus its batches are cut from and the version's batching limits.
pub(crate) struct TextBench {
    pub version: ModelVersion,
    pub module: TextModule,
    pub corpus: Corpus,
    pub limits: BucketLimits,
    pub max_seq_len: usize,
}

impl TextBench {
    pub(crate) fn load(args: &TextBenchArgs<'_>) -> Result<Self> {
        let version = repository::resolve(args.repo, args.model)?;
        let max_seq_len = version.config.text().context("a text model is needed")?.max_seq_len;
        let tokenizer = TextTokenizer::load(&version.file("tokenizer.json"), max_seq_len, true)?;
        let mut module = TextModule::for_version(&version, Device::Cpu)?;
        if args.kind != Kind::Float {
            module.convert(args.kind)?;
        }
        let corpus = Corpus::read(&tokenizer, args.corpus)?;
        let limits = version.config.batching.limits(max_seq_len);
        Ok(Self { version, module, corpus, limits, max_seq_len })
    }
}

/// What a text encoder's FLOPs per token follow from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelShape {
    /// Weights of the linear layers every token goes through: every 2-D
    /// parameter but the embedding tables (looked up, not multiplied) and
    /// the pooler (it acts on [CLS] alone, and an embedding model's token
    /// outputs never reach it).
    pub linear_params: u64,
    /// Attention layers.
    pub layers: u64,
    /// Width of the attention's queries, keys and values.
    pub hidden: u64,
}

impl ModelShape {
    /// From the module's parameters (`TextModule::parameter_shapes`). Layers
    /// are the query weights, or where the names are not BERT's, the
    /// distinct numbered `layer.N` / `layers.N` blocks; the width is the
    /// query weight's output size, or else the embedding table's width.
    pub fn from_parameters(parameters: &[(String, Vec<i64>)]) -> Result<Self> {
        let linear_params = parameters
            .iter()
            .filter(|(name, shape)| shape.len() == 2 && is_per_token_linear(name))
            .map(|(_, shape)| shape.iter().product::<i64>().unsigned_abs())
            .sum();
        let queries: Vec<&Vec<i64>> = parameters
            .iter()
            .filter(|(name, shape)| shape.len() == 2 && name.ends_with(QUERY_WEIGHT))
            .map(|(_, shape)| shape)
            .collect();
        let layers = if queries.is_empty() { layer_blocks(parameters) } else { queries.len() };
        let hidden = match queries.first() {
            Some(query) => query[0],
            None => parameters
                .iter()
                .find(|(name, shape)| shape.len() == 2 && name.contains("embed"))
                .map(|(_, shape)| shape[1])
                .context("neither a query weight nor an embedding table: see --list-parameters")?,
        };
        anyhow::ensure!(layers > 0, "no attention layers found in the parameter names: see --list-parameters");
        Ok(Self { linear_params, layers: layers as u64, hidden: hidden.unsigned_abs() })
    }
}

/// A 2-D weight that multiplies every token: not an embedding table
/// (`embeddings`, `embed_tokens`) and not the [CLS]-only pooler.
fn is_per_token_linear(name: &str) -> bool {
    !name.contains("embed") && !name.contains("pooler")
}

/// Distinct `…layer.N` / `…layers.N` prefixes among the parameter names.
fn layer_blocks(parameters: &[(String, Vec<i64>)]) -> usize {
    let mut blocks = BTreeSet::new();
    for (name, _) in parameters {
        let parts: Vec<&str> = name.split('.').collect();
        let numbered = |w: &[&str]| matches!(w[0], "layer" | "layers") && w[1].parse::<u64>().is_ok();
        if let Some(at) = parts.windows(2).position(numbered) {
            blocks.insert(parts[..at + 2].join("."));
        }
    }
    blocks.len()
}

/// FLOPs of one batch of `rows` rows padded to `len` tokens: per token, 2
/// per linear weight (a multiply and an add), and per layer the two
/// attention products QKᵀ and AV, each `len × hidden` multiply-adds.
pub fn model_flops(rows: usize, len: usize, shape: &ModelShape) -> f64 {
    let (rows, len) = (rows as f64, len as f64);
    let per_token = 2.0 * shape.linear_params as f64 + 4.0 * shape.layers as f64 * len * shape.hidden as f64;
    rows * len * per_token
}

/// `list_parameters`: print every parameter's name and shape, to check
/// what the FLOP count reads from them.
pub fn run(args: &TextBenchArgs<'_>, list_parameters: bool) -> Result<()> {
    let peak = gemm_peak(args)?;
    let TextBench { version, module, corpus, limits, max_seq_len } = TextBench::load(args)?;
    let parameters = module.parameter_shapes()?;
    if list_parameters {
        for (name, shape) in &parameters {
            println!("parameter {name} {shape:?}");
        }
    }
    let shape = ModelShape::from_parameters(&parameters)?;
    println!(
        "model: {} version {}, {} parameters: {} linear weights per token, {} attention layers, hidden {}",
        version.name,
        version.version,
        parameters.len(),
        shape.linear_params,
        shape.layers,
        shape.hidden
    );
    // For the whole-path figure (scripts/path_figures.py --shape).
    println!("RESULT shape linear_params={} layers={} hidden={}", shape.linear_params, shape.layers, shape.hidden);
    let mut points = Vec::new();
    for len in LENGTHS.into_iter().filter(|&len| len <= max_seq_len) {
        let full_rows = max_rows(&limits, len);
        let rows = token_rows(&corpus, len, full_rows);
        for count in row_counts(full_rows) {
            let point = time_batch(&module, &rows[..count], len, full_rows, &shape)?;
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
    print_table(&points, peak);
    let best = points.iter().map(|p| p.gflops() / peak).fold(0.0, f64::max);
    let len64 = points
        .iter()
        .find(|p| p.len == 64 && p.is_full())
        .map_or_else(|| "none".to_owned(), |p| format!("{:.3}", p.gflops() / peak));
    let smaller = faster_smaller_batches(&points);
    let smaller = if smaller.is_empty() { "none".to_owned() } else { smaller.join(",") };
    println!("RESULT gemm precision={} threads={} gflops={peak:.1}", args.precision, args.threads);
    println!(
        "RESULT flops precision={} threads={} best_bucket_fraction={best:.3} len64_fraction={len64} \
         smaller_batch_faster={smaller}",
        args.precision, args.threads
    );
    Ok(())
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

/// The corpus' sentences as one stream of token ids without their special
/// tokens, and the [CLS] and [SEP] ids the tokenizer puts around a text
/// (read from its output, not assumed).
pub(crate) struct Corpus {
    stream: Vec<i64>,
    cls: i64,
    sep: i64,
}

impl Corpus {
    pub(crate) fn read(tokenizer: &TextTokenizer, path: &Path) -> Result<Self> {
        let body = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut stream = Vec::new();
        let mut ends = None;
        for line in body.lines().filter(|l| !l.trim().is_empty()) {
            let ids = tokenizer.tokenize(line)?.ids;
            if ids.len() < 3 {
                continue;
            }
            ends = ends.or(Some((ids[0], ids[ids.len() - 1])));
            stream.extend_from_slice(&ids[1..ids.len() - 1]);
        }
        let (cls, sep) = ends.with_context(|| format!("{} has no sentences", path.display()))?;
        Ok(Self { stream, cls, sep })
    }
}

/// `count` rows of exactly `len` ids: [CLS], the next window of the
/// corpus' stream (from the start again when it runs out), [SEP]. Real
/// text in every row, none padded.
pub(crate) fn token_rows(corpus: &Corpus, len: usize, count: usize) -> Vec<Vec<i64>> {
    let body = len.saturating_sub(2);
    (0..count)
        .map(|row| {
            let mut ids = Vec::with_capacity(len);
            ids.push(corpus.cls);
            ids.extend(corpus.stream.iter().cycle().skip(row * body).take(body));
            ids.push(corpus.sep);
            ids
        })
        .collect()
}

/// The most rows of `len` tokens one batch may hold under the batching
/// limits; 1 where even one row is over them (the worker lets a single
/// request through alone).
pub(crate) fn max_rows(limits: &BucketLimits, len: usize) -> usize {
    let len = len.max(1);
    let bound = limits
        .max_batch_size
        .min(limits.max_batch_tokens / len)
        .min(limits.max_attention_cells / len.saturating_mul(len));
    (1..=bound).rev().find(|&rows| limits.fits(rows, len)).unwrap_or(1)
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
    Ok(median(&mut times))
}

/// The middle value (the upper middle of an even count); 0 for none.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(0.0)
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

    fn named(list: &[(&str, &[i64])]) -> Vec<(String, Vec<i64>)> {
        list.iter().map(|(name, shape)| (name.to_string(), shape.to_vec())).collect()
    }

    /// BERT's parameters as the export names them (the module wraps the
    /// Hugging Face model as `model`), two layers of MiniLM's width.
    fn bert_like(layers: usize) -> Vec<(String, Vec<i64>)> {
        let mut list = named(&[
            ("model.embeddings.word_embeddings.weight", &[30522, 384]),
            ("model.embeddings.position_embeddings.weight", &[512, 384]),
            ("model.embeddings.token_type_embeddings.weight", &[2, 384]),
            ("model.embeddings.LayerNorm.weight", &[384]),
            ("model.embeddings.LayerNorm.bias", &[384]),
        ]);
        for layer in 0..layers {
            let p = format!("model.encoder.layer.{layer}.");
            for (suffix, shape) in [
                ("attention.self.query.weight", vec![384, 384]),
                ("attention.self.query.bias", vec![384]),
                ("attention.self.key.weight", vec![384, 384]),
                ("attention.self.key.bias", vec![384]),
                ("attention.self.value.weight", vec![384, 384]),
                ("attention.self.value.bias", vec![384]),
                ("attention.output.dense.weight", vec![384, 384]),
                ("attention.output.dense.bias", vec![384]),
                ("attention.output.LayerNorm.weight", vec![384]),
                ("intermediate.dense.weight", vec![1536, 384]),
                ("intermediate.dense.bias", vec![1536]),
                ("output.dense.weight", vec![384, 1536]),
                ("output.dense.bias", vec![384]),
                ("output.LayerNorm.weight", vec![384]),
            ] {
                list.push((format!("{p}{suffix}"), shape));
            }
        }
        list.extend(named(&[("model.pooler.dense.weight", &[384, 384]), ("model.pooler.dense.bias", &[384])]));
        list
    }

    #[test]
    fn reads_a_bert_encoder_from_its_parameters() {
        let shape = ModelShape::from_parameters(&bert_like(2)).unwrap();
        let per_layer = 4 * 384 * 384 + 2 * 384 * 1536;
        assert_eq!(shape, ModelShape { linear_params: 2 * per_layer, layers: 2, hidden: 384 });
    }

    #[test]
    fn counts_numbered_layer_blocks_where_the_names_are_not_berts() {
        let parameters = named(&[
            ("embed_tokens.weight", &[100, 8]),
            ("layers.0.self_attn.q_proj.weight", &[8, 8]),
            ("layers.0.norm.weight", &[8]),
            ("layers.1.self_attn.q_proj.weight", &[8, 8]),
        ]);
        let shape = ModelShape::from_parameters(&parameters).unwrap();
        assert_eq!(shape, ModelShape { linear_params: 128, layers: 2, hidden: 8 });
    }

    #[test]
    fn a_module_without_layers_is_refused() {
        assert!(ModelShape::from_parameters(&named(&[("embeddings.weight", &[10, 4])])).is_err());
    }

    #[test]
    fn batch_flops_are_linear_weights_plus_attention_per_token() {
        let shape = ModelShape { linear_params: 100, layers: 1, hidden: 4 };
        // 2 rows × 8 tokens × (2·100 + 4·1·8·4).
        assert_eq!(model_flops(2, 8, &shape), 16.0 * 328.0);
        // Attention grows with the length: twice the length, more than twice the FLOPs.
        assert!(model_flops(1, 16, &shape) > 2.0 * model_flops(1, 8, &shape));
    }

    #[test]
    fn rows_are_real_ids_between_cls_and_sep() {
        let corpus = Corpus { stream: vec![5, 6, 7], cls: 101, sep: 102 };
        let rows = token_rows(&corpus, 5, 2);
        assert_eq!(rows, vec![vec![101, 5, 6, 7, 102], vec![101, 5, 6, 7, 102]]);
        let rows = token_rows(&corpus, 4, 2);
        assert_eq!(rows, vec![vec![101, 5, 6, 102], vec![101, 7, 5, 102]]);
    }

    #[test]
    fn the_most_rows_follow_every_batching_budget() {
        let limits = BucketLimits {
            boundaries: vec![512],
            max_batch_size: 32,
            max_batch_tokens: 2048,
            max_attention_cells: 262_144,
            max_wait_ms: vec![5],
        };
        assert_eq!(max_rows(&limits, 16), 32);
        assert_eq!(max_rows(&limits, 128), 16);
        assert_eq!(max_rows(&limits, 256), 4);
        assert_eq!(max_rows(&limits, 512), 1);
        assert_eq!(max_rows(&limits, 1024), 1);
    }

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

    #[test]
    fn median_takes_the_middle() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut []), 0.0);
    }
}
