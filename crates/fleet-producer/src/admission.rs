//! Fail-fast admission: refuse a send the fleet cannot serve in time, so
//! callers shed load or go elsewhere instead of queueing work that would
//! only expire. The 429 of this system. Two rules:
//!
//! - **Predicted wait** (adaptive): the workers publish their backlog and the
//!   rate they drain it; `backlog ÷ drain rate` is how long a request sent now
//!   would wait. When that exceeds the time left to its deadline, it would
//!   expire anyway: refused. No constant to guess, and it follows the fleet
//!   as it scales.
//! - **Backlog limit** (fixed, optional): refused above `max_backlog`.
//!
//! The reports come from Redis (`fleet_proto::backlog`), cached for
//! `refresh` (default 250 ms) so a busy producer costs Redis a few reads per
//! second, not one per message. A report is up to a second or so old, so
//! both rules judge the backlog projected to now: the report, plus what this
//! producer has sent since it was made, less what the workers drained
//! meanwhile (`backlog::projected`). When Redis cannot be read, or no drain rate
//! is known yet (an idle or starting fleet), the check lets the send through
//! (fail open): the workers' own in-flight bounds keep them safe either way.
//! Metrics (through the `metrics` facade, exported if the application
//! installs a recorder): `fleet_admission_refused_total{model,reason}`,
//! `fleet_admission_predicted_wait_seconds{model}`.

use fleet_connect::redis::{Connection, RedisTarget};
use fleet_proto::backlog::{self, Load};
use fleet_proto::clock::now_ms;
use fleet_proto::{ModelName, Namespace};
use redis::AsyncCommands;
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Overloaded {
    #[error("{model} is overloaded: backlog {backlog} > limit {limit}; shed or retry later")]
    Backlog { model: String, backlog: u64, limit: u64 },
    #[error("{model} would answer too late: predicted wait {predicted_wait_ms} ms > {deadline_left_ms} ms to the deadline; shed or retry later")]
    WouldExpire { model: String, predicted_wait_ms: u64, deadline_left_ms: u64 },
}

/// Where a request stands against the model's load. Pure.
pub fn admit(
    model: &ModelName,
    load: Option<Load>,
    max_backlog: Option<u64>,
    deadline_left_ms: Option<u64>,
) -> Result<(), Overloaded> {
    let Some(load) = load else { return Ok(()) };
    if let Some(limit) = max_backlog.filter(|&limit| load.backlog > limit) {
        return Err(Overloaded::Backlog { model: model.to_string(), backlog: load.backlog, limit });
    }
    if let (Some(deadline_left_ms), Some(predicted_wait_ms)) = (deadline_left_ms, backlog::predicted_wait_ms(&load)) {
        if predicted_wait_ms > deadline_left_ms {
            return Err(Overloaded::WouldExpire { model: model.to_string(), predicted_wait_ms, deadline_left_ms });
        }
    }
    Ok(())
}

pub struct BacklogGuard {
    conn: Connection,
    namespace: Namespace,
    max_backlog: Option<u64>,
    predict_wait: bool,
    refresh: Duration,
    cache: Mutex<HashMap<ModelName, (Instant, Option<Load>)>>,
    sent: Mutex<HashMap<ModelName, SendLog>>,
}

/// When this producer sent to a model lately (Unix ms, oldest first): the
/// sends a report may not have seen yet. Reports older than
/// `backlog::MAX_REPORT_AGE_MS` do not count, so neither do older sends.
#[derive(Debug, Default)]
struct SendLog(VecDeque<u64>);

impl SendLog {
    fn record(&mut self, at_ms: u64) {
        self.0.push_back(at_ms);
        while self.0.front().is_some_and(|&t| t + backlog::MAX_REPORT_AGE_MS < at_ms) {
            self.0.pop_front();
        }
    }

    /// Sends made after `at_ms`.
    fn since(&self, at_ms: u64) -> u64 {
        (self.0.len() - self.0.partition_point(|&t| t <= at_ms)) as u64
    }
}

impl BacklogGuard {
    /// A fixed backlog limit only (the predicted-wait rule off), one server
    /// at `redis_url`, the default key prefix.
    pub async fn connect(redis_url: &str, max_backlog: u64) -> Result<Self, redis::RedisError> {
        let target = RedisTarget::Server(redis::Client::open(redis_url)?);
        Self::connect_to(&target, Namespace::default(), max_backlog).await
    }

