//! The short soak of `make test`: three minutes of texts and images on a
//! fleet started here, every fault of the long soak once (a member joins
//! and leaves, a model version is swapped in and a broken one refused, the
//! broker restarts, Redis freezes, a 10x burst), and the budgets a short
//! run can judge: every request answered exactly once or expired, none
//! dead-lettered or failed, no worker death or restart, every fault
//! injected and seen to bite, memory within the limit. Memory growth,
//! latency recovery and work done twice are judged by `make soak`
//! (docs/soak.md), whose runs are long enough to say.

use loadtest::fleet::Binaries;
use loadtest::soak::report::{self, About};
use loadtest::soak::run::{self, SoakConfig, SoakLoad};
use loadtest::soak::samples;
use loadtest::soak::schedule::{self, Fault, ScheduleConfig};
use std::path::PathBuf;
use std::time::Duration;

fn repo_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(relative)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_with_every_fault_once_keeps_its_books() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn,loadtest=info".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
    let timing = ScheduleConfig {
        duration_s: 180.0,
        warm_up_s: 20.0,
        every_s: 0.0,
        settle_s: 40.0,
        broker_down_s: 8.0,
        redis_frozen_s: 5.0,
        burst_s: 10.0,
    };
    let plan = schedule::every_fault_once(&timing, 10.0).expect("three minutes hold every fault");
    let corpus = std::fs::read_to_string(repo_path("scripts/demo-sentences.txt")).unwrap();
    let binaries = Binaries::from_env().expect("fleet-worker (run make setup)");
    let dir = std::env::temp_dir().join(format!("fleet-soak-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let images = run::read_images(&binaries.model_repo.join("efficientnet_lite0/1/reference")).unwrap();
    let outcome = run::run(SoakConfig {
        binaries,
        load: SoakLoad {
            corpus: corpus.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect(),
            images,
            duration: Duration::from_secs_f64(timing.duration_s),
            plan,
            burst_factor: 10.0,
            sample_every: Duration::from_secs(5),
            seed: 34,
            samples_file: Some(dir.join("samples.csv")),
        },
        capacity_fraction: 0.25,
        fixed_rates: None,
        partitions: 4,
        worker_args: Vec::new(),
        capacity_texts: 400,
        capacity_images: 24,
        work_dir: dir.join("work"),
    })
    .await
    .unwrap_or_else(|e| panic!("the soak: {e:#}"));
    // Each sample was on disk as it was taken: a soak cut short keeps them.
    let live = std::fs::read_to_string(dir.join("samples.csv")).unwrap();
    assert_eq!(live.lines().count(), outcome.samples.len() + 1, "the header and a row per sample");
    let about = About {
        machine: "make test".into(),
        command: "tests/soak.rs".into(),
        warm_up_s: timing.warm_up_s,
        interval_s: 5.0,
        rss_limit_bytes: 3072.0 * 1024.0 * 1024.0,
    };
    let judged = report::write(&dir, &about, &outcome).unwrap();
    println!(
        "{}\nrequests computed twice: {} where no kill forced it, {} near the broker kill\nreport: {}",
        judged.result_line,
        judged.verdict.duplicates,
        judged.forced_duplicates,
        dir.join("report.md").display()
    );

    // Every fault of the schedule was injected, in order, and none failed.
    let injected: Vec<Fault> = outcome.faults.iter().map(|f| f.planned.fault).collect();
    assert_eq!(injected, Fault::ALL, "{:#?}", outcome.faults);
    let failed: Vec<&str> = outcome.faults.iter().filter(|f| f.failed).map(|f| f.note.as_str()).collect();
    assert!(failed.is_empty(), "faults not injected: {failed:?}");

    // The books: every request the broker took has exactly one answer, ok
    // or expired, and nothing went to the dead-letter topic.
    let books = judged.books;
    assert!(books.sent > 500, "only {} requests sent", books.sent);
    assert_eq!(books.missing, 0, "{}", judged.result_line);
    assert_eq!(
        books.error, 0,
        "errors: {:?} {:?}",
        outcome.texts.ledger.errors_by_code, outcome.images.ledger.errors_by_code
    );
    let dead_letters = outcome.texts.ledger.dlq + outcome.images.ledger.dlq;
    assert_eq!(dead_letters, 0, "{}", judged.result_line);
    assert!(outcome.images.ledger.ok > 0 && outcome.texts.ledger.ok > 0, "both models answered");

    // No worker died or restarted, and none went over the memory limit.
    assert!(judged.verdict.other.is_empty(), "{:#?}", judged.verdict.other);
    assert!(outcome.deaths.is_empty(), "{:?}", outcome.deaths);

    // The faults bit: the joiner served and was sampled; the swap took, the
    // broken version was refused and the text worker served on.
    let workers = samples::by_worker(&outcome.samples);
    let series = |name: &str| workers.iter().find(|(n, _)| n == name).map(|(_, s)| s.clone()).unwrap_or_default();
    let joiner = series("text-2");
    assert!(joiner.iter().any(|s| s.answers > 0.0), "the joining worker answered nothing: {joiner:?}");
    let text = series("text-1");
    let last = text.last().expect("text-1 was sampled");
    assert!(last.model_version >= 2.0, "the published version was not swapped in: {last:?}");
    assert!(last.load_failures >= 1.0, "the broken version was not refused: {last:?}");
    assert!(last.rss_bytes > 0.0 && last.open_fds > 0.0, "the process metrics are read: {last:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
