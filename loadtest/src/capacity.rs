//! Capacity of one worker per batching setting: for each (max_batch_size,
//! max_batch_tokens), a fresh worker on this machine takes steady open-loop
//! load at rising rates; the setting's capacity is the highest rate it
//! sustained within the latency SLO. The seed's table (batch 16/32/64 →
//! req/s and p99), measured our way.

use crate::fleet::{Binaries, LocalWorker};
use crate::ledger::Outcome;
use crate::plan::Capacity;
use crate::profile::Profile;
use crate::runner::{self, RunConfig};
use crate::timeline::{latency_histogram, quantile_ms, record_ms};
use anyhow::{bail, Context, Result};
use fleet_proto::ModelName;
use fleet_testkit::{Broker, Redis};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One batching setting to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting {
    pub max_batch_size: usize,
    pub max_batch_tokens: usize,
    /// How long a bucket's oldest request may wait for company.
    pub max_wait_ms: u64,
}

impl Setting {
    pub fn label(&self) -> String {
        format!("batch {} / {} tokens / wait {} ms", self.max_batch_size, self.max_batch_tokens, self.max_wait_ms)
    }

    /// `size:tokens[:wait_ms]` (the shipped wait, 5 ms, when absent).
    pub fn parse(raw: &str) -> Result<Self, String> {
        let fields: Vec<&str> = raw.split(':').map(str::trim).collect();
        let number = |field: Option<&&str>, what: &str| -> Result<u64, String> {
            field
                .ok_or(format!("expected max_batch_size:max_batch_tokens[:max_wait_ms], missing {what}"))?
                .parse()
                .map_err(|_| format!("{what} must be a number"))
        };
        if fields.len() > 3 {
            return Err("expected max_batch_size:max_batch_tokens[:max_wait_ms]".into());
        }
        Ok(Self {
            max_batch_size: number(fields.first(), "max_batch_size")? as usize,
            max_batch_tokens: number(fields.get(1), "max_batch_tokens")? as usize,
            max_wait_ms: if fields.len() == 3 { number(fields.get(2), "max_wait_ms")? } else { 5 },
        })
    }
}

/// One rate step of one setting.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub setting: Setting,
    pub offered_rps: f64,
    pub ok_rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub sent: u64,
    pub ok: u64,
    pub expired: u64,
    pub lost: u64,
}

impl Point {
    /// Sustained: everything answered `ok` (nothing expired or lost) and
    /// p99 within the SLO.
    pub fn sustained(&self, slo_p99_ms: f64) -> bool {
        self.lost == 0 && self.expired == 0 && self.ok == self.sent && self.p99_ms <= slo_p99_ms
    }
}

/// Per setting: the highest offered rate sustained, with its p99.
pub fn capacities(points: &[Point], slo_p99_ms: f64) -> Vec<Capacity> {
    let mut settings: Vec<Setting> = Vec::new();
    for p in points {
        if !settings.contains(&p.setting) {
            settings.push(p.setting);
        }
    }
    settings
        .into_iter()
        .map(|setting| {
            let best = points
                .iter()
                .filter(|p| p.setting == setting && p.sustained(slo_p99_ms))
                .max_by(|a, b| a.offered_rps.total_cmp(&b.offered_rps));
            Capacity {
                label: setting.label(),
                sustained_rps: best.map_or(0.0, |p| p.ok_rps),
                p99_ms: best.map_or(f64::NAN, |p| p.p99_ms),
            }
        })
        .collect()
}

pub struct SweepConfig {
    pub binaries: Binaries,
    pub corpus: Vec<String>,
    pub settings: Vec<Setting>,
    pub rates: Vec<f64>,
    pub step: Duration,
    /// Only to stop early: a setting far past its SLO is not stepped further.
    pub slo_p99_ms: f64,
    pub intra_op_threads: usize,
    /// Extra worker arguments (e.g. `--kafka-property key=value`).
    pub worker_args: Vec<String>,
}

/// A model repository that serves the shipped minilm version with
/// `setting`'s batching (the config rewritten, the version linked).
fn repository_with(binaries: &Binaries, setting: Setting) -> Result<PathBuf> {
    let shipped = binaries.model_repo.join("minilm");
    let config = std::fs::read_to_string(shipped.join("config.toml")).context("reading models/minilm/config.toml")?;
    let config: String = config
        .lines()
        .map(|line| match line.split('=').next().map(str::trim) {
            Some("max_batch_size") => format!("max_batch_size = {}", setting.max_batch_size),
            Some("max_batch_tokens") => format!("max_batch_tokens = {}", setting.max_batch_tokens),
            Some("max_wait_ms") => format!("max_wait_ms = {}", setting.max_wait_ms),
            _ => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let root = std::env::temp_dir().join(format!(
        "fleet-capacity-{}-{}-{}",
        std::process::id(),
        setting.max_batch_size,
        setting.max_batch_tokens
    ));
    let model = root.join("minilm");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&model)?;
    std::fs::write(model.join("config.toml"), config)?;
    for entry in std::fs::read_dir(&shipped)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            std::os::unix::fs::symlink(entry.path().canonicalize()?, model.join(entry.file_name()))?;
        }
    }
    Ok(root)
}

