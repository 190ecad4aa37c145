//! What travels between the stages: a [`Job`] (a prepared request on its
//! way to a batch), a [`Finished`] answer or a [`DeadLetter`] on their way
//! to the sink, the [`Reply`] every request carries from admission to the
//! sink, and the one way every stage builds an answer's timings and an
//! answer given without compute.

use crate::core::input::ModelInput;
use crate::core::message::{Inbound, Position, RawHeader};
use fleet_proto::clock::now_ms;
use fleet_proto::{headers, Answer, Destinations, ErrorCode, JobId, RequestId, Timings};

/// Where a request's answer goes and the job it counts in: decided once, at
/// admission (the lane's default, or what the request asked for within
/// what the model allows), carried with the request to the sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub to: Destinations,
    /// The job it belongs to (`ce_fleetjob`), which a cancel names and a
    /// collector counts.
    pub job: Option<JobId>,
}

/// A prepared request (tokenized or decoded) waiting for a batch.
#[derive(Debug)]
pub struct Job {
    pub position: Position,
    pub id: RequestId,
    pub input: ModelInput,
    /// Feature-cache address of `input`.
    pub input_hash: String,
    pub created_ms: u64,
    pub deadline_ms: u64,
    /// When the worker read it: how long it has been held since.
    pub read_ms: u64,
    pub reply: Reply,
}

impl Job {
    pub fn new(
        position: Position,
        id: RequestId,
        input: ModelInput,
        created_ms: u64,
        deadline_ms: u64,
        reply: Reply,
    ) -> Self {
        Self { position, id, input_hash: input.hash(), input, created_ms, deadline_ms, read_ms: now_ms(), reply }
    }

    /// The job it belongs to, which a cancel names.
    pub fn job_id(&self) -> Option<&JobId> {
        self.reply.job.as_ref()
    }

    /// Its answer, which `answer` is, to go where the request asked.
    pub fn finished(self, answer: Answer, feature: Option<(String, String)>) -> Finished {
        Finished { position: self.position, id: self.id, reply: self.reply, answer, feature }
    }
}

/// One answered request, with where it came from in Kafka and where its
/// answer goes.
#[derive(Debug, Clone)]
pub struct Finished {
    pub position: Position,
    pub id: RequestId,
    pub reply: Reply,
    pub answer: Answer,
    /// A freshly computed output to store in the feature cache: (key, value).
    pub feature: Option<(String, String)>,
}

impl Finished {
    /// An answer given without compute (an error, `expired`, `cancelled`).
    pub fn without_compute(position: Position, id: RequestId, reply: Reply, answer: Answer) -> Self {
        Self { position, id, reply, answer, feature: None }
    }
}

/// What the sink takes: answers, a message that ends as a dead letter, or
/// one whose answer was delivered before and is not written again.
pub enum SinkItem {
    Answers(Vec<Finished>),
    DeadLetter(Box<DeadLetter>),
    /// A message read again after Redis lost its data whose answer went
    /// only to Kafka, where it still is: it ends without compute or write.
    Delivered(Position),
}

/// Why a message ended as a dead letter (`fleet_dlq_reason`,
/// `fleet_dlq_total{reason}`): no request id can be read from it, ...
pub const UNREADABLE_REQUEST_ID: &str = "unreadable_request_id";
/// ... a header name is not UTF-8 and no request id can be read, ...
pub const MALFORMED_HEADER: &str = "malformed_header";
/// ... admitting it panicked and no request id can be read, ...
pub const PREPARE_PANICKED: &str = "prepare_panicked";
/// ... or its answer cannot be written where its client looks.
pub const ANSWER_UNWRITABLE: &str = "answer_unwritable";
/// Every reason a worker gives.
pub const DEAD_LETTER_REASONS: &[&str] =
    &[UNREADABLE_REQUEST_ID, MALFORMED_HEADER, PREPARE_PANICKED, ANSWER_UNWRITABLE];

/// The longest `fleet_dlq_detail` written: a reason, not a payload.
pub const MAX_DETAIL_CHARS: usize = 1024;

/// What goes to the dead-letter topic for one message, and why.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    pub position: Position,
    pub key: Option<Vec<u8>>,
    pub headers: Vec<RawHeader>,
    pub payload: Option<Vec<u8>>,
    /// A stable snake_case word (`fleet_dlq_total{reason}`).
    pub reason: &'static str,
    pub detail: String,
    /// The payload and the original headers were left out (the full copy
    /// was refused as too large).
    pub truncated: bool,
}

impl DeadLetter {
    /// The message as it was read, with why it could not become a request.
    pub fn of_message(inbound: Inbound, reason: &'static str, detail: String) -> Self {
        let Inbound { position, key, headers, payload, .. } = inbound;
        Self { position, key, headers, payload, reason, detail, truncated: false }
    }

