//! A nisshi broker on a free port, in memory or on PostgreSQL, with the
//! arguments a test needs (TLS, SCRAM): started, killed and started again
//! on the same port, and the fleet's topics made on it as setup makes them.

use crate::process::{free_port, log_file, wait_for_port, Killed};
use fleet_producer::topics::{ensure_topics, TopicSettings};
use fleet_producer::KafkaConfig;
use fleet_proto::{ModelName, Namespace};
use std::process::{Command, Stdio};

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
        let status = Command::new(nisshi_bin())
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
        let bin = nisshi_bin();
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

/// `FLEET_NISSHI_BIN`, else `nisshi` on PATH.
fn nisshi_bin() -> String {
    std::env::var("FLEET_NISSHI_BIN").unwrap_or_else(|_| "nisshi".into())
}
