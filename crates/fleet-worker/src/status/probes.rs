//! What `/healthz` and `/ready` answer, from the facts the stages record
//! (`core::health`).
//!
//! Liveness is "a restart would help": the engine thread or a stage task has
//! died, or the worker holds messages and has written no answer (nor dead
//! letter) for longer than the stall bound *while its dependencies answer*:
//! a wedge inside the process that would otherwise hold its partitions
//! forever behind green probes. A dependency that is away (Redis, the
//! broker, the DLQ topic) is never a liveness fault, however long it lasts:
//! a restart cannot bring it back, it only adds a crash loop and a model
//! warm-up on top of the outage. The stall clock starts again at each
//! dependency fault, and a dependency that has not answered since the stall
//! began excuses it too.
//! Readiness is "the worker can do its job now": the model is warm, the
//! broker and Redis answered recently, and the sink is not failing to write.
//! The verdicts are pure functions of the facts and the time, so their
//! rules are tested without servers.

use crate::core::health::Facts;
#[cfg(test)]
use crate::core::health::{Health, SinkProblem};

/// A dependency that has not answered for this long makes the worker
/// unready: several missed reports (they run every second), not one blip.
pub const STALE_AFTER_MS: u64 = 10_000;

/// How long the worker has held messages without writing any answer nor
/// seeing a dependency fail: since the latest of when it began holding, its
/// last answer and the last dependency fault (0 while it holds none).
pub fn stalled_ms(facts: &Facts, now_ms: u64) -> u64 {
    if facts.holding_since_ms == 0 {
        return 0;
    }
    now_ms.saturating_sub(facts.holding_since_ms.max(facts.last_answer_ms).max(facts.dependency_fault_ms))
}

/// What the worker waits for outside itself now: a dependency that has not
/// answered recently, or a write target that fails. Each is a readiness
/// fault, never a liveness one.
pub fn dependency_problems(facts: &Facts, now_ms: u64) -> Vec<String> {
    let mut problems = Vec::new();
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
    problems
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
    // A sticky device fault (a CUDA context that errors on every call) is
    // what a restart cures: after the bound, not at once (the partitions
    // have moved to other members by then; a blip must not restart).
    if let Some((since, reason)) = &facts.model_broken {
        let broken_ms = now_ms.saturating_sub(*since);
        if broken_ms > facts.stall_after_ms {
            problems.push(format!("the model has failed its known-good probe for {} s: {reason}", broken_ms / 1000));
        }
    }
    let stalled = stalled_ms(facts, now_ms);
    // A dependency that failed since the stall began restarts its clock
    // (each failed write or report moves `dependency_fault_ms`); one that
    // has not answered since it began (a write hanging on a frozen Redis
    // has not failed yet) excuses it too: holding messages is then waiting,
    // not a wedge. A write target's problem merely still on record does
    // not: a sink that stopped retrying is a wedge.
    let since = now_ms.saturating_sub(stalled);
    let answered_since = facts.redis_ok_ms > since && facts.broker_ok_ms > since;
    if stalled > facts.stall_after_ms && answered_since {
        problems.push(format!(
            "holds messages and has written no answer for {} s while Redis and the broker answer",
            stalled / 1000
        ));
    }
    verdict(problems)
}

