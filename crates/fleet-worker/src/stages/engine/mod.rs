//! The engine stage: a thread of its own (libtorch calls block, never on
//! the async runtime) that runs batches on the serving model version, one at
//! a time, and swaps in a new version between two batches.
//!
//! A swap is a command in the same queue as the batches, so every batch
//! queued before it finishes on the old version and every batch after it
//! runs on the new one: answers switch version at one point. Each answer
//! carries the version that computed it.
//!
//! Inside: [`model`] (the served model of either kind, its signature check,
//! precision and warm-up), [`input`] (a request's input and its rows),
//! [`answer`] (outputs by task), [`torch`] (the tch wrappers),
//! [`head`] (pooling, activation), [`labels`] (a classifier's labels and
//! top-k), [`split`] (halving a batch that does not fit), [`memory`] (what
//! a batch needs), [`precision`] (bf16, fp16 or fp32), [`batch_run`] (one
//! batch's answers), [`error`].

pub mod answer;
pub mod batch_run;
pub mod error;
pub mod head;
pub mod input;
pub mod labels;
pub mod memory;
pub mod model;
pub mod precision;
pub mod split;
pub mod torch;

use crate::job::{Job, SinkItem};
use crate::metrics::{MODEL_PRECISION, MODEL_SWAPS_TOTAL, MODEL_VERSION};
use crate::serving::ServingVersion;
use crate::stages::batch::bucket::Batch;
use crate::status::health::Health;
use batch_run::run_batch;
use fleet_proto::clock::now_ms;
use fleet_proto::{ModelName, Namespace};
use model::Model;
use precision::Precision;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// A loaded and warmed-up version, ready to serve.
pub struct Loaded {
    pub model: Model,
    pub version: u64,
}

pub enum EngineCommand {
    Run(Batch<Job>),
    /// Serve this version from the next batch on.
    Swap(Box<Loaded>),
}

/// What the engine tells the batch stage after a batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BatchFeedback {
    /// How long a batch of the bucket took: which deadlines it can meet.
    Timing { bucket: usize, infer_ms: f64 },
    /// A batch of the bucket fitted in device memory only with this many
    /// rows: later batches hold no more.
    RowCap { bucket: usize, rows: usize },
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
}

impl EngineStage {
    /// Serves `first` on a thread of its own until the command queue closes.
    pub fn spawn(self, first: Loaded) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new().name("engine".into()).spawn(move || self.run(first))
    }

    fn run(mut self, first: Loaded) {
        let _stopped = EngineStopped(self.health.clone());
        tch::set_num_threads(self.threads);
        tracing::info!(threads = self.threads, version = first.version, "engine serving");
        let mut current = first;
        announce(&self.serving, &current);
        while let Some(command) = self.commands.blocking_recv() {
            match command {
                EngineCommand::Run(batch) => {
                    let bucket = batch.bucket;
                    let first_read_ms = batch.items.iter().map(|job| job.read_ms).min().unwrap_or_else(now_ms);
                    let held_ms = now_ms().saturating_sub(first_read_ms) as f64;
                    let started = Instant::now();
                    let ran = run_batch(&current.model, &self.namespace, &self.model, current.version, batch);
                    self.busy_us.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                    let _ = self.batch_feedback.send(BatchFeedback::Timing { bucket, infer_ms: ran.infer_ms });
                    let _ = self.held_feedback.send(HeldFeedback { held_ms, first_read_ms });
                    if let Some(rows) = ran.row_cap {
                        tracing::warn!(bucket, rows, "a batch ran out of device memory; capping the bucket");
                        let _ = self.batch_feedback.send(BatchFeedback::RowCap { bucket, rows });
                    }
                    if self.sink.blocking_send(SinkItem::Answers(ran.finished)).is_err() {
                        return;
                    }
                }
                EngineCommand::Swap(next) => {
                    let old = std::mem::replace(&mut current, *next);
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
