//! A soak worker's memory over the run: first, last and peak RSS, and its
//! growth after the warm-up as a least-squares slope. Apart from the
//! verdict because the slope and the rule for when it can be judged are a
//! piece of statistics of their own.

/// Under this span of samples a slope per hour is noise: a model swap, a
/// burst or an allocator returning memory moves RSS by more in minutes
/// than a leak does in hours (a short soak with a swap reads a slope far
/// over any budget; docs/soak.md, The budgets).
const MIN_SPAN_S: f64 = 1800.0;
const MIN_SAMPLES: usize = 3;

const SECONDS_PER_HOUR: f64 = 3600.0;

/// RSS samples of one worker process: (seconds from the run's start, bytes).
/// Growth after warm-up: the least-squares slope of the samples at
/// `t >= warm_up_s`, as percent of their mean per hour. A slope rather than
/// last minus first, so one sample taken mid-burst or right after a GC does
/// not decide the verdict. `None` with fewer than 3 such samples or a span
/// under 30 minutes (too little to say), or a mean that is not positive.
pub fn rss_growth_pct_per_hour(samples: &[(f64, f64)], warm_up_s: f64) -> Option<f64> {
    let kept: Vec<(f64, f64)> =
        samples.iter().copied().filter(|&(t, bytes)| t.is_finite() && bytes.is_finite() && t >= warm_up_s).collect();
    if kept.len() < MIN_SAMPLES {
        return None;
    }
    let (first_s, last_s) =
        kept.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(first, last), &(t, _)| (first.min(t), last.max(t)));
    if last_s - first_s < MIN_SPAN_S {
        return None;
    }
    let count = kept.len() as f64;
    let mean_s = kept.iter().map(|&(t, _)| t).sum::<f64>() / count;
    let mean_bytes = kept.iter().map(|&(_, bytes)| bytes).sum::<f64>() / count;
    if mean_bytes <= 0.0 {
        return None;
    }
    let (covariance, variance) = kept.iter().fold((0.0, 0.0), |(covariance, variance), &(t, bytes)| {
        let from_mean = t - mean_s;
        (covariance + from_mean * (bytes - mean_bytes), variance + from_mean * from_mean)
    });
    // variance > 0: the samples span at least MIN_SPAN_S.
    let bytes_per_s = covariance / variance;
    Some(bytes_per_s / mean_bytes * 100.0 * SECONDS_PER_HOUR)
}

/// One worker process's memory over the run.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerMemory {
    pub worker: String,
    /// The earliest sample of the whole run, warm-up included (bytes).
    pub first_bytes: f64,
    /// The latest sample (bytes).
    pub last_bytes: f64,
    pub peak_bytes: f64,
    /// See [`rss_growth_pct_per_hour`]; `None`: too few samples to judge.
    pub growth_pct_per_hour: Option<f64>,
}

impl WorkerMemory {
    /// From one worker's RSS samples (seconds from the start, bytes), in
    /// any order. No samples: all zero, growth `None`.
    pub fn of(worker: &str, samples: &[(f64, f64)], warm_up_s: f64) -> WorkerMemory {
        let finite = || samples.iter().copied().filter(|&(t, bytes)| t.is_finite() && bytes.is_finite());
        let first_bytes = finite().min_by(|a, b| a.0.total_cmp(&b.0)).map_or(0.0, |(_, bytes)| bytes);
        let last_bytes = finite().max_by(|a, b| a.0.total_cmp(&b.0)).map_or(0.0, |(_, bytes)| bytes);
        let peak_bytes = finite().map(|(_, bytes)| bytes).fold(0.0, f64::max);
        WorkerMemory {
            worker: worker.to_owned(),
            first_bytes,
            last_bytes,
            peak_bytes,
            growth_pct_per_hour: rss_growth_pct_per_hour(samples, warm_up_s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: f64 = 1024.0 * 1024.0;

    /// A sample every 10 s for two hours, from `bytes(t)`.
    fn samples(bytes: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        (0..=720).map(|i| i as f64 * 10.0).map(|t| (t, bytes(t))).collect()
    }

    #[test]
    fn a_flat_series_with_noise_grows_by_about_nothing() {
        // ±8 MiB of sawtooth (a collector coming round every minute).
        let flat = samples(|t| 500.0 * MIB + ((t / 10.0) as u64 % 6) as f64 * 3.2 * MIB - 8.0 * MIB);
        let growth = rss_growth_pct_per_hour(&flat, 600.0).unwrap();
        assert!(growth.abs() < 0.05, "{growth}");
    }

    #[test]
    fn a_series_growing_one_percent_an_hour_grows_one_percent_an_hour() {
        // 1 % of its mean (after the warm-up) per hour, around t = 3900 s;
        // the warm-up climbs steeply from 100 MiB and must not count.
        let mean = 400.0 * MIB;
        let series = samples(|t| {
            if t < 600.0 {
                100.0 * MIB + t / 600.0 * 300.0 * MIB
            } else {
                mean * (1.0 + 0.01 * (t - 3900.0) / 3600.0)
            }
        });
        let growth = rss_growth_pct_per_hour(&series, 600.0).unwrap();
        assert!((growth - 1.0).abs() < 1e-6, "{growth}");
        let everything = rss_growth_pct_per_hour(&series, 0.0).unwrap();
        assert!(everything > 5.0, "the warm-up counted would look like a leak: {everything}");
    }

    #[test]
    fn growth_is_none_when_too_short() {
        let two = [(700.0, MIB), (800.0, MIB)];
        assert_eq!(rss_growth_pct_per_hour(&two, 600.0), None);
        let brief: Vec<(f64, f64)> = (0..180).map(|i| (600.0 + i as f64 * 10.0, MIB + i as f64)).collect();
        assert_eq!(rss_growth_pct_per_hour(&brief, 600.0), None, "1790 s is too short");
        let only_warm_up = samples(|_| MIB);
        assert_eq!(rss_growth_pct_per_hour(&only_warm_up, 7201.0), None);
        let enough: Vec<(f64, f64)> = (0..181).map(|i| (600.0 + i as f64 * 10.0, MIB)).collect();
        assert_eq!(rss_growth_pct_per_hour(&enough, 600.0), Some(0.0));
    }

    #[test]
    fn worker_memory_takes_first_last_and_peak_by_time() {
        let series = [(20.0, 300.0), (0.0, 100.0), (10.0, 400.0)];
        let memory = WorkerMemory::of("text-0", &series, 0.0);
        assert_eq!((memory.first_bytes, memory.last_bytes, memory.peak_bytes), (100.0, 300.0, 400.0));
        assert_eq!(memory.growth_pct_per_hour, None, "20 s is too short");
        let empty = WorkerMemory::of("text-1", &[], 0.0);
        assert_eq!((empty.first_bytes, empty.last_bytes, empty.peak_bytes), (0.0, 0.0, 0.0));
        assert_eq!(empty.growth_pct_per_hour, None);
        let growing = WorkerMemory::of("text-2", &samples(|t| MIB * (100.0 + t / 3600.0)), 600.0);
        assert!(growing.growth_pct_per_hour.unwrap() > 0.5);
    }
}
