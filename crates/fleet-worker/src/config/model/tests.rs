//! `config.toml` parsing and validation: each bad key refused by name.

use super::*;

fn parse(raw: &str) -> Result<ModelConfig, String> {
    let config: ModelConfig = toml::from_str(raw).map_err(|e| e.to_string())?;
    config.validate().map_err(|(key, problem)| format!("{key} {problem}"))?;
    Ok(config)
}

const GOOD: &str = r#"
    kind = "text"
    [text]
    max_seq_len = 256
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
