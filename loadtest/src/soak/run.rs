//! The soak's fleet, load, faults and sampler, all on this machine: a
//! durable broker (PostgreSQL storage, so a restart loses nothing), Redis,
//! one text worker and one image worker (the real binary, each on a model
//! repository of the soak's own, where new versions are published), a
//! second text worker that joins and leaves, and two open-loop loads (texts
//! and real photos) at a share of the capacity measured first.
//!
//! Four things run at once: the two loads (runner), the faults at their
//! planned times, and a sampler that reads every live worker's /metrics
//! every interval. A fault that cannot be injected is noted, never the end
//! of the soak: the report says what happened.
//!
//! [`run_staging`] soaks a fleet that runs elsewhere (staging): the load
//! goes to its brokers under its names, its workers' /metrics are read at
//! the addresses given, and each fault is a command the operator names
//! (`kubectl delete pod …`); a fault without one is left out.

use super::samples::Sample;
use super::schedule::{Fault, Planned};
use crate::fleet::{Binaries, LocalWorker};
use crate::lanes_bench::throughput;
use crate::profile::Profile;
use crate::runner::{self, ImageInput, RunConfig, RunOutcome};
use anyhow::{bail, Context, Result};
use fleet_proto::{ContentType, ModelName};
use fleet_testkit::{http_get, Broker, PostgresDatabase, Redis, Storage};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

pub const TEXT_MODEL: &str = "minilm";
pub const IMAGE_MODEL: &str = "efficientnet_lite0";
/// The first workers, started before the load: the soak's baseline.
const INITIAL_WORKERS: [&str; 2] = ["text-1", "image-1"];

/// What every soak offers and how it watches, on a fleet started here or
/// a running one.
pub struct SoakLoad {
    /// Sentences the texts are made of.
    pub corpus: Vec<String>,
    pub images: Vec<ImageInput>,
    pub duration: Duration,
    pub plan: Vec<Planned>,
    /// How many times the offered rates inside a planned burst.
    pub burst_factor: f64,
    pub sample_every: Duration,
    pub seed: u64,
    /// Where each sample is appended as it is taken (CSV), so a soak cut
    /// short (Ctrl-C, a lost session) keeps what it saw; `None`: only in
    /// memory, for the report.
    pub samples_file: Option<PathBuf>,
}

impl SoakLoad {
    /// Open-loop arrival times at `rate`, the plan's bursts included.
    fn arrivals(&self, rate: f64, seed: u64) -> Vec<f64> {
        let duration_s = self.duration.as_secs_f64();
        super::schedule::arrivals(rate, self.burst_factor, &self.plan, duration_s, seed, usize::MAX)
    }
}

pub struct SoakConfig {
    /// The worker binary and the shipped models (copied into `work_dir`).
    pub binaries: Binaries,
    pub load: SoakLoad,
    /// The offered rates as a share of each worker's measured capacity.
    pub capacity_fraction: f64,
    /// Texts and images per second offered instead, whatever the capacity
    /// measured: a rerun offers the load of an earlier run (this host's
    /// speed moves by 2× from one day to the next, and the fraction with it).
    pub fixed_rates: Option<(f64, f64)>,
    pub partitions: i32,
    pub worker_args: Vec<String>,
    /// Sent at once to measure each worker's capacity.
    pub capacity_texts: usize,
    pub capacity_images: usize,
    /// Where the soak's model repository is made.
    pub work_dir: PathBuf,
}

/// A fault as it was injected.
#[derive(Debug, Clone, PartialEq)]
pub struct Injected {
    pub planned: Planned,
    /// When it began, seconds from the start of the load (a burst: when the
    /// arrivals planned it).
    pub at_s: f64,
    /// When it was over: its injection returned (a joiner ready and owning
    /// partitions, the broker listening again).
    pub ended_s: f64,
    /// What was done, or why it could not be.
    pub note: String,
    pub failed: bool,
}

pub struct SoakOutcome {
    pub text_model: String,
    pub image_model: String,
    /// Texts and images per second each worker answered alone (measured
    /// on a fleet started here only).
    pub text_capacity: Option<f64>,
    pub image_capacity: Option<f64>,
    pub text_rate: f64,
    pub image_rate: f64,
    pub texts: RunOutcome,
    pub images: RunOutcome,
    pub samples: Vec<Sample>,
    pub faults: Vec<Injected>,
    /// Workers whose process ended without being asked to, or that stopped
    /// answering /metrics.
    pub deaths: Vec<String>,
    /// The workers that ran before the load began.
    pub initial_workers: Vec<String>,
}

