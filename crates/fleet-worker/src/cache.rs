//! The feature cache: model outputs kept in Redis by the exact model input,
//! so a repeated input is answered without compute.
//!
//! Key: `fleet:feat:<model>:<version>:<precision>:<hash of the token ids or
//! pixels>`, with the version's `feature_ttl_s`. The version and precision
//! are part of the key: a new model version (or the same one computed in
//! another precision) reads and writes new keys, and the old ones age out on their TTL,
//! with no flush and no stampede. Before a batch is computed its inputs are
//! looked up in one MGET; hits are answered at once, misses computed, and
//! their outputs stored in the same round trip as their answers. A lookup
//! that fails (Redis away) counts as all misses: the cache may make the
//! worker faster, never stop it.

use crate::precision::Precision;
use fleet_proto::{keys, ModelName};
use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// 128 bits of BLAKE3 over the token ids: collisions are not a concern.
pub fn tokens_hash(ids: &[i64]) -> String {
    let mut hasher = blake3::Hasher::new();
    for id in ids {
        hasher.update(&id.to_le_bytes());
    }
    hasher.finalize().to_hex()[..32].to_owned()
}

/// The same over an image model's input pixels (after decode and crop, so
/// re-encodings of one photo that decode alike share an entry).
pub fn pixels_hash(pixels: &[u8]) -> String {
    blake3::hash(pixels).to_hex()[..32].to_owned()
}

/// What is stored: the answer's output and what computing it cost, so a hit
/// can report the time it saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedOutput {
    pub output: serde_json::Value,
    /// Model time per row of the batch that computed it.
    pub infer_ms: f64,
}

pub struct FeatureCache {
    conn: ConnectionManager,
    model: ModelName,
}

impl FeatureCache {
    pub async fn connect(client: redis::Client, model: ModelName) -> Result<Self, redis::RedisError> {
        // Short: a slow cache must not slow the batch more than it could save.
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_millis(250)));
        let conn = ConnectionManager::new_with_config(client, config).await?;
        Ok(Self { conn, model })
    }

    pub fn key(&self, version: u64, precision: Precision, input_hash: &str) -> String {
        keys::feature_key(&self.model, version, precision.as_str(), input_hash)
    }

    /// One MGET for a batch under the keys of `version` in `precision`;
    /// `None` for misses, unreadable entries and errors.
    pub async fn lookup(&mut self, version: u64, precision: Precision, hashes: &[&str]) -> Vec<Option<CachedOutput>> {
        if hashes.is_empty() {
            return Vec::new();
        }
        let keys: Vec<String> = hashes.iter().map(|h| self.key(version, precision, h)).collect();
        let values: Result<Vec<Option<String>>, _> = redis::cmd("MGET").arg(&keys).query_async(&mut self.conn).await;
        match values {
            Ok(values) => values.into_iter().map(|v| v.and_then(|json| serde_json::from_str(&json).ok())).collect(),
            Err(e) => {
                tracing::warn!(error = %e, "feature cache lookup failed; computing the batch");
                vec![None; hashes.len()]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_stable_and_tells_inputs_apart() {
        assert_eq!(tokens_hash(&[101, 2023, 102]), tokens_hash(&[101, 2023, 102]));
        assert_ne!(tokens_hash(&[101, 2023, 102]), tokens_hash(&[101, 2024, 102]));
        assert_ne!(tokens_hash(&[1]), tokens_hash(&[1, 0]));
        assert_eq!(tokens_hash(&[]).len(), 32);
    }
}
