//! The one path by which a version becomes servable, at start and while
//! serving: load its `model.pt`, choose its precision, set its memory limit,
//! warm every bucket's shape up with real input. A version that fails any
//! step is refused (log line, `fleet_model_load_failures_total{reason}`) and
//! not tried again until its `model.pt` changes.

use super::lifecycle::{Fingerprint, Refusals};
use crate::config::batching::BucketLimits;
use crate::config::ModelVersion;
use crate::core::input::ModelInput;
use crate::core::precision::CpuFeatures;
use crate::metrics::MODEL_LOAD_FAILURES_TOTAL;
use crate::stages::admission::intake::{DecodeSettings, Decoding, Intake};
use crate::stages::engine::error::EngineError;
use crate::stages::engine::memory::{self, device_limit, MemoryGuard};
use crate::stages::engine::model::{LoadTarget, Model, WarmUp};
use crate::stages::engine::Loaded;

use std::sync::Arc;
use std::time::Instant;
use tch::Device;

/// Why a version was refused: the metric's `reason` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalReason {
    /// Its files could not be read or loaded (or the loader panicked).
    Load,
    /// Its module does not take the inputs, or give the output, that the
    /// model's config declares (the log names the key).
    Signature,
    /// It loaded but failed on real input.
    WarmUp,
    /// Its tokenizer differs from the serving one: it needs a restart.
    TokenizerChanged,
    /// The model's config.toml changes what cannot be handed over while
    /// serving (kind, task type, signature): it needs a restart.
    ConfigChanged,
}