impl Injected {
    /// The fault as it happened: its actual start and length.
    pub fn as_happened(&self) -> Planned {
        Planned { at_s: self.at_s, lasts_s: (self.ended_s - self.at_s).max(0.0), ..self.planned }
    }
}

/// Seconds to keep collecting answers after the last send: past the
/// default request TTL (30 s), so every request has ended one way.
const DRAIN: Duration = Duration::from_secs(90);

pub async fn run(config: SoakConfig) -> Result<SoakOutcome> {
    let load = &config.load;
    if load.images.is_empty() {
        bail!("a soak needs at least one image");
    }
    let (text_model, image_model) = (ModelName::parse(TEXT_MODEL)?, ModelName::parse(IMAGE_MODEL)?);
    let repo = SoakRepo::create(&config.work_dir, &config.binaries.model_repo)?;
    let database = PostgresDatabase::create("fleet_soak");
    let broker = Broker::start_with(Storage::Postgres { url: database.url() });
    let redis = Redis::start();
    for model in [&text_model, &image_model] {
        broker.create_topics(model, config.partitions).await;
    }
    let starter = Starter {
        binaries: Binaries { model_repo: repo.root.clone(), ..config.binaries.clone() },
        brokers: broker.addr.clone(),
        redis: redis.url(),
        args: config.worker_args.clone(),
    };
    let roster = Roster::default();
    let [text_worker, image_worker] = INITIAL_WORKERS;
    roster.add(text_worker, starter.start(TEXT_MODEL).await?);
    roster.add(image_worker, starter.start(IMAGE_MODEL).await?);

    // Capacity, each worker alone (and warm after it).
    let run_id = format!("{}-{}", std::process::id(), unix_s());
    let local = |model: &ModelName, rate: f64, duration: Duration, run_id: String| {
        RunConfig::on_local_fleet(
            &broker,
            &redis.url(),
            model,
            Profile::Steady { rate },
            duration,
            &load.corpus,
            run_id,
        )
    };
    let burst = |model: &ModelName, count: usize, images: Vec<ImageInput>, run_id: String| -> Result<RunConfig> {
        // All within the first few milliseconds; every answer waited for.
        let config = local(model, count as f64 * 100.0, Duration::from_secs(1), run_id)?;
        Ok(RunConfig { max_requests: count, drain: Duration::from_secs(600), images, seed: 1, ..config })
    };
    let text_burst =
        runner::run(burst(&text_model, config.capacity_texts, Vec::new(), format!("soak-cap-t-{run_id}"))?).await?;
    let text_capacity = throughput(&text_burst.records).context("the text capacity burst measured no rate")?;
    let image_burst =
        runner::run(burst(&image_model, config.capacity_images, load.images.clone(), format!("soak-cap-i-{run_id}"))?)
            .await?;
    let image_capacity = throughput(&image_burst.records).context("the image capacity burst measured no rate")?;
    let (text_rate, image_rate) = config
        .fixed_rates
        .unwrap_or((text_capacity * config.capacity_fraction, image_capacity * config.capacity_fraction));
    tracing::info!(text_capacity, image_capacity, text_rate, image_rate, "capacity measured; the soak begins");

    let texts = RunConfig {
        arrivals: Some(load.arrivals(text_rate, load.seed)),
        drain: DRAIN,
        seed: load.seed,
        ..local(&text_model, text_rate, load.duration, format!("soak-t-{run_id}"))?
    };
    let images = RunConfig {
        arrivals: Some(load.arrivals(image_rate, load.seed + 1)),
        images: load.images.clone(),
        drain: DRAIN,
        seed: load.seed + 1,
        ..local(&image_model, image_rate, load.duration, format!("soak-i-{run_id}"))?
    };

    let samples = Samples::new(load.samples_file.as_deref())?;
    let start = Instant::now();
    let mut faults = Faults {
        start,
        roster: &roster,
        starter: &starter,
        repo: &repo,
        samples: &samples,
        burst_factor: load.burst_factor,
        broker: Some(broker),
        redis: &redis,
        joiners: 0,
        joiner: None,
    };
    let (texts, images, injected, deaths) =
        soak_while_loaded(texts, images, load, start, &mut faults, &roster, &samples).await;
    let (texts, images) = (texts?, images?);
    // The last look at every worker, then each drains and leaves.
    let mut deaths = deaths;
    deaths.extend(sample_once(&roster, &samples, start).await.0);
    for (name, mut worker) in roster.take_all() {
        if let Err(e) = tokio::task::spawn_blocking(move || worker.stop()).await? {
            tracing::warn!(worker = name, error = %e, "a worker did not stop cleanly");
        }
    }
    // The broker lets go of its database before the database goes.
    drop(faults);
    drop(database);
    let samples = samples.take();
    Ok(SoakOutcome {
        text_model: TEXT_MODEL.to_owned(),
        image_model: IMAGE_MODEL.to_owned(),
        text_capacity: Some(text_capacity),
        image_capacity: Some(image_capacity),
        text_rate,
        image_rate,
        texts,
        images,
        samples,
        faults: injected,
        deaths,
        initial_workers: INITIAL_WORKERS.map(str::to_owned).to_vec(),
    })
}

