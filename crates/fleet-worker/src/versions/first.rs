//! The version a worker starts with: the one the repository asks for, or,
//! when that one fails to load or warm up, the next best, so that a broken
//! newest version does not keep a fresh worker down while an older one works.

use super::load::{self, LoadSettings, Loader, Warmed};
use super::repository;
use crate::config::ModelVersion;
use crate::stages::admission::intake::Intake;
use anyhow::Result;
use fleet_proto::ModelName;
use std::path::Path;

/// The first version, warm, with what was made from it.
pub struct FirstVersion {
    pub version: ModelVersion,
    pub warmed: Warmed,
    /// How requests are admitted and prepared for it (later versions bring
    /// their own, tokenizing alike).
    pub intake: Intake,
    /// tokenizer.json's bytes (text models): later versions must match.
    pub tokenizer: Option<Vec<u8>>,
    /// The loader, with the versions refused on the way.
    pub loader: Loader,
}

pub async fn load_first(repo: &Path, model: &ModelName, settings: &LoadSettings) -> Result<FirstVersion> {
    let mut loader = Loader::default();
    loop {
        let version = repository::resolve_with(repo, model, &loader.refusals)?;
        let fingerprint = repository::fingerprint(&version.file("model.pt"));
        let prepared = match load::prepare(&version, settings, None) {
            Ok(prepared) => prepared,
            Err(refused) => {
                loader.refuse(refused, fingerprint);
                continue;
            }
        };
        if let Some(warmed) = loader.load(version.clone(), fingerprint, prepared.ctx).await {
            let (intake, tokenizer) = (prepared.intake, prepared.tokenizer);
            return Ok(FirstVersion { version, warmed, intake, tokenizer, loader });
        }
    }
}
