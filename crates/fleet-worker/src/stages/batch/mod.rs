//! The batch stage: the one task that owns the [`bucket::BucketBatcher`]
//! (so it needs no lock), taking jobs in, answering `expired` those that can
//! no longer be served in time, and handing batches to the cache stage.
//!
//! A batch is formed only once the stage after it can take one, from
//! everything the worker holds at that moment. Forming batches as soon as a
//! bucket was due, and waiting to hand each over before reading more jobs,
//! left the jobs read meanwhile queued outside the batcher: under load the
//! batches were cut from a few milliseconds of arrivals spread over dozens
//! of length buckets, a few rows where many would fit, and the engine paid
//! its per-call cost for every few rows.
//!
//! A version's [`Handover`] is where its batch limits begin: what the stage
//! holds when it arrives is formed into batches under the old limits and
//! sent ahead of it, so no batch mixes two versions' requests or limits.

pub mod bucket;
pub mod speed_caps;

use crate::config::BucketLimits;
use crate::core::batch::Batch;
use crate::core::batches_ahead::BatchesAhead;
use crate::core::cancel_tracking::{answer_cancelled, CancelledJobs};
use crate::core::job::{timings, Job, SinkItem};
use crate::metrics::{BATCH_ROW_CAP, TTL_DROPPED_TOTAL};
use crate::stages::engine::BatchFeedback;
use crate::stages::handover::{Handover, Piped};
use crate::stages::source::Ledger;
use bucket::BucketBatcher;
use fleet_proto::clock::now_ms;
use fleet_proto::{Answer, Lane, ModelName};
use speed_caps::{BatchTiming, SpeedCaps};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

pub struct BatchStage {
    pub model: ModelName,
    /// The first version's limits (a handover brings the next ones).
    pub limits: BucketLimits,
    /// The version whose limits apply: its requests' `expired` answers are
    /// its own, and the engine's feedback on another version's batches is
    /// not about these buckets.
    pub version: u64,
    pub jobs: mpsc::Receiver<Piped<Job>>,
    pub batches: mpsc::Sender<Piped<Batch<Job>>>,
    /// Each bucket's measured model time, and row caps learnt from splits.
    pub feedback: mpsc::UnboundedReceiver<BatchFeedback>,
    /// Where `expired` answers go.
    pub sink: mpsc::Sender<SinkItem>,
    /// Which partitions this worker owns: work of revoked ones is dropped
    /// before compute (their next owner reads it again).
    pub ledger: Arc<Ledger>,
    /// Jobs known to be cancelled: what the stage holds of one is answered
    /// `cancelled` as soon as the cancel is learned.
    pub cancelled: Arc<CancelledJobs>,
    /// The bulk lane's least share of batches while both lanes have one due.
    pub bulk_share: f64,
    /// Whether bulk rows fill interactive batches (`BucketBatcher::with_bulk_fill`).
    pub bulk_fill: bool,
    /// Batches handed on and not finished: a bulk-only batch goes only
    /// when there is none.
    pub ahead: Arc<BatchesAhead>,
    /// The share of the batch budgets in use, percent (the engine's tuning
    /// moves it: `BatchFeedback::BatchPercent`).
    pub batch_percent: u32,
    /// Whether each bucket's largest batch is chosen on the engine's
    /// timings (`speed_caps`): with the engine's tuning, on a CPU.
    pub speed_caps: bool,
}

