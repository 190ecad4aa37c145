//! `loadtest`: open-loop load against a running fleet (`run`), fault drills
//! on a fleet it starts itself (`drill`), and replica planning from
//! measured capacity (`plan`). Every run ends with its ledger; a run that
//! lost a request exits with status 1.
//!
//! This file parses the command line and dispatches; each command is a
//! module of [`commands`], with its flags.

mod commands;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(version, about = "Open-loop load tests, fault drills and capacity planning for the fleet")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Open-loop load against a running fleet; writes a report folder.
    Run(Box<commands::run::RunArgs>),
    /// Start a fleet here, load it, inject a fault, and check the ledger.
    Drill(commands::drill::DrillArgs),
    /// One worker's capacity per batching setting: steady load at rising
    /// rates on a fleet started here; writes points, capacities and a plot.
    Capacity(commands::capacity::CapacityArgs),
    /// Replicas needed for a target rate, from a capacity CSV.
    Plan(commands::plan::PlanArgs),
    /// The same burst through fixed and adaptive producer admission, each on
    /// a fleet started here: wasted (expired) and served (ok) answers.
    Admission(commands::admission::AdmissionArgs),
    /// The fleet against a plain Python consumer (the usual design) on the
    /// same texts, broker and Redis, one after the other.
    Peer(commands::peer::PeerArgs),
    /// Interactive latency alone, behind a backfill on the same topic, and
    /// with the backfill on the bulk lane; then the backfill cancelled
    /// mid-run. One worker, each step on a fleet started here.
    Lanes(commands::lanes::LanesArgs),
    /// Hours of steady texts and images on a fleet started here, with
    /// faults on a schedule; a report (memory, latency, ledger per
    /// partition) and a verdict against budgets.
    Soak(Box<commands::soak::SoakArgs>),
    /// A real backfill sent and collected with `fleet-produce bulk --out`
    /// beside interactive load: its answers on Kafka against the same
    /// backfill with its answers in Redis; optionally with kills.
    BulkAnswers(Box<commands::bulk_answers::BulkAnswersArgs>),
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn,loadtest=info".into()),
        )
        .init();
    let command = Cli::parse().command;
    // Interrupted, the command's future is dropped, and with it every
    // broker, Redis and worker it started (their handles kill on drop).
    tokio::select! {
        outcome = execute(command) => outcome,
        signal = interrupted() => bail!("interrupted by {signal}"),
    }
}

async fn interrupted() -> &'static str {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return "Ctrl-C";
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "Ctrl-C",
        _ = term.recv() => "SIGTERM",
    }
}

async fn execute(command: Command) -> Result<()> {
    match command {
        Command::Run(args) => commands::run::execute(*args).await,
        Command::Drill(args) => commands::drill::execute(args).await,
        Command::Capacity(args) => commands::capacity::execute(args).await,
        Command::Plan(args) => commands::plan::execute(args),
        Command::Admission(args) => commands::admission::execute(args).await,
        Command::Peer(args) => commands::peer::execute(args).await,
        Command::Lanes(args) => commands::lanes::execute(args).await,
        Command::Soak(args) => commands::soak::execute(*args).await,
        Command::BulkAnswers(args) => commands::bulk_answers::execute(*args).await,
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
}
