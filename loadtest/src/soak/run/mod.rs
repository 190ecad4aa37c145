//! The soak's fleet, load, faults and sampler, all on this machine: a
//! durable broker (PostgreSQL storage, so a restart loses nothing), Redis,
//! one text worker and one image worker (the real binary, each on a model
//! repository of the soak's own, where new versions are published), a
//! second text worker that joins and leaves, and two open-loop loads (texts
//! and real photos) at a share of the capacity measured first.
//!
//! Four things run at once: the two loads (runner), the faults at their
//! planned times, and a sampler that reads every live worker's /metrics
//! every interval. A fault that cannot be injected is noted, never the end
//! of the soak: the report says what happened.
//!
//! [`run_staging`] soaks a fleet that runs elsewhere (staging): the load
//! goes to its brokers under its names, its workers' /metrics are read at
//! the addresses given, and each fault is a command the operator names
//! (`kubectl delete pod …`); a fault without one is left out.
//!
//! Here what both kinds of soak share: the load they offer, what they
//! return, the three things run at once ([`soak_while_loaded`]). The rest
//! has a file each: [`local`] (the fleet started here) with its model
//! [`repo`] and its [`local_faults`], [`staging`] (a fleet elsewhere and
//! the operator's fault commands), [`inject`] (each fault at its time) and
//! [`sampler`] (every worker's /metrics every interval).

mod inject;
mod local;
mod local_faults;
mod repo;
mod sampler;
mod staging;

pub use local::{run, SoakConfig, IMAGE_MODEL, TEXT_MODEL};
pub use repo::SoakRepo;
pub use staging::{run_staging, FaultCommands, StagingConfig};

use super::samples::Sample;
use super::schedule::Planned;
use crate::runner::{self, ImageInput, RunConfig, RunOutcome};
use anyhow::{Context, Result};
use fleet_proto::ContentType;
use inject::Injector;
use sampler::{Samples, Targets};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What every soak offers and how it watches, on a fleet started here or
/// a running one.
pub struct SoakLoad {
    /// Sentences the texts are made of.
    pub corpus: Vec<String>,
    pub images: Vec<ImageInput>,
    pub duration: Duration,
    pub plan: Vec<Planned>,
    /// How many times the offered rates inside a planned burst.
    pub burst_factor: f64,
    pub sample_every: Duration,
    pub seed: u64,
    /// Where each sample is appended as it is taken (CSV), so a soak cut
    /// short (Ctrl-C, a lost session) keeps what it saw; `None`: only in
    /// memory, for the report.
    pub samples_file: Option<PathBuf>,
}

impl SoakLoad {
    /// Open-loop arrival times at `rate`, the plan's bursts included.
    fn arrivals(&self, rate: f64, seed: u64) -> Vec<f64> {
        let duration_s = self.duration.as_secs_f64();
        super::schedule::arrivals(rate, self.burst_factor, &self.plan, duration_s, seed, usize::MAX)
    }
}

/// A fault as it was injected.
#[derive(Debug, Clone, PartialEq)]
pub struct Injected {
    pub planned: Planned,
    /// When it began, seconds from the start of the load (a burst: when the
    /// arrivals planned it).
    pub at_s: f64,
    /// When it was over: its injection returned (a joiner ready and owning
    /// partitions, the broker listening again).
    pub ended_s: f64,
    /// What was done, or why it could not be.
    pub note: String,
    pub failed: bool,
}

impl Injected {
    /// The fault as it happened: its actual start and length.
    pub fn as_happened(&self) -> Planned {
        Planned { at_s: self.at_s, lasts_s: (self.ended_s - self.at_s).max(0.0), ..self.planned }
    }
}

pub struct SoakOutcome {
    pub text_model: String,
    pub image_model: String,
    /// Texts and images per second each worker answered alone (measured
    /// on a fleet started here only).
    pub text_capacity: Option<f64>,
    pub image_capacity: Option<f64>,
    pub text_rate: f64,
    pub image_rate: f64,
    pub texts: RunOutcome,
    pub images: RunOutcome,
    pub samples: Vec<Sample>,
    pub faults: Vec<Injected>,
    /// Workers whose process ended without being asked to, or that stopped
    /// answering /metrics.
    pub deaths: Vec<String>,
    /// The workers that ran before the load began.
    pub initial_workers: Vec<String>,
}

/// Seconds to keep collecting answers after the last send: past the
/// default request TTL (30 s), so every request has ended one way.
const DRAIN: Duration = Duration::from_secs(90);

/// Reads the shipped photos a soak sends (PNG, JPEG, WebP), in name order.
pub fn read_images(dir: &Path) -> Result<Vec<ImageInput>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| Some(entry.ok()?.path()))
        .collect();
    paths.sort();
    let mut images = Vec::new();
    for path in paths {
        let mime = match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("png") => "image/png",
            Some("jpg" | "jpeg") => "image/jpeg",
            Some("webp") => "image/webp",
            _ => continue,
        };
        let content_type = ContentType::parse(mime).context("an image content type")?;
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        images.push(ImageInput { content_type, bytes: Arc::new(bytes) });
    }
    Ok(images)
}

/// The two loads, the faults at their times and the sampler, at once,
/// until both loads have ended: the loads' outcomes, the faults as
/// injected, and the workers lost.
async fn soak_while_loaded(
    texts: RunConfig,
    images: RunConfig,
    load: &SoakLoad,
    start: Instant,
    injector: &mut impl Injector,
    targets: &impl Targets,
    samples: &Samples,
) -> (Result<RunOutcome>, Result<RunOutcome>, Vec<Injected>, Vec<String>) {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let loads = async {
        let outcomes = tokio::join!(runner::run(texts), runner::run(images));
        let _ = stop.send(true);
        outcomes
    };
    let ((texts, images), injected, deaths) = tokio::join!(
        loads,
        inject::inject(&load.plan, start, injector),
        sampler::sample(targets, samples, start, load.sample_every, stopped)
    );
    (texts, images, injected, deaths)
}

/// A prefix of request ids unique to this soak: the process and the second
/// it began.
fn run_id() -> String {
    format!("{}-{}", std::process::id(), fleet_proto::clock::now_ms() / 1000)
}
