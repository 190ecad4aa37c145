//! What one line of a bulk file becomes: a request to send, a blank line
//! skipped, or a bad line reported with why.

use super::{LineIds, RawLine};
use fleet_proto::request_id::InvalidRequestId;
use fleet_proto::RequestId;

/// The longest text a message carries (the fleet's value limit; a model's
/// own `max_text_bytes` is smaller, and its worker answers `text_too_long`).
pub const MAX_TEXT_BYTES: usize = fleet_proto::limits::MAX_VALUE_BYTES as usize;

/// How a file holds its texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineFormat {
    /// One text per line, sent as it is (without its line ending).
    Text,
    /// One JSON object per line with a `text` and an optional `id`.
    Jsonl,
}

/// A line ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkText {
    pub id: RequestId,
    pub text: String,
}

/// Why a line is not sent. Each is reported with its line number and
/// counted; the run goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    #[error("longer than a message can carry ({MAX_TEXT_BYTES} bytes of text)")]
    TooLong,
    #[error("not UTF-8")]
    NotUtf8,
    #[error("not a JSON object: {0}")]
    NotJsonObject(String),
    #[error("no \"text\" string")]
    NoText,
    #[error("\"text\" is empty")]
    EmptyText,
    #[error("\"id\" is not a string")]
    IdNotString,
    #[error("\"id\" is not a valid request id: {0}")]
    BadId(InvalidRequestId),
}

/// What one line becomes: `Ok(None)` for a blank line (skipped, not an
/// error), `Ok(Some(_))` to send, `Err` to report and skip.
pub fn parse_line(format: LineFormat, ids: &LineIds, line: &RawLine) -> Result<Option<BulkText>, LineError> {
    if line.too_long {
        return Err(LineError::TooLong);
    }
    let text = std::str::from_utf8(&line.bytes).map_err(|_| LineError::NotUtf8)?;
    if text.trim().is_empty() {
        return Ok(None);
    }
    let sent = match format {
        LineFormat::Text => BulkText { id: ids.for_line(line.number), text: text.to_owned() },
        LineFormat::Jsonl => parse_json_line(ids, line.number, text)?,
    };
    if sent.text.len() > MAX_TEXT_BYTES {
        return Err(LineError::TooLong);
    }
    Ok(Some(sent))
}

fn parse_json_line(ids: &LineIds, number: u64, line: &str) -> Result<BulkText, LineError> {
    let value: serde_json::Value = serde_json::from_str(line).map_err(|e| LineError::NotJsonObject(e.to_string()))?;
    let mut record = match value {
        serde_json::Value::Object(record) => record,
        other => return Err(LineError::NotJsonObject(format!("a JSON {}", json_kind(&other)))),
    };
    let text = match record.remove("text") {
        Some(serde_json::Value::String(text)) => text,
        _ => return Err(LineError::NoText),
    };
    // The worker would only answer it `empty_input`.
    if text.trim().is_empty() {
        return Err(LineError::EmptyText);
    }
    let id = match record.get("id") {
        None | Some(serde_json::Value::Null) => ids.for_line(number),
        Some(serde_json::Value::String(id)) => RequestId::parse(id).map_err(LineError::BadId)?,
        Some(_) => return Err(LineError::IdNotString),
    };
    Ok(BulkText { id, text })
}

fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "boolean",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bulk_file::tests::{job, line};
    use proptest::prelude::*;

    #[test]
    fn a_text_line_is_sent_as_it_is_named_after_the_job_and_its_number() {
        let sent = parse_line(LineFormat::Text, &job(), &line(7, "  A man is eating food. ")).unwrap().unwrap();
        assert_eq!(sent.id.as_str(), "reembed-2026-7");
        assert_eq!(sent.text, "  A man is eating food. ");
        for blank in ["", "   ", "\t"] {
            assert_eq!(parse_line(LineFormat::Text, &job(), &line(1, blank)), Ok(None));
            assert_eq!(parse_line(LineFormat::Jsonl, &job(), &line(1, blank)), Ok(None));
        }
        let not_utf8 = RawLine { number: 3, bytes: vec![0x66, 0xff], too_long: false };
        assert_eq!(parse_line(LineFormat::Text, &job(), &not_utf8), Err(LineError::NotUtf8));
    }

    #[test]
    fn a_jsonl_line_gives_its_text_and_may_give_its_id() {
        let parse = |json: &str| parse_line(LineFormat::Jsonl, &job(), &line(12, json));
        let sent = parse(r#"{"text": "Rain is expected.", "lang": "en"}"#).unwrap().unwrap();
        assert_eq!((sent.id.as_str(), sent.text.as_str()), ("reembed-2026-12", "Rain is expected."));
        let sent = parse(r#"{"id": "doc:42", "text": "Rain."}"#).unwrap().unwrap();
        assert_eq!(sent.id.as_str(), "doc:42");
        assert_eq!(parse(r#"{"id": null, "text": "Rain."}"#).unwrap().unwrap().id.as_str(), "reembed-2026-12");
    }

    #[test]
    fn each_kind_of_bad_jsonl_line_is_told_apart() {
        let parse = |json: &str| parse_line(LineFormat::Jsonl, &job(), &line(5, json));
        assert!(matches!(parse("Rain is expected."), Err(LineError::NotJsonObject(_))));
        assert!(matches!(parse(r#"{"text": "cut"#), Err(LineError::NotJsonObject(_))));
        assert_eq!(parse(r#"["Rain."]"#), Err(LineError::NotJsonObject("a JSON array".into())));
        assert_eq!(parse(r#"{"body": "Rain."}"#), Err(LineError::NoText));
        assert_eq!(parse(r#"{"text": 3}"#), Err(LineError::NoText));
        assert_eq!(parse(r#"{"text": "  "}"#), Err(LineError::EmptyText));
        assert_eq!(parse(r#"{"text": "Rain.", "id": 42}"#), Err(LineError::IdNotString));
        assert!(matches!(parse(r#"{"text": "Rain.", "id": "a b"}"#), Err(LineError::BadId(_))));
        assert!(parse(r#"{"text": "Rain.", "id": "a b"}"#).unwrap_err().to_string().contains("\"id\""));
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_lines(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
            jsonl in any::<bool>()
        ) {
            let format = if jsonl { LineFormat::Jsonl } else { LineFormat::Text };
            let _ = parse_line(format, &job(), &RawLine { number: 1, bytes, too_long: false });
        }
    }
}
