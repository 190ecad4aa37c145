//! Real servers for integration tests: a nisshi broker and a redis-server on
//! free ports, each stopped when its handle drops. Shared by every crate
//! whose tests talk to Kafka or Redis, so they all start them the same way.

pub mod answers;
pub mod raw;

use fleet_producer::topics::{ensure_topics, TopicSettings};
use fleet_producer::KafkaConfig;
use fleet_proto::{ModelName, Namespace};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("no free port")
}

/// Waits until something listens on `port`; panics if `child` exits first.
pub fn wait_for_port(port: u16, what: &str, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited with {status} before listening on {port}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on {port} within 20 s");
}

/// A log file under the temp dir's `fleet-test-logs/`, named for this test
/// process so parallel test binaries do not overwrite each other.
pub fn log_file(name: &str) -> std::fs::File {
    let dir = std::env::temp_dir().join("fleet-test-logs");
    std::fs::create_dir_all(&dir).expect("log dir");
    std::fs::File::create(dir.join(format!("{name}-{}.log", std::process::id()))).expect("log file")
}

/// A child process killed (SIGKILL) and reaped when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill").args([sig, &pid.to_string()]).status().expect("kill");
    assert!(status.success(), "kill {sig} {pid}");
}

/// Where a test broker keeps its data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    /// Gone with the process.
    Memory,
    /// A PostgreSQL database (nisshi's postgres engine): survives a restart.
    Postgres { url: String },
}

impl Storage {
    fn engine_url(&self) -> String {
        match self {
            Self::Memory => "memory://nisshi/".to_owned(),
            Self::Postgres { url } => url.clone(),
        }
    }
}

pub struct Broker {
    process: Option<Killed>,
    port: u16,
    storage: Storage,
    /// Further `nisshi broker` arguments (TLS, authentication).
    extra: Vec<String>,
    pub addr: String,
}

impl Broker {
    /// nisshi with in-memory storage (`FLEET_NISSHI_BIN`, else `nisshi` on PATH).
    pub fn start() -> Self {
        Self::start_with(Storage::Memory)
    }

    pub fn start_with(storage: Storage) -> Self {
        let port = free_port();
        let mut broker = Self { process: None, port, storage, extra: Vec::new(), addr: format!("127.0.0.1:{port}") };
        broker.start_again();
        broker
    }

    /// A broker with further arguments, e.g. `--cert`/`--key` (its one
    /// listener then speaks only TLS) or `--authentication` (SCRAM; needs
    /// PostgreSQL storage, where users live).
    pub fn start_secured(storage: Storage, extra: &[&str]) -> Self {
        let port = free_port();
        let extra = extra.iter().map(|a| a.to_string()).collect();
        let mut broker = Self { process: None, port, storage, extra, addr: format!("127.0.0.1:{port}") };
        broker.start_again();
        broker
    }

    /// Restarts the broker with `extra` arguments instead (same port and
    /// storage): users are made on a plain broker, then it restarts with
    /// `--authentication`.
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.kill();
        self.extra = extra.iter().map(|a| a.to_string()).collect();
        self.start_again();
    }

    /// `nisshi user create`: a SCRAM user (mechanism `scram256` or
    /// `scram512`), through this broker while it runs without TLS or
    /// authentication (the tool speaks neither).
    pub fn create_user(&self, mechanism: &str, name: &str, password: &str) {
        let bin = std::env::var("FLEET_NISSHI_BIN").unwrap_or_else(|_| "nisshi".into());
        let status = Command::new(&bin)
            .args([
                "user",
                "create",
                "--broker",
                &format!("tcp://{}", self.addr),
                "--mechanism",
                mechanism,
                name,
                password,
            ])
            .stdout(Stdio::null())
            .stderr(log_file(&format!("nisshi-user-{}", self.port)))
            .status()
            .expect("nisshi user create");
        assert!(status.success(), "nisshi user create failed (log in fleet-test-logs)");
    }

    /// SIGKILL: no goodbye to clients; what the storage keeps survives.
    pub fn kill(&mut self) {
        self.process = None;
    }

    /// Starts the broker (again) on the same port and storage.
    pub fn start_again(&mut self) {
        let bin = std::env::var("FLEET_NISSHI_BIN").unwrap_or_else(|_| "nisshi".into());
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let mut child = Command::new(&bin)
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", &self.storage.engine_url()])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(log_file(&format!("nisshi-{}", self.port)))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {bin} (run make setup): {e}"));
        wait_for_port(self.port, "nisshi", &mut child);
        self.process = Some(Killed(child));
    }

    pub fn kafka(&self) -> KafkaConfig {
        KafkaConfig::new(self.addr.clone())
    }

    /// `infer.<model>` with `partitions` and its DLQ, as setup makes them.
    pub async fn create_topics(&self, model: &ModelName, partitions: i32) {
        self.create_topics_in(&Namespace::default(), model, partitions).await;
    }

    /// The same under the topic prefix of `names`.
    pub async fn create_topics_in(&self, names: &Namespace, model: &ModelName, partitions: i32) {
        let settings = TopicSettings { partitions, ..TopicSettings::default() };
        ensure_topics(&self.kafka(), names, model, settings).await.expect("creating topics");
    }
}

