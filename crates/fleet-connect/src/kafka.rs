//! librdkafka client settings: bootstrap servers, then the properties of a
//! file (`key=value` lines, see `fleet_proto::client_properties`), then the
//! security flags (`kafka_security`), then properties given one by one,
//! each overriding what came before. [`KafkaArgs`] is the one set of flags
//! every fleet binary takes for it.

use crate::kafka_security::{KafkaSecurity, SecurityError};
use rdkafka::ClientConfig;
use std::path::{Path, PathBuf};

/// The Kafka flags of every fleet binary (worker, fleet-produce, fleet-lag,
/// loadtest). Global, so a binary with subcommands takes them before or
/// after the subcommand's name.
#[derive(Debug, Clone, clap::Args)]
pub struct KafkaArgs {
    /// Kafka bootstrap servers.
    #[arg(long, env = "FLEET_BROKERS", default_value = "127.0.0.1:9092", global = true)]
    pub brokers: String,
    /// Extra librdkafka property, key=value (repeatable); overrides the file and the security flags.
    #[arg(long = "kafka-property", value_parser = fleet_proto::client_properties::parse_pair, global = true)]
    pub kafka_properties: Vec<(String, String)>,
    /// A file of librdkafka properties, key=value lines (e.g. SASL/TLS
    /// settings mounted from a Secret, so no password is on a command line).
    #[arg(long, env = "FLEET_KAFKA_PROPERTIES_FILE", global = true)]
    pub kafka_properties_file: Option<PathBuf>,
    #[command(flatten)]
    pub security: KafkaSecurity,
}

impl KafkaArgs {
    /// Every property but the brokers, in the order they apply. Errors name
    /// the file and line, never a value (it may be a password).
    pub fn properties(&self) -> Result<Vec<(String, String)>, KafkaConfigError> {
        properties(self.kafka_properties_file.as_deref(), &self.security, &self.kafka_properties)
    }

    /// A librdkafka config with the brokers and every property.
    pub fn client_config(&self) -> Result<ClientConfig, KafkaConfigError> {
        client_config(&self.brokers, self.kafka_properties_file.as_deref(), &self.security, &self.kafka_properties)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KafkaConfigError {
    #[error("reading the Kafka properties file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the Kafka properties file {path}, {source}")]
    Parse { path: PathBuf, source: fleet_proto::client_properties::PropertiesError },
    #[error(transparent)]
    Security(#[from] SecurityError),
}

/// The properties of `file` (if any), then `security`'s, then `overrides`.
pub fn properties(
    file: Option<&Path>,
    security: &KafkaSecurity,
    overrides: &[(String, String)],
) -> Result<Vec<(String, String)>, KafkaConfigError> {
    let mut properties = Vec::new();
    if let Some(path) = file {
        let text =
            std::fs::read_to_string(path).map_err(|source| KafkaConfigError::Read { path: path.to_owned(), source })?;
        properties = fleet_proto::client_properties::parse(&text)
            .map_err(|source| KafkaConfigError::Parse { path: path.to_owned(), source })?;
    }
    properties.extend(security.properties()?);
    properties.extend(overrides.iter().cloned());
    Ok(properties)
}

/// A librdkafka config for `brokers` with the file's and the overriding
/// properties applied.
pub fn client_config(
    brokers: &str,
    file: Option<&Path>,
    security: &KafkaSecurity,
    overrides: &[(String, String)],
) -> Result<ClientConfig, KafkaConfigError> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    for (key, value) in properties(file, security, overrides)? {
        config.set(key, value);
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_win_over_the_file_and_errors_name_the_file_not_the_value() {
        let path = std::env::temp_dir().join(format!("fleet-kafka-{}.properties", std::process::id()));
        std::fs::write(&path, "# secrets\nsecurity.protocol=SASL_SSL\nsasl.password=hunter2\n").unwrap();
        let config = client_config(
            "b:9092",
            Some(&path),
            &KafkaSecurity::default(),
            &[("security.protocol".into(), "SSL".into())],
        )
        .unwrap();
        assert_eq!(config.get("security.protocol"), Some("SSL"));
        assert_eq!(config.get("sasl.password"), Some("hunter2"));
        assert_eq!(config.get("bootstrap.servers"), Some("b:9092"));

        std::fs::write(&path, "sasl.password hunter2\n").unwrap();
        let err = client_config("b:9092", Some(&path), &KafkaSecurity::default(), &[]).unwrap_err().to_string();
        assert!(err.contains("line 1") && !err.contains("hunter2"), "{err}");
        let _ = std::fs::remove_file(&path);
    }
}
