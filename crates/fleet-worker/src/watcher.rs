//! Model lifecycle while serving: the repository is scanned every poll
//! interval; a new version (or a changed pin) is loaded and warmed up beside
//! the serving one, on a blocking thread, and only then handed to the
//! engine as a swap. A version that fails to load or warm up is refused
//! (log line, `fleet_model_load_failures_total`) and the old one keeps
//! serving; it is tried again only once its `model.pt` changes.

use crate::batcher::BucketLimits;
use crate::engine::EngineError;
use crate::lifecycle::{self, Decision, Refusals, ServingVersion};
use crate::memory::{device_limit, MemoryGuard};
use crate::metrics as m;
use crate::model::{LoadTarget, Model, ModelInput, WarmUp};
use crate::precision::CpuFeatures;
use crate::repository::{self, ModelVersion};
use crate::serve::{EngineCommand, Feedback, Loaded};
use fleet_proto::ModelName;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tch::Device;
use tokio::sync::{mpsc, oneshot};

/// Why a version was refused: the metric's `reason` label.
pub const LOAD_FAILURE_REASONS: &[&str] = &["load", "warm_up", "tokenizer_changed"];

/// What loading any version needs.
pub struct LoadContext {
    pub device: Device,
    /// libtorch intra-op threads for the warm-up (as the engine uses).
    pub threads: i32,
    /// `--engine-memory-limit-bytes`; `None`: derived from the device.
    pub memory_limit: Option<u64>,
    /// The batcher's limits: warm-up runs each bucket's largest batch.
    pub limits: BucketLimits,
    /// One real input (a tokenized sentence, a photo's pixels).
    pub sample: ModelInput,
    /// Real inputs a lower precision must agree with fp32 on (text models:
    /// tokenized sentences; image models use their version's reference
    /// photos when it ships them).
    pub probes: Vec<ModelInput>,
    /// The CPU's bf16 features (`--cpu-features`).
    pub cpu: CpuFeatures,
}

/// The inputs `version`'s precision is judged on: its reference photos
/// (`<version>/reference/*.rgb`, model inputs of `size`² RGB) for an image
/// model that has them, else the context's probes.
fn probes_for(version: &ModelVersion, ctx: &LoadContext) -> Vec<ModelInput> {
    let Some(image) = version.config.image() else { return ctx.probes.clone() };
    let expected = (image.size as usize).pow(2) * 3;
    let mut photos: Vec<(std::path::PathBuf, Vec<u8>)> = std::fs::read_dir(version.file("reference"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|e| e == "rgb"))
        .filter_map(|path| std::fs::read(&path).ok().map(|bytes| (path, bytes)))
        .filter(|(_, bytes)| bytes.len() == expected)
        .collect();
    photos.sort();
    if photos.is_empty() {
        return ctx.probes.clone();
    }
    photos.into_iter().map(|(_, pixels)| ModelInput::Pixels(pixels)).collect()
}

pub struct Warmed {
    pub loaded: Loaded,
    pub warm: WarmUp,
}

#[derive(Debug, thiserror::Error)]
#[error("version {version}: {source}")]
pub struct Refused {
    pub version: u64,
    pub reason: &'static str,
    pub source: EngineError,
}

/// Loads `version`, sets its memory limit and warms it up. Blocks.
pub fn load_version(version: &ModelVersion, ctx: &LoadContext) -> Result<Warmed, Refused> {
    let started = Instant::now();
    tch::set_num_threads(ctx.threads);
    let refused = |reason, source| Refused { version: version.version, reason, source };
    let cost = version.config.device.activation_cost();
    let guard = MemoryGuard { cost, limit: ctx.memory_limit };
    let probes = probes_for(version, ctx);
    let target = LoadTarget { device: ctx.device, cpu: ctx.cpu, probes: &probes };
    let mut model = Model::load(version, &target, guard).map_err(|e| refused("load", e))?;
    if let (None, Device::Cuda(index)) = (ctx.memory_limit, ctx.device) {
        match crate::gpu::device_memory(index as u32) {
            Ok((total, used)) => {
                let limit = device_limit(total, used, version.config.device.memory_fraction);
                tracing::info!(total, used, limit, "device memory limit for batches");
                model.set_memory_limit(Some(limit));
            }
            Err(e) => {
                tracing::warn!(error = %e, "device memory unknown (no NVML): batches are limited by out-of-memory errors only")
            }
        }
    }
    let warm = model.warm_up(&ctx.limits, &ctx.sample).map_err(|e| refused("warm_up", e))?;
    tracing::info!(
        version = version.version,
        precision = model.precision.as_str(),
        capped_buckets = warm.row_caps.len(),
        seconds = started.elapsed().as_secs_f64(),
        "model version loaded and warm"
    );
    Ok(Warmed { loaded: Loaded { model, version: version.version }, warm })
}

