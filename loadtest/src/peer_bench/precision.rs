//! The peer's precision, and which to run on this CPU: bf16 only where
//! the CPU computes it in hardware (a slower, emulated bf16 peer would be
//! a strawman).

/// The peer's precision: plain_consumer.py's `--precision`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Precision {
    Fp32,
    Bf16,
}

impl Precision {
    pub const ALL: [Precision; 2] = [Precision::Fp32, Precision::Bf16];

    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
        }
    }

    /// `fp32` or `bf16` (the command line's value parser).
    pub fn parse(raw: &str) -> Result<Self, String> {
        Precision::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(raw.trim()))
            .ok_or_else(|| format!("expected fp32 or bf16, not {raw:?}"))
    }
}

/// Whether the CPU has bf16 in hardware (AVX-512 BF16 or AMX): without it
/// torch emulates bf16 and a bf16 peer would only be a slower strawman.
pub fn fast_bf16(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .filter_map(|line| line.split_once(':'))
        .filter(|(key, _)| key.trim() == "flags")
        .any(|(_, flags)| flags.split_whitespace().any(|flag| flag == "avx512_bf16" || flag == "amx_bf16"))
}

/// The peer precisions to run, sorted, each once: those asked for, else fp32
/// plus bf16 where the CPU computes it natively ([`fast_bf16`]).
pub fn peer_precisions(asked: &[Precision], cpuinfo: &str) -> Vec<Precision> {
    let bf16 = fast_bf16(cpuinfo);
    let mut precisions: Vec<Precision> = if asked.is_empty() {
        Precision::ALL.into_iter().filter(|&p| p == Precision::Fp32 || bf16).collect()
    } else {
        asked.to_vec()
    };
    precisions.sort_unstable();
    precisions.dedup();
    precisions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_runs_only_where_the_cpu_has_it_in_hardware() {
        let amx = "processor\t: 0\nflags\t\t: fpu sse avx512f avx512_vnni amx_bf16 amx_tile\nbugs\t\t: spectre_v1\n";
        let avx512 = "flags\t\t: fpu avx512f avx512_bf16\n";
        let epyc = "flags\t\t: fpu avx2 avx512f\nbugs\t\t: amx_bf16\n";
        assert!(fast_bf16(amx) && fast_bf16(avx512));
        assert!(!fast_bf16(epyc));
        assert!(!fast_bf16(""));
        assert_eq!(peer_precisions(&[], amx), [Precision::Fp32, Precision::Bf16]);
        assert_eq!(peer_precisions(&[], epyc), [Precision::Fp32]);
        // Asked for: as asked, whatever the CPU, sorted and each once.
        let asked = [Precision::Bf16, Precision::Fp32, Precision::Bf16];
        assert_eq!(peer_precisions(&asked, epyc), [Precision::Fp32, Precision::Bf16]);
        assert_eq!(peer_precisions(&[Precision::Bf16], amx), [Precision::Bf16]);
        assert_eq!(Precision::parse(" BF16"), Ok(Precision::Bf16));
        assert!(Precision::parse("fp16").is_err());
    }
}
