//! Cancelled jobs. A client cancels a job (`ce_fleetjob`) by setting
//! `fleet:cancel:{<job>}` in Redis; workers answer the job's requests
//! `cancelled` instead of computing them from then on.
//!
//! How a worker learns of it, two ways, both an MGET of cancel keys (no
//! right beyond reading, nothing kept subscribed through a Redis failover,
//! as a pub/sub channel would be):
//!
//! - The cache stage asks about a batch's jobs before it answers feature
//!   cache hits, and the engine again right before it computes the batch
//!   ([`CancelledJobs::ask_about`], only for batches holding rows of jobs
//!   not known cancelled: interactive traffic without jobs pays nothing; a
//!   few keys in one MGET, and at most the lookup's response timeout while
//!   Redis is slow, after which the batch runs). So after a cancel only the batch already in the engine
//!   computes, no request of a cancelled job is answered `ok` from the
//!   cache, and a job's first batch is looked up before it runs.
//! - A [`CancelWatch`] asks about the jobs admitted lately every
//!   [`WATCH_INTERVAL`], so what the worker holds of a cancelled job is
//!   answered within it even while no batch of it runs (bulk waiting behind
//!   interactive work).
//!
//! What is learned goes into [`CancelledJobs`], which the stages consult
//! without I/O: admission answers the job's later messages before
//! tokenizing them, the batch stage what it holds, the cache stage and the
//! engine each batch ([`CancelledJobs::take_from`], one way for both).

use crate::core::batch::Batch;
use crate::core::job::{cancelled_answer, Finished, Job};
use crate::shutdown::Shutdown;
use fleet_connect::redis::{Connection, RedisTarget};
use fleet_proto::clock::now_ms;
use fleet_proto::{JobId, Namespace};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// How often the active jobs are looked up.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(250);
/// The most cancelled jobs remembered; the oldest learned is forgotten
/// first (a request of it admitted later is looked up again).
const REMEMBERED_JOBS: usize = 100_000;
/// The most active jobs watched; past it the least recently seen goes.
const WATCHED_JOBS: usize = 10_000;
/// A job not seen for this long is no longer watched (what the worker
/// still holds of it is: a later message of it makes it active again).
const ACTIVE_FOR_MS: u64 = 10 * 60 * 1000;
/// Keys per MGET of the watch.
const KEYS_PER_LOOKUP: usize = 1000;

/// The jobs this worker learned are cancelled, shared by the stages.
#[derive(Debug)]
pub struct CancelledJobs {
    known: Mutex<Known>,
    /// How many jobs were learned so far: holders of work look through it
    /// again only when this moved, and wait on it.
    learned: watch::Sender<u64>,
    /// Jobs admitted lately, not known to be cancelled: what the watch asks about.
    active: Mutex<HashMap<JobId, u64>>,
}

#[derive(Debug, Default)]
struct Known {
    jobs: HashSet<JobId>,
    order: VecDeque<JobId>,
}

impl Default for CancelledJobs {
    fn default() -> Self {
        Self::new()
    }
}

impl CancelledJobs {
    pub fn new() -> Self {
        Self { known: Mutex::default(), learned: watch::Sender::new(0), active: Mutex::default() }
    }

    pub fn is_known(&self, job: &JobId) -> bool {
        crate::guard::lock(&self.known).jobs.contains(job)
    }

    /// Whether `job`'s request may still be computed.
    pub fn allows(&self, job: &Job) -> bool {
        job.job_id().is_none_or(|id| !self.is_known(id))
    }

    pub fn learn(&self, jobs: impl IntoIterator<Item = JobId>) {
        let mut known = crate::guard::lock(&self.known);
        for job in jobs {
            if known.jobs.insert(job.clone()) {
                tracing::info!(job = %job, "job cancelled: its requests are answered cancelled, not computed");
                known.order.push_back(job);
                self.learned.send_modify(|learned| *learned += 1);
            }
        }
        while known.order.len() > REMEMBERED_JOBS {
            if let Some(oldest) = known.order.pop_front() {
                known.jobs.remove(&oldest);
            }
        }
    }

    /// Asks Redis once about the jobs of `items` not known to be cancelled,
    /// and learns those that are.
    pub async fn ask_about(&self, lookup: &mut CancelLookup, items: &[Job]) {
        let asked = unknown_jobs(self, items);
        if !asked.is_empty() {
            self.learn(lookup.cancelled_among(&asked).await);
        }
    }

    /// Takes the rows of cancelled jobs out of `batch`, answered
    /// `cancelled` under `version`.
    pub fn take_from(&self, batch: &mut Batch<Job>, model: &str, version: u64) -> Vec<Finished> {
        answer_cancelled(batch.remove_where(|job| !self.allows(job)), model, version)
    }

    pub fn learned(&self) -> u64 {
        *self.learned.borrow()
    }

    /// Changes each time a job is learned: what a holder of work waits on.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.learned.subscribe()
    }

    /// A request of `job` was admitted at `now_ms`: watch the job.
    pub fn note_active(&self, job: &JobId, now_ms: u64) {
        let mut active = crate::guard::lock(&self.active);
        match active.get_mut(job) {
            Some(seen) => *seen = now_ms,
            None => {
                if active.len() >= WATCHED_JOBS {
                    if let Some(oldest) = active.iter().min_by_key(|(_, &seen)| seen).map(|(job, _)| job.clone()) {
                        active.remove(&oldest);
                    }
                }
                active.insert(job.clone(), now_ms);
            }
        }
    }

    /// The jobs to ask about at `now_ms`: seen lately and not known cancelled.
    fn to_watch(&self, now_ms: u64) -> Vec<JobId> {
        let mut active = crate::guard::lock(&self.active);
        active.retain(|job, seen| now_ms.saturating_sub(*seen) < ACTIVE_FOR_MS && !self.is_known(job));
        active.keys().cloned().collect()
    }
}

