//! The benchmark's books, pure: an answers file read back (lines, distinct
//! requests, `ok` answers, an answer's size), the RESULT lines, and the
//! backfill's texts made from real documents' lines.

use crate::lanes_bench::Latency;
use anyhow::{Context, Result};
use std::collections::HashSet;
use std::path::Path;

/// An answers file's books.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FileBooks {
    pub lines: usize,
    pub distinct: usize,
    pub ok: usize,
    /// Mean bytes of an `ok` answer's JSON (what Redis or the topic holds).
    pub answer_bytes: f64,
    /// The same with its embedding's f32s widened to f64 digits (how the
    /// worker wrote them before: `0.04862386733293533` for `0.048623867`).
    pub widened_bytes: f64,
}

impl FileBooks {
    pub fn duplicates(&self) -> usize {
        self.lines - self.distinct
    }

    pub fn missing(&self, texts: usize) -> usize {
        texts.saturating_sub(self.distinct)
    }
}

/// Reads a JSONL answers file (`{"request_id", "status", "answer"}` a line).
pub fn file_books(path: &Path) -> Result<FileBooks> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut ids = HashSet::new();
    let (mut books, mut answer_total, mut widened_total) = (FileBooks::default(), 0usize, 0usize);
    for line in text.lines() {
        let row: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}: {line}", path.display()))?;
        books.lines += 1;
        ids.insert(row["request_id"].as_str().unwrap_or_default().to_owned());
        if row["status"] == "ok" {
            books.ok += 1;
            let mut answer = row["answer"].clone();
            answer_total += answer.to_string().len();
            if let Some(embedding) = answer["output"]["embedding"].as_array() {
                let floats: Vec<f32> = embedding.iter().filter_map(|v| v.as_f64()).map(|x| x as f32).collect();
                answer["output"]["embedding"] = serde_json::json!(floats);
            }
            widened_total += answer.to_string().len();
        }
    }
    books.distinct = ids.len();
    let mean = |total: usize| if books.ok == 0 { 0.0 } else { total as f64 / books.ok as f64 };
    books.answer_bytes = mean(answer_total);
    books.widened_bytes = mean(widened_total);
    Ok(books)
}

/// What the run measured.
#[derive(Debug, Clone, Default)]
pub struct BulkAnswersReport {
    pub texts: usize,
    pub kafka: FileBooks,
    pub rows_per_s: f64,
    pub redis_rows_per_s: f64,
    pub interactive: Option<Latency>,
    pub alone: Option<Latency>,
    pub faults: Option<FileBooks>,
}

pub fn result_line(report: &BulkAnswersReport) -> String {
    let p99 = |l: &Option<Latency>| l.map_or(f64::NAN, |l| l.p99_ms);
    format!(
        "RESULT bulk_answers texts={} answered_ok={} missing={} duplicates_in_file={} rows_per_s={:.1} \
         redis_rows_per_s={:.1} ratio={:.3} answer_bytes={:.0} answer_bytes_widened={:.0} interactive_p99_ms={:.1} \
         interactive_p99_alone_ms={:.1}",
        report.texts,
        report.kafka.ok,
        report.kafka.missing(report.texts),
        report.kafka.duplicates(),
        report.rows_per_s,
        report.redis_rows_per_s,
        report.rows_per_s / report.redis_rows_per_s,
        report.kafka.answer_bytes,
        report.kafka.widened_bytes,
        p99(&report.interactive),
        p99(&report.alone),
    )
}

pub fn faults_line(texts: usize, books: &FileBooks) -> String {
    format!(
        "RESULT bulk_answers_faults texts={texts} answered_ok={} missing={} duplicates_in_file={} worker_kills=2 \
         collector_kills=1",
        books.ok,
        books.missing(texts),
        books.duplicates()
    )
}

/// The backfill's texts from `lines` (distinct lines of real documents):
/// `count` texts of 1 to 8 consecutive lines each (mixed lengths), every
/// text distinct (no feature-cache hit), the same for a seed.
pub fn backfill_texts(lines: &[String], count: usize, seed: u64) -> Vec<String> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut texts = Vec::with_capacity(count);
    let mut seen = HashSet::new();
    let mut at = 0usize;
    while texts.len() < count && !lines.is_empty() {
        // Mostly short, some long: one line half the time, up to eight.
        let span = [1, 1, 1, 1, 2, 2, 4, 8][rng.random_range(0..8)];
        let text: Vec<&str> = (0..span).map(|i| lines[(at + i) % lines.len()].as_str()).collect();
        at = (at + span) % lines.len();
        let text = text.join(" ");
        let text = if seen.contains(&text) { format!("{text} ({})", texts.len()) } else { text };
        seen.insert(text.clone());
        texts.push(text);
    }
    texts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backfill_texts_are_distinct_mixed_and_repeatable() {
        let lines: Vec<String> = (0..50).map(|i| format!("line {i} of a licence")).collect();
        let texts = backfill_texts(&lines, 200, 7);
        assert_eq!(texts.len(), 200);
        assert_eq!(texts.iter().collect::<HashSet<_>>().len(), 200, "every text distinct");
        let lengths: HashSet<usize> = texts.iter().map(|t| t.split(" of a licence").count()).collect();
        assert!(lengths.len() >= 3, "mixed lengths: {lengths:?}");
        assert_eq!(texts, backfill_texts(&lines, 200, 7));
    }

    #[test]
    fn a_files_books_count_lines_distinct_ids_and_ok_answers() {
        let path = std::env::temp_dir().join(format!("ba-books-{}.jsonl", std::process::id()));
        let rows = [
            r#"{"request_id":"j-1","line":1,"status":"ok","answer":{"status":"ok","v":1}}"#,
            r#"{"request_id":"j-1","line":1,"status":"ok","answer":{"status":"ok","v":1}}"#,
            r#"{"request_id":"j-2","line":2,"status":"error","answer":{"status":"error"}}"#,
        ];
        std::fs::write(&path, rows.join("\n") + "\n").unwrap();
        let books = file_books(&path).unwrap();
        assert_eq!((books.lines, books.distinct, books.ok, books.duplicates(), books.missing(3)), (3, 2, 2, 1, 1));
        assert_eq!(books.answer_bytes, r#"{"status":"ok","v":1}"#.len() as f64);
        let line = result_line(&BulkAnswersReport {
            texts: 3,
            kafka: books,
            rows_per_s: 90.0,
            redis_rows_per_s: 100.0,
            ..Default::default()
        });
        assert!(line.contains("missing=1 duplicates_in_file=1") && line.contains("ratio=0.900"), "{line}");
    }
}
