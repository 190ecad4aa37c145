//! One HTTP port for what Kubernetes and Prometheus ask a process:
//! `/metrics` (Prometheus text), `/healthz` (liveness: restart me if this
//! fails) and `/ready` (readiness: send me work only if this passes). The
//! checks are the caller's; this module only serves them. Every scrape
//! also reads the process's own figures (`process_resident_memory_bytes`,
//! `process_cpu_seconds_total`, `process_open_fds`, … as Prometheus' own
//! clients name them; metrics-process), so memory growth, CPU and leaked
//! descriptors show on the same dashboard as the fleet's series.

use axum::http::{header, StatusCode};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// A health check: `Err` carries why, shown to whoever asks.
pub type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// A JSON page the process serves besides the checks (path, body).
pub type Page = (&'static str, Arc<dyn Fn() -> String + Send + Sync>);

pub struct Checks {
    pub live: Check,
    pub ready: Check,
    /// Further read-only pages, e.g. the worker's `/dead-letters`.
    pub pages: Vec<Page>,
}

/// How often histogram and idle-series housekeeping runs (the exporter's
/// own listener would do this; a custom server has to).
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Binds `addr` now (so a taken port fails the start, not a later scrape)
/// and serves in the background. Returns the bound address.
pub async fn serve(addr: SocketAddr, metrics: PrometheusHandle, checks: Checks) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let upkeep = metrics.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP_EVERY);
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    let Checks { live, ready, pages } = checks;
    let process = metrics_process::Collector::default();
    process.describe();
    let mut app = Router::new()
        .route(
            "/metrics",
            get(move || {
                // Read when asked, so the figures are the scrape's own.
                process.collect();
                let body = metrics.render();
                async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body) }
            }),
        )
        .route("/healthz", get(move || answer(live.clone())))
        .route("/ready", get(move || answer(ready.clone())));
    for (path, body) in pages {
        app = app.route(
            path,
            get(move || {
                let body = body();
                async move { ([(header::CONTENT_TYPE, "application/json")], body) }
            }),
        );
    }
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the metrics/health server stopped");
        }
    });
    Ok(bound)
}

async fn answer(check: Check) -> (StatusCode, String) {
    match check() {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}
