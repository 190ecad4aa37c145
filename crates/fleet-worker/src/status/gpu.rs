//! Device memory on CUDA workers: `nv_gpu_memory_used_bytes` and
//! `nv_gpu_memory_total_bytes` per visible GPU, the numbers an operator
//! watches to stay under 90 %, read through NVML (the management library
//! the NVIDIA driver ships). NVML is loaded at run time, so a CPU worker
//! needs nothing and exports no GPU series at all (absent, not zero).

use crate::metrics::{GPU_MEMORY_TOTAL_BYTES, GPU_MEMORY_USED_BYTES};
use nvml_wrapper::Nvml;

pub struct GpuMemory {
    nvml: Nvml,
}

impl GpuMemory {
    /// Fails where no NVIDIA driver is installed.
    pub fn open() -> Result<Self, nvml_wrapper::error::NvmlError> {
        Ok(Self { nvml: Nvml::init()? })
    }

    /// Reads every visible device once and sets the gauges.
    pub fn publish(&self) -> Result<(), nvml_wrapper::error::NvmlError> {
        for index in 0..self.nvml.device_count()? {
            let memory = self.nvml.device_by_index(index)?.memory_info()?;
            let gpu = index.to_string();
            metrics::gauge!(GPU_MEMORY_USED_BYTES, "gpu" => gpu.clone()).set(memory.used as f64);
            metrics::gauge!(GPU_MEMORY_TOTAL_BYTES, "gpu" => gpu).set(memory.total as f64);
        }
        Ok(())
    }
}
