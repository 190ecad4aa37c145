//! `loadtest plan`: the replicas a target rate needs, from the capacities
//! a `loadtest capacity` run wrote.

use anyhow::{bail, Context, Result};
use clap::Args;
use loadtest::{capacity, plan};
use std::path::PathBuf;

#[derive(Args)]
pub struct PlanArgs {
    #[arg(long)]
    target_qps: f64,
    /// CSV `label,sustained_rps,p99_ms` (from a capacity run).
    #[arg(long, default_value = "docs/data/capacity.csv")]
    capacity: PathBuf,
    /// Spare share kept for bursts and a lost pod.
    #[arg(long, default_value_t = 0.3)]
    headroom: f64,
    /// The topic's partitions: more replicas than that would idle.
    #[arg(long, default_value_t = 64)]
    max_replicas: u32,
}

pub fn execute(args: PlanArgs) -> Result<()> {
    let text =
        std::fs::read_to_string(&args.capacity).with_context(|| format!("reading {}", args.capacity.display()))?;
    let capacities = capacity::read_capacities(&text)?;
    let best = plan::best(&capacities).context("the capacity file is empty")?;
    match plan::replicas_for(args.target_qps, best.sustained_rps, args.headroom, args.max_replicas) {
        Some(replicas) => println!(
            "{} req/s: {replicas} replicas of the best setting ({}: {:.0} req/s each at p99 {:.0} ms), {:.0} % headroom",
            args.target_qps,
            best.label,
            best.sustained_rps,
            best.p99_ms,
            args.headroom * 100.0
        ),
        None => bail!(
            "{} req/s needs more than {} replicas at {:.0} req/s each: add partitions or faster replicas",
            args.target_qps,
            args.max_replicas,
            best.sustained_rps
        ),
    }
    Ok(())
}
