//! `loadtest drill`: a fleet started here, loaded, one fault injected and
//! undone; the ledger must show nothing lost.

use super::{finish, read_corpus, unix_s};
use anyhow::Result;
use clap::Args;
use loadtest::drill::{self, Drill, DrillConfig};
use loadtest::fleet::Binaries;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct DrillArgs {
    #[arg(value_enum)]
    drill: Drill,
    /// Offered load, requests per second.
    #[arg(long, default_value_t = 40.0)]
    rate: f64,
    #[arg(long, default_value = "40s", value_parser = humantime::parse_duration)]
    duration: Duration,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    fault_at: Duration,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    fault_for: Duration,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
    /// The report folder; default loadtest-report/drill-<name>-<unix time>.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub async fn execute(args: DrillArgs) -> Result<()> {
    let config = DrillConfig {
        binaries: Binaries::from_env()?,
        corpus: read_corpus(&args.corpus)?,
        rate: args.rate,
        duration: args.duration,
        fault_at: args.fault_at,
        fault_for: args.fault_for,
        partitions: args.partitions,
        seed: args.seed,
    };
    let outcome = drill::run(args.drill, config).await?.run;
    let dir =
        args.out.unwrap_or_else(|| PathBuf::from(format!("loadtest-report/drill-{}-{}", args.drill.name(), unix_s())));
    let title = format!("drill {} at {} req/s", args.drill.name(), args.rate);
    finish(&dir, &title, &outcome)
}
