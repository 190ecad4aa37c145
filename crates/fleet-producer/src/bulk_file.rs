//! The pure part of `fleet-produce bulk`: a file is read one line at a time
//! (never whole: a backfill file may be larger than memory), each line
//! becomes one bulk request, is skipped (blank), or is reported bad with its
//! line number; and a job that was not named gets a name. Kept apart from
//! the binary so it is tested without a broker.
//!
//! A plain file holds one text per line. A JSONL file holds one object per
//! line, `{"text": "...", "id": "..."}`: `text` is required, `id` optional
//! (a request id; default `<job>-<line number>`), other fields are ignored
//! so records can carry their own metadata.

use fleet_proto::request_id::{InvalidRequestId, MAX_LEN};
use fleet_proto::{JobId, RequestId};
use std::hash::BuildHasher;
use std::io::{self, BufRead, Read};

/// The longest text a message carries (the fleet's value limit; a model's
/// own `max_text_bytes` is smaller, and its worker answers `text_too_long`).
pub const MAX_TEXT_BYTES: usize = fleet_proto::limits::MAX_VALUE_BYTES as usize;

/// The longest line read whole: the longest text plus room for JSONL's
/// quoting. A longer line is skipped (read past, never held) and reported.
pub const MAX_LINE_BYTES: usize = fleet_proto::limits::MAX_MESSAGE_BYTES as usize;

/// The most digits a line number has (`u64::MAX`): what a job id must leave
/// room for in `<job>-<line number>`.
const LINE_NUMBER_DIGITS: usize = 20;

/// The longest job id whose requests can all be named `<job>-<line number>`.
pub const MAX_JOB_LEN: usize = MAX_LEN - 1 - LINE_NUMBER_DIGITS;

/// How a file holds its texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineFormat {
    /// One text per line, sent as it is (without its line ending).
    Text,
    /// One JSON object per line with a `text` and an optional `id`.
    Jsonl,
}

/// One line of the file as read: its 1-based number (as editors show it) and
/// its bytes without the line ending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawLine {
    pub number: u64,
    pub bytes: Vec<u8>,
    /// The line was longer than [`MAX_LINE_BYTES`]: `bytes` is empty, the
    /// line was read past.
    pub too_long: bool,
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

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job id {job} is {len} characters: at most {MAX_JOB_LEN} leave room for `-<line number>` in its request ids")]
pub struct JobTooLong {
    pub job: JobId,
    pub len: usize,
}

/// Names a job's requests `<job>-<line number>`. Made only for a job short
/// enough for every line number, so naming a line cannot fail halfway
/// through a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineIds {
    job: JobId,
}

impl LineIds {
    pub fn new(job: JobId) -> Result<Self, JobTooLong> {
        let len = job.as_str().len();
        if len > MAX_JOB_LEN {
            return Err(JobTooLong { job, len });
        }
        Ok(Self { job })
    }

    pub fn job(&self) -> &JobId {
        &self.job
    }

    pub fn for_line(&self, line_number: u64) -> RequestId {
        // The job's characters are an id's, '-' and digits are too, and
        // `new` left room for the longest number.
        RequestId::parse(&format!("{}-{line_number}", self.job)).expect("a checked job id with a line number is an id")
    }
}

/// `bulk-<unix ms>-<16 hex digits>`: sorts by start time, and two runs
/// started in the same millisecond still differ by their `nonce`.
pub fn generated_job_id(now_ms: u64, nonce: u64) -> JobId {
    RequestId::parse(&format!("bulk-{now_ms}-{nonce:016x}")).expect("digits and hex make an id")
}

