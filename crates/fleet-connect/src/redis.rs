//! Redis connection settings: the URL (`redis://` plain, `rediss://` TLS;
//! an ACL user and password may be in it), and for TLS a CA to trust (a
//! private CA, instead of the system's roots) and a client certificate and
//! key for servers that require mutual TLS (`tls-auth-clients yes`).
//!
//! The URL is never printed whole: `Debug` and errors show it with the
//! password replaced, and `--help` does not show the environment's value.

use std::path::PathBuf;
use std::time::Duration;

/// A connection that reconnects by itself, each (re)connect bounded by
/// `connect` and each reply by `respond`: a Redis that does not answer
/// costs a caller at most that long, never a hang.
pub async fn managed(
    client: redis::Client,
    connect: Duration,
    respond: Duration,
) -> Result<redis::aio::ConnectionManager, redis::RedisError> {
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect))
        .set_response_timeout(Some(respond));
    redis::aio::ConnectionManager::new_with_config(client, config).await
}

#[derive(Clone, clap::Args)]
pub struct RedisConfig {
    /// Redis URL: redis://[user:password@]host:port, or rediss:// for TLS.
    #[arg(long = "redis", env = "FLEET_REDIS_URL", default_value = "redis://127.0.0.1:6379", hide_env_values = true)]
    pub url: String,
    /// rediss://: a PEM CA certificate to trust instead of the system's roots.
    #[arg(long, env = "FLEET_REDIS_CA_FILE")]
    pub redis_ca_file: Option<PathBuf>,
    /// rediss:// with mutual TLS: the client certificate (PEM).
    #[arg(long, env = "FLEET_REDIS_CLIENT_CERT", requires = "redis_client_key")]
    pub redis_client_cert: Option<PathBuf>,
    /// rediss:// with mutual TLS: the client certificate's key (PEM).
    #[arg(long, env = "FLEET_REDIS_CLIENT_KEY", requires = "redis_client_cert")]
    pub redis_client_key: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum RedisConfigError {
    #[error("reading {what} {path}: {source}")]
    Read { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{setting} is set, but {url} is not a rediss:// (TLS) URL")]
    TlsFileWithoutTls { setting: &'static str, url: String },
    #[error("Redis URL {url}: {source}")]
    Client { url: String, source: redis::RedisError },
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact(&self.url))
            .field("redis_ca_file", &self.redis_ca_file)
            .field("redis_client_cert", &self.redis_client_cert)
            .field("redis_client_key", &self.redis_client_key)
            .finish()
    }
}

impl RedisConfig {
    /// A URL alone: plain, or TLS trusting the system's roots.
    pub fn url(url: impl Into<String>) -> Self {
        Self { url: url.into(), redis_ca_file: None, redis_client_cert: None, redis_client_key: None }
    }

    pub fn is_tls(&self) -> bool {
        self.url.starts_with("rediss://")
    }

    /// The URL with any password replaced by `***`, for logs and errors.
    pub fn redacted_url(&self) -> String {
        redact(&self.url)
    }

    /// A client for these settings. Reads the certificate files now, so a
    /// missing file fails the start instead of the first request.
    pub fn client(&self) -> Result<redis::Client, RedisConfigError> {
        let client_error = |source| RedisConfigError::Client { url: self.redacted_url(), source };
        let tls_files = [
            ("--redis-ca-file", &self.redis_ca_file),
            ("--redis-client-cert", &self.redis_client_cert),
            ("--redis-client-key", &self.redis_client_key),
        ];
        if !self.is_tls() {
            if let Some((setting, _)) = tls_files.iter().find(|(_, path)| path.is_some()) {
                return Err(RedisConfigError::TlsFileWithoutTls { setting, url: self.redacted_url() });
            }
            return redis::Client::open(self.url.as_str()).map_err(client_error);
        }
        let read = |what: &'static str, path: &Option<PathBuf>| {
            path.as_ref()
                .map(|path| {
                    std::fs::read(path).map_err(|source| RedisConfigError::Read { what, path: path.clone(), source })
                })
                .transpose()
        };
        let root_cert = read("the Redis CA file", &self.redis_ca_file)?;
        let client_tls = match (
            read("the Redis client certificate", &self.redis_client_cert)?,
            read("the Redis client key", &self.redis_client_key)?,
        ) {
            (Some(client_cert), Some(client_key)) => Some(redis::ClientTlsConfig { client_cert, client_key }),
            _ => None,
        };
        if root_cert.is_none() && client_tls.is_none() {
            return redis::Client::open(self.url.as_str()).map_err(client_error);
        }
        redis::Client::build_with_tls(self.url.as_str(), redis::TlsCertificates { client_tls, root_cert })
            .map_err(client_error)
    }
}

/// `scheme://user:password@host` → `scheme://user:***@host`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let Some((credentials, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    match credentials.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None if !credentials.is_empty() => format!("{scheme}://***@{host}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_show() {
        assert_eq!(redact("redis://fleet:s3cret@h:6379/0"), "redis://fleet:***@h:6379/0");
        assert_eq!(redact("rediss://:s3cret@h:6380"), "rediss://:***@h:6380");
        assert_eq!(redact("redis://s3cret@h"), "redis://***@h");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        let config = RedisConfig::url("redis://fleet:s3cret@127.0.0.1:6379");
        assert!(!format!("{config:?}").contains("s3cret"));
    }

    #[test]
    fn tls_files_need_a_tls_url_and_must_exist() {
        let plain = RedisConfig { redis_ca_file: Some("/ca.pem".into()), ..RedisConfig::url("redis://:pw@h:1") };
        let err = plain.client().unwrap_err().to_string();
        assert!(err.contains("--redis-ca-file") && err.contains("redis://:***@h:1"), "{err}");
        let missing =
            RedisConfig { redis_ca_file: Some("/nonexistent/ca.pem".into()), ..RedisConfig::url("rediss://h:1") };
        assert!(matches!(missing.client(), Err(RedisConfigError::Read { .. })));
    }
}
