//! `fleet-produce collect` and `fleet-produce job`: a bulk job's answers
//! into a file, and a job at a glance. The work is
//! `fleet_producer::jobs`'; this is the progress bar and the summary.

use anyhow::Result;
use clap::Args;
use fleet_producer::jobs::status::look;
use fleet_producer::jobs::{collect, CollectOptions, Collected, JobLedger, OutputFormat};
use fleet_producer::KafkaConfig;
use fleet_proto::job_record::JobRecord;
use fleet_proto::{JobId, Namespace};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

/// Exit status when every request has its answer but some are not `ok`.
pub const NOT_ALL_OK: i32 = 4;

#[derive(Args)]
pub struct CollectArgs {
    /// The job to collect, as `fleet-produce bulk` printed it.
    #[arg(long)]
    job: JobId,
    #[command(flatten)]
    out: OutArgs,
}

/// Where collected answers go; shared with `bulk --out`.
#[derive(Args, Clone)]
pub struct OutArgs {
    /// The answers file: JSONL, or a Parquet dataset (a folder) for a path
    /// ending in .parquet. Run again with the same path, it skips what the
    /// file holds.
    #[arg(long = "out", value_name = "PATH")]
    pub path: Option<PathBuf>,
    /// jsonl or parquet; default: from the path's extension.
    #[arg(long, requires = "path")]
    pub format: Option<OutputFormat>,
}

impl OutArgs {
    pub fn options(&self, job: &JobId) -> Option<CollectOptions> {
        let path = self.path.clone()?;
        let format = self.format.unwrap_or_else(|| OutputFormat::for_path(&path));
        Some(CollectOptions { job: job.clone(), out: path, format })
    }
}

#[derive(Args)]
pub struct JobArgs {
    #[arg(long)]
    job: JobId,
}

pub async fn run_collect(kafka: &KafkaConfig, names: &Namespace, args: CollectArgs) -> Result<()> {
    let Some(options) = args.out.options(&args.job) else { anyhow::bail!("--out is required") };
    let bar = answers_bar(ProgressBar::new(0));
    let collected = collect_with(kafka, names, &options, bar.clone()).await?;
    bar.finish_and_clear();
    report(&options, &collected)
}

/// Collects with `bar` following the answers.
pub async fn collect_with(
    kafka: &KafkaConfig,
    names: &Namespace,
    options: &CollectOptions,
    bar: ProgressBar,
) -> Result<Collected> {
    let watch = move |ledger: &JobLedger, record: &JobRecord| {
        bar.set_length(record.requests.max(ledger.answered()));
        bar.set_position(ledger.answered());
        let sending = if record.is_complete() { "" } else { "; still sending" };
        bar.set_message(format!("{}{sending}", ledger.counts_line()));
    };
    Ok(collect(kafka, names, options, &watch).await?)
}

/// The answers bar: answered of sent, with an ETA.
pub fn answers_bar(bar: ProgressBar) -> ProgressBar {
    let template = "{elapsed_precise} answered [{bar:40}] {pos}/{len} ({per_sec}, {eta} left) {msg}";
    let style = ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style.progress_chars("=> "));
    bar
}

/// Prints what was collected; exits with [`NOT_ALL_OK`] when some answers
/// are not `ok`.
pub fn report(options: &CollectOptions, collected: &Collected) -> Result<()> {
    let ledger = &collected.ledger;
    println!(
        "job {}: {} answers in {} ({}); {} read twice and written once",
        options.job,
        ledger.answered(),
        options.out.display(),
        ledger.counts_line(),
        ledger.repeats()
    );
    if ledger.not_ok() > 0 {
        eprintln!("job {}: {} of {} answers are not ok", options.job, ledger.not_ok(), ledger.answered());
        std::process::exit(NOT_ALL_OK);
    }
    Ok(())
}

pub async fn run_job(kafka: &KafkaConfig, names: &Namespace, args: JobArgs) -> Result<()> {
    let view = look(kafka, names, &args.job).await?;
    print!("{view}");
    Ok(())
}
