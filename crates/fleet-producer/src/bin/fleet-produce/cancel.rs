//! `fleet-produce cancel`: marks a job cancelled in Redis for as long as its
//! messages may still be read, so workers answer them `cancelled`.

use anyhow::{Context, Result};
use clap::Args;
use fleet_connect::redis::RedisConfig;
use fleet_producer::results::DEFAULT_CANCEL_KEEP;
use fleet_producer::ResultClient;
use fleet_proto::{JobId, Namespace};
use std::time::Duration;

#[derive(Args)]
pub struct CancelArgs {
    /// The job to cancel, as its requests' ce_fleetjob names it (a single
    /// request is cancellable when it was sent with a job of its own).
    #[arg(long)]
    job: JobId,
    /// How long the cancel lasts, e.g. 7d, 12h or seconds (default 7 days):
    /// a message of the job read after it ends is computed, so keep it past
    /// the bulk topic's retention.
    #[arg(long, value_parser = duration_or_seconds)]
    pub keep: Option<Duration>,
    #[command(flatten)]
    redis: RedisConfig,
}

/// `--keep`: a humantime duration (`7d`, `12h`, `90m`) or whole seconds.
pub fn duration_or_seconds(raw: &str) -> Result<Duration, String> {
    let keep = match raw.parse::<u64>() {
        Ok(seconds) => Duration::from_secs(seconds),
        Err(_) => humantime::parse_duration(raw).map_err(|e| format!("{raw:?} is not a duration: {e}"))?,
    };
    // Redis keeps a key whole seconds; a cancel shorter than one is a mistake.
    if keep < Duration::from_secs(1) {
        return Err(format!("{raw:?} is under a second"));
    }
    Ok(keep)
}

pub async fn run(names: &Namespace, args: CancelArgs) -> Result<()> {
    let keep = args.keep.unwrap_or(DEFAULT_CANCEL_KEEP);
    let results =
        ResultClient::connect_to(&args.redis.target()?, names.clone()).await.context("connecting to Redis")?;
    results.cancel(&args.job, keep).await.with_context(|| format!("cancelling job {}", args.job))?;
    println!(
        "cancelled job {}: {} set for {}; workers answer its requests `cancelled` instead of computing them",
        args.job,
        names.cancel_key(&args.job),
        humantime::format_duration(Duration::from_secs(keep.as_secs()))
    );
    Ok(())
}
