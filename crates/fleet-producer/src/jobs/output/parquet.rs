//! Answers as a Parquet dataset: a folder of part files, each written
//! under a temporary name and renamed when whole, so a collector killed
//! mid-part leaves only whole parts (the rows of the part it was writing
//! are collected again). Columns: `request_id`, `line`, `status`, `model`,
//! `version`, `embedding` (list of float32: what a vector store loads),
//! `output` (the rest of the output as JSON), `error_code`,
//! `error_message`.

use super::{io_error, status_named, AnswerFile, Held, OutputError, Row};
use arrow_array::builder::{Float32Builder, ListBuilder, StringBuilder, UInt64Builder};
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use fleet_proto::RequestId;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, ProjectionMask};
use serde_json::Value;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Rows a part holds: large enough for a loader, small enough that a kill
/// costs little to collect again.
const PART_ROWS: usize = 10_000;

pub struct ParquetDataset {
    dir: PathBuf,
    next_part: usize,
    rows: Columns,
}

#[derive(Default)]
struct Columns {
    len: usize,
    request_id: StringBuilder,
    line: UInt64Builder,
    status: StringBuilder,
    model: StringBuilder,
    version: UInt64Builder,
    embedding: ListBuilder<Float32Builder>,
    output: StringBuilder,
    error_code: StringBuilder,
    error_message: StringBuilder,
}

impl Columns {
    fn push(&mut self, row: Row<'_>) {
        let answer: Value = serde_json::from_slice(row.answer).unwrap_or(Value::Null);
        self.request_id.append_value(row.request_id.as_str());
        self.line.append_option(row.line);
        self.status.append_value(row.status.as_str());
        self.model.append_option(answer["model"].as_str());
        self.version.append_option(answer["version"].as_u64());
        let mut output = answer.get("output").cloned().unwrap_or(Value::Null);
        match output.as_object_mut().and_then(|o| o.remove("embedding")) {
            Some(Value::Array(values)) => {
                for value in values {
                    self.embedding.values().append_option(value.as_f64().map(|x| x as f32));
                }
                self.embedding.append(true);
            }
            _ => self.embedding.append(false),
        }
        let rest = output.as_object().is_some_and(|o| !o.is_empty()).then(|| output.to_string());
        self.output.append_option(rest);
        self.error_code.append_option(answer["error"]["code"].as_str());
        self.error_message.append_option(answer["error"]["message"].as_str());
        self.len += 1;
    }

    fn take(&mut self) -> Result<RecordBatch, arrow_schema::ArrowError> {
        self.len = 0;
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("request_id", Arc::new(self.request_id.finish())),
            ("line", Arc::new(self.line.finish())),
            ("status", Arc::new(self.status.finish())),
            ("model", Arc::new(self.model.finish())),
            ("version", Arc::new(self.version.finish())),
            ("embedding", Arc::new(self.embedding.finish())),
            ("output", Arc::new(self.output.finish())),
            ("error_code", Arc::new(self.error_code.finish())),
            ("error_message", Arc::new(self.error_message.finish())),
        ];
        RecordBatch::try_from_iter(columns)
    }
}

impl ParquetDataset {
    pub fn open(dir: &Path) -> Result<(Held, Self), OutputError> {
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        let mut held = Vec::new();
        let mut next_part = 0;
        let mut entries: Vec<PathBuf> =
            std::fs::read_dir(dir).map_err(io_error(dir))?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
            if name.ends_with(".tmp") {
                // A part a killed collector was writing: its rows are collected again.
                std::fs::remove_file(&path).map_err(io_error(&path))?;
                continue;
            }
            let Some(number) = part_number(&name) else { continue };
            next_part = next_part.max(number + 1);
            held.extend(read_part(&path)?);
        }
        Ok((held, Self { dir: dir.to_owned(), next_part, rows: Columns::default() }))
    }

    /// Writes what is buffered as the next whole part.
    fn write_part(&mut self) -> Result<(), OutputError> {
        if self.rows.len == 0 {
            return Ok(());
        }
        let name = format!("part-{:05}.parquet", self.next_part);
        let (tmp, done) = (self.dir.join(format!(".{name}.tmp")), self.dir.join(&name));
        let parquet_error = |source| OutputError::Parquet { path: tmp.clone(), source };
        let batch = self.rows.take().map_err(|e| parquet_error(e.into()))?;
        let file = File::create(&tmp).map_err(io_error(&tmp))?;
        let mut writer = ArrowWriter::try_new(file, batch.schema(), None).map_err(parquet_error)?;
        writer.write(&batch).map_err(parquet_error)?;
        let file = writer.into_inner().map_err(parquet_error)?;
        file.sync_all().map_err(io_error(&tmp))?;
        std::fs::rename(&tmp, &done).map_err(io_error(&done))?;
        self.next_part += 1;
        Ok(())
    }
}

fn part_number(name: &str) -> Option<usize> {
    name.strip_prefix("part-")?.strip_suffix(".parquet")?.parse().ok()
}

/// The (request id, status) of every row of one part.
fn read_part(path: &Path) -> Result<Held, OutputError> {
    let parquet_error = |source| OutputError::Parquet { path: path.to_owned(), source };
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(File::open(path).map_err(io_error(path))?).map_err(parquet_error)?;
    let mask = ProjectionMask::columns(builder.parquet_schema(), ["request_id", "status"]);
    let mut held = Vec::new();
    for batch in builder.with_projection(mask).build().map_err(parquet_error)? {
        let batch = batch.map_err(|e| parquet_error(e.into()))?;
        let column =
            |name: &str| batch.column_by_name(name).and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned());
        let (Some(ids), Some(statuses)) = (column("request_id"), column("status")) else {
            return Err(OutputError::Foreign {
                path: path.to_owned(),
                line: 0,
                reason: "no request_id and status columns".into(),
            });
        };
        for row in 0..batch.num_rows() {
            let foreign = |reason: String| OutputError::Foreign { path: path.to_owned(), line: row as u64 + 1, reason };
            if ids.is_null(row) || statuses.is_null(row) {
                return Err(foreign("an empty request_id or status".into()));
            }
            let id = RequestId::parse(ids.value(row)).map_err(|e| foreign(e.to_string()))?;
            let status = status_named(statuses.value(row)).ok_or_else(|| foreign("an unknown status".into()))?;
            held.push((id, status));
        }
    }
    Ok(held)
}

impl AnswerFile for ParquetDataset {
    fn append(&mut self, row: Row<'_>) -> Result<(), OutputError> {
        self.rows.push(row);
        if self.rows.len >= PART_ROWS {
            self.write_part()?;
        }
        Ok(())
    }

    /// Parts are written whole when full (a small part a second would make
    /// a dataset of thousands of files).
    fn checkpoint(&mut self) -> Result<(), OutputError> {
        Ok(())
    }

    /// Writes the rows buffered since the last part as a part of their own.
    fn finish(&mut self) -> Result<(), OutputError> {
        self.write_part()
    }
}
