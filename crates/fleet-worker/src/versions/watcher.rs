//! Model lifecycle while serving: the repository is scanned every poll
//! interval; a new version (or a changed pin) is loaded and warmed up beside
//! the serving one (the [`load`](super::load) path) and only then handed
//! down the pipeline as a [`Handover`]. A version refused keeps the old one
//! serving.
//!
//! A swap is the whole version or nothing. The version takes over with the
//! model's `config.toml` as it is when the version loads: its input and
//! batch limits, TTLs and task parameters apply from the same point of the
//! stream as its module (see [`handover`](crate::stages::handover)), and it is
//! warmed up with its own limits and inputs. What cannot change under a
//! running worker — the kind, the task type, the module's signature, the
//! tokenizer — is refused with the reason in the log and
//! `fleet_model_load_failures_total{reason}`; the serving version stays
//! until the config is put back or the workers restart (a rolling update).
//! A `config.toml` edited without a new version (or pin) applies with the
//! next one.

use super::lifecycle::{self, Decision};
use super::load::{self, LoadSettings, Loader, RefusalReason, Refused};
use super::repository;
use crate::config::{ModelConfig, ModelVersion};
use crate::core::serving::ServingVersion;
use crate::shutdown::Shutdown;
use crate::stages::admission::intake::Decoding;
use crate::stages::engine::error::EngineError;
use crate::stages::handover::{Handover, VersionTtls};
use fleet_proto::ModelName;
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::mpsc;

pub struct Watcher {
    pub repo: PathBuf,
    pub model: ModelName,
    /// How versions load (device, threads, memory limit, decodes): each
    /// with its own limits and inputs.
    pub settings: LoadSettings,
    pub serving: ServingVersion,
    pub loader: Loader,
    pub interval: Duration,
    /// The tokenizer.json the worker tokenizes with (text models): a
    /// version with another one cannot be swapped in under it.
    pub tokenizer: Option<Vec<u8>>,
    /// The config of the version handed over last.
    pub serving_config: ModelConfig,
    /// The image decoding every version shares (image models).
    pub shared_decoding: Option<Decoding>,
    /// Each version's TTLs, for the stages that write answers.
    pub ttls: VersionTtls,
    /// The admission stage, where a handover enters the pipeline.
    pub handovers: mpsc::Sender<Box<Handover>>,
    /// Stops it.
    pub shutdown: Shutdown,
}

impl Watcher {
    /// Polls until the shutdown.
    pub async fn run(mut self) {
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        let mut warned_pin = None;
        let mut warned_config = None;
        // The version last handed over: its handover may still be on its
        // way down the pipeline, so the serving version may not show it yet.
        let mut handed_over = self.serving.get();
        loop {
            tokio::select! {
                _ = self.shutdown.recv() => return,
                _ = tick.tick() => {}
            }
            // One version on its way at a time: the next loads once the
            // engine serves the last one handed over, so at most two are
            // in memory (the one serving, the next loading or on its way).
            if self.serving.get() != handed_over {
                continue;
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
            let next = match lifecycle::decide(&scan, &self.loader.refusals, Some(handed_over)) {
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
            let unswappable = self.serving_config.unswappable_changes(&config);
            if !unswappable.is_empty() {
                // Not a refusal of the version's files: the config may be
                // put back, and the version then swapped in.
                if warned_config.as_ref() != Some(&(next, unswappable.clone())) {
                    let source = EngineError::Incompatible(format!(
                        "config.toml changes what cannot change under a running worker ({}): restart the \
                         workers (rolling update) to serve it",
                        unswappable.join("; ")
                    ));
                    load::report(&Refused { version: next, reason: RefusalReason::ConfigChanged, source });
                    warned_config = Some((next, unswappable));
                }
                continue;
            }
            warned_config = None;
            let version = repository::version(&self.repo, &self.model, next, config);
            if let Some(refused) = self.tokenizer_changed(&version) {
                self.loader.refuse(refused, fingerprint);
                continue;
            }
            let prepared = match load::prepare(&version, &self.settings, self.shared_decoding.as_ref()) {
                Ok(prepared) => prepared,
                Err(refused) => {
                    self.loader.refuse(refused, fingerprint);
                    continue;
                }
            };
            let config = version.config.clone();
            let limits = prepared.ctx.limits.clone();
            tracing::info!(from = handed_over, to = next, "loading a model version beside the serving one");
            let loaded = tokio::select! {
                _ = self.shutdown.recv() => return,
                loaded = self.loader.load(version, fingerprint, prepared.ctx) => loaded,
            };
            let Some(warmed) = loaded else { continue };
            let changed = self.serving_config.differences_from(&config);
            if !changed.is_empty() {
                tracing::info!(
                    to = next,
                    sections = changed.join(", "),
                    "the version takes over with a changed config"
                );
            }
            self.ttls.insert(next, config.ttl.clone());
            let handover = Handover {
                version: next,
                precision: warmed.loaded.model.precision,
                task_tag: warmed.loaded.model.task_tag.clone(),
                intake: Some(prepared.intake),
                request_ttls: config.ttl.request_ttls(),
                answers: config.answers,
                limits,
                row_caps: warmed.warm.row_caps,
                loaded: Some(warmed.loaded),
            };
            if self.handovers.send(Box::new(handover)).await.is_err() {
                return;
            }
            handed_over = next;
            self.serving_config = config;
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
            reason: RefusalReason::TokenizerChanged,
            source: EngineError::Incompatible(format!(
                "{} differs from the serving version's tokenizer: serve this version by restarting the workers",
                path.display()
            )),
        })
    }
}
