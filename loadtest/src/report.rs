//! What a run leaves behind, in a folder of its own: the raw records
//! (records.csv), the run by second (seconds.csv: answers, latency, lag
//! and the workers' backlog report with the wait it predicts), the plots, and a
//! summary whose last line is the ledger's RESULT line.

use crate::ledger::{Ledger, Outcome};
use crate::plot;
use crate::runner::RunOutcome;
use crate::timeline::{self, latency_histogram, quantile_ms, record_ms};
use anyhow::{Context, Result};
use fleet_proto::backlog;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// The summary text, ending with the RESULT line.
pub fn summary(title: &str, outcome: &RunOutcome) -> String {
    let ledger: &Ledger = &outcome.ledger;
    let mut e2e = latency_histogram();
    for r in outcome.records.iter().filter(|r| r.outcome == Outcome::Ok) {
        if let Some(ms) = r.e2e_ms {
            record_ms(&mut e2e, ms);
        }
    }
    let span = outcome.records.iter().filter_map(|r| r.answered_s).fold(0.0f64, f64::max).max(1e-9);
    let peak_lag = outcome.lag.iter().map(|&(_, l)| l).max().unwrap_or(0);
    let fmt = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.0} ms"));
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    let _ = writeln!(
        out,
        "sent {} (not accepted by the producer: {}), answered ok {} / error {} / expired {}, dead-lettered {}, missing {}",
        ledger.sent,
        ledger.send_failed,
        ledger.ok,
        ledger.error,
        ledger.expired,
        ledger.dead_lettered(),
        ledger.missing
    );
    for (code, count) in &ledger.errors_by_code {
        let _ = writeln!(out, "  error {code}: {count}");
    }
    let _ = writeln!(out, "ok answers per second over the run: {:.1}", ledger.ok as f64 / span);
    let _ = writeln!(
        out,
        "end-to-end latency of ok answers: p50 {}, p90 {}, p99 {}, max {}",
        fmt(quantile_ms(&e2e, 0.50)),
        fmt(quantile_ms(&e2e, 0.90)),
        fmt(quantile_ms(&e2e, 0.99)),
        fmt(quantile_ms(&e2e, 1.0))
    );
    let _ = writeln!(out, "peak consumer lag: {peak_lag}");
    let _ = writeln!(out, "{}", ledger.result_line());
    out
}

/// Writes records.csv, seconds.csv, the plots and summary.txt into `dir`.
pub fn write(dir: &Path, title: &str, outcome: &RunOutcome) -> Result<String> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut records = std::io::BufWriter::new(std::fs::File::create(dir.join("records.csv"))?);
    writeln!(records, "id,sent_s,outcome,code,answered_s,e2e_ms,queue_ms,infer_ms")?;
    let opt = |v: Option<f64>| v.map(|v| format!("{v:.3}")).unwrap_or_default();
    for r in &outcome.records {
        let (name, code) = match &r.outcome {
            Outcome::Ok => ("ok", ""),
            Outcome::Error(code) => ("error", code.as_str()),
            Outcome::Expired => ("expired", ""),
            Outcome::Missing => ("missing", ""),
        };
        writeln!(
            records,
            "{},{:.3},{name},{code},{},{},{},{}",
            r.id,
            r.sent_s,
            opt(r.answered_s),
            opt(r.e2e_ms),
            opt(r.queue_ms),
            opt(r.infer_ms)
        )?;
    }
    records.flush()?;

    let seconds = timeline::per_second(&outcome.records, &outcome.lag, &outcome.load);
    let mut by_second = std::io::BufWriter::new(std::fs::File::create(dir.join("seconds.csv"))?);
    writeln!(by_second, "second,sent,ok,error,expired,p50_ms,p99_ms,lag,backlog,drain_per_s,predicted_wait_ms")?;
    for s in &seconds {
        let lag = s.lag.map(|l| l.to_string()).unwrap_or_default();
        let backlog = s.load.map(|l| l.backlog.to_string()).unwrap_or_default();
        let drain = s.load.and_then(|l| l.drain_per_s).map(|d| format!("{d:.1}")).unwrap_or_default();
        let wait = s.load.as_ref().and_then(backlog::predicted_wait_ms).map(|w| w.to_string()).unwrap_or_default();
        writeln!(
            by_second,
            "{},{},{},{},{},{},{},{lag},{backlog},{drain},{wait}",
            s.second,
            s.sent,
            s.ok,
            s.error,
            s.expired,
            opt(s.p50_ms),
            opt(s.p99_ms)
        )?;
    }
    by_second.flush()?;

    plot::throughput_and_latency(&dir.join("throughput.png"), title, &seconds)
        .map_err(|e| anyhow::anyhow!("plotting throughput: {e}"))?;
    plot::lag(&dir.join("lag.png"), title, &seconds).map_err(|e| anyhow::anyhow!("plotting lag: {e}"))?;
    plot::outcomes(&dir.join("outcomes.png"), title, &outcome.ledger)
        .map_err(|e| anyhow::anyhow!("plotting outcomes: {e}"))?;
    let text = summary(title, outcome);
    std::fs::write(dir.join("summary.txt"), &text)?;
    Ok(text)
}