/// Asks Redis which jobs are cancelled.
#[derive(Clone)]
pub struct CancelLookup {
    conn: Connection,
    namespace: Namespace,
}

/// Asks Redis about the jobs admitted lately every [`WATCH_INTERVAL`].
pub struct CancelWatch {
    pub lookup: CancelLookup,
    pub jobs: Arc<CancelledJobs>,
}

impl CancelLookup {
    pub async fn connect(redis: &RedisTarget, namespace: Namespace) -> Result<Self, redis::RedisError> {
        // Short: a batch waits for it.
        let conn = redis.managed(Duration::from_secs(1), Duration::from_millis(250)).await?;
        Ok(Self { conn, namespace })
    }

    /// The jobs among `jobs` whose cancel key exists, in one MGET (none
    /// asked for none). A failed lookup cancels nothing: the work goes on
    /// as it would have without the cancel, and the next lookup asks again.
    pub async fn cancelled_among(&mut self, jobs: &[&JobId]) -> Vec<JobId> {
        if jobs.is_empty() {
            return Vec::new();
        }
        let keys: Vec<String> = jobs.iter().map(|job| self.namespace.cancel_key(job)).collect();
        let reply: Result<Vec<Option<String>>, _> = redis::cmd("MGET").arg(&keys).query_async(&mut self.conn).await;
        match reply {
            Ok(values) => cancelled_of(jobs, &values),
            Err(e) => {
                tracing::debug!(error = %e, "cancel lookup failed; asking again next time");
                Vec::new()
            }
        }
    }
}

impl CancelWatch {
    /// Looks every interval until `shutdown`.
    pub async fn run(mut self, mut shutdown: Shutdown) {
        let mut tick = tokio::time::interval(WATCH_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.recv() => return,
                _ = tick.tick() => {}
            }
            let watched = self.jobs.to_watch(now_ms());
            for chunk in watched.chunks(KEYS_PER_LOOKUP) {
                let asked: Vec<&JobId> = chunk.iter().collect();
                let found = self.lookup.cancelled_among(&asked).await;
                self.jobs.learn(found);
            }
        }
    }
}

/// `cancelled` answers for `jobs`, computed by no one.
pub fn answer_cancelled(jobs: Vec<Job>, model: &str, version: u64) -> Vec<Finished> {
    let now = now_ms();
    jobs.into_iter().map(|job| cancelled_answer(job, model, version, now)).collect()
}

/// The distinct jobs of `jobs` not known to be cancelled: what a batch's
/// lookup asks about.
fn unknown_jobs<'a>(known: &CancelledJobs, jobs: impl IntoIterator<Item = &'a Job>) -> Vec<&'a JobId> {
    let mut seen = HashSet::new();
    jobs.into_iter().filter_map(|job| job.job_id()).filter(|id| !known.is_known(id) && seen.insert(*id)).collect()
}

/// The jobs whose key had a value, from an MGET reply in `jobs`' order (a
/// reply of another length cancels nothing).
fn cancelled_of(jobs: &[&JobId], values: &[Option<String>]) -> Vec<JobId> {
    if values.len() != jobs.len() {
        tracing::warn!(asked = jobs.len(), got = values.len(), "cancel lookup reply of the wrong length");
        return Vec::new();
    }
    jobs.iter().zip(values).filter(|(_, value)| value.is_some()).map(|(job, _)| (*job).clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(raw: &str) -> JobId {
        JobId::parse(raw).unwrap()
    }

    #[test]
    fn learned_jobs_are_known_and_counted_once() {
        let jobs = CancelledJobs::new();
        assert!(!jobs.is_known(&id("a")));
        jobs.learn([id("a"), id("a"), id("b")]);
        assert!(jobs.is_known(&id("a")) && jobs.is_known(&id("b")));
        assert_eq!(jobs.learned(), 2);
        jobs.learn([id("a")]);
        assert_eq!(jobs.learned(), 2, "learning a known job again changes nothing");
    }

    #[test]
    fn active_jobs_are_watched_until_cancelled_or_unseen() {
        let jobs = CancelledJobs::new();
        jobs.note_active(&id("a"), 1_000);
        jobs.note_active(&id("b"), 1_000);
        jobs.note_active(&id("a"), 5_000);
        let mut watched = jobs.to_watch(5_000);
        watched.sort();
        assert_eq!(watched, vec![id("a"), id("b")]);
        jobs.learn([id("b")]);
        assert_eq!(jobs.to_watch(5_000), vec![id("a")], "a cancelled job needs no more asking");
        assert!(jobs.to_watch(5_000 + ACTIVE_FOR_MS).is_empty(), "unseen for too long");
    }

    #[test]
    fn only_keys_with_a_value_cancel_and_a_wrong_reply_cancels_nothing() {
        let (a, b) = (id("a"), id("b"));
        let asked = [&a, &b];
        assert_eq!(cancelled_of(&asked, &[None, Some("1764".into())]), vec![b.clone()]);
        assert!(cancelled_of(&asked, &[Some("1".into())]).is_empty());
    }
}
