//! Text → token ids for the text engine, with the model's length policy.
//!
//! Padding is off on purpose: the batcher pads each batch to its longest row,
//! so a short text never pays for 128 (or 512) tokens. A text is first
//! encoded whole, which tells its true length; only one over `max_seq_len`
//! is encoded again by the tokenizer's own truncation, so the special tokens
//! survive it. Whether such a text is served truncated or refused is the
//! config's `truncate`. (Not one truncating encode: since tokenizers 0.23 it
//! stops tokenizing at the limit, so it cannot say by how much a text was
//! over, nor, for a tokenizer that adds no special tokens, that it was.)

use std::path::Path;
use tokenizers::{Encoding, Tokenizer, TruncationParams};

#[derive(Debug, thiserror::Error)]
pub enum TokenizeError {
    #[error("loading tokenizer {path}: {reason}")]
    Load { path: String, reason: String },
    #[error("tokenizer failed: {0}")]
    Encode(String),
    #[error("text is {tokens} tokens, over max_seq_len {max}")]
    TooLong { tokens: usize, max: usize },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokenized {
    pub ids: Vec<i64>,
    /// True when the text was cut to `max_seq_len` tokens.
    pub truncated: bool,
}

/// A (query, document) pair as one row: its ids and segment ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenizedPair {
    pub ids: Vec<i64>,
    pub type_ids: Vec<i64>,
    /// True when the pair was cut to `max_seq_len` (the longer side first).
    pub truncated: bool,
}

fn ids(raw: &[u32]) -> Vec<i64> {
    raw.iter().map(|&id| i64::from(id)).collect()
}

pub struct TextTokenizer {
    /// Without truncation: every text's true length.
    whole: Tokenizer,
    /// Truncating to `max_seq_len`, special tokens kept.
    truncating: Tokenizer,
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
        let mut whole = Tokenizer::from_bytes(bytes).map_err(|e| load_error(e.to_string()))?;
        whole.with_padding(None);
        whole.with_truncation(None).map_err(|e| load_error(e.to_string()))?;
        let mut truncating = whole.clone();
        truncating
            .with_truncation(Some(TruncationParams { max_length: max_seq_len, ..TruncationParams::default() }))
            .map_err(|e| load_error(e.to_string()))?;
        Ok(Self { whole, truncating, max_seq_len, truncate })
    }

    /// A (query, document) pair encoded as the tokenizer's template joins
    /// two segments ([CLS] q [SEP] d [SEP] for BERT), with the same length
    /// policy as [`tokenize`](Self::tokenize).
    pub fn tokenize_pair(&self, query: &str, document: &str) -> Result<TokenizedPair, TokenizeError> {
        let (encoding, truncated) = self.within_limit(|tokenizer| tokenizer.encode((query, document), true))?;
        Ok(TokenizedPair { ids: ids(encoding.get_ids()), type_ids: ids(encoding.get_type_ids()), truncated })
    }

    /// Ids run from 0 to this, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.whole.get_vocab_size(true)
    }

    pub fn tokenize(&self, text: &str) -> Result<Tokenized, TokenizeError> {
        let (encoding, truncated) = self.within_limit(|tokenizer| tokenizer.encode(text, true))?;
        Ok(Tokenized { ids: ids(encoding.get_ids()), truncated })
    }

    /// The length policy: `encode` with the whole tokenizer, which tells the
    /// input's true length; over `max_seq_len`, refused, or encoded again by
    /// the truncating tokenizer (then `true`).
    fn within_limit(
        &self,
        encode: impl Fn(&Tokenizer) -> tokenizers::Result<Encoding>,
    ) -> Result<(Encoding, bool), TokenizeError> {
        let encode = |tokenizer: &Tokenizer| encode(tokenizer).map_err(|e| TokenizeError::Encode(e.to_string()));
        let whole = encode(&self.whole)?;
        if whole.len() <= self.max_seq_len {
            return Ok((whole, false));
        }
        if !self.truncate {
            return Err(TokenizeError::TooLong { tokens: whole.len(), max: self.max_seq_len });
        }
        Ok((encode(&self.truncating)?, true))
    }
}