/// Reads the shipped photos a soak sends (PNG, JPEG, WebP), in name order.
pub fn read_images(dir: &Path) -> Result<Vec<ImageInput>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| Some(entry.ok()?.path()))
        .collect();
    paths.sort();
    let mut images = Vec::new();
    for path in paths {
        let mime = match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
            Some("png") => "image/png",
            Some("jpg" | "jpeg") => "image/jpeg",
            Some("webp") => "image/webp",
            _ => continue,
        };
        let content_type = ContentType::parse(mime).context("an image content type")?;
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        images.push(ImageInput { content_type, bytes: Arc::new(bytes) });
    }
    Ok(images)
}

/// The soak's model repository: the text model's config and version 1
/// (linked to the shipped export), to which versions are published while
/// it runs, and the image model as shipped.
pub struct SoakRepo {
    pub root: PathBuf,
    shipped: PathBuf,
    next_version: Mutex<u64>,
}

impl SoakRepo {
    fn create(work_dir: &Path, shipped: &Path) -> Result<Self> {
        let shipped = shipped.canonicalize().with_context(|| format!("{} (run make setup)", shipped.display()))?;
        let root = work_dir.join("models");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join(TEXT_MODEL))?;
        std::fs::copy(shipped.join(TEXT_MODEL).join("config.toml"), root.join(TEXT_MODEL).join("config.toml"))?;
        std::os::unix::fs::symlink(shipped.join(TEXT_MODEL).join("1"), root.join(TEXT_MODEL).join("1"))?;
        std::os::unix::fs::symlink(shipped.join(IMAGE_MODEL), root.join(IMAGE_MODEL))?;
        Ok(Self { root, shipped, next_version: Mutex::new(2) })
    }

    fn take_version(&self) -> u64 {
        let mut next = self.next_version.lock().unwrap_or_else(|p| p.into_inner());
        *next += 1;
        *next - 1
    }

    /// A new version of the text model, the same export: loaded, warmed up
    /// and swapped in by every text worker.
    fn publish_good(&self) -> Result<u64> {
        let version = self.take_version();
        let source = self.shipped.join(TEXT_MODEL).join("1");
        std::os::unix::fs::symlink(source, self.root.join(TEXT_MODEL).join(version.to_string()))?;
        Ok(version)
    }

    /// A new version whose model.pt is not a TorchScript archive: every
    /// worker must refuse it and keep serving the version it has.
    fn publish_broken(&self) -> Result<u64> {
        let version = self.take_version();
        let dir = self.root.join(TEXT_MODEL).join(version.to_string());
        std::fs::create_dir_all(&dir)?;
        std::fs::copy(self.shipped.join(TEXT_MODEL).join("1/tokenizer.json"), dir.join("tokenizer.json"))?;
        std::fs::write(dir.join("model.pt"), b"not a TorchScript archive")?;
        Ok(version)
    }
}

