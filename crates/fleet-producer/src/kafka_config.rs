//! Connection settings shared by every Kafka client the fleet makes, so the
//! producer, the admin calls and the worker agree on brokers and extra
//! librdkafka properties.

use rdkafka::ClientConfig;

#[derive(Clone)]
pub struct KafkaConfig {
    /// `bootstrap.servers`, comma separated.
    pub brokers: String,
    /// Any further librdkafka property, passed through verbatim.
    pub extra: Vec<(String, String)>,
}

/// The extra properties' values may be secrets (`sasl.password`,
/// `ssl.key.password`): `Debug` names the keys only.
impl std::fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<&str> = self.extra.iter().map(|(key, _)| key.as_str()).collect();
        f.debug_struct("KafkaConfig").field("brokers", &self.brokers).field("extra_keys", &keys).finish()
    }
}

impl KafkaConfig {
    pub fn new(brokers: impl Into<String>) -> Self {
        Self { brokers: brokers.into(), extra: Vec::new() }
    }

    /// From a binary's Kafka flags (`fleet_connect::kafka::KafkaArgs`): the
    /// properties file, TLS/SASL settings and `--kafka-property` entries.
    pub fn from_args(args: &fleet_connect::kafka::KafkaArgs) -> Result<Self, fleet_connect::kafka::KafkaConfigError> {
        Ok(Self { brokers: args.brokers.clone(), extra: args.properties()? })
    }

    /// A librdkafka config with the brokers and the pass-through properties.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.brokers);
        for (key, value) in &self.extra {
            config.set(key, value);
        }
        config
    }
}
