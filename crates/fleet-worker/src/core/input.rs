//! One request's exact model input, and the rows it puts in a batch: a
//! text is one row, an image one, a rerank request one row per document.

#[derive(Debug, Clone, PartialEq)]
pub enum ModelInput {
    Tokens {
        ids: Vec<i64>,
        truncated: bool,
    },
    /// `size × size × 3` RGB bytes.
    Pixels(Vec<u8>),
    /// A rerank request: one (query, document) pair per row, each with its
    /// segment ids (0 for the query's tokens, 1 for the document's).
    Pairs {
        rows: Vec<PairRow>,
        /// Some pair was cut to `max_seq_len`.
        truncated: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairRow {
    pub ids: Vec<i64>,
    pub type_ids: Vec<i64>,
}

/// One row of a text batch: its ids, and its segment ids when it has more
/// than one segment.
#[derive(Debug, Clone, Copy)]
pub struct TextRow<'a> {
    pub ids: &'a [i64],
    pub type_ids: Option<&'a [i64]>,
}

impl ModelInput {
    /// Length in batcher units: tokens (the longest pair's, for pairs), or
    /// 1 for an image (all one shape).
    pub fn len(&self) -> usize {
        match self {
            Self::Tokens { ids, .. } => ids.len(),
            Self::Pixels(_) => 1,
            Self::Pairs { rows, .. } => rows.iter().map(|r| r.ids.len()).max().unwrap_or(0),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rows it puts in a batch.
    pub fn rows(&self) -> usize {
        match self {
            Self::Pairs { rows, .. } => rows.len(),
            Self::Tokens { .. } | Self::Pixels(_) => 1,
        }
    }

    /// The tokens it really holds (its rows' unpadded lengths; 1 for an
    /// image): the padding efficiency's numerator.
    pub fn real_tokens(&self) -> usize {
        match self {
            Self::Tokens { ids, .. } => ids.len(),
            Self::Pixels(_) => 1,
            Self::Pairs { rows, .. } => rows.iter().map(|r| r.ids.len()).sum(),
        }
    }

    /// What a text input's answer adds (for pairs: the longest pair).
    pub fn text_fields(&self) -> Option<TextFields> {
        match self {
            Self::Tokens { ids, truncated } => Some(TextFields { tokens: ids.len(), truncated: *truncated }),
            Self::Pairs { truncated, .. } => Some(TextFields { tokens: self.len(), truncated: *truncated }),
            Self::Pixels(_) => None,
        }
    }

    /// The feature-cache address of this input.
    pub fn hash(&self) -> String {
        match self {
            Self::Tokens { ids, .. } => tokens_hash(ids),
            Self::Pixels(pixels) => pixels_hash(pixels),
            Self::Pairs { rows, .. } => {
                // Each row's ids and segments, with the row count and lengths
                // first so that no two different requests read the same.
                let mut all = vec![rows.len() as i64];
                all.extend(rows.iter().map(|r| r.ids.len() as i64));
                for row in rows {
                    all.extend_from_slice(&row.ids);
                    all.extend_from_slice(&row.type_ids);
                }
                tokens_hash(&all)
            }
        }
    }

    /// Its text rows (none for an image).
    pub fn text_rows(&self) -> Vec<TextRow<'_>> {
        match self {
            Self::Tokens { ids, .. } => vec![TextRow { ids, type_ids: None }],
            Self::Pairs { rows, .. } => {
                rows.iter().map(|r| TextRow { ids: &r.ids, type_ids: Some(&r.type_ids) }).collect()
            }
            Self::Pixels(_) => Vec::new(),
        }
    }

    /// Its pixels (empty for text: a batch holds one kind only, so the model
    /// refuses the row rather than panic).
    pub fn pixels(&self) -> &[u8] {
        match self {
            Self::Pixels(pixels) => pixels,
            Self::Tokens { .. } | Self::Pairs { .. } => &[],
        }
    }
}

/// A sample input made `len` batcher units long: for text, its first and
/// last tokens ([CLS], [SEP]) around its body repeated; images are one unit.
pub fn stretch(sample: &ModelInput, len: usize) -> ModelInput {
    match sample {
        ModelInput::Tokens { ids, .. } if ids.len() >= 2 && len >= 2 => {
            let body = &ids[1..ids.len() - 1];
            let filler: Vec<i64> = if body.is_empty() { vec![ids[0]] } else { body.to_vec() };
            let mut row = Vec::with_capacity(len);
            row.push(ids[0]);
            row.extend(filler.iter().cycle().take(len - 2));
            row.push(ids[ids.len() - 1]);
            ModelInput::Tokens { ids: row, truncated: false }
        }
        ModelInput::Tokens { ids, .. } => {
            ModelInput::Tokens { ids: ids.iter().copied().cycle().take(len.max(1)).collect(), truncated: false }
        }
        ModelInput::Pixels(_) | ModelInput::Pairs { .. } => sample.clone(),
    }
}

/// What a text answer adds: the input's length in tokens, and whether it was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextFields {
    pub tokens: usize,
    pub truncated: bool,
}

/// 128 bits of BLAKE3 over the token ids: collisions are not a concern.
pub fn tokens_hash(ids: &[i64]) -> String {
    let mut hasher = blake3::Hasher::new();
    for id in ids {
        hasher.update(&id.to_le_bytes());
    }
    hasher.finalize().to_hex()[..32].to_owned()
}

/// The same over an image model's input pixels (after decode and crop, so
/// re-encodings of one photo that decode alike share an entry).
pub fn pixels_hash(pixels: &[u8]) -> String {
    blake3::hash(pixels).to_hex()[..32].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_stable_and_tells_inputs_apart() {
        assert_eq!(tokens_hash(&[101, 2023, 102]), tokens_hash(&[101, 2023, 102]));
        assert_ne!(tokens_hash(&[101, 2023, 102]), tokens_hash(&[101, 2024, 102]));
        assert_ne!(tokens_hash(&[1]), tokens_hash(&[1, 0]));
        assert_eq!(tokens_hash(&[]).len(), 32);
    }

    #[test]
    fn an_image_is_one_batcher_unit_and_hashes_by_its_pixels() {
        let a = ModelInput::Pixels(vec![1, 2, 3]);
        assert_eq!((a.len(), a.rows()), (1, 1));
        assert_eq!(a.hash(), ModelInput::Pixels(vec![1, 2, 3]).hash());
        assert_ne!(a.hash(), ModelInput::Pixels(vec![1, 2, 4]).hash());
        let text = ModelInput::Tokens { ids: vec![101, 7, 102], truncated: false };
        assert_eq!(text.len(), 3);
        assert_eq!(text.hash(), tokens_hash(&[101, 7, 102]));
    }

    #[test]
    fn pairs_are_a_row_each_as_long_as_the_longest() {
        let pair = |ids: Vec<i64>, second: usize| PairRow {
            type_ids: (0..ids.len()).map(|i| i64::from(i >= ids.len() - second)).collect(),
            ids,
        };
        let input = ModelInput::Pairs {
            rows: vec![pair(vec![101, 7, 102, 8, 102], 2), pair(vec![101, 7, 102, 9, 9, 102], 3)],
            truncated: false,
        };
        assert_eq!((input.len(), input.rows(), input.real_tokens()), (6, 2, 11));
        assert_eq!(input.text_fields(), Some(TextFields { tokens: 6, truncated: false }));
        let rows = input.text_rows();
        assert_eq!(rows[1].type_ids, Some(&[0, 0, 0, 1, 1, 1][..]));
        let swapped = ModelInput::Pairs {
            rows: vec![pair(vec![101, 7, 102, 9, 9, 102], 3), pair(vec![101, 7, 102, 8, 102], 2)],
            truncated: false,
        };
        assert_ne!(input.hash(), swapped.hash(), "the order of the documents is part of the request");
    }

    #[test]
    fn a_sample_stretches_to_any_length_keeping_its_ends() {
        let sample = ModelInput::Tokens { ids: vec![101, 7, 8, 102], truncated: true };
        let ids = |input: ModelInput| match input {
            ModelInput::Tokens { ids, .. } => ids,
            other => panic!("{other:?}"),
        };
        assert_eq!(ids(stretch(&sample, 7)), vec![101, 7, 8, 7, 8, 7, 102]);
        assert_eq!(ids(stretch(&sample, 2)), vec![101, 102]);
        assert_eq!(ids(stretch(&sample, 1)), vec![101]);
        let image = ModelInput::Pixels(vec![1, 2, 3]);
        assert_eq!(stretch(&image, 40), image);
    }
}
