//! The feature cache: model outputs kept in Redis by the exact model input,
//! so a repeated input is answered without compute.
//!
//! Key: `fleet:feat:<model>:<version>:<precision>:<hash of the token ids or
//! pixels>`, with the version's `feature_ttl_s`. The version and precision
//! are part of the key: a new model version (or the same one computed in
//! another precision) reads and writes new keys, and the old ones age out
//! on their TTL, with no flush and no stampede ([`entry`]: the key and what
//! is stored). Before a batch is computed its inputs are looked up in one
//! MGET; hits are answered at once, misses computed, and their outputs
//! stored in the same round trip as their answers. A lookup that fails (Redis away) counts as all misses: the cache may make the
//! worker faster, never stop it.

pub mod entry;

use crate::core::batch::Batch;
use crate::core::batches_ahead::BatchesAhead;
use crate::core::cancel_tracking::{CancelLookup, CancelledJobs};
use crate::core::job::{timings, Finished, Job, SinkItem};
use crate::core::precision::Precision;
use crate::metrics::{CACHE_HITS_TOTAL, CACHE_MISSES_TOTAL, CACHE_SAVED_SECONDS};
use crate::stages::engine::EngineCommand;
use crate::stages::handover::{Handover, Piped};
use crate::stages::source::Ledger;
use entry::{Address, CachedOutput};
use fleet_connect::redis::{Connection, RedisTarget};
use fleet_proto::clock::now_ms;
use fleet_proto::{Answer, ModelName, Namespace};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

pub struct FeatureCache {
    conn: Connection,
    namespace: Namespace,
    model: ModelName,
    /// The served task's `TaskConfig::tag`.
    task_tag: String,
}

impl FeatureCache {
    pub async fn connect(
        redis: &RedisTarget,
        namespace: Namespace,
        model: ModelName,
        task_tag: String,
    ) -> Result<Self, redis::RedisError> {
        // Short: a slow cache must not slow the batch more than it could save.
        let conn = redis.managed(Duration::from_secs(1), Duration::from_millis(250)).await?;
        Ok(Self { conn, namespace, model, task_tag })
    }

    /// Looks up under a new version's task from now on.
    pub fn set_task_tag(&mut self, task_tag: String) {
        self.task_tag = task_tag;
    }

    pub fn key(&self, version: u64, precision: Precision, input_hash: &str) -> String {
        Address {
            namespace: &self.namespace,
            model: &self.model,
            version,
            precision,
            task_tag: &self.task_tag,
            input_hash,
        }
        .key()
    }

    /// One MGET for a batch under the keys of `version` in `precision`;
    /// `None` for misses, unreadable entries and errors.
    pub async fn lookup(&mut self, version: u64, precision: Precision, hashes: &[&str]) -> Vec<Option<CachedOutput>> {
        if hashes.is_empty() {
            return Vec::new();
        }
        let keys: Vec<String> = hashes.iter().map(|h| self.key(version, precision, h)).collect();
        let reply: Result<Vec<Option<String>>, _> = redis::cmd("MGET").arg(&keys).query_async(&mut self.conn).await;
        if let Err(e) = &reply {
            tracing::warn!(error = %e, "feature cache lookup failed; computing the batch");
        }
        outputs_of(reply.ok(), hashes.len())
    }
}

/// The cached outputs of an MGET reply, one per key asked for. A reply
/// of another length (or none: Redis away) counts as all misses: zipped
/// with the batch, a short reply would drop jobs still counted in flight,
/// pinning their partition's commit.
fn outputs_of(reply: Option<Vec<Option<String>>>, asked: usize) -> Vec<Option<CachedOutput>> {
    match reply {
        Some(values) if values.len() == asked => {
            values.into_iter().map(|v| v.and_then(|json| serde_json::from_str(&json).ok())).collect()
        }
        Some(values) => {
            tracing::warn!(asked, got = values.len(), "feature cache reply of the wrong length; computing the batch");
            vec![None; asked]
        }
        None => vec![None; asked],
    }
}

/// The stage between the batch stage and the engine: answers what the
/// feature cache already has, hands the rest on as a smaller batch of the
/// same bucket. A version's handover passes it on its way to the engine:
/// the batches behind it are looked up under the new version's keys.
pub struct CacheStage {
    pub batches: mpsc::Receiver<Piped<Batch<Job>>>,
    pub engine: mpsc::Sender<EngineCommand>,
    pub sink: mpsc::Sender<SinkItem>,
    pub cache: FeatureCache,
    /// The version (and precision) the batches it hands on will run on:
    /// their feature-cache keys and hits' answers are that version's.
    pub version: (u64, Precision),
    pub ledger: Arc<Ledger>,
    /// Jobs known to be cancelled: their rows are answered `cancelled`, not
    /// looked up (a hit must not answer `ok` for a cancelled job).
    pub cancelled: Arc<CancelledJobs>,
    /// Asks Redis about the batch's jobs not known to be cancelled.
    pub cancel_lookup: CancelLookup,
    /// A batch answered here without the engine is finished here.
    pub ahead: Arc<BatchesAhead>,
}

