//! `fleet-bench`: measurements of the worker's batching on the real model.
//!
//! - `batching`: FIFO batches of 32 (the seed service) against the bucket
//!   batcher with its default limits, on one seeded workload in one run,
//!   plus a sweep of `max_batch_tokens`. Last line:
//!   `RESULT batching throughput_ratio=<bucket/fifo> padding_efficiency=<bucket>`.
//! - `raw`: the engine alone over a file of texts with the worker's batcher:
//!   the ceiling the full Kafka → Redis path is compared against.
//! - `image-decode`, `image-burst`: see [`image_bench`].
//! - `flops`: this CPU's GEMM peak and the text model's share of it per
//!   length bucket and batch size, see [`flops_bench`].
//! - `redis`: answers written one round trip each vs pipelined per batch,
//!   and a feature-cache hit vs computing the batch. Uses (and flushes!) the
//!   Redis database it is given: point it at a scratch database.

mod flops_bench;
mod image_bench;
mod measure;
mod plot;
mod precision_bench;
mod redis_bench;
mod shapes_bench;
mod strategy;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use fleet_worker::config::ModelVersion;
use fleet_worker::stages::admission::tokenize::TextTokenizer;
use fleet_worker::stages::engine::torch::TextModule;
use fleet_worker::versions::repository;
use measure::{measure, warm_up, Measured};
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(about = "Benchmarks of the fleet on the real models (CPU)")]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct Common {
    #[arg(long, default_value = "models", global = true)]
    model_repo: PathBuf,
    #[arg(long, default_value = "minilm", global = true)]
    model: fleet_proto::ModelName,
    /// libtorch intra-op threads (the worker's --intra-op-threads).
    #[arg(long, default_value_t = 2, global = true)]
    threads: i32,
    /// cpu, cuda or auto, as the worker's --device (scripts/gpu-check.sh).
    #[arg(long, default_value = "cpu", global = true)]
    device: fleet_worker::config::DeviceChoice,
    /// The number format the text model runs in (fp32, bf16, fp16).
    #[arg(long, default_value = "fp32", global = true)]
    precision: BenchPrecision,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BenchPrecision {
    Fp32,
    Bf16,
    Fp16,
}

impl BenchPrecision {
    fn kind(self) -> tch::Kind {
        match self {
            Self::Fp32 => tch::Kind::Float,
            Self::Bf16 => tch::Kind::BFloat16,
            Self::Fp16 => tch::Kind::Half,
        }
    }
}

#[derive(Subcommand)]
enum Command {
    Batching(BatchingArgs),
    Raw(RawArgs),
    Redis(RedisArgs),
    /// Shrink-on-load JPEG decode vs full decode + resize, 8K and 5K photos.
    ImageDecode(ImageDecodeArgs),
    /// Many 8K JPEGs at once into a running image worker: its peak RSS.
    ImageBurst(ImageBurstArgs),
    /// bf16 (--precision, default bf16) against fp32, both models, same process.
    Precision(PrecisionCommand),
    /// GEMM peak (--precision fp32|bf16, --threads) against the text model's FLOP/s per bucket.
    Flops(FlopsCommand),
    /// The C heap bytes the text model keeps per new batch shape (--precision, --threads).
    Shapes(ShapesCommand),
}

#[derive(Args)]
struct ShapesCommand {
    /// Real sentences the batches' token ids are cut from.
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
    /// The kernel caches' capacity, set in this process the way the worker
    /// sets it (its --kernel-cache-capacity; `auto` is the worker's
    /// default). `libtorch`: as the environment says.
    #[arg(long, default_value = "libtorch")]
    kernel_cache_capacity: fleet_worker::kernel_caches::KernelCacheCapacity,
}

#[derive(Args)]
struct FlopsCommand {
    /// Real sentences the batches' token ids are cut from.
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
    /// Print the module's parameter names and shapes: what the FLOP count reads.
    #[arg(long)]
    list_parameters: bool,
}

#[derive(Args)]
struct PrecisionCommand {
    /// Timed rounds of each precision, interleaved.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
}

#[derive(Args)]
struct ImageDecodeArgs {
    /// Distinct photos per size.
    #[arg(long, default_value_t = 3)]
    photos: usize,
    /// Passes over the photos per path.
    #[arg(long, default_value_t = 2)]
    repeats: usize,
}

#[derive(Args)]
struct ImageBurstArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    brokers: String,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// The image model's worker process, whose memory is measured.
    #[arg(long)]
    worker_pid: u32,
    #[arg(long, default_value_t = 300)]
    count: usize,
    /// Distinct photos cycled through the burst.
    #[arg(long, default_value_t = 6)]
    distinct: usize,
}

