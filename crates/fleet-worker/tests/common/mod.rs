//! Real servers for integration tests: a nisshi broker and a redis-server on
//! free ports, and the real `fleet-worker` binary on the real model. Each is
//! stopped when its handle drops.

#![allow(dead_code)]

use fleet_producer::topics::{ensure_topics, TopicSettings};
use fleet_producer::KafkaConfig;
use fleet_proto::ModelName;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("no free port")
}

fn wait_for_port(port: u16, what: &str, child: &mut Child) {
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

fn log_file(name: &str) -> std::fs::File {
    let dir = std::env::temp_dir().join("fleet-test-logs");
    std::fs::create_dir_all(&dir).expect("log dir");
    std::fs::File::create(dir.join(format!("{name}-{}.log", std::process::id()))).expect("log file")
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub struct Broker {
    _process: Killed,
    pub addr: String,
}

impl Broker {
    pub fn start() -> Self {
        let bin = std::env::var("FLEET_NISSHI_BIN").unwrap_or_else(|_| "nisshi".into());
        let port = free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let mut child = Command::new(&bin)
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://nisshi/"])
            .stdout(Stdio::null())
            .stderr(log_file(&format!("nisshi-{port}")))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {bin} (run make setup): {e}"));
        wait_for_port(port, "nisshi", &mut child);
        Self { _process: Killed(child), addr: format!("127.0.0.1:{port}") }
    }

    pub fn kafka(&self) -> KafkaConfig {
        KafkaConfig::new(self.addr.clone())
    }

    pub async fn create_topics(&self, model: &ModelName, partitions: i32) {
        let settings = TopicSettings { partitions, ..TopicSettings::default() };
        ensure_topics(&self.kafka(), model, settings).await.expect("creating topics");
    }
}

pub struct Redis {
    _process: Killed,
    pub port: u16,
}

impl Redis {
    pub fn start() -> Self {
        Self::start_with_config("")
    }

    /// With extra redis.conf lines (ACL users, for instance).
    pub fn start_with_config(extra: &str) -> Self {
        let port = free_port();
        let conf = std::env::temp_dir().join(format!("fleet-redis-{port}.conf"));
        let body = format!("port {port}\nbind 127.0.0.1\nsave \"\"\nappendonly no\n{extra}\n");
        std::fs::write(&conf, body).expect("redis.conf");
        let mut child = Command::new("redis-server")
            .arg(&conf)
            .stdout(Stdio::null())
            .spawn()
            .expect("starting redis-server (run make setup)");
        wait_for_port(port, "redis-server", &mut child);
        Self { _process: Killed(child), port }
    }

    /// SIGSTOP / SIGCONT: Redis keeps its connections and data but stops
    /// answering, the hard kind of outage (timeouts, not refusals).
    pub fn freeze(&self) {
        signal(self._process.0.id(), "-STOP");
    }

    pub fn thaw(&self) {
        signal(self._process.0.id(), "-CONT");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url()).unwrap().get_multiplexed_async_connection().await.expect("redis connection")
    }
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill").args([sig, &pid.to_string()]).status().expect("kill");
    assert!(status.success(), "kill {sig} {pid}");
}

pub fn model_repo() -> PathBuf {
    std::env::var_os("FLEET_MODEL_REPO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models"))
}

pub struct Worker {
    process: Option<Child>,
    pub metrics: SocketAddr,
}

impl Worker {
    pub fn start(model: &str, broker: &Broker, redis: &Redis, extra: &[&str]) -> Self {
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_fleet-worker"))
            .args(["--model", model, "--brokers", &broker.addr])
            // Defaults, unless the test gives its own.
            .args(if extra.contains(&"--redis") { vec![] } else { vec!["--redis".to_owned(), redis.url()] })
            .args(if extra.contains(&"--model-repo") { vec![] } else { vec!["--model-repo".into(), model_repo()] })
            .args(["--metrics-addr", &metrics.to_string()])
            .args(extra)
            .env("RUST_LOG", "info,librdkafka=warn")
            .stdout(Stdio::null())
            .stderr(log_file(&format!("worker-{model}-{}", metrics.port())))
            .spawn()
            .expect("starting fleet-worker");
        Self { process: Some(child), metrics }
    }

