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
    #[arg(long = "kafka-property", value_parser = PropertyParser, global = true)]
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

/// Parses a `--kafka-property` argument. Not a plain function parser: clap
/// would quote the whole argument in its error, and it may hold a password.
#[derive(Debug, Clone, Copy)]
pub struct PropertyParser;

impl clap::builder::TypedValueParser for PropertyParser {
    type Value = (String, String);

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        let refuse = |problem: &str| {
            let message =
                format!("invalid --kafka-property: {problem} (the argument is not shown: it may hold a secret)\n");
            clap::Error::raw(clap::error::ErrorKind::InvalidValue, message)
        };
        let text = value.to_str().ok_or_else(|| refuse("not UTF-8"))?;
        fleet_proto::client_properties::parse_pair(text).map_err(refuse)
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
    /// librdkafka refused a property. Its own error would print the value.
    #[error("Kafka property {key:?}: {problem}")]
    Refused { key: String, problem: String },
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
    let properties = properties(file, security, overrides)?;
    for (key, value) in &properties {
        config.set(key, value);
    }
    // Checked here, once, so that no later client creation reports a bad
    // property through rdkafka's error, whose text includes the value.
    config.create_native_config().map_err(|e| refused(e, &properties))?;
    Ok(config)
}

/// The longest a fleet client's reconnect backs off, in ms (librdkafka's
/// default is 10 s). Every second of backoff past a restarted broker's
/// return is a second added to what waits on it: requests queued in a
/// producer, and a consumer that must reach the group coordinator again
/// within its session or lose its partitions and the work in flight.
pub const RECONNECT_BACKOFF_MAX_MS: &str = "1000";

/// Sets [`RECONNECT_BACKOFF_MAX_MS`] on `config` unless the operator set
/// `reconnect.backoff.max.ms`: the operator's value stands.
pub fn default_reconnect_backoff(config: &mut ClientConfig) {
    const KEY: &str = "reconnect.backoff.max.ms";
    if config.get(KEY).is_none() {
        config.set(KEY, RECONNECT_BACKOFF_MAX_MS);
    }
}

/// librdkafka's complaint about a property, without any property's value.
fn refused(error: rdkafka::error::KafkaError, properties: &[(String, String)]) -> KafkaConfigError {
    match error {
        rdkafka::error::KafkaError::ClientConfig(_, description, key, _value) => {
            KafkaConfigError::Refused { key, problem: redact(&description, properties) }
        }
        other => KafkaConfigError::Refused { key: String::new(), problem: redact(&other.to_string(), properties) },
    }
}

/// `text` with every property value in it replaced by `***`.
fn redact(text: &str, properties: &[(String, String)]) -> String {
    properties
        .iter()
        .filter(|(_, value)| !value.is_empty())
        .fold(text.to_owned(), |text, (_, value)| text.replace(value.as_str(), "***"))
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

    #[test]
    fn a_property_librdkafka_refuses_is_named_without_its_value() {
        let path = std::env::temp_dir().join(format!("fleet-kafka-typo-{}.properties", std::process::id()));
        std::fs::write(&path, "sasl.pasword=hunter2\n").unwrap();
        let err = client_config("b:9092", Some(&path), &KafkaSecurity::default(), &[]).unwrap_err().to_string();
        assert!(err.contains("sasl.pasword") && !err.contains("hunter2"), "{err}");
        let _ = std::fs::remove_file(&path);
        let bad_value = [("security.protocol".to_owned(), "hunter2".to_owned())];
        let err = client_config("b:9092", None, &KafkaSecurity::default(), &bad_value).unwrap_err().to_string();
        assert!(err.contains("security.protocol") && !err.contains("hunter2"), "{err}");
    }

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        kafka: KafkaArgs,
    }

    #[test]
    fn a_malformed_kafka_property_flag_is_refused_without_echoing_it() {
        use clap::Parser;
        let err = Cli::try_parse_from(["x", "--kafka-property", "sasl.password:hunter2"]).unwrap_err().to_string();
        assert!(err.contains("--kafka-property") && !err.contains("hunter2"), "{err}");
        let ok = Cli::try_parse_from(["x", "--kafka-property", "sasl.password=hunter2"]).unwrap();
        assert_eq!(ok.kafka.kafka_properties, vec![("sasl.password".to_owned(), "hunter2".to_owned())]);
    }
}