#[derive(Args)]
struct RedisArgs {
    /// A scratch database: the benchmark FLUSHes it.
    #[arg(long, default_value = "redis://127.0.0.1:6379/15")]
    redis: String,
    #[arg(long, default_value_t = 20_000)]
    answers: usize,
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    file: PathBuf,
}

#[derive(Args)]
struct BatchingArgs {
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

#[derive(Args)]
struct RawArgs {
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    file: PathBuf,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::ImageDecode(args) => {
            println!("machine: {}", machine());
            return image_bench::run_decode(args.photos, args.repeats);
        }
        Command::ImageBurst(args) => {
            println!("machine: {}", machine());
            let burst = image_bench::BurstArgs {
                brokers: args.brokers,
                redis: args.redis,
                model: fleet_proto::ModelName::parse("efficientnet_lite0")?,
                worker_pid: args.worker_pid,
                count: args.count,
                distinct: args.distinct,
            };
            return tokio::runtime::Runtime::new()?.block_on(image_bench::run_burst(burst));
        }
        Command::Precision(args) => {
            tch::set_num_threads(cli.common.threads);
            tch::set_num_interop_threads(1);
            // The flag's fp32 default means "compare bf16" here.
            let lower = match cli.common.precision {
                BenchPrecision::Fp32 | BenchPrecision::Bf16 => BenchPrecision::Bf16,
                BenchPrecision::Fp16 => BenchPrecision::Fp16,
            };
            println!("machine: {}", machine());
            println!("intra-op threads {}", cli.common.threads);
            let name = format!("{lower:?}").to_lowercase();
            return precision_bench::run(&precision_bench::PrecisionArgs {
                repo: &cli.common.model_repo,
                corpus: &args.corpus,
                lower: lower.kind(),
                lower_name: &name,
                rounds: args.rounds,
            });
        }
        Command::Flops(args) => {
            let precision = start_text_bench(&cli.common);
            return flops_bench::run(&text_bench_args(&cli.common, &args.corpus, &precision), args.list_parameters);
        }
        Command::Shapes(args) => {
            fleet_worker::kernel_caches::apply_before_libtorch(
                args.kernel_cache_capacity,
                &cli.common.model_repo,
                cli.common.model.as_str(),
            );
            let precision = start_text_bench(&cli.common);
            return shapes_bench::run(&text_bench_args(&cli.common, &args.corpus, &precision));
        }
        _ => {}
    }
    tch::set_num_threads(cli.common.threads);
    tch::set_num_interop_threads(1);
    let version = repository::resolve(&cli.common.model_repo, &cli.common.model)?;
    let text = version.config.text().cloned().context("a text model is needed")?;
    let tokenizer = TextTokenizer::load(&version.file("tokenizer.json"), text.max_seq_len, true)?;
    let device = fleet_worker::stages::engine::torch::choose_device(cli.common.device)?;
    let mut engine = TextModule::for_version(&version, device)?;
    if cli.common.precision != BenchPrecision::Fp32 {
        engine.convert(cli.common.precision.kind())?;
    }
    println!("machine: {}", machine());
    println!(
        "model: {} version {}, device {device:?}{}, intra-op threads {}",
        version.name,
        version.version,
        format!(" {:?}", cli.common.precision).to_lowercase(),
        cli.common.threads
    );
    let outcome = match cli.command {
        Command::Batching(args) => batching(&args, &version, &tokenizer, &engine, text.max_seq_len),
        Command::Raw(args) => raw(&args, &version, &tokenizer, &engine, text.max_seq_len),
        Command::Redis(args) => redis(&args, &tokenizer, &engine),
        Command::ImageDecode(_)
        | Command::ImageBurst(_)
        | Command::Precision(_)
        | Command::Flops(_)
        | Command::Shapes(_) => {
            unreachable!("handled above")
        }
    };
    if let tch::Device::Cuda(index) = device {
        match fleet_worker::status::gpu::device_memory(index as u32) {
            Ok((total, used)) => println!("device memory: {} of {} MiB in use", used >> 20, total >> 20),
            Err(e) => println!("device memory: unknown ({e})"),
        }
    }
    outcome
}

/// Sets the threads of a benchmark of the text model alone and names the
/// machine; the precision's name.
fn start_text_bench(common: &Common) -> String {
    tch::set_num_threads(common.threads);
    tch::set_num_interop_threads(1);
    println!("machine: {}", machine());
    format!("{:?}", common.precision).to_lowercase()
}

fn text_bench_args<'a>(common: &'a Common, corpus: &'a Path, precision: &'a str) -> flops_bench::TextBenchArgs<'a> {
    flops_bench::TextBenchArgs {
        repo: &common.model_repo,
        model: &common.model,
        corpus,
        kind: common.precision.kind(),
        precision,
        threads: common.threads,
    }
}

