//! `loadtest bulk-answers`: its flags, the backfill file it writes, the
//! bench it runs ([`loadtest::bulk_answers_bench`]) and the RESULT lines
//! it prints.

use super::{print_machine_and_command, read_corpus};
use anyhow::{bail, Context, Result};
use loadtest::bulk_answers_bench::{backfill_texts, faults_line, result_line, run, BulkAnswersBench};
use loadtest::fleet::Binaries;
use std::path::PathBuf;
use std::time::Duration;

/// `loadtest bulk-answers`: the command's flags.
#[derive(clap::Args)]
pub struct BulkAnswersArgs {
    /// Distinct lines of real documents (a distribution's licences and
    /// changelogs: scripts/bench-bulk-answers.sh gathers them); the
    /// backfill's texts are runs of 1 to 8 of them.
    #[arg(long)]
    lines: PathBuf,
    /// Texts of the backfill.
    #[arg(long, default_value_t = 100_000)]
    texts: usize,
    /// The interactive rate as a share of the worker's measured capacity.
    #[arg(long, default_value_t = 0.3)]
    interactive_fraction: f64,
    /// Each step's interactive window (the backfill goes on after it).
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    duration: Duration,
    #[arg(long, default_value_t = 2000)]
    capacity_texts: usize,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    #[arg(long, default_value_t = 43)]
    seed: u64,
    /// Also the backfill with the worker killed twice and the collector once.
    #[arg(long)]
    faults: bool,
    /// Texts of that backfill (its first lines of the same file); default: --texts.
    #[arg(long)]
    fault_texts: Option<usize>,
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
    /// Where the backfill file and the answers files go.
    #[arg(long, default_value = "loadtest-report/bulk-answers")]
    work_dir: PathBuf,
}

/// Runs the benchmark and prints its RESULT lines.
pub async fn execute(args: BulkAnswersArgs) -> Result<()> {
    print_machine_and_command();
    let corpus = read_corpus(&args.corpus)?;
    if !(0.0..1.0).contains(&args.interactive_fraction) || args.texts == 0 {
        bail!("--interactive-fraction must be in [0, 1) and --texts at least 1");
    }
    // Old documents hold lines in other encodings: only UTF-8 ones are texts.
    let raw = std::fs::read(&args.lines).with_context(|| format!("reading {}", args.lines.display()))?;
    let lines: Vec<String> = raw
        .split(|&b| b == b'\n')
        .filter_map(|line| std::str::from_utf8(line).ok())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    std::fs::create_dir_all(&args.work_dir)?;
    let backfill_file = args.work_dir.join("backfill.txt");
    let texts = backfill_texts(&lines, args.texts, args.seed);
    std::fs::write(&backfill_file, texts.join("\n") + "\n")?;
    let fault_texts = args.fault_texts.unwrap_or(args.texts).min(args.texts);
    let fault_file = args.work_dir.join("backfill-faults.txt");
    std::fs::write(&fault_file, texts[..fault_texts].join("\n") + "\n")?;
    let binaries = Binaries::from_env()?;
    let produce = binaries.worker.with_file_name("fleet-produce");
    if !produce.is_file() {
        bail!("no fleet-produce beside {} (cargo build --release --workspace --bins)", binaries.worker.display());
    }
    let bench = BulkAnswersBench {
        binaries,
        produce,
        corpus,
        backfill_file,
        backfill_texts: args.texts,
        interactive_fraction: args.interactive_fraction,
        duration: args.duration,
        capacity_texts: args.capacity_texts,
        partitions: args.partitions,
        seed: args.seed,
        work_dir: args.work_dir,
        faults: args.faults.then_some((fault_file, fault_texts)),
    };
    let report = run(&bench).await?;
    println!("{}", result_line(&report));
    if let (Some(faults), Some((_, texts))) = (&report.faults, &bench.faults) {
        println!("{}", faults_line(*texts, faults));
    }
    Ok(())
}
