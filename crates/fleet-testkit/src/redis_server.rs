//! redis-server processes on free ports, as the fleet meets Redis: one
//! server (killed, frozen, started again empty), a cluster of masters with
//! every slot assigned, and a server that speaks only mutual TLS.

use crate::process::{free_port, signal, wait_for_port, Killed};
use crate::tls::TestCertificates;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

pub struct Redis {
    process: Option<Killed>,
    pub port: u16,
    extra: String,
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
        let process = run_redis_server(&conf, port, "redis-server");
        Self { process: Some(process), port, extra: extra.to_owned() }
    }

    /// A port for a Redis that is not running yet ([`Redis::start_again`]
    /// starts it): a worker may be started against it first.
    pub fn not_started() -> Self {
        Self { process: None, port: free_port(), extra: String::new() }
    }

    /// The server's pid (for signals).
    pub fn pid(&self) -> u32 {
        self.process.as_ref().expect("redis-server is not running").0.id()
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
        TlsRedis { _process: run_redis_server(&conf, port, "redis-server (TLS)"), port }
    }
}

/// redis-server on `conf`, once it listens on `port`.
fn run_redis_server(conf: &Path, port: u16, what: &str) -> Killed {
    let mut child = Command::new("redis-server")
        .arg(conf)
        .stdout(Stdio::null())
        .spawn()
        .expect("starting redis-server (run make setup)");
    wait_for_port(port, what, &mut child);
    Killed(child)
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
