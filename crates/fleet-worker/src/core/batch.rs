//! A batch as it travels from the batch stage through the cache to the
//! engine: one length bucket's requests in FIFO order, with their token
//! lengths, from which a stage may take rows out (cancelled, cached).

/// One bucket's requests, FIFO order.
#[derive(Debug)]
pub struct Batch<T> {
    pub bucket: usize,
    pub items: Vec<T>,
    /// Token length of each item, in item order.
    pub lens: Vec<usize>,
}

impl<T> Batch<T> {
    /// Keeps only the rows `keep` accepts; returns how many were dropped.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) -> usize {
        self.remove_where(|item| !keep(item)).len()
    }

    /// Takes out the rows `remove` picks, in order.
    pub fn remove_where(&mut self, mut remove: impl FnMut(&T) -> bool) -> Vec<T> {
        let mut removed = Vec::new();
        let (items, lens) = std::mem::take(&mut self.items)
            .into_iter()
            .zip(std::mem::take(&mut self.lens))
            .filter_map(|(item, len)| {
                if remove(&item) {
                    removed.push(item);
                    None
                } else {
                    Some((item, len))
                }
            })
            .unzip();
        (self.items, self.lens) = (items, lens);
        removed
    }

    pub fn padded_len(&self) -> usize {
        self.lens.iter().copied().max().unwrap_or(0)
    }
    /// Rows × padded length: what the model computes.
    pub fn computed_tokens(&self) -> usize {
        self.items.len() * self.padded_len()
    }
    pub fn real_tokens(&self) -> usize {
        self.lens.iter().sum()
    }
    /// Real tokens / computed tokens.
    pub fn padding_efficiency(&self) -> f64 {
        self.real_tokens() as f64 / self.computed_tokens().max(1) as f64
    }
}
