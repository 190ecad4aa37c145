//! Images end to end with real parts: real photos (scikit-image's, copied
//! by the export) and synthetic 8K camera-like JPEGs through the producer
//! library, nisshi, fleet-worker (EfficientNet-Lite0 through libtorch) and
//! Redis; plus vision and text answering one request in parallel.

mod common;

use common::{assert_committed_to_the_end, present_metric_value, serial, Broker, Redis, Worker};
use fleet_producer::{FleetProducer, Request, ResultClient, SendError};
use fleet_proto::{ContentType, ErrorCode, Lane, ModelName, RequestId, Status};
use fleet_worker::stages::engine::labels::{load_labels, top_k};
use fleet_worker::stages::engine::torch::ImageModule;
use fleet_worker::versions::repository;
use image::ImageEncoder;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;

const CAT_CLASSES: std::ops::RangeInclusive<u64> = 281..=285;

fn version_dir() -> PathBuf {
    common::model_repo().join("efficientnet_lite0/1")
}

fn reference() -> Value {
    let path = version_dir().join("reference/reference.json");
    let raw = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (run make setup)", path.display()));
    serde_json::from_str(&raw).unwrap()
}

fn photo(name: &str) -> Vec<u8> {
    std::fs::read(version_dir().join(format!("reference/{name}.png"))).unwrap()
}

fn jpeg(width: u32, height: u32, seed: u64) -> Vec<u8> {
    let photo = fleet_image::synthetic::photo(width, height, seed);
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
        .encode(&photo.pixels, width, height, image::ExtendedColorType::Rgb8)
        .unwrap();
    out
}

fn top(answer: &fleet_proto::Answer) -> (u64, String, f64) {
    let best = &answer.output.as_ref().expect("an ok answer has output")["classes"][0];
    (best["index"].as_u64().unwrap(), best["label"].as_str().unwrap().to_owned(), best["probability"].as_f64().unwrap())
}