/// A fresh PostgreSQL database for a durable broker, on the local server
/// (`FLEET_POSTGRES_URL`, default postgres://postgres:postgres@127.0.0.1/postgres),
/// dropped when this handle drops. Made with `psql`.
pub struct PostgresDatabase {
    admin_url: String,
    name: String,
}

impl PostgresDatabase {
    pub fn create(prefix: &str) -> Self {
        let admin_url = std::env::var("FLEET_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres:postgres@127.0.0.1/postgres?sslmode=disable".into());
        let name = format!("{prefix}_{}_{}", std::process::id(), free_port());
        let database = Self { admin_url, name };
        database.psql(&format!("CREATE DATABASE {}", database.name));
        database
    }

    /// The URL of this database, for nisshi's `--storage-engine`.
    pub fn url(&self) -> String {
        let (base, query) = self.admin_url.split_once('?').unwrap_or((&self.admin_url, ""));
        let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
        let query = if query.is_empty() { String::new() } else { format!("?{query}") };
        format!("{server}/{}{query}", self.name)
    }

    fn psql(&self, sql: &str) {
        let output = Command::new("psql")
            .args([self.admin_url.as_str(), "-v", "ON_ERROR_STOP=1", "-q", "-c", sql])
            .output()
            .expect("running psql (PostgreSQL client; the drills need a PostgreSQL server on 127.0.0.1:5432)");
        assert!(output.status.success(), "psql {sql}: {}", String::from_utf8_lossy(&output.stderr));
    }
}

impl Drop for PostgresDatabase {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args([self.admin_url.as_str(), "-q", "-c", &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)])
            .output();
    }
}

pub struct Redis {
    process: Option<Killed>,
    pub port: u16,
    extra: String,
}

impl Redis {
    /// The server's pid (for signals).
    pub fn pid(&self) -> u32 {
        self.process.as_ref().expect("redis-server is not running").0.id()
    }
}

impl Redis {
    pub fn start() -> Self {
        Self::start_with_config("")
    }

    /// With extra redis.conf lines (ACL users, for instance).
    pub fn start_with_config(extra: &str) -> Self {
        Self::start_on(free_port(), extra)
    }

    fn start_on(port: u16, extra: &str) -> Self {
        let conf = std::env::temp_dir().join(format!("fleet-redis-{port}.conf"));
        let body = format!("port {port}\nbind 127.0.0.1\nsave \"\"\nappendonly no\n{extra}\n");
        std::fs::write(&conf, body).expect("redis.conf");
        let mut child = Command::new("redis-server")
            .arg(&conf)
            .stdout(Stdio::null())
            .spawn()
            .expect("starting redis-server (run make setup)");
        wait_for_port(port, "redis-server", &mut child);
        Self { process: Some(Killed(child)), port, extra: extra.to_owned() }
    }

    /// A port for a Redis that is not running yet ([`Redis::start_again`]
    /// starts it): a worker may be started against it first.
    pub fn not_started() -> Self {
        Self { process: None, port: free_port(), extra: String::new() }
    }

    /// SIGKILL: no persistence, so everything written is gone.
    pub fn kill(&mut self) {
        self.process = None;
    }

    /// Starts redis-server (again) on the same port, empty.
    pub fn start_again(&mut self) {
        assert!(self.process.is_none(), "redis-server is running");
        let started = Self::start_on(self.port, &self.extra.clone());
        *self = started;
    }

    /// SIGSTOP / SIGCONT: Redis keeps its connections and data but stops
    /// answering, the hard kind of outage (timeouts, not refusals).
    pub fn freeze(&self) {
        signal(self.pid(), "-STOP");
    }

    pub fn thaw(&self) {
        signal(self.pid(), "-CONT");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url()).unwrap().get_multiplexed_async_connection().await.expect("redis connection")
    }
}

/// A Redis Cluster of `masters` redis-server processes on free ports,
/// every slot assigned (`redis-cli --cluster create`, no replicas), as
/// ElastiCache or Memorystore in cluster mode present it.
pub struct RedisCluster {
    pub nodes: Vec<Redis>,
}

