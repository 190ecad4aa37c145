//! Names shared across the fleet: Kafka topics and groups per model, and the
//! Redis keys of results, ready lists and the feature cache.

use crate::RequestId;
use std::fmt;

/// Every Redis key the fleet writes starts with this, so one ACL pattern
/// (`~fleet:*`) can confine the fleet's user.
pub const REDIS_PREFIX: &str = "fleet:";

/// A model's name: part of topic, group and key names, hence a narrow alphabet.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelName(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("model name {0:?} must be 1-64 characters of a-z 0-9 _ -")]
pub struct InvalidModelName(pub String);

impl ModelName {
    pub fn parse(raw: &str) -> Result<Self, InvalidModelName> {
        let ok = !raw.is_empty()
            && raw.len() <= 64
            && raw.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err(InvalidModelName(raw.to_owned()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `infer.<model>`: where requests for this model are produced.
    pub fn topic(&self) -> String {
        format!("infer.{}", self.0)
    }

    /// `infer.<model>.dlq`: messages that could not become a request.
    pub fn dlq_topic(&self) -> String {
        format!("infer.{}.dlq", self.0)
    }

    /// `fleet.<model>`: the consumer group of this model's workers.
    pub fn consumer_group(&self) -> String {
        format!("fleet.{}", self.0)
    }
}

impl fmt::Display for ModelName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for ModelName {
    type Err = InvalidModelName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// `fleet:result:<id>`: hash, one field per model, value = answer JSON.
pub fn result_key(id: &RequestId) -> String {
    format!("{REDIS_PREFIX}result:{id}")
}

/// `fleet:ready:<id>`: list, one push per model answer, for BLPOP waiters.
pub fn ready_key(id: &RequestId) -> String {
    format!("{REDIS_PREFIX}ready:{id}")
}

/// `fleet:feat:<model>:<version>:<precision>:<hash>`: cached model output
/// for an input. The version and the precision it was computed in (`fp32`,
/// `bf16`, `fp16`) are part of the key: a new version, or the same one in
/// another precision, never reads entries it did not compute.
pub fn feature_key(model: &ModelName, version: u64, precision: &str, input_hash: &str) -> String {
    format!("{REDIS_PREFIX}feat:{model}:{version}:{precision}:{input_hash}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_design() {
        let m = ModelName::parse("minilm").unwrap();
        let id = RequestId::parse("r-1").unwrap();
        assert_eq!(m.topic(), "infer.minilm");
        assert_eq!(m.dlq_topic(), "infer.minilm.dlq");
        assert_eq!(m.consumer_group(), "fleet.minilm");
        assert_eq!(result_key(&id), "fleet:result:r-1");
        assert_eq!(ready_key(&id), "fleet:ready:r-1");
        assert_eq!(feature_key(&m, 2, "bf16", "abc"), "fleet:feat:minilm:2:bf16:abc");
    }

    #[test]
    fn model_names_are_narrow() {
        assert!(ModelName::parse("effnet_lite0-v2").is_ok());
        for bad in ["", "MiniLM", "a.b", "a b", &"m".repeat(65)] {
            assert!(ModelName::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
