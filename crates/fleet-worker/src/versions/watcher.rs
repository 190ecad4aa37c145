//! Model lifecycle while serving: the repository is scanned every poll
//! interval; a new version (or a changed pin) is loaded and warmed up beside
//! the serving one (the [`load`](super::load) path) and only then handed to
//! the engine as a swap. A version refused keeps the old one serving.
//!
//! A swap is the whole version or nothing. The module (and with it the
//! answer's task) changes at a batch boundary, but the input limits, batch
//! limits and TTLs are fixed at start across the stages; so a version whose
//! `config.toml` differs in anything but the pin is not swapped in half
//! applied: it is refused, with the sections named in the log and the
//! `config_changed` refusal counted, until the config is as the serving
//! version's again or the workers restart (a rolling update) to serve it.

use super::lifecycle::{self, Decision};
use super::load::{self, LoadContext, Loader, RefusalReason, Refused};
use super::repository;
use crate::config::{ModelConfig, ModelVersion};
use crate::serving::ServingVersion;
use crate::shutdown::Shutdown;
use crate::stages::engine::error::EngineError;
use crate::stages::engine::{BatchFeedback, EngineCommand};
use fleet_proto::ModelName;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

pub struct Watcher {
    pub repo: PathBuf,
    pub model: ModelName,
    pub ctx: Arc<LoadContext>,
    pub serving: ServingVersion,
    pub loader: Loader,
    pub interval: Duration,
    /// The tokenizer.json the worker tokenizes with (text models): a
    /// version with another one cannot be swapped in under it.
    pub tokenizer: Option<Vec<u8>>,
    /// The config the worker started with: what its stages apply.
    pub serving_config: ModelConfig,
    pub commands: mpsc::Sender<EngineCommand>,
    /// Row caps the new version's warm-up found, for the batch stage.
    pub feedback: mpsc::UnboundedSender<BatchFeedback>,
    /// Stops it (and drops its command sender, so the engine's queue can
    /// close for the drain).
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
        // The version last handed to the engine: its swap may still be queued
        // behind a batch, so the serving version may not show it yet.
        let mut handed_over = self.serving.get();
        loop {
            tokio::select! {
                _ = self.shutdown.recv() => return,
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
            let changed = self.serving_config.differences_from(&config);
            if !changed.is_empty() {
                // Not a refusal of the version's files: the config may be
                // put back, and the version then swapped in.
                if warned_config.as_ref() != Some(&(next, changed.clone())) {
                    let source = EngineError::Incompatible(format!(
                        "config.toml differs from the serving version's in {}; its limits, TTLs and task apply at \
                         start: restart the workers (rolling update) to serve it",
                        changed.join(", ")
                    ));
                    load::report(&Refused { version: next, reason: RefusalReason::ConfigChanged, source });
                    warned_config = Some((next, changed));
                }
                continue;
            }
            warned_config = None;
            let version = repository::version(&self.repo, &self.model, next, config);
            if let Some(refused) = self.tokenizer_changed(&version) {
                self.loader.refuse(refused, fingerprint);
                continue;
            }
            tracing::info!(from = handed_over, to = next, "loading a model version beside the serving one");
            let loaded = tokio::select! {
                _ = self.shutdown.recv() => return,
                loaded = self.loader.load(version, fingerprint, self.ctx.clone()) => loaded,
            };
            let Some(warmed) = loaded else { continue };
            for &(bucket, rows) in &warmed.warm.row_caps {
                let _ = self.feedback.send(BatchFeedback::RowCap { bucket, rows });
            }
            if self.commands.send(EngineCommand::Swap(Box::new(warmed.loaded))).await.is_err() {
                return;
            }
            handed_over = next;
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
