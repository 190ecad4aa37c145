//! Redis connection settings: the URL (`redis://` plain, `rediss://` TLS;
//! an ACL user and password may be in it), and for TLS a CA to trust (a
//! private CA, instead of the system's roots) and a client certificate and
//! key for servers that require mutual TLS (`tls-auth-clients yes`); and
//! whether it is one server or a Redis Cluster (`--redis-cluster`: the URL
//! then lists seed nodes, comma-separated, and commands go to the node
//! owning their key's slot).
//!
//! The URL is never printed whole: `Debug` and errors show it with the
//! password replaced, and `--help` does not show the environment's value.

use std::path::PathBuf;
use std::time::Duration;

/// One Redis server or a Redis Cluster, behind one connection type, so
/// every user of Redis works with both. Cheap to clone (all variants are
/// multiplexed handles). In cluster mode a command goes to the node of its
/// key's slot; a pipeline must stay within one slot (the fleet's pipelines
/// touch one key, or one request's hash-tagged keys), and MGET is split by
/// slot by the cluster client.
#[derive(Clone)]
pub enum Connection {
    /// Reconnects by itself after a failure.
    Managed(redis::aio::ConnectionManager),
    /// One connection; for blocking commands (BLPOP), which must not share a
    /// connection with other callers.
    Plain(redis::aio::MultiplexedConnection),
    /// Routes by slot; reconnects to nodes and refreshes slots by itself.
    Cluster(redis::cluster_async::ClusterConnection),
}

impl redis::aio::ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Managed(c) => c.req_packed_command(cmd),
            Self::Plain(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Managed(c) => c.req_packed_commands(cmd, offset, count),
            Self::Plain(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Managed(c) => c.get_db(),
            Self::Plain(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// Where the fleet's Redis is: a client for one server, or for a cluster.
#[derive(Clone)]
// A few per process, made once: their size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum RedisTarget {
    Server(redis::Client),
    Cluster(redis::cluster::ClusterClient),
}

impl RedisTarget {
    /// A connection that reconnects by itself, each (re)connect bounded by
    /// `connect` and each reply by `respond`: a Redis that does not answer
    /// costs a caller at most that long, never a hang.
    pub async fn managed(&self, connect: Duration, respond: Duration) -> Result<Connection, redis::RedisError> {
        match self {
            Self::Server(client) => {
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(connect))
                    .set_response_timeout(Some(respond));
                Ok(Connection::Managed(redis::aio::ConnectionManager::new_with_config(client.clone(), config).await?))
            }
            Self::Cluster(_) => self.connection(connect, Some(respond)).await,
        }
    }

    /// A connection of its own. `respond: None` for blocking commands, whose
    /// reply may take as long as their own timeout.
    pub async fn connection(
        &self,
        connect: Duration,
        respond: Option<Duration>,
    ) -> Result<Connection, redis::RedisError> {
        match self {
            Self::Server(client) => {
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(connect))
                    .set_response_timeout(respond);
                Ok(Connection::Plain(client.get_multiplexed_async_connection_with_config(&config).await?))
            }
            Self::Cluster(client) => {
                let mut config = redis::cluster::ClusterConfig::new().set_connection_timeout(connect);
                if let Some(respond) = respond {
                    config = config.set_response_timeout(respond);
                }
                Ok(Connection::Cluster(client.get_async_connection_with_config(config).await?))
            }
        }
    }
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
    /// The URL names Redis Cluster seed nodes (comma-separated URLs); keys
    /// are routed by slot.
    #[arg(long, env = "FLEET_REDIS_CLUSTER")]
    pub redis_cluster: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum RedisConfigError {
    #[error("reading {what} {path}: {source}")]
    Read { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{setting} is set, but {url} is not a rediss:// (TLS) URL")]
    TlsFileWithoutTls { setting: &'static str, url: String },
    #[error("Redis URL {url}: {source}")]
    Client { url: String, source: redis::RedisError },
    #[error("{setting} is not supported with --redis-cluster (a cluster over TLS trusts the system's roots)")]
    ClusterTlsFile { setting: &'static str },
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact(&self.url))
            .field("redis_ca_file", &self.redis_ca_file)
            .field("redis_client_cert", &self.redis_client_cert)
            .field("redis_client_key", &self.redis_client_key)
            .field("redis_cluster", &self.redis_cluster)
            .finish()
    }
}

impl RedisConfig {
    /// A URL alone: plain, or TLS trusting the system's roots.
    pub fn url(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            redis_ca_file: None,
            redis_client_cert: None,
            redis_client_key: None,
            redis_cluster: false,
        }
    }

    /// Seed node URLs of a Redis Cluster.
    pub fn cluster(seeds: &[String]) -> Self {
        Self { redis_cluster: true, ..Self::url(seeds.join(",")) }
    }

    pub fn is_tls(&self) -> bool {
        self.url.starts_with("rediss://")
    }

    /// The URL with any password replaced by `***`, for logs and errors.
    pub fn redacted_url(&self) -> String {
        self.url.split(',').map(redact).collect::<Vec<_>>().join(",")
    }

    /// The flag of the first TLS file setting given, if any.
    fn first_tls_file_setting(&self) -> Option<&'static str> {
        [
            ("--redis-ca-file", &self.redis_ca_file),
            ("--redis-client-cert", &self.redis_client_cert),
            ("--redis-client-key", &self.redis_client_key),
        ]
        .into_iter()
        .find_map(|(setting, path)| path.is_some().then_some(setting))
    }

    /// One server or a cluster, as configured.
    pub fn target(&self) -> Result<RedisTarget, RedisConfigError> {
        if !self.redis_cluster {
            return self.client().map(RedisTarget::Server);
        }
        if let Some(setting) = self.first_tls_file_setting() {
            return Err(RedisConfigError::ClusterTlsFile { setting });
        }
        let seeds: Vec<&str> = self.url.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
        redis::cluster::ClusterClientBuilder::new(seeds)
            .build()
            .map(RedisTarget::Cluster)
            .map_err(|source| RedisConfigError::Client { url: self.redacted_url(), source })
    }

    /// A client for one server (of a cluster: the first seed alone). Reads the certificate files now, so a
    /// missing file fails the start instead of the first request.
    pub fn client(&self) -> Result<redis::Client, RedisConfigError> {
        let client_error = |source| RedisConfigError::Client { url: self.redacted_url(), source };
        let url = self.url.split(',').next().unwrap_or_default().trim();
        if !self.is_tls() {
            if let Some(setting) = self.first_tls_file_setting() {
                return Err(RedisConfigError::TlsFileWithoutTls { setting, url: self.redacted_url() });
            }
            return redis::Client::open(url).map_err(client_error);
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
            return redis::Client::open(url).map_err(client_error);
        }
        redis::Client::build_with_tls(url, redis::TlsCertificates { client_tls, root_cert }).map_err(client_error)
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
        let cluster = RedisConfig::cluster(&["redis://u:pw@a:1".into(), "redis://u:pw@b:2".into()]);
        assert_eq!(cluster.redacted_url(), "redis://u:***@a:1,redis://u:***@b:2");
        assert!(matches!(cluster.target(), Ok(RedisTarget::Cluster(_))));
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
