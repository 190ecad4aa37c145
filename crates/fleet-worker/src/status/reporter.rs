//! The status reporter: every second, this worker's backlog into Redis
//! (producer admission), which doubles as the broker and Redis health
//! check, and a look at whether Redis forgot what the fleet wrote (then a
//! replay of what a client may still wait for); every few seconds the
//! group's lag and the GPU's memory into the metrics; and the readiness and
//! stall gauges from the health facts.

use super::backlog::BacklogPublisher;
use super::drain_rate::DrainMeter;
use super::gpu::GpuMemory;
use super::lost_data::{LostDataMarker, MarkerLook};
use super::probes;
use crate::core::health::Health;
use crate::metrics::{DRAIN_RATE, REDIS_MEMORY_LOST_TOTAL, REPLAYED_TOTAL, SINK_STALLED_SECONDS, WORKER_READY};
use crate::shutdown::Shutdown;
use crate::stages::handover::VersionTtls;
use crate::stages::source::{ReplayFrom, Source};
use fleet_proto::clock::now_ms;
use fleet_proto::Lane;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The group's lag is read every this many ticks (one per second): it asks
/// the broker about every partition of the topic.
const LAG_EVERY_TICKS: u64 = 5;
/// How long the withdrawal of the backlog entry may take at shutdown.
const WITHDRAW_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether this worker left its group for a broken model, and for which
/// episode (`Health::broken_episodes`) it last did.
#[derive(Debug, Default)]
struct Membership {
    out: bool,
    left_for: u64,
}

pub struct StatusReporter {
    /// Answers written so far (the sink counts them) and the engine's busy
    /// time so far, µs: the drain rate's inputs.
    pub answered: Arc<AtomicU64>,
    pub busy_us: Arc<AtomicU64>,
    pub source: Arc<Source>,
    pub backlog: BacklogPublisher,
    pub lost_data: LostDataMarker,
    /// How far back a replay reads when Redis forgot, lane by lane: the
    /// longest a client may still wait for an answer of that lane (its
    /// request TTL + result TTL) of any recent version.
    pub ttls: VersionTtls,
    pub health: Arc<Health>,
    /// NVML, on CUDA workers where the driver has it.
    pub gpu: Option<GpuMemory>,
    pub shutdown: Shutdown,
}

impl StatusReporter {
    pub async fn run(mut self) {
        let ready_gauge = metrics::gauge!(WORKER_READY);
        let mut drain = DrainMeter::default();
        let mut replay_from = ReplayFrom::new();
        let mut membership = Membership::default();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for count in 0u64.. {
            tokio::select! {
                _ = self.shutdown.recv() => break,
                _ = tick.tick() => {}
            }
            self.report_backlog(&mut drain).await;
            self.look_for_lost_data(&mut replay_from).await;
            self.follow_the_model(&mut membership);
            let with_lag = count % LAG_EVERY_TICKS == 0;
            // After the backlog is out: the lag asks about every partition
            // of the topic and may take seconds on a loaded broker.
            if with_lag {
                self.report_lag().await;
            }
            if let Some(gpu) = self.gpu.as_ref().filter(|_| with_lag) {
                if let Err(e) = gpu.publish() {
                    tracing::debug!(error = %e, "GPU memory not read");
                }
            }
            let facts = self.health.facts();
            metrics::gauge!(SINK_STALLED_SECONDS).set(probes::stalled_ms(&facts, now_ms()) as f64 / 1000.0);
            ready_gauge.set(if probes::readiness(&facts, now_ms()).is_ok() { 1.0 } else { 0.0 });
        }
        ready_gauge.set(0.0);
        // Bounded: Redis may be what is away.
        let _ = tokio::time::timeout(WITHDRAW_TIMEOUT, self.backlog.withdraw()).await;
    }