fn tokenize_all(tokenizer: &TextTokenizer, texts: &[String]) -> Result<Vec<Vec<i64>>> {
    texts.iter().map(|t| Ok(tokenizer.tokenize(t)?.ids)).collect()
}

fn read_lines(path: &PathBuf) -> Result<Vec<String>> {
    let body = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(body.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect())
}

fn batching(
    args: &BatchingArgs,
    version: &ModelVersion,
    tokenizer: &TextTokenizer,
    engine: &TextModule,
    max_seq_len: usize,
) -> Result<()> {
    let corpus = read_lines(&args.corpus)?;
    let texts = loadtest::workload::generate(&corpus, args.count, args.seed);
    let tokens = tokenize_all(tokenizer, &texts)?;
    let lens: Vec<usize> = tokens.iter().map(Vec::len).collect();
    let mut sorted = lens.clone();
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

    let limits = version.config.batching.limits(max_seq_len);
    println!(
        "bucket limits (config.toml): {} buckets, max_batch_size {}, max_batch_tokens {}, max_attention_cells {}",
        limits.boundaries.len(),
        limits.max_batch_size,
        limits.max_batch_tokens,
        limits.max_attention_cells
    );
    let fifo_batches = strategy::fifo(&lens, args.fifo_batch);
    let bucket_batches = strategy::bucketed(&lens, &limits);
    warm_up(engine, &tokens, &fifo_batches)?;
    let fifo = measure(&format!("fifo-{}", args.fifo_batch), engine, &tokens, &fifo_batches)?;
    warm_up(engine, &tokens, &bucket_batches)?;
    let bucket = measure("bucket", engine, &tokens, &bucket_batches)?;
    print_table(&[&fifo, &bucket]);

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
        warm_up(engine, sweep_tokens, &batches)?;
        let m = measure(&format!("tokens={budget}"), engine, sweep_tokens, &batches)?;
        sweep.push((budget, m));
    }
    print_table(&sweep.iter().map(|(_, m)| m).collect::<Vec<_>>());

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

fn raw(
    args: &RawArgs,
    version: &ModelVersion,
    tokenizer: &TextTokenizer,
    engine: &TextModule,
    max_seq_len: usize,
) -> Result<()> {
    let texts = read_lines(&args.file)?;
    let tokens = tokenize_all(tokenizer, &texts)?;
    let lens: Vec<usize> = tokens.iter().map(Vec::len).collect();
    let batches = strategy::bucketed(&lens, &version.config.batching.limits(max_seq_len));
    warm_up(engine, &tokens, &batches)?;
    let m = measure("raw-tch", engine, &tokens, &batches)?;
    print_table(&[&m]);
    println!("RESULT raw throughput={:.1}", m.throughput());
    Ok(())
}

fn redis(args: &RedisArgs, tokenizer: &TextTokenizer, engine: &TextModule) -> Result<()> {
    // One batch of 32 short sentences: the bucket a typical batch comes from.
    let texts: Vec<String> = read_lines(&args.file)?.into_iter().filter(|t| t.len() < 80).take(32).collect();
    let rows = tokenize_all(tokenizer, &texts)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let f = runtime.block_on(redis_bench::run(&args.redis, engine, &rows, args.answers))?;
    println!("answers of a 384-dim embedding each, {} of them, batches of {}:", args.answers, rows.len());
    println!("  one round trip per answer:  {:>8.0} answers/s", f.one_by_one_per_s);
    println!("  a batch at once (the sink): {:>8.0} answers/s", f.batched_per_s);
    println!("batch of {} short sentences:", rows.len());
    println!("  feature-cache hit (MGET):  {:>9.2} ms", f.hit_ms);
    println!("  computing it (libtorch):   {:>9.2} ms", f.compute_ms);
    println!(
        "RESULT redis batch_ratio={:.2} cache_speedup={:.1}",
        f.batched_per_s / f.one_by_one_per_s,
        f.compute_ms / f.hit_ms
    );
    Ok(())
}

fn print_table(rows: &[&Measured]) {
    println!(
        "{:<14} {:>12} {:>8} {:>13} {:>13} {:>11} {:>14} {:>14}",
        "strategy",
        "sentences/s",
        "batches",
        "p50 batch ms",
        "p99 batch ms",
        "padding eff",
        "max attn cells",
        "peak RSS MiB"
    );
    for m in rows {
        println!(
            "{:<14} {:>12.1} {:>8} {:>13.1} {:>13.1} {:>11.3} {:>14} {:>14}",
            m.name,
            m.throughput(),
            m.batches,
            m.p50_batch_ms,
            m.p99_batch_ms,
            m.padding_efficiency,
            m.max_attention_cells,
            m.peak_rss_mib.map_or("-".into(), |v| format!("{v:.0}"))
        );
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores, {cpu}")
}
