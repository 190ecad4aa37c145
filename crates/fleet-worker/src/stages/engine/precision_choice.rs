//! Choosing the number format a model version computes in. Pure: the choice is a
//! function of the configured precision, the device (and for a CPU its
//! features), and how closely the lower precision's outputs matched fp32's
//! on the version's own warm-up inputs. The engine measures; this decides.
//!
//! bfloat16 is the fast format of current server CPUs (AVX-512 BF16, AMX:
//! oneDNN runs bf16 matrix products several times faster than fp32 there),
//! fp16 that of GPUs. Neither is served unless its outputs agree with fp32's
//! (`auto`), or the config forces it. Nor, on a CPU, unless it is also
//! faster there: the flags do not say how fast a CPU computes bf16 (some
//! CPUs with AVX-512 BF16 and no AMX run MiniLM slower in bf16 than in
//! fp32: docs/benchmarks.md), so `auto` times both on the same batch.

use super::labels::top_k;
use crate::config::device::Precision as Configured;
use crate::core::precision::{CpuFeatures, Precision};

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Cpu(CpuFeatures),
    Cuda,
}

/// What to load beside fp32 and compare with it, or why nothing is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidate {
    Try(Precision),
    Fp32Only(String),
}

pub fn candidate(configured: Configured, target: Target) -> Candidate {
    match (configured, target) {
        (Configured::Fp32, _) => Candidate::Fp32Only("precision = \"fp32\" in the config".into()),
        (Configured::Bf16, _) => Candidate::Try(Precision::Bf16),
        (Configured::Fp16, _) => Candidate::Try(Precision::Fp16),
        (Configured::Auto, Target::Cuda) => Candidate::Try(Precision::Fp16),
        (Configured::Auto, Target::Cpu(cpu)) if cpu.has_fast_bf16() => Candidate::Try(Precision::Bf16),
        (Configured::Auto, Target::Cpu(cpu)) => {
            Candidate::Fp32Only(format!("this CPU has {}: bf16 would be slower than fp32", cpu.describe()))
        }
    }
}

/// How the candidate's outputs compared with fp32's on the same inputs.
#[derive(Debug, Clone, PartialEq)]
pub enum Agreement {
    Agrees(String),
    Differs(String),
    /// The model does not run in that precision at all.
    Fails(String),
}

/// The precision served and why (logged at load).
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub precision: Precision,
    pub reason: String,
}

pub fn choose(configured: Configured, candidate: &Candidate, agreement: Option<&Agreement>) -> Choice {
    let fp32 = |reason: String| Choice { precision: Precision::Fp32, reason };
    let Candidate::Try(lower) = candidate else {
        let Candidate::Fp32Only(why) = candidate else { unreachable!() };
        return fp32(why.clone());
    };
    let name = lower.as_str();
    let forced = configured != Configured::Auto;
    match agreement {
        None => fp32(format!("{name} was not compared with fp32")),
        Some(Agreement::Agrees(how)) => Choice { precision: *lower, reason: format!("{name} matches fp32 ({how})") },
        Some(Agreement::Differs(how)) if forced => {
            Choice { precision: *lower, reason: format!("{name} as configured, although it differs from fp32 ({how})") }
        }
        Some(Agreement::Differs(how)) => fp32(format!("{name} differs from fp32 ({how})")),
        Some(Agreement::Fails(why)) => fp32(format!("the model does not run in {name}: {why}")),
    }
}

/// How long each precision took on the same batch (seconds, best of a few
/// runs after a warm one).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Speed {
    pub fp32_s: f64,
    pub lower_s: f64,
}

/// A lower precision `auto` chose serves only if it is at least this much
/// faster than fp32 here: below it, fp32's exact outputs win.
pub const MIN_SPEEDUP: f64 = 1.1;

/// `choice` once speed is known: under `auto`, a lower precision not
/// [`MIN_SPEEDUP`] faster than fp32 gives way to fp32. A forced precision,
/// fp32 already, or no measurement (CUDA, a failed timing) keep `choice`.
pub fn keep_if_faster(choice: Choice, configured: Configured, speed: Option<Speed>) -> Choice {
    let Some(speed) = speed.filter(|_| configured == Configured::Auto && choice.precision != Precision::Fp32) else {
        return choice;
    };
    let name = choice.precision.as_str();
    let (fp32_ms, lower_ms) = (speed.fp32_s * 1000.0, speed.lower_s * 1000.0);
    if speed.lower_s > 0.0 && speed.fp32_s / speed.lower_s >= MIN_SPEEDUP {
        let speedup = speed.fp32_s / speed.lower_s;
        Choice { reason: format!("{}, {speedup:.2}x fp32's speed here", choice.reason), ..choice }
    } else {
        Choice {
            precision: Precision::Fp32,
            reason: format!(
                "{name} matches fp32 but is not faster on this CPU ({lower_ms:.1} ms against fp32's {fp32_ms:.1} ms \
                 on the same batch)"
            ),
        }
    }
}