impl CacheStage {
    pub async fn run(mut self) {
        while let Some(piped) = self.batches.recv().await {
            let mut batch = match piped {
                Piped::Work(batch) => batch,
                Piped::Handover(handover) => {
                    if !self.take_over(handover).await {
                        return;
                    }
                    continue;
                }
            };
            // The last look before compute: a rebalance may have come since
            // the batch was formed.
            self.ledger.note_dropped(batch.retain(|job| self.ledger.is_current(&job.position)));
            let cancelled = self.drop_cancelled(&mut batch).await;
            if !cancelled.is_empty() && self.sink.send(SinkItem::Answers(cancelled)).await.is_err() {
                return;
            }
            if batch.items.is_empty() {
                self.ahead.finished();
                continue;
            }
            let (hits, misses) = self.split(batch).await;
            if !hits.is_empty() && self.sink.send(SinkItem::Answers(hits)).await.is_err() {
                return;
            }
            if misses.items.is_empty() {
                self.ahead.finished();
            } else if self.engine.send(EngineCommand::Run(misses)).await.is_err() {
                return;
            }
        }
    }

    /// Takes the requests of cancelled jobs out of `batch` and answers them.
    async fn drop_cancelled(&mut self, batch: &mut Batch<Job>) -> Vec<Finished> {
        self.cancelled.ask_about(&mut self.cancel_lookup, &batch.items).await;
        self.cancelled.take_from(batch, self.cache.model.as_str(), self.version.0)
    }

    /// Looks up under the new version from the next batch on, and hands
    /// its module to the engine; false when the engine is gone.
    async fn take_over(&mut self, mut handover: Box<Handover>) -> bool {
        self.version = (handover.version, handover.precision);
        self.cache.set_task_tag(std::mem::take(&mut handover.task_tag));
        match handover.loaded.take() {
            Some(loaded) => self.engine.send(EngineCommand::Swap(Box::new(loaded))).await.is_ok(),
            None => true,
        }
    }

    /// The batch's hits, answered, and its misses, still a batch.
    async fn split(&mut self, batch: Batch<Job>) -> (Vec<Finished>, Batch<Job>) {
        let hashes: Vec<&str> = batch.items.iter().map(|j| j.input_hash.as_str()).collect();
        // Hits are answered with the version whose keys they came from.
        let (version, precision) = self.version;
        let found = self.cache.lookup(version, precision, &hashes).await;
        let now = now_ms();
        let mut hits = Vec::new();
        let mut misses = Batch { bucket: batch.bucket, items: Vec::new(), lens: Vec::new() };
        for ((job, len), cached) in batch.items.into_iter().zip(batch.lens).zip(found) {
            match cached {
                Some(CachedOutput { output, infer_ms }) => {
                    metrics::histogram!(CACHE_SAVED_SECONDS).record(infer_ms / 1000.0);
                    let t = timings(Some(job.created_ms), Some((now, 0.0)), now);
                    let answer = Answer::ok(self.cache.model.as_str(), version, output, t);
                    hits.push(job.finished(answer, None));
                }
                None => {
                    misses.items.push(job);
                    misses.lens.push(len);
                }
            }
        }
        metrics::counter!(CACHE_HITS_TOTAL).increment(hits.len() as u64);
        metrics::counter!(CACHE_MISSES_TOTAL).increment(misses.items.len() as u64);
        (hits, misses)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(infer_ms: f64) -> Option<String> {
        Some(serde_json::to_string(&CachedOutput { output: serde_json::json!([1.0]), infer_ms }).unwrap())
    }

    #[test]
    fn a_reply_of_the_right_length_gives_hits_and_misses_in_order() {
        let found = outputs_of(Some(vec![entry(2.0), None, Some("not json".into())]), 3);
        assert_eq!(found.len(), 3);
        assert_eq!(found[0].as_ref().map(|c| c.infer_ms), Some(2.0));
        assert!(found[1].is_none() && found[2].is_none());
    }

    #[test]
    fn a_short_long_or_missing_reply_is_all_misses_never_fewer_rows() {
        for reply in [Some(vec![entry(1.0)]), Some(vec![entry(1.0), entry(1.0), entry(1.0)]), Some(vec![]), None] {
            let found = outputs_of(reply, 2);
            assert_eq!(found.len(), 2, "every job of the batch keeps a slot");
            assert!(found.iter().all(Option::is_none));
        }
    }
}