/// What starting a worker takes.
struct Starter {
    binaries: Binaries,
    brokers: String,
    redis: String,
    args: Vec<String>,
}

impl Starter {
    /// A worker of `model`, ready; new versions are looked for every 2 s.
    async fn start(&self, model: &'static str) -> Result<LocalWorker> {
        let (binaries, brokers, redis) = (self.binaries.clone(), self.brokers.clone(), self.redis.clone());
        let mut args = self.args.clone();
        args.extend(["--model-poll-interval".to_owned(), "2s".to_owned()]);
        tokio::task::spawn_blocking(move || {
            let extra: Vec<&str> = args.iter().map(String::as_str).collect();
            LocalWorker::start(&binaries, model, &brokers, &redis, &extra)
        })
        .await?
    }
}

/// The workers running now, by name.
#[derive(Default)]
struct Roster(Mutex<Vec<(String, LocalWorker)>>);

impl Roster {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, LocalWorker)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add(&self, name: &str, worker: LocalWorker) {
        self.lock().push((name.to_owned(), worker));
    }

    fn take(&self, name: &str) -> Option<LocalWorker> {
        let mut workers = self.lock();
        let at = workers.iter().position(|(n, _)| n == name)?;
        Some(workers.remove(at).1)
    }

    fn take_all(&self) -> Vec<(String, LocalWorker)> {
        std::mem::take(&mut *self.lock())
    }

    /// Each worker's metrics address; and the names of those whose process
    /// has ended (taken off the roster: nobody asked them to).
    fn addresses_and_deaths(&self) -> (Vec<(String, SocketAddr)>, Vec<String>) {
        let mut workers = self.lock();
        let mut dead = Vec::new();
        workers.retain_mut(|(name, worker)| match worker.exited() {
            Some(status) => {
                tracing::error!(worker = name.as_str(), %status, "a worker's process ended during the soak");
                dead.push(format!("{name} ({status})"));
                false
            }
            None => true,
        });
        (workers.iter().map(|(name, worker)| (name.clone(), worker.metrics)).collect(), dead)
    }
}

/// The workers a sampler reads.
trait Targets {
    /// Each worker's metrics address; and the names of those found dead
    /// since the last call.
    fn now(&self) -> (Vec<(String, SocketAddr)>, Vec<String>);
}

impl Targets for Roster {
    fn now(&self) -> (Vec<(String, SocketAddr)>, Vec<String>) {
        self.addresses_and_deaths()
    }
}

/// A running fleet's workers, at the addresses the operator gave. One that
/// does not answer is simply not sampled: its restart shows in
/// `process_start_time_seconds`.
struct Addresses(Vec<(String, SocketAddr)>);

impl Targets for Addresses {
    fn now(&self) -> (Vec<(String, SocketAddr)>, Vec<String>) {
        (self.0.clone(), Vec::new())
    }
}

/// Every sample taken: in memory for the report, and appended to the
/// soak's samples file as it is taken.
struct Samples(Mutex<SampleLog>);

struct SampleLog {
    taken: Vec<Sample>,
    /// Line-buffered, so each row is on disk once written; dropped (and
    /// said once) if a write fails: the soak goes on in memory.
    file: Option<(PathBuf, std::io::LineWriter<std::fs::File>)>,
}

