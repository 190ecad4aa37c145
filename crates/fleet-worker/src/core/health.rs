//! The facts the stages record about the worker for its probes: warm, the
//! engine and each stage running, when the broker and Redis last answered,
//! what is held and answered, a failing write target, a broken model, a
//! replay pending. Written by many tasks, read as one [`Facts`] snapshot
//! that `status::probes` judges.

use crate::guard::lock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Why the sink's last write failed, while it keeps failing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkProblem {
    /// `transient` or `fleet` (`sink::failure::FailureClass`).
    pub class: &'static str,
    /// redis or dlq.
    pub target: &'static str,
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct Health {
    warm: AtomicBool,
    engine_stopped: AtomicBool,
    broker_ok_ms: AtomicU64,
    redis_ok_ms: AtomicU64,
    /// Since when messages have been held without a break (0: none held).
    holding_since_ms: AtomicU64,
    /// The last answer, dead letter or local record written.
    last_answer_ms: AtomicU64,
    /// Holding messages with no answer for longer than this is a stall.
    stall_after_ms: AtomicU64,
    /// The last moment a dependency was seen failing (0: never).
    dependency_fault_ms: AtomicU64,
    /// The current failure of each write target (redis, dlq), while it lasts.
    sink_problems: Mutex<Vec<SinkProblem>>,
    stopped_stage: Mutex<Option<&'static str>>,
    /// Since when (Unix ms) and why the model fails its known-good probe.
    model_broken: Mutex<Option<(u64, String)>>,
    /// How many times the model was found broken: each time, the worker
    /// must leave its group once (the rows it left unanswered are pinned
    /// in flight until their partitions are revoked), even if it recovers
    /// before it could.
    broken_episodes: AtomicU64,
    /// Why a replay of what Redis lost has not begun yet, while it has not.
    replay_pending: Mutex<Option<String>>,
}

/// A copy of the facts at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub warm: bool,
    pub engine_stopped: bool,
    /// Unix ms of the last successful broker call; 0 = never.
    pub broker_ok_ms: u64,
    pub redis_ok_ms: u64,
    /// Unix ms since messages have been held without a break; 0 = none held.
    pub holding_since_ms: u64,
    /// Unix ms of the last answer written; 0 = none yet.
    pub last_answer_ms: u64,
    pub stall_after_ms: u64,
    /// Unix ms a dependency was last seen failing; 0 = never.
    pub dependency_fault_ms: u64,
    /// What each failing write target reports now.
    pub sink_problems: Vec<SinkProblem>,
    pub stopped_stage: Option<&'static str>,
    /// Since when (Unix ms) and why the model fails its known-good probe.
    pub model_broken: Option<(u64, String)>,
    /// Why a replay of what Redis lost has not begun yet, while it has not.
    pub replay_pending: Option<String>,
}

impl Health {
    pub fn new(stall_after_ms: u64) -> Self {
        Self { stall_after_ms: AtomicU64::new(stall_after_ms), ..Self::default() }
    }

    pub fn set_warm(&self) {
        self.warm.store(true, Ordering::Relaxed);
    }

    pub fn set_engine_stopped(&self) {
        self.engine_stopped.store(true, Ordering::Relaxed);
    }

    /// A stage task ended while the worker was still meant to run.
    pub fn set_stage_stopped(&self, stage: &'static str) {
        *lock(&self.stopped_stage) = Some(stage);
    }

    pub fn broker_answered(&self, now_ms: u64) {
        self.broker_ok_ms.store(now_ms, Ordering::Relaxed);
    }

    pub fn redis_answered(&self, now_ms: u64) {
        self.redis_ok_ms.store(now_ms, Ordering::Relaxed);
    }

    /// Whether messages are held now (the commit ledger says so on every
    /// change); the start of an unbroken holding is kept.
    pub fn set_holding(&self, holding: bool, now_ms: u64) {
        if holding {
            let _ = self.holding_since_ms.compare_exchange(0, now_ms.max(1), Ordering::Relaxed, Ordering::Relaxed);
        } else {
            self.holding_since_ms.store(0, Ordering::Relaxed);
        }
    }

    /// The sink wrote something that ends a message (an answer, a dead
    /// letter, a local record): progress.
    pub fn answered(&self, now_ms: u64) {
        self.last_answer_ms.store(now_ms, Ordering::Relaxed);
    }

    /// A dependency failed just now (a write, a report): the stall clock
    /// waits for it.
    pub fn dependency_failed(&self, now_ms: u64) {
        self.dependency_fault_ms.fetch_max(now_ms, Ordering::Relaxed);
    }

    /// `target`'s writes fail now for `problem`, or (`None`) work again.
    pub fn set_sink_problem(&self, target: &'static str, problem: Option<SinkProblem>, now_ms: u64) {
        if problem.is_some() {
            self.dependency_failed(now_ms);
        }
        let mut problems = lock(&self.sink_problems);
        problems.retain(|p| p.target != target);
        problems.extend(problem);
    }

    /// A failure no retry is expected to cure is holding a write target:
    /// reading stops until it clears.
    pub fn sink_blocked(&self) -> bool {
        lock(&self.sink_problems).iter().any(|p| p.class == "fleet")
    }

    /// The model failed its known-good probe; the start of an unbroken
    /// failure is kept, and a new one counts as an episode.
    pub fn mark_model_broken(&self, reason: String, now_ms: u64) {
        let mut broken = lock(&self.model_broken);
        let since = match broken.take() {
            Some((since, _)) => since,
            None => {
                self.broken_episodes.fetch_add(1, Ordering::Relaxed);
                now_ms
            }
        };
        *broken = Some((since, reason));
    }

    /// The model serves again (a new version swapped in).
    pub fn mark_model_recovered(&self) {
        *lock(&self.model_broken) = None;
    }

    pub fn model_broken(&self) -> bool {
        lock(&self.model_broken).is_some()
    }

    /// How many times the model was found broken so far.
    pub fn broken_episodes(&self) -> u64 {
        self.broken_episodes.load(Ordering::Relaxed)
    }

    /// A replay of what Redis lost could not begin (`Some`, why), or began.
    pub fn set_replay_pending(&self, reason: Option<String>, now_ms: u64) {
        if reason.is_some() {
            // The broker did not answer the seek: the stall clock waits.
            self.dependency_failed(now_ms);
        }
        *lock(&self.replay_pending) = reason;
    }

    /// Whether reading must stop: a write no retry cures, or a broken model.
    pub fn must_stop_reading(&self) -> bool {
        self.sink_blocked() || self.model_broken()
    }

    pub fn facts(&self) -> Facts {
        Facts {
            warm: self.warm.load(Ordering::Relaxed),
            engine_stopped: self.engine_stopped.load(Ordering::Relaxed),
            broker_ok_ms: self.broker_ok_ms.load(Ordering::Relaxed),
            redis_ok_ms: self.redis_ok_ms.load(Ordering::Relaxed),
            holding_since_ms: self.holding_since_ms.load(Ordering::Relaxed),
            last_answer_ms: self.last_answer_ms.load(Ordering::Relaxed),
            stall_after_ms: self.stall_after_ms.load(Ordering::Relaxed),
            dependency_fault_ms: self.dependency_fault_ms.load(Ordering::Relaxed),
            sink_problems: lock(&self.sink_problems).clone(),
            stopped_stage: *lock(&self.stopped_stage),
            model_broken: lock(&self.model_broken).clone(),
            replay_pending: lock(&self.replay_pending).clone(),
        }
    }
}
