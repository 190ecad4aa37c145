//! `config.toml` parsing and validation: each bad key refused by name.

use super::*;
use crate::config::signature;
use crate::config::Precision;

fn parse(raw: &str) -> Result<ModelConfig, String> {
    let config: ModelConfig = toml::from_str(raw).map_err(|e| e.to_string())?;
    config.validate().map_err(|(key, problem)| format!("{key} {problem}"))?;
    Ok(config)
}

const GOOD: &str = r#"
    kind = "text"
    [text]
    max_seq_len = 256
    [task]
    type = "embedding"
    [batching]
    max_batch_size = 32
    max_batch_tokens = 4096
    max_attention_cells = 524288
    max_wait_ms = 5
"#;

#[test]
fn defaults_fill_ttls_and_text_limits() {
    let c = parse(GOOD).unwrap();
    assert_eq!((c.ttl.request_ttl_ms, c.ttl.result_ttl_s, c.ttl.feature_ttl_s), (30_000, 30, 300));
    assert_eq!(c.ttl.bulk_request_ttl_ms, 24 * 3600 * 1000);
    let text = c.text().unwrap();
    assert!(text.truncate);
    assert_eq!(text.max_text_bytes, 65536);
}

#[test]
fn the_shipped_config_is_valid() {
    let raw = include_str!("../../../../../scripts/models/minilm.config.toml");
    parse(raw).unwrap();
}

#[test]
fn the_shipped_image_config_is_valid_and_batches_on_rows_only() {
    let c = parse(include_str!("../../../../../scripts/models/efficientnet_lite0.config.toml")).unwrap();
    let image = c.image().unwrap();
    assert_eq!(image.limits().formats.len(), 3);
    assert_eq!((image.geometry().crop, image.geometry().resize_shorter), (224, 256));
    let limits = c.batching.limits(c.max_input_len());
    assert_eq!(limits.boundaries, vec![1]);
    assert!(limits.fits(8, 1) && !limits.fits(9, 1));
}

#[test]
fn the_shipped_float_input_config_is_valid() {
    let c = parse(include_str!("../../../../../scripts/models/efficientnet_lite1.config.toml")).unwrap();
    let image = c.image().unwrap();
    assert_eq!((image.layout, image.size), (signature::ImageLayout::NchwFloat, 240));
    assert!(image.mean.is_some() && image.std.is_some());
    assert!(matches!(c.task, TaskConfig::Classification { activation: signature::Activation::Softmax, top_k: 5, .. }));
}

