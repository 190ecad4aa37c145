//! The sink's Kafka producers (dead letters, answer records): idempotent,
//! so a retried send does not write a record twice, and replaced by a new
//! one when librdkafka reports a fatal error (a broker that restarted
//! without the producer's state fails every later send of an idempotent
//! producer; only a new producer id sends again).

use crate::guard::lock;
use rdkafka::producer::{FutureProducer, Producer};
use rdkafka::ClientConfig;
use std::sync::Mutex;
use std::time::Duration;

pub struct ReplaceableProducer {
    producer: Mutex<FutureProducer>,
    config: ClientConfig,
}

impl ReplaceableProducer {
    /// `base` with what every sink producer needs: idempotence (and with it
    /// acks=all: a write counts once every in-sync replica has it), a
    /// missing topic reported instead of created with the broker's
    /// defaults, and failures reported within seconds instead of
    /// librdkafka's five minutes. An operator's value of each timing stands.
    pub fn new(base: &ClientConfig, settings: &[(&str, &str)]) -> Result<Self, rdkafka::error::KafkaError> {
        let mut config = base.clone();
        config.set("enable.idempotence", "true").set("allow.auto.create.topics", "false");
        for (key, value) in [
            ("message.timeout.ms", "30000"),
            // A missing topic is reported after this (librdkafka: 30 s).
            ("topic.metadata.propagation.max.ms", "5000"),
        ] {
            if config.get(key).is_none() {
                config.set(key, value);
            }
        }
        fleet_connect::kafka::default_reconnect_backoff(&mut config);
        for (key, value) in settings {
            config.set(*key, *value);
        }
        let producer = config.create()?;
        Ok(Self { producer: Mutex::new(producer), config })
    }

    /// The producer in use now (a clone shares its client).
    pub fn current(&self) -> FutureProducer {
        lock(&self.producer).clone()
    }

    /// Swaps in a new producer after a fatal error; what the failed one
    /// still holds fails too, without waiting.
    pub fn replace(&self) -> Result<(), rdkafka::error::KafkaError> {
        let fresh: FutureProducer = self.config.create()?;
        let failed = std::mem::replace(&mut *lock(&self.producer), fresh);
        let _ = failed.flush(Duration::ZERO);
        Ok(())
    }

    #[cfg(test)]
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sink_producer_is_idempotent_and_an_operators_timing_stands() {
        let mut base = ClientConfig::new();
        base.set("bootstrap.servers", "127.0.0.1:9").set("message.timeout.ms", "9000");
        let producer = ReplaceableProducer::new(&base, &[("linger.ms", "5")]).unwrap();
        let config = producer.config();
        assert_eq!(config.get("enable.idempotence"), Some("true"));
        assert_eq!(config.get("allow.auto.create.topics"), Some("false"));
        assert_eq!(config.get("message.timeout.ms"), Some("9000"));
        assert_eq!(config.get("reconnect.backoff.max.ms"), Some("1000"));
        assert_eq!(config.get("linger.ms"), Some("5"));
        producer.replace().unwrap();
    }
}
