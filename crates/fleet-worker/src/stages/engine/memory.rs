//! Device memory per batch, checked at the engine boundary before the model
//! runs. A batch's activations grow with its rows, its tokens and (through
//! attention) rows × length², so the model's `[device]` config gives a cost
//! for each; a batch whose estimate exceeds the worker's limit is treated
//! exactly like one that ran out of memory: split and retried
//! (`split::run_with_split`). A real out-of-memory from libtorch (the
//! estimate was too low) takes the same path.
//!
//! The limit: on CUDA, `memory_fraction` of the device's memory minus what
//! is in use once the model is loaded (weights, CUDA context, other
//! processes); on CPU none unless `--engine-memory-limit-bytes` sets one.

use crate::config::device::ActivationCost;

/// The estimate and the limit, at the engine boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryGuard {
    pub cost: ActivationCost,
    /// Bytes a batch may use; `None`: no limit (CPU default).
    pub limit: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a batch of {rows} rows x {padded_len} needs about {needed} bytes, the limit is {limit}")]
pub struct OverLimit {
    pub rows: usize,
    pub padded_len: usize,
    pub needed: u64,
    pub limit: u64,
}

impl MemoryGuard {
    pub const NONE: Self = Self {
        cost: ActivationCost { bytes_per_row: 0, bytes_per_token: 0, bytes_per_attention_cell: 0 },
        limit: None,
    };

    pub fn check(&self, rows: usize, padded_len: usize) -> Result<(), OverLimit> {
        let Some(limit) = self.limit else { return Ok(()) };
        let needed = self.cost.estimate(rows, padded_len);
        if needed > limit {
            return Err(OverLimit { rows, padded_len, needed, limit });
        }
        Ok(())
    }
}

/// The activation limit on a device of `total` bytes, `used` of them in use
/// after loading, when the worker may use `fraction` of it.
pub fn device_limit(total: u64, used: u64, fraction: f64) -> u64 {
    let allowed = (total as f64 * fraction.clamp(0.0, 1.0)) as u64;
    allowed.saturating_sub(used)
}

/// Whether a libtorch error is an allocation failure: CUDA's caching
/// allocator ("CUDA out of memory") or the CPU allocator ("can't allocate
/// memory"). Those are split and retried; any other error is not.
pub fn is_out_of_memory(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower.contains("out of memory") || lower.contains("can't allocate memory") || lower.contains("outofmemoryerror")
}

/// (total, used) bytes of one CUDA device, read once through NVML (loaded
/// at run time: a CPU worker needs no NVIDIA driver).
pub fn device_memory(index: u32) -> Result<(u64, u64), nvml_wrapper::error::NvmlError> {
    let memory = nvml_wrapper::Nvml::init()?.device_by_index(index)?.memory_info()?;
    Ok((memory.total, memory.used))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: ActivationCost = ActivationCost { bytes_per_row: 0, bytes_per_token: 100, bytes_per_attention_cell: 1 };

    #[test]
    fn attention_makes_long_rows_cost_quadratically() {
        assert_eq!(TEXT.estimate(1, 10), 1_000 + 100);
        assert_eq!(TEXT.estimate(2, 10), 2 * (1_000 + 100));
        assert_eq!(TEXT.estimate(1, 1000), 100_000 + 1_000_000);
        assert_eq!(ActivationCost::default().estimate(usize::MAX, usize::MAX), 0);
        let huge = ActivationCost { bytes_per_row: u64::MAX, ..TEXT };
        assert_eq!(huge.estimate(3, 3), u64::MAX, "saturates instead of wrapping");
    }

    #[test]
    fn the_guard_refuses_only_over_its_limit() {
        let guard = MemoryGuard { cost: TEXT, limit: Some(2_200) };
        assert!(guard.check(2, 10).is_ok());
        let over = guard.check(3, 10).unwrap_err();
        assert_eq!((over.needed, over.limit), (3_300, 2_200));
        assert!(MemoryGuard::NONE.check(1_000, 1_000).is_ok());
    }

    #[test]
    fn the_device_limit_leaves_the_unused_share_minus_what_is_taken() {
        assert_eq!(device_limit(100, 30, 0.9), 60);
        assert_eq!(device_limit(100, 95, 0.9), 0);
        assert_eq!(device_limit(100, 0, 7.0), 100, "a fraction above 1 is 1");
    }

    #[test]
    fn allocation_failures_are_recognised_and_nothing_else() {
        assert!(is_out_of_memory("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.35 GiB total capacity"));
        assert!(is_out_of_memory("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory: you tried to allocate 1000 bytes"));
        assert!(!is_out_of_memory("Expected all tensors to be on the same device"));
    }

    #[test]
    fn a_half_precision_batch_is_estimated_at_half_the_bytes() {
        let fp32 = ActivationCost { bytes_per_row: 10, bytes_per_token: 16384, bytes_per_attention_cell: 96 };
        let half = fp32.scaled(2, 4);
        assert_eq!(half, ActivationCost { bytes_per_row: 5, bytes_per_token: 8192, bytes_per_attention_cell: 48 });
        assert_eq!(half.estimate(4, 100) * 2, fp32.estimate(4, 100));
        assert_eq!(fp32.scaled(4, 4), fp32);
    }
}