/// A number no other run is likely to draw: std's `RandomState` is keyed
/// from the operating system's randomness, which is all a job name needs
/// (it is not a secret), without a crate for it.
pub fn random_nonce() -> u64 {
    let salt = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    std::collections::hash_map::RandomState::new().hash_one((salt, std::process::id()))
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

/// A reader's lines, numbered from 1, each without its `\n` or `\r\n`, and
/// how many bytes have been read so far (for a progress bar). Holds at most
/// one line, and of a line longer than [`MAX_LINE_BYTES`] not even that.
pub struct NumberedLines<R> {
    reader: R,
    last_number: u64,
    bytes_read: u64,
    max_line_bytes: usize,
}

impl<R: BufRead> NumberedLines<R> {
    pub fn new(reader: R) -> Self {
        Self::with_max_line_bytes(reader, MAX_LINE_BYTES)
    }

    fn with_max_line_bytes(reader: R, max_line_bytes: usize) -> Self {
        Self { reader, last_number: 0, bytes_read: 0, max_line_bytes }
    }

    /// Bytes of the file consumed so far, line endings included.
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    fn read_line(&mut self) -> io::Result<Option<RawLine>> {
        let mut bytes = Vec::new();
        // One byte over the limit tells a line at the limit from a longer one.
        let limit = self.max_line_bytes as u64 + 1;
        let read = (&mut self.reader).take(limit).read_until(b'\n', &mut bytes)?;
        if read == 0 {
            return Ok(None);
        }
        self.bytes_read += read as u64;
        self.last_number += 1;
        let ended = bytes.last() == Some(&b'\n');
        if ended {
            bytes.pop();
        }
        if !ended && read as u64 == limit {
            self.bytes_read += self.skip_rest_of_line()?;
            return Ok(Some(RawLine { number: self.last_number, bytes: Vec::new(), too_long: true }));
        }
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
        Ok(Some(RawLine { number: self.last_number, bytes, too_long: false }))
    }

    /// Reads past the rest of an over-long line, through its `\n`, holding
    /// no more than the reader's buffer. Returns the bytes consumed.
    fn skip_rest_of_line(&mut self) -> io::Result<u64> {
        let mut skipped = 0u64;
        loop {
            let buffer = self.reader.fill_buf()?;
            if buffer.is_empty() {
                return Ok(skipped);
            }
            let (consumed, ended) = match buffer.iter().position(|&b| b == b'\n') {
                Some(newline) => (newline + 1, true),
                None => (buffer.len(), false),
            };
            self.reader.consume(consumed);
            skipped += consumed as u64;
            if ended {
                return Ok(skipped);
            }
        }
    }
}

impl<R: BufRead> Iterator for NumberedLines<R> {
    type Item = io::Result<RawLine>;

    fn next(&mut self) -> Option<Self::Item> {
        self.read_line().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn job() -> LineIds {
        LineIds::new(JobId::parse("reembed-2026").unwrap()).unwrap()
    }

    fn line(number: u64, text: &str) -> RawLine {
        RawLine { number, bytes: text.as_bytes().to_vec(), too_long: false }
    }

    fn lines_of(file: &[u8], max_line_bytes: usize) -> Vec<RawLine> {
        NumberedLines::with_max_line_bytes(file, max_line_bytes).map(Result::unwrap).collect()
    }

    #[test]
    fn lines_are_numbered_from_one_blank_ones_included_without_their_endings() {
        let file = b"first\r\n\nthird\nlast without newline";
        let lines = lines_of(file, 100);
        let seen: Vec<(u64, &[u8])> = lines.iter().map(|l| (l.number, l.bytes.as_slice())).collect();
        assert_eq!(seen, [(1, &b"first"[..]), (2, &b""[..]), (3, &b"third"[..]), (4, &b"last without newline"[..])]);
        let mut reader = NumberedLines::new(&file[..]);
        reader.by_ref().for_each(drop);
        assert_eq!(reader.bytes_read(), file.len() as u64);
    }

    #[test]
    fn an_over_long_line_is_read_past_and_the_next_keeps_its_number() {
        let file = b"short\nfar too long for the limit\nafter\n";
        let lines = lines_of(file, 10);
        assert_eq!(lines[0], line(1, "short"));
        assert_eq!(lines[1], RawLine { number: 2, bytes: Vec::new(), too_long: true });
        assert_eq!(lines[2], line(3, "after"));
        assert_eq!(lines.len(), 3);
        // A line exactly at the limit is whole.
        assert_eq!(lines_of(b"0123456789\nx", 10)[0], line(1, "0123456789"));
        assert_eq!(parse_line(LineFormat::Text, &job(), &lines[1]), Err(LineError::TooLong));
    }

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

    #[test]
    fn a_job_id_must_leave_room_for_line_numbers() {
        let longest = JobId::parse(&"j".repeat(MAX_JOB_LEN)).unwrap();
        let ids = LineIds::new(longest).unwrap();
        assert_eq!(ids.for_line(u64::MAX).as_str().len(), MAX_LEN);
        let too_long = JobId::parse(&"j".repeat(MAX_JOB_LEN + 1)).unwrap();
        let error = LineIds::new(too_long).unwrap_err();
        assert_eq!(error.len, MAX_JOB_LEN + 1);
        assert!(error.to_string().contains(&MAX_JOB_LEN.to_string()), "{error}");
    }

    #[test]
    fn generated_job_ids_are_valid_and_differ() {
        let id = generated_job_id(1_765_000_000_123, 0xabc);
        assert_eq!(id.as_str(), "bulk-1765000000123-0000000000000abc");
        assert!(LineIds::new(id).is_ok());
        let drawn: std::collections::HashSet<u64> = (0..64).map(|_| random_nonce()).collect();
        assert_eq!(drawn.len(), 64, "two nonces collided");
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

        #[test]
        fn every_text_comes_back_from_a_file_of_either_format(
            texts in proptest::collection::vec("[^\r\n]{0,40}", 0..20)
        ) {
            let plain: String = texts.iter().map(|t| format!("{t}\n")).collect();
            let jsonl: String =
                texts.iter().map(|t| format!("{}\n", serde_json::json!({ "text": t }))).collect();
            let wanted: Vec<(u64, &str)> = texts
                .iter()
                .enumerate()
                .filter(|(_, t)| !t.trim().is_empty())
                .map(|(n, t)| (n as u64 + 1, t.as_str()))
                .collect();
            for (format, file) in [(LineFormat::Text, plain), (LineFormat::Jsonl, jsonl)] {
                let mut got = Vec::new();
                for raw in NumberedLines::new(file.as_bytes()) {
                    let raw = raw.unwrap();
                    match parse_line(format, &job(), &raw) {
                        Ok(Some(sent)) => {
                            prop_assert_eq!(&sent.id, &job().for_line(raw.number));
                            got.push((raw.number, sent.text));
                        }
                        // A blank text: a blank line, or a JSONL record whose text is blank.
                        Ok(None) | Err(LineError::EmptyText) => {}
                        Err(other) => prop_assert!(false, "line {}: {}", raw.number, other),
                    }
                }
                let got: Vec<(u64, &str)> = got.iter().map(|(n, t)| (*n, t.as_str())).collect();
                prop_assert_eq!(&got, &wanted);
            }
        }

        #[test]
        fn a_line_is_named_after_its_job_and_number(name in "[A-Za-z0-9._:-]{1,107}", number in any::<u64>()) {
            let ids = LineIds::new(JobId::parse(&name).unwrap()).unwrap();
            let id = ids.for_line(number);
            prop_assert_eq!(id.as_str(), format!("{name}-{number}"));
        }
    }
}
