//! `[answers]` of a model's `config.toml`: where each lane's answers go
//! unless a request asks otherwise, and what a request may ask for
//! (`ce_fleetreplyto`, `fleet_proto::reply`).
//!
//! ```toml
//! [answers]
//! interactive = ["redis"]          # a person waits: seconds, then gone
//! bulk = ["kafka"]                 # a backfill: durable, collected later
//! allowed = ["redis", "kafka"]     # what ce_fleetreplyto may name
//! ```
//!
//! Pure: admission asks it for each request and gets the destinations or
//! why the request may not have them.

use fleet_proto::{Destination, Destinations, Lane};
use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswersConfig {
    #[serde(default = "redis")]
    pub interactive: Destinations,
    #[serde(default = "kafka")]
    pub bulk: Destinations,
    #[serde(default = "both")]
    pub allowed: Destinations,
}

fn redis() -> Destinations {
    Destinations::REDIS
}
fn kafka() -> Destinations {
    Destinations::KAFKA
}
fn both() -> Destinations {
    Destinations::BOTH
}

impl Default for AnswersConfig {
    fn default() -> Self {
        Self { interactive: redis(), bulk: kafka(), allowed: both() }
    }
}

impl AnswersConfig {
    /// Where `lane`'s answers go when the request names nothing.
    pub fn default_for(&self, lane: Lane) -> Destinations {
        match lane {
            Lane::Interactive => self.interactive,
            Lane::Bulk => self.bulk,
        }
    }

    /// Where a request of `lane` that asked for `asked` is answered; `Err`
    /// (the message of its `bad_request` answer, which then goes to the
    /// lane's default) when the model does not allow what it asked.
    pub fn resolve(&self, lane: Lane, asked: Option<Destinations>) -> Result<Destinations, String> {
        let Some(asked) = asked else { return Ok(self.default_for(lane)) };
        if asked.is_within(self.allowed) {
            return Ok(asked);
        }
        Err(format!(
            "{} asks for {}, which this model does not allow (answers.allowed = {})",
            fleet_proto::headers::REPLY_TO,
            asked.beyond(self.allowed),
            self.allowed
        ))
    }

    /// Whether some answer of `lane` may be written to Redis: then a
    /// Redis that lost its data owes that lane a replay.
    pub fn may_use_redis(&self, lane: Lane) -> bool {
        self.default_for(lane).includes(Destination::Redis) || self.allowed.includes(Destination::Redis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_answers_go_to_kafka_and_interactive_ones_to_redis_by_default() {
        let answers = AnswersConfig::default();
        assert_eq!(answers.resolve(Lane::Bulk, None), Ok(Destinations::KAFKA));
        assert_eq!(answers.resolve(Lane::Interactive, None), Ok(Destinations::REDIS));
        assert_eq!(answers.resolve(Lane::Bulk, Some(Destinations::BOTH)), Ok(Destinations::BOTH));
    }

    #[test]
    fn a_request_may_choose_only_within_what_the_model_allows() {
        let answers = AnswersConfig { allowed: Destinations::REDIS, ..AnswersConfig::default() };
        let refused = answers.resolve(Lane::Interactive, Some(Destinations::BOTH)).unwrap_err();
        assert!(refused.contains("ce_fleetreplyto asks for kafka"), "{refused}");
        assert!(refused.contains("answers.allowed = redis"), "{refused}");
        assert_eq!(answers.resolve(Lane::Interactive, Some(Destinations::REDIS)), Ok(Destinations::REDIS));
        // The lane's default is the operator's, whatever requests may ask.
        assert_eq!(answers.resolve(Lane::Bulk, None), Ok(Destinations::KAFKA));
    }

    #[test]
    fn a_lane_owes_a_replay_only_where_its_answers_may_be_in_redis() {
        let kafka_only = AnswersConfig { allowed: Destinations::KAFKA, ..AnswersConfig::default() };
        assert!(!kafka_only.may_use_redis(Lane::Bulk));
        assert!(kafka_only.may_use_redis(Lane::Interactive), "its default is Redis");
        assert!(AnswersConfig::default().may_use_redis(Lane::Bulk), "a request may ask for Redis");
    }

    #[test]
    fn the_section_reads_from_toml() {
        let answers: AnswersConfig =
            toml::from_str("bulk = [\"redis\", \"kafka\"]\nallowed = [\"redis\", \"kafka\"]").unwrap();
        assert_eq!((answers.interactive, answers.bulk), (Destinations::REDIS, Destinations::BOTH));
        assert!(toml::from_str::<AnswersConfig>("bulk = [\"s3\"]").is_err());
        assert!(toml::from_str::<AnswersConfig>("bulk = []").is_err());
        assert!(toml::from_str::<AnswersConfig>("lanes = []").is_err());
    }
}
