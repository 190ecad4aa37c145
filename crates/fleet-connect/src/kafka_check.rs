//! The first contact with Kafka, at start: fail fast and say why. Left to
//! itself librdkafka retries a wrong password or an untrusted certificate
//! forever, logging each attempt; a binary that checks first exits within
//! seconds with one line naming the problem (never a secret).

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::ClientConfig;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What went wrong, from librdkafka's own error reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// SASL: wrong user or password, or a mechanism the broker does not take.
    Authentication,
    /// TLS: the broker's certificate is not trusted (wrong CA, wrong name).
    UntrustedCertificate,
    /// A plaintext client at a TLS listener, or the reverse.
    ProtocolMismatch,
    /// No broker answered at all.
    Unreachable,
}

impl Problem {
    fn advice(self) -> &'static str {
        match self {
            Self::Authentication => "SASL authentication failed: check the user, the password and --kafka-sasl-mechanism",
            Self::UntrustedCertificate => {
                "the broker's TLS certificate is not trusted: check --kafka-ca-file and the broker's host name"
            }
            Self::ProtocolMismatch => {
                "the broker hung up during the handshake: its listener and --kafka-security-protocol disagree (TLS or not?)"
            }
            Self::Unreachable => "no broker answered: check --brokers and the network",
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("Kafka at {brokers}: {}{}", problem.advice(), detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
pub struct ConnectionError {
    pub brokers: String,
    pub problem: Problem,
    /// librdkafka's last report.
    pub detail: Option<String>,
}

impl ConnectionError {
    /// A settings problem (authentication, certificate, protocol) that no
    /// retry fixes, unlike a broker that is not up yet.
    pub fn is_fatal(&self) -> bool {
        self.problem != Problem::Unreachable
    }
}

/// For a binary's start: fails on a settings problem; only warns when no
/// broker answered yet (librdkafka keeps trying; the broker may be starting).
pub fn check_at_start(config: &ClientConfig, timeout: Duration) -> Result<(), ConnectionError> {
    match check(config, timeout) {
        Err(e) if e.is_fatal() => Err(e),
        Err(e) => {
            tracing::warn!(error = %e, "Kafka not reachable yet; carrying on");
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

/// Sorts librdkafka's error reports into a [`Problem`]; `None` while none of
/// them is conclusive.
pub fn classify(reports: &[String]) -> Option<Problem> {
    let has = |needle: &str| reports.iter().any(|r| r.to_ascii_lowercase().contains(needle));
    if has("authentication failed") || has("sasl authentication error") || has("invalid credentials") {
        Some(Problem::Authentication)
    } else if has("certificate verify failed") || has("certificate_verify_failed") || has("unknown ca") {
        Some(Problem::UntrustedCertificate)
    } else if has("ssl listener")
        || has("wrong version number")
        || has("ssl handshake failed")
        || has("packet length too long")
        || hung_up_at_hello(reports) >= 2
    {
        Some(Problem::ProtocolMismatch)
    } else if has("all broker connections are down") || has("connection refused") {
        Some(Problem::Unreachable)
    } else {
        None
    }
}

/// Connections the broker closed as soon as the client spoke (its first
/// request, ApiVersion): what a TLS listener does to a plaintext client.
/// Once could be a broker going down; twice running is the handshake.
fn hung_up_at_hello(reports: &[String]) -> usize {
    reports
        .iter()
        .map(|r| r.to_ascii_lowercase())
        .filter(|r| r.contains("disconnected") && r.contains("in state apiversion_query"))
        .count()
}

/// Keeps librdkafka's error reports for [`classify`].
#[derive(Default)]
struct Reports(Mutex<Vec<String>>);

impl Reports {
    fn push(&self, report: String) {
        if let Ok(mut reports) = self.0.lock() {
            reports.push(report);
        }
    }
}

impl ClientContext for Reports {
    /// librdkafka's log lines say why a connection failed ("SASL
    /// authentication error", "SSL handshake failed"); they are kept for
    /// the verdict instead of being logged at every retry.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Info as i32) {
            self.push(format!("{fac}: {message}"));
        }
        tracing::debug!(fac, message, "librdkafka (connection check)");
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.push(format!("{error}: {reason}"));
    }
}

impl ConsumerContext for Reports {}

/// Asks for the cluster's metadata until it answers, a report settles what
/// is wrong (authentication, certificate, protocol: at once), or `timeout`.
pub fn check(config: &ClientConfig, timeout: Duration) -> Result<(), ConnectionError> {
    let brokers = config.get("bootstrap.servers").unwrap_or("?").to_owned();
    let failed = |problem, reports: &[String]| ConnectionError {
        brokers: brokers.clone(),
        problem,
        detail: reports.last().cloned(),
    };
    let mut probe = config.clone();
    // A throwaway group: the probe never joins one; it only asks for metadata.
    probe.set("group.id", "fleet-connection-check");
    // Its log lines carry the reasons; rdkafka otherwise sets the level from
    // the `log` crate's, which may be off.
    probe.set_log_level(RDKafkaLogLevel::Info);
    let consumer: BaseConsumer<Reports> = match probe.create_with_context(Reports::default()) {
        Ok(consumer) => consumer,
        Err(e) => return Err(failed(Problem::Unreachable, &[e.to_string()])),
    };
    let started = Instant::now();
    loop {
        let attempt = consumer.fetch_metadata(None, Duration::from_millis(500));
        // Serves the error callbacks queued meanwhile.
        if let Some(Err(e)) = consumer.poll(Duration::ZERO) {
            consumer.context().push(e.to_string());
        }
        let reports = consumer.context().0.lock().map(|r| r.clone()).unwrap_or_default();
        match (attempt, classify(&reports)) {
            (Ok(_), _) => return Ok(()),
            (Err(_), Some(problem)) if problem != Problem::Unreachable => return Err(failed(problem, &reports)),
            (Err(e), conclusion) if started.elapsed() >= timeout => {
                let mut reports = reports;
                reports.push(e.to_string());
                return Err(failed(conclusion.unwrap_or(Problem::Unreachable), &reports));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn librdkafkas_reports_sort_into_problems() {
        let one = |s: &str| classify(&[s.to_owned()]);
        assert_eq!(
            one("Local: Authentication failure: SASL authentication error: Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256"),
            Some(Problem::Authentication)
        );
        assert_eq!(
            one("SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate could not be verified"),
            Some(Problem::UntrustedCertificate)
        );
        assert_eq!(
            one("Disconnected while requesting ApiVersion: might be caused by incorrect security.protocol configuration (connecting to a SSL listener?)"),
            Some(Problem::ProtocolMismatch)
        );
        let hung_up = "FAIL: 127.0.0.1:9093/bootstrap: Disconnected: connection closed by peer: receive 0 after POLLIN (after 0ms in state APIVERSION_QUERY)";
        assert_eq!(one(hung_up), None, "once may be a broker going down");
        assert_eq!(classify(&[hung_up.to_owned(), hung_up.to_owned()]), Some(Problem::ProtocolMismatch));
        assert_eq!(one("1/1 brokers are down: Connection refused"), Some(Problem::Unreachable));
        assert_eq!(one("Broker transport failure"), None);
        assert_eq!(classify(&[]), None);
    }

    #[test]
    fn an_unreachable_broker_is_reported_within_the_timeout() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", format!("127.0.0.1:{port}"));
        let started = Instant::now();
        let err = check(&config, Duration::from_secs(2)).unwrap_err();
        assert_eq!(err.problem, Problem::Unreachable);
        assert!(started.elapsed() < Duration::from_secs(6), "{:?}", started.elapsed());
        assert!(err.to_string().contains("no broker answered"), "{err}");
    }
}
