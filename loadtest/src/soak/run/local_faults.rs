//! The faults of a fleet started here, each made by the soak itself: a
//! member joins and leaves, a model version is swapped in and a broken one
//! published, the broker is killed and started again, Redis is stopped.

use super::inject::{burst_note, Injector};
use super::local::{Roster, Starter, TEXT_MODEL};
use super::repo::SoakRepo;
use super::sampler::{scrape, Samples};
use crate::fleet::scrape_metrics;
use crate::soak::schedule::{Fault, Planned};
use anyhow::{bail, Context, Result};
use fleet_testkit::{Broker, Redis};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::time::Instant;

/// The faults of a fleet started here.
pub(super) struct Faults<'a> {
    pub(super) start: Instant,
    pub(super) roster: &'a Roster,
    pub(super) starter: &'a Starter,
    pub(super) repo: &'a SoakRepo,
    pub(super) samples: &'a Samples,
    pub(super) burst_factor: f64,
    /// Owned, so a restart can wait off the runtime; `None` only if a
    /// restart failed.
    pub(super) broker: Option<Broker>,
    pub(super) redis: &'a Redis,
    /// Joiners started so far: each has a name of its own (`text-2`,
    /// `text-3`, …), so one process's samples are never another's.
    pub(super) joiners: usize,
    /// The joiner in the group now.
    pub(super) joiner: Option<String>,
}

impl Injector for Faults<'_> {
    async fn one(&mut self, planned: &Planned) -> Result<String> {
        let lasts = Duration::from_secs_f64(planned.lasts_s);
        Ok(match planned.fault {
            Fault::MemberJoin => self.join().await?,
            Fault::MemberLeave => self.leave().await?,
            Fault::ModelSwap => format!("{TEXT_MODEL} version {} published", self.repo.publish_good()?),
            Fault::BrokenModel => {
                format!("{TEXT_MODEL} version {} published with a corrupt model.pt", self.repo.publish_broken()?)
            }
            Fault::BrokerRestart => {
                self.restart_broker(lasts).await?;
                format!("broker killed (SIGKILL), started again after {:.0} s", planned.lasts_s)
            }
            Fault::RedisFreeze => {
                self.redis.freeze();
                tokio::time::sleep(lasts).await;
                self.redis.thaw();
                format!("Redis stopped (SIGSTOP) for {:.0} s", planned.lasts_s)
            }
            // In the arrivals from the start: nothing to do now.
            Fault::Burst => burst_note(self.burst_factor, planned),
        })
    }
}

impl Faults<'_> {
    /// A second text worker joins the group, under a name of its own.
    async fn join(&mut self) -> Result<String> {
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
        Ok(format!("{name} started, ready and given partitions (a second {TEXT_MODEL} worker in the group)"))
    }

    /// The joiner drains and leaves (SIGTERM).
    async fn leave(&mut self) -> Result<String> {
        let name = self.joiner.take().context("no joiner in the group")?;
        let mut worker = self.roster.take(&name).with_context(|| format!("{name} is not running"))?;
        // Its counters end with it: the last look first.
        if let Some(sample) = scrape(&name, worker.metrics, self.start).await {
            self.samples.push(sample);
        }
        tokio::task::spawn_blocking(move || worker.stop()).await??;
        Ok(format!("{name} sent SIGTERM: drained and left"))
    }

    /// The broker killed (SIGKILL), started again after `down`.
    async fn restart_broker(&mut self, down: Duration) -> Result<()> {
        let mut broker = self.broker.take().context("the broker did not come back from a restart")?;
        broker.kill();
        tokio::time::sleep(down).await;
        // Off the runtime: the loads and the sampler go on meanwhile.
        let broker = tokio::task::spawn_blocking(move || {
            broker.start_again();
            broker
        })
        .await
        .context("starting the broker again")?;
        self.broker = Some(broker);
        Ok(())
    }
}

/// How long a joiner may take to get partitions once ready.
const JOIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Waits until the worker at `metrics` owns a partition of the
/// interactive lane.
async fn wait_for_partitions(metrics: SocketAddr, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let owned = scrape_metrics(metrics).await?.map_or(0.0, |body| {
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
