//! `loadtest lanes`: interactive latency alone, behind a backfill on the
//! same topic, and with the backfill on the bulk lane; then the backfill
//! cancelled mid-run (issue 32's benchmark, [`loadtest::lanes_bench`]).

use super::{print_machine_and_command, read_corpus};
use anyhow::{bail, Result};
use clap::Args;
use loadtest::fleet::Binaries;
use loadtest::lanes_bench;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct LanesArgs {
    /// Each step's interactive window.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Texts of the backfill, sent at once just before the window.
    #[arg(long, default_value_t = 50_000)]
    backfill: usize,
    /// The interactive rate as a share of the worker's measured capacity.
    #[arg(long, default_value_t = 0.3)]
    interactive_fraction: f64,
    /// When, into the last step's window, the backfill's job is cancelled.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    cancel_at: Duration,
    /// Texts sent at once to measure the worker's capacity.
    #[arg(long, default_value_t = 2000)]
    capacity_texts: usize,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    #[arg(long, default_value_t = 32)]
    seed: u64,
    /// An extra fleet-worker argument (repeatable), e.g. --worker-arg=--bulk-share=0.2.
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
}

pub async fn execute(args: LanesArgs) -> Result<()> {
    if args.interactive_fraction <= 0.0 || args.interactive_fraction >= 1.0 {
        bail!("--interactive-fraction must be in (0, 1)");
    }
    if args.cancel_at >= args.duration {
        bail!("--cancel-at must fall inside --duration");
    }
    if args.backfill == 0 || args.capacity_texts == 0 {
        bail!("--backfill and --capacity-texts must be at least 1");
    }
    print_machine_and_command();
    let bench = lanes_bench::LanesBench {
        binaries: Binaries::from_env()?,
        corpus: read_corpus(&args.corpus)?,
        duration: args.duration,
        backfill: args.backfill,
        interactive_fraction: args.interactive_fraction,
        cancel_at: args.cancel_at,
        capacity_texts: args.capacity_texts,
        partitions: args.partitions,
        seed: args.seed,
        worker_args: args.worker_args,
    };
    let report = lanes_bench::run(&bench).await?;
    println!("{}", lanes_bench::lanes_line(&report));
    println!("{}", lanes_bench::cancel_line(&report.cancel));
    if !report.problems.is_empty() {
        bail!("{}", report.problems.join("; "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cli, Command};
    use clap::Parser;

    #[test]
    fn the_lanes_bench_defaults_to_the_issue_s_benchmark() {
        let Command::Lanes(args) = Cli::try_parse_from(["loadtest", "lanes", "--worker-arg=--bulk-share=0.2"])
            .unwrap_or_else(|e| panic!("{e}"))
            .command
        else {
            panic!("not lanes");
        };
        assert_eq!((args.duration, args.cancel_at), (Duration::from_secs(60), Duration::from_secs(30)));
        assert_eq!((args.backfill, args.interactive_fraction), (50_000, 0.3));
        assert_eq!(args.worker_args, ["--bulk-share=0.2"]);
    }
}
