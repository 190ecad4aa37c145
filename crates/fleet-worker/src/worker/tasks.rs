//! Everything that runs beside the engine once Redis answers: the version
//! watcher, the cancel watch, the source, the status reporter, the heap
//! trim and the stages from the sink back to the cache (each watched: one
//! that ends early fails liveness). The admission stage is built here and
//! run by the caller, on its own thread.

use super::build::{self, spawn_watched, AdmissionParts};
use super::drain::Running;
use super::redis::Connected;
use super::{open_gpu_memory, Warm};
use crate::config::WorkerArgs;
use crate::shutdown;
use crate::stages::admission::AdmissionStage;
use crate::stages::sink::SinkStage;
use crate::stages::source::lanes::LaneTopics;
use crate::stages::source::Source;
use crate::status::reporter::StatusReporter;
use crate::versions::watcher::Watcher;
use anyhow::Result;
use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// A stage's task, boxed so one spawner takes every stage's.
type StageTask = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;

/// Starts every task but reading, and returns them with the admission
/// stage, which the caller runs.
pub(super) fn start_tasks(args: &WorkerArgs, warm: Warm, connected: Connected) -> Result<(Running, AdmissionStage)> {
    let Warm { shared, pipes, engine, version, first_served, intake, tokenizer, loader, settings, kafka, .. } = warm;
    let Connected { results, cache, cancel_watch, backlog, lost_data } = connected;
    let (stop_reading, reading) = shutdown::channel();
    let (stop_reporting, reporting) = shutdown::channel();
    let watcher = Watcher {
        repo: args.model_repo.clone(),
        model: args.model.clone(),
        settings,
        serving: shared.serving.clone(),
        loader,
        interval: args.model_poll_interval,
        tokenizer,
        serving_config: version.config.clone(),
        shared_decoding: intake.decoding().cloned(),
        ttls: warm.ttls.clone(),
        handovers: pipes.handovers,
        shutdown: reading.clone(),
    };
    let watching = tokio::spawn(watcher.run());
    let batch_cancel_lookup = cancel_watch.lookup.clone();
    let _ = shared.cancel_lookup.set(cancel_watch.lookup.clone());
    let cancel_watching = tokio::spawn(cancel_watch.run(reading.clone()));

    let (source, inbox) = Source::subscribe(
        kafka,
        shared.ledger.clone(),
        &shared.names.consumer_group(&args.model),
        LaneTopics::of(&shared.names, &args.model),
        args.prefetch_kbytes,
        args.bulk_share,
    )?;
    let source = Arc::new(source);
    let committer = source.committer();
    let reporter = StatusReporter {
        answered: shared.answered.clone(),
        busy_us: shared.busy_us.clone(),
        source: source.clone(),
        backlog,
        lost_data,
        ttls: warm.ttls,
        health: shared.health.clone(),
        gpu: shared.device.is_cuda().then(open_gpu_memory).flatten(),
        shutdown: reporting,
    };
    let reporter = tokio::spawn(reporter.run());
    let heap_trim = (!args.heap_trim_interval.is_zero()).then_some(args.heap_trim_interval);
    let heap = tokio::spawn(crate::heap::keep_trimmed(heap_trim));

    let stopping = Arc::new(AtomicBool::new(false));
    let spawn = |stage, task| spawn_watched(stage, shared.health.clone(), stopping.clone(), task);
    let sink = SinkStage {
        items: pipes.sink,
        results,
        answer_records: warm.answer_records,
        dead_letters: warm.dead_letters,
        local: warm.local_record,
        committer: committer.clone(),
        answered: shared.answered.clone(),
        health: shared.health.clone(),
    };
    let sink = spawn("sink", Box::pin(sink.run()) as StageTask);
    let batch = spawn("batcher", Box::pin(build::batch(args, &shared, pipes.batch, &version).run()) as StageTask);
    let cache = build::cache(&shared, pipes.cache, cache, batch_cancel_lookup, first_served);
    let cache = spawn("cache", Box::pin(cache.run()) as StageTask);
    let admission = build::admission(
        args,
        &shared,
        &version,
        AdmissionParts { inbox, intake, ends: pipes.admission, shutdown: reading },
    );
    let running = Running {
        source,
        committer,
        stop_reading,
        stop_reporting,
        stopping: stopping.clone(),
        watching,
        cancel_watching,
        heap,
        reporter,
        batch,
        cache,
        engine,
        sink,
        drain_timeout: args.drain_timeout,
    };
    Ok((running, admission))
}
