//! The two lanes a worker reads (interactive `infer.<model>`, bulk
//! `infer.<model>.bulk`), and the rule that shares the worker between them:
//! interactive work first, bulk with what is left, yet never less than a
//! minimum share of what is taken while both wait, so a backfill always
//! ends however busy the interactive lane is. Pure; no I/O.

use fleet_proto::{Lane, ModelName, Namespace};

/// One of a thing for each lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerLane<T> {
    pub interactive: T,
    pub bulk: T,
}

impl<T> PerLane<T> {
    pub fn of(&self, lane: Lane) -> &T {
        match lane {
            Lane::Interactive => &self.interactive,
            Lane::Bulk => &self.bulk,
        }
    }

    /// Each lane's, interactive first.
    pub fn each(&self) -> [(Lane, &T); 2] {
        [(Lane::Interactive, &self.interactive), (Lane::Bulk, &self.bulk)]
    }
}

/// The topic of each lane of one model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneTopics(PerLane<String>);

impl LaneTopics {
    pub fn of(names: &Namespace, model: &ModelName) -> Self {
        let topic = |lane| names.lane_topic(model, lane);
        Self(PerLane { interactive: topic(Lane::Interactive), bulk: topic(Lane::Bulk) })
    }

    pub fn topic(&self, lane: Lane) -> &str {
        self.0.of(lane)
    }

    /// The lane whose topic `topic` is, if it is one of this model's.
    pub fn lane_of(&self, topic: &str) -> Option<Lane> {
        self.0.each().into_iter().find(|(_, name)| *name == topic).map(|(lane, _)| lane)
    }

    /// Both topics, interactive first.
    pub fn all(&self) -> [&str; 2] {
        self.0.each().map(|(_, name)| name.as_str())
    }
}

/// Chooses which lane the next piece of work (a message, a batch) comes
/// from. While only one lane has work, that one; while both have, bulk gets
/// `bulk_share` of the turns (a credit that grows by the share on each
/// contested turn and is spent whole), interactive the rest.
#[derive(Debug, Clone)]
pub struct LaneShare {
    /// Bulk's share in millionths: counted whole, so ten turns of 0.1 make
    /// exactly one (in floating point they fall short of it).
    bulk_share_ppm: u64,
    credit_ppm: u64,
}

const WHOLE_PPM: u64 = 1_000_000;

impl LaneShare {
    /// `bulk_share` is clamped to 0.001..=1: 0 would starve bulk, so it is
    /// raised to the smallest share that still moves (1 turn in 1000).
    pub fn new(bulk_share: f64) -> Self {
        let ppm = (bulk_share.clamp(0.001, 1.0) * WHOLE_PPM as f64).round() as u64;
        Self { bulk_share_ppm: ppm, credit_ppm: 0 }
    }

    /// The lane to take from, given which have work waiting; `None` when neither.
    pub fn pick(&mut self, interactive_waiting: bool, bulk_waiting: bool) -> Option<Lane> {
        match (interactive_waiting, bulk_waiting) {
            (false, false) => None,
            (true, false) => Some(Lane::Interactive),
            // Uncontested: no credit is earned or spent, so bulk cannot save
            // up turns while it is alone and burst later.
            (false, true) => Some(Lane::Bulk),
            (true, true) => {
                self.credit_ppm += self.bulk_share_ppm;
                if self.credit_ppm >= WHOLE_PPM {
                    self.credit_ppm -= WHOLE_PPM;
                    Some(Lane::Bulk)
                } else {
                    Some(Lane::Interactive)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_lane_has_its_topic() {
        let names = Namespace::new("blue.infer.", "g.", "r:").unwrap();
        let topics = LaneTopics::of(&names, &ModelName::parse("minilm").unwrap());
        assert_eq!(topics.all(), ["blue.infer.minilm", "blue.infer.minilm.bulk"]);
        assert_eq!(topics.lane_of("blue.infer.minilm.bulk"), Some(Lane::Bulk));
        assert_eq!(topics.lane_of("blue.infer.minilm"), Some(Lane::Interactive));
        assert_eq!(topics.lane_of("blue.infer.minilm.dlq"), None);
    }

    #[test]
    fn interactive_goes_first_and_bulk_takes_what_is_left() {
        let mut share = LaneShare::new(0.1);
        assert_eq!(share.pick(false, false), None);
        assert_eq!(share.pick(true, false), Some(Lane::Interactive));
        assert_eq!(share.pick(false, true), Some(Lane::Bulk));
        let contested: Vec<_> = (0..20).map(|_| share.pick(true, true).unwrap()).collect();
        assert_eq!(contested.iter().filter(|&&l| l == Lane::Bulk).count(), 2, "{contested:?}");
        assert_eq!(contested[0], Lane::Interactive, "interactive first");
    }

    proptest! {
        /// Over any run of contested turns, bulk's share is the configured
        /// one (within one turn, plus what holding the share in millionths
        /// can shift it: half a millionth per turn), and bulk is never starved.
        #[test]
        fn bulk_keeps_its_share_when_both_wait(share in 0.01f64..0.9, turns in 1usize..2000) {
            let mut lanes = LaneShare::new(share);
            let bulk = (0..turns).filter(|_| lanes.pick(true, true) == Some(Lane::Bulk)).count();
            let expected = share * turns as f64;
            let resolution = 0.5 / WHOLE_PPM as f64 * turns as f64;
            prop_assert!(
                (bulk as f64 - expected).abs() <= 1.0 + resolution,
                "{bulk} of {turns} at {share}"
            );
        }
    }
}
