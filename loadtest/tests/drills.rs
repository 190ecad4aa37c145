//! The fault drills, shortened for `make test`: a fleet on this machine
//! under steady load, one fault mid-run, and every request accounted for.
//! They use the built `fleet-worker` (FLEET_BIN_DIR; `make test` builds it
//! first) and, for the broker restart, the PostgreSQL on 127.0.0.1:5432.

use loadtest::drill::{self, Drill, DrillConfig};
use loadtest::fleet::Binaries;
use loadtest::ledger::Outcome;
use std::path::PathBuf;
use std::time::Duration;

fn config() -> DrillConfig {
    let corpus_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/demo-sentences.txt");
    let corpus = std::fs::read_to_string(corpus_path).unwrap().lines().map(str::to_owned).collect();
    DrillConfig {
        binaries: Binaries::from_env().expect("fleet-worker (run make setup)"),
        corpus,
        rate: 30.0,
        duration: Duration::from_secs(24),
        fault_at: Duration::from_secs(6),
        fault_for: Duration::from_secs(8),
        partitions: 4,
        seed: 7,
    }
}

/// Runs one drill and checks its books, and that the fault really bit.
async fn drill_closes_its_ledger(drill: Drill) {
    let config = config();
    let held_for_ms = (config.fault_for.as_millis() as f64) - 3000.0;
    let after_fault_s = (config.fault_at + config.fault_for).as_secs_f64() + 5.0;
    let outcome = drill::run(drill, config).await.unwrap_or_else(|e| panic!("{}: {e:#}", drill.name()));
    let ledger = &outcome.run.ledger;
    println!(
        "{} {} send_failed={} slowest ok {:.0} ms",
        drill.name(),
        ledger.result_line(),
        ledger.send_failed,
        outcome.slowest_ok_ms()
    );
    assert!(ledger.sent + ledger.send_failed > 400, "{}: only {} sent", drill.name(), ledger.sent);
    // Sending goes on after the fault: a producer that a broker restart had
    // failed for good would leave the end of the run unsent.
    let answered_after_fault =
        outcome.run.records.iter().filter(|r| r.sent_s > after_fault_s && r.outcome == Outcome::Ok).count();
    assert!(answered_after_fault > 0, "{}: nothing sent after the fault was answered", drill.name());
    assert_eq!(ledger.lost(), 0, "{}: {}", drill.name(), ledger.result_line());
    assert_eq!(ledger.error, 0, "{}: {:?}", drill.name(), ledger.errors_by_code);
    // `lost` counts expired answers and dead letters as accounted for; each
    // is bounded on its own. Every request here is valid, so none may be
    // dead-lettered; and the fault (8 s) is far shorter than the request
    // TTL (30 s), so none may expire: an expiry would be a request held up
    // by more than the fault.
    assert_eq!(ledger.dead_lettered(), 0, "{}: {}", drill.name(), ledger.result_line());
    assert_eq!(ledger.expired, 0, "{}: {}", drill.name(), ledger.result_line());
    assert!(ledger.ok > 0, "{}: nothing answered ok", drill.name());
    match drill {
        // The fault held requests up for about its length, and they were
        // answered after it.
        Drill::KillWorker | Drill::RedisOutage | Drill::RestartBroker => {
            assert!(outcome.slowest_ok_ms() >= held_for_ms, "{}: no request was held up", drill.name())
        }
        // The joining worker took partitions and answered from them.
        Drill::Rebalance => {
            assert!(outcome.joiner_answers.unwrap_or(0.0) > 0.0, "the second worker answered nothing")
        }
    }
}

// One at a time: each starts a broker, Redis and workers on two cores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_drill_closes_its_ledger() {
    // Warnings (failed sends and deliveries, librdkafka's own) in the test's
    // output: a drill that fails in CI must say why.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
    for drill in [Drill::KillWorker, Drill::RedisOutage, Drill::Rebalance, Drill::RestartBroker] {
        drill_closes_its_ledger(drill).await;
    }
}
