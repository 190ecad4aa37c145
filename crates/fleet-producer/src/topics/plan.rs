//! The topics of one model, in the order they are made and reported, with
//! the partitions and configs each gets: the plan `ensure_topics` carries
//! out, kept apart so it is tested without a broker.

use super::TopicSettings;
use fleet_proto::{Lane, ModelName, Namespace};
use rdkafka::admin::NewTopic;

/// One topic of a model as `ensure_topics` makes and keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PlannedTopic {
    pub name: String,
    pub partitions: i32,
    /// The lanes' topics follow `--partitions` (each partition is a worker's
    /// share of both lanes); the DLQ keeps the one partition it was made with.
    pub grows: bool,
    pub configs: Vec<(&'static str, String)>,
}

impl PlannedTopic {
    /// The topic as the admin API creates it.
    pub fn new_topic(&self, settings: &TopicSettings) -> NewTopic<'_> {
        self.configs
            .iter()
            .fold(NewTopic::new(&self.name, self.partitions, settings.replication()), |t, (k, v)| t.set(k, v))
    }
}

/// The topics of `model`, in the order they are created and reported: the
/// interactive lane, the bulk lane, the DLQ, each lane's answers; then the
/// release's job records.
pub(super) fn planned_topics(names: &Namespace, model: &ModelName, settings: &TopicSettings) -> Vec<PlannedTopic> {
    let lane_topic = |lane: Lane, configs| PlannedTopic {
        name: names.lane_topic(model, lane),
        partitions: settings.partitions,
        grows: true,
        configs,
    };
    // Readers of answers assign every partition themselves: the count only
    // spreads the writes, and is left as made.
    let answers_topic = |lane: Lane| PlannedTopic {
        name: names.answers_topic(model, lane),
        partitions: settings.partitions,
        grows: false,
        configs: settings.answers_configs(),
    };
    vec![
        lane_topic(Lane::Interactive, settings.request_configs()),
        lane_topic(Lane::Bulk, settings.bulk_configs()),
        PlannedTopic { name: names.dlq_topic(model), partitions: 1, grows: false, configs: settings.dlq_configs() },
        answers_topic(Lane::Interactive),
        answers_topic(Lane::Bulk),
        PlannedTopic { name: names.jobs_topic(), partitions: 1, grows: false, configs: settings.jobs_configs() },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topics::ANSWERS_RETENTION_MS;

    #[test]
    fn a_model_has_both_lanes_a_dlq_and_answers_and_only_the_lanes_grow() {
        let names = Namespace::new("blue.infer.", "fleet.", "fleet:").unwrap();
        let model = ModelName::parse("minilm").unwrap();
        let settings =
            TopicSettings { partitions: 12, bulk_retention_ms: Some(86_400_000), ..TopicSettings::default() };
        let planned = planned_topics(&names, &model, &settings);
        let summary: Vec<_> = planned.iter().map(|t| (t.name.as_str(), t.partitions, t.grows)).collect();
        assert_eq!(
            summary,
            [
                ("blue.infer.minilm", 12, true),
                ("blue.infer.minilm.bulk", 12, true),
                ("blue.infer.minilm.dlq", 1, false),
                ("blue.infer.minilm.answers", 12, false),
                ("blue.infer.minilm.bulk.answers", 12, false),
                ("blue.infer.fleet.jobs", 1, false),
            ]
        );
        assert_eq!(planned[0].configs, settings.request_configs());
        assert_eq!(planned[1].configs, settings.bulk_configs());
        assert_eq!(planned[2].configs, settings.dlq_configs());
        assert_eq!(planned[3].configs, settings.answers_configs());
        assert!(planned[5].configs.contains(&("cleanup.policy", "compact,delete".to_owned())));
        assert!(settings.answers_configs().contains(&("retention.ms", ANSWERS_RETENTION_MS.to_string())));
    }
}
