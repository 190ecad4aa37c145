//! How the running worker cuts batches behind a backlog, against the real
//! broker, Redis and model: the batches it computes should be the ones its
//! batcher would cut holding the whole backlog, not slivers of whatever
//! arrived in the last few milliseconds.

mod common;

use common::{ledger, metric_value, send_texts, serial, Broker, Redis, Worker};
use fleet_proto::clock::now_ms;
use fleet_proto::ModelName;
use fleet_worker::stages::admission::tokenize::TextTokenizer;
use fleet_worker::stages::batch::bucket::BucketBatcher;
use fleet_worker::versions::repository;
use std::time::Duration;

/// Short common words (one token each in MiniLM's vocabulary, though the
/// test does not rely on it: it tokenizes with the model's own tokenizer).
const WORDS: [&str; 20] = [
    "the", "cat", "dog", "sat", "ran", "red", "big", "old", "new", "sun", "car", "man", "day", "way", "sea", "tea",
    "map", "art", "law", "war",
];

/// 32 distinct texts of each length from 3 to 18 words: a backlog spread
/// over a dozen and more length buckets, none repeated (a repeat would be
/// answered from the feature cache, not computed).
fn spread_backlog() -> Vec<String> {
    let mut texts = Vec::new();
    for words in 3..=18 {
        for j in 0..32 {
            let text: Vec<&str> =
                (0..words).map(|k| WORDS[(j / 20 * 7 + j % 20 + k * (j % 3 + 1)) % WORDS.len()]).collect();
            texts.push(format!("{} {}", WORDS[j % 20], text.join(" ")));
        }
    }
    texts
}

/// How many batches the worker's batcher, with the shipped minilm limits,
/// cuts from `texts` when it holds all of them at once.
fn batches_holding_everything(texts: &[String]) -> usize {
    let version = repository::resolve(&common::model_repo(), &ModelName::parse("minilm").unwrap()).unwrap();
    let max_seq_len = version.config.text().unwrap().max_seq_len;
    let tokenizer = TextTokenizer::load(&version.file("tokenizer.json"), max_seq_len, true).unwrap();
    let mut batcher = BucketBatcher::new(version.config.batching.limits(max_seq_len));
    for text in texts {
        batcher.push((), tokenizer.tokenize(text).unwrap().ids.len(), u64::MAX, 0);
    }
    std::iter::from_fn(|| batcher.flush(0).batch).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_backlog_batches_are_cut_from_everything_the_worker_holds() {
    let _serial = serial().await;
    let texts = spread_backlog();
    let unique: std::collections::BTreeSet<&String> = texts.iter().collect();
    assert_eq!(unique.len(), texts.len(), "the backlog repeats a text");
    let ideal = batches_holding_everything(&texts);
    assert!(ideal >= 12, "the backlog fills only {ideal} batches: too few buckets to show anything");

    let (broker, redis, model) = (Broker::start(), Redis::start(), ModelName::parse("minilm").unwrap());
    broker.create_topics(&model, 4).await;
    // The whole backlog is in the broker before the worker starts, with a
    // deadline nothing reaches, and fits its in-flight limit: it can hold
    // all of it.
    let ids = send_texts(&broker, &model, "bf", &texts, Some(now_ms() + 600_000)).await;
    let worker = Worker::start(
        "minilm",
        &broker,
        &redis,
        // Tuning off: a trial of a smaller batch share would cut the batches.
        &[
            "--max-in-flight",
            "1024",
            "--in-flight-target-wait",
            "0s",
            "--intra-op-threads",
            "1",
            "--engine-tuning",
            "false",
        ],
    );
    let counts = ledger(&redis, &model, &ids, Duration::from_secs(180)).await;
    assert_eq!(counts.get("ok"), Some(&texts.len()), "{counts:?}");

    let scrape = worker.scrape().await;
    let labels = [("model", "minilm")];
    let rows = metric_value(&scrape, "fleet_batch_size_sum", &labels);
    let batches = metric_value(&scrape, "fleet_batch_size_count", &labels);
    assert_eq!(rows, texts.len() as f64, "every text computed once");
    eprintln!("{batches} batches; holding the whole backlog the batcher cuts {ideal}");
    // The first batches leave while the backlog is still being read (a
    // bucket's wait is 5 ms); after that every batch should be full. Half
    // again the ideal count leaves room for that start.
    assert!(batches <= ideal as f64 * 1.5, "{batches} batches for what fits in {ideal}: batches cut too early");
}