/// Embeddings agree when every row's cosine to fp32's reaches this.
pub const MIN_COSINE: f32 = 0.999;
/// Class probabilities agree when the top class is the same and each of
/// the fp32 top five moves by at most this.
pub const MAX_TOP5_SHIFT: f32 = 0.02;

/// Text models: the smallest per-row cosine against the threshold.
pub fn embeddings_agreement(fp32: &[Vec<f32>], lower: &[Vec<f32>]) -> Agreement {
    let cosine = min_cosine(fp32, lower);
    let how = format!("min cosine {cosine:.5} over {} rows", fp32.len());
    if cosine >= MIN_COSINE {
        Agreement::Agrees(how)
    } else {
        Agreement::Differs(how)
    }
}

/// Image models: per image the same top-1 class, and fp32's top five
/// classes within [`MAX_TOP5_SHIFT`] of their fp32 probability.
pub fn classes_agreement(fp32: &[Vec<f32>], lower: &[Vec<f32>]) -> Agreement {
    if fp32.len() != lower.len() || fp32.is_empty() {
        return Agreement::Differs("the outputs differ in shape".into());
    }
    let mut same_top1 = 0;
    let mut worst_shift = 0f32;
    for (a, b) in fp32.iter().zip(lower) {
        if a.len() != b.len() {
            return Agreement::Differs("the outputs differ in shape".into());
        }
        let order = ranked(a);
        same_top1 += usize::from(ranked(b).first() == order.first());
        for &class in order.iter().take(5) {
            worst_shift = worst_shift.max((a[class] - b[class]).abs());
        }
    }
    let how =
        format!("top-1 agrees on {same_top1} of {} images, top-5 probabilities within {worst_shift:.4}", fp32.len());
    if same_top1 == fp32.len() && worst_shift <= MAX_TOP5_SHIFT {
        Agreement::Agrees(how)
    } else {
        Agreement::Differs(how)
    }
}

/// Rerank models: each pair's score within [`MAX_TOP5_SHIFT`] of fp32's
/// (relative, for raw logits above 1), and the best-scoring pair the same.
pub fn scores_agreement(fp32: &[Vec<f32>], lower: &[Vec<f32>]) -> Agreement {
    let score = |rows: &[Vec<f32>]| -> Option<Vec<f32>> { rows.iter().map(|r| r.first().copied()).collect() };
    let (Some(a), Some(b)) = (score(fp32), score(lower)) else {
        return Agreement::Differs("the outputs differ in shape".into());
    };
    if a.len() != b.len() || a.is_empty() {
        return Agreement::Differs("the outputs differ in shape".into());
    }
    let worst = a.iter().zip(&b).map(|(x, y)| (x - y).abs() / x.abs().max(1.0)).fold(0f32, f32::max);
    let same_best = top_class(&a) == top_class(&b);
    let how = format!("scores within {worst:.4} (relative) over {} pairs, best pair the same: {same_best}", a.len());
    if same_best && worst <= MAX_TOP5_SHIFT {
        Agreement::Agrees(how)
    } else {
        Agreement::Differs(how)
    }
}

/// The most probable class (the first of equals).
pub fn top_class(probabilities: &[f32]) -> Option<usize> {
    ranked(probabilities).first().copied()
}

fn ranked(probabilities: &[f32]) -> Vec<usize> {
    top_k(probabilities, probabilities.len()).into_iter().map(|s| s.index).collect()
}

