//! Which number format a model version computes in, and the CPU features
//! that decide whether bfloat16 is worth trying: bfloat16 is the fast
//! format of current server CPUs (AVX-512 BF16, AMX), fp16 that of GPUs.
//! How a version's format is chosen is the engine's
//! (`stages::engine::precision_choice`).

use crate::config::WorkerArgs;

/// The format a loaded version runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Precision {
    Fp32,
    Bf16,
    Fp16,
}

impl Precision {
    pub const ALL: [Self; 3] = [Self::Fp32, Self::Bf16, Self::Fp16];

    /// The label of `fleet_model_precision` and the feature-cache keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fp32 => "fp32",
            Self::Bf16 => "bf16",
            Self::Fp16 => "fp16",
        }
    }

    /// Bytes of one activation element: the memory estimate scales by it.
    pub fn element_bytes(self) -> u64 {
        match self {
            Self::Fp32 => 4,
            Self::Bf16 | Self::Fp16 => 2,
        }
    }

    pub fn kind(self) -> tch::Kind {
        match self {
            Self::Fp32 => tch::Kind::Float,
            Self::Bf16 => tch::Kind::BFloat16,
            Self::Fp16 => tch::Kind::Half,
        }
    }

    /// Packs into a small integer (`lifecycle::ServingVersion` keeps it
    /// beside the version in one atomic).
    pub fn code(self) -> u64 {
        match self {
            Self::Fp32 => 0,
            Self::Bf16 => 1,
            Self::Fp16 => 2,
        }
    }

    pub fn from_code(code: u64) -> Self {
        match code {
            1 => Self::Bf16,
            2 => Self::Fp16,
            _ => Self::Fp32,
        }
    }
}

/// The CPU features bf16 speed depends on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    pub avx512_bf16: bool,
    pub amx_bf16: bool,
}

impl CpuFeatures {
    /// From the `flags` lines of /proc/cpuinfo (Linux's names).
    pub fn from_cpuinfo(text: &str) -> Self {
        let flags: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("flags"))
            .flat_map(|l| l.split_once(':').map_or("", |(_, v)| v).split_whitespace())
            .collect();
        Self::from_names(&flags)
    }

    /// From feature names (`avx512_bf16`, `amx_bf16`; others ignored).
    pub fn from_names(names: &[&str]) -> Self {
        Self { avx512_bf16: names.contains(&"avx512_bf16"), amx_bf16: names.contains(&"amx_bf16") }
    }

    /// What `--cpu-features` says: this machine's (`auto`) or the names given.
    pub fn of_worker(args: &WorkerArgs) -> Self {
        match args.cpu_features.trim() {
            "auto" => Self::detect(),
            list => Self::from_names(&list.split(',').map(str::trim).collect::<Vec<_>>()),
        }
    }

    /// This machine's, from /proc/cpuinfo (none where it cannot be read).
    pub fn detect() -> Self {
        std::fs::read_to_string("/proc/cpuinfo").map(|text| Self::from_cpuinfo(&text)).unwrap_or_default()
    }

    pub fn has_fast_bf16(self) -> bool {
        self.avx512_bf16 || self.amx_bf16
    }

    pub fn describe(self) -> String {
        let names: Vec<&str> = [(self.amx_bf16, "amx_bf16"), (self.avx512_bf16, "avx512_bf16")]
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, n)| *n)
            .collect();
        if names.is_empty() {
            "no AVX-512 BF16 or AMX".to_owned()
        } else {
            names.join(", ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BF16_CPU: CpuFeatures = CpuFeatures { avx512_bf16: true, amx_bf16: true };

    #[test]
    fn cpu_features_come_from_the_flags_lines() {
        let info = "processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 amx_tile amx_bf16\nbugs\t: x\n";
        assert_eq!(CpuFeatures::from_cpuinfo(info), BF16_CPU);
        assert_eq!(CpuFeatures::from_cpuinfo("flags : fpu avx2\n"), CpuFeatures::default());
        assert!(CpuFeatures::from_names(&["avx512_bf16"]).has_fast_bf16());
    }
}
