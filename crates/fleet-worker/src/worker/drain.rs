//! Serving until the signal, then the drain: reading stops, each stage
//! finishes what it holds and closes its output, the sink writes the last
//! answers, the status reporter withdraws this worker's backlog, and the
//! stored offsets are committed, each step bounded in time.

use crate::shutdown::Trigger;
use crate::stages::admission::Ended;
use crate::stages::source::{Committer, Source};
use anyhow::{bail, Context, Result};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

/// How long the final commit may take at shutdown.
const FINAL_COMMIT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the status reporter may take to withdraw at shutdown.
const REPORTER_STOP_TIMEOUT: Duration = Duration::from_secs(3);

/// What runs while the worker serves, as the drain stops it.
pub(super) struct Running {
    pub source: Arc<Source>,
    pub committer: Committer,
    pub stop_reading: Trigger,
    pub stop_reporting: Trigger,
    /// Set once the drain starts: a stage ending after it is not a failure.
    pub stopping: Arc<AtomicBool>,
    pub watching: JoinHandle<()>,
    pub cancel_watching: JoinHandle<()>,
    pub heap: JoinHandle<()>,
    pub reporter: JoinHandle<()>,
    pub batch: JoinHandle<()>,
    pub cache: JoinHandle<()>,
    pub engine: std::thread::JoinHandle<()>,
    pub sink: JoinHandle<()>,
    pub drain_timeout: Duration,
}

/// Runs `admission` (reading) until `signal`, or until reading ends on its
/// own (a stage after it is gone), then drains. An error when a stage
/// stopped the pipeline.
pub(super) async fn serve_until_stopped(
    running: Running,
    admission: impl Future<Output = Ended>,
    signal: impl Future<Output = ()>,
) -> Result<()> {
    tokio::pin!(admission);
    let ended_early = tokio::select! {
        _ = signal => None,
        ended = &mut admission => Some(ended),
    };
    let Running { source, committer, stop_reading, stop_reporting, stopping, drain_timeout, .. } = running;
    stop_reading.fire();
    stopping.store(true, Ordering::Relaxed);
    tracing::info!(in_flight = source.in_flight(), timeout = ?drain_timeout, "draining");
    // Aborted, not only told: it may be loading a version, or waiting to
    // hand one to an admission stage that no longer reads.
    running.watching.abort();
    let _ = running.watching.await;
    running.cancel_watching.abort();
    running.heap.abort();
    let (batch, cache, engine, sink) = (running.batch, running.cache, running.engine, running.sink);
    let drain = async {
        let ended = match ended_early {
            Some(ended) => ended,
            None => admission.await,
        };
        batch.await.context("batch task")?;
        cache.await.context("cache task")?;
        let joined = tokio::task::spawn_blocking(move || engine.join()).await.context("engine join")?;
        if joined.is_err() {
            bail!("engine thread panicked");
        }
        sink.await.context("sink task")?;
        Ok(ended)
    };
    let drained = tokio::time::timeout(drain_timeout, drain).await;
    stop_reporting.fire();
    let _ = tokio::time::timeout(REPORTER_STOP_TIMEOUT, running.reporter).await;
    let ended = match drained {
        Ok(result) => Some(result?),
        // What is not answered yet keeps its offset uncommitted: the next
        // owner of the partition reads it again.
        Err(_) => {
            tracing::warn!(left = source.in_flight(), "drain timed out; unanswered messages will be redelivered");
            None
        }
    };
    commit_last(committer).await?;
    if let Ok(mut source) = Arc::try_unwrap(source) {
        source.close();
    }
    if ended_early.is_some() || ended == Some(Ended::PipelineClosed) {
        bail!("a stage of the pipeline stopped; see the log above");
    }
    tracing::info!("stopped");
    Ok(())
}

/// Commits the stored offsets, bounded: a broker that does not answer must
/// not keep a stopping pod.
async fn commit_last(committer: Committer) -> Result<()> {
    let commit = tokio::task::spawn_blocking(move || committer.commit_now());
    match tokio::time::timeout(FINAL_COMMIT_TIMEOUT, commit).await {
        Ok(Ok(result)) => result.context("final offset commit")?,
        Ok(Err(e)) => tracing::warn!(error = %e, "final offset commit panicked"),
        Err(_) => tracing::warn!("final offset commit timed out; the last auto-commit stands"),
    }
    Ok(())
}
