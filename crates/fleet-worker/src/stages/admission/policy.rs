//! Admission: the first decision about every consumed message, before any
//! compute. A message becomes a job (a text, tokenized), an image to decode,
//! an answer to write at once (`error` with a stable code, or `expired`), or
//! — when no request id can be read, so no answer has an address — a dead
//! letter. Deterministic (the caller passes `now`), and the same for every
//! model kind: only the [`Intake`] differs.
//!
//! Images are judged here from their header alone (format, declared type,
//! canvas size), so nothing over the model's limits is ever decoded.

use super::image::{image_error_code, ImageDecode};
use super::intake::Intake;
use super::tokenize::{TextTokenizer, TokenizeError};
use crate::config::model::RequestTtls;
use crate::config::AnswersConfig;
use crate::core::cancel_tracking::CancelledJobs;
use crate::core::input::{ModelInput, PairRow};
use crate::core::job::{error_answer, timings, DeadLetter, Finished, Job, Reply, MALFORMED_HEADER};
use crate::core::message::{Inbound, Position};
use fleet_image::{Format, ImageLimits};
use fleet_proto::{
    Answer, ContentType, Destination, Destinations, Envelope, ErrorCode, JobId, ModelName, RequestId, RerankRequest,
};
use std::sync::Arc;

/// What admission needs to know about the model it admits for.
pub struct AdmissionPolicy {
    pub model: ModelName,
    /// The version whose limits admit now: the answers given here are that
    /// version's (tagged with it, kept for its TTL), from its handover on.
    pub version: u64,
    pub intake: Intake,
    /// The deadline when the producer set none, by lane: `ce_time` + this.
    pub request_ttls: RequestTtls,
    /// Where each lane's answers go, and what a request may ask for.
    pub answers: AnswersConfig,
    /// Jobs this worker knows are cancelled: their requests are answered
    /// `cancelled` here, before they are even tokenized.
    pub cancelled: Arc<CancelledJobs>,
}

/// Where an admitted message goes next.
#[derive(Debug)]
pub enum Admitted {
    /// Ready for a batch.
    Job(Job),
    /// An image whose header passed: decoded next, under the budget.
    Decode(ImageDecode),
    /// Answered without compute: an `error`, `expired` or `cancelled` answer.
    Answer(Finished),
    /// No readable request id: only the dead-letter topic can take it.
    DeadLetter(DeadLetter),
    /// Read again after Redis lost its data, its answer not in Redis (on
    /// Kafka, where it still is): it ends without compute or write.
    Delivered(Position),
}

/// One message's request, once its envelope is read and its deadline known.
struct Request<'a> {
    position: Position,
    envelope: Envelope,
    reply: Reply,
    deadline_ms: u64,
    payload: &'a [u8],
    now_ms: u64,
}

