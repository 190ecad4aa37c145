//! The batch stage: the one task that owns the [`bucket::BucketBatcher`]
//! (so it needs no lock), taking jobs in, answering `expired` those that can
//! no longer be served in time, and handing batches to the cache stage.
//!
//! A batch is formed only once the stage after it can take one, from
//! everything the worker holds at that moment. Forming batches as soon as a
//! bucket was due, and waiting to hand each over before reading more jobs,
//! left the jobs read meanwhile queued outside the batcher: under load the
//! batches were cut from a few milliseconds of arrivals spread over dozens
//! of length buckets (2–13 rows where 32 would fit), and the engine paid its
//! per-call cost for every few rows.

pub mod bucket;

use crate::job::{timings, Finished, Job, SinkItem};
use crate::metrics::{BATCH_ROW_CAP, TTL_DROPPED_TOTAL};
use crate::serving::ServingVersion;
use crate::stages::engine::BatchFeedback;
use crate::stages::source::Ledger;
use bucket::{Batch, BucketBatcher, BucketLimits};
use fleet_proto::clock::now_ms;
use fleet_proto::{Answer, ModelName};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

pub struct BatchStage {
    pub model: ModelName,
    pub serving: ServingVersion,
    pub limits: BucketLimits,
    pub jobs: mpsc::Receiver<Job>,
    pub batches: mpsc::Sender<Batch<Job>>,
    /// Each bucket's measured model time, and row caps learnt from splits.
    pub feedback: mpsc::UnboundedReceiver<BatchFeedback>,
    /// Where `expired` answers go.
    pub sink: mpsc::Sender<SinkItem>,
    /// Which partitions this worker owns: work of revoked ones is dropped
    /// before compute (their next owner reads it again).
    pub ledger: Arc<Ledger>,
}

impl BatchStage {
    pub async fn run(mut self) {
        let mut batcher: BucketBatcher<Job> = BucketBatcher::new(self.limits.clone());
        for bucket in 0..self.limits.boundaries.len() {
            self.publish_row_cap(&batcher, bucket);
        }
        let mut open = true;
        let mut revocations_seen = self.ledger.revocations();
        while open || !batcher.is_empty() {
            self.apply_feedback(&mut batcher);
            open &= take_waiting_jobs(&mut self.jobs, &self.ledger, &mut batcher);
            let revocations = self.ledger.revocations();
            if revocations != revocations_seen {
                revocations_seen = revocations;
                self.ledger.note_dropped(batcher.retain(|job| self.ledger.is_current(&job.position)));
            }
            let now = now_ms();
            if !self.answer_expired(batcher.expire(now), now).await {
                return;
            }
            // Once the input is closed, whatever is held goes without waiting.
            let ready = if open { batcher.has_due_batch(now) } else { !batcher.is_empty() };
            // Ready: wait for room downstream, still taking jobs and expiring.
            // Not ready: wait for a job or for a bucket's wait to end.
            let wake = if ready { batcher.next_expiry_ms() } else { batcher.next_wake_ms(now) };
            let wait = wake.map(|at| Duration::from_millis(at.saturating_sub(now)));
            tokio::select! {
                permit = self.batches.reserve(), if ready => {
                    let Ok(permit) = permit else { return };
                    // Jobs that arrived while the engine was busy join this batch.
                    open &= take_waiting_jobs(&mut self.jobs, &self.ledger, &mut batcher);
                    let now = now_ms();
                    let polled = if open { batcher.poll(now) } else { batcher.flush(now) };
                    if !self.answer_expired(polled.expired, now).await {
                        return;
                    }
                    if let Some(batch) = polled.batch {
                        permit.send(batch);
                    }
                }
                job = self.jobs.recv(), if open => match job {
                    Some(job) => push(&self.ledger, &mut batcher, job),
                    None => open = false,
                },
                _ = sleep_or_forever(wait) => {}
            }
        }
    }

    fn apply_feedback(&mut self, batcher: &mut BucketBatcher<Job>) {
        while let Ok(feedback) = self.feedback.try_recv() {
            match feedback {
                BatchFeedback::Timing { bucket, infer_ms } => batcher.observe_inference(bucket, infer_ms),
                BatchFeedback::RowCap { bucket, rows } => {
                    batcher.cap_rows(bucket, rows);
                    self.publish_row_cap(batcher, bucket);
                }
            }
        }
    }

    fn publish_row_cap(&self, batcher: &BucketBatcher<Job>, bucket: usize) {
        if let Some(bound) = self.limits.boundaries.get(bucket) {
            metrics::gauge!(BATCH_ROW_CAP, "bucket" => bound.to_string()).set(batcher.row_cap(bucket) as f64);
        }
    }

    /// Sends `expired` answers for requests the batcher gave up on; false
    /// when the sink is gone.
    async fn answer_expired(&self, expired: Vec<Job>, now: u64) -> bool {
        if expired.is_empty() {
            return true;
        }
        metrics::counter!(TTL_DROPPED_TOTAL).increment(expired.len() as u64);
        let version = self.serving.get();
        let answers = expired
            .into_iter()
            .map(|job| Finished {
                answer: Answer::expired(self.model.as_str(), version, timings(Some(job.created_ms), None, now)),
                position: job.position,
                id: job.id,
                feature: None,
            })
            .collect();
        self.sink.send(SinkItem::Answers(answers)).await.is_ok()
    }
}

/// Moves every job already queued into the batcher; false once the queue is
/// closed and empty.
fn take_waiting_jobs(jobs: &mut mpsc::Receiver<Job>, ledger: &Ledger, batcher: &mut BucketBatcher<Job>) -> bool {
    loop {
        match jobs.try_recv() {
            Ok(job) => push(ledger, batcher, job),
            Err(mpsc::error::TryRecvError::Empty) => return true,
            Err(mpsc::error::TryRecvError::Disconnected) => return false,
        }
    }
}

/// Holds `job` for a batch, unless its partition was revoked since it was read.
fn push(ledger: &Ledger, batcher: &mut BucketBatcher<Job>, job: Job) {
    if !ledger.is_current(&job.position) {
        ledger.note_dropped(1);
        return;
    }
    let (len, rows, deadline) = (job.input.len(), job.input.rows(), job.deadline_ms);
    batcher.push_rows(job, len, rows, deadline, now_ms());
}

async fn sleep_or_forever(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}
