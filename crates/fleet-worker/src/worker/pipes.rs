//! The bounded channels that join the stages, made at once and handed out
//! as each stage's ends, so what connects to what reads in one place.

use crate::core::batch::Batch;
use crate::core::job::{Job, SinkItem};
use crate::stages::engine::{BatchFeedback, EngineCommand, HeldFeedback};
use crate::stages::handover::{Handover, Piped};
use tokio::sync::mpsc;

/// How many prepared requests may wait for the batch stage, beyond what it holds.
const JOB_QUEUE: usize = 256;
/// Batches formed ahead of the engine: one runs while the next is formed.
const BATCH_QUEUE: usize = 1;
const SINK_QUEUE: usize = 64;

pub(super) struct AdmissionEnds {
    pub jobs: mpsc::Sender<Piped<Job>>,
    pub sink: mpsc::Sender<SinkItem>,
    pub held: mpsc::UnboundedReceiver<HeldFeedback>,
    pub handovers: mpsc::Receiver<Box<Handover>>,
}

pub(super) struct BatchEnds {
    pub jobs: mpsc::Receiver<Piped<Job>>,
    pub batches: mpsc::Sender<Piped<Batch<Job>>>,
    pub feedback: mpsc::UnboundedReceiver<BatchFeedback>,
    pub sink: mpsc::Sender<SinkItem>,
}

pub(super) struct CacheEnds {
    pub batches: mpsc::Receiver<Piped<Batch<Job>>>,
    pub engine: mpsc::Sender<EngineCommand>,
    pub sink: mpsc::Sender<SinkItem>,
}

pub(super) struct EngineEnds {
    pub commands: mpsc::Receiver<EngineCommand>,
    pub sink: mpsc::Sender<SinkItem>,
    pub batch_feedback: mpsc::UnboundedSender<BatchFeedback>,
    pub held_feedback: mpsc::UnboundedSender<HeldFeedback>,
}

pub(super) struct Pipes {
    pub admission: AdmissionEnds,
    pub batch: BatchEnds,
    pub cache: CacheEnds,
    pub sink: mpsc::Receiver<SinkItem>,
    /// Where the watcher hands new versions to the admission stage.
    pub handovers: mpsc::Sender<Box<Handover>>,
}

impl Pipes {
    /// Every channel; the engine's ends apart, as the engine thread starts
    /// before the other stages.
    pub fn new() -> (Self, EngineEnds) {
        let (job_tx, job_rx) = mpsc::channel(JOB_QUEUE);
        let (batch_tx, batch_rx) = mpsc::channel(BATCH_QUEUE);
        // One at a time: the watcher loads the next version only once the
        // engine serves the last one.
        let (handover_tx, handover_rx) = mpsc::channel(1);
        let (command_tx, command_rx) = mpsc::channel(BATCH_QUEUE);
        let (sink_tx, sink_rx) = mpsc::channel(SINK_QUEUE);
        let (batch_feedback_tx, batch_feedback_rx) = mpsc::unbounded_channel();
        let (held_tx, held_rx) = mpsc::unbounded_channel();
        let engine = EngineEnds {
            commands: command_rx,
            sink: sink_tx.clone(),
            batch_feedback: batch_feedback_tx,
            held_feedback: held_tx,
        };
        let pipes = Self {
            admission: AdmissionEnds { jobs: job_tx, sink: sink_tx.clone(), held: held_rx, handovers: handover_rx },
            batch: BatchEnds { jobs: job_rx, batches: batch_tx, feedback: batch_feedback_rx, sink: sink_tx.clone() },
            cache: CacheEnds { batches: batch_rx, engine: command_tx, sink: sink_tx },
            sink: sink_rx,
            handovers: handover_tx,
        };
        (pipes, engine)
    }
}
