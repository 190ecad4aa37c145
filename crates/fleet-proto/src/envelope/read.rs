//! Reading an [`Envelope`] off a message's headers, one rule per header, in
//! the order a refusal names the first bad one. Kept apart from the
//! envelope's shape so each header's rule reads as one line.

use super::id::resolve_id;
use super::rfc3339::parse_rfc3339_ms;
use super::{Envelope, Rejection};
use crate::reply::Destinations;
use crate::{headers as h, ContentType, ErrorCode, JobId, RequestId};

/// The envelope of a message whose headers `find` looks up (see
/// [`Envelope::parse`]), or why it is refused.
pub(super) fn envelope<'a>(
    key: Option<&[u8]>,
    find: &impl Fn(&str) -> Option<&'a [u8]>,
) -> Result<Envelope, Rejection> {
    let id = resolve_id(key, find(h::ID))?;
    let fields = Fields { id: &id, find };
    fields.fixed(h::SPEC_VERSION, h::SPEC_VERSION_VALUE)?;
    fields.fixed(h::TYPE, h::TYPE_VALUE)?;
    let source = fields.source()?;
    let created_ms = fields.created_ms()?;
    let content_type = fields.content_type()?;
    let deadline_ms = fields.optional(h::DEADLINE, |raw| {
        raw.parse::<u64>().map_err(|_| format!("{} must be Unix epoch milliseconds", h::DEADLINE))
    })?;
    let parts = fields.optional(h::PARTS, parts)?.unwrap_or(1);
    let job = fields
        .optional(h::JOB, |raw| JobId::parse(raw).map_err(|e| format!("{} is not a valid job id: {e}", h::JOB)))?;
    let reply_to =
        fields.optional(h::REPLY_TO, |raw| Destinations::parse(raw).map_err(|e| format!("{} {e}", h::REPLY_TO)))?;
    Ok(Envelope { id, source: source.to_owned(), created_ms, content_type, deadline_ms, parts, job, reply_to })
}

/// `ce_parts`: how many models the request went to, 1 to `MAX_PARTS`.
fn parts(raw: &str) -> Result<u32, String> {
    match raw.parse::<u32>() {
        Ok(n) if (1..=h::MAX_PARTS).contains(&n) => Ok(n),
        _ => Err(format!("{} must be 1..={}", h::PARTS, h::MAX_PARTS)),
    }
}

/// A message's headers, read for the request `id`: a bad header is refused
/// as a bad request answered at that id.
struct Fields<'i, F> {
    id: &'i RequestId,
    find: F,
}

impl<'a, F: Fn(&str) -> Option<&'a [u8]>> Fields<'_, F> {
    fn refuse(&self, code: ErrorCode, message: String) -> Rejection {
        Rejection::new(Some(self.id), code, message)
    }

    /// A header that must be there, as trimmed UTF-8.
    fn text(&self, name: &'static str) -> Result<&'a str, Rejection> {
        let raw =
            (self.find)(name).ok_or_else(|| self.refuse(ErrorCode::BadRequest, format!("missing header {name}")))?;
        std::str::from_utf8(raw)
            .map(str::trim)
            .map_err(|_| self.refuse(ErrorCode::BadRequest, format!("header {name} is not UTF-8")))
    }

    /// A header that must say `expected` (the spec version, the type).
    fn fixed(&self, name: &'static str, expected: &str) -> Result<(), Rejection> {
        let value = self.text(name)?;
        if value != expected {
            return Err(self.refuse(ErrorCode::BadRequest, format!("{name} is {value:?}, expected {expected:?}")));
        }
        Ok(())
    }

    /// `ce_source`: who produced the request; never empty.
    fn source(&self) -> Result<&'a str, Rejection> {
        let source = self.text(h::SOURCE)?;
        if source.is_empty() {
            return Err(self.refuse(ErrorCode::BadRequest, format!("header {} is empty", h::SOURCE)));
        }
        Ok(source)
    }

    /// `ce_time` as Unix epoch milliseconds.
    fn created_ms(&self) -> Result<u64, Rejection> {
        let time = self.text(h::TIME)?;
        parse_rfc3339_ms(time)
            .ok_or_else(|| self.refuse(ErrorCode::BadRequest, format!("{} {time:?} is not an RFC 3339 time", h::TIME)))
    }

    /// `content-type`: one the fleet reads, else `unsupported_format`.
    fn content_type(&self) -> Result<ContentType, Rejection> {
        let raw = self.text(h::CONTENT_TYPE)?;
        ContentType::parse(raw)
            .ok_or_else(|| self.refuse(ErrorCode::UnsupportedFormat, format!("content-type {raw:?} is not supported")))
    }

    /// A header that may be absent (`None`); when there, `parse` reads its
    /// trimmed text or says why it is a bad request.
    fn optional<T>(
        &self,
        name: &'static str,
        parse: impl FnOnce(&'a str) -> Result<T, String>,
    ) -> Result<Option<T>, Rejection> {
        if (self.find)(name).is_none() {
            return Ok(None);
        }
        parse(self.text(name)?).map(Some).map_err(|message| self.refuse(ErrorCode::BadRequest, message))
    }
}
