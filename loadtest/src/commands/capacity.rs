//! `loadtest capacity`: one worker's capacity per batching setting (steady
//! load at rising rates on a fleet started here), or an earlier sweep's
//! points judged again; writes points, capacities and a plot.

use super::read_corpus;
use anyhow::{Context, Result};
use clap::Args;
use loadtest::capacity;
use loadtest::fleet::Binaries;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct CapacityArgs {
    /// max_batch_size:max_batch_tokens (repeatable).
    #[arg(long = "setting", value_parser = capacity::Setting::parse, required_unless_present = "from_points")]
    settings: Vec<capacity::Setting>,
    /// Judge an earlier sweep's points.csv against --slo-p99 instead of measuring.
    #[arg(long)]
    from_points: Option<PathBuf>,
    /// Offered rates to step through, req/s (a setting stops at its first overload).
    #[arg(long, value_delimiter = ',', default_value = "25,50,75,100,125,150,175,200")]
    rates: Vec<f64>,
    /// How long each rate is offered.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    step: Duration,
    /// The p99 end-to-end latency a sustained rate must stay within.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    slo_p99: Duration,
    #[arg(long, default_value_t = 2)]
    intra_op_threads: usize,
    /// An extra fleet-worker argument (repeatable), e.g. --worker-arg=--kafka-property=fetch.wait.max.ms=50.
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
    /// Where points.csv, capacity.csv and capacity.png go.
    #[arg(long, default_value = "docs/data")]
    out: PathBuf,
}

pub async fn execute(args: CapacityArgs) -> Result<()> {
    let points = match &args.from_points {
        Some(path) => capacity::read_points(
            &std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?,
        )?,
        None => {
            capacity::sweep(capacity::SweepConfig {
                binaries: Binaries::from_env()?,
                corpus: read_corpus(&args.corpus)?,
                settings: args.settings,
                rates: args.rates,
                step: args.step,
                slo_p99_ms: args.slo_p99.as_secs_f64() * 1000.0,
                intra_op_threads: args.intra_op_threads,
                worker_args: args.worker_args.clone(),
            })
            .await?
        }
    };
    let slo_ms = args.slo_p99.as_secs_f64() * 1000.0;
    capacity::write(&args.out, &points, slo_ms)?;
    loadtest::plot::capacity(&args.out.join("capacity.png"), &points, slo_ms)
        .map_err(|e| anyhow::anyhow!("plotting capacity: {e}"))?;
    print_points(&points, slo_ms);
    println!("wrote {}/points.csv, capacity.csv, capacity.png", args.out.display());
    Ok(())
}

/// Each point measured, then each setting's capacity within the SLO.
fn print_points(points: &[capacity::Point], slo_ms: f64) {
    println!("setting                       offered   ok/s    p50 ms   p99 ms  expired");
    for p in points {
        println!(
            "{:<28} {:>8.0} {:>7.1} {:>9.0} {:>8.0} {:>8}",
            p.setting.label(),
            p.offered_rps,
            p.ok_rps,
            p.p50_ms,
            p.p99_ms,
            p.expired
        );
    }
    for c in capacity::capacities(points, slo_ms) {
        println!("capacity {}: {:.1} req/s at p99 {:.0} ms (SLO {slo_ms:.0} ms)", c.label, c.sustained_rps, c.p99_ms);
    }
}
