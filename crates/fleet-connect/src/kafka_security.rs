//! Kafka transport security for every fleet binary: TLS (a CA to trust,
//! optionally a client certificate for mutual TLS) and SASL (PLAIN,
//! SCRAM-SHA-256, SCRAM-SHA-512), from flags or the environment, mapped to
//! librdkafka's properties. Anything else librdkafka takes goes through the
//! properties file or `--kafka-property`.
//!
//! The password is a [`Secret`]: from `FLEET_KAFKA_SASL_PASSWORD` (never shown
//! by `--help`) or a file (`FLEET_KAFKA_SASL_PASSWORD_FILE`, a mounted
//! Secret); its `Debug` and `Display` print `***`.

use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SecurityProtocol {
    #[value(name = "plaintext", alias = "PLAINTEXT")]
    Plaintext,
    #[value(name = "ssl", alias = "SSL")]
    Ssl,
    #[value(name = "sasl_plaintext", alias = "SASL_PLAINTEXT")]
    SaslPlaintext,
    #[value(name = "sasl_ssl", alias = "SASL_SSL")]
    SaslSsl,
}

impl SecurityProtocol {
    fn property(self) -> &'static str {
        match self {
            Self::Plaintext => "plaintext",
            Self::Ssl => "ssl",
            Self::SaslPlaintext => "sasl_plaintext",
            Self::SaslSsl => "sasl_ssl",
        }
    }

    fn is_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    fn is_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SaslMechanism {
    #[value(name = "PLAIN", alias = "plain")]
    Plain,
    #[value(name = "SCRAM-SHA-256", alias = "scram-sha-256")]
    ScramSha256,
    #[value(name = "SCRAM-SHA-512", alias = "scram-sha-512")]
    ScramSha512,
}

