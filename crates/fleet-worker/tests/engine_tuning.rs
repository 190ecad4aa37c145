//! The engine chooses its intra-op threads and batch budgets on the
//! worker's own traffic (stages/engine/tuning.rs): under a backlog each
//! candidate is measured, and the worker keeps the one that answered most
//! (the configured batch budgets unless a smaller share won every window
//! by 5 %), shown in its gauges; every request is answered once meanwhile.

mod common;

use common::{ledger, send_texts, sentences, serial, serving_minilm, Redis};
use fleet_proto::ModelName;
use fleet_testkit::metric_value;
use fleet_worker::stages::engine::tuning::{thread_candidates, BATCH_PERCENTS};
use std::time::Duration;

const GAUGE: &str = "fleet_engine_tuned_rows_per_second";

/// Each candidate's measured rows per second, in candidate order.
fn rates(scrape: &str, knob: &str, values: &[String]) -> Vec<f64> {
    values.iter().map(|v| metric_value(scrape, GAUGE, &[("knob", knob), ("value", v)])).collect()
}

fn best<'a>(values: &'a [String], rates: &[f64]) -> &'a str {
    let top = (0..rates.len()).max_by(|&a, &b| rates[a].total_cmp(&rates[b])).unwrap();
    &values[top]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_backlog_the_worker_measures_each_setting_and_keeps_the_one_that_answered_most() {
    let _serial = serial().await;
    let redis = Redis::start();
    let (broker, worker) = serving_minilm(4, &redis, &["--engine-tuning-window", "500ms"]).await;
    let model = ModelName::parse("minilm").unwrap();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let threads: Vec<String> = thread_candidates(cores).iter().map(usize::to_string).collect();
    let percents: Vec<String> = BATCH_PERCENTS.iter().map(u32::to_string).collect();
    let corpus = sentences();

    // Rounds of texts sent at once (a backlog) until every candidate of
    // both knobs has been measured.
    let mut scrape = String::new();
    for round in 0.. {
        assert!(round < 40, "tuning never finished:\n{scrape}");
        let texts: Vec<String> = (0..1_200).map(|i| format!("{} ({round}.{i})", corpus[i % corpus.len()])).collect();
        let ids = send_texts(&broker, &model, &format!("tune{round}"), &texts, None).await;
        let counts = ledger(&redis, &model, &ids, Duration::from_secs(120)).await;
        assert_eq!(counts.get("ok"), Some(&texts.len()), "round {round}: {counts:?}");
        scrape = worker.scrape().await;
        let measured = |knob, values: &[String]| rates(&scrape, knob, values).iter().all(|&r| r > 0.0);
        if (threads.len() < 2 || measured("threads", &threads)) && measured("batch_percent", &percents) {
            break;
        }
    }

    let thread_rates = rates(&scrape, "threads", &threads);
    let chosen_threads = metric_value(&scrape, "fleet_engine_intra_op_threads", &[]);
    let expected_threads: f64 = if threads.len() < 2 { 1.0 } else { best(&threads, &thread_rates).parse().unwrap() };
    assert_eq!(chosen_threads, expected_threads, "threads {threads:?} measured {thread_rates:?}");

    // The configured budgets stay unless a smaller share won every window
    // by 5 % (the gauges hold totals: a winner's total beat them too).
    let percent_rates = rates(&scrape, "batch_percent", &percents);
    let chosen_percent = metric_value(&scrape, "fleet_engine_batch_percent", &[]).to_string();
    let chosen_rate = percent_rates[percents.iter().position(|p| *p == chosen_percent).expect("a candidate")];
    assert!(
        chosen_percent == "100" || chosen_rate > percent_rates[0] * 1.05,
        "batch percent {chosen_percent} kept; measured {percents:?} {percent_rates:?}"
    );
}