/// Counts and logs a refused version.
pub fn record_refusal(model: &ModelName, refused: &Refused) {
    metrics::counter!(m::MODEL_LOAD_FAILURES_TOTAL, "model" => model.to_string(), "reason" => refused.reason)
        .increment(1);
    tracing::error!(version = refused.version, reason = refused.reason, error = %refused.source, "model version refused; the serving version stays");
}

pub struct Watcher {
    pub repo: PathBuf,
    pub model: ModelName,
    pub ctx: Arc<LoadContext>,
    pub serving: ServingVersion,
    pub refusals: Refusals,
    pub interval: Duration,
    /// The tokenizer.json the worker tokenizes with (text models): a
    /// version with another one cannot be swapped in under it.
    pub tokenizer: Option<Vec<u8>>,
    pub commands: mpsc::Sender<EngineCommand>,
    pub feedback: mpsc::UnboundedSender<Feedback>,
}

impl Watcher {
    /// Polls until `stop` fires (then drops its command sender, so the
    /// engine's queue can close for the drain).
    pub async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut warned_pin = None;
        // The version last handed to the engine: its swap may still be queued
        // behind a batch, so the serving version may not show it yet.
        let mut handed_over = self.serving.get();
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tick.tick() => {}
            }
            let (repo, model) = (self.repo.clone(), self.model.clone());
            let scanned = tokio::task::spawn_blocking(move || repository::scan(&repo, &model)).await;
            let (config, scan) = match scanned {
                Ok(Ok(found)) => found,
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "model repository unreadable; the serving version stays");
                    continue;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "repository scan panicked");
                    continue;
                }
            };
            let next = match lifecycle::decide(&scan, &self.refusals, Some(handed_over)) {
                Decision::Keep => continue,
                Decision::PinUnavailable(pin) => {
                    if warned_pin != Some(pin) {
                        tracing::warn!(
                            pin,
                            serving = handed_over,
                            "the pinned version is missing or refused; the serving version stays"
                        );
                        warned_pin = Some(pin);
                    }
                    continue;
                }
                Decision::Load(next) => next,
            };
            warned_pin = None;
            let fingerprint = scan.versions.get(&next).copied().flatten();
            let version = repository::version(&self.repo, &self.model, next, config);
            if let Some(refused) = self.tokenizer_changed(&version) {
                record_refusal(&self.model, &refused);
                self.refusals.refuse(next, fingerprint);
                continue;
            }
            tracing::info!(from = handed_over, to = next, "loading a model version beside the serving one");
            let ctx = self.ctx.clone();
            let loading = tokio::task::spawn_blocking(move || load_version(&version, &ctx));
            let loaded = tokio::select! {
                _ = &mut stop => return,
                loaded = loading => loaded,
            };
            match loaded {
                Ok(Ok(warmed)) => {
                    for &(bucket, rows) in &warmed.warm.row_caps {
                        let _ = self.feedback.send(Feedback::RowCap { bucket, rows });
                    }
                    if self.commands.send(EngineCommand::Swap(Box::new(warmed.loaded))).await.is_err() {
                        return;
                    }
                    handed_over = next;
                }
                Ok(Err(refused)) => {
                    record_refusal(&self.model, &refused);
                    self.refusals.refuse(next, fingerprint);
                }
                Err(e) => {
                    let source = EngineError::WarmUp(format!("the loader panicked: {e}"));
                    let refused = Refused { version: next, reason: "load", source };
                    record_refusal(&self.model, &refused);
                    self.refusals.refuse(next, fingerprint);
                }
            }
        }
    }

    /// Tokens are made before batching, with the serving version's
    /// tokenizer; a version that tokenizes differently needs a restart
    /// (rolling update), not a swap.
    fn tokenizer_changed(&self, version: &ModelVersion) -> Option<Refused> {
        let serving = self.tokenizer.as_ref()?;
        let path = version.file("tokenizer.json");
        let same = std::fs::read(&path).is_ok_and(|candidate| &candidate == serving);
        (!same).then(|| Refused {
            version: version.version,
            reason: "tokenizer_changed",
            source: EngineError::Incompatible(format!(
                "{} differs from the serving version's tokenizer: serve this version by restarting the workers",
                path.display()
            )),
        })
    }
}
