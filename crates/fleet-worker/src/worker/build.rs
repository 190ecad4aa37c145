//! Each stage of the path built from the worker's arguments, the state the
//! stages share and the stage's channel ends (`pipes`): one function a
//! stage, so `run` reads as the order things start in.

use super::pipes::{AdmissionEnds, BatchEnds, CacheEnds, EngineEnds};
use super::Shared;
use crate::config::{ModelVersion, WorkerArgs};
use crate::core::cancel_tracking::CancelLookup;
use crate::core::health::Health;
use crate::core::precision::Precision;
use crate::guard;
use crate::shutdown::Shutdown;
use crate::stages::admission::flow::FlowLimits;
use crate::stages::admission::in_flight_limit::{InFlightLimit, LimitSettings};
use crate::stages::admission::intake::Intake;
use crate::stages::admission::policy::AdmissionPolicy;
use crate::stages::admission::AdmissionStage;
use crate::stages::batch::BatchStage;
use crate::stages::cache::{CacheStage, FeatureCache};
use crate::stages::engine::tuning::Tuner;
use crate::stages::engine::EngineStage;
use crate::stages::source::Inbox;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub(super) fn engine(args: &WorkerArgs, shared: &Shared, ends: EngineEnds, version: &ModelVersion) -> EngineStage {
    // A backlog: more held than the batch running, the next one and a
    // third (the engine is what the path waits for), or, where the
    // in-flight limit is smaller, half its floor: reading resumes at half
    // the limit, so a worker at its limit never holds less.
    let floor = args.min_in_flight.min(args.max_in_flight);
    let backlog_messages = (3 * version.config.batching.max_batch_size).min(floor / 2).max(1);
    let held = shared.ledger.clone();
    EngineStage {
        model: args.model.clone(),
        namespace: shared.names.clone(),
        threads: shared.threads,
        busy_us: shared.busy_us.clone(),
        serving: shared.serving.clone(),
        health: shared.health.clone(),
        commands: ends.commands,
        sink: ends.sink,
        batch_feedback: ends.batch_feedback,
        held_feedback: ends.held_feedback,
        cancelled: shared.cancelled.clone(),
        cancel_lookup: shared.cancel_lookup.clone(),
        runtime: tokio::runtime::Handle::current(),
        ahead: shared.ahead.clone(),
        tuner: Tuner::for_worker(args, shared.device),
        backlog: Box::new(move || held.held().0 >= backlog_messages),
    }
}

pub(super) fn batch(args: &WorkerArgs, shared: &Shared, ends: BatchEnds, version: &ModelVersion) -> BatchStage {
    let device = shared.device;
    BatchStage {
        model: args.model.clone(),
        limits: version.config.batching.limits(version.config.max_input_len()),
        version: version.version,
        jobs: ends.jobs,
        batches: ends.batches,
        feedback: ends.feedback,
        sink: ends.sink,
        ledger: shared.ledger.clone(),
        cancelled: shared.cancelled.clone(),
        bulk_share: args.bulk_share,
        // Where rows are nearly free (a GPU) bulk fills interactive
        // batches; on a CPU each row costs the interactive rows beside it.
        bulk_fill: args.bulk_fill.unwrap_or(device.is_cuda()),
        ahead: shared.ahead.clone(),
        batch_percent: 100,
        // Chosen on the engine's timings where the engine tunes itself.
        speed_caps: args.engine_tuning && !device.is_cuda(),
    }
}

/// `first_served`: the version and precision the first batches are looked
/// up under in the feature cache.
pub(super) fn cache(
    shared: &Shared,
    ends: CacheEnds,
    cache: FeatureCache,
    lookup: CancelLookup,
    first_served: (u64, Precision),
) -> CacheStage {
    CacheStage {
        batches: ends.batches,
        engine: ends.engine,
        sink: ends.sink,
        cache,
        version: first_served,
        ledger: shared.ledger.clone(),
        cancelled: shared.cancelled.clone(),
        cancel_lookup: lookup,
        ahead: shared.ahead.clone(),
    }
}

pub(super) struct AdmissionParts {
    pub inbox: Inbox,
    pub intake: Intake,
    pub ends: AdmissionEnds,
    pub shutdown: Shutdown,
}

pub(super) fn admission(
    args: &WorkerArgs,
    shared: &Shared,
    version: &ModelVersion,
    parts: AdmissionParts,
) -> AdmissionStage {
    let AdmissionParts { inbox, intake, ends, shutdown } = parts;
    AdmissionStage {
        inbox,
        policy: AdmissionPolicy {
            model: args.model.clone(),
            version: version.version,
            intake,
            request_ttls: version.config.ttl.request_ttls(),
            answers: version.config.answers,
            cancelled: shared.cancelled.clone(),
        },
        flow: FlowLimits {
            max_messages: args.max_in_flight.max(1),
            max_bytes: args.max_in_flight_bytes.max(1),
            low_water_percent: usize::from(args.low_water_percent),
        },
        in_flight: adaptive_in_flight_limit(args),
        held: ends.held,
        health: shared.health.clone(),
        jobs: ends.jobs,
        sink: ends.sink,
        handovers: ends.handovers,
        shutdown,
    }
}

/// The AIMD in-flight limit the arguments ask for; `None` (fixed at
/// `--max-in-flight`) with `--in-flight-target-wait 0`.
fn adaptive_in_flight_limit(args: &WorkerArgs) -> Option<InFlightLimit> {
    (!args.in_flight_target_wait.is_zero()).then(|| {
        InFlightLimit::new(LimitSettings {
            floor: args.min_in_flight.min(args.max_in_flight).max(1),
            ceiling: args.max_in_flight.max(1),
            target_ms: args.in_flight_target_wait.as_secs_f64() * 1000.0,
            backoff: 0.8,
        })
    })
}

/// Spawns a stage task; if it ends (or panics) before the drain began, the
/// worker is broken beyond one message: liveness fails, naming the stage.
pub(super) fn spawn_watched(
    stage: &'static str,
    health: Arc<Health>,
    stopping: Arc<AtomicBool>,
    task: impl Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        use futures::FutureExt;
        let outcome = std::panic::AssertUnwindSafe(task).catch_unwind().await;
        if let Err(panic) = &outcome {
            tracing::error!(stage, panic = guard::panic_message(panic.as_ref()), "a stage panicked");
        }
        if outcome.is_err() || !stopping.load(Ordering::Relaxed) {
            tracing::error!(stage, "a stage stopped while the worker runs");
            health.set_stage_stopped(stage);
        }
    })
}
