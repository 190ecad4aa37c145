//! A version taking over while serving, as it travels down the pipeline.
//!
//! The watcher hands it to the admission stage, which applies the new input
//! limits and request TTL and sends it on behind every message it admitted
//! before; the batch stage forms what it holds into batches under the old
//! batch limits, then takes the new ones; the cache stage looks up under
//! the new version's keys from there on; the engine swaps the module in.
//! Each stage applies its part at the same point of the stream, so every
//! message read before the handover is served wholly by the old version
//! (limits, batching, module, TTLs) and every one after wholly by the new.
//! The answers' TTLs follow the version that answers ([`VersionTtls`]).

use crate::config::batching::BucketLimits;
use crate::config::model::{RequestTtls, TtlConfig};
use crate::config::AnswersConfig;
use crate::core::precision::Precision;
use crate::guard;
use crate::stages::admission::intake::Intake;
use crate::stages::engine::Loaded;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// The next version, loaded and warm, with every stage's part of its config.
/// Each stage takes its part out as the handover passes it.
pub struct Handover {
    pub version: u64,
    pub precision: Precision,
    /// What a feature-cache entry of this version's task is tagged with.
    pub task_tag: String,
    /// The admission stage's: how requests are judged and prepared.
    pub intake: Option<Intake>,
    pub request_ttls: RequestTtls,
    /// Where each lane's answers go from here on.
    pub answers: AnswersConfig,
    /// The batch stage's: its limits, and the row caps the warm-up found.
    pub limits: BucketLimits,
    pub row_caps: Vec<(usize, usize)>,
    /// The engine's: the module.
    pub loaded: Option<Loaded>,
}

/// What travels from the admission stage to the engine: work, or the point
/// at which the next version takes over.
pub enum Piped<T> {
    Work(T),
    Handover(Box<Handover>),
}

/// How many versions' TTLs are kept: answers of a version handed over
/// longer ago are written with the oldest kept (it is long replaced).
const KEPT_VERSIONS: usize = 8;

/// The TTLs of the versions handed over last, in the order they were, shared
/// by the watcher (which adds a version's before handing it over) and the
/// stages that write with them: an answer lives as long as the version that
/// answered it says, whichever stage writes it.
#[derive(Debug, Clone)]
pub struct VersionTtls(Arc<Mutex<VecDeque<(u64, TtlConfig)>>>);

impl VersionTtls {
    pub fn new(version: u64, ttl: TtlConfig) -> Self {
        Self(Arc::new(Mutex::new(VecDeque::from([(version, ttl)]))))
    }

    /// Records `version`'s TTLs as the latest (a version handed over again,
    /// a rollback, takes its config of now), forgetting the earliest beyond
    /// the few kept.
    pub fn insert(&self, version: u64, ttl: TtlConfig) {
        let mut versions = self.lock();
        versions.retain(|(kept, _)| *kept != version);
        versions.push_back((version, ttl));
        while versions.len() > KEPT_VERSIONS {
            versions.pop_front();
        }
    }

    /// The TTLs of `version`; the earliest kept one's for a version not kept.
    pub fn of(&self, version: u64) -> TtlConfig {
        let versions = self.lock();
        versions
            .iter()
            .find(|(kept, _)| *kept == version)
            .or_else(|| versions.front())
            .map(|(_, ttl)| ttl.clone())
            .unwrap_or_default()
    }

    /// The longest time a client may still wait for an answer of `lane`
    /// of any kept version: the lane's request TTL and then the result TTL
    /// (a bulk request may wait hours for its turn; an interactive one
    /// seconds).
    pub fn longest_wait_ms(&self, lane: fleet_proto::Lane) -> u64 {
        let wait = |ttl: &TtlConfig| ttl.request_ttls().of(lane) + ttl.result_ttl_s * 1000;
        self.lock().iter().map(|(_, ttl)| wait(ttl)).max().unwrap_or(0)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, TtlConfig)>> {
        guard::lock(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleet_proto::Lane;

    fn ttl(result_ttl_s: u64) -> TtlConfig {
        TtlConfig { result_ttl_s, ..TtlConfig::default() }
    }

    #[test]
    fn an_answer_lives_as_long_as_its_own_version_says() {
        let ttls = VersionTtls::new(1, ttl(30));
        ttls.insert(2, ttl(600));
        assert_eq!((ttls.of(1).result_ttl_s, ttls.of(2).result_ttl_s), (30, 600));
        // A version not kept reads as the earliest kept.
        assert_eq!(ttls.of(7).result_ttl_s, 30);
        let defaults = TtlConfig::default();
        assert_eq!(ttls.longest_wait_ms(Lane::Interactive), defaults.request_ttl_ms + 600_000);
        assert_eq!(ttls.longest_wait_ms(Lane::Bulk), defaults.bulk_request_ttl_ms + 600_000, "its own lane's wait");
        // Handed over again (a rollback): its config of now.
        ttls.insert(1, ttl(90));
        assert_eq!(ttls.of(1).result_ttl_s, 90);
    }

    #[test]
    fn only_the_versions_handed_over_last_are_kept_whatever_their_numbers() {
        let ttls = VersionTtls::new(50, ttl(50));
        for version in 51..=60 {
            ttls.insert(version, ttl(version));
        }
        // A rollback far below every kept number is kept, as the latest.
        ttls.insert(3, ttl(3));
        assert_eq!(ttls.lock().len(), KEPT_VERSIONS);
        assert_eq!(ttls.of(3).result_ttl_s, 3);
        assert_eq!(ttls.of(60).result_ttl_s, 60);
        assert_eq!(ttls.of(50).result_ttl_s, 54, "forgotten: the earliest kept is 54");
    }
}
