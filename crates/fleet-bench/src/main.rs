//! `fleet-bench`: measurements of the worker's batching on the real model.
//!
//! - `batching`: FIFO batches of 32 (the seed service) against the bucket
//!   batcher with its default limits, on one seeded workload in one run,
//!   plus a sweep of `max_batch_tokens`, see [`batching`].
//! - `raw`: the engine alone over a file of texts with the worker's batcher:
//!   the ceiling the full Kafka → Redis path is compared against.
//! - `image-decode`, `image-burst`: see [`image_bench`].
//! - `precision`: a lower precision against fp32, see [`precision_bench`].
//! - `flops`: this CPU's GEMM peak and the text model's share of it per
//!   length bucket and batch size, see [`flops_bench`].
//! - `shapes`: what the C heap keeps per batch shape, see [`shapes_bench`].
//! - `redis`: answers written one round trip each vs pipelined per batch,
//!   and a feature-cache hit vs computing the batch. Uses (and flushes!) the
//!   Redis database it is given: point it at a scratch database.
//!
//! This file parses and dispatches: one module a command; `common` holds
//! the flags they share, `text_engine` and `text_bench` the model they run.

mod batching;
mod common;
mod flop_count;
mod flops_bench;
mod image_bench;
mod measure;
mod plot;
mod precision_bench;
mod raw;
mod redis_bench;
mod shapes_bench;
mod strategy;
mod text_bench;
mod text_engine;

use anyhow::Result;
use clap::{Parser, Subcommand};
use common::Common;

#[derive(Parser)]
#[command(about = "Benchmarks of the fleet on the real models (CPU)")]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Batching(batching::BatchingArgs),
    Raw(raw::RawArgs),
    Redis(redis_bench::RedisArgs),
    /// Shrink-on-load JPEG decode vs full decode + resize, 8K and 5K photos.
    ImageDecode(image_bench::ImageDecodeArgs),
    /// Many 8K JPEGs at once into a running image worker: its peak RSS.
    ImageBurst(image_bench::ImageBurstArgs),
    /// bf16 (--precision, default bf16) against fp32, both models, same process.
    Precision(precision_bench::PrecisionCommand),
    /// GEMM peak (--precision fp32|bf16, --threads) against the text model's FLOP/s per bucket.
    Flops(flops_bench::FlopsCommand),
    /// The C heap bytes the text model keeps per new batch shape (--precision, --threads).
    Shapes(shapes_bench::ShapesCommand),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let common = &cli.common;
    match &cli.command {
        Command::Batching(args) => text_engine::run_with(common, |engine| batching::run(args, engine)),
        Command::Raw(args) => text_engine::run_with(common, |engine| raw::run(args, engine)),
        Command::Redis(args) => text_engine::run_with(common, |engine| redis_bench::run(args, engine)),
        Command::ImageDecode(args) => image_bench::run_decode(args),
        Command::ImageBurst(args) => image_bench::run_burst(args),
        Command::Precision(args) => precision_bench::run(common, args),
        Command::Flops(args) => flops_bench::run(common, args),
        Command::Shapes(args) => shapes_bench::run(common, args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn the_shared_flags_go_before_or_after_the_command() {
        let before = Cli::try_parse_from(["fleet-bench", "--threads", "4", "--precision", "bf16", "flops"]).unwrap();
        let after = Cli::try_parse_from(["fleet-bench", "shapes", "--precision", "bf16", "--threads", "4"]).unwrap();
        for cli in [before, after] {
            assert_eq!((cli.common.threads, cli.common.precision.name()), (4, "bf16".to_owned()));
        }
        assert!(matches!(
            Cli::try_parse_from(["fleet-bench", "image-burst", "--worker-pid", "7"]).map(|c| c.command),
            Ok(Command::ImageBurst(_))
        ));
    }
}
