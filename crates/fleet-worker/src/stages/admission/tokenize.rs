//! Text → token ids for the text engine, with the model's length policy.
//!
//! Padding is off on purpose: the batcher pads each batch to its longest row,
//! so a short text never pays for 128 (or 512) tokens. Truncation is set to
//! the model's `max_seq_len` so the special tokens survive it; whether a
//! truncated text is served or refused is the config's `truncate`.

use std::path::Path;
use tokenizers::{Tokenizer, TruncationParams};

#[derive(Debug, thiserror::Error)]
pub enum TokenizeError {
    #[error("loading tokenizer {path}: {reason}")]
    Load { path: String, reason: String },
    #[error("tokenizer failed: {0}")]
    Encode(String),
    #[error("text is {tokens}+ tokens, over max_seq_len {max}")]
    TooLong { tokens: usize, max: usize },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokenized {
    pub ids: Vec<i64>,
    /// True when the text was cut to `max_seq_len` tokens.
    pub truncated: bool,
}

pub struct TextTokenizer {
    inner: Tokenizer,
    max_seq_len: usize,
    truncate: bool,
}

impl TextTokenizer {
    pub fn load(path: &Path, max_seq_len: usize, truncate: bool) -> Result<Self, TokenizeError> {
        let bytes = std::fs::read(path)
            .map_err(|e| TokenizeError::Load { path: path.display().to_string(), reason: e.to_string() })?;
        Self::from_bytes(path, &bytes, max_seq_len, truncate)
    }

    /// From tokenizer.json's bytes already read (`path` names it in errors),
    /// for a caller that also keeps the bytes.
    pub fn from_bytes(path: &Path, bytes: &[u8], max_seq_len: usize, truncate: bool) -> Result<Self, TokenizeError> {
        let load_error = |reason: String| TokenizeError::Load { path: path.display().to_string(), reason };
        let mut inner = Tokenizer::from_bytes(bytes).map_err(|e| load_error(e.to_string()))?;
        inner.with_padding(None);
        inner
            .with_truncation(Some(TruncationParams { max_length: max_seq_len, ..TruncationParams::default() }))
            .map_err(|e| load_error(e.to_string()))?;
        Ok(Self { inner, max_seq_len, truncate })
    }

    pub fn tokenize(&self, text: &str) -> Result<Tokenized, TokenizeError> {
        let encoding = self.inner.encode(text, true).map_err(|e| TokenizeError::Encode(e.to_string()))?;
        let truncated = !encoding.get_overflowing().is_empty();
        if truncated && !self.truncate {
            let tokens = self.max_seq_len + encoding.get_overflowing().iter().map(|o| o.len()).sum::<usize>();
            return Err(TokenizeError::TooLong { tokens, max: self.max_seq_len });
        }
        Ok(Tokenized { ids: encoding.get_ids().iter().map(|&id| i64::from(id)).collect(), truncated })
    }
}
