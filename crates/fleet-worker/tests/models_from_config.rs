//! Models served from their folder and config alone (docs/models.md): a
//! module that does not fit its config is refused with the key to change;
//! EfficientNet-Lite1, exported with float NCHW input and logits (the worker
//! normalises and applies softmax, as its config says), gives Python's
//! probabilities; a text classifier (the setup-trained test fixture, served
//! under its export's draft config) gives Python's; and three models of two
//! kinds and two layouts answer at once on one broker, one worker each, as
//! the chart deploys them. Every answer fits docs/answer.schema.json.

mod common;

use common::{serial, Broker, Redis, Worker};
use fleet_producer::summary::cosine;
use fleet_producer::{FleetProducer, Request, ResultClient};
use fleet_proto::{ContentType, ErrorCode, ModelName, RequestId, Status};
use fleet_worker::config::{ModelVersion, Pooling, TaskConfig, TextInput};
use fleet_worker::core::precision::CpuFeatures;
use fleet_worker::stages::admission::intake::{DecodeSettings, Intake};
use fleet_worker::stages::engine::error::EngineError;
use fleet_worker::stages::engine::labels::top_k;
use fleet_worker::stages::engine::memory::MemoryGuard;
use fleet_worker::stages::engine::model::{LoadTarget, Model};
use fleet_worker::stages::engine::torch::ImageModule;
use fleet_worker::versions::repository;
use serde_json::Value;
use std::time::Duration;

