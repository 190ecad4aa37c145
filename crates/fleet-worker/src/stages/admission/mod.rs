//! The admission stage: reads the source's messages while the worker may
//! hold more, and sends each where [`policy`] decides: a job to the batch
//! stage, an image to its decode, an answer or a dead letter to the sink.
//!
//! What it may hold is bounded here and only here: the [`flow`] gate's
//! message and byte limits, the message limit moved by the adaptive
//! [`in_flight_limit`] (fed by the engine's timing of each batch), and a
//! stop while the sink reports a write no retry cures. A bound reached
//! means not reading, never buffering: each partition's capped prefetch
//! fills and the broker keeps the rest (docs/operations.md §2).
//!
//! A new version enters the pipeline here: its [`Handover`] changes how
//! messages are admitted from the next one on, and goes down to the batch
//! stage behind every job admitted before it (images still decoding
//! included).
//!
//! Inside: [`intake`] (how each model kind takes its inputs), [`tokenize`],
//! [`image`] (decodes under the [`decode_budget`]).

pub mod decode_budget;
pub mod flow;
pub mod image;
pub mod in_flight_limit;
pub mod intake;
pub mod policy;
pub mod tokenize;

use crate::core::health::Health;
use crate::core::job::{error_answer, DeadLetter, Finished, Job, Reply, SinkItem, PREPARE_PANICKED};
use crate::core::message::Inbound;
use crate::guard::{self, Stage};
use crate::metrics::{CONSUMER_PAUSED, IN_FLIGHT_LIMIT, TTL_DROPPED_TOTAL};
use crate::shutdown::Shutdown;
use crate::stages::engine::HeldFeedback;
use crate::stages::handover::{Handover, Piped};
use crate::stages::source::Inbox;
use fleet_proto::clock::now_ms;
use fleet_proto::{ErrorCode, Lane, Status};
use flow::{FlowGate, FlowLimits, Transition};
use image::DecodeOutlets;
use in_flight_limit::InFlightLimit;
use policy::{AdmissionPolicy, Admitted};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// The most of the in-flight limit the bulk lane may hold, in percent: the
/// rest is kept for interactive requests, which are then read at once
/// however large the backfill behind them (the batch stage puts them first).
const BULK_HOLD_PERCENT: usize = 75;

/// How often an idle stage looks at its bounds again.
const GATE_RECHECK: Duration = Duration::from_millis(250);
/// How often a paused stage does.
const PAUSED_RECHECK: Duration = Duration::from_millis(20);

/// Why the admission stage ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Shutdown,
    /// A stage after it, or the source, is gone: the worker cannot go on.
    PipelineClosed,
}

pub struct AdmissionStage {
    pub inbox: Inbox,
    pub policy: AdmissionPolicy,
    pub flow: FlowLimits,
    /// The adaptive in-flight limit; `None`: fixed at the flow's limit.
    pub in_flight: Option<InFlightLimit>,
    /// How long each batch's oldest request had been held: what moves it.
    pub held: mpsc::UnboundedReceiver<HeldFeedback>,
    /// The sink's health: a write failure no retry cures stops the reading.
    pub health: Arc<Health>,
    pub jobs: mpsc::Sender<Piped<Job>>,
    pub sink: mpsc::Sender<SinkItem>,
    /// New versions from the repository watcher.
    pub handovers: mpsc::Receiver<Box<Handover>>,
    pub shutdown: Shutdown,
}

impl AdmissionStage {
    /// Reads until shutdown (or until the pipeline closes), then waits for
    /// the image decodes it started.
    pub async fn run(mut self) -> Ended {
        let mut decodes = JoinSet::new();
        let ended = self.read(&mut decodes).await;
        while decodes.join_next().await.is_some() {}
        ended
    }

    async fn read(&mut self, decodes: &mut JoinSet<()>) -> Ended {
        let mut gate = FlowGate::new(self.flow);
        let mut bulk_gate = FlowGate::new(self.flow.share(BULK_HOLD_PERCENT));
        let paused_gauge = metrics::gauge!(CONSUMER_PAUSED);
        let outlets =
            DecodeOutlets { model: self.policy.model.clone(), jobs: self.jobs.clone(), sink: self.sink.clone() };
        metrics::gauge!(IN_FLIGHT_LIMIT).set(self.flow.max_messages as f64);
        let mut blocked = false;
        let mut watched = true;
        loop {
            self.apply_feedback(&mut gate, &mut bulk_gate);
            // Bytes are bounded by the gate of both lanes.
            bulk_gate.update(self.inbox.held_in(Lane::Bulk), 0);
            let (messages, bytes) = self.inbox.held();
            match gate.update(messages, bytes) {
                Some(Transition::Pause) => tracing::info!(messages, bytes, "in-flight limit reached; reading stops"),
                Some(Transition::Resume) => tracing::info!(messages, bytes, "below the low-water mark; reading again"),
                None => {}
            }
            if self.health.must_stop_reading() != blocked {
                blocked = !blocked;
                if blocked {
                    tracing::error!(
                        "a write no retry cures is failing, or the model is broken; reading stops (see /ready)"
                    );
                } else {
                    tracing::info!("writes and the model work again; reading again");
                }
            }
            let paused = gate.is_paused() || blocked;
            paused_gauge.set(if paused { 1.0 } else { 0.0 });
            if paused {
                // Not `consumer.pause()`: not reading lets each partition's
                // capped prefetch fill and stop fetching, and resuming needs
                // no refetch. The source's own task serves the group
                // protocol meanwhile.
                // A new version still takes over: it is what cures a
                // broken model.
                tokio::select! {
                    _ = self.shutdown.recv() => return Ended::Shutdown,
                    handover = self.handovers.recv(), if watched => {
                        if let Err(ended) = self.take_over(handover, &mut watched, decodes).await {
                            return ended;
                        }
                    }
                    _ = tokio::time::sleep(PAUSED_RECHECK) => {}
                }
                continue;
            }
            let inbound = tokio::select! {
                _ = self.shutdown.recv() => return Ended::Shutdown,
                received = self.inbox.recv(!bulk_gate.is_paused()) => match received {
                    Some(inbound) => inbound,
                    None => return Ended::PipelineClosed,
                },
                handover = self.handovers.recv(), if watched => {
                    if let Err(ended) = self.take_over(handover, &mut watched, decodes).await {
                        return ended;
                    }
                    continue;
                }
                // Looks at the bounds again now and then while nothing
                // arrives (`recv` is cancel-safe: nothing is lost); soon
                // while the bulk lane waits for room, so it resumes as
                // soon as its holdings fall (the engine idles otherwise).
                _ = tokio::time::sleep(if bulk_gate.is_paused() { PAUSED_RECHECK } else { GATE_RECHECK }) => continue,
            };
            let span = tracing::debug_span!(
                "message",
                lane = inbound.position.lane.as_str(),
                partition = inbound.position.partition,
                offset = inbound.position.offset
            );
            let admitted = span.in_scope(|| admit_contained(&self.policy, inbound, now_ms()));
            if !self.hand_on(admitted, &outlets, decodes).await {
                tracing::error!("pipeline closed under the admission stage; stopping");
                return Ended::PipelineClosed;
            }
        }
    }

