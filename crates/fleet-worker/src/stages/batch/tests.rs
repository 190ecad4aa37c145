//! The batch stage with its channels: expiry, cancels, lanes and row caps,
//! driven without Kafka.

use super::*;
use crate::core::health::Health;
use crate::core::input::ModelInput;
use crate::core::message::{LanePartition, Position};
use crate::core::precision::Precision;
use fleet_proto::RequestId;

fn limits(max_batch_size: usize) -> BucketLimits {
    BucketLimits {
        boundaries: vec![16],
        max_batch_size,
        max_batch_tokens: 1 << 20,
        max_attention_cells: 1 << 30,
        // Nothing is due on its own: only a handover or the end forms batches.
        max_wait_ms: vec![60_000],
    }
}

fn job(partition: i32, generation: u64, offset: i64) -> Piped<Job> {
    let position = Position { lane: fleet_proto::Lane::Interactive, partition, offset, generation };
    let id = RequestId::parse(&format!("r-{offset}")).unwrap();
    let input = ModelInput::Tokens { ids: vec![101; 10], truncated: false };
    let reply = crate::core::job::Reply { to: fleet_proto::Destinations::REDIS, job: None };
    Piped::Work(Job::new(position, id, input, now_ms(), now_ms() + 600_000, reply))
}

fn handover(version: u64, max_batch_size: usize) -> Piped<Job> {
    Piped::Handover(Box::new(Handover {
        version,
        precision: Precision::Fp32,
        task_tag: String::new(),
        intake: None,
        request_ttls: crate::config::model::TtlConfig::default().request_ttls(),
        answers: Default::default(),
        limits: limits(max_batch_size),
        row_caps: vec![],
        loaded: None,
    }))
}

/// Version 1's stage under `limits(8)`, on the channels given.
fn stage(
    jobs: mpsc::Receiver<Piped<Job>>,
    batches: mpsc::Sender<Piped<Batch<Job>>>,
    feedback: mpsc::UnboundedReceiver<BatchFeedback>,
    sink: mpsc::Sender<SinkItem>,
    ledger: Arc<Ledger>,
    speed_caps: bool,
) -> BatchStage {
    BatchStage {
        model: ModelName::parse("minilm").unwrap(),
        limits: limits(8),
        version: 1,
        jobs,
        batches,
        feedback,
        sink,
        ledger,
        cancelled: Default::default(),
        bulk_share: bucket::DEFAULT_BULK_SHARE,
        bulk_fill: true,
        ahead: Default::default(),
        batch_percent: 100,
        speed_caps,
    }
}

#[tokio::test]
async fn a_handover_ends_the_old_versions_batches_and_the_new_limits_begin_behind_it() {
    let ledger = Arc::new(Ledger::new(Arc::new(Health::new(60_000))));
    let generation = ledger.assign_for_test(LanePartition { lane: fleet_proto::Lane::Interactive, partition: 0 });
    let (jobs_tx, jobs) = mpsc::channel(64);
    let (batches, mut batches_rx) = mpsc::channel(64);
    let (sink, _sink_rx) = mpsc::channel(64);
    let (_feedback_tx, feedback) = mpsc::unbounded_channel();
    for offset in 0..5 {
        jobs_tx.send(job(0, generation, offset)).await.unwrap();
    }
    jobs_tx.send(handover(2, 2)).await.unwrap();
    for offset in 5..8 {
        jobs_tx.send(job(0, generation, offset)).await.unwrap();
    }
    drop(jobs_tx);
    stage(jobs, batches, feedback, sink, ledger, false).run().await;

    let mut seen = Vec::new();
    while let Ok(piped) = batches_rx.try_recv() {
        seen.push(match piped {
            Piped::Work(batch) => {
                let mut offsets: Vec<i64> = batch.items.iter().map(|job| job.position.offset).collect();
                offsets.sort();
                offsets
            }
            Piped::Handover(handover) => vec![-(handover.version as i64)],
        });
    }
    // Version 1's five requests in one batch of up to 8, the handover,
    // then version 2's three in batches of at most 2.
    assert_eq!(seen[..2], [vec![0, 1, 2, 3, 4], vec![-2]], "{seen:?}");
    let after: Vec<&Vec<i64>> = seen[2..].iter().collect();
    assert!(after.iter().all(|batch| batch.len() <= 2), "{seen:?}");
    let mut new_ones: Vec<i64> = after.into_iter().flatten().copied().collect();
    new_ones.sort();
    assert_eq!(new_ones, vec![5, 6, 7]);
}

/// The sizes of the batches a stage forms from 8 jobs held at once, after
/// the engine's timings of 20 batches of 8 rows and 20 of 4, the 4-row
/// ones 25 % faster per token.
async fn batch_sizes_after_timings(speed_caps: bool) -> Vec<usize> {
    let ledger = Arc::new(Ledger::new(Arc::new(Health::new(60_000))));
    let generation = ledger.assign_for_test(LanePartition { lane: fleet_proto::Lane::Interactive, partition: 0 });
    let (jobs_tx, jobs) = mpsc::channel(64);
    let (batches, mut batches_rx) = mpsc::channel(64);
    let (sink, _sink_rx) = mpsc::channel(64);
    let (feedback_tx, feedback) = mpsc::unbounded_channel();
    // The first few after the start are not counted (formed before it).
    for _ in 0..speed_caps::MIN_SAMPLES + speed_caps::SETTLING_BATCHES {
        for (rows, infer_ms) in [(8, 10.0), (4, 4.0)] {
            let timing = BatchFeedback::Timing {
                version: 1,
                bucket: 0,
                infer_ms,
                rows,
                tokens: rows * 10,
                settled_backlog: true,
            };
            feedback_tx.send(timing).unwrap();
        }
    }
    for offset in 0..8 {
        jobs_tx.send(job(0, generation, offset)).await.unwrap();
    }
    drop(jobs_tx);
    stage(jobs, batches, feedback, sink, ledger, speed_caps).run().await;
    let mut sizes = Vec::new();
    while let Ok(Piped::Work(batch)) = batches_rx.try_recv() {
        sizes.push(batch.items.len());
    }
    sizes
}

#[tokio::test]
async fn a_bucket_whose_smaller_batches_ran_faster_gets_half_batches() {
    assert_eq!(batch_sizes_after_timings(true).await, vec![4, 4]);
    // Without the choice by measurement, the same timings change nothing.
    assert_eq!(batch_sizes_after_timings(false).await, vec![8]);
}
