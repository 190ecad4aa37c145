//! A model's `[batching]` and the limits the batcher keeps to: the length
//! buckets (by default fine-grained up to the model's longest input) and
//! the three budgets of a batch (rows, tokens, attention cells). Validated
//! with the rest of the config, so a bad value names its key at load.

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchingConfig {
    pub max_batch_size: usize,
    /// Rows × padded length per batch (text models; required there).
    pub max_batch_tokens: Option<usize>,
    /// Rows × padded length² per batch: the attention memory budget (text
    /// models; required there).
    pub max_attention_cells: Option<usize>,
    /// One wait for every bucket, or one per bucket.
    pub max_wait_ms: OneOrPerBucket,
    /// Upper token bounds of the length buckets; default: fine-grained
    /// bounds up to max_seq_len ([`default_boundaries`]).
    pub buckets: Option<Vec<usize>>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum OneOrPerBucket {
    One(u64),
    PerBucket(Vec<u64>),
}

impl BatchingConfig {
    /// The batcher's limits for a model of `max_seq_len` tokens.
    pub fn limits(&self, max_seq_len: usize) -> BucketLimits {
        let boundaries = self.buckets.clone().unwrap_or_else(|| default_boundaries(max_seq_len));
        let max_wait_ms = match &self.max_wait_ms {
            OneOrPerBucket::One(ms) => vec![*ms; boundaries.len()],
            OneOrPerBucket::PerBucket(list) => list.clone(),
        };
        BucketLimits {
            boundaries,
            max_batch_size: self.max_batch_size,
            // Image models have one shape: only the row limit applies.
            max_batch_tokens: self.max_batch_tokens.unwrap_or(usize::MAX),
            max_attention_cells: self.max_attention_cells.unwrap_or(usize::MAX),
            max_wait_ms,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct BucketLimits {
    /// Upper token bounds of the buckets, ascending. A request goes to the
    /// first bucket whose bound is ≥ its length; longer ones to the last.
    pub boundaries: Vec<usize>,
    pub max_batch_size: usize,
    pub max_batch_tokens: usize,
    pub max_attention_cells: usize,
    /// One value per bucket.
    pub max_wait_ms: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key} {problem}")]
pub struct InvalidLimits {
    pub key: &'static str,
    pub problem: String,
}

impl BucketLimits {
    pub fn validate(&self, max_seq_len: usize) -> Result<(), InvalidLimits> {
        let invalid = |key, problem: String| Err(InvalidLimits { key, problem });
        if self.boundaries.is_empty() || self.boundaries.windows(2).any(|w| w[0] >= w[1]) || self.boundaries[0] == 0 {
            return invalid("batching.buckets", "must be non-empty, above 0 and strictly ascending".into());
        }
        if self.boundaries.last().is_some_and(|&last| last < max_seq_len) {
            return invalid("batching.buckets", format!("last bound must be at least max_seq_len ({max_seq_len})"));
        }
        if self.max_wait_ms.len() != self.boundaries.len() {
            return invalid(
                "batching.max_wait_ms",
                format!("needs one value or {} (one per bucket)", self.boundaries.len()),
            );
        }
        if self.max_batch_size == 0 {
            return invalid("batching.max_batch_size", "must be above 0".into());
        }
        if self.max_batch_tokens < max_seq_len {
            return invalid("batching.max_batch_tokens", format!("must hold one row of max_seq_len ({max_seq_len})"));
        }
        if self.max_attention_cells < max_seq_len * max_seq_len {
            return invalid(
                "batching.max_attention_cells",
                format!("must hold one row of max_seq_len² ({})", max_seq_len * max_seq_len),
            );
        }
        Ok(())
    }

    /// The row budget at `percent` of its size (at least 1).
    pub fn rows_at(&self, percent: u32) -> usize {
        share_of(self.max_batch_size, percent)
    }

    /// The token budget at `percent` of its size (at least 1).
    pub fn tokens_at(&self, percent: u32) -> usize {
        share_of(self.max_batch_tokens, percent)
    }

    /// The bucket a request of `len` tokens belongs to.
    pub fn bucket_of(&self, len: usize) -> usize {
        self.boundaries.iter().position(|&bound| len <= bound).unwrap_or(self.boundaries.len() - 1)
    }

    /// Whether `rows` rows padded to `padded_len` stay within every budget.
    pub fn fits(&self, rows: usize, padded_len: usize) -> bool {
        rows <= self.max_batch_size
            && rows * padded_len <= self.max_batch_tokens
            && rows * padded_len * padded_len <= self.max_attention_cells
    }
}

/// `percent` of `budget`, at least 1 (a budget of `usize::MAX` stays unbounded).
fn share_of(budget: usize, percent: u32) -> usize {
    if percent >= 100 {
        return budget;
    }
    ((budget as u128 * u128::from(percent) / 100) as usize).max(1)
}

/// Length-bucket bounds whose neighbours differ by at most ~12 %: every
/// length up to 16, then steps of 2, 4, 8, 16 and 32 tokens. Padding a batch
/// to its longest member then wastes at most about one step.
pub fn default_boundaries(max_seq_len: usize) -> Vec<usize> {
    let mut bounds: Vec<usize> = (1..=16).collect();
    let mut step = 2;
    let mut next = 16;
    while next < max_seq_len {
        for _ in 0..8 {
            next += step;
            bounds.push(next.min(max_seq_len));
            if next >= max_seq_len {
                break;
            }
        }
        step *= 2;
    }
    bounds.retain(|&b| b <= max_seq_len);
    bounds.dedup();
    if bounds.last() != Some(&max_seq_len) {
        bounds.push(max_seq_len);
    }
    bounds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_boundaries_are_fine_grained_and_end_at_max_seq_len() {
        let b = default_boundaries(512);
        assert_eq!(&b[..16], &(1..=16).collect::<Vec<_>>()[..]);
        assert_eq!(b.last(), Some(&512));
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        assert!(b.windows(2).filter(|w| w[0] >= 16).all(|w| (w[1] as f64) / (w[0] as f64) <= 1.126), "{b:?}");
        assert_eq!(default_boundaries(100).last(), Some(&100));
    }
}
