//! When a soak's faults happen, and the open-loop load they happen under.
//!
//! A soak runs long enough to see slow trouble (memory that creeps, latency
//! that never quite comes back), so its faults repeat: one every `every_s`
//! after a warm-up, cycling through [`Fault::ALL`], and none so late that its
//! recovery falls outside the run. The short soak of `make test` instead
//! holds every fault exactly once ([`every_fault_once`]). The load is the
//! steady rate, raised by a factor inside each [`Fault::Burst`]: a seeded
//! non-homogeneous Poisson process drawn by thinning, as in
//! [`crate::profile`]. Pure: the same configuration and seed always give the
//! same plan and the same arrival times.

/// One kind of fault a soak injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    MemberJoin,
    MemberLeave,
    ModelSwap,
    BrokenModel,
    BrokerRestart,
    RedisFreeze,
    Burst,
}

impl Fault {
    /// The order of one cycle. A join comes before the leave that undoes it,
    /// so the group is back to its size after every cycle.
    pub const ALL: [Fault; 7] = [
        Fault::MemberJoin,
        Fault::MemberLeave,
        Fault::ModelSwap,
        Fault::BrokenModel,
        Fault::BrokerRestart,
        Fault::RedisFreeze,
        Fault::Burst,
    ];

    /// The name the report, the plots and the logs use.
    pub fn name(self) -> &'static str {
        match self {
            Self::MemberJoin => "member-join",
            Self::MemberLeave => "member-leave",
            Self::ModelSwap => "model-swap",
            Self::BrokenModel => "broken-model",
            Self::BrokerRestart => "broker-restart",
            Self::RedisFreeze => "redis-freeze",
            Self::Burst => "burst",
        }
    }

    /// One line for the report: what happens to the fleet.
    pub fn describe(self) -> &'static str {
        match self {
            Self::MemberJoin => "a second text worker starts and joins the group (the partitions rebalance)",
            Self::MemberLeave => "the joined text worker gets SIGTERM: it drains and leaves (the partitions rebalance)",
            Self::ModelSwap => "a new version of the text model is published and swapped in under load",
            Self::BrokenModel => "a text model version with a corrupt model.pt is published; the old one keeps serving",
            Self::BrokerRestart => "the broker is killed (SIGKILL) and started again on the same port and storage",
            Self::RedisFreeze => "Redis is stopped (SIGSTOP: connections stay, nothing answers), then continued",
            Self::Burst => "the offered rates rise by the burst factor for a while, then fall back",
        }
    }

    /// How long this fault lasts under `config`: 0 for an instant one (join,
    /// leave, swap, broken model), never negative.
    pub fn lasts_s(self, config: &ScheduleConfig) -> f64 {
        let lasts = match self {
            Self::MemberJoin | Self::MemberLeave | Self::ModelSwap | Self::BrokenModel => 0.0,
            Self::BrokerRestart => config.broker_down_s,
            Self::RedisFreeze => config.redis_frozen_s,
            Self::Burst => config.burst_s,
        };
        lasts.max(0.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScheduleConfig {
    pub duration_s: f64,
    /// No fault before this (workers warm, memory at its working level).
    pub warm_up_s: f64,
    /// Seconds between the starts of two faults.
    pub every_s: f64,
    /// No fault starts or lasts within this of the end (the last one must be seen to recover).
    pub settle_s: f64,
    pub broker_down_s: f64,
    pub redis_frozen_s: f64,
    pub burst_s: f64,
}

impl ScheduleConfig {
    /// The end of the window faults must fit in: the last fault must be over
    /// `settle_s` before the run ends, so its recovery is seen.
    fn faults_end_s(&self) -> f64 {
        self.duration_s - self.settle_s
    }
}

/// One fault of the plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Planned {
    pub fault: Fault,
    /// Seconds from the run's start.
    pub at_s: f64,
    /// How long the fault lasts (0 for an instant one: join, leave, swap, broken model).
    pub lasts_s: f64,
}

impl Planned {
    /// When the fault is over (undone), seconds from the run's start.
    pub fn ends_s(&self) -> f64 {
        self.at_s + self.lasts_s
    }

    /// Whether `t` falls inside the fault (start included, end excluded).
    fn covers(&self, t: f64) -> bool {
        (self.at_s..self.ends_s()).contains(&t)
    }
}

/// Faults cycle through [`Fault::ALL`], one every `every_s` from `warm_up_s`,
/// while `at_s + lasts_s <= duration_s - settle_s`. The first fault that does
/// not fit ends the plan (every later one starts later still). A period that
/// is not a positive finite number, or a run without a finite end, plans
/// nothing (faults would pile up at one instant, or never stop).
pub fn plan(config: &ScheduleConfig) -> Vec<Planned> {
    let end = config.faults_end_s();
    if !config.every_s.is_finite() || config.every_s <= 0.0 || !end.is_finite() {
        return Vec::new();
    }
    let mut planned = Vec::new();
    for (index, fault) in Fault::ALL.into_iter().cycle().enumerate() {
        // Multiplied rather than summed, so a days-long plan does not drift.
        let at_s = config.warm_up_s + config.every_s * index as f64;
        let lasts_s = fault.lasts_s(config);
        if !at_s.is_finite() || at_s + lasts_s > end {
            break;
        }
        planned.push(Planned { fault, at_s, lasts_s });
    }
    planned
}

/// Every fault once, in [`Fault::ALL`]'s order, spread evenly between
/// `warm_up_s` and `duration_s - settle_s`: the short soak of `make test`.
/// The first starts at `warm_up_s`, the last ends at `duration_s - settle_s`,
/// and the quiet time between the end of one and the start of the next is
/// the same for all (so each recovers, and is judged, apart from the others).
/// Returns `None` when that quiet time would be under `min_gap_s`: the window
/// must hold every fault's `lasts_s` plus `min_gap_s` after each but the last.
pub fn every_fault_once(config: &ScheduleConfig, min_gap_s: f64) -> Option<Vec<Planned>> {
    let start = config.warm_up_s;
    let end = config.faults_end_s();
    let lasting: f64 = Fault::ALL.iter().map(|fault| fault.lasts_s(config)).sum();
    let gaps = (Fault::ALL.len() - 1) as f64;
    let quiet_s = (end - start - lasting) / gaps;
    if quiet_s.is_nan() || quiet_s < min_gap_s.max(0.0) {
        return None;
    }
    let mut planned = Vec::with_capacity(Fault::ALL.len());
    let mut at_s = start;
    for fault in Fault::ALL {
        let lasts_s = fault.lasts_s(config);
        // Rounding must not push the last one past the window's end.
        planned.push(Planned { fault, at_s: at_s.min(end - lasts_s), lasts_s });
        at_s += lasts_s + quiet_s;
    }
    Some(planned)
}

/// The offered rate at `t`: `base` times `factor` inside any Burst of `plan`
/// (start included, end excluded), `base` elsewhere.
pub fn rate_at(base: f64, factor: f64, plan: &[Planned], t: f64) -> f64 {
    if plan.iter().any(|planned| planned.fault == Fault::Burst && planned.covers(t)) {
        base * factor
    } else {
        base
    }
}

/// The expected number of arrivals in `duration_s` (the rate's integral):
/// what [`arrivals`] gives on average, to size its `max` or check a run.
pub fn expected_arrivals(base: f64, factor: f64, plan: &[Planned], duration_s: f64) -> f64 {
    let inside: f64 = burst_windows(plan).iter().map(|&(from, to)| (to.min(duration_s) - from.max(0.0)).max(0.0)).sum();
    base * (duration_s - inside) + base * factor * inside
}

/// Open-loop arrival times (seconds from the start, increasing) for
/// `duration_s` at [`rate_at`]: a seeded non-homogeneous Poisson process by
/// thinning (candidate gaps at the peak rate, each kept with probability
/// rate(t) / peak). At most `max` arrivals. Same seed, same times.
pub fn arrivals(base: f64, factor: f64, plan: &[Planned], duration_s: f64, seed: u64, max: usize) -> Vec<f64> {
    let windows = burst_windows(plan);
    let peak = if windows.is_empty() { base } else { base.max(base * factor) };
    // Times only grow, so the bursts already over are never looked at again:
    // a days-long run does not scan the whole plan for every arrival.
    let mut next_window = 0;
    crate::profile::thinned(peak, duration_s, seed, max, |t| {
        while windows.get(next_window).is_some_and(|&(_, to)| to <= t) {
            next_window += 1;
        }
        let in_burst = windows.get(next_window).is_some_and(|&(from, _)| from <= t);
        if in_burst {
            base * factor
        } else {
            base
        }
    })
}

/// The bursts of `plan` as disjoint `[from, to)` windows, sorted, overlapping
/// ones merged (the rate inside two bursts at once is still `factor × base`).
fn burst_windows(plan: &[Planned]) -> Vec<(f64, f64)> {
    let mut bursts: Vec<(f64, f64)> = plan
        .iter()
        .filter(|planned| planned.fault == Fault::Burst && planned.lasts_s > 0.0)
        .map(|planned| (planned.at_s, planned.ends_s()))
        .collect();
    bursts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64)> = Vec::with_capacity(bursts.len());
    for (from, to) in bursts {
        match merged.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => merged.push((from, to)),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ScheduleConfig {
        ScheduleConfig {
            duration_s: 3600.0,
            warm_up_s: 600.0,
            every_s: 300.0,
            settle_s: 300.0,
            broker_down_s: 20.0,
            redis_frozen_s: 15.0,
            burst_s: 60.0,
        }
    }

    #[test]
    fn faults_cycle_in_order_every_period_after_the_warm_up() {
        let config = config();
        let planned = plan(&config);
        // The window ends at 3600 - 300: the swap at 3300 is instant and
        // still fits; the broken model at 3600 does not.
        let starts: Vec<f64> = planned.iter().map(|p| p.at_s).collect();
        assert_eq!(starts, vec![600.0, 900.0, 1200.0, 1500.0, 1800.0, 2100.0, 2400.0, 2700.0, 3000.0, 3300.0]);
        let faults: Vec<Fault> = planned.iter().map(|p| p.fault).collect();
        let mut expected: Vec<Fault> = Fault::ALL.to_vec();
        expected.extend_from_slice(&Fault::ALL[..3]);
        assert_eq!(faults, expected);
        assert_eq!(planned[4].lasts_s, 20.0);
        assert_eq!(planned[5].lasts_s, 15.0);
        assert_eq!(planned[6].lasts_s, 60.0);
        assert_eq!(planned[6].ends_s(), 2460.0);
        assert_eq!(planned[0].lasts_s, 0.0);
    }

    #[test]
    fn no_fault_inside_the_warm_up_or_the_settle() {
        for every_s in [37.0, 100.0, 299.0, 1000.0] {
            let config = ScheduleConfig { every_s, ..config() };
            let planned = plan(&config);
            assert!(!planned.is_empty());
            for p in &planned {
                assert!(p.at_s >= config.warm_up_s, "{p:?}");
                assert!(p.ends_s() <= config.duration_s - config.settle_s, "{p:?}");
            }
        }
    }

    #[test]
    fn a_lasting_fault_that_would_end_in_the_settle_ends_the_plan() {
        // The burst (the 7th) would start at 600 + 6 × 100 = 1200 and end at
        // 1260, past the window's end at 1250.
        let config = ScheduleConfig { duration_s: 1550.0, every_s: 100.0, ..config() };
        let planned = plan(&config);
        assert_eq!(planned.len(), 6);
        assert_eq!(planned.last().map(|p| p.fault), Some(Fault::RedisFreeze));
    }

    #[test]
    fn no_plan_without_a_positive_period() {
        assert!(plan(&ScheduleConfig { every_s: 0.0, ..config() }).is_empty());
        assert!(plan(&ScheduleConfig { every_s: f64::NAN, ..config() }).is_empty());
        assert!(plan(&ScheduleConfig { duration_s: 700.0, ..config() }).is_empty());
    }

    #[test]
    fn every_fault_once_holds_each_fault_exactly_once_spread_evenly() {
        let config = ScheduleConfig { duration_s: 1200.0, warm_up_s: 120.0, settle_s: 120.0, ..config() };
        let planned = every_fault_once(&config, 60.0).expect("the window holds them all");
        let faults: Vec<Fault> = planned.iter().map(|p| p.fault).collect();
        assert_eq!(faults, Fault::ALL.to_vec());
        assert_eq!(planned[0].at_s, 120.0);
        let end = config.duration_s - config.settle_s;
        assert!((planned[6].ends_s() - end).abs() < 1e-9);
        assert!(planned.iter().all(|p| p.at_s >= config.warm_up_s && p.ends_s() <= end));
        // 960 s of window, 95 s of faults: 865 / 6 quiet between each pair.
        let quiet: Vec<f64> = planned.windows(2).map(|w| w[1].at_s - w[0].ends_s()).collect();
        for gap in &quiet {
            assert!((gap - 865.0 / 6.0).abs() < 1e-9, "{quiet:?}");
        }
    }

    #[test]
    fn every_fault_once_is_none_when_the_window_is_too_short() {
        // 95 s of faults + 6 × 60 s of quiet = 455 s needed.
        let fits = ScheduleConfig { duration_s: 455.0, warm_up_s: 0.0, settle_s: 0.0, ..config() };
        assert!(every_fault_once(&fits, 60.0).is_some());
        let short = ScheduleConfig { duration_s: 454.0, ..fits };
        assert_eq!(every_fault_once(&short, 60.0), None);
        let nothing = ScheduleConfig { duration_s: 100.0, warm_up_s: 200.0, ..fits };
        assert_eq!(every_fault_once(&nothing, 0.0), None);
    }

    #[test]
    fn the_rate_is_raised_inside_a_burst_only() {
        let planned = plan(&config());
        let burst = planned.iter().find(|p| p.fault == Fault::Burst).copied().unwrap();
        let broker = planned.iter().find(|p| p.fault == Fault::BrokerRestart).copied().unwrap();
        assert_eq!(rate_at(50.0, 4.0, &planned, burst.at_s - 0.1), 50.0);
        assert_eq!(rate_at(50.0, 4.0, &planned, burst.at_s), 200.0);
        assert_eq!(rate_at(50.0, 4.0, &planned, burst.ends_s() - 0.1), 200.0);
        assert_eq!(rate_at(50.0, 4.0, &planned, burst.ends_s()), 50.0);
        // Other lasting faults leave the rate alone.
        assert_eq!(rate_at(50.0, 4.0, &planned, broker.at_s + 1.0), 50.0);
        assert_eq!(rate_at(50.0, 4.0, &[], 1000.0), 50.0);
    }

    #[test]
    fn arrivals_are_seeded_increasing_and_near_the_base_rate() {
        let times = arrivals(100.0, 4.0, &[], 100.0, 7, usize::MAX);
        assert_eq!(times, arrivals(100.0, 4.0, &[], 100.0, 7, usize::MAX));
        assert_ne!(times, arrivals(100.0, 4.0, &[], 100.0, 8, usize::MAX));
        assert!(times.windows(2).all(|w| w[0] < w[1]));
        assert!(times.iter().all(|&t| (0.0..100.0).contains(&t)));
        // 10 000 expected; one standard deviation is 100.
        let count = times.len() as f64;
        assert!((9500.0..=10500.0).contains(&count), "{count}");
        assert_eq!(arrivals(100.0, 4.0, &[], 100.0, 7, 25).len(), 25);
        assert!(arrivals(0.0, 4.0, &[], 100.0, 7, usize::MAX).is_empty());
    }

    #[test]
    fn arrivals_are_denser_inside_a_burst() {
        let burst = Planned { fault: Fault::Burst, at_s: 40.0, lasts_s: 20.0 };
        let swap = Planned { fault: Fault::ModelSwap, at_s: 10.0, lasts_s: 0.0 };
        let planned = [swap, burst];
        let times = arrivals(100.0, 5.0, &planned, 100.0, 3, usize::MAX);
        let inside = times.iter().filter(|&&t| (40.0..60.0).contains(&t)).count() as f64;
        let outside = times.len() as f64 - inside;
        // ≈ 10 000 inside (20 s at 500/s), ≈ 8 000 outside (80 s at 100/s).
        assert!((9500.0..=10500.0).contains(&inside), "{inside}");
        assert!((7600.0..=8400.0).contains(&outside), "{outside}");
        assert_eq!(expected_arrivals(100.0, 5.0, &planned, 100.0), 18_000.0);
    }

    #[test]
    fn overlapping_bursts_raise_the_rate_once() {
        let first = Planned { fault: Fault::Burst, at_s: 10.0, lasts_s: 20.0 };
        let second = Planned { fault: Fault::Burst, at_s: 20.0, lasts_s: 20.0 };
        assert_eq!(burst_windows(&[second, first]), vec![(10.0, 40.0)]);
        assert_eq!(rate_at(10.0, 3.0, &[first, second], 25.0), 30.0);
        assert_eq!(expected_arrivals(10.0, 3.0, &[first, second], 50.0), 10.0 * 20.0 + 30.0 * 30.0);
        let times = arrivals(100.0, 3.0, &[first, second], 50.0, 11, usize::MAX);
        let inside = times.iter().filter(|&&t| (10.0..40.0).contains(&t)).count() as f64;
        // ≈ 9 000 inside (30 s at 300/s).
        assert!((8550.0..=9450.0).contains(&inside), "{inside}");
    }
}
