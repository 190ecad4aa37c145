//! Out-of-memory splitting at the engine boundary, on the real model: an
//! allocation limit injected into the memory guard (the same code path a
//! CUDA worker takes when a batch would pass its share of the device)
//! makes the batch split; every row is still answered, with the output it
//! gets unsplit.

use fleet_proto::ModelName;
use fleet_worker::core::input::ModelInput;
use fleet_worker::core::precision::CpuFeatures;
use fleet_worker::stages::admission::tokenize::TextTokenizer;
use fleet_worker::stages::engine::memory::MemoryGuard;
use fleet_worker::stages::engine::model::{LoadTarget, Model};
use fleet_worker::stages::engine::precision_choice::min_cosine;
use fleet_worker::stages::engine::split::RowFailure;
use fleet_worker::versions::repository;
use std::path::PathBuf;
use tch::Device;

fn repo() -> PathBuf {
    std::env::var_os("FLEET_MODEL_REPO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models"))
}

/// On the CPU, in fp32: a CPU without bf16 features makes `auto` choose fp32.
fn fp32_cpu() -> LoadTarget<'static> {
    LoadTarget { device: Device::Cpu, cpu: CpuFeatures::default(), probes: &[] }
}

fn embedding(output: &serde_json::Value) -> Vec<f32> {
    serde_json::from_value(output["embedding"].clone()).unwrap()
}

#[test]
fn a_batch_over_the_limit_is_split_and_each_row_gets_its_unsplit_output() {
    tch::set_num_threads(2);
    let version = repository::resolve(&repo(), &ModelName::parse("minilm").unwrap()).expect("run make setup");
    let tokenizer = TextTokenizer::load(&version.file("tokenizer.json"), 512, true).unwrap();
    let input = |text: &str| {
        let tokens = tokenizer.tokenize(text).unwrap();
        ModelInput::Tokens { ids: tokens.ids, truncated: tokens.truncated }
    };
    let texts = [
        "A short one.",
        "The batcher groups requests by token length before they reach the model.",
        "Redis keeps every answer for thirty seconds.",
        "Kafka carries the requests.",
        "Attention memory grows with the square of the sequence length, so long texts are batched apart.",
        "Eight rows in all.",
        "A worker that runs out of device memory halves its batch and tries again.",
        "The last row.",
    ];
    let rows: Vec<ModelInput> = texts.iter().map(|t| input(t)).collect();
    let refs: Vec<&ModelInput> = rows.iter().collect();
    let longest = rows.iter().map(ModelInput::len).max().unwrap();
    let cost = version.config.device.activation_cost();
    assert!(cost.estimate(1, 1) > 0, "minilm's config gives an activation estimate");

    let unlimited = Model::load(&version, &fp32_cpu(), MemoryGuard { cost, limit: None }).unwrap();
    let whole = unlimited.infer_split(&refs);
    assert_eq!((whole.splits, whole.row_cap), (0, None));

    // Room for three rows of the longest length: eight must split.
    let limit = cost.estimate(3, longest);
    let limited = Model::load(&version, &fp32_cpu(), MemoryGuard { cost, limit: Some(limit) }).unwrap();
    let split = limited.infer_split(&refs);
    assert!(split.splits >= 2, "8 rows → 4 + 4 → 2 + 2 + 2 + 2: {} splits", split.splits);
    // The most rows that ran at once (a half of shorter rows may fit where
    // the other does not): fewer than the batch.
    assert!(split.row_cap.is_some_and(|cap| (1..rows.len()).contains(&cap)), "{:?}", split.row_cap);
    for (i, (a, b)) in whole.outputs.iter().zip(&split.outputs).enumerate() {
        let (a, b) = (a.as_ref().unwrap(), b.as_ref().unwrap_or_else(|e| panic!("row {i}: {e:?}")));
        let cosine = min_cosine(&[embedding(a)], &[embedding(b)]);
        assert!(cosine > 0.9999, "row {i} changed by the split: cosine {cosine}");
    }

    // A row that does not fit on its own is the only one that fails.
    let long = input(&texts.join(" ").repeat(8));
    let with_long: Vec<&ModelInput> = vec![&rows[0], &long, &rows[1]];
    let run = limited.infer_split(&with_long);
    assert!(run.outputs[0].is_ok() && run.outputs[2].is_ok());
    assert!(matches!(&run.outputs[1], Err(RowFailure::OutOfMemory(m)) if m.contains("limit")), "{:?}", run.outputs[1]);
}

#[test]
fn a_row_the_model_cannot_run_fails_alone_and_its_neighbours_are_answered() {
    tch::set_num_threads(2);
    let version = repository::resolve(&repo(), &ModelName::parse("minilm").unwrap()).expect("run make setup");
    let tokenizer = TextTokenizer::load(&version.file("tokenizer.json"), 512, true).unwrap();
    let short = |text: &str| ModelInput::Tokens { ids: tokenizer.tokenize(text).unwrap().ids, truncated: false };
    let (a, b) = (short("A short neighbour."), short("Another one."));
    // 700 tokens: past the exported model's 512 positions, a real failure
    // (not out of memory) on the row that holds them.
    let overlong = ModelInput::Tokens { ids: std::iter::repeat_n(1000, 700).collect(), truncated: false };
    let model = Model::load(&version, &fp32_cpu(), MemoryGuard::NONE).unwrap();
    let run = model.infer_split(&[&a, &overlong, &b]);
    assert!(run.outputs[0].is_ok() && run.outputs[2].is_ok(), "{:?}", run.outputs);
    assert!(matches!(run.outputs[1], Err(RowFailure::Failed(_))), "{:?}", run.outputs[1]);
    // The batch once, then each row alone once: no more model calls.
    assert_eq!(run.rows_called, 6);
    assert_eq!((run.splits, run.row_cap), (0, None));
}
