//! Reading what a process serves over HTTP: a plain GET, and the samples of
//! a Prometheus text scrape. Every test that checks a metric reads it the
//! same way, whether from a worker, an exporter or a load run.

use std::net::TcpStream;
use std::time::Duration;

/// Sums the samples of a Prometheus text scrape whose name is `name` and
/// whose label set contains every `labels` pair.
pub fn metric_value(scrape: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    series(scrape, name, labels).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

/// [`metric_value`] of a series that must be there: one the scrape does not
/// have fails the test instead of reading as 0, so an assertion that a value
/// is 0 cannot pass because the series is gone or renamed.
pub fn present_metric_value(scrape: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    assert!(series(scrape, name, labels).next().is_some(), "the scrape has no series {name} with {labels:?}");
    metric_value(scrape, name, labels)
}

/// The sample lines of `name` whose label set contains every `labels` pair.
fn series<'a>(scrape: &'a str, name: &'a str, labels: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = &'a str> + 'a {
    scrape
        .lines()
        .filter(move |l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(move |l| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
}

/// A plain HTTP/1.0 GET on loopback: (status code, body); None when nothing
/// listens yet. Enough for /metrics, /healthz and /ready.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((status, body))
}
