//! `fleet-bench raw`: the engine alone over a file of texts in the worker's
//! batches: the ceiling the whole Kafka → Redis path is compared against.

use crate::measure::{measure, print_table, warm_up};
use crate::strategy;
use crate::text_engine::{read_lines, TextEngine};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct RawArgs {
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    file: PathBuf,
}

pub fn run(args: &RawArgs, engine: &TextEngine) -> Result<()> {
    let texts = read_lines(&args.file)?;
    let tokens = engine.tokenize_all(&texts)?;
    let lens: Vec<usize> = tokens.iter().map(Vec::len).collect();
    let batches = strategy::bucketed(&lens, &engine.version.config.batching.limits(engine.max_seq_len));
    warm_up(&engine.module, &tokens, &batches)?;
    let m = measure("raw-tch", &engine.module, &tokens, &batches)?;
    print_table(&[&m]);
    println!("RESULT raw throughput={:.1}", m.throughput());
    Ok(())
}
