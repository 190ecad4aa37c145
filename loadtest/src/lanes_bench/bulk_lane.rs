//! Steps 3 and 4 of the lanes bench: the backfill on the bulk lane behind
//! the interactive window, then the same with the backfill's job cancelled
//! mid-window and watched until every backfill request is answered. Apart
//! from the first steps because the cancel's watch is a loop of its own.

use super::{
    latency, rows_after_cancel, seconds_to_stop, shares, start, step, Counters, Fleet, LanesBench, Latency, Shares,
    Stop, SETTLE,
};
use crate::runner::RunOutcome;
use anyhow::Result;
use fleet_producer::ResultClient;
use fleet_proto::{JobId, Lane};
use std::time::Duration;
use tokio::time::Instant;

/// How long a cancel is kept (the bench's fleet lives far less).
const CANCEL_KEEP: Duration = Duration::from_secs(3600);
/// How often the worker's counters are read after a cancel: the resolution
/// of `seconds_to_stop`.
const WATCH_EVERY: Duration = Duration::from_millis(50);

/// Step 3: interactive latency with the backfill on the bulk lane, and how
/// the worker's capacity was split during the window.
pub(super) async fn lanes(
    bench: &LanesBench,
    backfill: &[String],
    rate: f64,
    capacity_per_s: f64,
    problems: &mut Vec<String>,
) -> Result<(Latency, Shares)> {
    let lanes = with_lanes(bench, backfill, rate, capacity_per_s, None).await?;
    let shares = lanes.shares;
    let latency = step("3 lanes", &lanes.outcome.ledger, latency(&lanes.outcome.records), problems);
    println!(
        "  during the window: interactive {:.1}/s, bulk {:.1} rows/s, bulk share {:.2}, {:.2} of the capacity left",
        shares.interactive_per_s, shares.bulk_rows_per_s, shares.bulk_share, shares.leftover_fraction
    );
    Ok((latency, shares))
}

/// Step 4: as step 3, the backfill's job cancelled at `bench.cancel_at`;
/// what the cancel stopped, and how fast.
pub(super) async fn cancelled(
    bench: &LanesBench,
    backfill: &[String],
    rate: f64,
    capacity_per_s: f64,
    problems: &mut Vec<String>,
) -> Result<Stop> {
    let cancelled = with_lanes(bench, backfill, rate, capacity_per_s, Some(bench.cancel_at)).await?;
    step("4 lanes, cancel", &cancelled.outcome.ledger, latency(&cancelled.outcome.records), problems);
    let stop = cancelled.stop.unwrap_or_default();
    println!(
        "  cancel at {} s: bulk ok answers after it {:.0}, last {:.2} s after it; rows computed after it {:.0} \
         (interactive rows left out); backfill answered {:.0} of {}: ok {:.0}, cancelled {:.0}",
        bench.cancel_at.as_secs_f64(),
        stop.bulk_ok_after_cancel,
        stop.seconds_to_stop,
        stop.rows_computed_after_cancel,
        stop.answered,
        bench.backfill,
        stop.ok,
        stop.cancelled
    );
    problems.extend(super::cancel_problems(&stop, bench.backfill));
    Ok(stop)
}

struct LanesRun {
    outcome: RunOutcome,
    shares: Shares,
    stop: Option<Stop>,
}

/// Steps 3 and 4: the backfill on the bulk lane, then the interactive
/// window; with `cancel_at`, the backfill's job is cancelled that far into
/// the window and watched until every backfill request is answered.
async fn with_lanes(
    bench: &LanesBench,
    texts: &[String],
    rate: f64,
    capacity_per_s: f64,
    cancel_at: Option<Duration>,
) -> Result<LanesRun> {
    let (label, name) = if cancel_at.is_some() { ("4 lanes, cancel", "cancel") } else { ("3 lanes", "lanes") };
    let pid = std::process::id();
    let fleet = start(bench, name).await?;
    let job = JobId::parse(&format!("lanes-{name}-backfill-{pid}"))?;
    let before = fleet.counters().await?;
    let seconds = fleet.backfill(texts, Lane::Bulk, &job).await?;
    println!("{label}: backfill of {} sent in {seconds:.1} s to the bulk lane", texts.len());

    let start = Instant::now();
    let at_start = fleet.counters().await?;
    let interactive = fleet.interactive(bench, rate, format!("lanes-{name}-{pid}"), Duration::from_secs(60));
    let window = async {
        tokio::time::sleep_until(start + bench.duration).await;
        fleet.counters().await
    };
    let watch = async {
        match cancel_at {
            None => Ok(None),
            Some(at) => {
                let settle_until = start + bench.duration + SETTLE;
                watch_cancel(&fleet, &job, start + at, settle_until, &before, texts.len()).await.map(Some)
            }
        }
    };
    let (outcome, at_end, watched) = tokio::join!(interactive, window, watch);
    let (outcome, at_end, watched) = (outcome?, at_end?, watched?);
    let shares = shares(&at_end.since(&at_start), bench.duration.as_secs_f64(), capacity_per_s);
    // Every interactive request is answered and the backfill settled: what
    // grew since the cancel is final.
    let stop = match watched {
        Some(watched) => {
            let after = fleet.counters().await?;
            let after_cancel = after.since(&watched.at_cancel);
            let backfill = after.since(&before);
            Some(Stop {
                seconds_to_stop: watched.seconds_to_stop,
                rows_computed_after_cancel: rows_after_cancel(&after_cancel),
                bulk_ok_after_cancel: after_cancel.bulk_ok,
                ok: backfill.bulk_ok,
                cancelled: backfill.bulk_cancelled,
                answered: backfill.bulk_answered,
                complete: watched.complete,
            })
        }
        None => None,
    };
    Ok(LanesRun { outcome, shares, stop })
}

struct Watched {
    at_cancel: Counters,
    seconds_to_stop: f64,
    complete: bool,
}

/// At `at`, cancels `job`; then reads the worker's counters every
/// [`WATCH_EVERY`] until all `backfill` requests are answered (counted from
/// `before`) or `until`, noting when bulk `ok` answers last grew.
async fn watch_cancel(
    fleet: &Fleet,
    job: &JobId,
    at: Instant,
    until: Instant,
    before: &Counters,
    backfill: usize,
) -> Result<Watched> {
    let client = ResultClient::connect(&fleet.redis.url()).await?;
    tokio::time::sleep_until(at).await;
    let at_cancel = fleet.counters().await?;
    let cancelled = Instant::now();
    client.cancel(job, CANCEL_KEEP).await?;
    tracing::info!(%job, "backfill cancelled");
    let (mut bulk_ok, mut last_bulk_ok) = (at_cancel.bulk_ok, None);
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        if let Ok(now) = fleet.counters().await {
            if now.bulk_ok > bulk_ok {
                bulk_ok = now.bulk_ok;
                last_bulk_ok = Some(cancelled.elapsed().as_secs_f64());
            }
            if now.since(before).bulk_answered >= backfill as f64 {
                return Ok(Watched { at_cancel, seconds_to_stop: seconds_to_stop(0.0, last_bulk_ok), complete: true });
            }
        }
        if Instant::now() > until {
            return Ok(Watched { at_cancel, seconds_to_stop: seconds_to_stop(0.0, last_bulk_ok), complete: false });
        }
    }
}
