//! A model's signature in its `config.toml`: what its TorchScript module
//! takes (`[text] inputs`, `pad_id`; `[image] layout`, `mean`, `std`) and
//! what its output means (`[task]`). The worker validates it twice: here, on
//! its own (a bad value names its key), and at load, against the module on
//! real inputs (`stages::engine::signature`).

use serde::Deserialize;

/// `[task]`: what the module's output is, and how it becomes the answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum TaskConfig {
    /// One vector per input: `{"embedding": [...]}`.
    Embedding {
        /// How token outputs `[rows, tokens, dim]` become one vector; `none`
        /// when the module pools itself (`[rows, dim]`).
        #[serde(default)]
        pooling: Pooling,
        /// L2-normalise each vector.
        #[serde(default = "default_true")]
        normalize: bool,
    },
    /// Class scores `[rows, classes]`: the `top_k` best, with their labels.
    Classification {
        /// File in the version folder: one label per line, in class order,
        /// `<name>` or `<id><TAB><names>`.
        #[serde(default = "default_labels")]
        labels: String,
        /// What turns the module's outputs into scores; `none` when the
        /// module answers probabilities itself.
        #[serde(default)]
        activation: Activation,
        #[serde(default = "default_top_k")]
        top_k: usize,
    },
    /// A cross-encoder: each (query, document) pair of a request is one row
    /// scored `[rows, 1]`; the answer lists the documents best first. A
    /// request is `application/json` `{"query", "documents"}`.
    Rerank {
        /// What turns each pair's logit into its score: `sigmoid` (a
        /// relevance probability) or `none` (the raw logit).
        #[serde(default = "default_rerank_activation")]
        activation: Activation,
        /// Documents one request may carry: its pairs are batched together,
        /// so this many of `max_seq_len` must fit one batch's budgets.
        #[serde(default = "default_max_documents")]
        max_documents: usize,
    },
}

impl TaskConfig {
    /// A short tag of everything in the task that shapes an answer, so that
    /// feature-cache entries written under one task are never read as
    /// another's (a config edited between two runs of the same version).
    pub fn tag(&self) -> String {
        blake3::hash(format!("{self:?}").as_bytes()).to_hex()[..8].to_owned()
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Embedding { .. } => "embedding",
            Self::Classification { .. } => "classification",
            Self::Rerank { .. } => "rerank",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// The mean of the tokens the attention mask keeps (sentence-transformers' default).
    #[default]
    Mean,
    /// The first token's output (`[CLS]`).
    Cls,
    /// The last real token's output (decoder-style embedders).
    Last,
    /// The module returns one vector per row already.
    None,
}

impl Pooling {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mean => "mean",
            Self::Cls => "cls",
            Self::Last => "last",
            Self::None => "none",
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// One class per input: scores sum to 1.
    #[default]
    Softmax,
    /// Independent labels: each score in (0, 1).
    Sigmoid,
    /// The module's outputs are the scores.
    None,
}

/// One argument of a text module, in the order `[text] inputs` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TextInput {
    InputIds,
    /// 1 for a token, 0 for padding.
    AttentionMask,
    /// All zeros: one segment per input.
    TokenTypeIds,
}

pub fn default_text_inputs() -> Vec<TextInput> {
    vec![TextInput::InputIds, TextInput::AttentionMask]
}

/// How an image reaches the module.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageLayout {
    /// `[rows, size, size, 3]` uint8 RGB as decoded; the module normalises.
    #[default]
    NhwcUint8,
    /// `[rows, 3, size, size]` floats `(pixel / 255 - mean) / std` per
    /// channel, in the precision the module runs at (torchvision's way).
    NchwFloat,
}

/// Checks the task against the model kind (`text` = true for text models).
pub fn validate_task(task: &TaskConfig, text: bool) -> Result<(), (&'static str, String)> {
    match task {
        TaskConfig::Embedding { pooling, .. } if !text && *pooling != Pooling::None => Err((
            "task.pooling",
            format!("= {:?} pools tokens; an image embedding's module pools itself: use \"none\"", pooling.as_str()),
        )),
        TaskConfig::Classification { top_k, .. } if !(1..=1000).contains(top_k) => {
            Err(("task.top_k", format!("= {top_k} must be within 1..=1000")))
        }
        TaskConfig::Classification { labels, .. }
            if labels.is_empty() || labels.contains('/') || labels.contains('\\') || labels.starts_with('.') =>
        {
            Err(("task.labels", format!("= {labels:?} must name a file in the version folder")))
        }
        TaskConfig::Rerank { .. } if !text => {
            Err(("task.type", "= \"rerank\" scores text pairs: a text model only".into()))
        }
        TaskConfig::Rerank { activation: Activation::Softmax, .. } => Err((
            "task.activation",
            "= \"softmax\" over one score per pair is always 1: use \"sigmoid\" or \"none\"".into(),
        )),
        TaskConfig::Rerank { max_documents, .. } if !(1..=1024).contains(max_documents) => {
            Err(("task.max_documents", format!("= {max_documents} must be within 1..=1024")))
        }
        _ => Ok(()),
    }
}

/// Checks `[text] inputs`: `input_ids` once, no argument twice.
pub fn validate_text_inputs(inputs: &[TextInput]) -> Result<(), (&'static str, String)> {
    if inputs.iter().filter(|&&i| i == TextInput::InputIds).count() != 1 {
        return Err(("text.inputs", "must list \"input_ids\" exactly once".into()));
    }
    for (n, input) in inputs.iter().enumerate() {
        if inputs[..n].contains(input) {
            return Err(("text.inputs", format!("lists {input:?} twice")));
        }
    }
    Ok(())
}

/// Checks `[image] mean` and `std` against the layout.
pub fn validate_normalisation(
    layout: ImageLayout,
    mean: Option<[f32; 3]>,
    std: Option<[f32; 3]>,
) -> Result<(), (&'static str, String)> {
    match (layout, mean, std) {
        (ImageLayout::NhwcUint8, Some(_), _) => {
            Err(("image.mean", "applies to layout = \"nchw_float\" only (a uint8 module normalises itself)".into()))
        }
        (ImageLayout::NhwcUint8, _, Some(_)) => {
            Err(("image.std", "applies to layout = \"nchw_float\" only (a uint8 module normalises itself)".into()))
        }
        (ImageLayout::NchwFloat, None, _) => Err(("image.mean", "is required for layout = \"nchw_float\"".into())),
        (ImageLayout::NchwFloat, _, None) => Err(("image.std", "is required for layout = \"nchw_float\"".into())),
        (ImageLayout::NchwFloat, _, Some(std)) if std.iter().any(|s| !(s.is_finite() && *s > 0.0)) => {
            Err(("image.std", format!("= {std:?}: each must be above 0")))
        }
        (ImageLayout::NchwFloat, Some(mean), _) if mean.iter().any(|m| !m.is_finite()) => {
            Err(("image.mean", format!("= {mean:?}: each must be finite")))
        }
        _ => Ok(()),
    }
}

fn default_true() -> bool {
    true
}
fn default_labels() -> String {
    "labels.txt".into()
}
fn default_top_k() -> usize {
    5
}
fn default_rerank_activation() -> Activation {
    Activation::Sigmoid
}
fn default_max_documents() -> usize {
    64
}
