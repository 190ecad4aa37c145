//! Consumer-group lag, defined as kafka_exporter and KEDA define it: for
//! each partition, the high watermark minus the group's committed offset.
//!
//! A partition the group has never committed on is not "no lag": the fleet
//! consumes with `auto.offset.reset = earliest`, so its first reader starts
//! at the low watermark and everything still retained is waiting. Reading
//! such a partition as zero would let an autoscaler sit at its minimum while
//! a fresh topic fills up.
//!
//! Each model has two lanes, each its own topic read by the one group
//! `fleet.<model>`: interactive requests on `infer.<model>`, bulk on
//! `infer.<model>.bulk` ([`Lane`]). Their lags are measured and exported
//! apart (the `topic` label, as kafka_exporter has it, plus `lane`): a
//! backfill waiting on the bulk topic is not interactive lag, and an
//! autoscaler must be able to tell the two apart.

pub use fleet_proto::Lane;

/// The offsets of one partition that lag is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    pub partition: i32,
    /// Oldest offset still retained.
    pub low: i64,
    /// Offset the next produced message will get.
    pub high: i64,
    /// The group's committed offset (the next one it will read), if any.
    pub committed: Option<i64>,
}

impl PartitionOffsets {
    /// Messages produced to the partition that the group has not yet
    /// committed past; never negative.
    pub fn lag(&self) -> u64 {
        // A committed offset below the low watermark points at deleted
        // messages: reading resumes at the low watermark.
        let next = self.committed.unwrap_or(self.low).max(self.low);
        u64::try_from(self.high.saturating_sub(next)).unwrap_or(0)
    }
}

/// Lag of one group on one topic, partition by partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicLag {
    pub group: String,
    pub topic: String,
    /// The lane whose topic this is (the `lane` label).
    pub lane: Lane,
    pub partitions: Vec<PartitionOffsets>,
}

impl TopicLag {
    pub fn total(&self) -> u64 {
        self.partitions.iter().map(PartitionOffsets::lag).sum()
    }

    /// Partitions with no committed offset yet.
    pub fn uncommitted(&self) -> usize {
        self.partitions.iter().filter(|p| p.committed.is_none()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn offsets(low: i64, high: i64, committed: Option<i64>) -> PartitionOffsets {
        PartitionOffsets { partition: 0, low, high, committed }
    }

    #[test]
    fn lag_is_high_watermark_minus_committed() {
        assert_eq!(offsets(0, 100, Some(40)).lag(), 60);
        assert_eq!(offsets(0, 100, Some(100)).lag(), 0);
    }

    #[test]
    fn a_partition_never_committed_counts_everything_retained() {
        assert_eq!(offsets(0, 100, None).lag(), 100);
        assert_eq!(offsets(30, 100, None).lag(), 70);
        assert_eq!(offsets(0, 0, None).lag(), 0);
    }

    #[test]
    fn a_commit_below_retention_counts_from_the_low_watermark() {
        assert_eq!(offsets(50, 100, Some(10)).lag(), 50);
    }

    #[test]
    fn the_topic_total_sums_its_partitions() {
        let lag = TopicLag {
            group: "fleet.m".into(),
            topic: "infer.m".into(),
            lane: Lane::Interactive,
            partitions: vec![offsets(0, 10, Some(5)), PartitionOffsets { partition: 1, ..offsets(0, 7, None) }],
        };
        assert_eq!((lag.total(), lag.uncommitted()), (12, 1));
    }

    proptest! {
        #[test]
        fn lag_never_exceeds_what_is_retained(low in 0i64..1000, len in 0i64..1000, c in proptest::option::of(-10i64..3000)) {
            let high = low + len;
            let lag = offsets(low, high, c).lag();
            prop_assert!(lag <= len as u64);
            if let Some(c) = c.filter(|&c| c >= low && c <= high) {
                prop_assert_eq!(lag, (high - c) as u64);
            }
        }
    }
}
