//! Names shared across the fleet: Kafka topics and groups per model, and the
//! Redis keys of results, ready lists, backlog reports and the feature cache.
//!
//! Every name is made by a [`Namespace`]: the prefixes of one release, so
//! two releases sharing one Kafka or one Redis never meet. The defaults are
//! `infer.` (topics), `fleet.` (groups) and `fleet:` (Redis keys).
//!
//! The Redis keys of one request carry its id as a hash tag
//! (`fleet:result:{<id>}`, `fleet:ready:{<id>}`): Redis Cluster puts both in
//! one slot, so the worker's one-script answer write works in cluster mode.

use crate::RequestId;
use std::fmt;

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

/// The prefixes of one release's topics, groups and Redis keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    topic_prefix: String,
    group_prefix: String,
    redis_prefix: String,
}

pub const DEFAULT_TOPIC_PREFIX: &str = "infer.";
pub const DEFAULT_GROUP_PREFIX: &str = "fleet.";
pub const DEFAULT_REDIS_PREFIX: &str = "fleet:";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPrefix {
    #[error("{what} prefix {prefix:?} must be 1-64 characters of a-z A-Z 0-9 . _ - (Kafka's topic alphabet)")]
    Kafka { what: &'static str, prefix: String },
    #[error("Redis key prefix {0:?} must be 1-64 printable ASCII characters without spaces, '{{' or '}}' (braces would move the hash tag)")]
    Redis(String),
}

impl Default for Namespace {
    fn default() -> Self {
        Self {
            topic_prefix: DEFAULT_TOPIC_PREFIX.to_owned(),
            group_prefix: DEFAULT_GROUP_PREFIX.to_owned(),
            redis_prefix: DEFAULT_REDIS_PREFIX.to_owned(),
        }
    }
}

impl Namespace {
    pub fn new(topic_prefix: &str, group_prefix: &str, redis_prefix: &str) -> Result<Self, InvalidPrefix> {
        let kafka_ok = |p: &str| {
            (1..=64).contains(&p.len()) && p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        };
        for (what, prefix) in [("topic", topic_prefix), ("consumer group", group_prefix)] {
            if !kafka_ok(prefix) {
                return Err(InvalidPrefix::Kafka { what, prefix: prefix.to_owned() });
            }
        }
        let redis_ok = (1..=64).contains(&redis_prefix.len())
            && redis_prefix.chars().all(|c| c.is_ascii_graphic() && c != '{' && c != '}');
        if !redis_ok {
            return Err(InvalidPrefix::Redis(redis_prefix.to_owned()));
        }
        Ok(Self {
            topic_prefix: topic_prefix.to_owned(),
            group_prefix: group_prefix.to_owned(),
            redis_prefix: redis_prefix.to_owned(),
        })
    }

    pub fn redis_prefix(&self) -> &str {
        &self.redis_prefix
    }

    /// `infer.<model>`: where requests for this model are produced.
    pub fn topic(&self, model: &ModelName) -> String {
        format!("{}{model}", self.topic_prefix)
    }

    /// `infer.<model>` or `infer.<model>.bulk`: where requests of `lane`
    /// are produced.
    pub fn lane_topic(&self, model: &ModelName, lane: crate::Lane) -> String {
        format!("{}{model}{}", self.topic_prefix, lane.topic_suffix())
    }

    /// `infer.<model>.dlq`: messages that could not become a request.
    pub fn dlq_topic(&self, model: &ModelName) -> String {
        format!("{}{model}.dlq", self.topic_prefix)
    }

    /// `infer.<model>.answers` or `infer.<model>.bulk.answers`: where the
    /// answers of `lane`'s requests that go to Kafka are produced (keyed
    /// by request id, the answer JSON as value: `crate::answer_record`).
    pub fn answers_topic(&self, model: &ModelName, lane: crate::Lane) -> String {
        format!("{}{model}{}.answers", self.topic_prefix, lane.topic_suffix())
    }

    /// `infer.fleet.jobs`: the job records (`crate::job_record`) of every
    /// model of the release, keyed by job id. No model's topics can have
    /// this name: a model name has no dot, and no model topic ends in
    /// `.jobs`.
    pub fn jobs_topic(&self) -> String {
        format!("{}fleet.jobs", self.topic_prefix)
    }

    /// `fleet.<model>`: the consumer group of this model's workers.
    pub fn consumer_group(&self, model: &ModelName) -> String {
        format!("{}{model}", self.group_prefix)
    }

    /// `fleet:result:{<id>}`: hash, one field per model, value = answer JSON.
    pub fn result_key(&self, id: &RequestId) -> String {
        format!("{}result:{{{id}}}", self.redis_prefix)
    }

    /// `fleet:ready:{<id>}`: list, one push per model answer, for BLPOP
    /// waiters. Same hash tag as the result: same Redis Cluster slot.
    pub fn ready_key(&self, id: &RequestId) -> String {
        format!("{}ready:{{{id}}}", self.redis_prefix)
    }

    /// `fleet:cancel:{<job>}`: present (value: when it was cancelled, Unix
    /// ms) while the job is cancelled; set by clients, read by workers.
    pub fn cancel_key(&self, job: &crate::JobId) -> String {
        format!("{}cancel:{{{job}}}", self.redis_prefix)
    }

    /// `fleet:backlog:<model>`: hash of the model's workers' backlog reports
    /// (`crate::backlog`).
    pub fn backlog_key(&self, model: &ModelName) -> String {
        format!("{}backlog:{model}", self.redis_prefix)
    }

    /// `fleet:feat:<model>:<version>:<precision>:<hash>`: cached model output
    /// for an input. The version and the precision it was computed in
    /// (`fp32`, `bf16`, `fp16`) are part of the key: a new version, or the
    /// same one in another precision, never reads entries it did not compute.
    /// No hash tag: entries spread over a cluster's slots (a batch's lookup
    /// is split by slot by the cluster client).
    pub fn feature_key(&self, model: &ModelName, version: u64, precision: &str, input_hash: &str) -> String {
        format!("{}feat:{model}:{version}:{precision}:{input_hash}", self.redis_prefix)
    }

    /// `fleet:memory`: a marker the workers keep, with no TTL, to notice that
    /// Redis lost what they wrote (a restart without persistence, a
    /// failover to a replica that missed writes, a flush): its value
    /// changes or it is gone, and the workers replay what a client may
    /// still wait for. One per namespace, shared by every model's workers.
    pub fn memory_marker_key(&self) -> String {
        format!("{}memory", self.redis_prefix)
    }

    /// The glob matching every Redis key of this namespace (for ACL rules).
    pub fn redis_pattern(&self) -> String {
        format!("{}*", self.redis_prefix)
    }
}

/// The hash tag Redis Cluster hashes a key by: the text between the first
/// `{` and the next `}`, when not empty; else the whole key.
pub fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_design() {
        let m = ModelName::parse("minilm").unwrap();
        let id = RequestId::parse("r-1").unwrap();
        let ns = Namespace::default();
        assert_eq!(ns.topic(&m), "infer.minilm");
        assert_eq!(ns.dlq_topic(&m), "infer.minilm.dlq");
        assert_eq!(ns.lane_topic(&m, crate::Lane::Interactive), "infer.minilm");
        assert_eq!(ns.lane_topic(&m, crate::Lane::Bulk), "infer.minilm.bulk");
        assert_eq!(ns.consumer_group(&m), "fleet.minilm");
        assert_eq!(ns.answers_topic(&m, crate::Lane::Interactive), "infer.minilm.answers");
        assert_eq!(ns.answers_topic(&m, crate::Lane::Bulk), "infer.minilm.bulk.answers");
        assert_eq!(ns.jobs_topic(), "infer.fleet.jobs");
        assert_eq!(ns.result_key(&id), "fleet:result:{r-1}");
        assert_eq!(ns.cancel_key(&id), "fleet:cancel:{r-1}");
        assert_eq!(ns.ready_key(&id), "fleet:ready:{r-1}");
        assert_eq!(ns.backlog_key(&m), "fleet:backlog:minilm");
        assert_eq!(ns.feature_key(&m, 2, "bf16", "abc"), "fleet:feat:minilm:2:bf16:abc");
        assert_eq!(ns.memory_marker_key(), "fleet:memory");
    }

    #[test]
    fn prefixes_make_a_release_its_own_names() {
        let m = ModelName::parse("minilm").unwrap();
        let id = RequestId::parse("r-1").unwrap();
        let ns = Namespace::new("blue.infer.", "blue-fleet.", "blue:fleet:").unwrap();
        assert_eq!(ns.topic(&m), "blue.infer.minilm");
        assert_eq!(ns.dlq_topic(&m), "blue.infer.minilm.dlq");
        assert_eq!(ns.answers_topic(&m, crate::Lane::Bulk), "blue.infer.minilm.bulk.answers");
        assert_eq!(ns.jobs_topic(), "blue.infer.fleet.jobs");
        assert_eq!(ns.consumer_group(&m), "blue-fleet.minilm");
        assert_eq!(ns.result_key(&id), "blue:fleet:result:{r-1}");
        assert_eq!(ns.redis_pattern(), "blue:fleet:*");
        for (topic, group, redis) in
            [("", "g.", "r:"), ("in fer.", "g.", "r:"), ("t.", "g/", "r:"), ("t.", "g.", "r{x}:"), ("t.", "g.", "a b")]
        {
            assert!(Namespace::new(topic, group, redis).is_err(), "{topic:?} {group:?} {redis:?} accepted");
        }
    }

    #[test]
    fn one_requests_keys_share_a_cluster_slot() {
        let id = RequestId::parse("Req:42.a_b-c").unwrap();
        for ns in [Namespace::default(), Namespace::new("t.", "g.", "x:y:").unwrap()] {
            assert_eq!(hash_tag(&ns.result_key(&id)), "Req:42.a_b-c");
            assert_eq!(hash_tag(&ns.ready_key(&id)), hash_tag(&ns.result_key(&id)));
        }
        assert_eq!(hash_tag("a{}b"), "a{}b");
        assert_eq!(hash_tag("plain"), "plain");
    }

    #[test]
    fn model_names_are_narrow() {
        assert!(ModelName::parse("effnet_lite0-v2").is_ok());
        for bad in ["", "MiniLM", "a.b", "a b", &"m".repeat(65)] {
            assert!(ModelName::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