    /// With a target built elsewhere (TLS settings, a cluster) and the
    /// release's key prefix.
    pub async fn connect_to(
        target: &RedisTarget,
        namespace: Namespace,
        max_backlog: u64,
    ) -> Result<Self, redis::RedisError> {
        Ok(Self::open(target, namespace).await?.with_max_backlog(Some(max_backlog)))
    }

    /// Adaptive: refuse what the predicted wait says would expire; no fixed limit.
    pub async fn adaptive(target: &RedisTarget, namespace: Namespace) -> Result<Self, redis::RedisError> {
        Ok(Self::open(target, namespace).await?.with_predicted_wait(true))
    }

    async fn open(target: &RedisTarget, namespace: Namespace) -> Result<Self, redis::RedisError> {
        let conn = target.connection(Duration::from_secs(2), Some(Duration::from_millis(500))).await?;
        Ok(Self {
            conn,
            namespace,
            max_backlog: None,
            predict_wait: false,
            refresh: Duration::from_millis(250),
            cache: Mutex::new(HashMap::new()),
            sent: Mutex::new(HashMap::new()),
        })
    }

    pub fn with_max_backlog(mut self, limit: Option<u64>) -> Self {
        self.max_backlog = limit;
        self
    }

    /// Also refuse a request whose predicted wait exceeds its deadline.
    pub fn with_predicted_wait(mut self, on: bool) -> Self {
        self.predict_wait = on;
        self
    }

    pub fn with_refresh(mut self, refresh: Duration) -> Self {
        self.refresh = refresh;
        self
    }

    /// The model's backlog as the workers last reported it, projected to
    /// now (`None`: no fresh report, e.g. no worker running).
    pub async fn backlog(&self, model: &ModelName) -> Option<u64> {
        self.load(model).await.map(|load| load.backlog)
    }

    /// Backlog and drain rate, summed over the workers' fresh reports and
    /// projected to now with this producer's sends since.
    pub async fn load(&self, model: &ModelName) -> Option<Load> {
        let reported = self.reported(model).await?;
        let now = now_ms();
        let sent_since = self.sent.lock().ok().and_then(|sent| sent.get(model).map(|log| log.since(reported.at_ms)));
        Some(backlog::projected(&reported, sent_since.unwrap_or(0), now))
    }

    /// Counts a send into the projection until a report includes it. The
    /// producer calls this for every request it enqueues past admission.
    pub fn record_sent(&self, model: &ModelName) {
        if let Ok(mut sent) = self.sent.lock() {
            sent.entry(model.clone()).or_default().record(now_ms());
        }
    }

    /// The workers' reports as read from Redis (cached for `refresh`).
    async fn reported(&self, model: &ModelName) -> Option<Load> {
        if let Some((at, value)) = self.cached(model) {
            if at.elapsed() < self.refresh {
                return value;
            }
        }
        let value = match read_load(&mut self.conn.clone(), &self.namespace.backlog_key(model)).await {
            Ok(load) => load,
            Err(e) => {
                tracing::warn!(error = %e, %model, "backlog unreadable; admitting");
                None
            }
        };
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(model.clone(), (Instant::now(), value));
        }
        value
    }

    /// The backlog limit alone (no deadline known).
    pub async fn check(&self, model: &ModelName) -> Result<(), Overloaded> {
        self.check_request(model, None).await
    }

    /// Both rules for a request with `deadline_ms` (Unix ms; `None`: the
    /// fleet's default request TTL, 30 s, applies).
    pub async fn check_request(&self, model: &ModelName, deadline_ms: Option<u64>) -> Result<(), Overloaded> {
        let deadline_left_ms = self
            .predict_wait
            .then(|| deadline_ms.map_or(DEFAULT_REQUEST_TTL_MS, |deadline| deadline.saturating_sub(now_ms())));
        let load = self.load(model).await;
        if let Some(wait) = load.as_ref().and_then(backlog::predicted_wait_ms) {
            metrics::gauge!("fleet_admission_predicted_wait_seconds", "model" => model.to_string())
                .set(wait as f64 / 1000.0);
        }
        let verdict = admit(model, load, self.max_backlog, deadline_left_ms);
        if let Err(refused) = &verdict {
            let reason = match refused {
                Overloaded::Backlog { .. } => "backlog",
                Overloaded::WouldExpire { .. } => "predicted_wait",
            };
            metrics::counter!("fleet_admission_refused_total", "model" => model.to_string(), "reason" => reason)
                .increment(1);
        }
        verdict
    }

    fn cached(&self, model: &ModelName) -> Option<(Instant, Option<Load>)> {
        self.cache.lock().ok()?.get(model).copied()
    }
}