    /// An answer that could not be written where its client looks: the
    /// answer JSON itself, keyed by the request id (the input stays in the
    /// source topic at the position `fleet_dlq_source` names).
    pub fn of_answer(finished: &Finished, reason: &'static str, detail: String) -> Self {
        Self {
            position: finished.position.clone(),
            key: Some(finished.id.as_str().as_bytes().to_vec()),
            headers: vec![RawHeader::new(headers::CONTENT_TYPE, Some(b"application/json".to_vec()))],
            payload: Some(finished.answer.to_json().into_bytes()),
            reason,
            detail,
            truncated: false,
        }
    }

    /// The same letter without the payload and the original headers: what
    /// still fits when the full copy is refused for its size.
    pub fn stripped(&self) -> Self {
        Self { headers: Vec::new(), payload: None, truncated: true, ..self.clone() }
    }

    /// The letter's request id, when its key reads as one (for the log).
    pub fn request_id(&self) -> Option<String> {
        self.key.as_deref().and_then(|k| RequestId::from_bytes(k).ok()).map(|id| id.to_string())
    }

    /// The detail as written: at most [`MAX_DETAIL_CHARS`].
    pub fn short_detail(&self) -> String {
        self.detail.chars().take(MAX_DETAIL_CHARS).collect()
    }
}

/// An answer's timings: `queue` from creation to the model call (or to now
/// without one), `infer` the model call, `total` creation to now. Without a
/// known creation time (an unreadable `ce_time`) everything is 0.
pub fn timings(created_ms: Option<u64>, infer: Option<(u64, f64)>, now_ms: u64) -> Timings {
    let Some(created_ms) = created_ms else { return Timings::default() };
    let total = now_ms.saturating_sub(created_ms) as f64;
    match infer {
        Some((started_ms, infer_ms)) => {
            Timings { queue: started_ms.saturating_sub(created_ms) as f64, infer: infer_ms, total }
        }
        None => Timings { queue: total, infer: 0.0, total },
    }
}

/// The answer of a request whose job was cancelled before it was computed.
pub fn cancelled_answer(job: Job, model: &str, version: u64, now_ms: u64) -> Finished {
    let answer = Answer::cancelled(model, version, timings(Some(job.created_ms), None, now_ms));
    job.finished(answer, None)
}

/// An `error` answer given without compute.
pub fn error_answer(
    model: &str,
    version: u64,
    code: ErrorCode,
    message: String,
    created_ms: Option<u64>,
    now_ms: u64,
) -> Answer {
    Answer::error(model, version, code, message, timings(created_ms, None, now_ms))
}

/// A finished request for unit tests: `r-1` at partition 2, offset 40.
#[cfg(test)]
pub(crate) fn finished_for_test() -> Finished {
    let answer = error_answer("minilm", 1, ErrorCode::BadRequest, "x".to_owned(), None, 0);
    Finished::without_compute(
        Position { lane: fleet_proto::Lane::Interactive, partition: 2, offset: 40, generation: 1 },
        RequestId::parse("r-1").unwrap(),
        Reply { to: Destinations::REDIS, job: None },
        answer,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_split_queue_and_model_time_and_never_go_negative() {
        let t = timings(Some(1_000), Some((1_300, 50.0)), 1_400);
        assert_eq!((t.queue, t.infer, t.total), (300.0, 50.0, 400.0));
        let refused = timings(Some(1_000), None, 1_250);
        assert_eq!((refused.queue, refused.infer, refused.total), (250.0, 0.0, 250.0));
        let future = timings(Some(5_000), None, 1_000);
        assert_eq!(future.total, 0.0, "a creation time ahead of the clock");
        assert_eq!(timings(None, None, 1_000), Timings::default());
    }

    #[test]
    fn an_unwritable_answer_becomes_a_letter_of_its_json_and_strips_to_its_reason() {
        let letter = DeadLetter::of_answer(&finished_for_test(), "answer_unwritable", "WRONGTYPE".into());
        assert_eq!(letter.key.as_deref(), Some(&b"r-1"[..]));
        assert!(String::from_utf8(letter.payload.clone().unwrap()).unwrap().contains("\"bad_request\""));
        assert_eq!(letter.request_id().as_deref(), Some("r-1"));
        let stripped = letter.stripped();
        assert!(stripped.payload.is_none() && stripped.headers.is_empty() && stripped.truncated);
        assert_eq!((stripped.reason, stripped.position.offset), ("answer_unwritable", 40));
        let long = DeadLetter { detail: "x".repeat(5000), ..letter };
        assert_eq!(long.short_detail().len(), MAX_DETAIL_CHARS);
    }
}