impl Samples {
    /// Starts the file at `path` (its header now) where there is one.
    fn new(path: Option<&Path>) -> Result<Self> {
        let file = match path {
            Some(path) => {
                use std::io::Write as _;
                let mut file = std::io::LineWriter::new(
                    std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
                );
                writeln!(file, "{}", super::samples::CSV_HEADER)?;
                Some((path.to_owned(), file))
            }
            None => None,
        };
        Ok(Self(Mutex::new(SampleLog { taken: Vec::new(), file })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SampleLog> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, sample: Sample) {
        use std::io::Write as _;
        let mut log = self.lock();
        if let Some((path, file)) = &mut log.file {
            if let Err(e) = writeln!(file, "{}", sample.csv_row()) {
                tracing::warn!(path = %path.display(), error = %e, "samples are kept in memory only from now on");
                log.file = None;
            }
        }
        log.taken.push(sample);
    }

    /// Every sample taken so far, in the order taken.
    fn take(&self) -> Vec<Sample> {
        std::mem::take(&mut self.lock().taken)
    }
}

/// The two loads, the faults at their times and the sampler, at once,
/// until both loads have ended: the loads' outcomes, the faults as
/// injected, and the workers lost.
async fn soak_while_loaded(
    texts: RunConfig,
    images: RunConfig,
    load: &SoakLoad,
    start: Instant,
    injector: &mut impl Injector,
    targets: &impl Targets,
    samples: &Samples,
) -> (Result<RunOutcome>, Result<RunOutcome>, Vec<Injected>, Vec<String>) {
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let loads = async {
        let outcomes = tokio::join!(runner::run(texts), runner::run(images));
        let _ = stop.send(true);
        outcomes
    };
    let ((texts, images), injected, deaths) = tokio::join!(
        loads,
        inject(&load.plan, start, injector),
        sample(targets, samples, start, load.sample_every, stopped)
    );
    (texts, images, injected, deaths)
}

/// Samples in a row a worker may miss before the report names it: a
/// staging worker whose pod died (its port-forward answers nothing) must
/// not simply vanish from the samples.
const SILENT_SAMPLES: u32 = 3;

/// Every `every` until the load ends: one sample of each live worker.
/// Returns the workers that died, or stopped answering for
/// [`SILENT_SAMPLES`] samples in a row.
async fn sample(
    roster: &impl Targets,
    samples: &Samples,
    start: Instant,
    every: Duration,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> Vec<String> {
    let mut deaths = Vec::new();
    let mut missed: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    let mut tick = tokio::time::interval(every);
    // After a stall, one sample, not a catch-up burst.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let (dead, silent) = sample_once(roster, samples, start).await;
                deaths.extend(dead);
                for (name, answered) in silent {
                    let count = missed.entry(name.clone()).or_default();
                    *count = if answered { 0 } else { *count + 1 };
                    if *count == SILENT_SAMPLES {
                        let at_s = start.elapsed().as_secs_f64();
                        deaths.push(format!("{name} did not answer /metrics for {SILENT_SAMPLES} samples (at {at_s:.0} s)"));
                    }
                }
            }
            _ = stopped.changed() => return deaths,
        }
    }
}

/// One sample of each live worker: the names of those found dead, and
/// whether each of the others answered.
async fn sample_once(roster: &impl Targets, samples: &Samples, start: Instant) -> (Vec<String>, Vec<(String, bool)>) {
    let (addresses, dead) = roster.now();
    let mut answered = Vec::with_capacity(addresses.len());
    for (name, addr) in addresses {
        let sample = scrape(&name, addr, start).await;
        answered.push((name, sample.is_some()));
        if let Some(sample) = sample {
            samples.push(sample);
        }
    }
    (dead, answered)
}

