//! The soak on a fleet started here: a durable broker, Redis, the first
//! text and image workers, each worker's capacity measured alone, then the
//! loads at a share of it while [`super::local_faults`] makes the faults.

use super::local_faults::Faults;
use super::repo::SoakRepo;
use super::sampler::{sample_once, Samples, Targets};
use super::{soak_while_loaded, SoakLoad, SoakOutcome, DRAIN};
use crate::fleet::{Binaries, LocalWorker};
use crate::profile::Profile;
use crate::runner::{self, ImageInput, RunConfig};
use crate::timeline::throughput;
use anyhow::{bail, Context, Result};
use fleet_proto::ModelName;
use fleet_testkit::{Broker, PostgresDatabase, Redis, Storage};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

pub const TEXT_MODEL: &str = "minilm";
pub const IMAGE_MODEL: &str = "efficientnet_lite0";
/// The first workers, started before the load: the soak's baseline.
const INITIAL_WORKERS: [&str; 2] = ["text-1", "image-1"];

pub struct SoakConfig {
    /// The worker binary and the shipped models (copied into `work_dir`).
    pub binaries: Binaries,
    pub load: SoakLoad,
    /// The offered rates as a share of each worker's measured capacity.
    pub capacity_fraction: f64,
    /// Texts and images per second offered instead, whatever the capacity
    /// measured: a rerun offers the load of an earlier run (this host's
    /// speed moves from one day to the next, and the fraction with it: see
    /// docs/soak.md).
    pub fixed_rates: Option<(f64, f64)>,
    pub partitions: i32,
    pub worker_args: Vec<String>,
    /// Sent at once to measure each worker's capacity.
    pub capacity_texts: usize,
    pub capacity_images: usize,
    /// Where the soak's model repository is made.
    pub work_dir: PathBuf,
}

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

    let loads = LocalLoads { broker: &broker, redis_url: redis.url(), load, run_id: super::run_id() };
    let text_capacity = loads.capacity("text", "soak-cap-t", &text_model, config.capacity_texts, Vec::new()).await?;
    let image_capacity =
        loads.capacity("image", "soak-cap-i", &image_model, config.capacity_images, load.images.clone()).await?;
    let (text_rate, image_rate) = config
        .fixed_rates
        .unwrap_or((text_capacity * config.capacity_fraction, image_capacity * config.capacity_fraction));
    tracing::info!(text_capacity, image_capacity, text_rate, image_rate, "capacity measured; the soak begins");
    let texts = loads.offered(&text_model, text_rate, load.seed, Vec::new(), "soak-t")?;
    let images = loads.offered(&image_model, image_rate, load.seed + 1, load.images.clone(), "soak-i")?;

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
    let (texts, images, injected, mut deaths) =
        soak_while_loaded(texts, images, load, start, &mut faults, &roster, &samples).await;
    let (texts, images) = (texts?, images?);
    deaths.extend(last_look_and_stop(&roster, &samples, start).await?);
    // The broker lets go of its database before the database goes.
    drop(faults);
    drop(database);
    Ok(SoakOutcome {
        text_model: TEXT_MODEL.to_owned(),
        image_model: IMAGE_MODEL.to_owned(),
        text_capacity: Some(text_capacity),
        image_capacity: Some(image_capacity),
        text_rate,
        image_rate,
        texts,
        images,
        samples: samples.take(),
        faults: injected,
        deaths,
        initial_workers: INITIAL_WORKERS.map(str::to_owned).to_vec(),
    })
}

/// The runs a soak makes against the fleet started here.
struct LocalLoads<'a> {
    broker: &'a Broker,
    redis_url: String,
    load: &'a SoakLoad,
    /// Unique to this soak ([`super::run_id`]).
    run_id: String,
}

impl LocalLoads<'_> {
    /// A steady run of `rate` for `duration`, its request ids `<name>-<run id>-<n>`.
    fn steady(&self, model: &ModelName, rate: f64, duration: Duration, name: &str) -> Result<RunConfig> {
        let (profile, run_id) = (Profile::Steady { rate }, format!("{name}-{}", self.run_id));
        RunConfig::on_local_fleet(self.broker, &self.redis_url, model, profile, duration, &self.load.corpus, run_id)
    }

    /// A worker's capacity alone (and warm after it): `count` requests
    /// (`images` in turn, or texts) sent at once, `ok` answers per second;
    /// `kind` names it in an error.
    async fn capacity(
        &self,
        kind: &str,
        name: &str,
        model: &ModelName,
        count: usize,
        images: Vec<ImageInput>,
    ) -> Result<f64> {
        // All within the first few milliseconds; every answer waited for.
        let config = self.steady(model, count as f64 * 100.0, Duration::from_secs(1), name)?;
        let config = RunConfig { max_requests: count, drain: Duration::from_secs(600), images, seed: 1, ..config };
        let burst = runner::run(config).await?;
        throughput(&burst.records).with_context(|| format!("the {kind} capacity burst measured no rate"))
    }

    /// One of the soak's two loads: open-loop at `rate` with the plan's
    /// bursts, for the soak's duration.
    fn offered(
        &self,
        model: &ModelName,
        rate: f64,
        seed: u64,
        images: Vec<ImageInput>,
        name: &str,
    ) -> Result<RunConfig> {
        let config = self.steady(model, rate, self.load.duration, name)?;
        Ok(RunConfig { arrivals: Some(self.load.arrivals(rate, seed)), images, drain: DRAIN, seed, ..config })
    }
}

/// The last look at every worker, then each drains and leaves: the deaths
/// that last look found.
async fn last_look_and_stop(roster: &Roster, samples: &Samples, start: Instant) -> Result<Vec<String>> {
    let (dead, _) = sample_once(roster, samples, start).await;
    for (name, mut worker) in roster.take_all() {
        if let Err(e) = tokio::task::spawn_blocking(move || worker.stop()).await? {
            tracing::warn!(worker = name, error = %e, "a worker did not stop cleanly");
        }
    }
    Ok(dead)
}

/// What starting a worker takes.
pub(super) struct Starter {
    binaries: Binaries,
    brokers: String,
    redis: String,
    args: Vec<String>,
}

impl Starter {
    /// A worker of `model`, ready; new versions are looked for every 2 s.
    pub(super) async fn start(&self, model: &str) -> Result<LocalWorker> {
        let mut args = self.args.clone();
        args.extend(["--model-poll-interval".to_owned(), "2s".to_owned()]);
        LocalWorker::start_async(&self.binaries, model, &self.brokers, &self.redis, &args).await
    }
}

/// The workers running now, by name.
#[derive(Default)]
pub(super) struct Roster(Mutex<Vec<(String, LocalWorker)>>);

impl Roster {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, LocalWorker)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn add(&self, name: &str, worker: LocalWorker) {
        self.lock().push((name.to_owned(), worker));
    }

    pub(super) fn take(&self, name: &str) -> Option<LocalWorker> {
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

impl Targets for Roster {
    fn now(&self) -> (Vec<(String, SocketAddr)>, Vec<String>) {
        self.addresses_and_deaths()
    }
}
