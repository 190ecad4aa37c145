//! The served model of either kind behind one face: what one request's input
//! is, how the model is warmed up, and its outputs as answer JSON. The
//! pipeline batches and retries without knowing which kind it serves.

use crate::cache::{pixels_hash, tokens_hash};
use crate::config::ModelKind;
use crate::engine::{EngineError, ImageEngine, TextEngine};
use crate::repository::ModelVersion;
use serde_json::{json, Value};
use tch::Device;

/// One request's exact model input.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelInput {
    Tokens {
        ids: Vec<i64>,
        truncated: bool,
    },
    /// `size × size × 3` RGB bytes.
    Pixels(Vec<u8>),
}

impl ModelInput {
    /// Length in batcher units: tokens, or 1 for an image (all one shape).
    pub fn len(&self) -> usize {
        match self {
            Self::Tokens { ids, .. } => ids.len(),
            Self::Pixels(_) => 1,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The feature-cache address of this input.
    pub fn hash(&self) -> String {
        match self {
            Self::Tokens { ids, .. } => tokens_hash(ids),
            Self::Pixels(pixels) => pixels_hash(pixels),
        }
    }
}

pub enum Model {
    Text(TextEngine),
    Image { engine: ImageEngine, top_k: usize, size: u32 },
}

impl Model {
    /// Loads the version's model.pt (and labels for image models).
    pub fn load(version: &ModelVersion, device: Device) -> Result<Self, EngineError> {
        let model = version.file("model.pt");
        match version.config.kind {
            ModelKind::Text => Ok(Self::Text(TextEngine::load(&model, device)?)),
            ModelKind::Image => {
                let image = version.config.image().expect("validated: image models have [image]");
                let engine = ImageEngine::load(&model, &version.file("labels.txt"), image.size, device)?;
                Ok(Self::Image { engine, top_k: image.top_k, size: image.size })
            }
        }
    }

    /// Runs every input shape class once, so the first real requests do not
    /// pay for libtorch's first-call optimisation (+25–35 ms per new shape).
    pub fn warm_up(&self, max_batch_size: usize) -> Result<(), EngineError> {
        match self {
            Self::Text(engine) => {
                for len in [8usize, 32, 128] {
                    let row: Vec<i64> =
                        std::iter::once(101).chain(std::iter::repeat_n(1000, len - 2)).chain([102]).collect();
                    engine.embed(&[&row, &row[..len / 2]])?;
                }
            }
            Self::Image { engine, size, .. } => {
                // Every batch size is its own shape for an image model.
                let image = vec![128u8; (*size as usize).pow(2) * 3];
                for rows in 1..=max_batch_size {
                    engine.classify(&vec![image.as_slice(); rows], 1)?;
                }
            }
        }
        Ok(())
    }

    /// One output per input, in order, as the answer's `output` JSON.
    pub fn infer(&self, inputs: &[&ModelInput]) -> Result<Vec<Value>, EngineError> {
        match self {
            Self::Text(engine) => {
                let rows: Vec<&[i64]> = inputs.iter().map(|input| token_ids(input)).collect();
                let embeddings = engine.embed(&rows)?;
                Ok(inputs
                    .iter()
                    .zip(embeddings)
                    .map(|(input, embedding)| {
                        let truncated = matches!(input, ModelInput::Tokens { truncated: true, .. });
                        json!({ "embedding": embedding, "tokens": input.len(), "truncated": truncated })
                    })
                    .collect())
            }
            Self::Image { engine, top_k, .. } => {
                let images: Vec<&[u8]> = inputs.iter().map(|input| pixels(input)).collect();
                let scored = engine.classify(&images, *top_k)?;
                Ok(scored
                    .into_iter()
                    .map(|classes| {
                        let classes: Vec<Value> = classes
                            .into_iter()
                            .map(|c| {
                                let label = &engine.labels[c.index];
                                json!({
                                    "label": label.name(),
                                    "synset": label.synset,
                                    "index": c.index,
                                    "probability": c.probability,
                                })
                            })
                            .collect();
                        json!({ "classes": classes })
                    })
                    .collect())
            }
        }
    }
}

// A batch holds inputs of its model's kind only (one model per worker), so
// the other variant is an empty row the model refuses rather than a panic.
fn token_ids(input: &ModelInput) -> &[i64] {
    match input {
        ModelInput::Tokens { ids, .. } => ids,
        ModelInput::Pixels(_) => &[],
    }
}

fn pixels(input: &ModelInput) -> &[u8] {
    match input {
        ModelInput::Pixels(pixels) => pixels,
        ModelInput::Tokens { .. } => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_is_one_batcher_unit_and_hashes_by_its_pixels() {
        let a = ModelInput::Pixels(vec![1, 2, 3]);
        assert_eq!(a.len(), 1);
        assert_eq!(a.hash(), ModelInput::Pixels(vec![1, 2, 3]).hash());
        assert_ne!(a.hash(), ModelInput::Pixels(vec![1, 2, 4]).hash());
        let text = ModelInput::Tokens { ids: vec![101, 7, 102], truncated: false };
        assert_eq!(text.len(), 3);
        assert_eq!(text.hash(), tokens_hash(&[101, 7, 102]));
    }
}
