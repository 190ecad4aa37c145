//! The fleet's monitoring, live: the real Prometheus server scrapes a real
//! worker and a real `fleet-lag` with the shipped alert rules, and the
//! queries the autoscalers run are run against it. Everything listens on
//! loopback and is started and stopped by the test.
//!
//! - Prometheus is the one `make setup` unpacks from Debian's `prometheus`
//!   package beside promtool (`FLEET_PROMETHEUS`, which `make test` sets).
//!   Its scrape jobs are those of deploy/prometheus/prometheus.yml, the job
//!   names the chart's ServiceMonitors give (`fleet-worker`, `fleet-lag`);
//!   its rules are deploy/prometheus/alerts.yml, the file the chart's
//!   PrometheusRule carries. (The fleet has no recording rules.)
//! - A backlog over 1000 that does not grow raises nothing; once it grows,
//!   FleetConsumerLagGrowing goes pending, then firing; once it stops
//!   growing the alert resolves, and a worker drains the backlog to 0.
//! - The query prometheus-adapter runs for the HPA's `kafka_lag`
//!   (helm/prometheus-adapter-values.yaml, `metricsQuery` with the HPA's
//!   selector), run on this Prometheus, returns the exporter's lag, and so
//!   does what KEDA's `kafka` trigger computes from the broker: once before
//!   the group ever committed, once after.
//! - Before any worker, and again after the worker is killed (SIGKILL),
//!   FleetTargetDown fires for its target; requests waiting with no worker
//!   make FleetNoWorkers fire. Both resolve while the worker runs.
//!
//! Scaled time: the rules wait minutes (`for: 10m`, `[10m:1m]`, `for: 5m`),
//! which no test can. Prometheus loads the shipped rule file with every
//! duration of minutes read as seconds (`10m` → `10s`, a factor of 60),
//! in `for:` values and inside the expressions (ranges, subqueries,
//! offsets) only; the test checks that nothing else differs, byte for byte.
//! Prometheus scrapes and evaluates every second. fleet-lag measures every
//! 250 ms, so a scrape is never more than one measurement behind.

mod common;

use common::{free_port, http_get, log_file, metric_value, Broker, Redis, Worker};
use fleet_ops::hpa::{Hpa, HpaSpec};
use fleet_producer::{FleetProducer, KafkaConfig, Request};
use fleet_proto::{ModelName, Namespace, RequestId};
use fleet_testkit::{wait_for_port, Killed};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MODEL: &str = "minilm";
const PARTITIONS: i32 = 4;
/// The backlog before any worker runs: above FleetConsumerLagGrowing's 1000.
const FIRST_BACKLOG: usize = 1200;
/// While the backlog grows: this many requests every `GROWTH_EVERY`.
const GROWTH_BATCH: usize = 10;
const GROWTH_EVERY: Duration = Duration::from_millis(250);
/// Requests sent after the worker is killed: they wait with no worker.
const ORPHANS: usize = 30;
/// How often the test asks Prometheus (it evaluates every second).
const POLL: Duration = Duration::from_millis(200);
/// Generous bounds for states that take seconds (a `for:` of 5 or 10 s
/// after a condition holds): deadlines for a loaded machine, not timings.
const ALERT_TIMEOUT: Duration = Duration::from_secs(60);

fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(path)
}

