//! What the autoscalers are configured with (the chart's values and the
//! adapter's rule) and what each would compute from a backlog: the HPA
//! through prometheus-adapter's query, KEDA from the broker itself. Apart
//! from the live test, which compares both with what fleet-lag exports.

use crate::prometheus::url_encode;
use crate::{read_repo_file, PARTITIONS};
use fleet_ops::hpa::{Hpa, HpaSpec};
use fleet_testkit::Broker;
use std::time::Duration;

/// What the autoscalers are configured with: the chart's values
/// (helm/fleet/values.yaml) and the adapter's rule.
pub struct Autoscaling {
    /// prometheus-adapter's query for `kafka_lag`, with the series and the
    /// HPA's selector filled in (the adapter's own templating).
    pub adapter_query: String,
    /// The adapter's `seriesQuery`: which series it offers at all.
    pub adapter_series_query: String,
    /// `autoscaling.lagPerReplica`: the HPA's AverageValue, KEDA's lagThreshold.
    lag_per_replica: i64,
    /// `autoscaling.keda.*`, as the chart writes them into the kafka trigger.
    keda_offset_reset_earliest: bool,
    keda_allow_idle_consumers: bool,
    keda_limit_to_partitions_with_lag: bool,
}

impl Autoscaling {
    pub fn from_chart(group: &str, topic: &str) -> Self {
        let adapter = read_repo_file("helm/prometheus-adapter-values.yaml");
        let series_query = yaml_scalar(&adapter, "seriesQuery");
        let metrics_query = yaml_scalar(&adapter, "metricsQuery");
        let series = series_query.split('{').next().unwrap_or_default().trim().to_owned();
        assert_eq!(series, "kafka_consumergroup_lag", "the adapter's rule reads another series: {series_query}");
        assert!(
            metrics_query.contains("<<.Series>>") && metrics_query.contains("<<.LabelMatchers>>"),
            "{metrics_query}"
        );
        // The HPA selects the metric by these labels (worker-hpa.yaml's
        // matchLabels); the adapter adds the HPA's namespace as well, a
        // label this Prometheus (no Kubernetes) does not attach.
        let hpa = read_repo_file("helm/fleet/templates/worker-hpa.yaml");
        assert!(hpa.contains("topic: {{ $m.topic }}") && hpa.contains("consumergroup: {{ $m.group }}"), "{hpa}");
        let matchers = format!("topic=\"{topic}\",consumergroup=\"{group}\"");
        let adapter_query = metrics_query.replace("<<.Series>>", &series).replace("<<.LabelMatchers>>", &matchers);

        let keda = read_repo_file("helm/fleet/templates/worker-keda.yaml");
        assert!(keda.contains("- type: kafka"), "the KEDA ScaledObject no longer uses the kafka trigger");
        let values = read_repo_file("helm/fleet/values.yaml");
        let flag = |key: &str| match yaml_scalar(&values, key).as_str() {
            "true" => true,
            "false" => false,
            other => panic!("{key}: {other} is not a boolean"),
        };
        let policy = yaml_scalar(&values, "offsetResetPolicy");
        assert!(policy == "earliest" || policy == "latest", "offsetResetPolicy {policy}");
        Self {
            adapter_query,
            adapter_series_query: series_query,
            lag_per_replica: yaml_scalar(&values, "lagPerReplica").parse().expect("lagPerReplica"),
            keda_offset_reset_earliest: policy == "earliest",
            keda_allow_idle_consumers: flag("allowIdleConsumers"),
            keda_limit_to_partitions_with_lag: flag("limitToPartitionsWithLag"),
        }
    }