fn schema_errors(answer: &fleet_proto::Answer) -> Vec<String> {
    let schema: Value = serde_json::from_str(include_str!("../../../docs/answer.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("docs/answer.schema.json is a valid schema");
    let json = serde_json::to_value(answer).unwrap();
    validator.iter_errors(&json).map(|e| format!("{e} in {json}")).collect()
}

fn version(model: &str) -> ModelVersion {
    repository::resolve(&common::model_repo(), &ModelName::parse(model).unwrap()).expect("run make setup")
}

/// A text model's reference.json: its exporter's Python outputs.
fn text_reference(version: &ModelVersion) -> Value {
    serde_json::from_str(&std::fs::read_to_string(version.file("reference.json")).expect("run make setup")).unwrap()
}

fn reference(model: &str) -> Value {
    let path = common::model_repo().join(format!("{model}/1/reference/reference.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("run make setup")).unwrap()
}

/// Loads `version` in fp32 on the CPU with its real probes; the error's
/// config key when it is refused for its signature.
fn refused_key(version: &ModelVersion) -> Result<(), String> {
    let (_, samples) = Intake::for_version(version, DecodeSettings { budget_bytes: 1 << 30, threads: 1 }, None)
        .map_err(|e| e.to_string())?;
    let target = LoadTarget { device: tch::Device::Cpu, cpu: CpuFeatures::from_names(&[]), probes: &samples.probes };
    let guard = MemoryGuard { cost: version.config.device.activation_cost(), limit: None };
    match Model::load(version, &target, guard) {
        Ok(_) => Ok(()),
        Err(EngineError::Signature { key, problem }) => Err(format!("{key}: {problem}")),
        Err(other) => Err(format!("not a signature error: {other}")),
    }
}

#[test]
fn a_module_that_does_not_fit_its_config_is_refused_naming_the_key() {
    let minilm = version("minilm");
    assert_eq!(refused_key(&minilm), Ok(()), "the shipped config fits its module");

    let mut two_inputs = minilm.clone();
    two_inputs.config.text.as_mut().unwrap().inputs = vec![TextInput::InputIds, TextInput::AttentionMask];
    let mut pooled_already = minilm.clone();
    pooled_already.config.task = TaskConfig::Embedding { pooling: Pooling::None, normalize: true };
    let mut classifier = minilm.clone();
    classifier.config.task =
        TaskConfig::Classification { labels: "tokenizer.json".into(), activation: Default::default(), top_k: 1 };
    let lite1 = version("efficientnet_lite1");
    assert_eq!(refused_key(&lite1), Ok(()));
    let mut uint8 = lite1.clone();
    let image = uint8.config.image.as_mut().unwrap();
    (image.layout, image.mean, image.std) = (Default::default(), None, None);
    let mut wrong_labels = lite1.clone();
    wrong_labels.config.task =
        TaskConfig::Classification { labels: "labels-10.txt".into(), activation: Default::default(), top_k: 5 };
    let dir = std::env::temp_dir().join(format!("fleet-labels-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&lite1.dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(dir.join("labels-10.txt"), (0..10).map(|i| format!("class {i}\n")).collect::<String>()).unwrap();
    wrong_labels.dir = dir;

    for (case, version, key) in [
        ("a module that takes token_type_ids, declared without", &two_inputs, "text.inputs"),
        ("token outputs declared as pooled", &pooled_already, "task.pooling"),
        ("an encoder declared as a classifier", &classifier, "task."),
        ("a float NCHW module fed uint8 NHWC", &uint8, "image.layout"),
        ("1000 classes, 10 labels", &wrong_labels, "task.labels"),
    ] {
        let refused = refused_key(version).expect_err(case);
        assert!(refused.starts_with(key), "{case}: {refused}");
    }
}

#[test]
fn lite1_with_float_input_gives_pythons_probabilities_on_the_same_pixels() {
    let version = version("efficientnet_lite1");
    let reference = reference("efficientnet_lite1");
    assert_eq!(reference["layout"], "nchw_float");
    let module = ImageModule::for_version(&version, tch::Device::Cpu).unwrap();
    let photos = reference["photos"].as_object().unwrap();
    let pixels: Vec<Vec<u8>> =
        photos.keys().map(|name| std::fs::read(version.file(&format!("reference/{name}.rgb"))).unwrap()).collect();
    let rows: Vec<&[u8]> = pixels.iter().map(Vec::as_slice).collect();
    let scores = module.vectors(&rows).unwrap();
    for ((name, expected), scores) in photos.iter().zip(scores) {
        let sum: f32 = scores.iter().sum();
        assert!((sum - 1.0).abs() < 1e-3, "{name}: the worker's softmax sums to {sum}");
        for (e, got) in expected.as_array().unwrap().iter().zip(top_k(&scores, 5)) {
            assert_eq!(e["index"].as_u64().unwrap() as usize, got.index, "{name}");
            let diff = (e["probability"].as_f64().unwrap() - f64::from(got.score)).abs();
            assert!(diff < 1e-4, "{name}: class {} differs from Python by {diff}", got.index);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_models_answer_at_once_on_one_broker_each_in_its_tasks_shape() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    let names = ["minilm", "efficientnet_lite0", "efficientnet_lite1"];
    let models: Vec<ModelName> = names.iter().map(|n| ModelName::parse(n).unwrap()).collect();
    let mut workers = Vec::new();
    for model in &models {
        broker.create_topics(model, 1).await;
        workers.push(Worker::start(model.as_str(), &broker, &redis, &[]));
    }
    for worker in &workers {
        worker.wait_until_serving(1).await;
    }
    let producer = FleetProducer::new(&broker.kafka(), "three-models-test").unwrap();
    let minilm = text_reference(&version("minilm"));
    let sentence = &minilm["items"][0];
    let coffee = std::fs::read(version("efficientnet_lite1").file("reference/coffee.png")).unwrap();

    let text_id = RequestId::parse("three-text").unwrap();
    producer.send(&models[0], &Request::text(text_id.clone(), sentence["text"].as_str().unwrap())).await.unwrap();
    let image_id = RequestId::parse("three-coffee").unwrap();
    for model in &models[1..] {
        producer.send(model, &Request::image(image_id.clone(), ContentType::Png, coffee.clone())).await.unwrap();
    }

    let results = ResultClient::connect(&redis.url()).await.unwrap();
    let mut text = results.wait(&text_id, &models[..1], Duration::from_secs(60)).await.unwrap();
    let text = text.remove("minilm").unwrap();
    assert_eq!(text.status, Status::Ok, "{text:?}");
    let output = text.output.clone().unwrap();
    let embedding: Vec<f32> =
        output["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    let python: Vec<f32> =
        sentence["embedding"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    assert!(cosine(&embedding, &python) > 0.999, "minilm: cosine {}", cosine(&embedding, &python));
    assert_eq!(output["tokens"], sentence["tokens"]);

    let mut images = results.wait(&image_id, &models[1..], Duration::from_secs(60)).await.unwrap();
    let refused_id = RequestId::parse("three-empty").unwrap();
    producer.send(&models[0], &Request::text(refused_id.clone(), "   ")).await.unwrap();
    let mut refused = results.wait(&refused_id, &models[..1], Duration::from_secs(60)).await.unwrap();
    for answer in [&text, &images[names[1]], &images[names[2]], &refused["minilm"]] {
        assert_eq!(schema_errors(answer), Vec::<String>::new(), "docs/answer.schema.json");
    }
    assert_eq!(refused.remove("minilm").unwrap().status, Status::Error);
    for model in &names[1..] {
        let answer = images.remove(*model).unwrap();
        assert_eq!(answer.status, Status::Ok, "{model}: {answer:?}");
        let best = &answer.output.as_ref().unwrap()["classes"][0];
        let python = &reference(model)["photos"]["coffee"][0];
        assert_eq!(best["label"], "espresso", "{model}: {answer:?}");
        assert_eq!(best["synset"], "n07920052", "{model}: the labels' id column is answered");
        assert_eq!(best["index"], python["index"], "{model}");
        let (got, expected) = (best["probability"].as_f64().unwrap(), python["probability"].as_f64().unwrap());
        assert!((got - expected).abs() < 0.1, "{model}: {got} here vs {expected} in Python");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_classifier_answers_pythons_probabilities_best_first() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    let model = ModelName::parse("fixture_topics").unwrap();
    let version = version("fixture_topics");
    assert!(
        std::fs::read_to_string(version.dir.parent().unwrap().join("config.toml")).unwrap().contains("export_model.py"),
        "the fixture is served under the export's own draft config"
    );
    let reference = text_reference(&version);
    let labels: Vec<String> =
        std::fs::read_to_string(version.file("labels.txt")).unwrap().lines().map(str::to_owned).collect();
    broker.create_topics(&model, 1).await;
    let worker = Worker::start("fixture_topics", &broker, &redis, &[]);
    worker.wait_until_serving(1).await;
    let producer = FleetProducer::new(&broker.kafka(), "classifier-test").unwrap();
    let items = reference["items"].as_array().unwrap();
    let mut ids = Vec::new();
    for (n, item) in items.iter().enumerate() {
        let id = RequestId::parse(&format!("topic-{n}")).unwrap();
        producer.send(&model, &Request::text(id.clone(), item["text"].as_str().unwrap())).await.unwrap();
        ids.push(id);
    }
    let results = ResultClient::connect(&redis.url()).await.unwrap();
    for (id, item) in ids.iter().zip(items) {
        let mut answers = results.wait(id, std::slice::from_ref(&model), Duration::from_secs(60)).await.unwrap();
        let answer = answers.remove("fixture_topics").unwrap();
        assert_eq!(answer.status, Status::Ok, "{answer:?}");
        assert_eq!(schema_errors(&answer), Vec::<String>::new(), "docs/answer.schema.json");
        let output = answer.output.unwrap();
        assert_eq!(output["tokens"], item["tokens"], "{}", item["text"]);
        let python: Vec<f64> = item["probabilities"].as_array().unwrap().iter().map(|p| p.as_f64().unwrap()).collect();
        let classes = output["classes"].as_array().unwrap();
        assert_eq!(classes.len(), labels.len(), "top_k = every class of three");
        let scores: Vec<f64> = classes.iter().map(|c| c["probability"].as_f64().unwrap()).collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "best first: {scores:?}");
        for class in classes {
            let index = class["index"].as_u64().unwrap() as usize;
            assert_eq!(class["label"], labels[index].as_str());
            assert!(class.get("synset").is_none(), "plain labels carry no id");
            let diff = (class["probability"].as_f64().unwrap() - python[index]).abs();
            assert!(diff < 0.03, "{}: {} differs from Python by {diff}", item["text"], labels[index]);
        }
        let mut order: Vec<usize> = (0..python.len()).collect();
        order.sort_by(|&a, &b| python[b].total_cmp(&python[a]));
        if python[order[0]] - python[order[1]] > 0.05 {
            // Clear enough that bf16 cannot swap them.
            assert_eq!(classes[0]["index"].as_u64().unwrap() as usize, order[0], "{}", item["text"]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerank_request_is_answered_with_its_documents_in_score_order() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    let model = ModelName::parse("fixture_reranker").unwrap();
    let version = version("fixture_reranker");
    let reference = text_reference(&version);
    broker.create_topics(&model, 1).await;
    let worker = Worker::start("fixture_reranker", &broker, &redis, &[]);
    worker.wait_until_serving(1).await;
    let producer = FleetProducer::new(&broker.kafka(), "rerank-test").unwrap();
    let results = ResultClient::connect(&redis.url()).await.unwrap();
    let items = reference["items"].as_array().unwrap();
    let strings =
        |v: &Value| -> Vec<String> { v.as_array().unwrap().iter().map(|d| d.as_str().unwrap().into()).collect() };
    for (n, item) in items.iter().enumerate() {
        let id = RequestId::parse(&format!("rerank-{n}")).unwrap();
        let request = Request::rerank(id.clone(), item["query"].as_str().unwrap(), strings(&item["documents"]));
        producer.send(&model, &request).await.unwrap();
        let mut answers = results.wait(&id, std::slice::from_ref(&model), Duration::from_secs(60)).await.unwrap();
        let answer = answers.remove("fixture_reranker").unwrap();
        assert_eq!(answer.status, Status::Ok, "{answer:?}");
        assert_eq!(schema_errors(&answer), Vec::<String>::new(), "docs/answer.schema.json");
        let output = answer.output.unwrap();
        assert_eq!(output["tokens"], item["tokens"], "the longest pair's tokens");
        let python: Vec<f64> = item["scores"].as_array().unwrap().iter().map(|s| s.as_f64().unwrap()).collect();
        let ranked = output["results"].as_array().unwrap();
        let indices: Vec<usize> = ranked.iter().map(|r| r["index"].as_u64().unwrap() as usize).collect();
        let mut every = indices.clone();
        every.sort();
        assert_eq!(every, (0..python.len()).collect::<Vec<_>>(), "every document once");
        let scores: Vec<f64> = ranked.iter().map(|r| r["score"].as_f64().unwrap()).collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "best first: {scores:?}");
        for (index, score) in indices.iter().zip(&scores) {
            assert!(
                (score - python[*index]).abs() < 0.03,
                "document {index}: {score} here, {} in Python",
                python[*index]
            );
        }
        for pair in indices.windows(2) {
            // Where Python's scores are clearly apart, the order is Python's.
            if (python[pair[0]] - python[pair[1]]).abs() > 0.05 {
                assert!(python[pair[0]] > python[pair[1]], "{indices:?} against Python's {python:?}");
            }
        }
    }

    let refused = [
        (
            "rerank-text",
            Request::text(RequestId::parse("rerank-text").unwrap(), "a plain text"),
            ErrorCode::UnsupportedFormat,
        ),
        (
            "rerank-too-many",
            Request::rerank(RequestId::parse("rerank-too-many").unwrap(), "q", vec!["a document".to_owned(); 17]),
            ErrorCode::BadRequest,
        ),
    ];
    for (id, request, code) in refused {
        producer.send(&model, &request).await.unwrap();
        let id = RequestId::parse(id).unwrap();
        let mut answers = results.wait(&id, std::slice::from_ref(&model), Duration::from_secs(60)).await.unwrap();
        let answer = answers.remove("fixture_reranker").unwrap();
        assert_eq!(answer.error.as_ref().map(|e| e.code), Some(code), "{answer:?}");
    }
}
