//! The sink's answer lane: a batch's answers written everywhere each is to
//! go (Redis, the answers topic, both at once), retried while a write may
//! work later, dead-lettered when it never can; an answer ends once every
//! destination it names has it.

use super::answer_records::AnswerRecords;
use super::ends::Ends;
use super::failure::{kafka_action, redis_error_class, FailureClass, KafkaAction};
use super::results::{Attempt, ResultSink};
use crate::core::job::{DeadLetter, Finished, ANSWER_UNWRITABLE};
use crate::metrics::{ANSWERS_DELIVERED_TOTAL, E2E_SECONDS, ERRORS_TOTAL, REQUESTS_TOTAL};
use fleet_proto::{Destination, Destinations};
use tokio::sync::mpsc;

/// The `target` label of an answer destination's failures.
fn target_of(destination: Destination) -> &'static str {
    match destination {
        Destination::Redis => "redis",
        Destination::Kafka => "answers",
    }
}

/// One answer on its way: where it is still to be written.
struct Pending {
    finished: Finished,
    left: Destinations,
}

/// The worst failure of each destination in one round of writes.
#[derive(Default)]
struct RoundFailures {
    redis: Option<(FailureClass, String)>,
    kafka: Option<(FailureClass, String)>,
}

impl RoundFailures {
    /// Keeps the worst: a failure only an operator can cure over one that
    /// may pass.
    fn note(&mut self, destination: Destination, class: FailureClass, reason: String) {
        let worst = match destination {
            Destination::Redis => &mut self.redis,
            Destination::Kafka => &mut self.kafka,
        };
        if worst.as_ref().is_none_or(|(w, _)| class == FailureClass::Fleet && *w != class) {
            *worst = Some((class, reason));
        }
    }

    fn of(&self, destination: Destination) -> Option<&(FailureClass, String)> {
        match destination {
            Destination::Redis => self.redis.as_ref(),
            Destination::Kafka => self.kafka.as_ref(),
        }
    }

    /// The class to back off by: the worst of both.
    fn worst(&self) -> Option<FailureClass> {
        let classes = [&self.redis, &self.kafka].into_iter().flatten().map(|(class, _)| *class);
        classes.reduce(|a, b| if b == FailureClass::Fleet { b } else { a })
    }
}

pub(super) struct AnswerLane {
    pub(super) ends: Ends,
    pub(super) results: ResultSink,
    pub(super) answer_records: AnswerRecords,
    pub(super) letters: mpsc::Sender<DeadLetter>,
}

impl AnswerLane {
    /// Writes a batch's answers everywhere each is to go (both
    /// destinations at once); retries those that may work later, turns
    /// those that never can into dead letters. An answer ends once every
    /// destination has it. False once the dead-letter lane is gone.
    pub(super) async fn write(&mut self, batch: Vec<Finished>) -> bool {
        let mut pending: Vec<Pending> =
            batch.into_iter().map(|finished| Pending { left: finished.reply.to, finished }).collect();
        let mut backoff = FailureClass::retry_backoff();
        let mut attempt = Attempt::First;
        loop {
            let (failures, unwritable) = self.write_round(&mut pending, attempt).await;
            attempt = Attempt::Retry;
            // Refused for what it is: nothing else can take it but the DLQ.
            for (index, reason) in unwritable.into_iter().rev() {
                let Pending { finished, .. } = pending.remove(index);
                tracing::error!(id = %finished.id, error = %reason, "the answer cannot be written; dead-lettering it");
                let letter = DeadLetter::of_answer(&finished, ANSWER_UNWRITABLE, reason);
                if self.letters.send(letter).await.is_err() {
                    return false;
                }
            }
            pending.retain(|p| {
                if p.left.is_empty() {
                    self.ended(&p.finished);
                }
                !p.left.is_empty()
            });
            for destination in Destination::ALL {
                match failures.of(destination) {
                    Some((class, reason)) => self.ends.report(target_of(destination), *class, reason),
                    None => self.ends.recovered(target_of(destination)),
                }
            }
            let Some(class) = failures.worst() else { return true };
            class.wait_to_retry(&mut backoff).await;
        }
    }

