//! Lanes and cancellation with real parts (broker, Redis, a minilm worker):
//! interactive requests are served before a backlog of bulk ones sent
//! earlier; bulk still progresses under a sustained interactive backlog;
//! a cancelled job's requests are answered `cancelled` without compute; a
//! cancel of a job nobody sent is harmless. Every assertion is about order
//! or counts once a state is reached, never about how fast this machine is.

mod common;

use common::{
    metric_value, minilm, present_metric_value, send_requests, serial, statuses, texts, Broker, Redis, Worker,
};
use fleet_producer::{Request, ResultClient};
use fleet_proto::{Destinations, JobId, Lane, Namespace, RequestId, Status};
use redis::AsyncCommands;
use std::time::Duration;

/// `[batching] max_batch_size` of minilm's shipped config.
const MAX_BATCH_SIZE: usize = 32;

/// Sends `texts` on `lane` (in `job` when given) as `<prefix>-<n>`; the ids.
/// Every answer asks for Redis, where these tests read them (a bulk
/// answer's default is the answers topic: tests/bulk_answers.rs).
async fn send(broker: &Broker, lane: Lane, job: Option<&JobId>, prefix: &str, texts: &[String]) -> Vec<RequestId> {
    let reply_to = Some(Destinations::REDIS);
    let shape = |request: Request| Request { lane, job: job.cloned(), reply_to, ..request };
    send_requests(broker, &Namespace::default(), &minilm(), prefix, texts, shape).await
}

/// How long a test waits for the answers of one send (a whole backlog).
const ANSWERED_WITHIN: Duration = Duration::from_secs(300);