    /// The worker's /metrics text.
    pub async fn scrape(&self) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = match tokio::net::TcpStream::connect(self.metrics).await {
            Ok(stream) => stream,
            Err(_) => return String::new(), // not listening yet
        };
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").await.unwrap();
        let mut body = String::new();
        stream.read_to_string(&mut body).await.unwrap();
        body
    }

    pub fn pid(&self) -> u32 {
        self.process.as_ref().expect("worker stopped").id()
    }

    /// A field of /proc/<pid>/status in KiB (VmRSS, VmHWM).
    pub fn memory_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).expect("worker status");
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .expect("memory field")
    }

    /// SIGKILL: no drain, no commit.
    pub fn kill(&mut self) {
        let mut child = self.process.take().expect("worker already stopped");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Waits until the worker's scrape shows `metric{labels} >= at_least`.
    pub async fn wait_for_metric(&self, name: &str, labels: &[(&str, &str)], at_least: f64, timeout: Duration) -> f64 {
        let deadline = Instant::now() + timeout;
        loop {
            let value = metric_value(&self.scrape().await, name, labels);
            if value >= at_least || Instant::now() > deadline {
                return value;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, then wait: the worker drains and commits before it exits.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.process.take().expect("worker already stopped");
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        child.wait().expect("worker wait")
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Sums the samples of a counter whose label set contains every `labels` pair.
pub fn metric_value(scrape: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Integration tests each run a worker; two at once would fight over the two
/// cores and slow both. They take this lock.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Polls until the group's committed offset of every partition of `topic`
/// equals the partition's high watermark; returns the last (committed, high)
/// pairs seen either way, for the assertion message.
pub async fn wait_for_commits_at_end(broker: &Broker, group: &str, topic: &str, partitions: i32) -> Vec<(i64, i64)> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{Offset, TopicPartitionList};
    let consumer: BaseConsumer = broker.kafka().client_config().set("group.id", group).create().expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let committed = consumer.committed_offsets(tpl.clone(), Duration::from_secs(5)).expect("committed offsets");
        let pairs: Vec<(i64, i64)> = (0..partitions)
            .map(|p| {
                let c = match committed.find_partition(topic, p).map(|e| e.offset()) {
                    Some(Offset::Offset(o)) => o,
                    _ => -1,
                };
                let (_, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(5)).expect("watermarks");
                (c, high)
            })
            .collect();
        if pairs.iter().all(|(c, h)| c == h) || Instant::now() > deadline {
            return pairs;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Sends `texts` as requests `<prefix>-<n>` with many in flight; returns the ids.
pub async fn send_texts(
    broker: &Broker,
    model: &ModelName,
    prefix: &str,
    texts: &[String],
    deadline_ms: Option<u64>,
) -> Vec<fleet_proto::RequestId> {
    let producer = fleet_producer::FleetProducer::new(&broker.kafka(), "tests").unwrap();
    let mut ids = Vec::new();
    let mut pending = Vec::new();
    for (i, text) in texts.iter().enumerate() {
        let id = fleet_proto::RequestId::parse(&format!("{prefix}-{i}")).unwrap();
        let mut request = fleet_producer::Request::text(id.clone(), text.clone());
        request.deadline_ms = deadline_ms;
        pending.push(producer.send(model, &request).await.unwrap());
        ids.push(id);
    }
    for delivered in futures::future::join_all(pending).await {
        delivered.expect("delivery");
    }
    ids
}

/// The demo corpus: real sentences.
pub fn sentences() -> Vec<String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/demo-sentences.txt");
    std::fs::read_to_string(path).unwrap().lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect()
}

/// Waits for every id's answer; asserts each has exactly one answer field
/// and returns the status counts. The waits run together: an answer lives
/// only `result_ttl_s`, so waiting for one id after another could look for
/// an early answer after it has expired. Every wait starts at once (each
/// holds its own Redis connection) for the same reason.
pub async fn ledger(
    redis: &Redis,
    model: &ModelName,
    ids: &[fleet_proto::RequestId],
    timeout: Duration,
) -> std::collections::BTreeMap<String, usize> {
    use futures::StreamExt;
    use redis::AsyncCommands;
    let results = fleet_producer::ResultClient::connect(&redis.url()).await.unwrap();
    let conn = redis.connection().await;
    let statuses: Vec<String> = futures::stream::iter(ids)
        .map(|id| {
            let (results, mut conn) = (&results, conn.clone());
            async move {
                let answers =
                    results.wait(id, std::slice::from_ref(model), timeout).await.unwrap_or_else(|e| panic!("{e}"));
                let fields: usize = conn.hlen(fleet_proto::keys::result_key(id)).await.unwrap();
                assert_eq!(fields, 1, "{id} has {fields} answer fields");
                answers[model.as_str()].status.as_str().to_owned()
            }
        })
        .buffer_unordered(ids.len().max(1))
        .collect()
        .await;
    let mut counts = std::collections::BTreeMap::new();
    for status in statuses {
        *counts.entry(status).or_insert(0) += 1;
    }
    counts
}
