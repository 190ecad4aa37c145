//! The sink stage: the task that writes what the stages before it finished,
//! and only then lets the offset move on.
//!
//! Every message ends here exactly one way: its answer in Redis; or, when
//! its answer can never be written there, a dead letter; or, when the DLQ
//! topic refuses even a stripped copy, an entry in the local record. A
//! write that may work later is retried (the message stays uncommitted
//! meanwhile, and the bounded queues before the sink stop the reading).

use super::dead_letters::{DeadLetters, LocalRecord};
use super::failure::{kafka_action, redis_error_class, FailureClass, KafkaAction};
use super::results::{Attempt, ResultSink};
use crate::job::{DeadLetter, Finished, SinkItem, ANSWER_UNWRITABLE};
use crate::metrics::{DLQ_LOCAL_TOTAL, DLQ_TOTAL, E2E_SECONDS, ERRORS_TOTAL, REQUESTS_TOTAL, SINK_FAILURES_TOTAL};
use crate::stages::source::Committer;
use crate::status::health::{Health, SinkProblem};
use fleet_proto::clock::now_ms;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

pub struct SinkStage {
    pub items: mpsc::Receiver<SinkItem>,
    pub results: ResultSink,
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
        let SinkStage { mut items, results, dead_letters, local, committer, answered, health } = self;
        let ends = Ends { committer, answered, health };
        let (letters, letters_rx) = mpsc::channel(LETTER_QUEUE);
        let letter_lane = tokio::spawn(LetterLane { ends: ends.clone(), dead_letters, local }.run(letters_rx));
        let mut answers = AnswerLane { ends, results, letters };
        while let Some(item) = items.recv().await {
            let open = match item {
                SinkItem::Answers(finished) => answers.write(finished).await,
                SinkItem::DeadLetter(letter) => answers.letters.send(*letter).await.is_ok(),
            };
            if !open {
                break;
            }
        }
        drop(answers);
        let _ = letter_lane.await;
    }
}

/// What both lanes do when a message ends or a write fails.
#[derive(Clone)]
struct Ends {
    committer: Committer,
    answered: Arc<AtomicU64>,
    health: Arc<Health>,
}

impl Ends {
    /// A message has ended: its offset may move on.
    fn progress(&self, position: &crate::stages::source::message::Position) {
        self.committer.done(position);
        self.answered.fetch_add(1, Ordering::Relaxed);
        self.health.answered(now_ms());
    }

    fn count_failure(&self, target: &'static str, class: FailureClass) {
        metrics::counter!(SINK_FAILURES_TOTAL, "target" => target, "class" => class.as_str()).increment(1);
    }

    fn report(&self, target: &'static str, class: FailureClass, reason: &str) {
        match class {
            FailureClass::Fleet => {
                tracing::error!(target, reason, "writes fail for every message; reading stops until they work")
            }
            _ => tracing::warn!(target, reason, "write failed; retrying"),
        }
        let problem = SinkProblem { class: class.as_str(), target, reason: first_line(reason) };
        self.health.set_sink_problem(target, Some(problem), now_ms());
    }

    fn recovered(&self, target: &'static str) {
        self.health.set_sink_problem(target, None, now_ms());
    }
}

struct AnswerLane {
    ends: Ends,
    results: ResultSink,
    letters: mpsc::Sender<DeadLetter>,
}

impl AnswerLane {
    /// Writes a batch's answers; retries those that may work later, turns
    /// those that never can into dead letters. False once the dead-letter
    /// lane is gone.
    async fn write(&mut self, mut pending: Vec<Finished>) -> bool {
        let mut backoff = Backoff::new();
        let mut attempt = Attempt::First;
        loop {
            let outcomes = self.results.write(&pending, attempt).await;
            attempt = Attempt::Retry;
            let mut retry = Vec::new();
            let mut worst: Option<(FailureClass, String)> = None;
            for (finished, outcome) in pending.into_iter().zip(outcomes) {
                let Err(e) = outcome else {
                    self.ended(&finished);
                    continue;
                };
                let class = redis_error_class(&e);
                self.ends.count_failure("redis", class);
                if class == FailureClass::Message {
                    tracing::error!(id = %finished.id, error = %e, "the answer cannot be written; dead-lettering it");
                    let letter = DeadLetter::of_answer(&finished, ANSWER_UNWRITABLE, e.to_string());
                    if self.letters.send(letter).await.is_err() {
                        return false;
                    }
                } else {
                    if worst.as_ref().is_none_or(|(w, _)| class == FailureClass::Fleet && *w != class) {
                        worst = Some((class, e.to_string()));
                    }
                    retry.push(finished);
                }
            }
            let Some((class, reason)) = worst else {
                self.ends.recovered("redis");
                return true;
            };
            pending = retry;
            self.ends.report("redis", class, &reason);
            backoff.wait(class).await;
        }
    }

    /// One answer is in Redis.
    fn ended(&self, finished: &Finished) {
        let status = finished.answer.status.as_str();
        let lane = finished.position.lane.as_str();
        metrics::counter!(REQUESTS_TOTAL, "status" => status, "lane" => lane).increment(1);
        if let Some(error) = &finished.answer.error {
            metrics::counter!(ERRORS_TOTAL, "code" => error.code.as_str()).increment(1);
        }
        metrics::histogram!(E2E_SECONDS, "lane" => lane).record(finished.answer.timings_ms.total / 1000.0);
        tracing::debug!(id = %finished.id, status, "answered");
        self.ends.progress(&finished.position);
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
        let mut backoff = Backoff::new();
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
                        backoff.wait(FailureClass::Fleet).await;
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
                    backoff.wait(class).await;
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

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().chars().take(200).collect()
}

/// Capped exponential backoff for retrying a write. The item is held
/// meanwhile; the bounded channels behind it stop the consumer, so nothing
/// piles up while Redis or the broker is away.
struct Backoff {
    next: Duration,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);
    const CAP: Duration = Duration::from_secs(5);

    fn new() -> Self {
        Self { next: Self::FIRST }
    }

    async fn wait(&mut self, class: FailureClass) {
        // What only an operator can fix is retried at the cap at once.
        if class == FailureClass::Fleet {
            self.next = self.next.max(Duration::from_secs(1));
        }
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(Self::CAP);
    }
}