    /// Admits for the next version from now on and sends its handover down
    /// behind everything admitted before (the decodes under way finish
    /// first); `Err` when the stage must end instead: the shutdown came
    /// meanwhile (a stuck stage after it must not hold the drain), or the
    /// pipeline is closed. `None`: the watcher is gone, and `watched`
    /// turns false.
    async fn take_over(
        &mut self,
        handover: Option<Box<Handover>>,
        watched: &mut bool,
        decodes: &mut JoinSet<()>,
    ) -> Result<(), Ended> {
        let Some(mut handover) = handover else {
            *watched = false;
            return Ok(());
        };
        let mut shutdown = self.shutdown.clone();
        tokio::select! {
            _ = shutdown.recv() => return Err(Ended::Shutdown),
            _ = async { while decodes.join_next().await.is_some() {} } => {}
        }
        if let Some(intake) = handover.intake.take() {
            self.policy.intake = intake;
        }
        self.policy.request_ttls = handover.request_ttls;
        self.policy.answers = handover.answers;
        self.policy.version = handover.version;
        tracing::info!(version = handover.version, "admitting for the next version from here on");
        tokio::select! {
            _ = shutdown.recv() => Err(Ended::Shutdown),
            sent = self.jobs.send(Piped::Handover(handover)) => sent.map_err(|_| Ended::PipelineClosed),
        }
    }

    /// Moves the message limit by the batches timed since the last look.
    fn apply_feedback(&mut self, gate: &mut FlowGate, bulk_gate: &mut FlowGate) {
        while let Ok(held) = self.held.try_recv() {
            if let Some(limit) = self.in_flight.as_mut() {
                let now = limit.observe(held.held_ms, held.first_read_ms, now_ms());
                gate.set_max_messages(now);
                bulk_gate.set_max_messages((now * BULK_HOLD_PERCENT / 100).max(1));
                metrics::gauge!(IN_FLIGHT_LIMIT).set(now as f64);
            }
        }
    }

    /// Sends an admitted message on; false when the pipeline is closed.
    async fn hand_on(&self, admitted: Admitted, outlets: &DecodeOutlets, decodes: &mut JoinSet<()>) -> bool {
        match admitted {
            Admitted::Job(job) => self.jobs.send(Piped::Work(job)).await.is_ok(),
            Admitted::Decode(decode) => decode.start(outlets, decodes).await,
            Admitted::Answer(finished) => {
                if finished.answer.status == Status::Expired {
                    metrics::counter!(TTL_DROPPED_TOTAL, "lane" => finished.position.lane.as_str()).increment(1);
                }
                self.sink.send(SinkItem::Answers(vec![finished])).await.is_ok()
            }
            Admitted::DeadLetter(letter) => self.sink.send(SinkItem::DeadLetter(Box::new(letter))).await.is_ok(),
            Admitted::Delivered(position) => self.sink.send(SinkItem::Delivered(position)).await.is_ok(),
        }
    }
}

/// Admits one message; a panic anywhere in it becomes that message's
/// `internal_error` answer, or a dead letter when it has no readable id. The
/// message is borrowed by the work and owned here, so it is still whole
/// when the work panics.
fn admit_contained(policy: &AdmissionPolicy, mut inbound: Inbound, now: u64) -> Admitted {
    match guard::contain(Stage::Prepare, || policy.admit(&mut inbound, now)) {
        Ok(admitted) => admitted,
        Err(panic) => {
            let detail = format!("preparing the request failed: {panic}");
            let id = guard::contain(Stage::Prepare, || inbound.readable_id());
            match id {
                Ok(Some(id)) => {
                    let (model, version) = (policy.model.as_str(), policy.version);
                    let answer = error_answer(model, version, ErrorCode::InternalError, detail, None, now);
                    let reply = Reply { to: policy.answers.default_for(inbound.position.lane), job: None };
                    Admitted::Answer(Finished::without_compute(inbound.position, id, reply, answer))
                }
                _ => Admitted::DeadLetter(DeadLetter::of_message(inbound, PREPARE_PANICKED, detail)),
            }
        }
    }
}
