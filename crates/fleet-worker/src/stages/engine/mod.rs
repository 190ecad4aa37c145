//! The engine stage: a thread of its own (libtorch calls block, never on
//! the async runtime) that runs batches on the serving model version, one at
//! a time, and swaps in a new version between two batches.
//!
//! A batch whose every row fails, alone too, is either bad requests or a
//! broken model (a sticky device fault fails every call). The version's
//! known-good probe (its warm-up input) tells which: when it fails too, the
//! rows are not answered (their offsets stay uncommitted), the worker reads
//! nothing more, leaves its group so the partitions move to a healthy
//! member (the status reporter), and reports broken (`/ready` at once,
//! `/healthz` after the stall bound: a restart is what cures a device
//! context). Batches still queued are left unanswered too (their
//! partitions are being revoked). A new version swapped in serves again
//! and the worker rejoins. When the probe passes, the rows really are bad
//! and are answered `model_failed`.
//!
//! A swap is a command in the same queue as the batches (the end of a
//! version's handover, `stages::handover`), so every batch queued before
//! it finishes on the old version and every batch after it runs on the new
//! one: answers switch version at one point. Each answer carries the
//! version that computed it.
//!
//! Inside: [`model`] (the served model of either kind, its signature check,
//! precision and warm-up), [`answer`] (outputs by task), [`torch`] (the tch wrappers),
//! [`head`] (pooling, activation), [`labels`] (a classifier's labels and
//! top-k), [`split`] (halving a batch that does not fit), [`memory`] (what
//! a batch needs), [`precision_choice`] (bf16, fp16 or fp32), [`batch_run`] (one
//! batch's answers), [`tuning`] (threads and batch share, chosen on live
//! traffic), [`error`].

pub mod answer;
pub mod batch_run;
pub mod error;
pub mod head;
pub mod labels;
pub mod memory;
pub mod model;
pub mod precision_choice;
pub mod split;
pub mod torch;
pub mod tuning;

use crate::core::batch::Batch;
use crate::core::batches_ahead::{BatchesAhead, FinishOnDrop};
use crate::core::cancel_tracking::{CancelLookup, CancelledJobs};
use crate::core::health::Health;
use crate::core::input::ModelInput;
use crate::core::job::{Job, SinkItem};
use crate::core::precision::Precision;
use crate::core::serving::ServingVersion;
use crate::metrics::{
    ENGINE_BATCH_PERCENT, ENGINE_INTRA_OP_THREADS, ENGINE_TUNED_ROWS_PER_SECOND, MODEL_BROKEN, MODEL_PRECISION,
    MODEL_SWAPS_TOTAL, MODEL_VERSION,
};
use batch_run::run_batch;
use fleet_proto::clock::now_ms;
use fleet_proto::{Lane, ModelName, Namespace};
use model::Model;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;
use tokio::sync::mpsc;
use tuning::{Change, Setting, Tuner};

/// A loaded and warmed-up version, ready to serve.
pub struct Loaded {
    pub model: Model,
    pub version: u64,
    /// The known-good input the version was warmed up on: a failure of the
    /// model on it is the model's (or the device's), not a request's.
    pub probe: ModelInput,
}

impl Loaded {
    /// Runs the known-good probe; the failure's message when it fails.
    fn probe(&self) -> Result<(), String> {
        match self.model.infer_split(&[&self.probe]).outputs.pop() {
            Some(Ok(_)) => Ok(()),
            Some(Err(failure)) => Err(failure.message()),
            None => Err("the probe gave no output".into()),
        }
    }
}

pub enum EngineCommand {
    Run(Batch<Job>),
    /// Serve this version from the next batch on.
    Swap(Box<Loaded>),
}

/// What the engine tells the batch stage after a batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BatchFeedback {
    /// How long a batch of the bucket took on the version: which deadlines
    /// it can meet, and (with its rows, real tokens and whether it ran
    /// under a backlog with the tuning settled) which batch size computes
    /// fastest (`batch::speed_caps`).
    Timing { version: u64, bucket: usize, infer_ms: f64, rows: usize, tokens: usize, settled_backlog: bool },
    /// A batch of the bucket fitted in device memory only with this many
    /// rows on the version: later batches hold no more.
    RowCap { version: u64, bucket: usize, rows: usize },
    /// Batches use this percent of every bucket's row and token budgets
    /// from now on, whatever the version (the engine's tuning).
    BatchPercent(u32),
}

/// What the engine tells the reading stage after a batch: how long its
/// longest-held request had been inside the worker when the batch started,
/// read at `first_read_ms` (the adaptive in-flight limit's signal).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeldFeedback {
    pub held_ms: f64,
    pub first_read_ms: u64,
}