#[test]
fn the_model_gives_pythons_probabilities_on_the_same_pixels() {
    let reference = reference();
    let version = repository::resolve(&common::model_repo(), &ModelName::parse("efficientnet_lite0").unwrap()).unwrap();
    let engine = ImageModule::for_version(&version, tch::Device::Cpu).unwrap();
    let photos = reference["photos"].as_object().unwrap();
    let pixels: Vec<Vec<u8>> =
        photos.keys().map(|name| std::fs::read(version_dir().join(format!("reference/{name}.rgb"))).unwrap()).collect();
    let rows: Vec<&[u8]> = pixels.iter().map(Vec::as_slice).collect();
    let got = engine.vectors(&rows).unwrap().iter().map(|scores| top_k(scores, 5)).collect::<Vec<_>>();
    for ((name, expected), got) in photos.iter().zip(got) {
        for (e, g) in expected.as_array().unwrap().iter().zip(got) {
            assert_eq!(e["index"].as_u64().unwrap() as usize, g.index, "{name}");
            let diff = (e["probability"].as_f64().unwrap() - f64::from(g.score)).abs();
            assert!(diff < 1e-4, "{name}: class {} differs by {diff}", g.index);
        }
    }
    let labels = load_labels(&version_dir().join("labels.txt")).unwrap();
    assert_eq!(labels[photos["coffee"][0]["index"].as_u64().unwrap() as usize].name(), "espresso");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn photos_are_classified_and_bad_images_answered_with_their_code() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    let model = ModelName::parse("efficientnet_lite0").unwrap();
    broker.create_topics(&model, 2).await;
    let mut worker = Worker::start("efficientnet_lite0", &broker, &redis, &[]);
    worker.wait_until_serving(2).await;
    let producer = FleetProducer::new(&broker.kafka(), "images-test").unwrap();

    let eight_k = jpeg(7680, 4320, 11);
    let mut truncated = photo("coffee");
    truncated.truncate(truncated.len() / 2);
    // A small JPEG whose frame header declares 65000 × 65000 (4.2 Gpx).
    let mut bomb = jpeg(64, 48, 13);
    let sof = bomb.windows(2).position(|w| w == [0xFF, 0xC0]).expect("a baseline frame header");
    bomb[sof + 5..sof + 9].copy_from_slice(&[0xFD, 0xE8, 0xFD, 0xE8]);
    let cases: Vec<(&str, ContentType, Vec<u8>)> = vec![
        ("coffee", ContentType::Png, photo("coffee")),
        ("chelsea", ContentType::Png, photo("chelsea")),
        ("eight-k", ContentType::Jpeg, eight_k.clone()),
        ("truncated", ContentType::Png, truncated),
        ("bomb", ContentType::Jpeg, bomb),
        ("lying", ContentType::Jpeg, photo("coffee")),
        ("not-an-image", ContentType::Png, b"%PDF-1.7 definitely not a png".to_vec()),
    ];
    let mut deliveries = Vec::new();
    for (id, content_type, bytes) in &cases {
        let request = Request::image(RequestId::parse(id).unwrap(), *content_type, bytes.clone());
        deliveries.push(producer.send(&model, &request).await.unwrap());
    }
    for delivered in futures::future::join_all(deliveries).await {
        delivered.expect("delivery");
    }

    let results = ResultClient::connect(&redis.url()).await.unwrap();
    let mut answers = std::collections::HashMap::new();
    for (id, _, _) in &cases {
        let id = RequestId::parse(id).unwrap();
        let mut got = results.wait(&id, std::slice::from_ref(&model), Duration::from_secs(60)).await.unwrap();
        answers.insert(id.as_str().to_owned(), got.remove(model.as_str()).unwrap());
    }
    let reference = reference();
    let (index, label, probability) = top(&answers["coffee"]);
    let python = reference["photos"]["coffee"][0]["probability"].as_f64().unwrap();
    assert_eq!(label, "espresso", "coffee: {:?}", answers["coffee"]);
    assert!((probability - python).abs() < 0.1, "coffee: {probability} here vs {python} in Python");
    assert_eq!(index, reference["photos"]["coffee"][0]["index"].as_u64().unwrap());
    let (index, label, _) = top(&answers["chelsea"]);
    assert!(CAT_CLASSES.contains(&index), "chelsea classified as {label}");
    assert_eq!(answers["eight-k"].status, Status::Ok, "{:?}", answers["eight-k"]);
    for (id, code) in [
        ("truncated", ErrorCode::DecodeFailed),
        ("bomb", ErrorCode::ImageTooLarge),
        ("lying", ErrorCode::UnsupportedFormat),
        ("not-an-image", ErrorCode::UnsupportedFormat),
    ] {
        assert_eq!(answers[id].error.as_ref().map(|e| e.code), Some(code), "{id}: {:?}", answers[id]);
    }

    let scrape = worker.scrape().await;
    assert_eq!(present_metric_value(&scrape, "fleet_model_rows_total", &[("model", "efficientnet_lite0")]), 3.0);
    assert_eq!(
        present_metric_value(&scrape, "fleet_image_decode_bytes_in_use", &[]),
        0.0,
        "every reservation returned"
    );
    assert_committed_to_the_end(&broker, &model, Lane::Interactive, 2).await;
    assert!(worker.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_near_the_size_limit_travels_and_one_over_it_is_refused_by_the_producer() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    let model = ModelName::parse("efficientnet_lite0").unwrap();
    broker.create_topics(&model, 1).await;
    let mut worker = Worker::start("efficientnet_lite0", &broker, &redis, &[]);
    worker.wait_until_serving(1).await;
    let producer = FleetProducer::new(&broker.kafka(), "images-test").unwrap();

    // Noise does not compress: a 2600×2500 PNG of it is ~19.5 MB, under the 20 MB limit.
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    let noise: Vec<u8> = (0..2600 * 2500 * 3)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 32) as u8
        })
        .collect();
    let mut big = Vec::new();
    image::codecs::png::PngEncoder::new_with_quality(
        &mut big,
        image::codecs::png::CompressionType::Fast,
        image::codecs::png::FilterType::NoFilter,
    )
    .write_image(&noise, 2600, 2500, image::ExtendedColorType::Rgb8)
    .unwrap();
    assert!((19_000_000..20_000_000).contains(&big.len()), "test image is {} bytes", big.len());
    let id = RequestId::parse("big").unwrap();
    producer.send(&model, &Request::image(id.clone(), ContentType::Png, big)).await.unwrap().await.unwrap();
    let results = ResultClient::connect(&redis.url()).await.unwrap();
    let answers = results.wait(&id, std::slice::from_ref(&model), Duration::from_secs(60)).await.unwrap();
    assert_eq!(answers[model.as_str()].status, Status::Ok, "{:?}", answers[model.as_str()]);

    let over = vec![0u8; 21_000_000];
    let refused = async { producer.send(&model, &Request::image(id, ContentType::Png, over)).await?.await }.await;
    assert!(matches!(refused, Err(SendError::Kafka(_))), "{refused:?}");
    assert!(worker.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vision_and_text_answer_one_request_in_parallel() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    let (vision, text) = (ModelName::parse("efficientnet_lite0").unwrap(), ModelName::parse("minilm").unwrap());
    broker.create_topics(&vision, 1).await;
    broker.create_topics(&text, 1).await;
    let workers = [
        Worker::start("efficientnet_lite0", &broker, &redis, &["--intra-op-threads", "1"]),
        Worker::start("minilm", &broker, &redis, &["--intra-op-threads", "1"]),
    ];
    for worker in &workers {
        worker.wait_until_serving(1).await;
    }
    let producer = FleetProducer::new(&broker.kafka(), "multimodal-test").unwrap();
    let ids: Vec<RequestId> = (0..4).map(|i| RequestId::parse(&format!("mm-{i}")).unwrap()).collect();
    for id in &ids {
        let sent = producer
            .send_multimodal(id, (&vision, ContentType::Png, photo("coffee")), (&text, "a cup of espresso on a saucer"))
            .await
            .unwrap();
        assert_eq!(sent.len(), 2);
        for delivery in sent {
            delivery.await.unwrap();
        }
    }
    let results = ResultClient::connect(&redis.url()).await.unwrap();
    for id in &ids {
        let answers = results.wait(id, &[vision.clone(), text.clone()], Duration::from_secs(60)).await.unwrap();
        assert_eq!(top(&answers[vision.as_str()]).1, "espresso");
        let embedding = &answers[text.as_str()].output.as_ref().unwrap()["embedding"];
        assert_eq!(embedding.as_array().unwrap().len(), 384);
    }
    // Each request was computed or answered from the feature cache, once.
    for (worker, model) in workers.iter().zip(["efficientnet_lite0", "minilm"]) {
        let scrape = worker.scrape().await;
        let hits = present_metric_value(&scrape, "fleet_feature_cache_hits_total", &[("model", model)]);
        let rows = present_metric_value(&scrape, "fleet_model_rows_total", &[("model", model)]);
        assert_eq!(hits + rows, 4.0, "{model}: {rows} computed, {hits} from the cache");
    }
    for mut worker in workers {
        assert!(worker.stop().success());
    }
}
