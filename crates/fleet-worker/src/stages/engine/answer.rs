//! How a request's vectors become its answer's `output`, by the model's
//! task: an embedding, the best classes with their labels, or a rerank
//! request's documents by score. A text input adds its token count and
//! whether it was cut.

use super::error::EngineError;
use super::labels::{load_labels, top_k, Label};
use crate::config::{ModelVersion, TaskConfig};
use crate::core::input::TextFields;
use serde_json::{json, Value};

/// How a request's vectors (one per row) become its answer, by task.
pub enum Answer {
    /// `{"embedding": [...]}`.
    Embedding,
    /// `{"classes": [{"label", "index", "probability"}, ...]}`, best first.
    Classes { labels: Vec<Label>, top_k: usize },
    /// `{"results": [{"index", "score"}, ...]}`: every document of the
    /// request by its pair's score, best first.
    Ranked,
}

impl Answer {
    pub fn for_version(version: &ModelVersion) -> Result<Self, EngineError> {
        match &version.config.task {
            TaskConfig::Embedding { .. } => Ok(Self::Embedding),
            TaskConfig::Classification { labels, top_k, .. } => {
                let labels = load_labels(&version.file(labels)).map_err(EngineError::Labels)?;
                Ok(Self::Classes { labels, top_k: *top_k })
            }
            TaskConfig::Rerank { .. } => Ok(Self::Ranked),
        }
    }

    /// The answer's `output` for one input and the vectors of its rows
    /// (one, but for a rerank request's pairs). A text input adds its token
    /// count and whether it was cut.
    pub fn json(&self, vectors: Vec<Vec<f32>>, text: Option<TextFields>) -> Result<Value, EngineError> {
        let output = match self {
            Self::Embedding => json!({ "embedding": vector_json(&single(vectors)?) }),
            Self::Classes { labels, top_k } => classes(labels, *top_k, &single(vectors)?)?,
            Self::Ranked => ranked(&vectors)?,
        };
        Ok(with_text_fields(output, text))
    }
}

/// The one vector of a single-row input.
fn single(mut vectors: Vec<Vec<f32>>) -> Result<Vec<f32>, EngineError> {
    match (vectors.pop(), vectors.is_empty()) {
        (Some(vector), true) => Ok(vector),
        (last, _) => {
            Err(EngineError::BadShape { got: vec![vectors.len() as i64 + i64::from(last.is_some())], rows: 1 })
        }
    }
}

/// A vector as JSON numbers written the way an f32 reads back: each the
/// shortest decimal that is the same f32 (`0.048623867`, not the f64
/// widening's `0.04862386733293533`): an embedding's answer is far smaller
/// in Redis and on the answers topic (docs/benchmarks.md, bulk answers),
/// and every client that reads it as f32 gets the same bits.
pub fn vector_json(values: &[f32]) -> Value {
    let mut digits = ryu::Buffer::new();
    let mut number = |x: f32| -> Value {
        if !x.is_finite() {
            return Value::Null;
        }
        digits
            .format_finite(x)
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number)
    };
    Value::Array(values.iter().map(|&x| number(x)).collect())
}

/// The `k` best classes, each with its label.
fn classes(labels: &[Label], k: usize, scores: &[f32]) -> Result<Value, EngineError> {
    if scores.len() != labels.len() {
        return Err(labels_mismatch(labels.len(), scores.len()));
    }
    let classes: Vec<Value> = top_k(scores, k)
        .into_iter()
        .map(|scored| {
            let label = &labels[scored.index];
            let mut class = json!({
                "label": label.name(),
                "index": scored.index,
                "probability": scored.score,
            });
            if let Some(id) = &label.id {
                class["synset"] = json!(id);
            }
            class
        })
        .collect();
    Ok(json!({ "classes": classes }))
}

