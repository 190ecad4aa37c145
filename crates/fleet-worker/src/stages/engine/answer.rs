//! How one row's vector becomes its answer's `output`, by the model's task:
//! an embedding, or the best classes with their labels. A text input adds
//! its token count and whether it was cut.

use super::error::EngineError;
use super::labels::{load_labels, top_k, Label};
use crate::config::{ModelVersion, TaskConfig};
use serde_json::{json, Value};

/// What a text answer adds: the input's length in tokens, and whether it was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextFields {
    pub tokens: usize,
    pub truncated: bool,
}

/// How one row's vector becomes its answer, by task.
pub enum Answer {
    /// `{"embedding": [...]}`.
    Embedding,
    /// `{"classes": [{"label", "index", "probability"}, ...]}`, best first.
    Classes { labels: Vec<Label>, top_k: usize },
}

impl Answer {
    pub fn for_version(version: &ModelVersion) -> Result<Self, EngineError> {
        match &version.config.task {
            TaskConfig::Embedding { .. } => Ok(Self::Embedding),
            TaskConfig::Classification { labels, top_k, .. } => {
                let labels = load_labels(&version.file(labels)).map_err(EngineError::Labels)?;
                Ok(Self::Classes { labels, top_k: *top_k })
            }
        }
    }

    /// The answer's `output` for one input and its vector. A text input
    /// adds its token count and whether it was cut.
    pub fn json(&self, vector: Vec<f32>, text: Option<TextFields>) -> Result<Value, EngineError> {
        let mut output = match self {
            Self::Embedding => json!({ "embedding": vector }),
            Self::Classes { labels, top_k: k } => {
                if vector.len() != labels.len() {
                    return Err(labels_mismatch(labels.len(), vector.len()));
                }
                let classes: Vec<Value> = top_k(&vector, *k)
                    .into_iter()
                    .map(|scored| {
                        let label = &labels[scored.index];
                        let mut class = json!({
                            "label": label.name(),
                            "index": scored.index,
                            "probability": scored.probability,
                        });
                        if let Some(id) = &label.id {
                            class["synset"] = json!(id);
                        }
                        class
                    })
                    .collect();
                json!({ "classes": classes })
            }
        };
        if let Some(TextFields { tokens, truncated }) = text {
            output["tokens"] = json!(tokens);
            output["truncated"] = json!(truncated);
        }
        Ok(output)
    }
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
        let out = Answer::Embedding.json(vec![0.6, 0.8], Some(TextFields { tokens: 7, truncated: true })).unwrap();
        assert_eq!(out, json!({ "embedding": [0.6f32, 0.8f32], "tokens": 7, "truncated": true }));
        let image = Answer::Embedding.json(vec![1.0], None).unwrap();
        assert!(image.get("tokens").is_none());
    }

    #[test]
    fn classes_are_best_first_with_an_id_only_where_the_labels_give_one() {
        let labels = parse_labels("n1\tcat, tabby\nplain dog\nn3\tbird\n").unwrap();
        let answer = Answer::Classes { labels, top_k: 2 };
        let out = answer.json(vec![0.2, 0.5, 0.3], None).unwrap();
        assert_eq!(
            out,
            json!({ "classes": [
                { "label": "plain dog", "index": 1, "probability": 0.5f32 },
                { "label": "bird", "synset": "n3", "index": 2, "probability": 0.3f32 },
            ] })
        );
        match answer.json(vec![0.5, 0.5], None) {
            Err(EngineError::Signature { key, .. }) => assert_eq!(key, "task.labels"),
            other => panic!("{other:?}"),
        }
    }
}
