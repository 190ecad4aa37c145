//! Runs batches through the real engine and measures them: throughput, batch
//! latency percentiles, padding efficiency and peak resident memory; and
//! prints the measured runs as one table.

use crate::strategy::padding_efficiency;
use fleet_worker::stages::engine::error::EngineError;
use fleet_worker::stages::engine::torch::TextModule;
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct Measured {
    pub name: String,
    pub sentences: usize,
    pub batches: usize,
    pub seconds: f64,
    pub p50_batch_ms: f64,
    pub p99_batch_ms: f64,
    pub padding_efficiency: f64,
    /// Peak resident set of this process during the run (VmHWM), MiB.
    pub peak_rss_mib: Option<f64>,
    /// The largest rows × padded length² of any batch: the attention
    /// memory a GPU would need for it.
    pub max_attention_cells: usize,
}

impl Measured {
    pub fn throughput(&self) -> f64 {
        self.sentences as f64 / self.seconds.max(1e-9)
    }
}

/// A table of measured runs, one line each: throughput, batch latency,
/// padding and memory.
pub fn print_table(rows: &[&Measured]) {
    println!(
        "{:<14} {:>12} {:>8} {:>13} {:>13} {:>11} {:>14} {:>14}",
        "strategy",
        "sentences/s",
        "batches",
        "p50 batch ms",
        "p99 batch ms",
        "padding eff",
        "max attn cells",
        "peak RSS MiB"
    );
    for m in rows {
        println!(
            "{:<14} {:>12.1} {:>8} {:>13.1} {:>13.1} {:>11.3} {:>14} {:>14}",
            m.name,
            m.throughput(),
            m.batches,
            m.p50_batch_ms,
            m.p99_batch_ms,
            m.padding_efficiency,
            m.max_attention_cells,
            m.peak_rss_mib.map_or("-".into(), |v| format!("{v:.0}"))
        );
    }
}

/// Untimed: the first call of each new shape pays for libtorch's profiling
/// executor, so each strategy gets a few batches before the clock starts.
pub fn warm_up(engine: &TextModule, tokens: &[Vec<i64>], batches: &[Vec<usize>]) -> Result<(), EngineError> {
    for batch in batches.iter().take(4) {
        run(engine, tokens, batch)?;
    }
    Ok(())
}

pub fn measure(
    name: &str,
    engine: &TextModule,
    tokens: &[Vec<i64>],
    batches: &[Vec<usize>],
) -> Result<Measured, EngineError> {
    reset_peak_rss();
    let lens: Vec<usize> = tokens.iter().map(Vec::len).collect();
    let mut batch_ms = Vec::with_capacity(batches.len());
    let started = Instant::now();
    for batch in batches {
        let t = Instant::now();
        run(engine, tokens, batch)?;
        batch_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let seconds = started.elapsed().as_secs_f64();
    batch_ms.sort_by(f64::total_cmp);
    let max_attention_cells = batches
        .iter()
        .map(|b| {
            let longest = b.iter().map(|&i| lens[i]).max().unwrap_or(0);
            b.len() * longest * longest
        })
        .max()
        .unwrap_or(0);
    Ok(Measured {
        name: name.to_owned(),
        sentences: batches.iter().map(Vec::len).sum(),
        batches: batches.len(),
        seconds,
        p50_batch_ms: percentile(&batch_ms, 0.50),
        p99_batch_ms: percentile(&batch_ms, 0.99),
        padding_efficiency: padding_efficiency(&lens, batches),
        peak_rss_mib: peak_rss_mib(),
        max_attention_cells,
    })
}

fn run(engine: &TextModule, tokens: &[Vec<i64>], batch: &[usize]) -> Result<(), EngineError> {
    let rows: Vec<&[i64]> = batch.iter().map(|&i| tokens[i].as_slice()).collect();
    engine.vectors(&rows).map(drop)
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Linux: writing 5 to clear_refs resets VmHWM, so each strategy's peak is
/// its own and not the previous one's.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
