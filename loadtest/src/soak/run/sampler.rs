//! The soak's sampler: every live worker's /metrics every interval, each
//! sample kept for the report and appended to the samples file as it is
//! taken; a worker that dies or stops answering is named.

use crate::fleet::scrape_metrics;
use crate::soak::samples::{Sample, CSV_HEADER};
use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// The workers a sampler reads.
pub(super) trait Targets {
    /// Each worker's metrics address; and the names of those found dead
    /// since the last call.
    fn now(&self) -> (Vec<(String, SocketAddr)>, Vec<String>);
}

/// A running fleet's workers, at the addresses the operator gave. One that
/// does not answer is simply not sampled: its restart shows in
/// `process_start_time_seconds`.
pub(super) struct Addresses(pub(super) Vec<(String, SocketAddr)>);

impl Targets for Addresses {
    fn now(&self) -> (Vec<(String, SocketAddr)>, Vec<String>) {
        (self.0.clone(), Vec::new())
    }
}

/// Every sample taken: in memory for the report, and appended to the
/// soak's samples file as it is taken.
pub(super) struct Samples(Mutex<SampleLog>);

struct SampleLog {
    taken: Vec<Sample>,
    /// Line-buffered, so each row is on disk once written; dropped (and
    /// said once) if a write fails: the soak goes on in memory.
    file: Option<(PathBuf, std::io::LineWriter<std::fs::File>)>,
}

impl Samples {
    /// Starts the file at `path` (its header now) where there is one.
    pub(super) fn new(path: Option<&Path>) -> Result<Self> {
        let file = match path {
            Some(path) => {
                use std::io::Write as _;
                let mut file = std::io::LineWriter::new(
                    std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
                );
                writeln!(file, "{CSV_HEADER}")?;
                Some((path.to_owned(), file))
            }
            None => None,
        };
        Ok(Self(Mutex::new(SampleLog { taken: Vec::new(), file })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SampleLog> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn push(&self, sample: Sample) {
        use std::io::Write as _;
        let mut log = self.lock();
        if let Some((path, file)) = &mut log.file {
            if let Err(e) = writeln!(file, "{}", sample.csv_row()) {
                tracing::warn!(path = %path.display(), error = %e, "samples are kept in memory only from now on");
                log.file = None;
            }
        }
        log.taken.push(sample);
    }

    /// Every sample taken so far, in the order taken.
    pub(super) fn take(&self) -> Vec<Sample> {
        std::mem::take(&mut self.lock().taken)
    }
}

/// Samples in a row a worker may miss before the report names it: a
/// staging worker whose pod died (its port-forward answers nothing) must
/// not simply vanish from the samples.
const SILENT_SAMPLES: u32 = 3;

/// Every `every` until the load ends: one sample of each live worker.
/// Returns the workers that died, or stopped answering for
/// [`SILENT_SAMPLES`] samples in a row.
pub(super) async fn sample(
    roster: &impl Targets,
    samples: &Samples,
    start: Instant,
    every: Duration,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> Vec<String> {
    let mut deaths = Vec::new();
    let mut missed: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    let mut tick = tokio::time::interval(every);
    // After a stall, one sample, not a catch-up burst.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let (dead, silent) = sample_once(roster, samples, start).await;
                deaths.extend(dead);
                for (name, answered) in silent {
                    let count = missed.entry(name.clone()).or_default();
                    *count = if answered { 0 } else { *count + 1 };
                    if *count == SILENT_SAMPLES {
                        let at_s = start.elapsed().as_secs_f64();
                        deaths.push(format!("{name} did not answer /metrics for {SILENT_SAMPLES} samples (at {at_s:.0} s)"));
                    }
                }
            }
            _ = stopped.changed() => return deaths,
        }
    }
}

/// One sample of each live worker: the names of those found dead, and
/// whether each of the others answered.
pub(super) async fn sample_once(
    roster: &impl Targets,
    samples: &Samples,
    start: Instant,
) -> (Vec<String>, Vec<(String, bool)>) {
    let (addresses, dead) = roster.now();
    let mut answered = Vec::with_capacity(addresses.len());
    for (name, addr) in addresses {
        let sample = scrape(&name, addr, start).await;
        answered.push((name, sample.is_some()));
        if let Some(sample) = sample {
            samples.push(sample);
        }
    }
    (dead, answered)
}

/// A worker's scrape as a sample; `None` while it does not answer (Redis
/// frozen does not stop /metrics, so this is rare and only costs a point).
pub(super) async fn scrape(name: &str, addr: SocketAddr, start: Instant) -> Option<Sample> {
    let body = scrape_metrics(addr).await.ok()??;
    Some(Sample::from_scrape(start.elapsed().as_secs_f64(), name, &body))
}
