//! A model's `config.toml` (how it is served: kind, signature and task,
//! batching, TTLs, device) and a version of it on disk. Validated at load; a
//! bad value names its key.

use super::batching::BatchingConfig;
use super::device::DeviceConfig;
use super::signature::{self, ImageLayout, TaskConfig, TextInput};
use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    Text,
    Image,
}

/// `models/<model>/config.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub kind: ModelKind,
    /// Serve this version instead of the highest one.
    pub version: Option<u64>,
    pub text: Option<TextConfig>,
    pub image: Option<ImageConfig>,
    /// What the module's output is (`[task]`, required).
    pub task: TaskConfig,
    pub batching: BatchingConfig,
    #[serde(default)]
    pub ttl: TtlConfig,
    #[serde(default)]
    pub device: DeviceConfig,
    /// Where each lane's answers go (`[answers]`, [`super::answers`]).
    #[serde(default)]
    pub answers: super::answers::AnswersConfig,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TextConfig {
    pub max_seq_len: usize,
    #[serde(default = "default_true")]
    pub truncate: bool,
    #[serde(default = "default_max_text_bytes")]
    pub max_text_bytes: usize,
    /// The tokenizer's padding token. Masked out, but it must be a valid id.
    #[serde(default)]
    pub pad_id: i64,
    /// The module's arguments, in order.
    #[serde(default = "signature::default_text_inputs")]
    pub inputs: Vec<TextInput>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageConfig {
    /// The model's input is `size × size` RGB.
    pub size: u32,
    /// Shorter side resized to this, then a centre crop of `size`.
    pub resize_shorter: u32,
    #[serde(default = "default_max_image_bytes")]
    pub max_image_bytes: usize,
    #[serde(default = "default_max_image_pixels")]
    pub max_image_pixels: u64,
    #[serde(default = "default_formats")]
    pub formats: Vec<String>,
    /// How pixels reach the module.
    #[serde(default)]
    pub layout: ImageLayout,
    /// Per RGB channel, in 0..1 units (`nchw_float` only).
    pub mean: Option<[f32; 3]>,
    pub std: Option<[f32; 3]>,
}

impl ImageConfig {
    pub fn limits(&self) -> fleet_image::ImageLimits {
        fleet_image::ImageLimits {
            max_bytes: self.max_image_bytes,
            max_pixels: self.max_image_pixels,
            formats: self.formats.iter().filter_map(|f| fleet_image::Format::from_name(f)).collect(),
        }
    }

    pub fn geometry(&self) -> fleet_image::InputGeometry {
        fleet_image::InputGeometry { resize_shorter: self.resize_shorter, crop: self.size }
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtlConfig {
    #[serde(default = "default_request_ttl_ms")]
    pub request_ttl_ms: u64,
    /// The bulk lane's deadline when the producer set none: a backfill is
    /// worth computing hours later, an interactive request is not.
    #[serde(default = "default_bulk_request_ttl_ms")]
    pub bulk_request_ttl_ms: u64,
    #[serde(default = "default_result_ttl_s")]
    pub result_ttl_s: u64,
    #[serde(default = "default_feature_ttl_s")]
    pub feature_ttl_s: u64,
}

/// The deadline a request gets when its producer set none, by lane:
/// `ce_time` + this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestTtls {
    pub interactive_ms: u64,
    pub bulk_ms: u64,
}

impl RequestTtls {
    pub fn of(self, lane: fleet_proto::Lane) -> u64 {
        match lane {
            fleet_proto::Lane::Interactive => self.interactive_ms,
            fleet_proto::Lane::Bulk => self.bulk_ms,
        }
    }
}

impl TtlConfig {
    pub fn request_ttls(&self) -> RequestTtls {
        RequestTtls { interactive_ms: self.request_ttl_ms, bulk_ms: self.bulk_request_ttl_ms }
    }
}

impl Default for TtlConfig {
    fn default() -> Self {
        Self {
            request_ttl_ms: default_request_ttl_ms(),
            bulk_request_ttl_ms: default_bulk_request_ttl_ms(),
            result_ttl_s: default_result_ttl_s(),
            feature_ttl_s: default_feature_ttl_s(),
        }
    }
}

fn default_true() -> bool {
    true
}
fn default_max_text_bytes() -> usize {
    64 * 1024
}
fn default_max_image_bytes() -> usize {
    20_000_000
}
fn default_max_image_pixels() -> u64 {
    50_000_000
}
fn default_formats() -> Vec<String> {
    fleet_image::Format::ALL.iter().map(|f| f.name().to_owned()).collect()
}
fn default_request_ttl_ms() -> u64 {
    30_000
}
fn default_bulk_request_ttl_ms() -> u64 {
    24 * 3600 * 1000
}
fn default_result_ttl_s() -> u64 {
    30
}
fn default_feature_ttl_s() -> u64 {
    300
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}: {source}")]
    Parse { path: PathBuf, source: toml::de::Error },
    #[error("{path}: {key} {problem}")]
    Invalid { path: PathBuf, key: &'static str, problem: String },
}

impl ModelConfig {
    /// The sections of `config.toml` in which `other` differs from this
    /// one, the version pin aside (a pin is the lifecycle's to follow).
    pub fn differences_from(&self, other: &ModelConfig) -> Vec<&'static str> {
        let sections = [
            ("kind", self.kind == other.kind),
            ("[text]", self.text == other.text),
            ("[image]", self.image == other.image),
            ("[task]", self.task == other.task),
            ("[batching]", self.batching == other.batching),
            ("[ttl]", self.ttl == other.ttl),
            ("[device]", self.device == other.device),
            ("[answers]", self.answers == other.answers),
        ];
        sections.into_iter().filter(|(_, same)| !same).map(|(name, _)| name).collect()
    }

    /// What in `next` cannot take over from this config while serving: the
    /// model's kind, its task's type and the module's signature (a text
    /// model's inputs, an image model's input size and layout). A worker
    /// serves those by restarting (a rolling update); everything else — input
    /// and batch limits, TTLs, the task's parameters, the device section —
    /// is handed over live with the version (`stages::handover`).
    pub fn unswappable_changes(&self, next: &ModelConfig) -> Vec<String> {
        let mut changes = Vec::new();
        if self.kind != next.kind {
            changes.push(format!("kind {:?} -> {:?}", self.kind, next.kind));
        }
        if self.task.name() != next.task.name() {
            changes.push(format!("task type {} -> {}", self.task.name(), next.task.name()));
        }
        if let (Some(now), Some(then)) = (&self.text, &next.text) {
            if now.inputs != then.inputs {
                changes.push(format!("text.inputs {:?} -> {:?}", now.inputs, then.inputs));
            }
        }
        if let (Some(now), Some(then)) = (&self.image, &next.image) {
            if now.size != then.size {
                changes.push(format!("image.size {} -> {}", now.size, then.size));
            }
            if now.layout != then.layout {
                changes.push(format!("image.layout {:?} -> {:?}", now.layout, then.layout));
            }
        }
        changes
    }

    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let raw =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        let config: Self =
            toml::from_str(&raw).map_err(|source| ConfigError::Parse { path: path.to_owned(), source })?;
        config.validate().map_err(|(key, problem)| ConfigError::Invalid { path: path.to_owned(), key, problem })?;
        Ok(config)
    }

    /// The text section; validation guarantees it for text models.
    pub fn text(&self) -> Option<&TextConfig> {
        self.text.as_ref()
    }

    /// The image section; validation guarantees it for image models.
    pub fn image(&self) -> Option<&ImageConfig> {
        self.image.as_ref()
    }

    /// The longest input in batcher units: tokens for text, 1 for an image.
    pub fn max_input_len(&self) -> usize {
        self.text.as_ref().map_or(1, |t| t.max_seq_len)
    }

    fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.kind == ModelKind::Text {
            let Some(text) = &self.text else {
                return Err(("text", "section is required for kind = \"text\"".into()));
            };
            if !(2..=8192).contains(&text.max_seq_len) {
                return Err(("text.max_seq_len", format!("= {} must be within 2..=8192", text.max_seq_len)));
            }
            if text.max_text_bytes == 0 {
                return Err(("text.max_text_bytes", "must be above 0".into()));
            }
            if text.pad_id < 0 {
                return Err(("text.pad_id", format!("= {} must be a token id (0 or above)", text.pad_id)));
            }
            signature::validate_text_inputs(&text.inputs)?;
            if self.batching.max_batch_tokens.is_none() {
                return Err(("batching.max_batch_tokens", "is required for text models".into()));
            }
            if self.batching.max_attention_cells.is_none() {
                return Err(("batching.max_attention_cells", "is required for text models".into()));
            }
        }
        if self.kind == ModelKind::Image {
            let Some(image) = &self.image else {
                return Err(("image", "section is required for kind = \"image\"".into()));
            };
            if !(1..=4096).contains(&image.size) || image.resize_shorter < image.size {
                return Err(("image.size", "must be within 1..=4096 and at most image.resize_shorter".into()));
            }
            if let Some(bad) = image.formats.iter().find(|f| fleet_image::Format::from_name(f).is_none()) {
                return Err(("image.formats", format!("has {bad:?}; known: jpeg, png, webp")));
            }
            if image.formats.is_empty() || image.max_image_bytes == 0 || image.max_image_pixels == 0 {
                return Err((
                    "image",
                    "formats, max_image_bytes and max_image_pixels must be non-empty/above 0".into(),
                ));
            }
            signature::validate_normalisation(image.layout, image.mean, image.std)?;
        }
        signature::validate_task(&self.task, self.kind == ModelKind::Text)?;
        if !(1..=4096).contains(&self.batching.max_batch_size) {
            return Err((
                "batching.max_batch_size",
                format!("= {} must be within 1..=4096", self.batching.max_batch_size),
            ));
        }
        let max_seq_len = self.max_input_len();
        let limits = self.batching.limits(max_seq_len);
        if limits.max_wait_ms.iter().any(|&ms| ms > 60_000) {
            return Err(("batching.max_wait_ms", "must be at most 60000".into()));
        }
        limits.validate(max_seq_len).map_err(|e| (e.key, e.problem))?;
        if let TaskConfig::Rerank { max_documents, .. } = self.task {
            // A request's pairs are one unit in the batcher: the most it may
            // carry, each of the longest length, must fit one batch.
            if !limits.fits(max_documents, max_seq_len) {
                return Err((
                    "task.max_documents",
                    format!(
                        "= {max_documents}: {max_documents} pairs of max_seq_len {max_seq_len} tokens must fit \
                         one batch (batching.max_batch_size, max_batch_tokens, max_attention_cells)"
                    ),
                ));
            }
        }
        if !(self.device.memory_fraction > 0.0 && self.device.memory_fraction <= 1.0) {
            return Err(("device.memory_fraction", format!("= {} must be within (0, 1]", self.device.memory_fraction)));
        }
        for (key, value) in [
            ("ttl.request_ttl_ms", self.ttl.request_ttl_ms),
            ("ttl.bulk_request_ttl_ms", self.ttl.bulk_request_ttl_ms),
            ("ttl.result_ttl_s", self.ttl.result_ttl_s),
            ("ttl.feature_ttl_s", self.ttl.feature_ttl_s),
        ] {
            if value == 0 {
                return Err((key, "must be above 0".into()));
            }
        }
        Ok(())
    }
}

/// One version of a model on disk (`models/<model>/<version>/`), with the
/// model's config, ready to be loaded.
#[derive(Debug, Clone)]
pub struct ModelVersion {
    pub name: fleet_proto::ModelName,
    pub version: u64,
    pub dir: PathBuf,
    pub config: ModelConfig,
}

impl ModelVersion {
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

#[cfg(test)]
mod tests;
