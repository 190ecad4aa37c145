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
//!
//! Reading the lines is `reader`'s, what a line becomes `parse`'s, naming a
//! job and its requests `job_ids`'.

mod job_ids;
mod parse;
mod reader;

pub use job_ids::{generated_job_id, random_nonce, JobTooLong, LineIds, MAX_JOB_LEN};
pub use parse::{parse_line, BulkText, LineError, LineFormat, MAX_TEXT_BYTES};
pub use reader::{NumberedLines, RawLine, MAX_LINE_BYTES};

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_proto::JobId;
    use proptest::prelude::*;

    /// The job the tests' lines belong to.
    pub(super) fn job() -> LineIds {
        LineIds::new(JobId::parse("reembed-2026").unwrap()).unwrap()
    }

    /// Line `number` of a file, holding `text`.
    pub(super) fn line(number: u64, text: &str) -> RawLine {
        RawLine { number, bytes: text.as_bytes().to_vec(), too_long: false }
    }

    proptest! {
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
    }
}