fn read_repo_file(path: &str) -> String {
    std::fs::read_to_string(repo_file(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// `fleet-lag`, built beside the worker binary (`make test` builds every
/// binary of the workspace before the tests).
fn fleet_lag_bin() -> PathBuf {
    let bin = common::worker_bin().parent().expect("the worker binary's folder").join("fleet-lag");
    assert!(
        bin.is_file(),
        "no fleet-lag beside the worker binary ({}): build every binary first \
         (cargo build --release --workspace --bins, as make test does)",
        bin.display()
    );
    bin
}

/// `rules` with every duration of minutes read as seconds, in `for:` (and
/// `keep_firing_for:`) values and in expressions (`expr:` on one line or as
/// a block), nowhere else; returns the text and how many it changed.
fn minutes_as_seconds(rules: &str) -> (String, usize) {
    let mut out = String::with_capacity(rules.len());
    let mut changed = 0;
    // Inside an `expr: |` block: the indentation of its `expr:` key.
    let mut block_key_indent: Option<usize> = None;
    for line in rules.split_inclusive('\n') {
        let key = line.trim_start();
        let indent = line.len() - key.len();
        if let Some(key_indent) = block_key_indent {
            if key.trim().is_empty() || indent > key_indent {
                let (scaled, n) = durations_as_seconds(line);
                out.push_str(&scaled);
                changed += n;
                continue;
            }
            block_key_indent = None;
        }
        if key.strip_prefix("expr:").is_some_and(|value| value.trim_start().starts_with(['|', '>'])) {
            block_key_indent = Some(indent);
            out.push_str(line);
        } else if key.starts_with("expr:") || key.starts_with("for:") || key.starts_with("keep_firing_for:") {
            let (scaled, n) = durations_as_seconds(line);
            out.push_str(&scaled);
            changed += n;
        } else {
            out.push_str(line);
        }
    }
    (out, changed)
}

/// Every duration literal of minutes in `text` (digits that do not end a
/// name or a decimal, then `m` not followed by a letter, digit or `_`:
/// `10m`, `[10m:1m]`, not `10ms`, `e2e`, `0.02`) with `s` for its unit.
fn durations_as_seconds(text: &str) -> (String, usize) {
    let chars: Vec<char> = text.chars().collect();
    let part_of_word = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    let mut out = String::with_capacity(text.len());
    let mut changed = 0;
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_digit() && (i == 0 || !part_of_word(chars[i - 1])) {
            let start = i;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            out.extend(&chars[start..i]);
            let minutes = chars.get(i) == Some(&'m') && !chars.get(i + 1).is_some_and(|&next| part_of_word(next));
            if minutes {
                out.push('s');
                changed += 1;
                i += 1;
            }
            continue;
        }
        out.push(chars[i]);
        i += 1;
    }
    (out, changed)
}

/// The names of the alerting rules in a rule file (`- alert: Name` lines).
fn alert_names(rules: &str) -> Vec<String> {
    rules.lines().filter_map(|l| l.trim_start().strip_prefix("- alert:")).map(|name| name.trim().to_owned()).collect()
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

/// Percent-encodes a query parameter (everything but RFC 3986's unreserved).
fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => char::from(b).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn labels_of(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|map| map.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect())
        .unwrap_or_default()
}

/// One pending or firing alert of /api/v1/alerts.
#[derive(Debug, Clone)]
struct ActiveAlert {
    labels: BTreeMap<String, String>,
    state: String,
    value: f64,
}

impl ActiveAlert {
    fn is(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.labels.get("alertname").map(String::as_str) == Some(name)
            && labels.iter().all(|(k, v)| self.labels.get(*k).map(String::as_str) == Some(*v))
    }
}

/// A Prometheus server on a free loopback port, its config, rules and
/// storage in a fresh folder; killed and its folder removed on drop.
struct Prometheus {
    /// Taken (killed) first on drop, then the folder goes.
    process: Option<Killed>,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Prometheus {
    /// Scrapes `worker` as job fleet-worker and `exporter` as job fleet-lag
    /// every second and evaluates `rules` every second.
    async fn start(worker: SocketAddr, exporter: SocketAddr, rules: &str) -> Self {
        let bin = std::env::var_os("FLEET_PROMETHEUS").map(PathBuf::from).unwrap_or_else(|| {
            panic!(
                "FLEET_PROMETHEUS is not set: run make setup (it unpacks Prometheus beside promtool); \
                 make test sets it"
            )
        });
        assert!(bin.is_file(), "FLEET_PROMETHEUS={} does not exist: run make setup", bin.display());
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("fleet-prometheus-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("Prometheus folder");
        std::fs::write(dir.join("alerts.yml"), rules).expect("writing the rules");
        // YAML flow style: no indentation to get right. A relative rule
        // file is read from the config file's folder.
        let config = format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}}\n\
             rule_files: [alerts.yml]\n\
             scrape_configs:\n\
             - {{job_name: fleet-worker, static_configs: [{{targets: ['{worker}']}}]}}\n\
             - {{job_name: fleet-lag, static_configs: [{{targets: ['{exporter}']}}]}}\n"
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("writing prometheus.yml");
        let mut child = Command::new(&bin)
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(log_file("prometheus"))
            .spawn()
            .unwrap_or_else(|e| panic!("starting {} (run make setup): {e}", bin.display()));
        wait_for_port(port, "prometheus", &mut child);
        let prometheus = Self { process: Some(Killed(child)), addr: format!("127.0.0.1:{port}").parse().unwrap(), dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (addr, ready) = (prometheus.addr, "/-/ready");
            let got = tokio::task::spawn_blocking(move || http_get(addr, ready)).await.expect("http get task");
            if got.as_ref().is_some_and(|(status, _)| *status == 200) {
                return prometheus;
            }
            assert!(Instant::now() < deadline, "Prometheus never became ready: {got:?} (log in fleet-test-logs)");
            tokio::time::sleep(POLL).await;
        }
    }

    /// GET on the HTTP API; the decoded JSON of a 200 answer.
    async fn api(&self, path: &str) -> Value {
        let (addr, request) = (self.addr, path.to_owned());
        let got = tokio::task::spawn_blocking(move || http_get(addr, &request)).await.expect("http get task");
        let (status, body) = got.unwrap_or_else(|| panic!("Prometheus does not answer GET {path}"));
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    /// An instant query: each sample's labels and value.
    async fn query(&self, promql: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let answer = self.api(&format!("/api/v1/query?query={}", url_encode(promql))).await;
        assert_eq!(answer["data"]["resultType"], "vector", "{promql}: {answer}");
        answer["data"]["result"]
            .as_array()
            .expect("a result list")
            .iter()
            .map(|sample| {
                let value = sample["value"][1].as_str().and_then(|v| v.parse::<f64>().ok());
                (labels_of(&sample["metric"]), value.unwrap_or_else(|| panic!("{promql}: no value in {sample}")))
            })
            .collect()
    }

    async fn alerts(&self) -> Vec<ActiveAlert> {
        let answer = self.api("/api/v1/alerts").await;
        answer["data"]["alerts"]
            .as_array()
            .expect("an alert list")
            .iter()
            .map(|alert| ActiveAlert {
                labels: labels_of(&alert["labels"]),
                state: alert["state"].as_str().unwrap_or_default().to_owned(),
                value: alert["value"].as_str().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN),
            })
            .collect()
    }

    /// Waits until every rule of `names` is loaded and has been evaluated
    /// without error (a rule the scaling broke would say so here).
    async fn wait_for_rules(&self, names: &[String]) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer = self.api("/api/v1/rules?type=alert").await;
            let rules: Vec<(String, String, String)> = answer["data"]["groups"]
                .as_array()
                .expect("a group list")
                .iter()
                .flat_map(|group| group["rules"].as_array().cloned().unwrap_or_default())
                .map(|rule| {
                    let text = |key: &str| rule[key].as_str().unwrap_or_default().to_owned();
                    (text("name"), text("health"), text("lastError"))
                })
                .collect();
            let broken: Vec<&(String, String, String)> =
                rules.iter().filter(|(_, health, _)| health == "err").collect();
            assert!(broken.is_empty(), "rules fail to evaluate: {broken:?}");
            let mut loaded: Vec<&str> = rules.iter().map(|(name, _, _)| name.as_str()).collect();
            loaded.sort_unstable();
            let mut wanted: Vec<&str> = names.iter().map(String::as_str).collect();
            wanted.sort_unstable();
            assert_eq!(loaded, wanted, "Prometheus loaded other alerts than alerts.yml has");
            if rules.iter().all(|(_, health, _)| health == "ok") {
                return;
            }
            assert!(Instant::now() < deadline, "rules never evaluated: {rules:?}");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until alert `name` (with `labels`) is pending and then firing;
    /// returns it firing. Seen firing before it was seen pending fails: the
    /// rule's `for:` must have held it pending first.
    async fn wait_pending_then_firing(&self, name: &str, labels: &[(&str, &str)]) -> ActiveAlert {
        let deadline = Instant::now() + ALERT_TIMEOUT;
        let mut seen_pending = false;
        loop {
            let alerts = self.alerts().await;
            match alerts.iter().find(|a| a.is(name, labels)) {
                Some(alert) if alert.state == "firing" => {
                    assert!(seen_pending, "{name} {labels:?} was firing before it was seen pending: {alert:?}");
                    return alert.clone();
                }
                Some(alert) if alert.state == "pending" => seen_pending = true,
                _ => {}
            }
            assert!(
                Instant::now() < deadline,
                "{name} {labels:?} did not fire (seen pending: {seen_pending}); active: {alerts:#?}"
            );
            tokio::time::sleep(POLL).await;
        }
    }

    async fn wait_firing(&self, name: &str, labels: &[(&str, &str)]) -> ActiveAlert {
        let deadline = Instant::now() + ALERT_TIMEOUT;
        loop {
            let alerts = self.alerts().await;
            if let Some(alert) = alerts.iter().find(|a| a.is(name, labels) && a.state == "firing") {
                return alert.clone();
            }
            assert!(Instant::now() < deadline, "{name} {labels:?} did not fire; active: {alerts:#?}");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until alert `name` (with `labels`) is neither pending nor firing.
    async fn wait_inactive(&self, name: &str, labels: &[(&str, &str)], timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let alerts = self.alerts().await;
            if !alerts.iter().any(|a| a.is(name, labels)) {
                return;
            }
            assert!(Instant::now() < deadline, "{name} {labels:?} is still active: {alerts:#?}");
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        drop(self.process.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What the autoscalers are configured with: the chart's values
/// (helm/fleet/values.yaml) and the adapter's rule.
struct Autoscaling {
    /// prometheus-adapter's query for `kafka_lag`, with the series and the
    /// HPA's selector filled in (the adapter's own templating).
    adapter_query: String,
    /// The adapter's `seriesQuery`: which series it offers at all.
    adapter_series_query: String,
    /// `autoscaling.lagPerReplica`: the HPA's AverageValue, KEDA's lagThreshold.
    lag_per_replica: i64,
    /// `autoscaling.keda.*`, as the chart writes them into the kafka trigger.
    keda_offset_reset_earliest: bool,
    keda_allow_idle_consumers: bool,
    keda_limit_to_partitions_with_lag: bool,
}

impl Autoscaling {
    fn from_chart(group: &str, topic: &str) -> Self {
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
    fn keda_lag(&self, broker: &Broker, group: &str, topic: &str) -> (i64, i64) {
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
    fn replicas_for(&self, metric_total: f64) -> u32 {
        let max = PARTITIONS as u32;
        let spec = HpaSpec { target_per_replica: self.lag_per_replica as f64, ..HpaSpec::fleet_default(1, max) };
        Hpa::new(spec).proposal(1, metric_total).clamp(1, max)
    }
}

/// The broker, Redis, fleet-lag and Prometheus of one test, and where the
/// worker's metrics will be.
struct Stack {
    broker: Broker,
    redis: Redis,
    model: ModelName,
    group: String,
    topic: String,
    exporter: SocketAddr,
    _exporter_process: Killed,
    worker_addr: SocketAddr,
    prometheus: Prometheus,
    autoscaling: Autoscaling,
}

impl Stack {
    fn group_labels(&self) -> [(&str, &str); 2] {
        [("consumergroup", self.group.as_str()), ("topic", self.topic.as_str())]
    }

    async fn produce(&self, prefix: &str, count: usize) {
        produce(&self.broker, &self.model, prefix, count).await;
    }

    async fn exporter_lag(&self) -> f64 {
        exporter_lag(self.exporter, &self.group_labels()).await
    }

    /// The adapter's `kafka_lag` for the HPA's selector, from Prometheus
    /// (None while Prometheus has no such series).
    async fn adapter_lag(&self) -> Option<f64> {
        let samples = self.prometheus.query(&self.autoscaling.adapter_query).await;
        assert!(samples.len() <= 1, "the adapter query returned several series: {samples:?}");
        samples.first().map(|(_, value)| *value)
    }

    async fn wait_for_exporter_lag(&self, lag: f64) {
        wait_for_exporter_lag(self.exporter, &self.group_labels(), lag).await;
    }

    /// Waits until the adapter's query on Prometheus returns `lag`.
    async fn wait_for_adapter_lag(&self, lag: f64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let read = self.adapter_lag().await;
            if read == Some(lag) {
                return;
            }
            assert!(Instant::now() < deadline, "the adapter's kafka_lag reads {read:?}, expected {lag}");
            tokio::time::sleep(POLL).await;
        }
    }

    /// With a steady backlog of `expected` messages: fleet-lag exports it,
    /// the adapter's query on Prometheus returns it once scraped, KEDA's
    /// computation from the broker finds it, and both autoscalers ask for
    /// the same replicas.
    async fn assert_autoscalers_see(&self, expected: usize) {
        let expected_lag = expected as f64;
        self.wait_for_exporter_lag(expected_lag).await;
        // Steady: the next scrape after the exporter's value is the value.
        self.wait_for_adapter_lag(expected_lag, Duration::from_secs(30)).await;
        // The series the adapter offers (scraped by now): every partition
        // of the group.
        let offered = self.prometheus.query(&self.autoscaling.adapter_series_query).await;
        let partitions: std::collections::BTreeSet<&str> = offered
            .iter()
            .filter(|(labels, _)| labels.get("consumergroup") == Some(&self.group))
            .filter_map(|(labels, _)| labels.get("partition").map(String::as_str))
            .collect();
        assert_eq!(partitions.len(), PARTITIONS as usize, "the adapter's seriesQuery finds {offered:?}");
        assert_eq!(self.exporter_lag().await, expected_lag, "the backlog moved while it was compared");

        let (keda_total, keda_metric) = self.autoscaling.keda_lag(&self.broker, &self.group, &self.topic);
        assert_eq!(keda_total as f64, expected_lag, "KEDA's kafka scaler would read another lag");
        let via_adapter = self.autoscaling.replicas_for(expected_lag);
        let via_keda = self.autoscaling.replicas_for(keda_metric as f64);
        assert_eq!(via_adapter, via_keda, "HPA and KEDA ask for different replicas at lag {expected}");
        eprintln!(
            "lag {expected}: fleet-lag, the adapter's query and KEDA's computation agree; \
             KEDA's metric {keda_metric}; {via_adapter} replicas either way"
        );
    }
}

/// Sends `count` requests (the demo sentences, repeated) and waits until
/// the broker has them all.
async fn produce(broker: &Broker, model: &ModelName, prefix: &str, count: usize) {
    let sentences = common::sentences();
    let texts: Vec<String> = (0..count).map(|n| sentences[n % sentences.len()].clone()).collect();
    common::send_texts(broker, model, prefix, &texts, None).await;
}

/// The group's lag summed over partitions, as fleet-lag exports it now.
async fn exporter_lag(exporter: SocketAddr, group: &[(&str, &str)]) -> f64 {
    let got = tokio::task::spawn_blocking(move || http_get(exporter, "/metrics")).await.expect("http get task");
    let body = got.map(|(_, body)| body).unwrap_or_default();
    metric_value(&body, "kafka_consumergroup_lag", group)
}

/// Waits until fleet-lag exports `lag` for the group.
async fn wait_for_exporter_lag(exporter: SocketAddr, group: &[(&str, &str)], lag: f64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let exported = exporter_lag(exporter, group).await;
        if exported == lag {
            return;
        }
        assert!(Instant::now() < deadline, "fleet-lag exports {exported}, expected {lag}");
        tokio::time::sleep(POLL).await;
    }
}

/// Produces `GROWTH_BATCH` requests every `GROWTH_EVERY` until stopped.
struct GrowingBacklog {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<usize>,
}

impl GrowingBacklog {
    fn start(kafka: KafkaConfig, model: ModelName) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let producer = FleetProducer::new(&kafka, "monitoring-test").expect("a producer");
            let sentences = common::sentences();
            let mut sent = 0;
            while !stopped.load(Ordering::Relaxed) {
                let mut deliveries = Vec::new();
                for _ in 0..GROWTH_BATCH {
                    let id = RequestId::parse(&format!("grow-{sent}")).expect("request id");
                    let request = Request::text(id, sentences[sent % sentences.len()].clone());
                    deliveries.push(producer.send(&model, &request).await.expect("send"));
                    sent += 1;
                }
                for delivered in futures::future::join_all(deliveries).await {
                    delivered.expect("delivery");
                }
                tokio::time::sleep(GROWTH_EVERY).await;
            }
            sent
        });
        Self { stop, task }
    }

    /// Stops producing; returns how many requests were sent.
    async fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("the producing task")
    }
}

/// Starts the broker, Redis and fleet-lag, puts `FIRST_BACKLOG` requests in
/// the broker, then starts Prometheus: its first scrape already sees the
/// whole backlog, so the lag it records never rises before the test wants
/// it to (a rise would make the lag alert pending early).
async fn start_stack() -> Stack {
    let rules_text = read_repo_file("deploy/prometheus/alerts.yml");
    let (rules, changed) = minutes_as_seconds(&rules_text);
    assert!(changed > 0, "no duration of minutes found to scale in alerts.yml");
    assert_eq!(rules.len(), rules_text.len());
    let differences: Vec<(u8, u8)> = rules_text.bytes().zip(rules.bytes()).filter(|(a, b)| a != b).collect();
    assert!(
        differences.iter().all(|&pair| pair == (b'm', b's')),
        "scaling changed more than duration units: {differences:?}"
    );
    // What the scenario below relies on (the lag rule's shape and waits).
    assert!(rules.contains("[10s:1s]") && rules.contains("for: 10s") && rules.contains("for: 5s"), "{rules}");
    let names = alert_names(&rules);
    for name in ["FleetConsumerLagGrowing", "FleetTargetDown", "FleetNoWorkers"] {
        assert!(names.iter().any(|n| n == name), "alerts.yml has no {name}: {names:?}");
    }
    let shipped_scrape = read_repo_file("deploy/prometheus/prometheus.yml");
    for job in ["job_name: fleet-worker", "job_name: fleet-lag"] {
        assert!(shipped_scrape.contains(job), "deploy/prometheus/prometheus.yml has no {job}");
    }

    let (broker, redis, model) = (Broker::start(), Redis::start(), ModelName::parse(MODEL).unwrap());
    broker.create_topics(&model, PARTITIONS).await;
    let namespace = Namespace::default();
    let (group, topic) = (namespace.consumer_group(&model), namespace.topic(&model));

    let exporter: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let exporter_process = Killed(
        Command::new(fleet_lag_bin())
            .args(["serve", "--brokers", &broker.addr, "--model", MODEL])
            .args(["--metrics-addr", &exporter.to_string(), "--interval", "250ms"])
            .stdout(Stdio::null())
            .stderr(log_file("fleet-lag-monitoring"))
            .spawn()
            .expect("starting fleet-lag"),
    );
    produce(&broker, &model, "first", FIRST_BACKLOG).await;
    let group_labels = [("consumergroup", group.as_str()), ("topic", topic.as_str())];
    wait_for_exporter_lag(exporter, &group_labels, FIRST_BACKLOG as f64).await;

    // The worker's address is chosen now, so Prometheus scrapes it from
    // the start: down until the worker runs.
    let worker_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let prometheus = Prometheus::start(worker_addr, exporter, &rules).await;
    prometheus.wait_for_rules(&names).await;
    let autoscaling = Autoscaling::from_chart(&group, &topic);
    Stack {
        broker,
        redis,
        model,
        group,
        topic,
        exporter,
        _exporter_process: exporter_process,
        worker_addr,
        prometheus,
        autoscaling,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn alerts_and_autoscaler_queries_follow_a_real_backlog() {
    let _serial = common::serial().await;
    let stack = start_stack().await;
    let group = stack.group_labels();
    let worker_instance = stack.worker_addr.to_string();
    let worker_target = [("job", "fleet-worker"), ("instance", worker_instance.as_str())];
    let lag_alert = "FleetConsumerLagGrowing";

    // 1. No worker, a steady backlog nobody ever committed on.
    stack.assert_autoscalers_see(FIRST_BACKLOG).await;
    let target_down = stack.prometheus.wait_firing("FleetTargetDown", &worker_target).await;
    assert_eq!(target_down.labels.get("severity").map(String::as_str), Some("critical"), "{target_down:?}");
    let no_workers = stack.prometheus.wait_firing("FleetNoWorkers", &group).await;
    assert_eq!(no_workers.value, FIRST_BACKLOG as f64, "{no_workers:?}");
    // Over 1000 but not growing: not (yet) a lag alert.
    let active = stack.prometheus.alerts().await;
    assert!(!active.iter().any(|a| a.is(lag_alert, &group)), "{lag_alert} on a flat backlog: {active:#?}");

    // 2. The backlog grows: pending, then firing, its value the lag.
    let growing = GrowingBacklog::start(stack.broker.kafka(), stack.model.clone());
    let firing = stack.prometheus.wait_pending_then_firing(lag_alert, &group).await;
    assert_eq!(firing.labels.get("severity").map(String::as_str), Some("warning"), "{firing:?}");
    assert!(firing.value > 1000.0, "{firing:?}");
    // Stopped at once: how much waits is then the test's choice, not this
    // machine's speed.
    let sent = growing.stop().await;
    eprintln!("{sent} requests sent while the backlog grew");

    // 3. A worker runs: its target is up and it exports its group's lag,
    //    so the two alerts about missing workers resolve while requests
    //    still wait; the backlog no longer grows, so the lag alert
    //    resolves; the worker drains it and the adapter's lag falls to 0.
    let mut worker = Worker::start_on(stack.worker_addr, MODEL, &stack.broker, &stack.redis, &[]);
    worker.wait_until_serving(PARTITIONS).await;
    stack.prometheus.wait_inactive("FleetTargetDown", &worker_target, ALERT_TIMEOUT).await;
    stack.prometheus.wait_inactive("FleetNoWorkers", &group, ALERT_TIMEOUT).await;
    stack.prometheus.wait_inactive(lag_alert, &group, Duration::from_secs(120)).await;
    stack.wait_for_adapter_lag(0.0, Duration::from_secs(300)).await;

    // 4. The worker is killed: its target is down. Requests then wait with
    //    no worker at all.
    worker.kill();
    let down = stack.prometheus.wait_pending_then_firing("FleetTargetDown", &worker_target).await;
    assert_eq!(down.value, 0.0, "{down:?}");
    stack.produce("orphan", ORPHANS).await;
    let nobody = stack.prometheus.wait_pending_then_firing("FleetNoWorkers", &group).await;
    assert_eq!(nobody.value, ORPHANS as f64, "{nobody:?}");
    assert_eq!(nobody.labels.get("severity").map(String::as_str), Some("critical"), "{nobody:?}");

    // 5. The same agreement with committed offsets (the worker's).
    stack.assert_autoscalers_see(ORPHANS).await;
}

#[test]
fn durations_of_minutes_become_seconds_and_nothing_else_changes() {
    let rules = "\
  - alert: A
    # not in a comment: 10m
    expr: |
      deriv(x[10m:1m]) > 0 and y offset 30m > 1000
      and rate(e2e_total[5m]) > 0.02
    for: 10m
    labels:
      window: 10m
  - alert: B
    expr: rate(z[15m]) > 10ms
    for: 5m
";
    let (scaled, changed) = minutes_as_seconds(rules);
    assert_eq!(
        scaled,
        "\
  - alert: A
    # not in a comment: 10m
    expr: |
      deriv(x[10s:1s]) > 0 and y offset 30s > 1000
      and rate(e2e_total[5s]) > 0.02
    for: 10s
    labels:
      window: 10m
  - alert: B
    expr: rate(z[15s]) > 10ms
    for: 5s
"
    );
    assert_eq!(changed, 7);
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