impl SaslMechanism {
    fn property(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// A value that must never be printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

#[derive(Debug, Clone, Default, clap::Args)]
pub struct KafkaSecurity {
    /// plaintext, ssl, sasl_plaintext or sasl_ssl (librdkafka security.protocol).
    #[arg(long, env = "FLEET_KAFKA_SECURITY_PROTOCOL", value_enum, global = true)]
    pub kafka_security_protocol: Option<SecurityProtocol>,
    /// TLS: a PEM CA certificate to trust instead of the system's roots.
    #[arg(long, env = "FLEET_KAFKA_CA_FILE", global = true)]
    pub kafka_ca_file: Option<PathBuf>,
    /// Mutual TLS: this client's certificate (PEM).
    #[arg(long, env = "FLEET_KAFKA_CERT_FILE", requires = "kafka_key_file", global = true)]
    pub kafka_cert_file: Option<PathBuf>,
    /// Mutual TLS: the certificate's private key (PEM).
    #[arg(long, env = "FLEET_KAFKA_KEY_FILE", requires = "kafka_cert_file", global = true)]
    pub kafka_key_file: Option<PathBuf>,
    /// SASL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
    #[arg(long, env = "FLEET_KAFKA_SASL_MECHANISM", value_enum, global = true)]
    pub kafka_sasl_mechanism: Option<SaslMechanism>,
    #[arg(long, env = "FLEET_KAFKA_SASL_USERNAME", global = true)]
    pub kafka_sasl_username: Option<String>,
    /// SASL password. Prefer the environment variable or the file: a value
    /// on the command line is visible to other users of the host.
    #[arg(long, env = "FLEET_KAFKA_SASL_PASSWORD", hide_env_values = true, global = true)]
    pub kafka_sasl_password: Option<Secret>,
    /// SASL password from a file (first line), e.g. a mounted Secret.
    #[arg(long, env = "FLEET_KAFKA_SASL_PASSWORD_FILE", conflicts_with = "kafka_sasl_password", global = true)]
    pub kafka_sasl_password_file: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum SecurityError {
    #[error("{0}")]
    Inconsistent(&'static str),
    #[error("reading the SASL password file {path}: {source}")]
    PasswordFile { path: PathBuf, source: std::io::Error },
}

impl KafkaSecurity {
    /// librdkafka properties for these settings (empty when none is set).
    pub fn properties(&self) -> Result<Vec<(String, String)>, SecurityError> {
        let password = match (&self.kafka_sasl_password, &self.kafka_sasl_password_file) {
            (Some(secret), _) => Some(secret.clone()),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|source| SecurityError::PasswordFile { path: path.clone(), source })?;
                Some(Secret::new(text.lines().next().unwrap_or_default().trim_end()))
            }
            (None, None) => None,
        };
        self.check(password.is_some())?;
        let mut properties = Vec::new();
        let mut set = |key: &str, value: &str| properties.push((key.to_owned(), value.to_owned()));
        if let Some(protocol) = self.kafka_security_protocol {
            set("security.protocol", protocol.property());
        }
        if let Some(ca) = &self.kafka_ca_file {
            set("ssl.ca.location", &ca.display().to_string());
        }
        if let (Some(cert), Some(key)) = (&self.kafka_cert_file, &self.kafka_key_file) {
            set("ssl.certificate.location", &cert.display().to_string());
            set("ssl.key.location", &key.display().to_string());
        }
        if let Some(mechanism) = self.kafka_sasl_mechanism {
            set("sasl.mechanism", mechanism.property());
        }
        if let Some(username) = &self.kafka_sasl_username {
            set("sasl.username", username);
        }
        if let Some(password) = &password {
            set("sasl.password", password.expose());
        }
        Ok(properties)
    }

    /// Settings that cannot work together are refused at start, naming the
    /// setting, rather than found out as a connection that never succeeds.
    fn check(&self, has_password: bool) -> Result<(), SecurityError> {
        let inconsistent = |why| Err(SecurityError::Inconsistent(why));
        let tls_files = self.kafka_ca_file.is_some() || self.kafka_cert_file.is_some();
        let sasl_settings = self.kafka_sasl_mechanism.is_some() || self.kafka_sasl_username.is_some() || has_password;
        let Some(protocol) = self.kafka_security_protocol else {
            if tls_files || sasl_settings {
                return inconsistent(
                    "TLS or SASL settings are given without --kafka-security-protocol (ssl, sasl_plaintext or sasl_ssl)",
                );
            }
            return Ok(());
        };
        if tls_files && !protocol.is_tls() {
            return inconsistent("--kafka-ca-file/--kafka-cert-file need --kafka-security-protocol ssl or sasl_ssl");
        }
        if sasl_settings && !protocol.is_sasl() {
            return inconsistent("SASL settings need --kafka-security-protocol sasl_plaintext or sasl_ssl");
        }
        if protocol.is_sasl()
            && (self.kafka_sasl_mechanism.is_none() || self.kafka_sasl_username.is_none() || !has_password)
        {
            return inconsistent("SASL needs --kafka-sasl-mechanism, --kafka-sasl-username and a password");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        security: KafkaSecurity,
    }

    fn parse(args: &[&str]) -> Result<Vec<(String, String)>, String> {
        let cli =
            Cli::try_parse_from(std::iter::once("test").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        cli.security.properties().map_err(|e| e.to_string())
    }

    #[test]
    fn nothing_set_adds_nothing() {
        assert_eq!(parse(&[]).unwrap(), vec![]);
    }

    #[test]
    fn mutual_tls_maps_to_librdkafka() {
        let p = parse(&[
            "--kafka-security-protocol",
            "ssl",
            "--kafka-ca-file",
            "/ca.pem",
            "--kafka-cert-file",
            "/c.pem",
            "--kafka-key-file",
            "/k.pem",
        ])
        .unwrap();
        let get = |k: &str| p.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
        assert_eq!(get("security.protocol"), Some("ssl"));
        assert_eq!(get("ssl.ca.location"), Some("/ca.pem"));
        assert_eq!(get("ssl.certificate.location"), Some("/c.pem"));
        assert_eq!(get("ssl.key.location"), Some("/k.pem"));
        assert!(
            parse(&["--kafka-security-protocol", "ssl", "--kafka-cert-file", "/c.pem"]).is_err(),
            "a cert needs its key"
        );
    }

    #[test]
    fn sasl_needs_all_three_and_a_sasl_protocol() {
        let args = [
            "--kafka-security-protocol",
            "sasl_ssl",
            "--kafka-sasl-mechanism",
            "SCRAM-SHA-256",
            "--kafka-sasl-username",
            "alice",
            "--kafka-sasl-password",
            "hunter2",
        ];
        let p = parse(&args).unwrap();
        assert!(p.contains(&("sasl.mechanism".into(), "SCRAM-SHA-256".into())));
        assert!(p.contains(&("sasl.password".into(), "hunter2".into())));
        let err = parse(&args[..6]).unwrap_err();
        assert!(err.contains("password"), "{err}");
        let mut plaintext = args.to_vec();
        plaintext[1] = "ssl";
        let err = parse(&plaintext).unwrap_err();
        assert!(err.contains("sasl_plaintext or sasl_ssl") && !err.contains("hunter2"), "{err}");
        let err = parse(&args[2..]).unwrap_err();
        assert!(err.contains("--kafka-security-protocol"), "{err}");
    }

    #[test]
    fn the_password_file_is_read_and_the_secret_never_printed() {
        let path = std::env::temp_dir().join(format!("fleet-kafka-password-{}", std::process::id()));
        std::fs::write(&path, "s3cret-from-file\n").unwrap();
        let p = parse(&[
            "--kafka-security-protocol",
            "sasl_plaintext",
            "--kafka-sasl-mechanism",
            "PLAIN",
            "--kafka-sasl-username",
            "bob",
            "--kafka-sasl-password-file",
            path.to_str().unwrap(),
        ])
        .unwrap();
        assert!(p.contains(&("sasl.password".into(), "s3cret-from-file".into())));
        let cli = Cli::try_parse_from(["t", "--kafka-sasl-password", "s3cret"]).unwrap();
        assert!(!format!("{:?}", cli.security).contains("s3cret"));
        assert_eq!(Secret::new("x").to_string(), "***");
        let _ = std::fs::remove_file(&path);
    }
}
