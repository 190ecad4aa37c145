//! What `/healthz` and `/ready` answer. Liveness is "the process serves
//! HTTP and its engine thread has not died"; readiness is "the model is
//! warm, and the broker and Redis answered recently". The pipeline records
//! facts (warm, last broker and Redis success); the verdict is a pure
//! function of them and the time, so its rules are tested without servers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A dependency that has not answered for this long makes the worker
/// unready: several missed reports (they run every second), not one blip.
pub const STALE_AFTER_MS: u64 = 10_000;

#[derive(Debug, Default)]
pub struct Health {
    warm: AtomicBool,
    engine_stopped: AtomicBool,
    broker_ok_ms: AtomicU64,
    redis_ok_ms: AtomicU64,
}

/// A copy of the facts at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    pub warm: bool,
    pub engine_stopped: bool,
    /// Unix ms of the last successful broker call; 0 = never.
    pub broker_ok_ms: u64,
    pub redis_ok_ms: u64,
}

impl Health {
    pub fn set_warm(&self) {
        self.warm.store(true, Ordering::Relaxed);
    }

    pub fn set_engine_stopped(&self) {
        self.engine_stopped.store(true, Ordering::Relaxed);
    }

    pub fn broker_answered(&self, now_ms: u64) {
        self.broker_ok_ms.store(now_ms, Ordering::Relaxed);
    }

    pub fn redis_answered(&self, now_ms: u64) {
        self.redis_ok_ms.store(now_ms, Ordering::Relaxed);
    }

    pub fn facts(&self) -> Facts {
        Facts {
            warm: self.warm.load(Ordering::Relaxed),
            engine_stopped: self.engine_stopped.load(Ordering::Relaxed),
            broker_ok_ms: self.broker_ok_ms.load(Ordering::Relaxed),
            redis_ok_ms: self.redis_ok_ms.load(Ordering::Relaxed),
        }
    }
}

/// Liveness: only what a restart would fix.
pub fn liveness(facts: Facts) -> Result<(), String> {
    if facts.engine_stopped {
        return Err("the engine thread has stopped".into());
    }
    Ok(())
}

/// Readiness: every reason the worker should not be sent work now, joined.
pub fn readiness(facts: Facts, now_ms: u64) -> Result<(), String> {
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
    if let Err(dead) = liveness(facts) {
        problems.push(dead);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_000_000;

    fn healthy() -> Facts {
        Facts { warm: true, engine_stopped: false, broker_ok_ms: NOW - 1000, redis_ok_ms: NOW - 500 }
    }

    #[test]
    fn ready_when_warm_and_both_dependencies_answered_recently() {
        assert_eq!(readiness(healthy(), NOW), Ok(()));
        assert_eq!(liveness(healthy()), Ok(()));
    }

    #[test]
    fn a_cold_model_or_a_silent_dependency_is_not_ready_and_says_which() {
        let cold = Facts { warm: false, ..healthy() };
        assert_eq!(readiness(cold, NOW), Err("model not warm yet".into()));
        let redis_gone = Facts { redis_ok_ms: NOW - STALE_AFTER_MS - 1, ..healthy() };
        assert_eq!(readiness(redis_gone, NOW), Err(format!("redis unanswered for {} ms", STALE_AFTER_MS + 1)));
        let never = Facts { broker_ok_ms: 0, ..healthy() };
        assert_eq!(readiness(never, NOW), Err("broker not reached yet".into()));
        // Exactly at the limit is still fresh.
        let edge = Facts { broker_ok_ms: NOW - STALE_AFTER_MS, ..healthy() };
        assert_eq!(readiness(edge, NOW), Ok(()));
    }

    #[test]
    fn a_dead_engine_fails_liveness_and_readiness() {
        let dead = Facts { engine_stopped: true, ..healthy() };
        assert!(liveness(dead).is_err());
        assert_eq!(readiness(dead, NOW), Err("the engine thread has stopped".into()));
    }
}
