//! The status reporter: every second, this worker's backlog into Redis
//! (producer admission), which doubles as the broker and Redis health
//! check; every few seconds the group's lag and the GPU's memory into the
//! metrics; and the readiness and stall gauges from the health facts.

use super::backlog::BacklogPublisher;
use super::drain_rate::DrainMeter;
use super::gpu::GpuMemory;
use super::health::{self, Health};
use crate::metrics::{DRAIN_RATE, SINK_STALLED_SECONDS, WORKER_READY};
use crate::shutdown::Shutdown;
use crate::stages::source::Source;
use fleet_proto::clock::now_ms;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The group's lag is read every this many ticks (one per second): it asks
/// the broker about every partition of the topic.
const LAG_EVERY_TICKS: u64 = 5;
/// How long the withdrawal of the backlog entry may take at shutdown.
const WITHDRAW_TIMEOUT: Duration = Duration::from_secs(2);

pub struct StatusReporter {
    /// Answers written so far (the sink counts them) and the engine's busy
    /// time so far, µs: the drain rate's inputs.
    pub answered: Arc<AtomicU64>,
    pub busy_us: Arc<AtomicU64>,
    pub source: Arc<Source>,
    pub backlog: BacklogPublisher,
    pub health: Arc<Health>,
    /// NVML, on CUDA workers where the driver has it.
    pub gpu: Option<GpuMemory>,
    pub shutdown: Shutdown,
}

impl StatusReporter {
    pub async fn run(mut self) {
        let ready_gauge = metrics::gauge!(WORKER_READY);
        let mut drain = DrainMeter::default();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for count in 0u64.. {
            tokio::select! {
                _ = self.shutdown.recv() => break,
                _ = tick.tick() => {}
            }
            self.report_backlog(&mut drain).await;
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
            metrics::gauge!(SINK_STALLED_SECONDS).set(health::stalled_ms(&facts, now_ms()) as f64 / 1000.0);
            ready_gauge.set(if health::readiness(&facts, now_ms()).is_ok() { 1.0 } else { 0.0 });
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
                    Err(e) => tracing::debug!(error = %e, "backlog not published"),
                }
            }
            Err(e) => tracing::debug!(error = %e, "backlog not measured"),
        }
    }

    async fn report_lag(&self) {
        let probe = self.source.clone();
        match tokio::task::spawn_blocking(move || probe.lag(Duration::from_secs(2))).await {
            Ok(Ok(lag)) => fleet_ops::probe::publish(&lag),
            Ok(Err(e)) => tracing::debug!(error = %e, "lag not measured"),
            Err(e) => tracing::warn!(error = %e, "lag probe panicked"),
        }
    }
}