/// Marks the engine stopped however its thread ends (a panic included), so
/// liveness fails instead of a worker that reads and never answers.
struct EngineStopped(Arc<Health>);

impl Drop for EngineStopped {
    fn drop(&mut self) {
        self.0.set_engine_stopped();
    }
}

pub struct EngineStage {
    pub model: ModelName,
    /// Names the feature-cache entries of what is computed.
    pub namespace: Namespace,
    /// libtorch intra-op threads of this thread's model calls.
    pub threads: i32,
    /// Time spent running batches, µs (the drain rate divides by it).
    pub busy_us: Arc<AtomicU64>,
    pub serving: ServingVersion,
    pub health: Arc<Health>,
    pub commands: mpsc::Receiver<EngineCommand>,
    pub sink: mpsc::Sender<SinkItem>,
    pub batch_feedback: mpsc::UnboundedSender<BatchFeedback>,
    pub held_feedback: mpsc::UnboundedSender<HeldFeedback>,
    /// The last look before compute: rows of a job cancelled since the
    /// batch was formed are answered, not computed.
    pub cancelled: Arc<CancelledJobs>,
    /// Asks Redis about a batch's jobs right before it runs; set once Redis
    /// answers (until then, what is known is what counts).
    pub cancel_lookup: Arc<OnceLock<CancelLookup>>,
    /// Where that lookup runs: the engine's own thread is no runtime's.
    pub runtime: tokio::runtime::Handle,
    /// Told when each batch is finished, however it ends.
    pub ahead: Arc<BatchesAhead>,
    /// Chooses the threads and the batch share on live traffic (`tuning`);
    /// done from the start when both are fixed.
    pub tuner: Tuner,
    /// Whether the worker holds more work than the engine takes at once:
    /// only then do its rows per wall second measure a setting.
    pub backlog: Box<dyn Fn() -> bool + Send>,
}

impl EngineStage {
    /// Serves `first` on a thread of its own until the command queue closes.
    pub fn spawn(self, first: Loaded) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new().name("engine".into()).spawn(move || self.run(first))
    }

    fn run(mut self, first: Loaded) {
        let _stopped = EngineStopped(self.health.clone());
        tch::set_num_threads(self.threads);
        metrics::gauge!(ENGINE_INTRA_OP_THREADS).set(f64::from(self.threads));
        metrics::gauge!(ENGINE_BATCH_PERCENT).set(100.0);
        for candidate in self.tuner.candidates() {
            let (knob, value) = candidate.label();
            metrics::gauge!(ENGINE_TUNED_ROWS_PER_SECOND, "knob" => knob, "value" => value).set(0.0);
        }
        tracing::info!(
            threads = self.threads,
            version = first.version,
            tuning = !self.tuner.is_done(),
            "engine serving"
        );
        let clock = Instant::now();
        let mut current = first;
        announce(&self.serving, &current);
        let mut broken = false;
        while let Some(command) = self.commands.blocking_recv() {
            match command {
                EngineCommand::Run(mut batch) => {
                    let _finished = FinishOnDrop(&self.ahead);
                    if broken {
                        // Unanswered: the next owner of the partition computes it.
                        tracing::debug!(rows = batch.items.len(), "model broken; batch left unanswered");
                        continue;
                    }
                    if !self.answer_cancelled(&mut batch, current.version) {
                        return;
                    }
                    if batch.items.is_empty() {
                        continue;
                    }
                    let bucket = batch.bucket;
                    // Interactive rows only: bulk ones wait behind them by
                    // design, and their waits must not shrink the in-flight
                    // limit that interactive requests are read under.
                    let first_read_ms = batch
                        .items
                        .iter()
                        .filter(|job| job.position.lane == Lane::Interactive)
                        .map(|job| job.read_ms)
                        .min();
                    let rows = batch.items.iter().map(|job| job.input.rows()).sum();
                    let tokens = batch.items.iter().map(|job| job.input.real_tokens()).sum();
                    // The ledger's lock once a batch (held briefly by reads
                    // and answers): the batch sizes are measured after the
                    // tuning, for as long as the worker runs.
                    let backlog = (self.backlog)();
                    let settled_backlog = backlog && self.tuner.is_done();
                    if !self.tuner.is_done() {
                        let at_ms = clock.elapsed().as_secs_f64() * 1000.0;
                        if let Some(change) = self.tuner.observe(at_ms, rows, backlog) {
                            self.apply_tuning(change);
                        }
                    }
                    let (started, started_ms) = (Instant::now(), now_ms());
                    let ran = run_batch(&current.model, &self.namespace, &self.model, current.version, batch);
                    self.busy_us.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                    let version = current.version;
                    let infer_ms = ran.infer_ms;
                    let timing = BatchFeedback::Timing { version, bucket, infer_ms, rows, tokens, settled_backlog };
                    let _ = self.batch_feedback.send(timing);
                    if let Some(first_read_ms) = first_read_ms {
                        let held_ms = started_ms.saturating_sub(first_read_ms) as f64;
                        let _ = self.held_feedback.send(HeldFeedback { held_ms, first_read_ms });
                    }
                    if let Some(rows) = ran.row_cap {
                        tracing::warn!(bucket, rows, "a batch ran out of device memory; capping the bucket");
                        let _ = self.batch_feedback.send(BatchFeedback::RowCap { version, bucket, rows });
                    }
                    if ran.all_rows_failed() {
                        if let Err(reason) = current.probe() {
                            self.mark_broken(reason, ran.finished.len());
                            broken = true;
                            continue;
                        }
                        tracing::warn!(
                            rows = ran.finished.len(),
                            "every row failed but the probe passes: bad requests"
                        );
                    }
                    if self.sink.blocking_send(SinkItem::Answers(ran.finished)).is_err() {
                        return;
                    }
                }
                EngineCommand::Swap(next) => {
                    let old = std::mem::replace(&mut current, *next);
                    // The new version passed its warm-up: it serves.
                    if broken {
                        broken = false;
                        self.mark_recovered();
                    }
                    announce(&self.serving, &current);
                    metrics::counter!(MODEL_SWAPS_TOTAL).increment(1);
                    tracing::info!(
                        from = old.version,
                        to = current.version,
                        precision = current.model.precision.as_str(),
                        "model version swapped in"
                    );
                }
            }
        }
    }
}

