//! Load profiles and their open-loop arrival times.
//!
//! A profile is a rate over time (requests per second at second t); the
//! arrivals are a seeded non-homogeneous Poisson process drawn from it by
//! thinning: candidate gaps at the profile's peak rate, each kept with
//! probability rate(t) / peak. Arrivals never depend on answers, so a slow
//! fleet sees the queue build up instead of a politely slower client (a
//! closed loop hides queueing). Pure: the same profile and seed always give
//! the same times.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Profile {
    /// `rate` the whole time.
    Steady { rate: f64 },
    /// From `from` to `to`, linearly over the run.
    Ramp { from: f64, to: f64 },
    /// `rate`, then `factor × rate` for `burst_s` seconds starting at
    /// `start_s`, then `rate` again.
    Burst { rate: f64, factor: f64, start_s: f64, burst_s: f64 },
}

impl Profile {
    /// Requests per second at `t` seconds into a run of `duration_s`.
    pub fn rate_at(&self, t: f64, duration_s: f64) -> f64 {
        match *self {
            Self::Steady { rate } => rate,
            Self::Ramp { from, to } => from + (to - from) * (t / duration_s.max(1e-9)).clamp(0.0, 1.0),
            Self::Burst { rate, factor, start_s, burst_s } => {
                if (start_s..start_s + burst_s).contains(&t) {
                    rate * factor
                } else {
                    rate
                }
            }
        }
    }

    /// The highest rate the profile reaches.
    pub fn peak(&self) -> f64 {
        match *self {
            Self::Steady { rate } => rate,
            Self::Ramp { from, to } => from.max(to),
            Self::Burst { rate, factor, .. } => rate * factor.max(1.0),
        }
    }

    /// The expected number of arrivals in `duration_s` (the rate's integral).
    pub fn expected(&self, duration_s: f64) -> f64 {
        match *self {
            Self::Steady { rate } => rate * duration_s,
            Self::Ramp { from, to } => (from + to) / 2.0 * duration_s,
            Self::Burst { rate, factor, start_s, burst_s } => {
                let inside = (duration_s.min(start_s + burst_s) - start_s).max(0.0);
                rate * duration_s + rate * (factor - 1.0) * inside
            }
        }
    }
}

/// Arrival times (seconds from the start, increasing) within `duration_s`,
/// at most `max_count` of them.
pub fn arrivals(profile: Profile, duration_s: f64, seed: u64, max_count: usize) -> Vec<f64> {
    thinned(profile.peak(), duration_s, seed, max_count, |t| profile.rate_at(t, duration_s))
}

/// Arrival times of a seeded non-homogeneous Poisson process of rate
/// `rate_at(t)` (never above `peak`) over `duration_s`, by thinning:
/// candidate gaps at the peak rate, each kept with probability
/// rate(t) / peak. `rate_at` is asked at increasing times only.
pub fn thinned(
    peak: f64,
    duration_s: f64,
    seed: u64,
    max_count: usize,
    mut rate_at: impl FnMut(f64) -> f64,
) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut times = Vec::new();
    if !peak.is_finite() || peak <= 0.0 {
        return times;
    }
    let mut t = 0.0;
    while times.len() < max_count {
        // Exponential gap at the peak rate: -ln(U) / peak, U in (0, 1].
        let u: f64 = 1.0 - rng.random::<f64>();
        t += -u.ln() / peak;
        if t >= duration_s {
            break;
        }
        if rng.random::<f64>() * peak <= rate_at(t) {
            times.push(t);
        }
    }
    times
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_burst_is_factor_times_the_rate_inside_its_window_only() {
        let burst = Profile::Burst { rate: 10.0, factor: 10.0, start_s: 5.0, burst_s: 10.0 };
        assert_eq!(burst.rate_at(4.9, 30.0), 10.0);
        assert_eq!(burst.rate_at(5.0, 30.0), 100.0);
        assert_eq!(burst.rate_at(15.0, 30.0), 10.0);
        assert_eq!(burst.expected(30.0), 300.0 + 900.0);
        let times = arrivals(burst, 30.0, 1, usize::MAX);
        let inside = times.iter().filter(|&&t| (5.0..15.0).contains(&t)).count() as f64;
        let outside = (times.len() as f64) - inside;
        // ≈ 1000 inside, ≈ 200 outside.
        assert!((850.0..1150.0).contains(&inside), "{inside}");
        assert!((140.0..270.0).contains(&outside), "{outside}");
    }

    #[test]
    fn a_ramp_rises_from_its_start_to_its_end() {
        let ramp = Profile::Ramp { from: 0.0, to: 200.0 };
        let times = arrivals(ramp, 20.0, 3, usize::MAX);
        let first = times.iter().filter(|&&t| t < 10.0).count();
        let second = times.len() - first;
        assert!(second > 2 * first, "{first} then {second}");
    }

    proptest! {
        #[test]
        fn arrivals_are_seeded_increasing_bounded_and_near_the_expected_count(
            rate in 1.0f64..400.0, duration in 1.0f64..30.0, seed in 0u64..1000, cap in 1usize..5000,
        ) {
            let profile = Profile::Steady { rate };
            let times = arrivals(profile, duration, seed, cap);
            prop_assert_eq!(&times, &arrivals(profile, duration, seed, cap));
            prop_assert!(times.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(times.iter().all(|&t| (0.0..duration).contains(&t)));
            prop_assert!(times.len() <= cap);
            let expected = profile.expected(duration);
            if cap as f64 > expected * 2.0 {
                // Poisson: within 6 standard deviations (sqrt of the mean).
                prop_assert!((times.len() as f64 - expected).abs() <= 6.0 * expected.sqrt() + 1.0);
            }
        }
    }
}