impl AdmissionPolicy {
    /// Decides where `inbound` goes. What goes on with it (the image's
    /// bytes, or the whole message as a dead letter) is moved out of it.
    pub fn admit(&self, inbound: &mut Inbound, now_ms: u64) -> Admitted {
        let position = inbound.position.clone();
        let lane_default = self.answers.default_for(position.lane);
        if let Some(malformed) = inbound.malformed_header() {
            return match inbound.readable_id() {
                Some(id) => match self.reply(inbound, lane_default, None) {
                    Some(reply) => {
                        self.refuse(position, id, reply, ErrorCode::BadRequest, malformed.to_string(), None, now_ms)
                    }
                    None => Admitted::Delivered(position),
                },
                None => dead_letter(inbound, MALFORMED_HEADER, malformed.to_string()),
            };
        }
        let envelope = match Envelope::parse(inbound.key.as_deref(), inbound.header_pairs()) {
            Ok(envelope) => envelope,
            Err(rejection) => {
                let Some(id) = rejection.id.clone() else {
                    return dead_letter(inbound, rejection.dlq_reason(), rejection.message);
                };
                return match self.reply(inbound, lane_default, rejection.job) {
                    Some(reply) => self.refuse(position, id, reply, rejection.code, rejection.message, None, now_ms),
                    None => Admitted::Delivered(position),
                };
            }
        };
        let (to, refused) = match self.answers.resolve(position.lane, envelope.reply_to) {
            Ok(to) => (to, None),
            // Refused for where it asked its answer to go: the refusal goes
            // where the lane's answers go.
            Err(message) => (lane_default, Some(message)),
        };
        let Some(reply) = self.reply(inbound, to, envelope.job.clone()) else {
            return Admitted::Delivered(position);
        };
        if let Some(message) = refused {
            let created_ms = Some(envelope.created_ms);
            return self.refuse(position, envelope.id, reply, ErrorCode::BadRequest, message, created_ms, now_ms);
        }
        if let Some(job) = &envelope.job {
            if self.cancelled.is_known(job) {
                let t = timings(Some(envelope.created_ms), None, now_ms);
                let answer = Answer::cancelled(self.model.as_str(), self.version, t);
                return Admitted::Answer(Finished::without_compute(position, envelope.id, reply, answer));
            }
            // Watched from now on: a cancel is learned while it is held.
            self.cancelled.note_active(job, now_ms);
        }
        let deadline_ms = envelope.effective_deadline_ms(self.request_ttls.of(position.lane));
        if deadline_ms <= now_ms {
            let t = timings(Some(envelope.created_ms), None, now_ms);
            let answer = Answer::expired(self.model.as_str(), self.version, t);
            return Admitted::Answer(Finished::without_compute(position, envelope.id, reply, answer));
        }
        let payload = inbound.payload.as_deref().unwrap_or_default();
        let request = Request { position, envelope, reply, deadline_ms, payload, now_ms };
        match &self.intake {
            Intake::Text { max_text_bytes, tokenizer, documents: None } => {
                self.admit_text(request, *max_text_bytes, tokenizer)
            }
            Intake::Text { max_text_bytes, tokenizer, documents: Some(max_documents) } => {
                self.admit_pairs(request, *max_text_bytes, *max_documents, tokenizer)
            }
            Intake::Image { limits, decoding } => match probe_image(&self.model, &request, limits) {
                Ok(header) => {
                    let Request { position, envelope, reply, deadline_ms, .. } = request;
                    Admitted::Decode(ImageDecode {
                        position,
                        id: envelope.id,
                        created_ms: envelope.created_ms,
                        deadline_ms,
                        reply,
                        header,
                        bytes: inbound.payload.take().unwrap_or_default(),
                        decoding: decoding.clone(),
                        version: self.version,
                    })
                }
                Err((code, message)) => self.refuse_request(&request, code, message),
            },
        }
    }

    fn admit_text(&self, request: Request<'_>, max_text_bytes: usize, tokenizer: &TextTokenizer) -> Admitted {
        let payload = request.payload;
        if request.envelope.content_type != ContentType::Text {
            let message = format!("{} serves text, not {}", self.model, request.envelope.content_type);
            return self.refuse_request(&request, ErrorCode::UnsupportedFormat, message);
        }
        if payload.len() > max_text_bytes {
            let message = format!("text is {} bytes, at most {max_text_bytes} allowed", payload.len());
            return self.refuse_request(&request, ErrorCode::TextTooLong, message);
        }
        let text = match std::str::from_utf8(payload) {
            Ok(text) => text,
            Err(e) => {
                let message = format!("text is not UTF-8 (invalid byte at {})", e.valid_up_to());
                return self.refuse_request(&request, ErrorCode::DecodeFailed, message);
            }
        };
        if text.trim().is_empty() {
            return self.refuse_request(&request, ErrorCode::EmptyInput, "text is empty".into());
        }
        match tokenizer.tokenize(text) {
            Ok(tokens) => {
                let input = ModelInput::Tokens { ids: tokens.ids, truncated: tokens.truncated };
                let Request { position, envelope, reply, deadline_ms, .. } = request;
                Admitted::Job(Job::new(position, envelope.id, input, envelope.created_ms, deadline_ms, reply))
            }
            Err(e) => {
                let code = match e {
                    TokenizeError::TooLong { .. } => ErrorCode::TextTooLong,
                    _ => ErrorCode::DecodeFailed,
                };
                self.refuse_request(&request, code, e.to_string())
            }
        }
    }

    /// A rerank request: `{"query", "documents"}` as JSON, each document
    /// paired with the query as one row.
    fn admit_pairs(
        &self,
        request: Request<'_>,
        max_text_bytes: usize,
        max_documents: usize,
        tokenizer: &TextTokenizer,
    ) -> Admitted {
        if request.envelope.content_type != ContentType::Json {
            let message = format!(
                "{} reranks {{\"query\", \"documents\"}} as {}, not {}",
                self.model,
                ContentType::Json,
                request.envelope.content_type
            );
            return self.refuse_request(&request, ErrorCode::UnsupportedFormat, message);
        }
        let rerank = match RerankRequest::from_json(request.payload) {
            Ok(rerank) => rerank,
            Err(e) => {
                let message = format!("not a rerank request {{\"query\", \"documents\": [...]}}: {e}");
                return self.refuse_request(&request, ErrorCode::DecodeFailed, message);
            }
        };
        match pair_rows(&rerank, max_text_bytes, max_documents, tokenizer) {
            Ok(input) => {
                let Request { position, envelope, reply, deadline_ms, .. } = request;
                Admitted::Job(Job::new(position, envelope.id, input, envelope.created_ms, deadline_ms, reply))
            }
            Err((code, message)) => self.refuse_request(&request, code, message),
        }
    }

