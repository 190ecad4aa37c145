//! One batch through the model: split where it does not fit, each request
//! answered (ok with its output and the feature-cache entry to store, or
//! `model_failed`), and the batch's shape and timing recorded.

use super::model::Model;
use super::split::RowFailure;
use crate::core::batch::Batch;
use crate::core::input::ModelInput;
use crate::core::job::{timings, Finished, Job};
use crate::metrics::{
    BATCH_SIZE, BATCH_TOKENS, INFERENCE_SECONDS, MODEL_ROWS_TOTAL, OOM_SPLITS_TOTAL, PADDING_EFFICIENCY,
    QUEUE_WAIT_SECONDS,
};
use crate::stages::cache::entry::{self, Address};
use fleet_proto::clock::now_ms;
use fleet_proto::{Answer, ErrorCode, ModelName, Namespace};
use std::time::Instant;

/// One batch's answers, what the model call took, and the row cap learnt
/// if it had to be split.
pub struct BatchRun {
    pub finished: Vec<Finished>,
    pub infer_ms: f64,
    pub row_cap: Option<usize>,
    /// Rows that failed alone for another reason than device memory.
    pub model_failures: usize,
}

impl BatchRun {
    /// Every row failed, each alone too: the requests or the model?
    pub fn all_rows_failed(&self) -> bool {
        !self.finished.is_empty() && self.model_failures == self.finished.len()
    }
}

/// Runs one batch (split on out-of-memory) and answers each request.
pub fn run_batch(
    engine: &Model,
    namespace: &Namespace,
    model: &ModelName,
    version: u64,
    batch: Batch<Job>,
) -> BatchRun {
    let started_ms = now_ms();
    let started = Instant::now();
    let rows: Vec<&ModelInput> = batch.items.iter().map(|j| &j.input).collect();
    let run = engine.infer_split(&rows);
    // A rerank request is a row per pair: what the model computed.
    let model_rows: usize = rows.iter().map(|input| input.rows()).sum();
    let computed = model_rows * batch.padded_len();
    let real: usize = rows.iter().map(|input| input.real_tokens()).sum();
    metrics::histogram!(BATCH_SIZE).record(model_rows as f64);
    metrics::histogram!(BATCH_TOKENS).record(computed as f64);
    metrics::histogram!(PADDING_EFFICIENCY).record(real as f64 / computed.max(1) as f64);
    metrics::histogram!(INFERENCE_SECONDS).record(started.elapsed().as_secs_f64());
    metrics::counter!(MODEL_ROWS_TOTAL).increment(run.rows_called as u64);
    metrics::counter!(OOM_SPLITS_TOTAL).increment(run.splits as u64);
    let infer_ms = started.elapsed().as_secs_f64() * 1000.0;
    let done_ms = now_ms();
    let row_count = rows.len().max(1) as f64;
    let model_failures = run.outputs.iter().filter(|o| matches!(o, Err(RowFailure::Failed(_)))).count();
    let finished = batch
        .items
        .into_iter()
        .zip(run.outputs)
        .map(|(job, output)| {
            let t = timings(Some(job.created_ms), Some((started_ms, infer_ms)), done_ms);
            metrics::histogram!(QUEUE_WAIT_SECONDS).record(t.queue / 1000.0);
            let (answer, feature) = match output {
                Ok(output) => {
                    let at = Address {
                        namespace,
                        model,
                        version,
                        precision: engine.precision,
                        task_tag: &engine.task_tag,
                        input_hash: &job.input_hash,
                    };
                    let feature = entry::key_value(&at, &output, infer_ms / row_count);
                    (Answer::ok(model.as_str(), version, output, t), feature)
                }
                Err(failure) => {
                    if matches!(failure, RowFailure::OutOfMemory(_)) {
                        tracing::warn!(id = %job.id, "a single row does not fit in device memory");
                    }
                    (Answer::error(model.as_str(), version, ErrorCode::ModelFailed, failure.message(), t), None)
                }
            };
            job.finished(answer, feature)
        })
        .collect();
    BatchRun { finished, infer_ms, row_cap: run.row_cap, model_failures }
}