/// How long a joiner may take to get partitions once ready.
const JOIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Waits until the worker at `metrics` owns a partition of the
/// interactive lane.
async fn wait_for_partitions(metrics: SocketAddr, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let scrape = tokio::task::spawn_blocking(move || http_get(metrics, "/metrics")).await?;
        let owned = scrape.map_or(0.0, |(_, body)| {
            fleet_testkit::metric_value(&body, "fleet_assigned_partitions", &[("lane", "interactive")])
        });
        if owned > 0.0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("no partition within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A worker's scrape as a sample; `None` while it does not answer (Redis
/// frozen does not stop /metrics, so this is rare and only costs a point).
async fn scrape(name: &str, addr: SocketAddr, start: Instant) -> Option<Sample> {
    let body = tokio::task::spawn_blocking(move || http_get(addr, "/metrics")).await.ok()??;
    (body.0 == 200).then(|| Sample::from_scrape(start.elapsed().as_secs_f64(), name, &body.1))
}

/// Makes one fault.
trait Injector {
    /// What was done, or why it could not be.
    async fn one(&mut self, planned: &Planned) -> Result<String>;
}

/// The faults of a fleet started here.
struct Faults<'a> {
    start: Instant,
    roster: &'a Roster,
    starter: &'a Starter,
    repo: &'a SoakRepo,
    samples: &'a Samples,
    burst_factor: f64,
    /// Owned, so a restart can wait off the runtime; `None` only if a
    /// restart failed.
    broker: Option<Broker>,
    redis: &'a Redis,
    /// Joiners started so far: each has a name of its own (`text-2`,
    /// `text-3`, …), so one process's samples are never another's.
    joiners: usize,
    /// The joiner in the group now.
    joiner: Option<String>,
}

/// Each planned fault at its time; what each did.
async fn inject(plan: &[Planned], start: Instant, injector: &mut impl Injector) -> Vec<Injected> {
    let mut injected = Vec::with_capacity(plan.len());
    for planned in plan {
        tokio::time::sleep_until(start + Duration::from_secs_f64(planned.at_s)).await;
        let at_s = start.elapsed().as_secs_f64();
        tracing::info!(fault = planned.fault.name(), at_s, "fault");
        let (note, failed) = match injector.one(planned).await {
            Ok(note) => (note, false),
            Err(e) => (format!("not injected: {e:#}"), true),
        };
        if failed {
            tracing::error!(fault = planned.fault.name(), note, "a fault could not be injected");
        }
        // A burst is in the arrivals: it happens when they planned it.
        let (at_s, ended_s) = match planned.fault {
            Fault::Burst => (planned.at_s, planned.ends_s()),
            _ => (at_s, start.elapsed().as_secs_f64()),
        };
        injected.push(Injected { planned: *planned, at_s, ended_s, note, failed });
    }
    injected
}

impl Injector for Faults<'_> {
    async fn one(&mut self, planned: &Planned) -> Result<String> {
        let lasts = Duration::from_secs_f64(planned.lasts_s);
        Ok(match planned.fault {
            Fault::MemberJoin => {
                if let Some(joiner) = &self.joiner {
                    bail!("{joiner} is still in the group");
                }
                self.joiners += 1;
                let name = format!("text-{}", self.joiners + 1);
                let worker = self.starter.start(TEXT_MODEL).await?;
                let metrics = worker.metrics;
                self.roster.add(&name, worker);
                self.joiner = Some(name.clone());
                // Over once the group has given it partitions: a leave
                // planned soon after must find a member that served.
                wait_for_partitions(metrics, JOIN_TIMEOUT)
                    .await
                    .with_context(|| format!("{name} started but got no partition"))?;
                format!("{name} started, ready and given partitions (a second {TEXT_MODEL} worker in the group)")
            }
            Fault::MemberLeave => {
                let name = self.joiner.take().context("no joiner in the group")?;
                let mut worker = self.roster.take(&name).with_context(|| format!("{name} is not running"))?;
                // Its counters end with it: the last look first.
                if let Some(sample) = scrape(&name, worker.metrics, self.start).await {
                    self.samples.push(sample);
                }
                tokio::task::spawn_blocking(move || worker.stop()).await??;
                format!("{name} sent SIGTERM: drained and left")
            }
            Fault::ModelSwap => format!("{TEXT_MODEL} version {} published", self.repo.publish_good()?),
            Fault::BrokenModel => {
                format!("{TEXT_MODEL} version {} published with a corrupt model.pt", self.repo.publish_broken()?)
            }
            Fault::BrokerRestart => {
                let mut broker = self.broker.take().context("the broker did not come back from a restart")?;
                broker.kill();
                tokio::time::sleep(lasts).await;
                // Off the runtime: the loads and the sampler go on meanwhile.
                let broker = tokio::task::spawn_blocking(move || {
                    broker.start_again();
                    broker
                })
                .await
                .context("starting the broker again")?;
                self.broker = Some(broker);
                format!("broker killed (SIGKILL), started again after {:.0} s", planned.lasts_s)
            }
            Fault::RedisFreeze => {
                self.redis.freeze();
                tokio::time::sleep(lasts).await;
                self.redis.thaw();
                format!("Redis stopped (SIGSTOP) for {:.0} s", planned.lasts_s)
            }
            // In the arrivals from the start: nothing to do now.
            Fault::Burst => format!("{}x the offered rates for {:.0} s", self.burst_factor, planned.lasts_s),
        })
    }
}

