//! `loadtest admission`: the same burst through fixed and adaptive
//! producer admission, each on a fleet started here: wasted (expired) and
//! served (ok) answers, round by round and summed.

use super::read_corpus;
use anyhow::Result;
use clap::Args;
use loadtest::admission_bench::{self, AdmissionBench};
use loadtest::fleet::Binaries;
use loadtest::profile::Profile;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Args)]
pub struct AdmissionArgs {
    /// Base rate, requests per second; the burst is --burst-factor times it.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    #[arg(long, default_value_t = 10.0)]
    burst_factor: f64,
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    burst_at: Duration,
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    burst_for: Duration,
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Every request's deadline after its send.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    deadline: Duration,
    /// The fixed rule's backlog limit (a guessed constant).
    #[arg(long, default_value_t = 1000)]
    fixed_backlog: u64,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    #[arg(long, default_value_t = 3)]
    seed: u64,
    /// How many times the pair of runs is repeated (books summed): one
    /// run's noise is larger than the difference measured.
    #[arg(long, default_value_t = 3)]
    rounds: u64,
    /// Write each run's report folder (records, seconds, plots) under this.
    #[arg(long)]
    out: Option<PathBuf>,
    /// An extra fleet-worker argument (repeatable).
    #[arg(long = "worker-arg", allow_hyphen_values = true)]
    worker_args: Vec<String>,
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
}

pub async fn execute(args: AdmissionArgs) -> Result<()> {
    let bench = AdmissionBench {
        binaries: Binaries::from_env()?,
        profile: Profile::Burst {
            rate: args.rate,
            factor: args.burst_factor,
            start_s: args.burst_at.as_secs_f64(),
            burst_s: args.burst_for.as_secs_f64(),
        },
        duration: args.duration,
        deadline: args.deadline,
        fixed_backlog: args.fixed_backlog,
        seed: args.seed,
        rounds: args.rounds,
        corpus: read_corpus(&args.corpus)?,
        partitions: args.partitions,
        worker_args: args.worker_args,
        out: args.out,
    };
    let rounds = admission_bench::run(&bench, |round, compared| {
        println!("round {round}:");
        print_admission_books(compared);
    })
    .await?;
    let total = admission_bench::Compared::total(&rounds);
    println!("all {} rounds:", rounds.len());
    print_admission_books(&total);
    println!("{}", admission_bench::result_line(&total));
    Ok(())
}

fn print_admission_books(compared: &admission_bench::Compared) {
    for (name, ledger) in [("fixed backlog limit", &compared.fixed), ("predicted wait", &compared.adaptive)] {
        println!(
            "  {name}: offered {}, refused by the producer {}, ok {}, expired {}, error {}, dlq {}, missing {}",
            ledger.sent + ledger.send_failed,
            ledger.send_failed,
            ledger.ok,
            ledger.expired,
            ledger.error,
            ledger.dlq,
            ledger.missing
        );
        println!("    {}", ledger.result_line());
    }
}
