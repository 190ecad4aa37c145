//! The run's collecting loop and its books: the sender's events and a poll
//! of Redis every [`POLL_EVERY`] fold into one state per request, owned by
//! the loop alone (no locks); at the end each state is a record, and the
//! records are the ledger.

use super::send::Event;
use super::{RunConfig, REDIS_CONNECT, REDIS_RESPOND};
use crate::collect::{self, Seen};
use crate::ledger::{Ledger, Outcome};
use crate::timeline::Record;
use anyhow::{Context, Result};
use fleet_proto::RequestId;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeSet;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

const POLL_EVERY: Duration = Duration::from_millis(250);

/// One request as the run has learnt it so far.
#[derive(Clone, Default)]
pub(super) struct State {
    sent_s: Option<f64>,
    delivered: Option<bool>,
    partition: Option<i32>,
    seen: Option<(f64, Seen)>,
}

/// Every request's state, and which of them are still waited for.
struct InFlight {
    states: Vec<State>,
    /// Sent, not refused, not answered yet: what each poll asks for. Kept as
    /// the events come, so a tick costs what is in flight, not the whole run
    /// (a soak sends millions).
    pending: BTreeSet<usize>,
    sent: usize,
    answered: usize,
    sender_done: bool,
    last_send: Instant,
}

impl InFlight {
    fn on_event(&mut self, event: Option<Event>) {
        match event {
            Some(Event::Sent { index, at_s }) => {
                self.states[index].sent_s = Some(at_s);
                self.last_send = Instant::now();
                self.sent += 1;
                self.pending.insert(index);
            }
            Some(Event::NotSent { index }) => {
                self.states[index].delivered = Some(false);
                self.pending.remove(&index);
            }
            Some(Event::Delivered { index, partition }) => {
                self.states[index].delivered = Some(partition.is_some());
                self.states[index].partition = partition;
                if partition.is_none() {
                    self.pending.remove(&index);
                }
            }
            Some(Event::SenderDone) | None => self.sender_done = true,
        }
    }

    /// A poll's answers (`found`, by position in `polled`), seen at `at_s`.
    fn on_answers(&mut self, polled: &[usize], found: Vec<Option<Seen>>, at_s: f64) {
        for (&i, seen) in polled.iter().zip(found) {
            if let Some(seen) = seen {
                self.pending.remove(&i);
                self.states[i].seen = Some((at_s, seen));
                self.answered += 1;
            }
        }
    }

    /// The sender is done, and every request has an outcome or the drain
    /// after the last send has passed.
    fn over(&self, drain: Duration) -> bool {
        self.sender_done && (self.pending.is_empty() || self.last_send.elapsed() > drain)
    }
}

/// Collects answers until [`InFlight::over`]: each request's state.
pub(super) async fn collect_answers(
    config: &RunConfig,
    ids: &[RequestId],
    mut inbox: mpsc::UnboundedReceiver<Event>,
    start: Instant,
) -> Result<Vec<State>> {
    let progress = if config.progress { ProgressBar::new(ids.len() as u64) } else { ProgressBar::hidden() };
    progress.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} answered {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut conn = config.redis.connection(REDIS_CONNECT, Some(REDIS_RESPOND)).await.context("connecting to Redis")?;
    let mut run = InFlight {
        states: vec![State::default(); ids.len()],
        pending: BTreeSet::new(),
        sent: 0,
        answered: 0,
        sender_done: false,
        last_send: start,
    };
    let mut tick = tokio::time::interval(POLL_EVERY);
    loop {
        tokio::select! {
            event = inbox.recv() => run.on_event(event),
            _ = tick.tick() => {
                let polled: Vec<usize> = run.pending.iter().copied().collect();
                let polled_ids: Vec<RequestId> = polled.iter().map(|&i| ids[i].clone()).collect();
                match collect::poll(&mut conn, &config.names, &config.model, &polled_ids).await {
                    Ok(found) => run.on_answers(&polled, found, start.elapsed().as_secs_f64()),
                    Err(e) => tracing::warn!(error = %e, "answer poll failed; retrying"),
                }
                progress.set_position(run.answered as u64);
                progress.set_message(format!("({} sent)", run.sent));
                if run.over(config.drain) {
                    break;
                }
            }
        }
    }
    progress.finish_and_clear();
    Ok(run.states)
}

/// The run's records and ledger from each request's state (`dlq`: the
/// messages dead-lettered during the run). A request never sent has no
/// record; one the producer or broker refused counts as `send_failed`.
pub(super) fn books(ids: &[RequestId], states: Vec<State>, dlq: u64) -> (Vec<Record>, Ledger) {
    let mut ledger = Ledger { dlq, ..Ledger::default() };
    let mut records = Vec::with_capacity(ids.len());
    for (id, state) in ids.iter().zip(states) {
        let Some(sent_s) = state.sent_s else { continue };
        if state.delivered == Some(false) {
            ledger.send_failed += 1;
            continue;
        }
        ledger.sent += 1;
        let record = state.record(id, sent_s);
        ledger.record(&record.outcome);
        records.push(record);
    }
    (records, ledger)
}

impl State {
    /// The request's record: what its answer said, or `missing`.
    fn record(self, id: &RequestId, sent_s: f64) -> Record {
        let (outcome, answered_s, e2e_ms, queue_ms, infer_ms) = match self.seen {
            Some((at_s, seen)) => {
                (seen.outcome, Some(at_s), Some(seen.e2e_ms), Some(seen.queue_ms), Some(seen.infer_ms))
            }
            None => (Outcome::Missing, None, None, None, None),
        };
        Record {
            id: id.to_string(),
            sent_s,
            outcome,
            answered_s,
            e2e_ms,
            queue_ms,
            infer_ms,
            partition: self.partition,
        }
    }
}
