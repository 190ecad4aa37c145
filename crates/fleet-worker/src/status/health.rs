//! What `/healthz` and `/ready` answer, from facts the stages record.
//!
//! Liveness is "a restart would help": the engine thread or a stage task has
//! died, or the worker holds messages and has written no answer (nor dead
//! letter) for longer than the stall bound: a stuck sink or engine that
//! would otherwise hold its partitions forever behind green probes.
//! Readiness is "the worker can do its job now": the model is warm, the
//! broker and Redis answered recently, and the sink is not failing to write.
//! The verdicts are pure functions of the facts and the time, so their
//! rules are tested without servers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// A dependency that has not answered for this long makes the worker
/// unready: several missed reports (they run every second), not one blip.
pub const STALE_AFTER_MS: u64 = 10_000;

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
    /// The current failure of each write target (redis, dlq), while it lasts.
    sink_problems: Mutex<Vec<SinkProblem>>,
    stopped_stage: Mutex<Option<&'static str>>,
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
    /// What each failing write target reports now.
    pub sink_problems: Vec<SinkProblem>,
    pub stopped_stage: Option<&'static str>,
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

    /// `target`'s writes fail now for `problem`, or (`None`) work again.
    pub fn set_sink_problem(&self, target: &'static str, problem: Option<SinkProblem>) {
        let mut problems = lock(&self.sink_problems);
        problems.retain(|p| p.target != target);
        problems.extend(problem);
    }

    /// A failure no retry is expected to cure is holding a write target:
    /// reading stops until it clears.
    pub fn sink_blocked(&self) -> bool {
        lock(&self.sink_problems).iter().any(|p| p.class == "fleet")
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
            sink_problems: lock(&self.sink_problems).clone(),
            stopped_stage: *lock(&self.stopped_stage),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How long the worker has held messages without writing any answer (0
/// while it holds none, or answered since it began holding).
pub fn stalled_ms(facts: &Facts, now_ms: u64) -> u64 {
    if facts.holding_since_ms == 0 {
        return 0;
    }
    now_ms.saturating_sub(facts.holding_since_ms.max(facts.last_answer_ms))
}

/// Liveness: only what a restart would fix.
pub fn liveness(facts: &Facts, now_ms: u64) -> Result<(), String> {
    let mut problems = Vec::new();
    if facts.engine_stopped {
        problems.push("the engine thread has stopped".to_owned());
    }
    if let Some(stage) = facts.stopped_stage {
        problems.push(format!("the {stage} stage has stopped"));
    }
    let stalled = stalled_ms(facts, now_ms);
    if stalled > facts.stall_after_ms {
        let why: String = facts.sink_problems.iter().map(|p| format!(" ({}: {})", p.target, p.reason)).collect();
        problems.push(format!("holds messages and has written no answer for {} s{why}", stalled / 1000));
    }
    verdict(problems)
}

/// Readiness: every reason the worker should not be sent work now, joined.
pub fn readiness(facts: &Facts, now_ms: u64) -> Result<(), String> {
    let mut problems = Vec::new();
    if !facts.warm {
        problems.push("model not warm yet".to_owned());
    }
    for (what, at) in [("broker", facts.broker_ok_ms), ("redis", facts.redis_ok_ms)] {
        if at == 0 {
            problems.push(format!("{what} not reached yet"));
        } else if now_ms.saturating_sub(at) > STALE_AFTER_MS {
            problems.push(format!("{what} unanswered for {} ms", now_ms - at));
        }
    }
    for problem in &facts.sink_problems {
        problems.push(format!("cannot write to {} ({} failure): {}", problem.target, problem.class, problem.reason));
    }
    if let Err(dead) = liveness(facts, now_ms) {
        problems.push(dead);
    }
    verdict(problems)
}

fn verdict(problems: Vec<String>) -> Result<(), String> {
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 10_000_000_000;
    const STALL: u64 = 60_000;

    fn healthy() -> Facts {
        Facts {
            warm: true,
            engine_stopped: false,
            broker_ok_ms: NOW - 1000,
            redis_ok_ms: NOW - 500,
            holding_since_ms: 0,
            last_answer_ms: NOW - 100,
            stall_after_ms: STALL,
            sink_problems: Vec::new(),
            stopped_stage: None,
        }
    }

    #[test]
    fn ready_when_warm_and_both_dependencies_answered_recently() {
        assert_eq!(readiness(&healthy(), NOW), Ok(()));
        assert_eq!(liveness(&healthy(), NOW), Ok(()));
    }

    #[test]
    fn a_cold_model_or_a_silent_dependency_is_not_ready_and_says_which() {
        let cold = Facts { warm: false, ..healthy() };
        assert_eq!(readiness(&cold, NOW), Err("model not warm yet".into()));
        let redis_gone = Facts { redis_ok_ms: NOW - STALE_AFTER_MS - 1, ..healthy() };
        assert_eq!(readiness(&redis_gone, NOW), Err(format!("redis unanswered for {} ms", STALE_AFTER_MS + 1)));
        let never = Facts { broker_ok_ms: 0, ..healthy() };
        assert_eq!(readiness(&never, NOW), Err("broker not reached yet".into()));
        // Exactly at the limit is still fresh.
        let edge = Facts { broker_ok_ms: NOW - STALE_AFTER_MS, ..healthy() };
        assert_eq!(readiness(&edge, NOW), Ok(()));
    }

    #[test]
    fn a_dead_engine_or_stage_fails_liveness_and_readiness() {
        let dead = Facts { engine_stopped: true, ..healthy() };
        assert!(liveness(&dead, NOW).is_err());
        assert_eq!(readiness(&dead, NOW), Err("the engine thread has stopped".into()));
        let stage = Facts { stopped_stage: Some("sink"), ..healthy() };
        assert_eq!(liveness(&stage, NOW), Err("the sink stage has stopped".into()));
    }

    #[test]
    fn holding_messages_without_answering_past_the_bound_fails_liveness() {
        // Idle for an hour, then a message arrives: not a stall.
        let idle_then_busy = Facts { holding_since_ms: NOW - 5_000, last_answer_ms: NOW - 3_600_000, ..healthy() };
        assert_eq!(stalled_ms(&idle_then_busy, NOW), 5_000);
        assert_eq!(liveness(&idle_then_busy, NOW), Ok(()));
        // Holding for long but answering all along: not a stall.
        let busy = Facts { holding_since_ms: NOW - 600_000, last_answer_ms: NOW - 200, ..healthy() };
        assert_eq!(liveness(&busy, NOW), Ok(()));
        // Holding, no answer for longer than the bound: restart me.
        let problem = SinkProblem { class: "fleet", target: "redis", reason: "NOPERM".into() };
        let stuck = Facts {
            holding_since_ms: NOW - 600_000,
            last_answer_ms: NOW - STALL - 1_000,
            sink_problems: vec![problem],
            ..healthy()
        };
        assert_eq!(
            liveness(&stuck, NOW),
            Err("holds messages and has written no answer for 61 s (redis: NOPERM)".into())
        );
        // Holding nothing is never a stall, however old the last answer.
        let quiet = Facts { last_answer_ms: 1, ..healthy() };
        assert_eq!((stalled_ms(&quiet, NOW), liveness(&quiet, NOW)), (0, Ok(())));
    }

    #[test]
    fn a_failing_sink_is_not_ready_at_once_and_says_why() {
        let problem = SinkProblem { class: "fleet", target: "dlq", reason: "topic missing".into() };
        let failing = Facts { sink_problems: vec![problem], ..healthy() };
        assert_eq!(readiness(&failing, NOW), Err("cannot write to dlq (fleet failure): topic missing".into()));
        assert_eq!(liveness(&failing, NOW), Ok(()), "a restart is for stalls, not for every failed write");
    }

    #[test]
    fn each_target_reports_and_clears_its_own_problem() {
        let health = Health::new(STALL);
        let problem = |target, class| SinkProblem { class, target, reason: "x".into() };
        health.set_sink_problem("dlq", Some(problem("dlq", "fleet")));
        health.set_sink_problem("redis", Some(problem("redis", "transient")));
        assert!(health.sink_blocked());
        health.set_sink_problem("redis", None);
        assert!(health.sink_blocked(), "redis working again does not clear the DLQ's problem");
        health.set_sink_problem("dlq", None);
        assert!(!health.sink_blocked());
        assert!(health.facts().sink_problems.is_empty());
    }

    #[test]
    fn holding_keeps_the_start_of_an_unbroken_stretch() {
        let health = Health::new(STALL);
        health.set_holding(true, 10);
        health.set_holding(true, 20);
        assert_eq!(health.facts().holding_since_ms, 10);
        health.set_holding(false, 30);
        health.set_holding(true, 40);
        assert_eq!(health.facts().holding_since_ms, 40);
    }
}
