//! The real `fleet-worker` binary on the real model, beside the broker and
//! Redis of `fleet_testkit`. Each is stopped when its handle drops.

#![allow(dead_code, unused_imports)]

use fleet_proto::{ModelName, Namespace};
pub use fleet_testkit::{free_port, http_get, log_file, metric_value, present_metric_value, signal, Broker, Redis};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn model_repo() -> PathBuf {
    std::env::var_os("FLEET_MODEL_REPO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models"))
}

/// The worker binary under test: this build's, or `FLEET_WORKER_BIN` (to
/// run the same tests against another build, e.g. an older one).
pub fn worker_bin() -> PathBuf {
    std::env::var_os("FLEET_WORKER_BIN")
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_fleet-worker")), PathBuf::from)
}

/// A broker with `infer.minilm` of `partitions` partitions and a minilm
/// worker (with `worker_args`) on `redis`, owning all of them.
pub async fn serving_minilm(partitions: i32, redis: &Redis, worker_args: &[&str]) -> (Broker, Worker) {
    let broker = Broker::start();
    broker.create_topics(&ModelName::parse("minilm").unwrap(), partitions).await;
    let worker = Worker::start("minilm", &broker, redis, worker_args);
    worker.wait_until_serving(partitions).await;
    (broker, worker)
}

pub struct Worker {
    process: Option<Child>,
    pub metrics: SocketAddr,
}

impl Worker {
    pub fn start(model: &str, broker: &Broker, redis: &Redis, extra: &[&str]) -> Self {
        let metrics = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        Self::start_on(metrics, model, broker, redis, extra)
    }

    /// `extra` names the Redis to use (`--redis` and any TLS settings).
    pub fn start_with_redis_args(model: &str, broker: &Broker, extra: &[&str]) -> Self {
        Self::spawn(model, broker, extra, None)
    }

    /// [`Worker::start`] serving its metrics on `metrics`: an address chosen
    /// beforehand, e.g. one a Prometheus started earlier already scrapes.
    pub fn start_on(metrics: SocketAddr, model: &str, broker: &Broker, redis: &Redis, extra: &[&str]) -> Self {
        let url = redis.url();
        let mut args = extra.to_vec();
        if !extra.contains(&"--redis") {
            args.extend(["--redis", url.as_str()]);
        }
        Self::spawn_on(metrics, model, broker, &args, None)
    }

    /// [`Worker::start`] with `dir` as the worker's working directory.
    pub fn start_in(dir: &std::path::Path, model: &str, broker: &Broker, redis: &Redis, extra: &[&str]) -> Self {
        let url = redis.url();
        let mut args = extra.to_vec();
        args.extend(["--redis", url.as_str()]);
        Self::spawn(model, broker, &args, Some(dir))
    }

    fn spawn(model: &str, broker: &Broker, extra: &[&str], dir: Option<&std::path::Path>) -> Self {
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        Self::spawn_on(metrics, model, broker, extra, dir)
    }

    fn spawn_on(
        metrics: SocketAddr,
        model: &str,
        broker: &Broker,
        extra: &[&str],
        dir: Option<&std::path::Path>,
    ) -> Self {
        let mut command = Command::new(worker_bin());
        if let Some(dir) = dir {
            command.current_dir(dir);
        }
        let child = command
            .args(["--model", model, "--brokers", &broker.addr])
            // The shipped models, unless the test gives its own repository.
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

    /// The worker's /metrics text (empty while it is not listening yet).
    pub async fn scrape(&self) -> String {
        self.get("/metrics").await.map(|(_, body)| body).unwrap_or_default()
    }

    /// GET on the worker's HTTP port: (status, body).
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        let (addr, path) = (self.metrics, path.to_owned());
        tokio::task::spawn_blocking(move || http_get(addr, &path)).await.expect("http get task")
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

    /// Waits for the worker to exit by itself; `None` if it still runs
    /// (`Duration::ZERO`: is it still running now?).
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.process.as_mut().expect("worker stopped").try_wait().expect("try_wait") {
                self.process = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
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

    /// Polls `path` until it answers `want` or `timeout` passes; returns
    /// the last (status, body) either way, for the assertion message.
    pub async fn wait_for_status(&self, path: &str, want: u16, timeout: Duration) -> (u16, String) {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.get(path).await.unwrap_or((0, String::new()));
            if got.0 == want || Instant::now() > deadline {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until the worker is ready and owns `partitions` partitions of
    /// its topic: requests sent after this are read at once, whatever this
    /// machine's speed (a request sent earlier may wait out the model's
    /// warm-up and the group's join).
    pub async fn wait_until_serving(&self, partitions: i32) {
        let (code, body) = self.wait_for_status("/ready", 200, Duration::from_secs(180)).await;
        assert_eq!(code, 200, "the worker never became ready: {body}");
        if !self.scrape().await.contains("fleet_assigned_partitions") {
            // A build from before the gauge (FLEET_WORKER_BIN): ready only.
            eprintln!("the worker under test exports no fleet_assigned_partitions; waited for /ready only");
            return;
        }
        let interactive = [("lane", "interactive")];
        let owned = self
            .wait_for_metric("fleet_assigned_partitions", &interactive, f64::from(partitions), Duration::from_secs(60))
            .await;
        assert_eq!(owned, f64::from(partitions), "the worker owns {owned} of {partitions} interactive partitions");
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

/// Integration tests each run a worker; two at once would fight over the two
/// cores and slow both. They take this lock (an async one: it is held
/// across the test's awaits, and a failed test must not poison it).
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// Polls until the group's committed offset of every partition of `topic`
/// equals the partition's high watermark (an empty partition has nothing
/// to commit: its "none", -1, counts as at the end, and is returned as 0);
/// returns the last (committed, high) pairs seen either way, for the
/// assertion message.
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
                (if high == 0 && c < 0 { 0 } else { c }, high)
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
    send_texts_in(&Namespace::default(), broker, model, prefix, texts, deadline_ms).await
}

/// `send_texts` to the topics of `names`.
pub async fn send_texts_in(
    names: &Namespace,
    broker: &Broker,
    model: &ModelName,
    prefix: &str,
    texts: &[String],
    deadline_ms: Option<u64>,
) -> Vec<fleet_proto::RequestId> {
    let producer = fleet_producer::FleetProducer::new(&broker.kafka(), "tests").unwrap().with_namespace(names.clone());
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

/// How many of `ids` have an answer in Redis now.
pub async fn answered_now(redis: &Redis, ids: &[fleet_proto::RequestId]) -> usize {
    let mut conn = redis.connection().await;
    let mut pipe = redis::pipe();
    for id in ids {
        pipe.exists(Namespace::default().result_key(id));
    }
    let present: Vec<bool> = pipe.query_async(&mut conn).await.unwrap();
    present.into_iter().filter(|&p| p).count()
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
                let fields: usize = conn.hlen(Namespace::default().result_key(id)).await.unwrap();
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