/// Runs the sweep: a broker and Redis for all, a fresh worker per setting.
pub async fn sweep(config: SweepConfig) -> Result<Vec<Point>> {
    let model = ModelName::parse("minilm")?;
    let broker = Broker::start();
    let redis = Redis::start();
    broker.create_topics(&model, 8).await;
    let mut points = Vec::new();
    for (s, &setting) in config.settings.iter().enumerate() {
        let repo = repository_with(&config.binaries, setting)?;
        let binaries = Binaries { model_repo: repo, ..config.binaries.clone() };
        let mut args = vec!["--intra-op-threads".to_owned(), config.intra_op_threads.to_string()];
        args.extend(config.worker_args.iter().cloned());
        let mut worker = LocalWorker::start_async(&binaries, "minilm", &broker.addr, &redis.url(), &args).await?;
        // Unrecorded warm-up: the worker joins the group (a few seconds
        // before it owns partitions) and meets its first batch shapes.
        let redis_url = redis.url();
        let run = |profile, duration, run_id| {
            RunConfig::on_local_fleet(&broker, &redis_url, &model, profile, duration, &config.corpus, run_id)
        };
        let warm_up_rate = config.rates.first().copied().unwrap_or(10.0);
        let warm_up = run(
            Profile::Steady { rate: warm_up_rate },
            Duration::from_secs(10),
            format!("cap-warm-{}-{s}", std::process::id()),
        )?;
        runner::run(RunConfig { seed: 999_999, ..warm_up }).await?;
        for (r, &rate) in config.rates.iter().enumerate() {
            let step = run(Profile::Steady { rate }, config.step, format!("cap-{}-{s}-{r}", std::process::id()))?;
            let outcome = runner::run(RunConfig { seed: (s * 1000 + r) as u64, ..step }).await?;
            let mut e2e = latency_histogram();
            for record in outcome.records.iter().filter(|r| r.outcome == Outcome::Ok) {
                if let Some(ms) = record.e2e_ms {
                    record_ms(&mut e2e, ms);
                }
            }
            let ledger = &outcome.ledger;
            let span = outcome.records.iter().filter_map(|r| r.answered_s).fold(0.0f64, f64::max).max(1e-9);
            let point = Point {
                setting,
                offered_rps: rate,
                ok_rps: ledger.ok as f64 / span.max(config.step.as_secs_f64()),
                p50_ms: quantile_ms(&e2e, 0.50).unwrap_or(f64::NAN),
                p99_ms: quantile_ms(&e2e, 0.99).unwrap_or(f64::NAN),
                sent: ledger.sent,
                ok: ledger.ok,
                expired: ledger.expired,
                lost: ledger.lost(),
            };
            tracing::info!(setting = %setting.label(), rate, ok_rps = point.ok_rps, p99_ms = point.p99_ms, "capacity point");
            // Past the knee, higher rates only queue more.
            let overloaded = point.expired > 0
                || point.ok < point.sent
                || point.ok_rps < 0.9 * rate
                || point.p99_ms > 10.0 * config.slo_p99_ms;
            points.push(point);
            if overloaded {
                break;
            }
        }
        worker.stop()?;
    }
    Ok(points)
}

/// Writes every point (`points.csv`) and the capacities (`capacity.csv`,
/// what `loadtest plan` reads) into `dir`.
pub fn write(dir: &Path, points: &[Point], slo_p99_ms: f64) -> Result<()> {
    use std::fmt::Write as _;
    std::fs::create_dir_all(dir)?;
    let mut all = String::from(
        "max_batch_size,max_batch_tokens,max_wait_ms,offered_rps,ok_rps,p50_ms,p99_ms,sent,ok,expired,lost\n",
    );
    for p in points {
        let _ = writeln!(
            all,
            "{},{},{},{:.0},{:.1},{:.0},{:.0},{},{},{},{}",
            p.setting.max_batch_size,
            p.setting.max_batch_tokens,
            p.setting.max_wait_ms,
            p.offered_rps,
            p.ok_rps,
            p.p50_ms,
            p.p99_ms,
            p.sent,
            p.ok,
            p.expired,
            p.lost
        );
    }
    std::fs::write(dir.join("points.csv"), all)?;
    let mut capacity = String::from("label,sustained_rps,p99_ms\n");
    for c in capacities(points, slo_p99_ms) {
        let _ = writeln!(capacity, "{},{:.1},{:.0}", c.label, c.sustained_rps, c.p99_ms);
    }
    std::fs::write(dir.join("capacity.csv"), capacity)?;
    Ok(())
}

