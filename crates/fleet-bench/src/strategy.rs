//! The two ways of cutting a workload into batches that the benchmark
//! compares. Pure: they return index lists, the model is run elsewhere.

use fleet_worker::config::BucketLimits;
use fleet_worker::stages::batch::bucket::BucketBatcher;

/// The seed service's way: arrival order, `size` at a time, each batch padded
/// to its longest text.
pub fn fifo(lens: &[usize], size: usize) -> Vec<Vec<usize>> {
    (0..lens.len()).collect::<Vec<_>>().chunks(size.max(1)).map(<[usize]>::to_vec).collect()
}

/// The worker's bucket batcher over the whole workload at once (a backlog:
/// every bucket can fill), released in the batcher's own order.
pub fn bucketed(lens: &[usize], limits: &BucketLimits) -> Vec<Vec<usize>> {
    let mut batcher = BucketBatcher::new(limits.clone());
    for (i, &len) in lens.iter().enumerate() {
        batcher.push(i, len, u64::MAX, 0);
    }
    let mut batches = Vec::new();
    while let Some(batch) = batcher.flush(0).batch {
        batches.push(batch.items);
    }
    batches
}

/// Real tokens / computed tokens over all batches.
pub fn padding_efficiency(lens: &[usize], batches: &[Vec<usize>]) -> f64 {
    let (real, computed) = batches.iter().fold((0usize, 0usize), |(real, computed), batch| {
        let longest = batch.iter().map(|&i| lens[i]).max().unwrap_or(0);
        (real + batch.iter().map(|&i| lens[i]).sum::<usize>(), computed + longest * batch.len())
    });
    real as f64 / computed.max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_worker::config::batching::default_boundaries;

    #[test]
    fn both_strategies_cover_every_text_once() {
        let lens: Vec<usize> = (0..500).map(|i| 3 + (i * 37) % 300).collect();
        let limits = BucketLimits {
            boundaries: default_boundaries(512),
            max_batch_size: 32,
            max_batch_tokens: 4096,
            max_attention_cells: 524_288,
            max_wait_ms: vec![5; default_boundaries(512).len()],
        };
        for batches in [fifo(&lens, 32), bucketed(&lens, &limits)] {
            let mut all: Vec<usize> = batches.concat();
            all.sort_unstable();
            assert_eq!(all, (0..500).collect::<Vec<_>>());
        }
        assert!(padding_efficiency(&lens, &bucketed(&lens, &limits)) > padding_efficiency(&lens, &fifo(&lens, 32)));
    }
}
