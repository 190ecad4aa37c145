//! What `ensure_topics` did, or found and left, on each topic, and the
//! pure decisions behind it: grow partitions, never remove them; report a
//! setting that differs, never change it.

use std::collections::HashMap;
use std::fmt;

/// What `ensure_topics` did, or found and left, on one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicChange {
    Created {
        topic: String,
        partitions: i32,
    },
    Grown {
        topic: String,
        from: i32,
        to: i32,
    },
    /// Fewer partitions asked than the topic has: Kafka cannot remove them.
    KeptMorePartitions {
        topic: String,
        have: i32,
        asked: i32,
    },
    /// A setting differs from what was asked; not changed (see `topics`' docs).
    ConfigDiffers {
        topic: String,
        name: String,
        have: Option<String>,
        asked: String,
    },
    Unchanged {
        topic: String,
    },
}

impl fmt::Display for TopicChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Created { topic, partitions } => write!(f, "{topic}: created ({partitions} partitions)"),
            Self::Grown { topic, from, to } => write!(f, "{topic}: partitions increased {from} -> {to}"),
            Self::KeptMorePartitions { topic, have, asked } => {
                write!(f, "{topic}: has {have} partitions, {asked} asked; left as is (partitions are never removed)")
            }
            Self::ConfigDiffers { topic, name, have, asked } => write!(
                f,
                "{topic}: {name} is {}, {asked} asked; not changed (kafka-configs --alter --add-config {name}={asked})",
                have.as_deref().unwrap_or("unset")
            ),
            Self::Unchanged { topic } => write!(f, "{topic}: as asked"),
        }
    }
}

/// What to do about an existing topic's partition count.
pub fn plan_partitions(topic: &str, have: i32, asked: i32) -> Option<TopicChange> {
    match have.cmp(&asked) {
        std::cmp::Ordering::Less => Some(TopicChange::Grown { topic: topic.to_owned(), from: have, to: asked }),
        std::cmp::Ordering::Greater => Some(TopicChange::KeptMorePartitions { topic: topic.to_owned(), have, asked }),
        std::cmp::Ordering::Equal => None,
    }
}

/// The asked settings an existing topic does not have.
pub fn config_differences(
    topic: &str,
    asked: &[(&'static str, String)],
    have: &HashMap<String, Option<String>>,
) -> Vec<TopicChange> {
    asked
        .iter()
        .filter(|(name, value)| have.get(*name).and_then(Option::as_deref) != Some(value.as_str()))
        .map(|(name, value)| TopicChange::ConfigDiffers {
            topic: topic.to_owned(),
            name: (*name).to_owned(),
            have: have.get(*name).cloned().flatten(),
            asked: value.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_grow_and_are_never_removed() {
        assert_eq!(plan_partitions("t", 4, 8), Some(TopicChange::Grown { topic: "t".into(), from: 4, to: 8 }));
        assert_eq!(
            plan_partitions("t", 8, 4),
            Some(TopicChange::KeptMorePartitions { topic: "t".into(), have: 8, asked: 4 })
        );
        assert_eq!(plan_partitions("t", 8, 8), None);
    }

    #[test]
    fn only_differing_settings_are_reported() {
        let asked = [("retention.ms", "100".to_owned()), ("min.insync.replicas", "2".to_owned())];
        let have: HashMap<String, Option<String>> =
            [("retention.ms".to_owned(), Some("100".to_owned())), ("min.insync.replicas".to_owned(), Some("1".into()))]
                .into();
        let differs = config_differences("t", &asked, &have);
        assert_eq!(
            differs,
            [TopicChange::ConfigDiffers {
                topic: "t".into(),
                name: "min.insync.replicas".into(),
                have: Some("1".into()),
                asked: "2".into()
            }]
        );
        assert!(differs[0].to_string().contains("not changed"));
    }
}
