//! The worker's Redis connections, waited for rather than required at
//! start: the model warms while Redis is away, and reading begins once
//! every connection is made.

use crate::backoff::Backoff;
use crate::core::cancel_tracking::{CancelLookup, CancelWatch, CancelledJobs};
use crate::core::health::{Health, SinkProblem};
use crate::stages::cache::FeatureCache;
use crate::stages::handover::VersionTtls;
use crate::stages::sink::failure::redis_error_class;
use crate::stages::sink::results::ReplicaWait;
use crate::stages::sink::ResultSink;
use crate::status::backlog::BacklogPublisher;
use crate::status::lost_data::LostDataMarker;
use fleet_connect::redis::RedisTarget;
use fleet_proto::clock::now_ms;
use fleet_proto::{ModelName, Namespace};
use std::sync::Arc;
use std::time::Duration;

/// What the worker's Redis connections are made from.
pub(super) struct RedisParts<'a> {
    pub target: &'a RedisTarget,
    pub names: &'a Namespace,
    pub model: &'a ModelName,
    pub worker_id: String,
    pub ttls: VersionTtls,
    pub task_tag: String,
    pub replica_wait: Option<ReplicaWait>,
    pub cancelled: Arc<CancelledJobs>,
}

/// The worker's Redis connections: answers, the feature cache, the cancel
/// watch, the backlog report and the lost-data marker (`fleet:memory`).
pub(super) struct Connected {
    pub results: ResultSink,
    pub cache: FeatureCache,
    pub cancel_watch: CancelWatch,
    pub backlog: BacklogPublisher,
    pub lost_data: LostDataMarker,
}

/// Redis is waited for, not required at start: tried again with a capped
/// backoff for as long as it takes, each failure on `/ready` ("cannot write
/// to redis (transient failure): ...", or "fleet failure" for a refusal
/// such as a wrong password) and in the log, never an exit.
pub(super) async fn wait_for_redis(parts: RedisParts<'_>, health: &Health, url: String) -> Connected {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let mut attempt = 0u64;
    loop {
        attempt += 1;
        match connect_redis(&parts).await {
            Ok(connected) => {
                health.set_sink_problem("redis", None, now_ms());
                return connected;
            }
            Err(e) => {
                // A refusal (wrong password, ACL) is waited for too, as the
                // sink waits for it: the probe names it as a fleet failure.
                let class = redis_error_class(&e).as_str();
                let reason = e.to_string();
                // Once, then every ~minute: the probe carries it meanwhile.
                if attempt == 1 || attempt % 12 == 0 {
                    tracing::warn!(redis = url.as_str(), error = %reason, class, attempt, "Redis does not answer; waiting for it");
                }
                let problem = SinkProblem { class, target: "redis", reason };
                health.set_sink_problem("redis", Some(problem), now_ms());
            }
        }
        backoff.wait().await;
    }
}

async fn connect_redis(parts: &RedisParts<'_>) -> Result<Connected, redis::RedisError> {
    let RedisParts { target, names, model, .. } = parts;
    Ok(Connected {
        results: ResultSink::connect(target, (*names).clone(), parts.ttls.clone())
            .await?
            .with_replica_wait(parts.replica_wait),
        cache: FeatureCache::connect(target, (*names).clone(), (*model).clone(), parts.task_tag.clone()).await?,
        cancel_watch: CancelWatch {
            lookup: CancelLookup::connect(target, (*names).clone()).await?,
            jobs: parts.cancelled.clone(),
        },
        backlog: BacklogPublisher::connect(target, names.backlog_key(model), parts.worker_id.clone()).await?,
        lost_data: LostDataMarker::connect(target, names.memory_marker_key(), parts.worker_id.clone()).await?,
    })
}
