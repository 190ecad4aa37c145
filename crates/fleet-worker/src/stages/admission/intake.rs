//! How a model takes its inputs, one variant per kind: the limits
//! admission judges a message by, and what turns an admitted one into the
//! model's input (a tokenizer, or an image decode under the memory budget).
//! Built from a version's config; it also gives the real inputs a version is
//! warmed up and judged on.

use super::decode_budget::DecodeBudget;
use super::tokenize::TextTokenizer;
use crate::config::{ModelKind, ModelVersion, TaskConfig};
use crate::core::input::ModelInput;
use anyhow::{Context, Result};
use fleet_image::{ImageLimits, InputGeometry};
use std::sync::Arc;
use tokio::sync::Semaphore;

pub enum Intake {
    /// Tokenized inline: microseconds per request. `documents`: a rerank
    /// model's most documents per request (its requests are
    /// `{"query", "documents"}` pairs); `None` for one text per request.
    Text { max_text_bytes: usize, tokenizer: Box<TextTokenizer>, documents: Option<usize> },
    /// Decoded on blocking threads after the header passed the limits.
    Image { limits: ImageLimits, decoding: Decoding },
}

/// What an image decode needs: where it crops to, and the budget and slots
/// every decode of the worker shares.
#[derive(Debug, Clone)]
pub struct Decoding {
    pub geometry: InputGeometry,
    /// Each decode holds its share of the memory budget while it runs.
    pub budget: DecodeBudget,
    /// At most this many decodes at once.
    pub slots: Arc<Semaphore>,
}

/// The decode settings of the worker (`--decode-budget-bytes`, `--decode-threads`).
#[derive(Debug, Clone, Copy)]
pub struct DecodeSettings {
    pub budget_bytes: u64,
    pub threads: usize,
}

/// Real inputs a version is loaded with.
pub struct Samples {
    /// One input to warm every bucket's shape with.
    pub sample: ModelInput,
    /// Inputs a lower precision must agree with fp32 on.
    pub probes: Vec<ModelInput>,
    /// tokenizer.json's bytes (text models): later versions must match.
    pub tokenizer: Option<Vec<u8>>,
}

impl Intake {
    /// An image model's decoding (budget, slots, geometry).
    pub fn decoding(&self) -> Option<&Decoding> {
        match self {
            Self::Image { decoding, .. } => Some(decoding),
            Self::Text { .. } => None,
        }
    }

    /// How `version` takes its inputs. An image model's decodes share
    /// `shared`'s memory budget and slots when given (the intake a version
    /// takes over from): the worker's budget is one, whichever version
    /// decodes.
    pub fn for_version(
        version: &ModelVersion,
        decode: DecodeSettings,
        shared: Option<&Decoding>,
    ) -> Result<(Self, Samples)> {
        match version.config.kind {
            ModelKind::Text => {
                let text = version.config.text().context("text model without [text]")?;
                let path = version.file("tokenizer.json");
                let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                let tokenizer = TextTokenizer::from_bytes(&path, &bytes, text.max_seq_len, text.truncate)?;
                anyhow::ensure!(
                    (text.pad_id as usize) < tokenizer.vocab_size(),
                    "text.pad_id = {} is not an id of {} (its vocabulary has {} ids)",
                    text.pad_id,
                    path.display(),
                    tokenizer.vocab_size()
                );
                let tokens = |text: &str| -> Result<ModelInput> {
                    let tokens = tokenizer.tokenize(text)?;
                    Ok(ModelInput::Tokens { ids: tokens.ids, truncated: false })
                };
                let samples = Samples {
                    sample: tokens(WARM_UP_TEXT)?,
                    probes: PROBE_TEXTS.iter().map(|text| tokens(text)).collect::<Result<_>>()?,
                    tokenizer: Some(bytes),
                };
                let documents = match version.config.task {
                    TaskConfig::Rerank { max_documents, .. } => Some(max_documents),
                    _ => None,
                };
                let intake =
                    Self::Text { max_text_bytes: text.max_text_bytes, tokenizer: Box::new(tokenizer), documents };
                Ok((intake, samples))
            }
            ModelKind::Image => {
                let image = version.config.image().context("image model without [image]")?;
                let decoding = Decoding {
                    geometry: image.geometry(),
                    budget: shared.map_or_else(|| DecodeBudget::new(decode.budget_bytes), |d| d.budget.clone()),
                    slots: shared.map_or_else(|| Arc::new(Semaphore::new(decode.threads.max(1))), |d| d.slots.clone()),
                };
                let photo = ModelInput::Pixels(fleet_image::synthetic::photo(image.size, image.size, 1).pixels);
                let samples = Samples { probes: vec![photo.clone()], sample: photo, tokenizer: None };
                Ok((Self::Image { limits: image.limits(), decoding }, samples))
            }
        }
    }
}

/// Real text for warm-up batches: each bucket's rows are its tokens repeated
/// to the bucket's length.
const WARM_UP_TEXT: &str = "A fleet of workers reads requests from Kafka, batches them by length, \
    and writes each answer to Redis before its client gives up waiting.";

/// Texts of several lengths and kinds a lower precision's embeddings must
/// match fp32's on (cosine per row), run as one padded batch.
const PROBE_TEXTS: &[&str] = &[
    WARM_UP_TEXT,
    "A man is eating food.",
    "Stock markets fell sharply on Tuesday after the central bank raised interest rates by half a point, \
     the largest increase in two decades, citing inflation that has proved more persistent than expected.",
    "How do I reset my password?",
    "The cat sat quietly on the warm windowsill, watching the rain trace slow lines down the glass while \
     the kettle began to whistle in the kitchen behind her.",
    "ok",
];
