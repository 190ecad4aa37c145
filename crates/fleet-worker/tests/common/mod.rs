//! The real `fleet-worker` binary on the real model, beside the broker and
//! Redis of `fleet_testkit`. Each is stopped when its handle drops. What
//! needs no worker (sending requests, reading answers and offsets) lives in
//! `fleet_testkit` and is re-exported here, so a test imports from one place.

#![allow(dead_code, unused_imports)]

use fleet_proto::ModelName;
pub use fleet_testkit::answers::{answers_on, wait_for_answers_on};
pub use fleet_testkit::corpus::{sentences, texts};
pub use fleet_testkit::dlq::{dead_letters, Letter};
pub use fleet_testkit::offsets::{assert_committed_to_the_end, committed_offsets, wait_for_commits_at_end};
pub use fleet_testkit::redis_answers::{answered_now, ledger, statuses, wait_for_answers, wait_for_answers_once};
pub use fleet_testkit::requests::{send_requests, send_texts};
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

/// The shipped text embedder most tests run.
pub fn minilm() -> ModelName {
    ModelName::parse("minilm").unwrap()
}

/// A broker with `infer.minilm` of `partitions` partitions and a minilm
/// worker (with `worker_args`) on `redis`, owning all of them.
pub async fn serving_minilm(partitions: i32, redis: &Redis, worker_args: &[&str]) -> (Broker, Worker) {
    let broker = Broker::start();
    broker.create_topics(&minilm(), partitions).await;
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
