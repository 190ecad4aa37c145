//! One module per `loadtest` command: its flags (a clap `Args`) and what it
//! does with them, so that main.rs only parses and dispatches. Here what
//! several commands share: the corpus they read, a report folder's time
//! stamp, the machine and command line a benchmark prints, and how a run
//! ends.

pub mod admission;
pub mod bulk_answers;
pub mod capacity;
pub mod drill;
pub mod lanes;
pub mod peer;
pub mod plan;
pub mod run;
pub mod soak;

use anyhow::{bail, Context, Result};
use loadtest::machine;
use loadtest::report;
use loadtest::runner::RunOutcome;
use std::path::Path;

/// Seconds since the Unix epoch: a default report folder's suffix.
fn unix_s() -> u64 {
    fleet_proto::clock::now_ms() / 1000
}

/// The corpus's sentences, one a line (blank lines left out).
fn read_corpus(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let corpus: Vec<String> = text.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect();
    if corpus.is_empty() {
        bail!("{} holds no sentences", path.display());
    }
    Ok(corpus)
}

/// Writes the report, prints the summary; fails when anything was lost.
fn finish(dir: &Path, title: &str, outcome: &RunOutcome) -> Result<()> {
    let summary = report::write(dir, title, outcome)?;
    println!("report: {}", dir.display());
    print!("{summary}");
    if outcome.ledger.lost() > 0 {
        bail!("{} requests lost", outcome.ledger.lost());
    }
    Ok(())
}

/// This process's command line, as a benchmark's output records it.
fn command_line() -> String {
    std::env::args().collect::<Vec<_>>().join(" ")
}

/// `machine: <CPU>, <n> cores` and `command: …`, before a benchmark's
/// results.
fn print_machine_and_command() {
    println!("machine: {}", machine::cpu_and_cores(&machine::cpuinfo()));
    println!("command: {}", command_line());
}