/// Readiness: every reason the worker should not be sent work now, joined.
pub fn readiness(facts: &Facts, now_ms: u64) -> Result<(), String> {
    let mut problems = Vec::new();
    if !facts.warm {
        problems.push("model not warm yet".to_owned());
    }
    if let Some((_, reason)) = &facts.model_broken {
        problems.push(format!("model broken (its known-good probe fails): {reason}"));
    }
    if let Some(reason) = &facts.replay_pending {
        problems.push(format!("answers Redis lost are not replayed yet: {reason}"));
    }
    problems.extend(dependency_problems(facts, now_ms));
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
            dependency_fault_ms: 0,
            sink_problems: Vec::new(),
            stopped_stage: None,
            model_broken: None,
            replay_pending: None,
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
        // Holding, no answer for longer than the bound while Redis and
        // the broker answer: a wedge inside; restart me.
        let stuck = Facts { holding_since_ms: NOW - 600_000, last_answer_ms: NOW - STALL - 1_000, ..healthy() };
        assert_eq!(
            liveness(&stuck, NOW),
            Err("holds messages and has written no answer for 61 s while Redis and the broker answer".into())
        );
        // Holding nothing is never a stall, however old the last answer.
        let quiet = Facts { last_answer_ms: 1, ..healthy() };
        assert_eq!((stalled_ms(&quiet, NOW), liveness(&quiet, NOW)), (0, Ok(())));
    }

    #[test]
    fn a_dependency_away_for_ten_minutes_is_never_a_liveness_fault() {
        let held = |f: Facts| Facts { holding_since_ms: NOW - 600_000, last_answer_ms: NOW - 600_000, ..f };
        let refused = SinkProblem { class: "fleet", target: "redis", reason: "NOPERM".into() };
        let down = SinkProblem { class: "transient", target: "dlq", reason: "all brokers down".into() };
        let away = [
            held(Facts { redis_ok_ms: NOW - 600_000, dependency_fault_ms: NOW - 1_000, ..healthy() }),
            held(Facts { broker_ok_ms: NOW - 600_000, ..healthy() }),
            held(Facts { redis_ok_ms: 0, ..healthy() }),
            held(Facts { sink_problems: vec![refused], dependency_fault_ms: NOW, ..healthy() }),
            held(Facts { sink_problems: vec![down], dependency_fault_ms: NOW - 2_000, ..healthy() }),
        ];
        for facts in away {
            assert_eq!(liveness(&facts, NOW), Ok(()), "{facts:?}");
            assert!(readiness(&facts, NOW).is_err(), "not ready while waiting: {facts:?}");
        }
    }

    #[test]
    fn a_write_problem_no_longer_retried_does_not_hide_a_wedge() {
        // The sink reported a transient failure ten minutes ago and has not
        // tried since, while Redis and the broker answer: wedged.
        let problem = SinkProblem { class: "transient", target: "redis", reason: "timeout".into() };
        let stuck = Facts {
            holding_since_ms: NOW - 600_000,
            last_answer_ms: NOW - 600_000,
            dependency_fault_ms: NOW - 600_000,
            sink_problems: vec![problem],
            ..healthy()
        };
        assert!(liveness(&stuck, NOW).is_err());
    }

    #[test]
    fn a_dependency_silent_since_the_stall_began_is_waited_for() {
        // A short stall bound; Redis froze 5.5 s ago, before the messages
        // now held arrived: not stale yet, and no write has failed yet (it
        // hangs). A wait, not a wedge.
        let frozen = Facts {
            stall_after_ms: 3_000,
            holding_since_ms: NOW - 5_000,
            last_answer_ms: NOW - 6_000,
            redis_ok_ms: NOW - 5_500,
            ..healthy()
        };
        assert!(dependency_problems(&frozen, NOW).is_empty(), "not stale yet");
        assert_eq!(liveness(&frozen, NOW), Ok(()));
        // The same with Redis answering since: a wedge inside.
        let wedged = Facts { redis_ok_ms: NOW - 200, ..frozen };
        assert!(liveness(&wedged, NOW).is_err());
    }

    #[test]
    fn the_stall_clock_starts_when_the_last_dependency_fault_clears() {
        // Redis was away for ten minutes and answers again since 5 s ago:
        // the worker gets the whole bound to write before it counts as wedged.
        let back = Facts {
            holding_since_ms: NOW - 600_000,
            last_answer_ms: NOW - 600_000,
            dependency_fault_ms: NOW - 5_000,
            ..healthy()
        };
        assert_eq!(stalled_ms(&back, NOW), 5_000);
        assert_eq!(liveness(&back, NOW), Ok(()));
        let later = NOW + STALL;
        let still_silent = Facts { broker_ok_ms: later - 100, redis_ok_ms: later - 100, ..back };
        assert!(liveness(&still_silent, later).is_err(), "no answer for the whole bound since: a wedge");
    }

    #[test]
    fn a_dependency_fault_moves_the_clock_forward_only() {
        let health = Health::new(STALL);
        health.dependency_failed(50);
        health.dependency_failed(20);
        assert_eq!(health.facts().dependency_fault_ms, 50);
        let problem = SinkProblem { class: "transient", target: "redis", reason: "x".into() };
        health.set_sink_problem("redis", Some(problem), 70);
        assert_eq!(health.facts().dependency_fault_ms, 70);
        health.set_sink_problem("redis", None, 90);
        assert_eq!(health.facts().dependency_fault_ms, 70, "clearing is not a fault");
    }

    #[test]
    fn a_replay_that_has_not_begun_is_not_ready_and_not_dead() {
        let pending = Facts { replay_pending: Some("seek timed out".into()), ..healthy() };
        let reason = readiness(&pending, NOW).unwrap_err();
        assert!(reason.contains("not replayed yet: seek timed out"), "{reason}");
        assert_eq!(liveness(&pending, NOW), Ok(()), "the broker's fault: a restart cures nothing");
    }

    #[test]
    fn a_broken_model_is_unready_at_once_and_dead_after_the_bound() {
        let broken = Facts { model_broken: Some((NOW - 1_000, "CUDA error".into())), ..healthy() };
        assert_eq!(readiness(&broken, NOW), Err("model broken (its known-good probe fails): CUDA error".into()));
        assert_eq!(liveness(&broken, NOW), Ok(()), "not restarted for a blip");
        let later = NOW + STALL;
        assert_eq!(
            liveness(&broken, later),
            Err(format!("the model has failed its known-good probe for {} s: CUDA error", (STALL + 1_000) / 1000))
        );
        let health = Health::new(STALL);
        health.mark_model_broken("a".into(), 10);
        health.mark_model_broken("b".into(), 20);
        assert_eq!(health.facts().model_broken, Some((10, "b".into())), "the start of the failure is kept");
        assert_eq!(health.broken_episodes(), 1);
        assert!(health.must_stop_reading());
        health.mark_model_recovered();
        assert!(!health.must_stop_reading());
        health.mark_model_broken("c".into(), 40);
        assert_eq!((health.broken_episodes(), health.facts().model_broken), (2, Some((40, "c".into()))));
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
        health.set_sink_problem("dlq", Some(problem("dlq", "fleet")), 1);
        health.set_sink_problem("redis", Some(problem("redis", "transient")), 2);
        assert!(health.sink_blocked());
        health.set_sink_problem("redis", None, 3);
        assert!(health.sink_blocked(), "redis working again does not clear the DLQ's problem");
        health.set_sink_problem("dlq", None, 4);
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
