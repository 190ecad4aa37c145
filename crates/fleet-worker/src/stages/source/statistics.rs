//! librdkafka's own statistics (`statistics.interval.ms`, 10 s by default
//! here) as worker metrics, so the series a soak watches for a slow leak
//! are the ones an operator's dashboard shows: what each lane's consumer
//! holds prefetched per partition (messages and bytes: the memory that
//! `queued.max.messages.kbytes` bounds per partition), the operations
//! waiting in its reply queue (grows when events are not served), and how
//! many rebalances it has been through (a storm shows as a steep line).
//!
//! Reading the statistics is pure ([`ConsumerStatistics::of`]); publishing
//! them is the only side effect.

use crate::metrics::{KAFKA_FETCH_QUEUE_BYTES, KAFKA_FETCH_QUEUE_MESSAGES, KAFKA_REBALANCES_TOTAL, KAFKA_REPLY_QUEUE};
use fleet_proto::Lane;
use rdkafka::statistics::Statistics;

/// What one partition's consumer holds fetched and not yet handed to the
/// worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionQueue {
    pub partition: i32,
    pub messages: i64,
    pub bytes: u64,
}

/// One statistics report of one lane's consumer, for its lane's topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerStatistics {
    /// Operations waiting to be served by the application.
    pub reply_queue: i64,
    /// Rebalances this consumer has been through since it started (none
    /// before it first joins the group).
    pub rebalances: Option<i64>,
    /// Every known partition of the topic, in order. librdkafka's internal
    /// "unassigned" partition (-1) is left out.
    pub partitions: Vec<PartitionQueue>,
}

impl ConsumerStatistics {
    pub fn of(statistics: &Statistics, topic: &str) -> Self {
        let mut partitions: Vec<PartitionQueue> = statistics
            .topics
            .get(topic)
            .map(|t| {
                t.partitions
                    .values()
                    .filter(|p| p.partition >= 0)
                    .map(|p| PartitionQueue { partition: p.partition, messages: p.fetchq_cnt, bytes: p.fetchq_size })
                    .collect()
            })
            .unwrap_or_default();
        partitions.sort_by_key(|p| p.partition);
        Self {
            reply_queue: statistics.replyq,
            rebalances: statistics.cgrp.as_ref().map(|group| group.rebalance_cnt),
            partitions,
        }
    }

    /// Sets the lane's series from this report.
    pub fn publish(&self, lane: Lane) {
        let lane = lane.as_str();
        metrics::gauge!(KAFKA_REPLY_QUEUE, "lane" => lane).set(self.reply_queue as f64);
        if let Some(rebalances) = self.rebalances {
            metrics::counter!(KAFKA_REBALANCES_TOTAL, "lane" => lane).absolute(u64::try_from(rebalances).unwrap_or(0));
        }
        for p in &self.partitions {
            let partition = p.partition.to_string();
            metrics::gauge!(KAFKA_FETCH_QUEUE_MESSAGES, "lane" => lane, "partition" => partition.clone())
                .set(p.messages as f64);
            metrics::gauge!(KAFKA_FETCH_QUEUE_BYTES, "lane" => lane, "partition" => partition).set(p.bytes as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A consumer's report as librdkafka writes it (trimmed to what the
    /// parser requires and what is read here, values changed).
    fn report(topic: &str) -> Statistics {
        let partition = |id: i32, count: i64, size: u64| {
            format!(
                r#""{id}": {{"partition": {id}, "broker": 1, "leader": 1, "desired": true, "unknown": false,
                "msgq_cnt": 0, "msgq_bytes": 0, "xmit_msgq_cnt": 0, "xmit_msgq_bytes": 0,
                "fetchq_cnt": {count}, "fetchq_size": {size}, "fetch_state": "active",
                "query_offset": -1001, "next_offset": 10, "app_offset": 10, "stored_offset": 9,
                "committed_offset": 9, "eof_offset": -1001, "lo_offset": 0, "hi_offset": 12,
                "ls_offset": 12, "consumer_lag": 2, "consumer_lag_stored": 3, "txmsgs": 0,
                "txbytes": 0, "rxmsgs": 12, "rxbytes": 4000, "msgs": 12, "rx_ver_drops": 0,
                "msgs_inflight": 0, "next_ack_seq": 0, "next_err_seq": 0, "acked_msgid": 0}}"#
            )
        };
        let window = r#"{"min": 0, "max": 0, "avg": 0, "sum": 0, "stddev": 0, "p50": 0, "p75": 0, "p90": 0,
            "p95": 0, "p99": 0, "p99_99": 0, "outofrange": 0, "hdrsize": 0, "cnt": 0}"#;
        let partitions = [partition(1, 7, 2100), partition(0, 3, 900), partition(-1, 0, 0)].join(",");
        let json = format!(
            r#"{{"name": "w#consumer-1", "client_id": "w-interactive", "type": "consumer",
            "ts": 1, "time": 1, "age": 1, "replyq": 4, "msg_cnt": 0, "msg_size": 0,
            "msg_max": 100000, "msg_size_max": 1073741824, "simple_cnt": 0, "metadata_cache_cnt": 1,
            "tx": 10, "tx_bytes": 100, "rx": 10, "rx_bytes": 100, "txmsgs": 0, "txmsg_bytes": 0,
            "rxmsgs": 12, "rxmsg_bytes": 4000, "brokers": {{}},
            "topics": {{"{topic}": {{"topic": "{topic}", "age": 1, "metadata_age": 1,
                "batchsize": {window}, "batchcnt": {window}, "partitions": {{{partitions}}}}}}},
            "cgrp": {{"state": "up", "stateage": 1000, "join_state": "steady", "rebalance_age": 900,
                "rebalance_cnt": 3, "rebalance_reason": "", "assignment_size": 2}}}}"#
        );
        serde_json::from_str(&json).expect("a librdkafka statistics report")
    }

    #[test]
    fn a_report_gives_each_partition_s_prefetch_the_reply_queue_and_the_rebalances() {
        let read = ConsumerStatistics::of(&report("infer.minilm"), "infer.minilm");
        assert_eq!(read.reply_queue, 4);
        assert_eq!(read.rebalances, Some(3));
        assert_eq!(
            read.partitions,
            [
                PartitionQueue { partition: 0, messages: 3, bytes: 900 },
                PartitionQueue { partition: 1, messages: 7, bytes: 2100 }
            ]
        );
    }

    #[test]
    fn another_topic_s_partitions_are_not_this_lane_s() {
        let read = ConsumerStatistics::of(&report("infer.minilm"), "infer.minilm.bulk");
        assert!(read.partitions.is_empty());
        assert_eq!(read.reply_queue, 4);
    }
}
