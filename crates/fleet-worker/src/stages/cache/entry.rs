//! One feature-cache entry: its key (the model, version, precision and a
//! hash of the model's task and the exact model input) and what it stores,
//! written by the engine stage with each computed answer and read by the
//! cache stage.

use crate::core::precision::Precision;
use fleet_proto::{ModelName, Namespace};
use serde::{Deserialize, Serialize};

/// What is stored: the answer's output and what computing it cost, so a hit
/// can report the time it saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedOutput {
    pub output: serde_json::Value,
    /// Model time per row of the batch that computed it.
    pub infer_ms: f64,
}

/// Where one output is kept: the key's parts.
pub struct Address<'a> {
    pub namespace: &'a Namespace,
    pub model: &'a ModelName,
    pub version: u64,
    pub precision: Precision,
    /// `TaskConfig::tag`: the same input answers differently under another
    /// pooling or top k.
    pub task_tag: &'a str,
    pub input_hash: &'a str,
}

impl Address<'_> {
    pub fn key(&self) -> String {
        let mut hasher = blake3::Hasher::new();
        hasher.update(self.task_tag.as_bytes());
        hasher.update(b":");
        hasher.update(self.input_hash.as_bytes());
        let hash = &hasher.finalize().to_hex()[..32];
        self.namespace.feature_key(self.model, self.version, self.precision.as_str(), hash)
    }
}

/// The (key, value) to store for a freshly computed output.
pub fn key_value(at: &Address<'_>, output: &serde_json::Value, infer_ms: f64) -> Option<(String, String)> {
    let cached = CachedOutput { output: output.clone(), infer_ms };
    serde_json::to_string(&cached).ok().map(|value| (at.key(), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_task_reads_other_entries() {
        let (model, names) = (ModelName::parse("m").unwrap(), Namespace::default());
        let at = |task_tag| Address {
            namespace: &names,
            model: &model,
            version: 1,
            precision: Precision::Fp32,
            task_tag,
            input_hash: "ab",
        };
        assert_eq!(at("t1").key(), at("t1").key());
        assert_ne!(at("t1").key(), at("t2").key());
        assert!(at("t1").key().starts_with("fleet:feat:m:1:fp32:"));
    }
}
