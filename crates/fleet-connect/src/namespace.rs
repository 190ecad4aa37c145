//! The prefixes of one release's names, as every binary takes them: one
//! release = one namespace, so two releases may share one Kafka and one
//! Redis (`fleet_proto::Namespace` makes the names). Global like the Kafka
//! settings: before or after a subcommand.

use fleet_proto::keys::{InvalidPrefix, DEFAULT_GROUP_PREFIX, DEFAULT_REDIS_PREFIX, DEFAULT_TOPIC_PREFIX};
use fleet_proto::Namespace;

#[derive(Debug, Clone, clap::Args)]
pub struct NamespaceArgs {
    /// Prefix of the request topics: <prefix><model> and <prefix><model>.dlq.
    #[arg(long, env = "FLEET_TOPIC_PREFIX", global = true, default_value = DEFAULT_TOPIC_PREFIX)]
    pub topic_prefix: String,
    /// Prefix of the workers' consumer groups: <prefix><model>.
    #[arg(long, env = "FLEET_GROUP_PREFIX", global = true, default_value = DEFAULT_GROUP_PREFIX)]
    pub group_prefix: String,
    /// Prefix of every Redis key the fleet reads or writes.
    #[arg(long, env = "FLEET_REDIS_PREFIX", global = true, default_value = DEFAULT_REDIS_PREFIX)]
    pub redis_prefix: String,
}

impl Default for NamespaceArgs {
    fn default() -> Self {
        Self {
            topic_prefix: DEFAULT_TOPIC_PREFIX.to_owned(),
            group_prefix: DEFAULT_GROUP_PREFIX.to_owned(),
            redis_prefix: DEFAULT_REDIS_PREFIX.to_owned(),
        }
    }
}

impl NamespaceArgs {
    pub fn namespace(&self) -> Result<Namespace, InvalidPrefix> {
        Namespace::new(&self.topic_prefix, &self.group_prefix, &self.redis_prefix)
    }
}
