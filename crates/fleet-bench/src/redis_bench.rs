//! `fleet-bench redis`: the worker's Redis write paths, measured against
//! each other in one run: answers written one round trip each vs a whole
//! batch sent at once on the multiplexed connection (the sink's way), and a
//! feature-cache hit vs computing the same batch. Uses (and flushes!) the
//! Redis database it is given: point it at a scratch database.

use crate::text_engine::{read_lines, TextEngine};
use anyhow::Result;
use clap::Args;
use fleet_connect::redis::RedisConfig;
use fleet_proto::{Answer, ModelName, Namespace, RequestId, Timings};
use fleet_worker::config::model::TtlConfig;
use fleet_worker::core::input::tokens_hash;
use fleet_worker::core::job::{Finished, Reply};
use fleet_worker::core::message::Position;
use fleet_worker::core::precision::Precision;
use fleet_worker::stages::cache::FeatureCache;
use fleet_worker::stages::engine::torch::TextModule;
use fleet_worker::stages::handover::VersionTtls;
use fleet_worker::stages::sink::{Attempt, ResultSink};
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args)]
pub struct RedisArgs {
    /// A scratch database: the benchmark FLUSHes it.
    #[arg(long, default_value = "redis://127.0.0.1:6379/15")]
    redis: String,
    #[arg(long, default_value_t = 20_000)]
    answers: usize,
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    file: PathBuf,
}

pub fn run(args: &RedisArgs, engine: &TextEngine) -> Result<()> {
    // One batch of 32 short sentences: the bucket a typical batch comes from.
    let texts: Vec<String> = read_lines(&args.file)?.into_iter().filter(|t| t.len() < 80).take(32).collect();
    let rows = engine.tokenize_all(&texts)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let f = runtime.block_on(figures(&args.redis, &engine.module, &rows, args.answers))?;
    println!("answers of a 384-dim embedding each, {} of them, batches of {}:", args.answers, rows.len());
    println!("  one round trip per answer:  {:>8.0} answers/s", f.one_by_one_per_s);
    println!("  a batch at once (the sink): {:>8.0} answers/s", f.batched_per_s);
    println!("batch of {} short sentences:", rows.len());
    println!("  feature-cache hit (MGET):  {:>9.2} ms", f.hit_ms);
    println!("  computing it (libtorch):   {:>9.2} ms", f.compute_ms);
    println!(
        "RESULT redis batch_ratio={:.2} cache_speedup={:.1}",
        f.batched_per_s / f.one_by_one_per_s,
        f.compute_ms / f.hit_ms
    );
    Ok(())
}

struct RedisFigures {
    one_by_one_per_s: f64,
    batched_per_s: f64,
    hit_ms: f64,
    compute_ms: f64,
}

fn answers(n: usize, batch: usize, embedding: &[f32]) -> Vec<Vec<Finished>> {
    let output = serde_json::json!({ "embedding": embedding, "tokens": 12, "truncated": false });
    let all: Vec<Finished> = (0..n)
        .map(|i| {
            Finished::without_compute(
                Position { lane: fleet_proto::Lane::Interactive, partition: 0, offset: i as i64, generation: 0 },
                RequestId::parse(&format!("bench-{i}")).expect("valid id"),
                Reply { to: fleet_proto::Destinations::REDIS, job: None },
                Answer::ok("minilm", 1, output.clone(), Timings::default()),
            )
        })
        .collect();
    all.chunks(batch).map(<[Finished]>::to_vec).collect()
}

async fn figures(redis_url: &str, engine: &TextModule, rows: &[Vec<i64>], n: usize) -> Result<RedisFigures> {
    let row_refs: Vec<&[i64]> = rows.iter().map(Vec::as_slice).collect();
    let embeddings = engine.vectors(&row_refs)?;
    let batches = answers(n, rows.len(), &embeddings[0]);
    let target = RedisConfig::url(redis_url).target()?;
    let ttls = VersionTtls::new(1, TtlConfig { result_ttl_s: 30, feature_ttl_s: 30, ..TtlConfig::default() });
    let sink = ResultSink::connect(&target, Namespace::default(), ttls).await?;
    let mut conn = redis::Client::open(redis_url)?.get_multiplexed_async_connection().await?;
    let clear = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move { redis::cmd("FLUSHDB").query_async::<()>(&mut conn).await }
    };

    clear(&mut conn).await?;
    let started = Instant::now();
    for batch in &batches {
        for one in batch {
            all_written(sink.write(&[one], Attempt::First).await)?;
        }
    }
    let one_by_one_per_s = n as f64 / started.elapsed().as_secs_f64();

    clear(&mut conn).await?;
    let started = Instant::now();
    for batch in &batches {
        let batch: Vec<&Finished> = batch.iter().collect();
        all_written(sink.write(&batch, Attempt::First).await)?;
    }
    let batched_per_s = n as f64 / started.elapsed().as_secs_f64();

    // Cache hit vs compute, for one batch of `rows`.
    let model = ModelName::parse("minilm")?;
    let mut cache = FeatureCache::connect(&target, Namespace::default(), model, "bench".into()).await?;
    let hashes: Vec<String> = rows.iter().map(|r| tokens_hash(r)).collect();
    let mut seed = redis::pipe();
    for (hash, embedding) in hashes.iter().zip(&embeddings) {
        let value = serde_json::json!({ "output": { "embedding": embedding }, "infer_ms": 1.0 }).to_string();
        seed.cmd("SET").arg(cache.key(1, Precision::Fp32, hash)).arg(value).arg("EX").arg(60).ignore();
    }
    seed.query_async::<()>(&mut conn).await?;
    let hash_refs: Vec<&str> = hashes.iter().map(String::as_str).collect();
    let reps = 50;
    let started = Instant::now();
    for _ in 0..reps {
        let found = cache.lookup(1, Precision::Fp32, &hash_refs).await;
        anyhow::ensure!(found.iter().all(Option::is_some), "seeded features not found");
    }
    let hit_ms = started.elapsed().as_secs_f64() * 1000.0 / reps as f64;
    let started = Instant::now();
    for _ in 0..5 {
        engine.vectors(&row_refs)?;
    }
    let compute_ms = started.elapsed().as_secs_f64() * 1000.0 / 5.0;
    clear(&mut conn).await?;
    Ok(RedisFigures { one_by_one_per_s, batched_per_s, hit_ms, compute_ms })
}

fn all_written(outcomes: Vec<redis::RedisResult<()>>) -> Result<()> {
    outcomes.into_iter().try_for_each(|o| o.map_err(anyhow::Error::from))
}
