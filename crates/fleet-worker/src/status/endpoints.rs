//! `/metrics`, `/healthz`, `/ready` and `/dead-letters`, up before the model
//! loads: a probe during warm-up gets "not ready" rather than a refused
//! connection.

use super::probes;
use crate::core::health::Health;
use crate::core::job::DEAD_LETTER_REASONS;
use crate::core::precision::Precision;
use crate::metrics::{self as series, SeriesLabels};
use crate::stages::sink::failure::{FailureClass, WRITE_TARGETS};
use crate::stages::sink::LocalRecord;
use crate::versions::load::RefusalReason;
use anyhow::{Context, Result};
use fleet_ops::endpoints::{self, Checks};
use fleet_proto::clock::now_ms;
use fleet_proto::ModelName;
use std::net::SocketAddr;
use std::sync::Arc;

/// Installs the metrics recorder (every series labelled with `model`),
/// registers every series at zero, and serves the endpoints on `addr`.
pub async fn serve(addr: SocketAddr, model: &ModelName, health: Arc<Health>, local: Arc<LocalRecord>) -> Result<()> {
    let recorder = series::install(model.as_str()).context("installing the metrics recorder")?;
    series::register(&SeriesLabels {
        dlq_reasons: DEAD_LETTER_REASONS,
        failure_targets: &WRITE_TARGETS,
        failure_classes: FailureClass::ALL.map(FailureClass::as_str).to_vec(),
        panic_stages: crate::guard::Stage::ALL.map(crate::guard::Stage::as_str).to_vec(),
        refusal_reasons: RefusalReason::ALL.map(RefusalReason::as_str).to_vec(),
        precisions: Precision::ALL.map(Precision::as_str).to_vec(),
    });
    let (live, ready) = (health.clone(), health);
    let checks = Checks {
        live: Arc::new(move || probes::liveness(&live.facts(), now_ms())),
        ready: Arc::new(move || probes::readiness(&ready.facts(), now_ms())),
        pages: vec![("/dead-letters", Arc::new(move || local.to_json()))],
    };
    let bound = endpoints::serve(addr, recorder, checks).await.with_context(|| format!("serving metrics on {addr}"))?;
    tracing::info!(%bound, "serving /metrics, /healthz, /ready");
    Ok(())
}
