//! The flags every benchmark takes (where the models are, which one, the
//! threads, the device, the precision) and the machine line each prints
//! first, so every figure names what it ran on.

use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct Common {
    #[arg(long, default_value = "models", global = true)]
    pub model_repo: PathBuf,
    #[arg(long, default_value = "minilm", global = true)]
    pub model: fleet_proto::ModelName,
    /// libtorch intra-op threads (the worker's --intra-op-threads).
    #[arg(long, default_value_t = 2, global = true)]
    pub threads: i32,
    /// cpu, cuda or auto, as the worker's --device (scripts/gpu-check.sh).
    #[arg(long, default_value = "cpu", global = true)]
    pub device: fleet_worker::config::DeviceChoice,
    /// The number format the text model runs in (fp32, bf16, fp16).
    #[arg(long, default_value = "fp32", global = true)]
    pub precision: BenchPrecision,
}

impl Common {
    /// libtorch's threads as the worker sets them: `--threads` intra-op,
    /// one inter-op.
    pub fn set_threads(&self) {
        tch::set_num_threads(self.threads);
        tch::set_num_interop_threads(1);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchPrecision {
    Fp32,
    Bf16,
    Fp16,
}

impl BenchPrecision {
    pub fn kind(self) -> tch::Kind {
        match self {
            Self::Fp32 => tch::Kind::Float,
            Self::Bf16 => tch::Kind::BFloat16,
            Self::Fp16 => tch::Kind::Half,
        }
    }

    /// As the flag spells it: `fp32`, `bf16`, `fp16`.
    pub fn name(self) -> String {
        format!("{self:?}").to_lowercase()
    }
}

/// `<cores> cores, <CPU model>`: the first line of every benchmark's output
/// (the order docs/benchmarks.md quotes), read the load tool's way.
pub fn machine() -> String {
    use loadtest::machine::{cores, cpu_model, cpuinfo};
    let cpu = cpu_model(&cpuinfo()).unwrap_or_else(|| "unknown CPU".into());
    format!("{} cores, {cpu}", cores())
}
