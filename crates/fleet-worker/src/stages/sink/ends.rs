//! What the sink's lanes do when a message ends (its offset moves on, the
//! drain meter and liveness see progress) or a write fails (counted, logged,
//! and told to the probes while it lasts).

use crate::core::health::{Health, SinkProblem};
use crate::core::message::Position;
use crate::metrics::{REPLAY_DELIVERED_TOTAL, SINK_FAILURES_TOTAL};
use crate::stages::sink::failure::FailureClass;
use crate::stages::source::Committer;
use fleet_proto::clock::now_ms;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What both lanes do when a message ends or a write fails.
#[derive(Clone)]
pub(super) struct Ends {
    pub(super) committer: Committer,
    pub(super) answered: Arc<AtomicU64>,
    pub(super) health: Arc<Health>,
}

impl Ends {
    /// A message has ended: its offset may move on.
    pub(super) fn progress(&self, position: &Position) {
        self.committer.done(position);
        self.answered.fetch_add(1, Ordering::Relaxed);
        self.health.answered(now_ms());
    }

    /// A replayed message whose answer is on Kafka already: it ends, but
    /// no work was done for it (the drain rate does not count it).
    pub(super) fn delivered_before(&self, position: &Position) {
        metrics::counter!(REPLAY_DELIVERED_TOTAL, "lane" => position.lane.as_str()).increment(1);
        self.committer.done(position);
        self.health.answered(now_ms());
    }

    pub(super) fn count_failure(&self, target: &'static str, class: FailureClass) {
        metrics::counter!(SINK_FAILURES_TOTAL, "target" => target, "class" => class.as_str()).increment(1);
    }

    pub(super) fn report(&self, target: &'static str, class: FailureClass, reason: &str) {
        match class {
            FailureClass::Fleet => {
                tracing::error!(target, reason, "writes fail for every message; reading stops until they work")
            }
            _ => tracing::warn!(target, reason, "write failed; retrying"),
        }
        let problem = SinkProblem { class: class.as_str(), target, reason: first_line(reason) };
        self.health.set_sink_problem(target, Some(problem), now_ms());
    }

    pub(super) fn recovered(&self, target: &'static str) {
        self.health.set_sink_problem(target, None, now_ms());
    }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().chars().take(200).collect()
}
