//! The version a worker starts with: the one the repository asks for, or,
//! when that one fails to load or warm up, the next best, so that a broken
//! newest version does not keep a fresh worker down while an older one works.

use super::load::{LoadContext, Loader, RefusalReason, Refused, Warmed};
use super::repository;
use crate::config::ModelVersion;
use crate::stages::admission::intake::{DecodeSettings, Intake};
use crate::stages::engine::error::EngineError;
use crate::stages::engine::precision::CpuFeatures;
use anyhow::Result;
use fleet_proto::ModelName;
use std::path::Path;
use std::sync::Arc;
use tch::Device;

/// Where and how the worker loads its versions (from its arguments).
pub struct LoadSettings {
    pub device: Device,
    pub threads: i32,
    pub memory_limit: Option<u64>,
    pub cpu: CpuFeatures,
    pub decode: DecodeSettings,
}

/// The first version, warm, with what was made from it.
pub struct FirstVersion {
    pub version: ModelVersion,
    pub warmed: Warmed,
    /// How requests are admitted and prepared for it (and for every
    /// version swapped in after it: they must tokenize alike).
    pub intake: Intake,
    /// tokenizer.json's bytes (text models): later versions must match.
    pub tokenizer: Option<Vec<u8>>,
    /// What later versions are loaded with.
    pub ctx: Arc<LoadContext>,
    /// The loader, with the versions refused on the way.
    pub loader: Loader,
}

pub async fn load_first(repo: &Path, model: &ModelName, settings: &LoadSettings) -> Result<FirstVersion> {
    let mut loader = Loader::default();
    loop {
        let version = repository::resolve_with(repo, model, &loader.refusals)?;
        let fingerprint = repository::fingerprint(&version.file("model.pt"));
        let (intake, samples) = match Intake::for_version(&version, settings.decode) {
            Ok(made) => made,
            Err(e) => {
                let source = EngineError::Incompatible(format!("{e:#}"));
                loader.refuse(Refused { version: version.version, reason: RefusalReason::Load, source }, fingerprint);
                continue;
            }
        };
        let ctx = Arc::new(LoadContext {
            device: settings.device,
            threads: settings.threads,
            memory_limit: settings.memory_limit,
            limits: version.config.batching.limits(version.config.max_input_len()),
            sample: samples.sample,
            probes: samples.probes,
            cpu: settings.cpu,
        });
        if let Some(warmed) = loader.load(version.clone(), fingerprint, ctx.clone()).await {
            return Ok(FirstVersion { version, warmed, intake, tokenizer: samples.tokenizer, ctx, loader });
        }
    }
}