/// A worker of the two lanes, started after the backlogs were sent (so it
/// meets them both at once), reading with `--bulk-share share`.
async fn worker_meeting_backlogs(broker: &Broker, redis: &Redis, share: &str) -> Worker {
    let worker = Worker::start("minilm", broker, redis, &["--bulk-share", share]);
    worker.wait_until_serving(2).await;
    let bulk = [("lane", "bulk")];
    let owned = worker.wait_for_metric("fleet_assigned_partitions", &bulk, 2.0, Duration::from_secs(60)).await;
    assert_eq!(owned, 2.0, "the worker owns {owned} of the 2 bulk partitions");
    worker
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_requests_overtake_a_bulk_backlog_sent_before_them() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    broker.create_topics(&minilm(), 2).await;
    // A backfill first, then interactive requests: in one topic these would
    // be read last.
    let bulk = send(&broker, Lane::Bulk, None, "backfill", &texts("backfill", 1000)).await;
    let interactive = send(&broker, Lane::Interactive, None, "person", &texts("person", 40)).await;
    let worker = worker_meeting_backlogs(&broker, &redis, "0.1").await;

    assert!(statuses(&redis, &minilm(), &interactive, ANSWERED_WITHIN).await.iter().all(|s| *s == Status::Ok));
    let bulk_done_by_then = common::answered_now(&redis, &bulk).await;
    assert!(
        bulk_done_by_then < bulk.len() / 2,
        "{bulk_done_by_then} of {} bulk requests were answered before the last interactive one",
        bulk.len()
    );
    // The backfill still ends, every request once.
    assert!(statuses(&redis, &minilm(), &bulk, ANSWERED_WITHIN).await.iter().all(|s| *s == Status::Ok));
    let scrape = worker.scrape().await;
    let ok_in = |lane| present_metric_value(&scrape, "fleet_requests_total", &[("status", "ok"), ("lane", lane)]);
    assert_eq!((ok_in("interactive"), ok_in("bulk")), (40.0, 1000.0), "answers counted by lane");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_keeps_its_share_under_a_sustained_interactive_backlog() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    broker.create_topics(&minilm(), 2).await;
    let bulk = send(&broker, Lane::Bulk, None, "nightly", &texts("nightly", 60)).await;
    let interactive = send(&broker, Lane::Interactive, None, "busy", &texts("busy", 1500)).await;
    let _worker = worker_meeting_backlogs(&broker, &redis, "0.2").await;

    // Both waited for at once; which is complete first. Strict priority
    // would answer every interactive request first.
    let model = minilm();
    let finished_first = tokio::select! {
        biased;
        answered = statuses(&redis, &model, &bulk, ANSWERED_WITHIN) => {
            assert!(answered.iter().all(|s| *s == Status::Ok));
            Lane::Bulk
        }
        _ = statuses(&redis, &model, &interactive, ANSWERED_WITHIN) => Lane::Interactive,
    };
    assert_eq!(finished_first, Lane::Bulk, "bulk ended only after the whole interactive backlog: starved");
    assert!(statuses(&redis, &minilm(), &interactive, ANSWERED_WITHIN).await.iter().all(|s| *s == Status::Ok));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_job_is_answered_cancelled_without_compute_and_other_work_goes_on() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    broker.create_topics(&minilm(), 2).await;
    let worker = Worker::start("minilm", &broker, &redis, &[]);
    worker.wait_until_serving(2).await;
    let client = ResultClient::connect(&redis.url()).await.unwrap();
    let keep = Duration::from_secs(600);

    // A cancel of a job nobody sent is harmless, and so is cancelling twice.
    let nobody = JobId::parse("nobody-sent-this").unwrap();
    client.cancel(&nobody, keep).await.unwrap();
    client.cancel(&nobody, keep).await.unwrap();
    let other_job = JobId::parse("kept-job").unwrap();
    let kept = send(&broker, Lane::Bulk, Some(&other_job), "kept", &texts("kept", 20)).await;
    let plain = send(&broker, Lane::Interactive, None, "plain", &texts("plain", 20)).await;
    assert!(statuses(&redis, &minilm(), &kept, ANSWERED_WITHIN).await.iter().all(|s| *s == Status::Ok));
    assert!(statuses(&redis, &minilm(), &plain, ANSWERED_WITHIN).await.iter().all(|s| *s == Status::Ok));

    // A job cancelled before its requests arrive: none is computed.
    let rows = |scrape: &str| present_metric_value(scrape, "fleet_model_rows_total", &[]);
    let rows_before = rows(&worker.scrape().await);
    let aborted = JobId::parse("aborted-backfill").unwrap();
    client.cancel(&aborted, keep).await.unwrap();
    let mut conn = redis.connection().await;
    let ttl: i64 = conn.ttl(Namespace::default().cancel_key(&aborted)).await.unwrap();
    assert!((1..=600).contains(&ttl), "the cancel key's TTL is {ttl}");
    // One of them is in the feature cache (computed for the kept job): it
    // is answered cancelled too, not ok from the cache.
    let mut aborted_texts = texts("aborted", 199);
    aborted_texts.push(texts("kept", 1).remove(0));
    let cancelled = send(&broker, Lane::Bulk, Some(&aborted), "aborted", &aborted_texts).await;
    let answered = statuses(&redis, &minilm(), &cancelled, ANSWERED_WITHIN).await;
    assert!(answered.iter().all(|s| *s == Status::Cancelled), "{answered:?}");
    let scrape = worker.scrape().await;
    assert_eq!(rows(&scrape), rows_before, "rows of the cancelled job were computed");
    let cancelled_count = metric_value(&scrape, "fleet_requests_total", &[("status", "cancelled"), ("lane", "bulk")]);
    assert_eq!(cancelled_count, 200.0);

    // A job cancelled while it runs: what is left of it is answered
    // cancelled, at most the batch in the engine computes after the cancel,
    // and the interactive lane is untouched.
    let running = JobId::parse("running-backfill").unwrap();
    // Far more than a batch: it is still under way when the cancel comes,
    // however fast the machine.
    let backfill = send(&broker, Lane::Bulk, Some(&running), "running", &texts("running", 4000)).await;
    // Some of it is computed (the job is under way) before it is cancelled.
    let bulk_ok = [("status", "ok"), ("lane", "bulk")];
    let under_way = metric_value(&worker.scrape().await, "fleet_requests_total", &bulk_ok) + 40.0;
    worker.wait_for_metric("fleet_requests_total", &bulk_ok, under_way, Duration::from_secs(120)).await;
    client.cancel(&running, keep).await.unwrap();
    let rows_at_cancel = rows(&worker.scrape().await);
    let after = send(&broker, Lane::Interactive, None, "after", &texts("after", 10)).await;
    let answered = statuses(&redis, &minilm(), &backfill, ANSWERED_WITHIN).await;
    let computed = answered.iter().filter(|s| **s == Status::Ok).count();
    let stopped = answered.iter().filter(|s| **s == Status::Cancelled).count();
    assert_eq!(computed + stopped, backfill.len(), "{answered:?}");
    assert!(stopped > 0, "nothing of the running job was cancelled");
    assert!(statuses(&redis, &minilm(), &after, ANSWERED_WITHIN).await.iter().all(|s| *s == Status::Ok));
    // Rows computed after the cancel was seen by this test: the interactive
    // ones, and at most the batch of the job that was already in the engine.
    let rows_after_cancel = rows(&worker.scrape().await) - rows_at_cancel;
    assert!(
        rows_after_cancel <= (after.len() + MAX_BATCH_SIZE) as f64,
        "{rows_after_cancel} rows computed after the cancel (10 interactive + at most one batch)"
    );
}