#[test]
fn image_configs_name_their_bad_key() {
    let image = include_str!("../../../../../scripts/models/efficientnet_lite0.config.toml");
    let err = parse(&image.replace(r#"formats = ["jpeg", "png", "webp"]"#, r#"formats = ["gif"]"#)).unwrap_err();
    assert!(err.starts_with("image.formats"), "{err}");
    let err = parse(&image.replace("resize_shorter = 256", "resize_shorter = 100")).unwrap_err();
    assert!(err.starts_with("image.size"), "{err}");
    let err = parse(&GOOD.replace("max_attention_cells = 524288", "")).unwrap_err();
    assert!(err.starts_with("batching.max_attention_cells"), "{err}");
}

#[test]
fn bad_values_name_their_key() {
    let err = parse(&GOOD.replace("max_batch_size = 32", "max_batch_size = 0")).unwrap_err();
    assert!(err.starts_with("batching.max_batch_size"), "{err}");
    let err = parse(&GOOD.replace("max_seq_len = 256", "max_seq_len = 1")).unwrap_err();
    assert!(err.starts_with("text.max_seq_len"), "{err}");
    let err = parse(&GOOD.replace("max_wait_ms = 5", "max_wait_ms = 5\nmax_wiat = 1")).unwrap_err();
    assert!(err.contains("max_wiat"), "{err}");
    let err = parse(&GOOD.replace("max_batch_tokens = 4096", "max_batch_tokens = 100")).unwrap_err();
    assert!(err.starts_with("batching.max_batch_tokens"), "{err}");
    let err = parse(&GOOD.replace("max_wait_ms = 5", "max_wait_ms = [1, 2]")).unwrap_err();
    assert!(err.starts_with("batching.max_wait_ms"), "{err}");
    let err = parse(&GOOD.replace("[text]\n    max_seq_len = 256\n", "")).unwrap_err();
    assert!(err.starts_with("text "), "{err}");
}

#[test]
fn the_device_section_defaults_and_validates() {
    let c = parse(GOOD).unwrap();
    assert_eq!((c.device.precision, c.device.memory_fraction), (Precision::Auto, 0.9));
    assert_eq!(c.device.activation_cost().estimate(4, 100), 0);
    let c = parse(&format!("{GOOD}\n[device]\nprecision = \"fp32\"\nbytes_per_token = 10\n")).unwrap();
    assert_eq!((c.device.precision, c.device.activation_cost().estimate(2, 5)), (Precision::Fp32, 100));
    let err = parse(&format!("{GOOD}\n[device]\nmemory_fraction = 1.5\n")).unwrap_err();
    assert!(err.starts_with("device.memory_fraction"), "{err}");
}

#[test]
fn per_bucket_waits_and_explicit_buckets() {
    let c = parse(&GOOD.replace("max_wait_ms = 5", "max_wait_ms = [1, 2, 3]\nbuckets = [16, 64, 256]")).unwrap();
    let limits = c.batching.limits(256);
    assert_eq!((limits.boundaries, limits.max_wait_ms), (vec![16, 64, 256], vec![1, 2, 3]));
    let default = parse(GOOD).unwrap().batching.limits(256);
    assert_eq!(default.boundaries.last(), Some(&256));
    assert!(default.max_wait_ms.iter().all(|&ms| ms == 5));
}

#[test]
fn the_signature_and_task_default_to_a_mean_pooled_normalised_embedding() {
    let c = parse(GOOD).unwrap();
    let text = c.text().unwrap();
    assert_eq!((text.pad_id, text.inputs.clone()), (0, vec![TextInput::InputIds, TextInput::AttentionMask]));
    assert_eq!(c.task, TaskConfig::Embedding { pooling: signature::Pooling::Mean, normalize: true });
    let c = parse(&GOOD.replace(
        "type = \"embedding\"",
        "type = \"classification\"\nlabels = \"classes.txt\"\nactivation = \"sigmoid\"\ntop_k = 2",
    ))
    .unwrap();
    assert_eq!(
        c.task,
        TaskConfig::Classification {
            labels: "classes.txt".into(),
            activation: signature::Activation::Sigmoid,
            top_k: 2
        }
    );
}

/// `config` with its `[task]` section's body replaced.
fn with_task(config: &str, body: &str) -> String {
    let (before, rest) = config.split_once("[task]").unwrap();
    let after = &rest[rest.find("[batching]").unwrap()..];
    format!("{before}[task]\n{body}\n{after}")
}

#[test]
fn a_rerank_task_fits_its_documents_in_one_batch() {
    // 256 tokens x 8 pairs = 2048 tokens, x 256 = 524288 cells: within GOOD's budgets.
    let c = parse(&with_task(GOOD, "type = \"rerank\"\nmax_documents = 8")).unwrap();
    assert_eq!(c.task, TaskConfig::Rerank { activation: signature::Activation::Sigmoid, max_documents: 8 });
    assert!(parse(&with_task(GOOD, "type = \"rerank\"\nmax_documents = 9")).is_err());
}

#[test]
fn each_bad_signature_key_is_refused_by_name() {
    let task = |body: &str| with_task(GOOD, body);
    let image = include_str!("../../../../../scripts/models/efficientnet_lite0.config.toml");
    let float = image.replace("layout = \"nhwc_uint8\"", "layout = \"nchw_float\"");
    let cases: Vec<(String, &str)> = vec![
        (GOOD.replace("[task]\n    type = \"embedding\"\n", ""), "task"),
        (task("type = \"ranking\""), "unknown variant `ranking`"),
        (task("type = \"rerank\""), "task.max_documents"),
        (task("type = \"rerank\"\nmax_documents = 4\nactivation = \"softmax\""), "task.activation"),
        (task("type = \"rerank\"\nmax_documents = 0"), "task.max_documents"),
        (with_task(image, "type = \"rerank\""), "task.type"),
        (task("type = \"embedding\"\npooling = \"max\""), "unknown variant `max`"),
        (task("type = \"embedding\"\npoolng = \"cls\""), "unknown field `poolng`"),
        (task("type = \"classification\"\ntop_k = 0"), "task.top_k"),
        (task("type = \"classification\"\nlabels = \"../labels.txt\""), "task.labels"),
        (task("type = \"classification\"\nactivation = \"relu\""), "unknown variant `relu`"),
        (GOOD.replace("max_seq_len = 256", "max_seq_len = 256\npad_id = -1"), "text.pad_id"),
        (GOOD.replace("max_seq_len = 256", "max_seq_len = 256\ninputs = [\"attention_mask\"]"), "text.inputs"),
        (
            GOOD.replace("max_seq_len = 256", "max_seq_len = 256\ninputs = [\"input_ids\", \"input_ids\"]"),
            "text.inputs",
        ),
        (GOOD.replace("max_seq_len = 256", "max_seq_len = 256\ninputs = [\"position_ids\"]"), "unknown variant"),
        (image.replace("layout = \"nhwc_uint8\"", "layout = \"nhwc_uint8\"\nmean = [0.5, 0.5, 0.5]"), "image.mean"),
        (float.clone(), "image.mean"),
        (float.replace("layout = \"nchw_float\"", "layout = \"nchw_float\"\nmean = [0.5, 0.5, 0.5]"), "image.std"),
        (
            float.replace(
                "layout = \"nchw_float\"",
                "layout = \"nchw_float\"\nmean = [0.5, 0.5, 0.5]\nstd = [0.5, 0.0, 0.5]",
            ),
            "image.std",
        ),
        (with_task(image, "type = \"embedding\"\npooling = \"mean\""), "task.pooling"),
    ];
    for (raw, key) in cases {
        let err = parse(&raw).unwrap_err();
        assert!(err.contains(key), "expected {key:?} in: {err}");
    }
    let ok = float.replace(
        "layout = \"nchw_float\"",
        "layout = \"nchw_float\"\nmean = [0.485, 0.456, 0.406]\nstd = [0.229, 0.224, 0.225]",
    );
    assert_eq!(parse(&ok).unwrap().image().unwrap().layout, signature::ImageLayout::NchwFloat);
}

#[test]
fn differences_name_the_changed_sections_and_ignore_the_pin() {
    let base = parse(GOOD).unwrap();
    let pinned = parse(&format!("version = 3\n{GOOD}")).unwrap();
    assert!(base.differences_from(&pinned).is_empty());
    let changed = parse(&GOOD.replace("max_wait_ms = 5", "max_wait_ms = 9\n    [ttl]\n    result_ttl_s = 60")).unwrap();
    assert_eq!(base.differences_from(&changed), vec!["[batching]", "[ttl]"]);
}

#[test]
fn limits_ttls_and_task_parameters_hand_over_live_kind_task_type_and_signature_do_not() {
    let base = parse(GOOD).unwrap();
    let live = parse(
        &with_task(GOOD, "type = \"embedding\"\nnormalize = false")
            .replace("max_seq_len = 256", "max_seq_len = 128\n    max_text_bytes = 100")
            .replace("max_batch_size = 32", "max_batch_size = 8")
            .replace("max_wait_ms = 5", "max_wait_ms = 9\n    [ttl]\n    result_ttl_s = 60"),
    )
    .unwrap();
    assert_eq!(base.differences_from(&live), vec!["[text]", "[task]", "[batching]", "[ttl]"]);
    assert!(base.unswappable_changes(&live).is_empty(), "{:?}", base.unswappable_changes(&live));

    let classifier = parse(&with_task(GOOD, "type = \"classification\"")).unwrap();
    assert_eq!(base.unswappable_changes(&classifier), vec!["task type embedding -> classification"]);
    let two_inputs = parse(&GOOD.replace(
        "max_seq_len = 256",
        "max_seq_len = 256\n    inputs = [\"input_ids\", \"attention_mask\", \"token_type_ids\"]",
    ));
    let changes = base.unswappable_changes(&two_inputs.unwrap());
    assert!(changes.len() == 1 && changes[0].starts_with("text.inputs"), "{changes:?}");

    let image = parse(include_str!("../../../../../scripts/models/efficientnet_lite0.config.toml")).unwrap();
    let mut resized = image.clone();
    resized.image.as_mut().unwrap().size = 300;
    assert_eq!(image.unswappable_changes(&resized), vec!["image.size 224 -> 300"]);
    let changes = base.unswappable_changes(&image);
    assert!(changes.iter().any(|c| c.starts_with("kind")), "{changes:?}");
}