impl BatchStage {
    pub async fn run(mut self) {
        let mut batcher = self.batcher(self.limits.clone());
        let mut speed = self.speed_caps(&batcher);
        publish_row_caps(&batcher);
        let mut open = true;
        let mut revocations_seen = self.ledger.revocations();
        let mut cancels = self.cancelled.subscribe();
        while open || !batcher.is_empty() {
            self.apply_feedback(&mut batcher, &mut speed);
            match take_waiting_jobs(&mut self.jobs, &self.ledger, &mut batcher) {
                Taken::Open => {}
                Taken::Closed => open = false,
                Taken::Handover(handover) => {
                    if !self.take_over(&mut batcher, &mut speed, handover).await {
                        return;
                    }
                    continue;
                }
            }
            let revocations = self.ledger.revocations();
            if revocations != revocations_seen {
                revocations_seen = revocations;
                self.ledger.note_dropped(batcher.retain(|job| self.ledger.is_current(&job.position)));
            }
            if cancels.has_changed().unwrap_or(false) {
                cancels.borrow_and_update();
                let cancelled = batcher.remove_where(|job| !self.cancelled.allows(job));
                if !self.answer_cancelled(cancelled).await {
                    return;
                }
            }
            let now = now_ms();
            if !self.answer_expired(batcher.expire(now), now).await {
                return;
            }
            batcher.hold_back_bulk(open && !self.ahead.is_empty());
            // Once the input is closed, whatever is held goes without waiting.
            let ready = if open { batcher.has_due_batch(now) } else { !batcher.is_empty() };
            // Bulk rows held back wait for the engine to have nothing ahead.
            let held_back = open && !self.ahead.is_empty() && batcher.holds(Lane::Bulk);
            // Ready: wait for room downstream, still taking jobs and expiring.
            // Not ready: wait for a job or for a bucket's wait to end.
            let wake = if ready { batcher.next_expiry_ms() } else { batcher.next_wake_ms(now) };
            let wait = wake.map(|at| Duration::from_millis(at.saturating_sub(now)));
            // A handover met here is taken once the select's borrows end.
            let handover = tokio::select! {
                permit = self.batches.reserve(), if ready => {
                    let Ok(permit) = permit else { return };
                    // Jobs that arrived while the engine was busy join this
                    // batch (those before a handover: the batch is the old
                    // version's).
                    let taken = take_waiting_jobs(&mut self.jobs, &self.ledger, &mut batcher);
                    open &= !matches!(taken, Taken::Closed);
                    let now = now_ms();
                    batcher.hold_back_bulk(open && !self.ahead.is_empty());
                    let polled = if open { batcher.poll(now) } else { batcher.flush(now) };
                    if !self.answer_expired(polled.expired, now).await {
                        return;
                    }
                    if let Some(batch) = polled.batch {
                        self.ahead.sent();
                        permit.send(Piped::Work(batch));
                    }
                    match taken {
                        Taken::Handover(handover) => Some(handover),
                        Taken::Open | Taken::Closed => None,
                    }
                }
                job = self.jobs.recv(), if open => match job {
                    Some(Piped::Work(job)) => {
                        push(&self.ledger, &mut batcher, job);
                        None
                    }
                    Some(Piped::Handover(handover)) => Some(handover),
                    None => {
                        open = false;
                        None
                    }
                },
                // Bulk rows are held back: they may go once nothing is ahead.
                _ = self.ahead.drained(), if held_back => None,
                // A cancel learned: what is held of the job is answered now.
                _ = cancels.changed() => None,
                _ = sleep_or_forever(wait) => None,
            };
            if let Some(handover) = handover {
                if !self.take_over(&mut batcher, &mut speed, handover).await {
                    return;
                }
            }
        }
    }

    /// Forms everything held into batches under the old version's limits
    /// and sends them, then takes the new version's limits (and the row
    /// caps its warm-up found, and a new measurement of its batch sizes) and
    /// sends its handover on behind them; false when a stage after it is gone.
    async fn take_over(
        &mut self,
        batcher: &mut BucketBatcher<Job>,
        speed: &mut Option<SpeedCaps>,
        handover: Box<Handover>,
    ) -> bool {
        while !batcher.is_empty() {
            let Ok(permit) = self.batches.reserve().await else { return false };
            let now = now_ms();
            let flushed = batcher.flush(now);
            if !self.answer_expired(flushed.expired, now).await {
                return false;
            }
            if let Some(batch) = flushed.batch {
                self.ahead.sent();
                permit.send(Piped::Work(batch));
            }
        }
        // A bucket the new version has not (its max_seq_len or buckets
        // changed) holds nothing from now on.
        for bound in batcher.limits().boundaries.iter().filter(|b| !handover.limits.boundaries.contains(b)) {
            metrics::gauge!(BATCH_ROW_CAP, "bucket" => bound.to_string()).set(0.0);
        }
        self.version = handover.version;
        *batcher = self.batcher(handover.limits.clone());
        // The new version's batches are measured afresh.
        *speed = self.speed_caps(batcher);
        for &(bucket, rows) in &handover.row_caps {
            batcher.cap_rows(bucket, rows);
        }
        publish_row_caps(batcher);
        self.batches.send(Piped::Handover(handover)).await.is_ok()
    }

    fn batcher(&self, limits: BucketLimits) -> BucketBatcher<Job> {
        BucketBatcher::new(limits)
            .with_bulk_share(self.bulk_share)
            .with_bulk_fill(self.bulk_fill)
            .with_batch_percent(self.batch_percent)
    }

    /// A new measurement of the batcher's buckets, when batch sizes are chosen.
    fn speed_caps(&self, batcher: &BucketBatcher<Job>) -> Option<SpeedCaps> {
        self.speed_caps.then(|| SpeedCaps::new(batcher.limits().boundaries.len()))
    }