impl RefusalReason {
    pub const ALL: [Self; 5] = [Self::Load, Self::Signature, Self::WarmUp, Self::TokenizerChanged, Self::ConfigChanged];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Load => "load",
            Self::Signature => "signature",
            Self::WarmUp => "warm_up",
            Self::TokenizerChanged => "tokenizer_changed",
            Self::ConfigChanged => "config_changed",
        }
    }

    /// Why loading failed with `error`.
    fn of_load(error: &EngineError) -> Self {
        match error {
            EngineError::Signature { .. } => Self::Signature,
            _ => Self::Load,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("version {version}: {source}")]
pub struct Refused {
    pub version: u64,
    pub reason: RefusalReason,
    pub source: EngineError,
}

/// What loading any version of the worker's model needs.
pub struct LoadContext {
    pub device: Device,
    /// libtorch intra-op threads for the warm-up (as the engine uses).
    pub threads: i32,
    /// `--engine-memory-limit-bytes`; `None`: derived from the device.
    pub memory_limit: Option<u64>,
    /// The batcher's limits: warm-up runs each bucket's shape.
    pub limits: BucketLimits,
    /// One real input (a tokenized sentence, a photo's pixels).
    pub sample: ModelInput,
    /// Real inputs a lower precision must agree with fp32 on (image models
    /// use their version's reference photos when it ships them).
    pub probes: Vec<ModelInput>,
    /// The CPU's bf16 features (`--cpu-features`).
    pub cpu: CpuFeatures,
}

/// Where and how the worker loads its versions (from its arguments).
#[derive(Debug, Clone, Copy)]
pub struct LoadSettings {
    pub device: Device,
    pub threads: i32,
    pub memory_limit: Option<u64>,
    pub cpu: CpuFeatures,
    pub decode: DecodeSettings,
}

/// A version ready to load: how it takes its inputs, and what it loads with.
pub struct Prepared {
    pub intake: Intake,
    /// tokenizer.json's bytes (text models).
    pub tokenizer: Option<Vec<u8>>,
    pub ctx: Arc<LoadContext>,
}

/// Makes `version`'s intake (an image model's decodes sharing `shared`'s
/// budget: the one a version takes over from) and its load context: its
/// own batch limits, whose shapes the warm-up runs, and its real inputs. A
/// version whose intake cannot be made (an unreadable tokenizer, a pad id
/// outside it) is refused.
pub fn prepare(
    version: &ModelVersion,
    settings: &LoadSettings,
    shared: Option<&Decoding>,
) -> Result<Prepared, Refused> {
    let (intake, samples) = Intake::for_version(version, settings.decode, shared).map_err(|e| Refused {
        version: version.version,
        reason: RefusalReason::Load,
        source: EngineError::Incompatible(format!("{e:#}")),
    })?;
    let ctx = LoadContext {
        device: settings.device,
        threads: settings.threads,
        memory_limit: settings.memory_limit,
        limits: version.config.batching.limits(version.config.max_input_len()),
        sample: samples.sample,
        probes: samples.probes,
        cpu: settings.cpu,
    };
    Ok(Prepared { intake, tokenizer: samples.tokenizer, ctx: Arc::new(ctx) })
}

/// A version loaded and warm, with what warming up found.
pub struct Warmed {
    pub loaded: Loaded,
    pub warm: WarmUp,
}

/// Loads versions and keeps the refusals: the worker's one loader.
#[derive(Default)]
pub struct Loader {
    pub refusals: Refusals,
}

impl Loader {
    /// Loads and warms `version` on a blocking thread; a failure (a panic
    /// included) is recorded as its refusal and gives `None`.
    pub async fn load(
        &mut self,
        version: ModelVersion,
        fingerprint: Option<Fingerprint>,
        ctx: Arc<LoadContext>,
    ) -> Option<Warmed> {
        let number = version.version;
        let loaded = tokio::task::spawn_blocking(move || load_version(&version, &ctx)).await;
        let refused = match loaded {
            Ok(Ok(warmed)) => return Some(warmed),
            Ok(Err(refused)) => refused,
            Err(e) => Refused {
                version: number,
                reason: RefusalReason::Load,
                source: EngineError::WarmUp(format!("the loader panicked: {e}")),
            },
        };
        self.refuse(refused, fingerprint);
        None
    }

    /// Records `refused`: counted, logged, and skipped until its files change.
    pub fn refuse(&mut self, refused: Refused, fingerprint: Option<Fingerprint>) {
        report(&refused);
        self.refusals.refuse(refused.version, fingerprint);
    }
}

/// Counts and logs a refusal (the metric's `reason` label, the log's error).
pub fn report(refused: &Refused) {
    metrics::counter!(MODEL_LOAD_FAILURES_TOTAL, "reason" => refused.reason.as_str()).increment(1);
    tracing::error!(
        version = refused.version,
        reason = refused.reason.as_str(),
        error = %refused.source,
        "model version refused; the serving version stays"
    );
}

/// Loads `version`, sets its memory limit and warms it up. Blocks.
fn load_version(version: &ModelVersion, ctx: &LoadContext) -> Result<Warmed, Refused> {
    let started = Instant::now();
    tch::set_num_threads(ctx.threads);
    let refused = |reason, source| Refused { version: version.version, reason, source };
    let guard = MemoryGuard { cost: version.config.device.activation_cost(), limit: ctx.memory_limit };
    let probes = probes_for(version, ctx);
    let target = LoadTarget { device: ctx.device, cpu: ctx.cpu, probes: &probes };
    let mut model = Model::load(version, &target, guard).map_err(|e| refused(RefusalReason::of_load(&e), e))?;
    if let (None, Device::Cuda(index)) = (ctx.memory_limit, ctx.device) {
        match memory::device_memory(index as u32) {
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
    let warm = model.warm_up(&ctx.limits, &ctx.sample).map_err(|e| refused(RefusalReason::WarmUp, e))?;
    tracing::info!(
        version = version.version,
        precision = model.precision.as_str(),
        capped_buckets = warm.row_caps.len(),
        seconds = started.elapsed().as_secs_f64(),
        "model version loaded and warm"
    );
    Ok(Warmed { loaded: Loaded { model, version: version.version, probe: ctx.sample.clone() }, warm })
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
