//! Where a collector writes a job's answers: a JSONL file (one answer a
//! line), or a Parquet dataset for vectors (a folder of part files a vector
//! store bulk-loads). Either is resumable: opened again, it says which
//! requests it holds, and only the others are written.

mod jsonl;
mod parquet;

use fleet_proto::{RequestId, Status};
use std::path::{Path, PathBuf};

/// One collected answer.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    pub request_id: &'a RequestId,
    /// The input's line, where the id was made from it (`<job>-<line>`).
    pub line: Option<u64>,
    pub status: Status,
    /// The answer JSON as the worker wrote it.
    pub answer: &'a [u8],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// One JSON object a line: `{"request_id", "line", "status", "answer"}`.
    Jsonl,
    /// A folder of Parquet files: request_id, line, status, model, version,
    /// embedding (list of float32), output (the rest, JSON), error_code,
    /// error_message.
    Parquet,
}

impl OutputFormat {
    /// Parquet for a path ending in `.parquet`, else JSONL.
    pub fn for_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("parquet") => Self::Parquet,
            _ => Self::Jsonl,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: line {line} is not a collected answer ({reason}); is this another file?")]
    Foreign { path: PathBuf, line: u64, reason: String },
    #[error("{path}: {source}")]
    Parquet { path: PathBuf, source: ::parquet::errors::ParquetError },
}

/// A file (or dataset) of collected answers, open for appending.
pub trait AnswerFile: Send {
    fn append(&mut self, row: Row<'_>) -> Result<(), OutputError>;
    /// Called every second or so: makes durable what is cheap to (a JSONL
    /// file's lines; a Parquet dataset writes whole parts only).
    fn checkpoint(&mut self) -> Result<(), OutputError>;
    /// Makes everything appended durable (a collector killed after this
    /// loses none of it).
    fn finish(&mut self) -> Result<(), OutputError>;
}

/// The answers a file holds already: request id, status.
pub type Held = Vec<(RequestId, Status)>;

/// Opens `path` in `format` for appending: the answers it holds already,
/// and the file.
pub fn open(path: &Path, format: OutputFormat) -> Result<(Held, Box<dyn AnswerFile>), OutputError> {
    match format {
        OutputFormat::Jsonl => {
            let (held, file) = jsonl::JsonlFile::open(path)?;
            Ok((held, Box::new(file)))
        }
        OutputFormat::Parquet => {
            let (held, dataset) = parquet::ParquetDataset::open(path)?;
            Ok((held, Box::new(dataset)))
        }
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> OutputError + '_ {
    move |source| OutputError::Io { path: path.to_owned(), source }
}

fn status_named(name: &str) -> Option<Status> {
    Status::ALL.into_iter().find(|s| s.as_str() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<(RequestId, Option<u64>, Status, String)> {
        vec![
            (RequestId::parse("j-1").unwrap(), Some(1), Status::Ok, r#"{"status":"ok","model":"minilm","version":1,"output":{"embedding":[0.25,-0.5],"tokens":3,"truncated":false},"timings_ms":{"queue":1.0,"infer":2.0,"total":3.0}}"#.to_owned()),
            (RequestId::parse("doc:7").unwrap(), None, Status::Error, r#"{"status":"error","model":"minilm","version":1,"error":{"code":"empty_input","message":"text is empty"},"timings_ms":{"queue":1.0,"infer":0.0,"total":1.0}}"#.to_owned()),
        ]
    }

    fn write_all(path: &Path, format: OutputFormat, rows: &[(RequestId, Option<u64>, Status, String)]) {
        let (_, mut file) = open(path, format).unwrap();
        for (id, line, status, answer) in rows {
            file.append(Row { request_id: id, line: *line, status: *status, answer: answer.as_bytes() }).unwrap();
        }
        file.finish().unwrap();
    }

    #[test]
    fn either_format_reopens_with_the_answers_it_holds() {
        for format in [OutputFormat::Jsonl, OutputFormat::Parquet] {
            let dir = tempdir();
            let path = dir.join(if format == OutputFormat::Parquet { "out.parquet" } else { "out.jsonl" });
            let all = rows();
            write_all(&path, format, &all[..1]);
            write_all(&path, format, &all[1..]);
            let (held, _) = open(&path, format).unwrap();
            let held: Vec<(String, Status)> = held.into_iter().map(|(id, s)| (id.to_string(), s)).collect();
            assert_eq!(held, [("j-1".to_owned(), Status::Ok), ("doc:7".to_owned(), Status::Error)], "{format:?}");
        }
    }

    #[test]
    fn the_format_follows_the_extension() {
        assert_eq!(OutputFormat::for_path(Path::new("answers.parquet")), OutputFormat::Parquet);
        assert_eq!(OutputFormat::for_path(Path::new("answers.jsonl")), OutputFormat::Jsonl);
        assert_eq!(OutputFormat::for_path(Path::new("answers")), OutputFormat::Jsonl);
    }

    pub(super) fn tempdir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "fleet-output-{}-{}",
            std::process::id(),
            crate::bulk_file::random_nonce()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