    /// One try at every destination an answer still lacks. Returns the
    /// failures that may pass, and the answers a destination refused for
    /// what they are (by index, ascending, with why).
    async fn write_round(&self, pending: &mut [Pending], attempt: Attempt) -> (RoundFailures, Vec<(usize, String)>) {
        let going_to = |destination| -> Vec<usize> {
            (0..pending.len()).filter(|&i| pending[i].left.includes(destination)).collect()
        };
        let (to_redis, to_kafka) = (going_to(Destination::Redis), going_to(Destination::Kafka));
        let (redis_outcomes, kafka_outcomes) = {
            let finished =
                |indices: &[usize]| -> Vec<&Finished> { indices.iter().map(|&i| &pending[i].finished).collect() };
            let (redis, kafka) = (finished(&to_redis), finished(&to_kafka));
            // Cache entries of what was computed, wherever its answer goes:
            // once, beside the first writes.
            let features: Vec<&Finished> = match attempt {
                Attempt::First => pending.iter().map(|p| &p.finished).collect(),
                Attempt::Retry => Vec::new(),
            };
            let (redis_outcomes, kafka_outcomes, ()) = futures::join!(
                self.results.write(&redis, attempt),
                self.answer_records.send(&kafka),
                self.results.store_features(&features)
            );
            (redis_outcomes, kafka_outcomes)
        };
        let mut failures = RoundFailures::default();
        let mut unwritable = std::collections::BTreeMap::new();
        for (index, outcome) in to_redis.into_iter().zip(redis_outcomes) {
            match outcome {
                Ok(()) => self.delivered(&mut pending[index], Destination::Redis),
                Err(e) => {
                    let class = redis_error_class(&e);
                    self.ends.count_failure("redis", class);
                    match class {
                        FailureClass::Message => {
                            unwritable.entry(index).or_insert_with(|| e.to_string());
                        }
                        _ => failures.note(Destination::Redis, class, e.to_string()),
                    }
                }
            }
        }
        let mut replaced = false;
        for (index, outcome) in to_kafka.into_iter().zip(kafka_outcomes) {
            let Err(e) = outcome else {
                self.delivered(&mut pending[index], Destination::Kafka);
                continue;
            };
            let action = e.rdkafka_error_code().map_or(KafkaAction::Retry(FailureClass::Transient), kafka_action);
            let class = match action {
                KafkaAction::ReplaceProducer => {
                    if !std::mem::replace(&mut replaced, true) {
                        tracing::error!(error = %e, "the answers producer failed fatally; replacing it");
                        if let Err(e) = self.answer_records.replace_producer() {
                            tracing::error!(error = %e, "cannot make a new answers producer");
                        }
                    }
                    FailureClass::Transient
                }
                KafkaAction::Retry(class) => class,
            };
            self.ends.count_failure("answers", class);
            match class {
                FailureClass::Message => {
                    unwritable.entry(index).or_insert_with(|| e.to_string());
                }
                _ => failures.note(Destination::Kafka, class, e.to_string()),
            }
        }
        (failures, unwritable.into_iter().collect())
    }

    /// One destination has the answer.
    fn delivered(&self, pending: &mut Pending, destination: Destination) {
        pending.left = pending.left.without(destination);
        let lane = pending.finished.position.lane.as_str();
        metrics::counter!(ANSWERS_DELIVERED_TOTAL, "destination" => destination.as_str(), "lane" => lane).increment(1);
    }

    /// One answer is everywhere it goes.
    fn ended(&self, finished: &Finished) {
        let status = finished.answer.status.as_str();
        let lane = finished.position.lane.as_str();
        metrics::counter!(REQUESTS_TOTAL, "status" => status, "lane" => lane).increment(1);
        if let Some(error) = &finished.answer.error {
            metrics::counter!(ERRORS_TOTAL, "code" => error.code.as_str()).increment(1);
        }
        metrics::histogram!(E2E_SECONDS, "lane" => lane).record(finished.answer.timings_ms.total / 1000.0);
        tracing::debug!(id = %finished.id, status, to = %finished.reply.to, "answered");
        self.ends.progress(&finished.position);
    }
}
