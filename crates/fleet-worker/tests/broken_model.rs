//! A model that starts failing on every input mid-stream (a sticky device
//! fault), against the real worker, broker and Redis: the worker must not
//! answer good requests `model_failed`; it reports itself broken and leaves
//! its group, and a healthy member answers everything.
//!
//! The fault is made inside the TorchScript module: the `fixture_fragile`
//! model (scripts/fixtures/make_fragile.py) reads a file `healthy` in the
//! worker's working directory on every call, and fails every call once the
//! test deletes it.

mod common;

use common::{present_metric_value as metric_value, serial, texts, wait_for_answers, Broker, Redis, Worker};
use fleet_proto::{ModelName, Status};
use std::path::PathBuf;
use std::time::Duration;

fn fragile() -> ModelName {
    ModelName::parse("fixture_fragile").unwrap()
}

/// A working directory of its own for one worker, holding the switch.
fn switched_on_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fleet-fragile-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("healthy"), [1u8]).unwrap();
    dir
}

/// The interactive lane's partitions (the bulk lane's move alike).
const INTERACTIVE: &[(&str, &str)] = &[("lane", "interactive")];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_failing_on_every_input_stops_taking_work_and_a_healthy_member_answers_it() {
    let _serial = serial().await;
    let (redis, broker) = (Redis::start(), Broker::start());
    broker.create_topics(&fragile(), 4).await;
    let (dir_a, dir_b) = (switched_on_dir("a"), switched_on_dir("b"));
    let args = ["--stall-timeout", "5s", "--intra-op-threads", "1"];
    let a = Worker::start_in(&dir_a, "fixture_fragile", &broker, &redis, &args);
    a.wait_until_serving(4).await;
    let b = Worker::start_in(&dir_b, "fixture_fragile", &broker, &redis, &args);
    // Both members own partitions: the stream below reaches both.
    let owned_by_b = b.wait_for_metric("fleet_assigned_partitions", INTERACTIVE, 1.0, Duration::from_secs(60)).await;
    assert!(owned_by_b >= 1.0, "the second member got no partition");
    let owned_by_a = a.wait_for_metric("fleet_assigned_partitions", INTERACTIVE, 1.0, Duration::from_secs(5)).await;
    assert!((1.0..4.0).contains(&owned_by_a), "the first member owns {owned_by_a} partitions");

    // Answers while both work.
    let before = common::send_texts(&broker, &fragile(), "healthy", &texts("healthy", 12), None).await;
    let answered = wait_for_answers(&redis, &fragile(), &before, Duration::from_secs(120)).await;
    assert!(answered.iter().all(|answer| answer.status == Status::Ok));

    // Worker A's device "fails": every call, the probe included.
    std::fs::remove_file(dir_a.join("healthy")).unwrap();
    let during = common::send_texts(&broker, &fragile(), "broken", &texts("broken", 40), None).await;
    let answered = wait_for_answers(&redis, &fragile(), &during, Duration::from_secs(120)).await;
    let failed: Vec<_> = during.iter().zip(&answered).filter(|(_, answer)| answer.status != Status::Ok).collect();
    assert!(failed.is_empty(), "good requests answered with errors: {failed:?}");

    let (code, body) = a.wait_for_status("/ready", 503, Duration::from_secs(30)).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("model broken"), "{body}");
    let scrape = a.scrape().await;
    assert_eq!(metric_value(&scrape, "fleet_model_broken", &[]), 1.0);
    assert_eq!(metric_value(&scrape, "fleet_errors_total", &[("code", "model_failed")]), 0.0);
    assert_eq!(
        metric_value(&scrape, "fleet_assigned_partitions", INTERACTIVE),
        0.0,
        "the broken member kept partitions"
    );
    let served_by_b = metric_value(&b.scrape().await, "fleet_assigned_partitions", INTERACTIVE);
    assert_eq!(served_by_b, 4.0, "the healthy member does not own every partition");
    // A restart is what cures a sticky device fault: liveness fails after the bound.
    let (code, body) = a.wait_for_status("/healthz", 503, Duration::from_secs(60)).await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("known-good probe"), "{body}");
    let _ = std::fs::remove_dir_all(&dir_a);
    let _ = std::fs::remove_dir_all(&dir_b);
}
