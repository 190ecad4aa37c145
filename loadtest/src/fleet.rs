//! A fleet on this machine for drills and capacity runs: the real worker
//! binary beside fleet_testkit's broker and Redis. Each process stops when
//! its handle drops.

use anyhow::{bail, Context, Result};
use fleet_testkit::{free_port, http_get, log_file, Killed};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Where the binaries and models are: `FLEET_BIN_DIR` (else beside this
/// executable) for `fleet-worker`, `FLEET_MODEL_REPO` (else `models`).
#[derive(Debug, Clone)]
pub struct Binaries {
    pub worker: PathBuf,
    pub model_repo: PathBuf,
}

impl Binaries {
    pub fn from_env() -> Result<Self> {
        let bin_dir = match std::env::var_os("FLEET_BIN_DIR") {
            Some(dir) => PathBuf::from(dir),
            None => std::env::current_exe()?.parent().context("executable directory")?.to_owned(),
        };
        let worker = bin_dir.join("fleet-worker");
        if !worker.is_file() {
            bail!("no fleet-worker at {} (run make setup, or set FLEET_BIN_DIR)", worker.display());
        }
        let model_repo = std::env::var_os("FLEET_MODEL_REPO").map_or_else(|| PathBuf::from("models"), PathBuf::from);
        Ok(Self { worker, model_repo })
    }
}

pub struct LocalWorker {
    process: Option<Killed>,
    pub metrics: SocketAddr,
    log: String,
}

impl LocalWorker {
    /// Starts `fleet-worker --model <model>` against `brokers` and `redis`,
    /// with `extra` arguments, and waits until `/ready` passes.
    pub fn start(binaries: &Binaries, model: &str, brokers: &str, redis: &str, extra: &[&str]) -> Result<Self> {
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse()?;
        let log = format!("drill-worker-{model}-{}", metrics.port());
        let child = Command::new(&binaries.worker)
            .args(["--model", model, "--brokers", brokers, "--redis", redis])
            .arg("--model-repo")
            .arg(&binaries.model_repo)
            .args(["--metrics-addr", &metrics.to_string()])
            .args(extra)
            .env("RUST_LOG", "info,librdkafka=warn")
            .stdout(Stdio::null())
            .stderr(log_file(&log))
            .spawn()
            .with_context(|| format!("starting {}", binaries.worker.display()))?;
        let mut worker = Self { process: Some(Killed(child)), metrics, log };
        worker.wait_ready(Duration::from_secs(60))?;
        Ok(worker)
    }

    /// [`start`](Self::start) on a blocking thread, so the runtime (a
    /// load, a sampler) goes on while the worker comes up.
    pub async fn start_async(
        binaries: &Binaries,
        model: &str,
        brokers: &str,
        redis: &str,
        extra: &[String],
    ) -> Result<Self> {
        let (binaries, model, brokers, redis) =
            (binaries.clone(), model.to_owned(), brokers.to_owned(), redis.to_owned());
        let extra = extra.to_vec();
        tokio::task::spawn_blocking(move || {
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            Self::start(&binaries, &model, &brokers, &redis, &extra)
        })
        .await?
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((200, _)) = http_get(self.metrics, "/ready") {
                return Ok(());
            }
            if let Some(Killed(child)) = self.process.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    bail!("the worker exited with {status} (log: {})", self.log);
                }
            }
            if Instant::now() > deadline {
                bail!("the worker was not ready within {timeout:?} (log: {})", self.log);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Answers this worker has written (its fleet_requests_total).
    pub fn answers(&self) -> f64 {
        self.metric("fleet_requests_total")
    }

    /// The sum of a metric's series in this worker's scrape (0 if absent).
    pub fn metric(&self, name: &str) -> f64 {
        http_get(self.metrics, "/metrics").map_or(0.0, |(_, body)| fleet_testkit::metric_value(&body, name, &[]))
    }

    /// How the process ended, once it has (`None` while it runs, or after
    /// [`kill`](Self::kill) or [`stop`](Self::stop) took it).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        let Killed(child) = self.process.as_mut()?;
        child.try_wait().ok().flatten()
    }

    /// SIGKILL: no drain, no commit.
    pub fn kill(&mut self) {
        self.process = None;
    }

    /// SIGTERM, and wait for the drain to finish.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut process) = self.process.take() else { return Ok(()) };
        fleet_testkit::signal(process.0.id(), "-TERM");
        let deadline = Instant::now() + Duration::from_secs(40);
        while Instant::now() < deadline {
            if process.0.try_wait()?.is_some() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("the worker did not stop within 40 s of SIGTERM")
    }
}

/// The /metrics body of the worker at `addr`, read on a blocking thread;
/// `None` while it does not answer 200. An error only when that thread
/// could not run.
pub async fn scrape_metrics(addr: SocketAddr) -> Result<Option<String>> {
    let got = tokio::task::spawn_blocking(move || http_get(addr, "/metrics")).await?;
    Ok(got.and_then(|(status, body)| (status == 200).then_some(body)))
}