/// Reads `points.csv` back (to judge a sweep against another SLO).
pub fn read_points(text: &str) -> Result<Vec<Point>> {
    csv_rows(text)
        .map(|(line, f)| {
            let number = |k: usize| -> Result<f64> {
                f.get(k)
                    .with_context(|| format!("line {line}: too few fields"))?
                    .parse::<f64>()
                    .with_context(|| format!("line {line}, field {}", k + 1))
            };
            Ok(Point {
                setting: Setting {
                    max_batch_size: number(0)? as usize,
                    max_batch_tokens: number(1)? as usize,
                    max_wait_ms: number(2)? as u64,
                },
                offered_rps: number(3)?,
                ok_rps: number(4)?,
                p50_ms: number(5)?,
                p99_ms: number(6)?,
                sent: number(7)? as u64,
                ok: number(8)? as u64,
                expired: number(9)? as u64,
                lost: number(10)? as u64,
            })
        })
        .collect()
}

/// Reads `capacity.csv` back (`label,sustained_rps,p99_ms` lines after a
/// header): what `loadtest plan` plans from.
pub fn read_capacities(text: &str) -> Result<Vec<Capacity>> {
    csv_rows(text)
        .map(|(line, fields)| match fields.as_slice() {
            [label, rps, p99, ..] => Ok(Capacity {
                label: (*label).to_owned(),
                sustained_rps: rps.parse().with_context(|| format!("line {line}: sustained_rps"))?,
                p99_ms: p99.parse().with_context(|| format!("line {line}: p99_ms"))?,
            }),
            _ => bail!("line {line}: expected label,sustained_rps,p99_ms"),
        })
        .collect()
}

/// The rows of a CSV this module wrote, after its header and without
/// blank lines: each row's line number in the file and its trimmed fields.
fn csv_rows(text: &str) -> impl Iterator<Item = (usize, Vec<&str>)> {
    text.lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, line)| (i + 2, line.split(',').map(str::trim).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(size: usize, rate: f64, p99: f64, expired: u64) -> Point {
        Point {
            setting: Setting { max_batch_size: size, max_batch_tokens: 2048, max_wait_ms: 5 },
            offered_rps: rate,
            ok_rps: rate,
            p50_ms: p99 / 2.0,
            p99_ms: p99,
            sent: 100,
            ok: 100 - expired,
            expired,
            lost: 0,
        }
    }

    #[test]
    fn capacity_is_the_highest_rate_within_the_slo_with_nothing_expired() {
        let points = vec![
            point(16, 50.0, 200.0, 0),
            point(16, 100.0, 400.0, 0),
            point(16, 150.0, 1500.0, 0), // over the SLO
            point(32, 50.0, 200.0, 0),
            point(32, 100.0, 300.0, 5), // expired some
        ];
        let capacity = capacities(&points, 1000.0);
        assert_eq!(capacity.len(), 2);
        assert_eq!((capacity[0].sustained_rps, capacity[0].p99_ms), (100.0, 400.0));
        assert_eq!(capacity[1].sustained_rps, 50.0);
    }

    #[test]
    fn points_read_back_as_written() {
        let dir = std::env::temp_dir().join(format!("fleet-points-{}", std::process::id()));
        let points = vec![point(16, 50.0, 200.0, 0), point(32, 100.0, 300.0, 5)];
        write(&dir, &points, 1000.0).unwrap();
        let back = read_points(&std::fs::read_to_string(dir.join("points.csv")).unwrap()).unwrap();
        assert_eq!(back, points);
        let capacity = std::fs::read_to_string(dir.join("capacity.csv")).unwrap();
        assert!(
            capacity.starts_with("label,sustained_rps,p99_ms\nbatch 16 / 2048 tokens / wait 5 ms,50.0,200\n"),
            "{capacity}"
        );
    }

    #[test]
    fn capacities_read_back_and_a_short_line_is_named() {
        let text = "label,sustained_rps,p99_ms\nbatch 16,50.0,200\n\nbatch 32, 90.5 , 310\n";
        let read = read_capacities(text).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!((read[1].label.as_str(), read[1].sustained_rps, read[1].p99_ms), ("batch 32", 90.5, 310.0));
        let short = read_capacities("label,sustained_rps,p99_ms\nbatch 16,50.0\n").unwrap_err();
        assert_eq!(short.to_string(), "line 2: expected label,sustained_rps,p99_ms");
    }

    #[test]
    fn settings_parse_as_size_colon_tokens() {
        assert_eq!(
            Setting::parse("32:2048"),
            Ok(Setting { max_batch_size: 32, max_batch_tokens: 2048, max_wait_ms: 5 })
        );
        assert_eq!(Setting::parse("32:2048:40").map(|s| s.max_wait_ms), Ok(40));
        assert!(Setting::parse("32").is_err());
        assert!(Setting::parse("32:x").is_err());
    }
}