impl EngineStage {
    /// Applies a setting the tuner tries or keeps; a kept one is logged
    /// with what each candidate measured.
    fn apply_tuning(&self, change: Change) {
        let setting = match change {
            Change::Try(setting) => {
                tracing::debug!(%setting, "engine tuning: trying");
                setting
            }
            Change::Rest(setting) => {
                tracing::debug!(%setting, "engine tuning: the backlog ran out; back to the resting setting");
                setting
            }
            Change::Settle { setting, rates } => {
                let measured: Vec<String> = rates.iter().map(|(s, rate)| format!("{s}: {rate:.1} rows/s")).collect();
                tracing::info!(
                    chosen = %setting,
                    measured = measured.join(", "),
                    "engine tuning: chosen on this machine's traffic"
                );
                for (candidate, rate) in rates {
                    let (knob, value) = candidate.label();
                    metrics::gauge!(ENGINE_TUNED_ROWS_PER_SECOND, "knob" => knob, "value" => value).set(rate);
                }
                setting
            }
        };
        match setting {
            Setting::Threads(threads) => {
                tch::set_num_threads(threads as i32);
                metrics::gauge!(ENGINE_INTRA_OP_THREADS).set(threads as f64);
            }
            Setting::BatchPercent(percent) => {
                let _ = self.batch_feedback.send(BatchFeedback::BatchPercent(percent));
                metrics::gauge!(ENGINE_BATCH_PERCENT).set(f64::from(percent));
            }
        }
    }

    /// Takes the rows of cancelled jobs out of `batch` and answers them,
    /// after asking Redis about its jobs not known to be cancelled; false
    /// when the sink is gone.
    fn answer_cancelled(&self, batch: &mut Batch<Job>, version: u64) -> bool {
        if let Some(lookup) = self.cancel_lookup.get() {
            let mut lookup = lookup.clone();
            self.runtime.block_on(self.cancelled.ask_about(&mut lookup, &batch.items));
        }
        let answers = self.cancelled.take_from(batch, self.model.as_str(), version);
        answers.is_empty() || self.sink.blocking_send(SinkItem::Answers(answers)).is_ok()
    }

    fn mark_broken(&self, reason: String, unanswered: usize) {
        tracing::error!(
            reason,
            unanswered,
            "the model fails its known-good probe: broken; reading stops and the partitions go to other members"
        );
        metrics::gauge!(MODEL_BROKEN).set(1.0);
        self.health.mark_model_broken(reason, now_ms());
    }

    fn mark_recovered(&self) {
        tracing::info!("a new version serves; the model is no longer broken");
        metrics::gauge!(MODEL_BROKEN).set(0.0);
        self.health.mark_model_recovered();
    }
}

/// The version serving now, for the stages that tag answers with it and
/// for the metrics.
fn announce(serving: &ServingVersion, current: &Loaded) {
    serving.set(current.version, current.model.precision);
    metrics::gauge!(MODEL_VERSION).set(current.version as f64);
    for each in Precision::ALL {
        let value = if each == current.model.precision { 1.0 } else { 0.0 };
        metrics::gauge!(MODEL_PRECISION, "precision" => each.as_str()).set(value);
    }
}
