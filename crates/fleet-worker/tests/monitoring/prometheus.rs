//! A Prometheus server of the test's own, and its HTTP API as the test
//! reads it: instant queries, the active alerts, the loaded rules. Apart
//! from the test so that the scenario reads as what happens to the alerts.

use fleet_testkit::{free_port, http_get, log_file, wait_for_port, Killed};
use serde_json::Value;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How often the test asks Prometheus (it evaluates every second).
pub const POLL: Duration = Duration::from_millis(200);
/// Generous bounds for states that take seconds (a `for:` of 5 or 10 s
/// after a condition holds): deadlines for a loaded machine, not timings.
pub const ALERT_TIMEOUT: Duration = Duration::from_secs(60);

/// Percent-encodes a query parameter (everything but RFC 3986's unreserved).
pub fn url_encode(text: &str) -> String {
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
pub struct ActiveAlert {
    pub labels: BTreeMap<String, String>,
    pub state: String,
    pub value: f64,
}

impl ActiveAlert {
    pub fn is(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.labels.get("alertname").map(String::as_str) == Some(name)
            && labels.iter().all(|(k, v)| self.labels.get(*k).map(String::as_str) == Some(*v))
    }
}

/// A Prometheus server on a free loopback port, its config, rules and
/// storage in a fresh folder; killed and its folder removed on drop.
pub struct Prometheus {
    /// Taken (killed) first on drop, then the folder goes.
    process: Option<Killed>,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Prometheus {
    /// Scrapes `worker` as job fleet-worker and `exporter` as job fleet-lag
    /// every second and evaluates `rules` every second.
    pub async fn start(worker: SocketAddr, exporter: SocketAddr, rules: &str) -> Self {
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
    pub async fn api(&self, path: &str) -> Value {
        let (addr, request) = (self.addr, path.to_owned());
        let got = tokio::task::spawn_blocking(move || http_get(addr, &request)).await.expect("http get task");
        let (status, body) = got.unwrap_or_else(|| panic!("Prometheus does not answer GET {path}"));
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    /// An instant query: each sample's labels and value.
    pub async fn query(&self, promql: &str) -> Vec<(BTreeMap<String, String>, f64)> {
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

    pub async fn alerts(&self) -> Vec<ActiveAlert> {
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
    pub async fn wait_for_rules(&self, names: &[String]) {
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
    pub async fn wait_pending_then_firing(&self, name: &str, labels: &[(&str, &str)]) -> ActiveAlert {
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

    pub async fn wait_firing(&self, name: &str, labels: &[(&str, &str)]) -> ActiveAlert {
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
    pub async fn wait_inactive(&self, name: &str, labels: &[(&str, &str)], timeout: Duration) {
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