    /// What KEDA's Kafka scaler computes, read from the broker the way it
    /// reads it (KEDA never asks Prometheus: its `kafka` trigger fetches
    /// the group's committed offsets and the partitions' newest offsets
    /// itself, so its input is compared with the broker, not with a query).
    /// Per partition: newest offset − committed offset; a partition never
    /// committed counts its newest offset under offsetResetPolicy earliest
    /// (1 under latest). Returns (the total lag, the metric KEDA gives its
    /// HPA: the total capped at partitions × lagThreshold unless
    /// allowIdleConsumers). fleet-lag counts an uncommitted partition as
    /// newest − oldest retained offset: the same while nothing has been
    /// deleted, which the test asserts.
    pub fn keda_lag(&self, broker: &Broker, group: &str, topic: &str) -> (i64, i64) {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        use rdkafka::{Offset, TopicPartitionList};
        let timeout = Duration::from_secs(5);
        let consumer: BaseConsumer = broker
            .kafka()
            .client_config()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .create()
            .expect("an offsets consumer");
        let metadata = consumer.fetch_metadata(Some(topic), timeout).expect("topic metadata");
        let partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .expect("the topic in the metadata")
            .partitions()
            .iter()
            .map(|p| p.id())
            .collect();
        let mut wanted = TopicPartitionList::new();
        for &partition in &partitions {
            wanted.add_partition(topic, partition);
        }
        let committed = consumer.committed_offsets(wanted, timeout).expect("committed offsets");
        let (mut total, mut partitions_with_lag) = (0i64, 0i64);
        for &partition in &partitions {
            let (oldest, newest) = consumer.fetch_watermarks(topic, partition, timeout).expect("watermarks");
            assert_eq!(oldest, 0, "partition {partition} lost messages: KEDA's and fleet-lag's lag would differ");
            let lag = match committed.find_partition(topic, partition).map(|e| e.offset()) {
                Some(Offset::Offset(offset)) => newest - offset,
                _ if self.keda_offset_reset_earliest => newest,
                _ => 1,
            };
            total += lag;
            partitions_with_lag += i64::from(lag > 0);
        }
        let mut metric = total;
        if !self.keda_allow_idle_consumers || self.keda_limit_to_partitions_with_lag {
            let bound =
                if self.keda_limit_to_partitions_with_lag { partitions_with_lag } else { partitions.len() as i64 };
            if total / self.lag_per_replica > bound {
                metric = bound * self.lag_per_replica;
            }
        }
        (total, metric)
    }

    /// The replicas an HPA proposes from one replica for a metric total,
    /// within the chart's bounds (maxReplicas is at most the partitions).
    pub fn replicas_for(&self, metric_total: f64) -> u32 {
        let max = PARTITIONS as u32;
        let spec = HpaSpec { target_per_replica: self.lag_per_replica as f64, ..HpaSpec::fleet_default(1, max) };
        Hpa::new(spec).proposal(1, metric_total).clamp(1, max)
    }
}

/// The value of the one line `key: value` of a YAML file (comments cut,
/// quotes taken off): the chart's settings the autoscalers use.
fn yaml_scalar(text: &str, key: &str) -> String {
    let prefix = format!("{key}:");
    let values: Vec<String> = text
        .lines()
        .map(|line| line.trim_start().trim_start_matches("- "))
        .filter_map(|line| line.strip_prefix(prefix.as_str()))
        .map(|value| value.split(" #").next().unwrap_or_default().trim().to_owned())
        .collect();
    assert_eq!(values.len(), 1, "expected exactly one `{key}:` line, found {values:?}");
    let value = values.into_iter().next().unwrap_or_default();
    if let Some(inner) = value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
        inner.replace("''", "'")
    } else {
        value.trim_matches('"').to_owned()
    }
}

#[test]
fn adapter_and_chart_values_are_read_as_yaml_scalars() {
    let text =
        "rules:\n  external:\n    - seriesQuery: 'a{b=\"c\"}'\n      metricsQuery: 'it''s'\n  lag: 100 # per replica\n";
    assert_eq!(yaml_scalar(text, "seriesQuery"), "a{b=\"c\"}");
    assert_eq!(yaml_scalar(text, "metricsQuery"), "it's");
    assert_eq!(yaml_scalar(text, "lag"), "100");
    assert_eq!(url_encode("sum by (a) (b{c=\"d\"})"), "sum%20by%20%28a%29%20%28b%7Bc%3D%22d%22%7D%29");
}
