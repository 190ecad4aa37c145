//! The sink stage: the task that writes what the stages before it finished,
//! and only then lets the offset move on.
//!
//! Every message ends here exactly one way: its answer written everywhere
//! its request's [`Reply`](crate::core::job::Reply) names (Redis, the answers
//! topic on Kafka, or both); or, when its answer can never be written
//! there, a dead letter; or, when the DLQ topic refuses even a stripped
//! copy, an entry in the local record; or, read again after Redis lost its
//! data with its answer still on Kafka, with nothing to write. A write that
//! may work later is retried (the message stays uncommitted meanwhile, and
//! the bounded queues before the sink stop the reading).

use super::answer_lane::AnswerLane;
use super::answer_records::AnswerRecords;
use super::dead_letters::{DeadLetters, LocalRecord};
use super::ends::Ends;
use super::failure::{kafka_action, FailureClass, KafkaAction};
use super::results::ResultSink;
use crate::core::health::Health;
use crate::core::job::{DeadLetter, SinkItem};
use crate::metrics::{DLQ_LOCAL_TOTAL, DLQ_TOTAL};
use crate::stages::source::Committer;
use fleet_proto::clock::now_ms;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tokio::sync::mpsc;

pub struct SinkStage {
    pub items: mpsc::Receiver<SinkItem>,
    pub results: ResultSink,
    pub answer_records: AnswerRecords,
    pub dead_letters: DeadLetters,
    pub local: Arc<LocalRecord>,
    pub committer: Committer,
    /// Messages ended so far (the drain meter reads it).
    pub answered: Arc<AtomicU64>,
    pub health: Arc<Health>,
}

/// Dead letters waiting for the DLQ while answers go on being written.
const LETTER_QUEUE: usize = 64;

impl SinkStage {
    /// Answers and dead letters go in two lanes, each retrying on its own:
    /// a DLQ topic that is away does not hold back answers Redis would
    /// take, nor a Redis outage the dead letters.
    pub async fn run(self) {
        let SinkStage { mut items, results, answer_records, dead_letters, local, committer, answered, health } = self;
        let ends = Ends { committer, answered, health };
        let (letters, letters_rx) = mpsc::channel(LETTER_QUEUE);
        let letter_lane = tokio::spawn(LetterLane { ends: ends.clone(), dead_letters, local }.run(letters_rx));
        let mut answers = AnswerLane { ends, results, answer_records, letters };
        while let Some(item) = items.recv().await {
            let open = match item {
                SinkItem::Answers(finished) => answers.write(finished).await,
                SinkItem::DeadLetter(letter) => answers.letters.send(*letter).await.is_ok(),
                SinkItem::Delivered(position) => {
                    answers.ends.delivered_before(&position);
                    true
                }
            };
            if !open {
                break;
            }
        }
        drop(answers);
        let _ = letter_lane.await;
    }
}

struct LetterLane {
    ends: Ends,
    dead_letters: DeadLetters,
    local: Arc<LocalRecord>,
}

impl LetterLane {
    async fn run(self, mut letters: mpsc::Receiver<DeadLetter>) {
        while let Some(letter) = letters.recv().await {
            self.send(letter).await;
        }
    }

    /// Writes one dead letter; a letter too large for the topic is sent
    /// again stripped to its reason, and one refused even so is kept in
    /// the local record. Failures of the topic itself are retried.
    async fn send(&self, mut letter: DeadLetter) {
        let mut backoff = FailureClass::retry_backoff();
        loop {
            let error = match self.dead_letters.send(&letter).await {
                Ok(()) => {
                    self.ends.recovered("dlq");
                    metrics::counter!(DLQ_TOTAL, "reason" => letter.reason).increment(1);
                    tracing::warn!(
                        reason = letter.reason,
                        detail = letter.detail,
                        truncated = letter.truncated,
                        partition = letter.position.partition,
                        offset = letter.position.offset,
                        "dead-lettered"
                    );
                    self.ends.progress(&letter.position);
                    return;
                }
                Err(e) => e,
            };
            let action = error.rdkafka_error_code().map_or(KafkaAction::Retry(FailureClass::Transient), kafka_action);
            match action {
                KafkaAction::ReplaceProducer => {
                    self.ends.count_failure("dlq", FailureClass::Transient);
                    tracing::error!(error = %error, "the dead-letter producer failed fatally; replacing it");
                    if let Err(e) = self.dead_letters.replace_producer() {
                        tracing::error!(error = %e, "cannot make a new dead-letter producer");
                        FailureClass::Fleet.wait_to_retry(&mut backoff).await;
                    }
                }
                KafkaAction::Retry(FailureClass::Message) if !letter.truncated => {
                    self.ends.count_failure("dlq", FailureClass::Message);
                    tracing::warn!(error = %error, "the dead letter was refused; sending it without payload and headers");
                    letter = letter.stripped();
                }
                KafkaAction::Retry(FailureClass::Message) => {
                    self.ends.count_failure("dlq", FailureClass::Message);
                    self.keep_locally(&letter, &error.to_string());
                    return;
                }
                KafkaAction::Retry(class) => {
                    self.ends.count_failure("dlq", class);
                    self.ends.report("dlq", class, &error.to_string());
                    class.wait_to_retry(&mut backoff).await;
                }
            }
        }
    }

    fn keep_locally(&self, letter: &DeadLetter, refusal: &str) {
        self.local.keep(letter, refusal, now_ms());
        metrics::counter!(DLQ_LOCAL_TOTAL, "reason" => letter.reason).increment(1);
        tracing::error!(
            reason = letter.reason,
            detail = letter.detail,
            request_id = letter.request_id(),
            partition = letter.position.partition,
            offset = letter.position.offset,
            error = refusal,
            "the DLQ topic refused the dead letter; kept in the local record (/dead-letters)"
        );
        self.ends.recovered("dlq");
        self.ends.progress(&letter.position);
    }
}