    fn apply_feedback(&mut self, batcher: &mut BucketBatcher<Job>, speed: &mut Option<SpeedCaps>) {
        while let Ok(feedback) = self.feedback.try_recv() {
            match feedback {
                BatchFeedback::Timing { version, bucket, infer_ms, rows, tokens, settled_backlog }
                    if version == self.version =>
                {
                    batcher.observe_inference(bucket, infer_ms);
                    let timing = BatchTiming { bucket, rows, tokens, infer_ms, settled_backlog };
                    if let Some(decision) = speed.as_mut().and_then(|s| s.observe(timing, batcher.most_rows(bucket))) {
                        apply_speed_decision(batcher, &decision);
                    }
                }
                BatchFeedback::RowCap { version, bucket, rows } if version == self.version => {
                    batcher.cap_rows(bucket, rows);
                    publish_row_cap(batcher, bucket);
                }
                BatchFeedback::BatchPercent(percent) => {
                    // A setting of the worker, not of a version: it stays
                    // for the batchers of versions to come.
                    self.batch_percent = percent;
                    batcher.set_batch_percent(percent);
                    if let Some(speed) = speed.as_mut() {
                        speed.start_over();
                    }
                    publish_row_caps(batcher);
                }
                // About the batches of a version this stage no longer forms.
                _ => {}
            }
        }
    }

    /// Sends `expired` answers for requests the batcher gave up on; false
    /// when the sink is gone.
    async fn answer_expired(&self, expired: Vec<Job>, now: u64) -> bool {
        if expired.is_empty() {
            return true;
        }
        for job in &expired {
            metrics::counter!(TTL_DROPPED_TOTAL, "lane" => job.position.lane.as_str()).increment(1);
        }
        let version = self.version;
        let answers = expired
            .into_iter()
            .map(|job| {
                let answer = Answer::expired(self.model.as_str(), version, timings(Some(job.created_ms), None, now));
                job.finished(answer, None)
            })
            .collect();
        self.sink.send(SinkItem::Answers(answers)).await.is_ok()
    }

    /// Sends `cancelled` answers for held requests of cancelled jobs; false
    /// when the sink is gone.
    async fn answer_cancelled(&self, cancelled: Vec<Job>) -> bool {
        let answers = answer_cancelled(cancelled, self.model.as_str(), self.version);
        answers.is_empty() || self.sink.send(SinkItem::Answers(answers)).await.is_ok()
    }
}

/// Caps the decided bucket where its smaller batches were faster, and says
/// what was measured either way.
fn apply_speed_decision(batcher: &mut BucketBatcher<Job>, decision: &speed_caps::Decision) {
    let bound = batcher.limits().boundaries.get(decision.bucket).copied().unwrap_or_default();
    let (full, smaller) = (decision.full_tokens_per_s.round(), decision.smaller_tokens_per_s.round());
    match decision.cap {
        Some(rows) => {
            tracing::info!(
                bound,
                from = decision.most_rows,
                to = rows,
                full_tokens_per_s = full,
                smaller_tokens_per_s = smaller,
                "smaller batches compute faster in this bucket on this CPU: capping its rows"
            );
            batcher.cap_rows(decision.bucket, rows);
            publish_row_cap(batcher, decision.bucket);
        }
        None => tracing::info!(
            bound,
            rows = decision.most_rows,
            full_tokens_per_s = full,
            smaller_tokens_per_s = smaller,
            "full batches are as fast per token in this bucket: kept"
        ),
    }
}

/// Every bucket's row cap, as the batcher's limits name the buckets.
fn publish_row_caps(batcher: &BucketBatcher<Job>) {
    for bucket in 0..batcher.limits().boundaries.len() {
        publish_row_cap(batcher, bucket);
    }
}

fn publish_row_cap(batcher: &BucketBatcher<Job>, bucket: usize) {
    if let Some(bound) = batcher.limits().boundaries.get(bucket) {
        metrics::gauge!(BATCH_ROW_CAP, "bucket" => bound.to_string()).set(batcher.row_cap(bucket) as f64);
    }
}

/// What [`take_waiting_jobs`] stopped at.
enum Taken {
    /// The queue is empty for now.
    Open,
    /// The queue is closed and empty.
    Closed,
    /// A new version's handover: the jobs behind it are the new version's.
    Handover(Box<Handover>),
}

/// Moves every job already queued into the batcher, up to a handover.
fn take_waiting_jobs(
    jobs: &mut mpsc::Receiver<Piped<Job>>,
    ledger: &Ledger,
    batcher: &mut BucketBatcher<Job>,
) -> Taken {
    loop {
        match jobs.try_recv() {
            Ok(Piped::Work(job)) => push(ledger, batcher, job),
            Ok(Piped::Handover(handover)) => return Taken::Handover(handover),
            Err(mpsc::error::TryRecvError::Empty) => return Taken::Open,
            Err(mpsc::error::TryRecvError::Disconnected) => return Taken::Closed,
        }
    }
}

/// Holds `job` for a batch, unless its partition was revoked since it was read.
fn push(ledger: &Ledger, batcher: &mut BucketBatcher<Job>, job: Job) {
    if !ledger.is_current(&job.position) {
        ledger.note_dropped(1);
        return;
    }
    let (len, rows, deadline, lane) = (job.input.len(), job.input.rows(), job.deadline_ms, job.position.lane);
    batcher.push_in_lane(job, len, rows, deadline, now_ms(), lane);
}

async fn sleep_or_forever(wait: Option<Duration>) {
    match wait {
        Some(wait) => tokio::time::sleep(wait).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
