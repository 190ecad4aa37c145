//! Answers as JSON lines: `{"request_id", "line", "status", "answer"}`, the
//! answer as the worker wrote it. Opened again, the file is read for the
//! requests it holds; a last line cut short by a kill is cut off (that
//! answer is collected again), any other line that is not a collected
//! answer stops the collector (it is not this file). A line counts once
//! its newline is written.

use super::{io_error, status_named, AnswerFile, Held, OutputError, Row};
use fleet_proto::{RequestId, Status};
use serde::Deserialize;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

pub struct JsonlFile {
    path: PathBuf,
    writer: BufWriter<File>,
}

/// What a line must hold to count.
#[derive(Deserialize)]
struct HeldLine {
    request_id: String,
    status: String,
}

impl JsonlFile {
    pub fn open(path: &Path) -> Result<(Held, Self), OutputError> {
        let mut held = Vec::new();
        let mut whole_bytes = 0u64;
        if path.exists() {
            let mut reader = BufReader::new(File::open(path).map_err(io_error(path))?);
            let mut line = Vec::new();
            let mut number = 0u64;
            loop {
                line.clear();
                let read = reader.read_until(b'\n', &mut line).map_err(io_error(path))?;
                // The end, or a last line cut short by a kill (no newline):
                // that answer is collected again.
                if read == 0 || line.last() != Some(&b'\n') {
                    break;
                }
                number += 1;
                let entry = read_line(&line[..line.len() - 1]).map_err(|reason| OutputError::Foreign {
                    path: path.to_owned(),
                    line: number,
                    reason,
                })?;
                held.push(entry);
                whole_bytes += read as u64;
            }
        }
        let file = OpenOptions::new().create(true).append(true).open(path).map_err(io_error(path))?;
        // Whatever follows the last whole line goes.
        file.set_len(whole_bytes).map_err(io_error(path))?;
        Ok((held, Self { path: path.to_owned(), writer: BufWriter::with_capacity(1 << 20, file) }))
    }
}

fn read_line(line: &[u8]) -> Result<(RequestId, Status), String> {
    let entry: HeldLine = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    let id = RequestId::parse(&entry.request_id).map_err(|e| e.to_string())?;
    let status = status_named(&entry.status).ok_or_else(|| format!("unknown status {:?}", entry.status))?;
    Ok((id, status))
}

impl AnswerFile for JsonlFile {
    fn append(&mut self, row: Row<'_>) -> Result<(), OutputError> {
        // The answer goes in as written when it is JSON on one line (a
        // worker writes it so); written again, or as a string, when not.
        let answer = match serde_json::from_slice::<serde_json::Value>(row.answer) {
            Ok(_) if !row.answer.contains(&b'\n') => String::from_utf8_lossy(row.answer).into_owned(),
            Ok(value) => value.to_string(),
            Err(_) => serde_json::to_string(&String::from_utf8_lossy(row.answer)).unwrap_or_default(),
        };
        let line = match row.line {
            Some(n) => n.to_string(),
            None => "null".to_owned(),
        };
        let id = serde_json::to_string(row.request_id.as_str()).unwrap_or_default();
        writeln!(
            self.writer,
            r#"{{"request_id":{id},"line":{line},"status":"{}","answer":{answer}}}"#,
            row.status.as_str()
        )
        .map_err(io_error(&self.path))
    }

    fn checkpoint(&mut self) -> Result<(), OutputError> {
        self.writer.flush().map_err(io_error(&self.path))?;
        self.writer.get_ref().sync_data().map_err(io_error(&self.path))
    }

    fn finish(&mut self) -> Result<(), OutputError> {
        self.checkpoint()
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::tempdir;
    use super::*;

    fn row(id: &RequestId) -> Row<'_> {
        Row { request_id: id, line: Some(3), status: Status::Ok, answer: br#"{"status":"ok"}"# }
    }

    #[test]
    fn a_last_line_cut_short_is_collected_again_and_a_foreign_line_stops() {
        let path = tempdir().join("answers.jsonl");
        let id = RequestId::parse("j-3").unwrap();
        let (_, mut file) = JsonlFile::open(&path).unwrap();
        file.append(row(&id)).unwrap();
        file.finish().unwrap();
        let mut raw = std::fs::read(&path).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&raw),
            "{\"request_id\":\"j-3\",\"line\":3,\"status\":\"ok\",\"answer\":{\"status\":\"ok\"}}\n"
        );
        raw.extend_from_slice(br#"{"request_id":"j-4","li"#);
        std::fs::write(&path, &raw).unwrap();
        let (held, _) = JsonlFile::open(&path).unwrap();
        assert_eq!(held.len(), 1);
        assert!(std::fs::read(&path).unwrap().ends_with(b"}}\n"), "the cut line is gone");

        std::fs::write(&path, b"not json\n{\"request_id\":\"j-3\",\"status\":\"ok\"}\n").unwrap();
        assert!(matches!(JsonlFile::open(&path), Err(OutputError::Foreign { line: 1, .. })));
    }
}
