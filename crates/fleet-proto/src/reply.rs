//! Where a request's answer is delivered: Redis (`fleet:result:{<id>}`, for
//! a client that waits seconds), the model's answers topic on Kafka
//! (`infer.<model>[.bulk].answers`, durable, for a job collected hours
//! later), or both.
//!
//! Each lane has a default in the model's `config.toml` (`[answers]`); a
//! request may name its own with the `ce_fleetreplyto` header, within what
//! the model allows. The header names destinations, never a topic: a
//! producer cannot make a worker write anywhere the operator did not set up.

use serde::Deserialize;
use std::fmt;

/// One place an answer can go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Destination {
    /// `fleet:result:{<id>}` and `fleet:ready:{<id>}`, for the version's result TTL.
    Redis,
    /// The model's answers topic of the request's lane, for the topic's retention.
    Kafka,
}

impl Destination {
    pub const ALL: [Self; 2] = [Self::Redis, Self::Kafka];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Redis => "redis",
            Self::Kafka => "kafka",
        }
    }
}

/// A set of destinations: where one answer goes, or what a model allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Destinations {
    redis: bool,
    kafka: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidDestinations {
    #[error("names no destination (expected redis, kafka, or redis,kafka)")]
    Empty,
    #[error("{0:?} is not a destination (expected redis or kafka; a topic cannot be named)")]
    Unknown(String),
}

impl Destinations {
    pub const REDIS: Self = Self { redis: true, kafka: false };
    pub const KAFKA: Self = Self { redis: false, kafka: true };
    pub const BOTH: Self = Self { redis: true, kafka: true };
    /// Nowhere: an answer that was delivered before (a replayed message
    /// whose answer is durable on Kafka) and is not written again.
    pub const NONE: Self = Self { redis: false, kafka: false };

    pub fn of(destinations: &[Destination]) -> Self {
        destinations.iter().fold(Self::NONE, |set, d| set.with(*d))
    }

    fn with(self, destination: Destination) -> Self {
        match destination {
            Destination::Redis => Self { redis: true, ..self },
            Destination::Kafka => Self { kafka: true, ..self },
        }
    }

    /// The set without `destination` (written there already).
    pub fn without(self, destination: Destination) -> Self {
        match destination {
            Destination::Redis => Self { redis: false, ..self },
            Destination::Kafka => Self { kafka: false, ..self },
        }
    }

    pub fn includes(self, destination: Destination) -> bool {
        match destination {
            Destination::Redis => self.redis,
            Destination::Kafka => self.kafka,
        }
    }

    pub fn is_empty(self) -> bool {
        !self.redis && !self.kafka
    }

    /// Every destination of `self` is one of `allowed`'s.
    pub fn is_within(self, allowed: Self) -> bool {
        (!self.redis || allowed.redis) && (!self.kafka || allowed.kafka)
    }

    /// The destinations of `self` that `allowed` does not hold.
    pub fn beyond(self, allowed: Self) -> Self {
        Self { redis: self.redis && !allowed.redis, kafka: self.kafka && !allowed.kafka }
    }

    pub fn iter(self) -> impl Iterator<Item = Destination> {
        Destination::ALL.into_iter().filter(move |d| self.includes(*d))
    }

    /// `redis`, `kafka` or `redis,kafka`: the header's value.
    pub fn parse(raw: &str) -> Result<Self, InvalidDestinations> {
        let mut set = Self::NONE;
        for word in raw.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let destination = Destination::ALL
                .into_iter()
                .find(|d| d.as_str() == word)
                .ok_or_else(|| InvalidDestinations::Unknown(word.chars().take(64).collect()))?;
            set = set.with(destination);
        }
        if set.is_empty() {
            return Err(InvalidDestinations::Empty);
        }
        Ok(set)
    }
}

impl fmt::Display for Destinations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        let words: Vec<&str> = self.iter().map(Destination::as_str).collect();
        f.write_str(&words.join(","))
    }
}

impl std::str::FromStr for Destinations {
    type Err = InvalidDestinations;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl<'de> Deserialize<'de> for Destinations {
    /// A list in `config.toml`: `bulk = ["kafka"]`, `allowed = ["redis", "kafka"]`.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let list = Vec::<Destination>::deserialize(deserializer)?;
        if list.is_empty() {
            return Err(serde::de::Error::custom(InvalidDestinations::Empty));
        }
        Ok(Self::of(&list))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_header_names_destinations_in_any_order() {
        assert_eq!(Destinations::parse("redis"), Ok(Destinations::REDIS));
        assert_eq!(Destinations::parse("kafka"), Ok(Destinations::KAFKA));
        assert_eq!(Destinations::parse("kafka, redis"), Ok(Destinations::BOTH));
        assert_eq!(Destinations::parse("redis,kafka,redis"), Ok(Destinations::BOTH));
        for shown in [Destinations::REDIS, Destinations::KAFKA, Destinations::BOTH] {
            assert_eq!(Destinations::parse(&shown.to_string()), Ok(shown));
        }
    }

    #[test]
    fn a_topic_or_nothing_is_refused() {
        assert_eq!(Destinations::parse(""), Err(InvalidDestinations::Empty));
        assert_eq!(Destinations::parse(" , "), Err(InvalidDestinations::Empty));
        let topic = Destinations::parse("kafka:infer.other.answers").unwrap_err();
        assert_eq!(topic, InvalidDestinations::Unknown("kafka:infer.other.answers".into()));
        assert!(Destinations::parse("Redis").is_err(), "names are lower case");
    }

    #[test]
    fn a_choice_is_judged_against_what_is_allowed() {
        assert!(Destinations::KAFKA.is_within(Destinations::BOTH));
        assert!(!Destinations::BOTH.is_within(Destinations::REDIS));
        assert_eq!(Destinations::BOTH.beyond(Destinations::REDIS), Destinations::KAFKA);
        assert!(Destinations::NONE.is_within(Destinations::NONE));
        assert_eq!(Destinations::BOTH.without(Destination::Kafka), Destinations::REDIS);
        assert!(Destinations::KAFKA.without(Destination::Kafka).is_empty());
    }

    #[test]
    fn the_config_lists_them() {
        #[derive(Deserialize)]
        struct Lanes {
            bulk: Destinations,
        }
        let lanes: Lanes = serde_json::from_str(r#"{"bulk": ["kafka", "redis"]}"#).unwrap();
        assert_eq!(lanes.bulk, Destinations::BOTH);
        assert!(serde_json::from_str::<Lanes>(r#"{"bulk": []}"#).is_err());
        assert!(serde_json::from_str::<Lanes>(r#"{"bulk": ["s3"]}"#).is_err());
    }
}