impl RedisCluster {
    pub fn start(masters: usize) -> Self {
        let nodes: Vec<Redis> = (0..masters)
            .map(|_| {
                let port = free_port();
                let state = std::env::temp_dir().join(format!("fleet-redis-nodes-{port}.conf"));
                let _ = std::fs::remove_file(&state);
                let extra = format!("cluster-enabled yes\ncluster-config-file {}\n", state.display());
                Redis::start_on(port, &extra)
            })
            .collect();
        let addresses: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("running redis-cli --cluster create (run make setup)");
        assert!(output.status.success(), "redis-cli --cluster create: {}", String::from_utf8_lossy(&output.stdout));
        let cluster = Self { nodes };
        cluster.wait_until_ok();
        cluster
    }

    /// Every node says `cluster_state:ok` (all slots served, gossip settled).
    fn wait_until_ok(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        for node in &self.nodes {
            loop {
                let info = Command::new("redis-cli")
                    .args(["-p", &node.port.to_string(), "cluster", "info"])
                    .output()
                    .expect("redis-cli cluster info");
                if String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok") {
                    break;
                }
                assert!(std::time::Instant::now() < deadline, "the cluster on port {} never became ok", node.port);
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }

    /// One URL per node (any is a seed for the cluster client).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Redis::url).collect()
    }
}

/// Sums the samples of a Prometheus text scrape whose name is `name` and
/// whose label set contains every `labels` pair.
pub fn metric_value(scrape: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// [`metric_value`] of a series that must be there: one the scrape does not
/// have fails the test instead of reading as 0, so an assertion that a value
/// is 0 cannot pass because the series is gone or renamed.
pub fn present_metric_value(scrape: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let present = scrape
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .any(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))));
    assert!(present, "the scrape has no series {name} with {labels:?}");
    metric_value(scrape, name, labels)
}

/// A plain HTTP/1.0 GET on loopback: (status code, body); None when nothing
/// listens yet. Enough for /metrics, /healthz and /ready.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((status, body))
}

/// Throwaway certificates for TLS tests: a CA, a server certificate for
/// 127.0.0.1 and localhost signed by it, and a client certificate for
/// mutual TLS; PEM files in a fresh directory.
pub struct TestCertificates {
    pub dir: std::path::PathBuf,
    pub ca: std::path::PathBuf,
    pub server_cert: std::path::PathBuf,
    pub server_key: std::path::PathBuf,
    pub client_cert: std::path::PathBuf,
    pub client_key: std::path::PathBuf,
}

impl TestCertificates {
    /// `name` keeps the directories of several sets apart.
    pub fn generate(name: &str) -> Self {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
        let dir = std::env::temp_dir().join(format!("fleet-tls-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("certificate dir");
        let write = |file: &str, pem: String| {
            let path = dir.join(file);
            std::fs::write(&path, pem).expect("writing a certificate");
            path
        };

        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.distinguished_name.push(DnType::CommonName, format!("fleet test CA {name}"));
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
        let ca = write("ca.pem", ca_cert.pem());
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf = |common_name: &str, names: Vec<String>| {
            let key = KeyPair::generate().expect("leaf key");
            let mut params = CertificateParams::new(names).expect("leaf params");
            params.distinguished_name.push(DnType::CommonName, common_name);
            let cert = params.signed_by(&key, &issuer).expect("leaf certificate");
            (cert.pem(), key.serialize_pem())
        };
        let (server_pem, server_key_pem) = leaf("fleet test server", vec!["127.0.0.1".into(), "localhost".into()]);
        let (client_pem, client_key_pem) = leaf("fleet test client", vec!["fleet-client".into()]);
        Self {
            ca,
            server_cert: write("server.pem", server_pem),
            server_key: write("server-key.pem", server_key_pem),
            client_cert: write("client.pem", client_pem),
            client_key: write("client-key.pem", client_key_pem),
            dir,
        }
    }
}

impl Redis {
    /// A redis-server that speaks only TLS, and requires client
    /// certificates signed by `certs.ca` (mutual TLS). `url()` is then the
    /// `rediss://` address.
    pub fn start_tls(certs: &TestCertificates) -> TlsRedis {
        let port = free_port();
        let extra = format!(
            "tls-port {port}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\ntls-auth-clients yes\n",
            certs.server_cert.display(),
            certs.server_key.display(),
            certs.ca.display()
        );
        let conf = std::env::temp_dir().join(format!("fleet-redis-tls-{port}.conf"));
        std::fs::write(&conf, format!("port 0\nbind 127.0.0.1\nsave \"\"\nappendonly no\n{extra}"))
            .expect("redis.conf");
        let mut child = Command::new("redis-server")
            .arg(&conf)
            .stdout(Stdio::null())
            .spawn()
            .expect("starting redis-server (run make setup)");
        wait_for_port(port, "redis-server (TLS)", &mut child);
        TlsRedis { _process: Killed(child), port }
    }
}

pub struct TlsRedis {
    _process: Killed,
    pub port: u16,
}

impl TlsRedis {
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }
}