    fn refuse_request(&self, request: &Request<'_>, code: ErrorCode, message: String) -> Admitted {
        let (position, id, reply) = (request.position.clone(), request.envelope.id.clone(), request.reply.clone());
        self.refuse(position, id, reply, code, message, Some(request.envelope.created_ms), request.now_ms)
    }

    #[allow(clippy::too_many_arguments)]
    fn refuse(
        &self,
        position: Position,
        id: RequestId,
        reply: Reply,
        code: ErrorCode,
        message: String,
        created_ms: Option<u64>,
        now_ms: u64,
    ) -> Admitted {
        let answer = error_answer(self.model.as_str(), self.version, code, message, created_ms, now_ms);
        Admitted::Answer(Finished::without_compute(position, id, reply, answer))
    }

    /// Where the answer of `inbound` goes: `to`, in `job`. A message read
    /// again because Redis lost its data is answered again only where
    /// Redis was to have it: Kafka still holds what went there, so one
    /// whose answer went only to Kafka is `None` (delivered; not computed
    /// again), and one that went to both is answered to Redis alone.
    fn reply(&self, inbound: &Inbound, to: Destinations, job: Option<JobId>) -> Option<Reply> {
        if !inbound.replayed {
            return Some(Reply { to, job });
        }
        to.includes(Destination::Redis).then_some(Reply { to: Destinations::REDIS, job })
    }
}

/// The image's header, probed from its bytes, when it is within the model's
/// limits; else why not.
fn probe_image(
    model: &ModelName,
    request: &Request<'_>,
    limits: &ImageLimits,
) -> Result<fleet_image::Header, (ErrorCode, String)> {
    let content_type = &request.envelope.content_type;
    let Some(declared) = Format::from_mime(content_type.as_str()) else {
        return Err((ErrorCode::UnsupportedFormat, format!("{model} serves images, not {content_type}")));
    };
    if request.payload.is_empty() {
        return Err((ErrorCode::EmptyInput, "image is empty".into()));
    }
    fleet_image::probe(request.payload, Some(declared), limits).map_err(|e| (image_error_code(&e), e.to_string()))
}

/// A rerank request's pairs, or why it cannot be served.
fn pair_rows(
    rerank: &RerankRequest,
    max_text_bytes: usize,
    max_documents: usize,
    tokenizer: &TextTokenizer,
) -> Result<ModelInput, (ErrorCode, String)> {
    if rerank.query.trim().is_empty() {
        return Err((ErrorCode::EmptyInput, "the query is empty".into()));
    }
    if rerank.documents.is_empty() {
        return Err((ErrorCode::EmptyInput, "no documents to rerank".into()));
    }
    if rerank.documents.len() > max_documents {
        let message = format!("{} documents, at most {max_documents} per request", rerank.documents.len());
        return Err((ErrorCode::BadRequest, message));
    }
    let texts = std::iter::once(("the query".to_owned(), &rerank.query))
        .chain(rerank.documents.iter().enumerate().map(|(i, d)| (format!("document {i}"), d)));
    for (what, text) in texts {
        if text.len() > max_text_bytes {
            return Err((ErrorCode::TextTooLong, format!("{what} is {} bytes, at most {max_text_bytes}", text.len())));
        }
        if text.trim().is_empty() {
            return Err((ErrorCode::EmptyInput, format!("{what} is empty")));
        }
    }
    let mut rows = Vec::with_capacity(rerank.documents.len());
    let mut truncated = false;
    for (i, document) in rerank.documents.iter().enumerate() {
        let pair = tokenizer.tokenize_pair(&rerank.query, document).map_err(|e| match e {
            TokenizeError::TooLong { .. } => (ErrorCode::TextTooLong, format!("query and document {i}: {e}")),
            _ => (ErrorCode::DecodeFailed, e.to_string()),
        })?;
        truncated |= pair.truncated;
        rows.push(PairRow { ids: pair.ids, type_ids: pair.type_ids });
    }
    Ok(ModelInput::Pairs { rows, truncated })
}

/// The whole message as a dead letter; what stays behind is its position.
fn dead_letter(inbound: &mut Inbound, reason: &'static str, detail: String) -> Admitted {
    let empty =
        Inbound { position: inbound.position.clone(), key: None, headers: Vec::new(), payload: None, replayed: false };
    Admitted::DeadLetter(DeadLetter::of_message(std::mem::replace(inbound, empty), reason, detail))
}

#[cfg(test)]
mod tests;
