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

#[path = "monitoring/autoscaling.rs"]
mod autoscaling;
mod common;
#[path = "monitoring/prometheus.rs"]
mod prometheus;
#[path = "monitoring/rules.rs"]
mod rules;

use autoscaling::Autoscaling;
use common::{free_port, http_get, log_file, metric_value, Broker, Redis, Worker};
use fleet_producer::{FleetProducer, KafkaConfig, Request};
use fleet_proto::{ModelName, Namespace, RequestId};
use fleet_testkit::Killed;
use prometheus::{Prometheus, ALERT_TIMEOUT, POLL};
use rules::{alert_names, minutes_as_seconds};
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