/// The smallest cosine similarity between paired rows; 0 when the shapes
/// differ (they cannot agree).
pub fn min_cosine(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    if a.len() != b.len() || a.is_empty() {
        return 0.0;
    }
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            if x.len() != y.len() {
                return 0.0;
            }
            let dot: f32 = x.iter().zip(y).map(|(p, q)| p * q).sum();
            let norm = |v: &[f32]| v.iter().map(|p| p * p).sum::<f32>().sqrt();
            let denominator = norm(x) * norm(y);
            if denominator == 0.0 || !dot.is_finite() {
                0.0
            } else {
                dot / denominator
            }
        })
        .fold(f32::INFINITY, f32::min)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BF16_CPU: CpuFeatures = CpuFeatures { avx512_bf16: true, amx_bf16: true };

    #[test]
    fn auto_tries_bf16_only_on_a_cpu_that_has_it_and_fp16_on_cuda() {
        assert_eq!(candidate(Configured::Auto, Target::Cpu(BF16_CPU)), Candidate::Try(Precision::Bf16));
        assert_eq!(candidate(Configured::Auto, Target::Cuda), Candidate::Try(Precision::Fp16));
        let plain = candidate(Configured::Auto, Target::Cpu(CpuFeatures::default()));
        assert!(matches!(&plain, Candidate::Fp32Only(why) if why.contains("no AVX-512 BF16 or AMX")), "{plain:?}");
        assert!(matches!(candidate(Configured::Fp32, Target::Cpu(BF16_CPU)), Candidate::Fp32Only(_)));
        assert_eq!(candidate(Configured::Bf16, Target::Cpu(CpuFeatures::default())), Candidate::Try(Precision::Bf16));
        assert_eq!(candidate(Configured::Fp16, Target::Cpu(BF16_CPU)), Candidate::Try(Precision::Fp16));
    }

    #[test]
    fn the_lower_precision_serves_when_it_agrees_or_is_forced_never_when_it_fails() {
        let bf16 = Candidate::Try(Precision::Bf16);
        let agrees = Agreement::Agrees("min cosine 0.99996".into());
        let differs = Agreement::Differs("min cosine 0.9".into());
        let fails = Agreement::Fails("dtype mismatch".into());
        assert_eq!(choose(Configured::Auto, &bf16, Some(&agrees)).precision, Precision::Bf16);
        let refused = choose(Configured::Auto, &bf16, Some(&differs));
        assert_eq!(refused.precision, Precision::Fp32);
        assert!(refused.reason.contains("differs") && refused.reason.contains("0.9"), "{}", refused.reason);
        assert_eq!(choose(Configured::Bf16, &bf16, Some(&differs)).precision, Precision::Bf16, "forced");
        assert_eq!(choose(Configured::Bf16, &bf16, Some(&fails)).precision, Precision::Fp32, "cannot run");
        let plain = Candidate::Fp32Only("this CPU has no AVX-512 BF16 or AMX".into());
        let choice = choose(Configured::Auto, &plain, None);
        assert_eq!(
            (choice.precision, choice.reason.as_str()),
            (Precision::Fp32, "this CPU has no AVX-512 BF16 or AMX")
        );
    }

    #[test]
    fn auto_keeps_a_lower_precision_only_where_it_is_faster() {
        let bf16 = Choice { precision: Precision::Bf16, reason: "bf16 matches fp32".into() };
        let fast = Speed { fp32_s: 0.200, lower_s: 0.100 };
        let slow = Speed { fp32_s: 0.111, lower_s: 0.179 };
        let even = Speed { fp32_s: 0.105, lower_s: 0.100 };
        let kept = keep_if_faster(bf16.clone(), Configured::Auto, Some(fast));
        assert_eq!(kept.precision, Precision::Bf16);
        assert!(kept.reason.contains("2.00x fp32's speed"), "{}", kept.reason);
        let dropped = keep_if_faster(bf16.clone(), Configured::Auto, Some(slow));
        assert_eq!(dropped.precision, Precision::Fp32);
        assert!(dropped.reason.contains("179.0 ms against fp32's 111.0 ms"), "{}", dropped.reason);
        assert_eq!(
            keep_if_faster(bf16.clone(), Configured::Auto, Some(even)).precision,
            Precision::Fp32,
            "5 % is noise"
        );
        assert_eq!(keep_if_faster(bf16.clone(), Configured::Bf16, Some(slow)).precision, Precision::Bf16, "forced");
        assert_eq!(keep_if_faster(bf16.clone(), Configured::Auto, None), bf16, "not measured");
        let fp32 = Choice { precision: Precision::Fp32, reason: "differs".into() };
        assert_eq!(keep_if_faster(fp32.clone(), Configured::Auto, Some(fast)), fp32);
    }

    #[test]
    fn embeddings_agree_when_every_row_is_within_the_cosine() {
        let a = vec![vec![1.0, 0.0], vec![0.0, 1.0]];
        assert!(matches!(embeddings_agreement(&a, &a), Agreement::Agrees(_)));
        let b = vec![vec![1.0, 0.0], vec![0.1, 1.0]];
        assert!(matches!(embeddings_agreement(&a, &b), Agreement::Differs(_)));
        assert_eq!(min_cosine(&a, &a[..1]), 0.0, "a missing row cannot agree");
        assert_eq!(min_cosine(&[vec![f32::NAN]], &[vec![1.0]]), 0.0);
    }

    #[test]
    fn scores_agree_within_the_shift_with_the_same_best_pair() {
        let fp32 = vec![vec![0.2], vec![0.9], vec![0.5]];
        assert!(matches!(scores_agreement(&fp32, &[vec![0.21], vec![0.89], vec![0.5]]), Agreement::Agrees(_)));
        assert!(matches!(scores_agreement(&fp32, &[vec![0.2], vec![0.85], vec![0.5]]), Agreement::Differs(_)));
        let logits = vec![vec![-8.0], vec![6.0]];
        assert!(matches!(scores_agreement(&logits, &[vec![-8.1], vec![6.05]]), Agreement::Agrees(_)));
    }

    #[test]
    fn classes_agree_on_the_top_class_and_the_top_five_probabilities() {
        let fp32 = vec![vec![0.70, 0.20, 0.05, 0.03, 0.01, 0.01]];
        let close = vec![vec![0.69, 0.21, 0.05, 0.03, 0.01, 0.01]];
        assert!(matches!(classes_agreement(&fp32, &close), Agreement::Agrees(_)));
        let shifted = vec![vec![0.60, 0.30, 0.05, 0.03, 0.01, 0.01]];
        assert!(matches!(classes_agreement(&fp32, &shifted), Agreement::Differs(how) if how.contains("0.1000")));
        let swapped = vec![vec![0.20, 0.70, 0.05, 0.03, 0.01, 0.01]];
        assert!(matches!(classes_agreement(&fp32, &swapped), Agreement::Differs(how) if how.contains("0 of 1")));
    }
}