/// The model's load as the workers' fresh reports in Redis give it now
/// (`None`: no fresh report), uncached and not projected: what a producer's
/// admission starts from, and what the loadtest records each second.
pub async fn read_load(
    conn: &mut (impl redis::aio::ConnectionLike + Send + Sync),
    backlog_key: &str,
) -> redis::RedisResult<Option<Load>> {
    let reports: HashMap<String, String> = conn.hgetall(backlog_key).await?;
    Ok(backlog::fresh_load(reports.values().map(String::as_str), now_ms()))
}

/// The deadline a worker gives a request that carries none (the model
/// config's `request_ttl_ms` default, docs/protocol.md).
pub const DEFAULT_REQUEST_TTL_MS: u64 = 30_000;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn minilm() -> ModelName {
        ModelName::parse("minilm").unwrap()
    }

    #[test]
    fn a_request_that_would_expire_is_refused_and_one_that_would_not_is_let_in() {
        let load = Some(Load { backlog: 1_000, drain_per_s: Some(100.0), at_ms: 0 }); // 10 s of work ahead
        assert!(admit(&minilm(), load, None, Some(15_000)).is_ok());
        let refused = admit(&minilm(), load, None, Some(5_000)).unwrap_err();
        assert_eq!(
            refused,
            Overloaded::WouldExpire { model: "minilm".into(), predicted_wait_ms: 10_000, deadline_left_ms: 5_000 }
        );
        assert!(matches!(admit(&minilm(), load, Some(500), Some(60_000)), Err(Overloaded::Backlog { .. })));
    }

    #[test]
    fn without_reports_or_a_drain_rate_it_fails_open() {
        assert!(admit(&minilm(), None, Some(1), Some(1)).is_ok());
        let no_rate = Some(Load { backlog: 1_000_000, drain_per_s: None, at_ms: 0 });
        assert!(admit(&minilm(), no_rate, None, Some(1)).is_ok());
    }

    #[test]
    fn the_send_log_counts_sends_after_a_report_and_forgets_old_ones() {
        let mut log = SendLog::default();
        for at in [1_000, 1_200, 1_200, 1_500] {
            log.record(at);
        }
        assert_eq!((log.since(0), log.since(1_000), log.since(1_200), log.since(1_500)), (4, 3, 1, 0));
        log.record(1_000 + backlog::MAX_REPORT_AGE_MS + 100);
        assert_eq!(log.since(0), 4, "the send at 1000 is older than any report that counts; the rest stay");
    }

    proptest! {
        #[test]
        fn a_later_deadline_is_never_refused_where_an_earlier_one_is_admitted(
            backlog in 0u64..100_000, drain in 0.5f64..5_000.0, deadline in 0u64..120_000, later in 0u64..60_000,
        ) {
            let load = Some(Load { backlog, drain_per_s: Some(drain), at_ms: 0 });
            if admit(&minilm(), load, None, Some(deadline)).is_ok() {
                prop_assert!(admit(&minilm(), load, None, Some(deadline + later)).is_ok());
            }
        }

        #[test]
        fn admitted_means_the_predicted_wait_fits_the_deadline(
            backlog in 0u64..100_000, drain in 0.5f64..5_000.0, deadline in 0u64..120_000,
        ) {
            let load = Load { backlog, drain_per_s: Some(drain), at_ms: 0 };
            let admitted = admit(&minilm(), Some(load), None, Some(deadline)).is_ok();
            prop_assert_eq!(admitted, backlog::predicted_wait_ms(&load).unwrap() <= deadline);
        }
    }
}
