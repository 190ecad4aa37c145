//! The engine thread: runs batches on the serving model version, one at a
//! time, and swaps in a new version between two batches. libtorch calls
//! block, so this is a thread of its own, never a task on the runtime.
//!
//! A swap is a command in the same queue as the batches, so every batch
//! queued before it finishes on the old version and every batch after it
//! runs on the new one: answers switch version at one point. Each answer
//! carries the version that computed it.

use crate::batcher::Batch;
use crate::cache::CachedOutput;
use crate::health::Health;
use crate::lifecycle::ServingVersion;
use crate::metrics as m;
use crate::model::{Model, ModelInput};
use crate::pipeline::{timings, Job};
use crate::sink::{Finished, SinkItem};
use crate::split::RowFailure;
use fleet_proto::clock::now_ms;
use fleet_proto::{keys, Answer, ErrorCode, ModelName};
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

/// What the engine tells the batcher after a batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Feedback {
    /// How long a batch of the bucket took (which deadlines it can meet),
    /// and how long its longest-held request had been inside the worker
    /// when the batch started, read at `first_read_ms` (the adaptive
    /// in-flight limit's signal).
    Timing { bucket: usize, infer_ms: f64, held_ms: f64, first_read_ms: u64 },
    /// A batch of the bucket fitted in device memory only with this many
    /// rows: later batches hold no more.
    RowCap { bucket: usize, rows: usize },
}

/// Marks the engine stopped however its thread ends (a panic included), so
/// liveness fails instead of a worker that reads and never answers.
struct EngineStopped(Arc<Health>);

impl Drop for EngineStopped {
    fn drop(&mut self) {
        self.0.set_engine_stopped();
    }
}

pub struct EngineThread {
    pub model: ModelName,
    /// libtorch intra-op threads of this thread's model calls.
    pub threads: i32,
    /// Time spent running batches, µs (the drain rate divides by it).
    pub busy_us: Arc<AtomicU64>,
    pub serving: ServingVersion,
    pub health: Arc<Health>,
    pub commands: mpsc::Receiver<EngineCommand>,
    pub sink: mpsc::Sender<SinkItem>,
    pub feedback: mpsc::UnboundedSender<Feedback>,
}

impl EngineThread {
    /// Serves `first` until the command queue closes.
    pub fn spawn(self, first: Loaded) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new().name("engine".into()).spawn(move || self.serve(first))
    }

    fn serve(mut self, first: Loaded) {
        let _stopped = EngineStopped(self.health.clone());
        tch::set_num_threads(self.threads);
        tracing::info!(threads = self.threads, version = first.version, "engine serving");
        let mut current = first;
        self.serving.set(current.version, current.model.precision);
        let version_gauge = metrics::gauge!(m::MODEL_VERSION, "model" => self.model.to_string());
        version_gauge.set(current.version as f64);
        m::set_precision(self.model.as_str(), current.model.precision);
        while let Some(command) = self.commands.blocking_recv() {
            match command {
                EngineCommand::Run(batch) => {
                    let bucket = batch.bucket;
                    let first_read_ms = batch.items.iter().map(|job| job.read_ms).min().unwrap_or_else(now_ms);
                    let held_ms = now_ms().saturating_sub(first_read_ms) as f64;
                    let started = Instant::now();
                    let ran = run_batch(&current.model, &self.model, current.version, batch);
                    self.busy_us.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                    let _ =
                        self.feedback.send(Feedback::Timing { bucket, infer_ms: ran.infer_ms, held_ms, first_read_ms });
                    if let Some(rows) = ran.row_cap {
                        tracing::warn!(bucket, rows, "a batch ran out of device memory; capping the bucket");
                        let _ = self.feedback.send(Feedback::RowCap { bucket, rows });
                    }
                    if self.sink.blocking_send(SinkItem::Answers(ran.finished)).is_err() {
                        return;
                    }
                }
                EngineCommand::Swap(next) => {
                    let old = std::mem::replace(&mut current, *next);
                    self.serving.set(current.version, current.model.precision);
                    version_gauge.set(current.version as f64);
                    m::set_precision(self.model.as_str(), current.model.precision);
                    metrics::counter!(m::MODEL_SWAPS_TOTAL, "model" => self.model.to_string()).increment(1);
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

/// One batch's answers, what the model call took, and the row cap learnt
/// if it had to be split.
pub struct BatchRun {
    pub finished: Vec<Finished>,
    pub infer_ms: f64,
    pub row_cap: Option<usize>,
}

/// Runs one batch (split on out-of-memory) and answers each request.
pub fn run_batch(engine: &Model, model: &ModelName, version: u64, batch: Batch<Job>) -> BatchRun {
    let started_ms = now_ms();
    let started = Instant::now();
    let rows: Vec<&ModelInput> = batch.items.iter().map(|j| &j.input).collect();
    let run = engine.infer_split(&rows);
    let precision = engine.precision.as_str();
    let label = model.to_string();
    metrics::histogram!(m::BATCH_SIZE, "model" => label.clone()).record(rows.len() as f64);
    metrics::histogram!(m::BATCH_TOKENS, "model" => label.clone()).record(batch.computed_tokens() as f64);
    metrics::histogram!(m::PADDING_EFFICIENCY, "model" => label.clone()).record(batch.padding_efficiency());
    metrics::histogram!(m::INFERENCE_SECONDS, "model" => label.clone()).record(started.elapsed().as_secs_f64());
    metrics::counter!(m::MODEL_ROWS_TOTAL, "model" => label.clone()).increment(run.rows_called as u64);
    metrics::counter!(m::OOM_SPLITS_TOTAL, "model" => label.clone()).increment(run.splits as u64);
    let infer_ms = started.elapsed().as_secs_f64() * 1000.0;
    let done_ms = now_ms();
    let row_count = rows.len().max(1) as f64;
    let finished = batch
        .items
        .into_iter()
        .zip(run.outputs)
        .map(|(job, output)| {
            let t = timings(job.created_ms, Some((started_ms, infer_ms)), done_ms);
            metrics::histogram!(m::QUEUE_WAIT_SECONDS, "model" => label.clone()).record(t.queue / 1000.0);
            let (answer, feature) = match output {
                Ok(output) => {
                    let cached = CachedOutput { output: output.clone(), infer_ms: infer_ms / row_count };
                    let feature = serde_json::to_string(&cached)
                        .ok()
                        .map(|value| (keys::feature_key(model, version, precision, &job.input_hash), value));
                    (Answer::ok(model.as_str(), version, output, t), feature)
                }
                Err(failure) => {
                    if matches!(failure, RowFailure::OutOfMemory(_)) {
                        tracing::warn!(id = %job.id, "a single row does not fit in device memory");
                    }
                    (Answer::error(model.as_str(), version, ErrorCode::ModelFailed, failure.message(), t), None)
                }
            };
            Finished { position: job.position, id: job.id, answer, feature }
        })
        .collect();
    BatchRun { finished, infer_ms, row_cap: run.row_cap }
}
