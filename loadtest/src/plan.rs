//! Capacity planning from measured capacity: how many replicas a target
//! rate needs, given what one replica sustains within the latency SLO.

/// One measured setting: the highest offered rate one worker sustained
/// with its p99 within the SLO and nothing expired.
#[derive(Debug, Clone, PartialEq)]
pub struct Capacity {
    pub label: String,
    pub sustained_rps: f64,
    pub p99_ms: f64,
}

/// Replicas for `target_rps` when each sustains `per_replica_rps`, with
/// `headroom` (0.3 = keep 30 % spare for bursts and a lost pod) and never
/// more than `max_replicas` (the topic's partitions). `None` when even the
/// maximum does not reach the target.
pub fn replicas_for(target_rps: f64, per_replica_rps: f64, headroom: f64, max_replicas: u32) -> Option<u32> {
    if per_replica_rps <= 0.0 {
        return None;
    }
    let usable = per_replica_rps * (1.0 - headroom.clamp(0.0, 0.9));
    let needed = (target_rps / usable).ceil().max(1.0) as u32;
    (needed <= max_replicas).then_some(needed)
}

/// The best setting: the highest sustained rate.
pub fn best(capacities: &[Capacity]) -> Option<&Capacity> {
    capacities.iter().max_by(|a, b| a.sustained_rps.total_cmp(&b.sustained_rps))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_cover_the_target_with_headroom_within_the_partitions() {
        assert_eq!(replicas_for(2000.0, 100.0, 0.0, 64), Some(20));
        assert_eq!(replicas_for(2000.0, 100.0, 0.2, 64), Some(25));
        assert_eq!(replicas_for(2000.0, 100.0, 0.2, 8), None, "more than the partitions");
        assert_eq!(replicas_for(10.0, 100.0, 0.3, 8), Some(1));
        assert_eq!(replicas_for(10.0, 0.0, 0.3, 8), None);
    }

    #[test]
    fn the_best_setting_sustains_the_most() {
        let c = |label: &str, rps| Capacity { label: label.into(), sustained_rps: rps, p99_ms: 100.0 };
        assert_eq!(best(&[c("a", 100.0), c("b", 150.0), c("c", 120.0)]).unwrap().label, "b");
    }
}
