//! Admission: the first decision about every consumed message, before any
//! compute. Pure (the caller passes `now`): a message becomes a text request
//! to tokenize or an image request to decode, an answer to write at once
//! (`error` with a stable code, or `expired`), or — when no request id can be
//! read, so no answer has an address — a dead letter.
//!
//! Images are judged here from their header alone (format, declared type,
//! canvas size), so nothing over the model's limits is ever decoded.

use crate::lifecycle::ServingVersion;
use crate::message::Inbound;
use fleet_image::{Format, Header, ImageError, ImageLimits};
use fleet_proto::{Answer, ContentType, Envelope, ErrorCode, ModelName, RequestId, Timings};

/// What admission needs to know about the model it admits for.
#[derive(Debug, Clone)]
pub struct AdmissionPolicy {
    pub model: ModelName,
    /// The version answers are tagged with (swapped while serving).
    pub version: ServingVersion,
    pub inputs: InputPolicy,
    /// The deadline when the producer set none: `ce_time` + this.
    pub request_ttl_ms: u64,
}

/// The inputs a model takes, with their limits.
#[derive(Debug, Clone)]
pub enum InputPolicy {
    Text { max_text_bytes: usize },
    Image { limits: ImageLimits },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ImageRequest {
    pub envelope: Envelope,
    pub deadline_ms: u64,
    /// Probed and within limits; the bytes stay in the message's payload.
    pub header: Header,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TextRequest {
    pub envelope: Envelope,
    pub deadline_ms: u64,
    pub text: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    Text(TextRequest),
    Image(ImageRequest),
    /// Answered without compute: an `error` or `expired` answer.
    Answer {
        id: RequestId,
        answer: Answer,
    },
    /// No readable request id: only the dead-letter topic can take it.
    DeadLetter {
        reason: &'static str,
        detail: String,
    },
}

/// The dead-letter reason of a message with a header name that is not
/// UTF-8 and no readable request id.
pub const MALFORMED_HEADER: &str = "malformed_header";

impl AdmissionPolicy {
    pub fn admit(&self, inbound: &Inbound, now_ms: u64) -> Admission {
        if let Some(malformed) = inbound.malformed_header() {
            let ce_id = inbound.header_pairs().find(|(name, _)| name.eq_ignore_ascii_case(fleet_proto::headers::ID));
            return match fleet_proto::envelope::readable_id(inbound.key.as_deref(), ce_id.and_then(|(_, v)| v)) {
                Some(id) => self.refuse(id, ErrorCode::BadRequest, malformed.to_string(), None, now_ms),
                None => Admission::DeadLetter { reason: MALFORMED_HEADER, detail: malformed.to_string() },
            };
        }
        let envelope = match Envelope::parse(inbound.key.as_deref(), inbound.header_pairs()) {
            Ok(envelope) => envelope,
            Err(rejection) => {
                return match rejection.id.clone() {
                    Some(id) => self.refuse(id, rejection.code, rejection.message, None, now_ms),
                    None => Admission::DeadLetter { reason: rejection.dlq_reason(), detail: rejection.message },
                }
            }
        };
        let created = Some(envelope.created_ms);
        let deadline_ms = envelope.effective_deadline_ms(self.request_ttl_ms);
        if deadline_ms <= now_ms {
            let answer = Answer::expired(self.model.as_str(), self.version.get(), self.timings(created, now_ms));
            return Admission::Answer { id: envelope.id, answer };
        }
        let payload = inbound.payload.as_deref().unwrap_or_default();
        match &self.inputs {
            InputPolicy::Text { max_text_bytes } => {
                self.admit_text(envelope, deadline_ms, payload, *max_text_bytes, now_ms)
            }
            InputPolicy::Image { limits } => self.admit_image(envelope, deadline_ms, payload, limits, now_ms),
        }
    }

    fn admit_text(
        &self,
        envelope: Envelope,
        deadline_ms: u64,
        payload: &[u8],
        max_text_bytes: usize,
        now_ms: u64,
    ) -> Admission {
        let created = Some(envelope.created_ms);
        if envelope.content_type != ContentType::Text {
            let message = format!("{} serves text, not {}", self.model, envelope.content_type);
            return self.refuse(envelope.id, ErrorCode::UnsupportedFormat, message, created, now_ms);
        }
        if payload.len() > max_text_bytes {
            let message = format!("text is {} bytes, at most {max_text_bytes} allowed", payload.len());
            return self.refuse(envelope.id, ErrorCode::TextTooLong, message, created, now_ms);
        }
        let text = match std::str::from_utf8(payload) {
            Ok(text) => text,
            Err(e) => {
                let message = format!("text is not UTF-8 (invalid byte at {})", e.valid_up_to());
                return self.refuse(envelope.id, ErrorCode::DecodeFailed, message, created, now_ms);
            }
        };
        if text.trim().is_empty() {
            return self.refuse(envelope.id, ErrorCode::EmptyInput, "text is empty".into(), created, now_ms);
        }
        Admission::Text(TextRequest { text: text.to_owned(), deadline_ms, envelope })
    }

    fn admit_image(
        &self,
        envelope: Envelope,
        deadline_ms: u64,
        payload: &[u8],
        limits: &ImageLimits,
        now_ms: u64,
    ) -> Admission {
        let created = Some(envelope.created_ms);
        let Some(declared) = Format::from_mime(envelope.content_type.as_str()) else {
            let message = format!("{} serves images, not {}", self.model, envelope.content_type);
            return self.refuse(envelope.id, ErrorCode::UnsupportedFormat, message, created, now_ms);
        };
        if payload.is_empty() {
            return self.refuse(envelope.id, ErrorCode::EmptyInput, "image is empty".into(), created, now_ms);
        }
        match fleet_image::probe(payload, Some(declared), limits) {
            Ok(header) => Admission::Image(ImageRequest { envelope, deadline_ms, header }),
            Err(e) => self.refuse(envelope.id, image_error_code(&e), e.to_string(), created, now_ms),
        }
    }

    fn refuse(
        &self,
        id: RequestId,
        code: ErrorCode,
        message: String,
        created_ms: Option<u64>,
        now_ms: u64,
    ) -> Admission {
        let answer =
            Answer::error(self.model.as_str(), self.version.get(), code, message, self.timings(created_ms, now_ms));
        Admission::Answer { id, answer }
    }

    fn timings(&self, created_ms: Option<u64>, now_ms: u64) -> Timings {
        let total = created_ms.map_or(0.0, |c| now_ms.saturating_sub(c) as f64);
        Timings { queue: total, infer: 0.0, total }
    }
}

/// The stable answer code for each way an image is refused.
pub fn image_error_code(error: &ImageError) -> ErrorCode {
    match error {
        ImageError::TooLarge(_) => ErrorCode::ImageTooLarge,
        ImageError::Unsupported(_) => ErrorCode::UnsupportedFormat,
        ImageError::Malformed(_) => ErrorCode::DecodeFailed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Position, RawHeader};
    use fleet_proto::{headers as h, Status};

    const NOW: u64 = 1_764_000_001_000;

    fn policy() -> AdmissionPolicy {
        AdmissionPolicy {
            model: ModelName::parse("minilm").unwrap(),
            version: ServingVersion::new(4),
            inputs: InputPolicy::Text { max_text_bytes: 64 },
            request_ttl_ms: 30_000,
        }
    }

    fn image_policy() -> AdmissionPolicy {
        let limits = ImageLimits { max_bytes: 1000, max_pixels: 10, formats: vec![Format::Png] };
        AdmissionPolicy { inputs: InputPolicy::Image { limits }, ..policy() }
    }

    fn png(width: u32, height: u32) -> Vec<u8> {
        use image::ImageEncoder;
        let mut out = Vec::new();
        let pixels = vec![128u8; (width * height * 3) as usize];
        image::codecs::png::PngEncoder::new(&mut out)
            .write_image(&pixels, width, height, image::ExtendedColorType::Rgb8)
            .unwrap();
        out
    }

    fn envelope(content_type: ContentType) -> Envelope {
        Envelope {
            id: RequestId::parse("r1").unwrap(),
            source: "test".into(),
            created_ms: NOW - 1_000,
            content_type,
            deadline_ms: None,
            parts: 1,
        }
    }

    fn inbound(envelope: &Envelope, payload: &[u8]) -> Inbound {
        Inbound {
            position: Position { partition: 0, offset: 7, generation: 1 },
            key: Some(envelope.id.as_str().as_bytes().to_vec()),
            headers: envelope.to_headers().into_iter().map(|(k, v)| RawHeader::new(k, Some(v.into_bytes()))).collect(),
            payload: Some(payload.to_vec()),
        }
    }

    fn error_code(admission: Admission) -> ErrorCode {
        match admission {
            Admission::Answer { answer, .. } => {
                assert_eq!(answer.status, Status::Error);
                assert_eq!((answer.model.as_str(), answer.version), ("minilm", 4));
                answer.error.unwrap().code
            }
            other => panic!("expected an error answer, got {other:?}"),
        }
    }

    #[test]
    fn admits_valid_text_with_its_deadline() {
        match policy().admit(&inbound(&envelope(ContentType::Text), "hello there".as_bytes()), NOW) {
            Admission::Text(req) => {
                assert_eq!(req.text, "hello there");
                assert_eq!(req.deadline_ms, NOW - 1_000 + 30_000);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_bad_input_gets_its_stable_code() {
        let p = policy();
        let text = envelope(ContentType::Text);
        assert_eq!(error_code(p.admit(&inbound(&text, b""), NOW)), ErrorCode::EmptyInput);
        assert_eq!(error_code(p.admit(&inbound(&text, b" \n\t "), NOW)), ErrorCode::EmptyInput);
        assert_eq!(error_code(p.admit(&inbound(&text, b"caf\xe9"), NOW)), ErrorCode::DecodeFailed);
        assert_eq!(error_code(p.admit(&inbound(&text, &[b'a'; 65]), NOW)), ErrorCode::TextTooLong);
        let image = envelope(ContentType::Png);
        assert_eq!(error_code(p.admit(&inbound(&image, b"\x89PNG"), NOW)), ErrorCode::UnsupportedFormat);

        let mut no_time = inbound(&text, b"hi");
        no_time.headers.retain(|header| header.name != h::TIME.as_bytes());
        assert_eq!(error_code(p.admit(&no_time, NOW)), ErrorCode::BadRequest);
        let mut unknown_type = inbound(&text, b"hi");
        for header in &mut unknown_type.headers {
            if header.name == h::CONTENT_TYPE.as_bytes() {
                header.value = Some(b"application/x-thing".to_vec());
            }
        }
        assert_eq!(error_code(p.admit(&unknown_type, NOW)), ErrorCode::UnsupportedFormat);
        let mut no_payload = inbound(&text, b"");
        no_payload.payload = None;
        assert_eq!(error_code(p.admit(&no_payload, NOW)), ErrorCode::EmptyInput);
    }

    #[test]
    fn admits_an_image_within_limits_with_its_header() {
        match image_policy().admit(&inbound(&envelope(ContentType::Png), &png(3, 3)), NOW) {
            Admission::Image(req) => {
                assert_eq!((req.header.format, req.header.width, req.header.height), (Format::Png, 3, 3))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn images_are_judged_by_their_header_before_any_decode() {
        let p = image_policy();
        let declared_png = envelope(ContentType::Png);
        assert_eq!(error_code(p.admit(&inbound(&declared_png, b""), NOW)), ErrorCode::EmptyInput);
        assert_eq!(error_code(p.admit(&inbound(&declared_png, &[0u8; 1001]), NOW)), ErrorCode::ImageTooLarge);
        assert_eq!(error_code(p.admit(&inbound(&declared_png, &png(4, 4)), NOW)), ErrorCode::ImageTooLarge);
        assert_eq!(error_code(p.admit(&inbound(&declared_png, b"GIF89a...."), NOW)), ErrorCode::UnsupportedFormat);
        assert_eq!(error_code(p.admit(&inbound(&declared_png, &png(3, 3)[..40]), NOW)), ErrorCode::DecodeFailed);
        let jpeg = envelope(ContentType::Jpeg);
        assert_eq!(error_code(p.admit(&inbound(&jpeg, &png(3, 3)), NOW)), ErrorCode::UnsupportedFormat);
        let text = envelope(ContentType::Text);
        assert_eq!(error_code(p.admit(&inbound(&text, b"a caption"), NOW)), ErrorCode::UnsupportedFormat);
    }

    #[test]
    fn past_deadline_is_expired_before_any_other_check() {
        let mut env = envelope(ContentType::Text);
        env.deadline_ms = Some(NOW);
        match policy().admit(&inbound(&env, b""), NOW) {
            Admission::Answer { answer, .. } => assert_eq!(answer.status, Status::Expired),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unreadable_id_goes_to_the_dead_letter_topic() {
        let mut msg = inbound(&envelope(ContentType::Text), b"hi");
        msg.key = None;
        msg.headers.retain(|header| header.name != h::ID.as_bytes());
        assert!(matches!(policy().admit(&msg, NOW), Admission::DeadLetter { reason: "unreadable_request_id", .. }));
        msg.headers.clear();
        msg.key = Some(b"bad key!".to_vec());
        assert!(matches!(policy().admit(&msg, NOW), Admission::DeadLetter { .. }));
    }

    #[test]
    fn a_header_name_that_is_not_utf8_is_a_bad_request_or_a_dead_letter() {
        let mut msg = inbound(&envelope(ContentType::Text), b"hi");
        msg.headers.push(RawHeader::new(b"x-\xff".to_vec(), Some(b"v".to_vec())));
        assert_eq!(error_code(policy().admit(&msg, NOW)), ErrorCode::BadRequest);
        // Without the key, ce_id still gives the answer an address.
        msg.key = None;
        assert_eq!(error_code(policy().admit(&msg, NOW)), ErrorCode::BadRequest);
        msg.headers.retain(|header| header.name != h::ID.as_bytes());
        match policy().admit(&msg, NOW) {
            Admission::DeadLetter { reason, detail } => {
                assert_eq!(reason, MALFORMED_HEADER);
                assert!(detail.contains("x-\\xff"), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn times_at_the_numeric_extremes_are_answered_not_overflowed() {
        let p = policy();
        let mut far = envelope(ContentType::Text);
        far.deadline_ms = Some(u64::MAX);
        assert!(matches!(p.admit(&inbound(&far, b"hi"), NOW), Admission::Text(_)));
        let mut past = envelope(ContentType::Text);
        past.deadline_ms = Some(0);
        match p.admit(&inbound(&past, b"hi"), NOW) {
            Admission::Answer { answer, .. } => assert_eq!(answer.status, Status::Expired),
            other => panic!("{other:?}"),
        }
        let mut huge = inbound(&envelope(ContentType::Text), b"hi");
        for header in &mut huge.headers {
            if header.name == h::TIME.as_bytes() {
                header.value = Some(b"9999-12-31T23:59:59.999Z".to_vec());
            }
        }
        huge.headers.push(RawHeader::new(h::DEADLINE, Some(b"99999999999999999999999".to_vec())));
        assert_eq!(error_code(p.admit(&huge, NOW)), ErrorCode::BadRequest);
        huge.headers.pop();
        match p.admit(&huge, NOW) {
            Admission::Text(request) => assert!(request.deadline_ms > NOW),
            other => panic!("{other:?}"),
        }
    }
}