/// A fleet running elsewhere, and how to soak it.
pub struct StagingConfig {
    pub kafka: fleet_producer::KafkaConfig,
    pub redis: fleet_connect::redis::RedisTarget,
    pub names: fleet_proto::Namespace,
    pub text_model: ModelName,
    pub image_model: ModelName,
    /// Its plan already left without the faults that have no command (see
    /// [`FaultCommands::keep`]).
    pub load: SoakLoad,
    pub text_rate: f64,
    pub image_rate: f64,
    /// Each worker's name and metrics address (host:port of its /metrics).
    pub workers: Vec<(String, SocketAddr)>,
    pub commands: FaultCommands,
    /// How long a fault's command may run beyond the fault's own length
    /// before it is killed and the fault counted as not injected.
    pub command_timeout: Duration,
}

/// The operator's command for each fault (run with `sh -c`); the burst
/// needs none: the load makes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultCommands(pub Vec<(Fault, String)>);

impl FaultCommands {
    /// `fault=command`, e.g. `broker-restart=kubectl -n staging delete pod kafka-0`.
    pub fn parse_one(arg: &str) -> Result<(Fault, String), String> {
        let (name, command) = arg.split_once('=').ok_or("expected FAULT=COMMAND")?;
        let fault = Fault::ALL
            .into_iter()
            .find(|f| f.name() == name.trim())
            .ok_or_else(|| format!("unknown fault {name:?}: one of {}", fault_names()))?;
        if fault == Fault::Burst {
            return Err("the burst needs no command: the load makes it".into());
        }
        if command.trim().is_empty() {
            return Err(format!("no command for {name}"));
        }
        Ok((fault, command.trim().to_owned()))
    }

    fn of(&self, fault: Fault) -> Option<&str> {
        self.0.iter().find(|(f, _)| *f == fault).map(|(_, c)| c.as_str())
    }

    /// The planned faults this soak can make: those with a command, and
    /// the bursts.
    pub fn keep(&self, plan: Vec<Planned>) -> Vec<Planned> {
        plan.into_iter().filter(|p| p.fault == Fault::Burst || self.of(p.fault).is_some()).collect()
    }

    /// Runs the fault's command; its status and last line of output are
    /// the note. Lasting faults (a broker restart, a Redis freeze) are the
    /// command's to undo: the soak waits for it to return, for the fault's
    /// length and `timeout` more at most (a hung `kubectl` must not hold
    /// the faults after it); then its shell is killed and the fault is not
    /// injected. The kill undoes nothing the command had started.
    async fn run(&self, planned: &Planned, timeout: Duration) -> Result<String> {
        let command = self.of(planned.fault).with_context(|| format!("no command for {}", planned.fault.name()))?;
        let limit = Duration::from_secs_f64(planned.lasts_s) + timeout;
        let mut shell = tokio::process::Command::new("sh");
        shell
            .args(["-c", command])
            .env("FLEET_SOAK_FAULT", planned.fault.name())
            .env("FLEET_SOAK_FAULT_SECONDS", format!("{:.0}", planned.lasts_s))
            .kill_on_drop(true);
        let output = tokio::time::timeout(limit, shell.output())
            .await
            .map_err(|_| anyhow::anyhow!("`{command}` had not returned after {limit:?}: killed"))?
            .with_context(|| format!("running {command:?}"))?;
        let said = String::from_utf8_lossy(if output.stdout.is_empty() { &output.stderr } else { &output.stdout })
            .lines()
            .last()
            .unwrap_or("")
            .to_owned();
        if !output.status.success() {
            bail!("`{command}` failed ({}): {said}", output.status);
        }
        Ok(format!("`{command}`: {said}"))
    }
}

/// A running fleet's faults: the operator's commands.
struct Commands<'a> {
    commands: &'a FaultCommands,
    burst_factor: f64,
    timeout: Duration,
}

impl Injector for Commands<'_> {
    async fn one(&mut self, planned: &Planned) -> Result<String> {
        if planned.fault == Fault::Burst {
            return Ok(format!("{}x the offered rates for {:.0} s", self.burst_factor, planned.lasts_s));
        }
        self.commands.run(planned, self.timeout).await
    }
}

fn unix_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn fault_names() -> String {
    Fault::ALL.iter().filter(|f| **f != Fault::Burst).map(|f| f.name()).collect::<Vec<_>>().join(", ")
}

