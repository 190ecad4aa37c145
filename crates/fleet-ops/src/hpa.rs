//! The replica arithmetic of Kubernetes' HorizontalPodAutoscaler
//! (autoscaling/v2), for an external AverageValue metric such as
//! `kafka_lag`, with the `behavior` section's stabilization windows and
//! rate policies. Pure: feed it a recorded lag series and it says what the
//! HPA would have done (`fleet-lag replay`, docs/autoscaling.md).
//!
//! Follows the controller's documented algorithm:
//! 1. proposal = ceil(metric total / target per replica), unless the usage
//!    ratio (total / (target × current replicas)) is within the tolerance
//!    of 1, in which case the current count stays;
//! 2. stabilization: the proposal is kept between the lowest recommendation
//!    of the scale-up window and the highest of the scale-down window;
//! 3. rate policies limit how many replicas may be added or removed within
//!    each policy's period (selectPolicy picks the most or least change);
//! 4. the result is clamped to [minReplicas, maxReplicas].

use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    Pods(u32),
    Percent(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub kind: PolicyKind,
    pub period_s: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    /// The policy that allows the largest change.
    Max,
    /// The policy that allows the smallest change.
    Min,
    /// No change in this direction at all.
    Disabled,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    pub stabilization_window_s: u64,
    pub policies: Vec<Policy>,
    pub select: Select,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HpaSpec {
    pub min_replicas: u32,
    pub max_replicas: u32,
    /// Target value of the metric per replica (AverageValue).
    pub target_per_replica: f64,
    /// The controller's `--horizontal-pod-autoscaler-tolerance` (0.1).
    pub tolerance: f64,
    pub scale_up: Rules,
    pub scale_down: Rules,
}

impl HpaSpec {
    /// What `helm/fleet` renders (values.yaml `autoscaling`) for a model
    /// with `max_replicas` (≤ its partitions): kafka_lag AverageValue 100;
    /// scale up at once by up to 100 % or 4 pods per 15 s, whichever is
    /// more; scale down only after a 300 s window, one pod per 60 s (each
    /// worker that leaves makes the group rebalance).
    pub fn fleet_default(min_replicas: u32, max_replicas: u32) -> Self {
        Self {
            min_replicas,
            max_replicas,
            target_per_replica: 100.0,
            tolerance: 0.1,
            scale_up: Rules {
                stabilization_window_s: 0,
                policies: vec![
                    Policy { kind: PolicyKind::Percent(100), period_s: 15 },
                    Policy { kind: PolicyKind::Pods(4), period_s: 15 },
                ],
                select: Select::Max,
            },
            scale_down: Rules {
                stabilization_window_s: 300,
                policies: vec![Policy { kind: PolicyKind::Pods(1), period_s: 60 }],
                select: Select::Max,
            },
        }
    }
}

/// The controller's memory between syncs: past recommendations (for the
/// stabilization windows) and past scale events (for the rate policies).
#[derive(Debug, Clone)]
pub struct Hpa {
    spec: HpaSpec,
    recommendations: VecDeque<(u64, u32)>,
    scale_ups: VecDeque<(u64, u32)>,
    scale_downs: VecDeque<(u64, u32)>,
}

impl Hpa {
    pub fn new(spec: HpaSpec) -> Self {
        Self { spec, recommendations: VecDeque::new(), scale_ups: VecDeque::new(), scale_downs: VecDeque::new() }
    }

    pub fn spec(&self) -> &HpaSpec {
        &self.spec
    }

    /// The bare metric proposal (step 1), before stabilization and limits.
    pub fn proposal(&self, current: u32, metric_total: f64) -> u32 {
        let target = self.spec.target_per_replica;
        if current == 0 || target <= 0.0 {
            return current;
        }
        let usage_ratio = metric_total / (target * f64::from(current));
        if (usage_ratio - 1.0).abs() <= self.spec.tolerance {
            return current;
        }
        (metric_total / target).ceil().max(0.0).min(f64::from(u32::MAX)) as u32
    }

    /// One sync at `now_s`: the replica count the controller sets, given the
    /// current count and the metric's total over the target (the sum the
    /// external metric query returns).
    pub fn sync(&mut self, now_s: u64, current: u32, metric_total: f64) -> u32 {
        let proposal = self.proposal(current, metric_total);
        let stabilized = self.stabilize(now_s, current, proposal);
        let limited = self.limit_rate(now_s, current, stabilized);
        let desired = limited.clamp(self.spec.min_replicas, self.spec.max_replicas.max(self.spec.min_replicas));
        match desired.cmp(&current) {
            std::cmp::Ordering::Greater => self.scale_ups.push_back((now_s, desired - current)),
            std::cmp::Ordering::Less => self.scale_downs.push_back((now_s, current - desired)),
            std::cmp::Ordering::Equal => {}
        }
        desired
    }

    /// The controller's stabilization: a recommendation counts in a window
    /// when it was made less than the window's length ago; this sync's own
    /// proposal always counts.
    fn stabilize(&mut self, now_s: u64, current: u32, proposal: u32) -> u32 {
        let longest = self.spec.scale_up.stabilization_window_s.max(self.spec.scale_down.stabilization_window_s);
        while self.recommendations.front().is_some_and(|&(t, _)| now_s - t >= longest) {
            self.recommendations.pop_front();
        }
        let (mut up, mut down) = (proposal, proposal);
        for &(t, recommended) in &self.recommendations {
            if now_s - t < self.spec.scale_up.stabilization_window_s {
                up = up.min(recommended);
            }
            if now_s - t < self.spec.scale_down.stabilization_window_s {
                down = down.max(recommended);
            }
        }
        self.recommendations.push_back((now_s, proposal));
        // Up no further than the window's lowest recommendation, down no
        // further than its highest.
        current.max(up).min(down)
    }

    fn limit_rate(&mut self, now_s: u64, current: u32, desired: u32) -> u32 {
        if desired > current {
            let limit = limit(&self.spec.scale_up, &mut self.scale_ups, now_s, current, Direction::Up);
            desired.min(limit).min(self.spec.max_replicas)
        } else if desired < current {
            let limit = limit(&self.spec.scale_down, &mut self.scale_downs, now_s, current, Direction::Down);
            desired.max(limit).max(self.spec.min_replicas)
        } else {
            desired
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Up,
    Down,
}

/// The furthest the policies let the count move from `current` now, given
/// the changes already made within each policy's period.
fn limit(rules: &Rules, events: &mut VecDeque<(u64, u32)>, now_s: u64, current: u32, direction: Direction) -> u32 {
    let longest = rules.policies.iter().map(|p| p.period_s).max().unwrap_or(0);
    while events.front().is_some_and(|&(t, _)| now_s.saturating_sub(t) >= longest) {
        events.pop_front();
    }
    if rules.select == Select::Disabled || rules.policies.is_empty() {
        return current;
    }
    let limits = rules.policies.iter().map(|policy| {
        let changed: u32 = events.iter().filter(|&&(t, _)| now_s - t < policy.period_s).map(|&(_, n)| n).sum();
        match direction {
            Direction::Up => {
                let start = current.saturating_sub(changed);
                match policy.kind {
                    PolicyKind::Pods(n) => start.saturating_add(n),
                    PolicyKind::Percent(p) => (f64::from(start) * (1.0 + f64::from(p) / 100.0)).ceil() as u32,
                }
            }
            Direction::Down => {
                let start = current.saturating_add(changed);
                match policy.kind {
                    PolicyKind::Pods(n) => start.saturating_sub(n),
                    PolicyKind::Percent(p) => (f64::from(start) * (1.0 - f64::from(p) / 100.0)).max(0.0) as u32,
                }
            }
        }
    });
    // "Max" picks the policy allowing the most change: the highest limit
    // going up, the lowest going down.
    match (direction, rules.select) {
        (Direction::Up, Select::Max) | (Direction::Down, Select::Min) => limits.max().unwrap_or(current),
        _ => limits.min().unwrap_or(current),
    }
}

/// One step of a replay.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub at_s: u64,
    pub lag: f64,
    pub proposal: u32,
    pub replicas: u32,
}

/// Replays a lag series (seconds since start, total lag) through the HPA,
/// syncing at 0 and every `sync_period_s` after (the controller's default
/// is 15 s) on the latest sample at or before each sync (the first sample
/// before there is one). Open loop: the series was recorded with the
/// replicas it had, so this shows the decisions, not their effect.
pub fn replay(spec: HpaSpec, samples: &[(f64, f64)], sync_period_s: u64, start_replicas: u32) -> Vec<Decision> {
    let mut hpa = Hpa::new(spec);
    let mut replicas = start_replicas;
    let mut decisions = Vec::new();
    let (Some(&(_, first_lag)), Some(&(last_t, _))) = (samples.first(), samples.last()) else {
        return decisions;
    };
    let mut at = 0u64;
    while at as f64 <= last_t {
        let lag = samples.iter().rev().find(|&&(t, _)| t <= at as f64).map_or(first_lag, |&(_, lag)| lag);
        let proposal = hpa.proposal(replicas, lag);
        replicas = hpa.sync(at, replicas, lag);
        decisions.push(Decision { at_s: at, lag, proposal, replicas });
        at += sync_period_s.max(1);
    }
    decisions
}

/// A replay as a table (only the syncs where something changed, plus the
/// first and last) and a closing `RESULT hpa_replay` line.
pub fn render(decisions: &[Decision]) -> String {
    let mut out = format!("{:>6} {:>8} {:>9} {:>9}\n", "t (s)", "lag", "proposal", "replicas");
    let mut previous: Option<&Decision> = None;
    for (i, d) in decisions.iter().enumerate() {
        let changed = previous.is_none_or(|p| p.replicas != d.replicas || p.proposal != d.proposal);
        if changed || i + 1 == decisions.len() {
            out += &format!("{:>6} {:>8.0} {:>9} {:>9}\n", d.at_s, d.lag, d.proposal, d.replicas);
        }
        previous = Some(d);
    }
    let peak = decisions.iter().map(|d| d.replicas).max().unwrap_or(0);
    let start = decisions.first().map_or(0, |d| d.replicas);
    let first_up = decisions.iter().find(|d| d.replicas > start).map(|d| d.at_s.to_string());
    let at_peak = decisions.iter().find(|d| d.replicas == peak).map(|d| d.at_s.to_string());
    let back =
        decisions.iter().skip_while(|d| d.replicas < peak).find(|d| d.replicas == start).map(|d| d.at_s.to_string());
    let or_none = |v: Option<String>| v.unwrap_or_else(|| "none".into());
    out += &format!(
        "RESULT hpa_replay peak_replicas={peak} first_scale_up_s={} peak_at_s={} back_to_start_s={}\n",
        or_none(first_up),
        or_none(at_peak),
        or_none(back)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn plain(min: u32, max: u32) -> HpaSpec {
        let free = |window| Rules {
            stabilization_window_s: window,
            policies: vec![Policy { kind: PolicyKind::Percent(1000), period_s: 15 }],
            select: Select::Max,
        };
        HpaSpec {
            min_replicas: min,
            max_replicas: max,
            target_per_replica: 100.0,
            tolerance: 0.1,
            scale_up: free(0),
            scale_down: free(0),
        }
    }

    #[test]
    fn the_proposal_is_the_total_over_the_target_rounded_up() {
        let hpa = Hpa::new(plain(1, 10));
        assert_eq!(hpa.proposal(1, 450.0), 5);
        assert_eq!(hpa.proposal(4, 401.0), 4, "within the 10 % tolerance: stay");
        assert_eq!(hpa.proposal(4, 450.0), 5, "12.5 % over: move");
        assert_eq!(hpa.proposal(3, 0.0), 0, "no lag proposes zero; minReplicas clamps later");
    }

    #[test]
    fn replicas_stay_within_min_and_max() {
        let mut hpa = Hpa::new(plain(2, 8));
        assert_eq!(hpa.sync(0, 2, 100_000.0), 8);
        assert_eq!(hpa.sync(15, 8, 0.0), 2);
    }

    #[test]
    fn the_scale_down_window_holds_the_highest_recent_recommendation() {
        let mut spec = plain(1, 8);
        spec.scale_down.stabilization_window_s = 300;
        let mut hpa = Hpa::new(spec);
        assert_eq!(hpa.sync(0, 1, 800.0), 8);
        // The lag is gone, but 8 was recommended less than 300 s ago.
        for t in (15..=285).step_by(15) {
            assert_eq!(hpa.sync(t, 8, 0.0), 8, "at {t} s");
        }
        assert_eq!(hpa.sync(300, 8, 0.0), 1, "the window has passed");
    }

    #[test]
    fn the_fleet_default_doubles_or_adds_four_per_period_and_sheds_one_a_minute() {
        let mut hpa = Hpa::new(HpaSpec::fleet_default(1, 8));
        assert_eq!(hpa.sync(0, 1, 5000.0), 5, "1 + 4 pods beats +100 %");
        assert_eq!(hpa.sync(15, 5, 5000.0), 8, "then +100 %, capped at 8");
        for t in (30..=300).step_by(15) {
            assert_eq!(hpa.sync(t, 8, 0.0), 8, "held by the 300 s window at {t} s");
        }
        assert_eq!(hpa.sync(315, 8, 0.0), 7, "one pod per 60 s");
        assert_eq!(hpa.sync(330, 7, 0.0), 7, "the same period allows no more");
        assert_eq!(hpa.sync(375, 7, 0.0), 6);
    }

    proptest! {
        #[test]
        fn every_decision_is_within_bounds_and_follows_the_metric(
            lags in proptest::collection::vec(0.0f64..20_000.0, 1..80),
            min in 1u32..3,
            extra in 0u32..10,
        ) {
            let spec = HpaSpec::fleet_default(min, min + extra);
            let samples: Vec<(f64, f64)> = lags.iter().enumerate().map(|(i, &l)| (i as f64 * 15.0, l)).collect();
            let mut previous = min;
            for d in replay(spec.clone(), &samples, 15, min) {
                prop_assert!(d.replicas >= spec.min_replicas && d.replicas <= spec.max_replicas);
                // Never moves against its proposal.
                if d.replicas > previous { prop_assert!(d.proposal > previous); }
                if d.replicas < previous { prop_assert!(d.proposal < previous); }
                previous = d.replicas;
            }
        }
    }
}