/// A rerank module that gives `got` values per pair instead of one score.
pub fn not_one_score(got: usize) -> EngineError {
    EngineError::Signature {
        key: "task.type",
        problem: format!("= \"rerank\" reads one score per pair; the module gives {got}"),
    }
}

fn with_text_fields(mut output: Value, text: Option<TextFields>) -> Value {
    if let Some(TextFields { tokens, truncated }) = text {
        output["tokens"] = json!(tokens);
        output["truncated"] = json!(truncated);
    }
    output
}

/// Every pair's score (its one-element vector), best first.
fn ranked(vectors: &[Vec<f32>]) -> Result<Value, EngineError> {
    let scores: Vec<f32> = vectors
        .iter()
        .map(|v| match v.as_slice() {
            [score] => Ok(*score),
            other => Err(not_one_score(other.len())),
        })
        .collect::<Result<_, _>>()?;
    let results: Vec<Value> =
        top_k(&scores, scores.len()).into_iter().map(|s| json!({ "index": s.index, "score": s.score })).collect();
    Ok(json!({ "results": results }))
}

pub fn labels_mismatch(labels: usize, classes: usize) -> EngineError {
    EngineError::Signature {
        key: "task.labels",
        problem: format!("has {labels} labels, but the module scores {classes} classes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stages::engine::labels::parse_labels;

    #[test]
    fn an_embedding_answer_carries_the_text_fields() {
        let out =
            Answer::Embedding.json(vec![vec![0.6, 0.8]], Some(TextFields { tokens: 7, truncated: true })).unwrap();
        assert_eq!(out, json!({ "embedding": [0.6, 0.8], "tokens": 7, "truncated": true }));
        let image = Answer::Embedding.json(vec![vec![1.0]], None).unwrap();
        assert!(image.get("tokens").is_none());
    }

    #[test]
    fn a_vector_is_written_as_its_f32_digits_and_reads_back_bit_for_bit() {
        let values: Vec<f32> = (0..384).map(|i| ((i as f32) * 0.731).sin() * 0.09).collect();
        let compact = serde_json::to_string(&vector_json(&values)).unwrap();
        let widened = serde_json::to_string(&json!(values)).unwrap();
        assert!(compact.len() * 10 < widened.len() * 7, "{} bytes against {}", compact.len(), widened.len());
        let back: Vec<f32> =
            serde_json::from_str::<Vec<f64>>(&compact).unwrap().into_iter().map(|x| x as f32).collect();
        assert_eq!(
            back.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            values.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
        assert_eq!(vector_json(&[f32::NAN, 1.0]), json!([null, 1.0]));
    }

    #[test]
    fn classes_are_best_first_with_an_id_only_where_the_labels_give_one() {
        let labels = parse_labels("n1\tcat, tabby\nplain dog\nn3\tbird\n").unwrap();
        let answer = Answer::Classes { labels, top_k: 2 };
        let out = answer.json(vec![vec![0.2, 0.5, 0.3]], None).unwrap();
        assert_eq!(
            out,
            json!({ "classes": [
                { "label": "plain dog", "index": 1, "probability": 0.5f32 },
                { "label": "bird", "synset": "n3", "index": 2, "probability": 0.3f32 },
            ] })
        );
        match answer.json(vec![vec![0.5, 0.5]], None) {
            Err(EngineError::Signature { key, .. }) => assert_eq!(key, "task.labels"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_rerank_answer_lists_every_document_best_first() {
        let out = Answer::Ranked.json(vec![vec![0.1], vec![0.9], vec![0.4]], None).unwrap();
        assert_eq!(
            out,
            json!({ "results": [
                { "index": 1, "score": 0.9f32 }, { "index": 2, "score": 0.4f32 }, { "index": 0, "score": 0.1f32 },
            ] })
        );
        assert!(Answer::Ranked.json(vec![vec![0.1, 0.2]], None).is_err(), "one score per pair");
        assert!(Answer::Embedding.json(vec![vec![0.1], vec![0.2]], None).is_err(), "one vector per text");
    }
}
