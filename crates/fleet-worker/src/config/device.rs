//! A model's `[device]`: the precision it is served in, the share of device
//! memory the worker may use, and what a batch's activations cost by shape
//! (the engine checks a batch against it before the model runs,
//! `stages::engine::memory`).

use serde::Deserialize;

/// `[device]`: precision and device memory. The memory fraction applies on
/// CUDA; on CPU the memory limit is `--engine-memory-limit-bytes`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    #[serde(default)]
    pub precision: Precision,
    /// Share of the device's memory the worker may use (weights, context and
    /// batches together).
    #[serde(default = "default_memory_fraction")]
    pub memory_fraction: f64,
    /// Activation memory estimate per batch, for fp32: per row, per token
    /// (rows × padded length) and per attention cell (rows × padded
    /// length²). Halved for a version served in bf16 or fp16.
    #[serde(default)]
    pub bytes_per_row: u64,
    #[serde(default)]
    pub bytes_per_token: u64,
    #[serde(default)]
    pub bytes_per_attention_cell: u64,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            precision: Precision::default(),
            memory_fraction: default_memory_fraction(),
            bytes_per_row: 0,
            bytes_per_token: 0,
            bytes_per_attention_cell: 0,
        }
    }
}

impl DeviceConfig {
    /// The activation cost this config estimates, for fp32.
    pub fn activation_cost(&self) -> ActivationCost {
        ActivationCost {
            bytes_per_row: self.bytes_per_row,
            bytes_per_token: self.bytes_per_token,
            bytes_per_attention_cell: self.bytes_per_attention_cell,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    /// bf16 on a CPU with AVX-512 BF16 or AMX, fp16 on CUDA, each when its
    /// outputs match fp32's on real inputs (`stages::engine::precision_choice::choose`) and, on a
    /// CPU, it is faster there (`keep_if_faster`); else fp32.
    #[default]
    Auto,
    Fp32,
    /// bf16 even where its outputs differ from fp32's (logged), or the CPU
    /// computes it slowly; fp32 only where the model cannot run in it.
    Bf16,
    /// fp16, likewise (meant for CUDA).
    Fp16,
}

/// Activation bytes a batch needs, by its shape. Zero costs estimate zero:
/// then only a real out-of-memory error triggers a split.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActivationCost {
    pub bytes_per_row: u64,
    pub bytes_per_token: u64,
    pub bytes_per_attention_cell: u64,
}

impl ActivationCost {
    /// The same cost for elements of `bytes` instead of `per` bytes (the
    /// config's estimates are for fp32: a bf16 batch needs half).
    pub fn scaled(&self, bytes: u64, per: u64) -> Self {
        let scale = |b: u64| b.saturating_mul(bytes) / per.max(1);
        Self {
            bytes_per_row: scale(self.bytes_per_row),
            bytes_per_token: scale(self.bytes_per_token),
            bytes_per_attention_cell: scale(self.bytes_per_attention_cell),
        }
    }

    /// Bytes for `rows` rows padded to `padded_len` (images: length 1).
    pub fn estimate(&self, rows: usize, padded_len: usize) -> u64 {
        let (rows, len) = (rows as u64, padded_len as u64);
        rows.saturating_mul(self.bytes_per_row)
            .saturating_add(rows.saturating_mul(len).saturating_mul(self.bytes_per_token))
            .saturating_add(rows.saturating_mul(len).saturating_mul(len).saturating_mul(self.bytes_per_attention_cell))
    }
}

fn default_memory_fraction() -> f64 {
    0.9
}