    /// Measures the backlog, updates the drain rate and publishes both.
    async fn report_backlog(&mut self, drain: &mut DrainMeter) {
        let probe = self.source.clone();
        let backlog = match tokio::task::spawn_blocking(move || probe.backlog(Duration::from_secs(1))).await {
            Ok(backlog) => backlog,
            Err(e) => return tracing::warn!(error = %e, "backlog probe panicked"),
        };
        let measured = backlog.as_ref().ok().map(|snapshot| snapshot.messages);
        let answered = self.answered.load(Ordering::Relaxed);
        let rate = drain.observe(now_ms(), answered, self.busy_us.load(Ordering::Relaxed), measured);
        metrics::gauge!(DRAIN_RATE).set(rate);
        match backlog {
            Ok(snapshot) => {
                self.health.broker_answered(now_ms());
                // Dated when measured, not when written: producers add
                // their sends after that time to it.
                match self.backlog.publish(snapshot.messages, snapshot.as_of_ms, rate).await {
                    Ok(()) => self.health.redis_answered(now_ms()),
                    Err(e) => {
                        self.health.dependency_failed(now_ms());
                        tracing::debug!(error = %e, "backlog not published");
                    }
                }
            }
            Err(e) => {
                self.health.dependency_failed(now_ms());
                tracing::debug!(error = %e, "backlog not measured");
            }
        }
    }

    /// Looks at the marker; when Redis forgot, reads again what a client may
    /// still wait for, each lane over its own window. A replay that fails
    /// is tried again every tick, from the same points in time.
    async fn look_for_lost_data(&mut self, replay_from: &mut ReplayFrom) {
        let look = self.lost_data.look(now_ms()).await;
        // A Redis round trip of its own: Redis is seen answering even while
        // the backlog, which needs the broker too, cannot be measured.
        match &look {
            Ok(_) => self.health.redis_answered(now_ms()),
            Err(_) => self.health.dependency_failed(now_ms()),
        }
        match look {
            Ok(MarkerLook::Forgotten) => {
                metrics::counter!(REDIS_MEMORY_LOST_TOTAL).increment(1);
                for lane in Lane::ALL {
                    let window_ms = self.ttls.longest_wait_ms(lane);
                    let from = now_ms().saturating_sub(window_ms) as i64;
                    tracing::error!(
                        %lane,
                        replay_window_s = window_ms / 1000,
                        "Redis lost what the fleet wrote (restart without persistence, failover or flush); \
                         replaying what a client may still wait for"
                    );
                    replay_from.entry(lane).and_modify(|earlier| *earlier = (*earlier).min(from)).or_insert(from);
                }
            }
            Ok(MarkerLook::FirstLook | MarkerLook::Kept) => {}
            Err(e) => tracing::debug!(error = %e, "the lost-data marker not read"),
        }
        if replay_from.is_empty() {
            return;
        }
        let (source, from) = (self.source.clone(), replay_from.clone());
        match tokio::task::spawn_blocking(move || source.replay_since(&from, Duration::from_secs(5))).await {
            Ok(Ok(messages)) => {
                metrics::counter!(REPLAYED_TOTAL).increment(messages);
                tracing::warn!(messages, "replay begun: these messages are read and answered again");
                self.health.set_replay_pending(None, now_ms());
                replay_from.clear();
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "replay not begun; trying again");
                self.health.set_replay_pending(Some(e.to_string()), now_ms());
            }
            Err(e) => {
                tracing::warn!(error = %e, "replay panicked; trying again");
                self.health.set_replay_pending(Some(format!("the replay panicked: {e}")), now_ms());
            }
        }
    }

    /// A broken model leaves the group, so its partitions (and the rows it
    /// left unanswered, pinned in flight until then) go to healthy members;
    /// once it serves again (a new version swapped in) it rejoins. Every
    /// episode leaves once, even one that ended before this tick.
    fn follow_the_model(&self, membership: &mut Membership) {
        let episodes = self.health.broken_episodes();
        if episodes > membership.left_for {
            self.source.leave_group();
            membership.left_for = episodes;
            membership.out = true;
        } else if membership.out && !self.health.model_broken() {
            match self.source.rejoin_group() {
                Ok(()) => membership.out = false,
                Err(e) => tracing::warn!(error = %e, "cannot join the group again; trying again"),
            }
        }
    }

    /// Each lane's lag (a bulk topic not created yet has none to publish).
    async fn report_lag(&self) {
        for lane in Lane::ALL {
            let probe = self.source.clone();
            match tokio::task::spawn_blocking(move || probe.lag(lane, Duration::from_secs(2))).await {
                Ok(Ok(lag)) => fleet_ops::probe::publish(&lag),
                Ok(Err(e)) => tracing::debug!(error = %e, %lane, "lag not measured"),
                Err(e) => tracing::warn!(error = %e, "lag probe panicked"),
            }
        }
    }
}