/// Soaks a running fleet: its topics, its Redis, its workers' metrics, the
/// operator's fault commands. Nothing is started here.
pub async fn run_staging(config: StagingConfig) -> Result<SoakOutcome> {
    let load = &config.load;
    if load.images.is_empty() {
        bail!("a soak needs at least one image");
    }
    let run_id = format!("{}-{}", std::process::id(), unix_s());
    let offered = |model: &ModelName, rate: f64, seed: u64, run_id: String| RunConfig {
        names: config.names.clone(),
        arrivals: Some(load.arrivals(rate, seed)),
        drain: DRAIN,
        seed,
        ..RunConfig::new(
            config.kafka.clone(),
            config.redis.clone(),
            model.clone(),
            Profile::Steady { rate },
            load.duration,
            load.corpus.clone(),
            run_id,
        )
    };
    let texts = offered(&config.text_model, config.text_rate, load.seed, format!("soak-t-{run_id}"));
    let images = RunConfig {
        images: load.images.clone(),
        ..offered(&config.image_model, config.image_rate, load.seed + 1, format!("soak-i-{run_id}"))
    };
    let targets = Addresses(config.workers.clone());
    let samples = Samples::new(load.samples_file.as_deref())?;
    let start = Instant::now();
    let mut commands =
        Commands { commands: &config.commands, burst_factor: load.burst_factor, timeout: config.command_timeout };
    let (texts, images, injected, deaths) =
        soak_while_loaded(texts, images, load, start, &mut commands, &targets, &samples).await;
    let (_, answered) = sample_once(&targets, &samples, start).await;
    let mut deaths = deaths;
    deaths.extend(
        answered
            .into_iter()
            .filter(|(_, answered)| !answered)
            .map(|(name, _)| format!("{name} did not answer /metrics at the end")),
    );
    let samples = samples.take();
    Ok(SoakOutcome {
        text_model: config.text_model.to_string(),
        image_model: config.image_model.to_string(),
        text_capacity: None,
        image_capacity: None,
        text_rate: config.text_rate,
        image_rate: config.image_rate,
        texts: texts?,
        images: images?,
        samples,
        faults: injected,
        deaths,
        initial_workers: config.workers.iter().map(|(name, _)| name.clone()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_command_names_its_fault_and_the_burst_needs_none() {
        let (fault, command) = FaultCommands::parse_one("broker-restart=kubectl delete pod kafka-0").unwrap();
        assert_eq!((fault, command.as_str()), (Fault::BrokerRestart, "kubectl delete pod kafka-0"));
        assert!(FaultCommands::parse_one("burst=true").unwrap_err().contains("needs no command"));
        assert!(FaultCommands::parse_one("earthquake=true").unwrap_err().contains("unknown fault"));
        assert!(FaultCommands::parse_one("redis-freeze=").is_err());
        assert!(FaultCommands::parse_one("redis-freeze").is_err());
    }

    #[test]
    fn only_faults_with_a_command_and_the_bursts_are_kept() {
        let commands = FaultCommands(vec![(Fault::RedisFreeze, "true".into())]);
        let planned = |fault, at_s| Planned { fault, at_s, lasts_s: 0.0 };
        let kept = commands.keep(vec![
            planned(Fault::MemberJoin, 10.0),
            planned(Fault::RedisFreeze, 20.0),
            planned(Fault::Burst, 30.0),
        ]);
        assert_eq!(kept.iter().map(|p| p.fault).collect::<Vec<_>>(), [Fault::RedisFreeze, Fault::Burst]);
    }

    #[tokio::test]
    async fn a_fault_command_says_what_it_did_and_one_that_hangs_is_killed() {
        let commands = FaultCommands(vec![
            (Fault::RedisFreeze, "echo froze for $FLEET_SOAK_FAULT_SECONDS s".into()),
            (Fault::BrokerRestart, "exec sleep 600".into()),
        ]);
        let planned = |fault, lasts_s| Planned { fault, at_s: 0.0, lasts_s };
        let note = commands.run(&planned(Fault::RedisFreeze, 5.0), Duration::from_secs(60)).await.unwrap();
        assert!(note.ends_with(": froze for 5 s"), "{note}");
        let hung = commands.run(&planned(Fault::BrokerRestart, 0.0), Duration::from_millis(300)).await.unwrap_err();
        assert!(format!("{hung:#}").contains("had not returned"), "{hung:#}");
    }
}
