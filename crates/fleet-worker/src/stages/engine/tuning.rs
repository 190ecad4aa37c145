//! Chooses, on the worker's own traffic, the settings whose best value
//! differs from one CPU to the next: libtorch's intra-op threads, then how
//! full a batch is made (a share of each bucket's row and token budgets).
//!
//! Why on live traffic and not at warm-up: the engine shares the cores with
//! the rest of the worker (Kafka reads, tokenizing, Redis writes). What
//! counts is what the whole path answers, and the engine alone cannot tell
//! it: on some 2-core machines one thread answers more than two, on others
//! two answer more (docs/benchmarks.md has the measurements). So
//! while the worker holds a backlog (the engine is the bottleneck, and its
//! rows per wall second are the path's), each candidate runs for windows of
//! a few seconds in an A B B A order (drift hits all alike), and the one
//! with the most rows per wall second is kept. Windows in which the
//! backlog ran out are thrown away: an idle engine measures the load, not
//! the setting, and the knob's resting setting (the start's, or the
//! preferred one) holds until the backlog is back. It runs once per
//! process; `--intra-op-threads` fixes the threads and `--engine-tuning
//! false` both knobs.
//!
//! Pure: the engine feeds it each batch's start, rows and whether a backlog
//! was held, and applies the changes it returns.

use crate::config::args::cores;
use crate::config::WorkerArgs;
use std::fmt;

/// A setting the tuner moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// libtorch intra-op threads of the engine's calls.
    Threads(usize),
    /// Each bucket's row and token budgets scaled to this percent.
    BatchPercent(u32),
}

impl Setting {
    /// The `knob` and `value` labels of its gauge series.
    pub fn label(self) -> (&'static str, String) {
        match self {
            Self::Threads(n) => ("threads", n.to_string()),
            Self::BatchPercent(p) => ("batch_percent", p.to_string()),
        }
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Threads(n) => write!(f, "threads={n}"),
            Self::BatchPercent(p) => write!(f, "batch_percent={p}"),
        }
    }
}

/// How long each trial lasts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrialLength {
    /// A window ends after this much wall time of held backlog …
    pub window_ms: f64,
    /// … and at least this many batches.
    pub min_batches: usize,
    /// Windows per candidate (the order reverses each round).
    pub rounds: usize,
    /// Windows run before the first trial and not measured: a fresh
    /// worker's first batch of each shape pays for libtorch's first-call
    /// optimisation, which would count against the first candidate.
    pub warm_up_windows: usize,
}

impl Default for TrialLength {
    fn default() -> Self {
        Self { window_ms: 3_000.0, min_batches: 6, rounds: 2, warm_up_windows: 2 }
    }
}

/// A candidate replaces the knob's preferred value (the configured batch
/// budgets) only when its slowest window beat the preferred value's
/// fastest by this much: smaller batches cost latency nothing measures
/// here, and on a shared machine two windows of the same setting differ
/// by more than a few percent (docs/operations.md, settings, has the
/// figures).
const MARGIN: f64 = 0.05;

/// Batches run after a change before its window starts: a new batch share
/// reaches the engine only behind the batches already formed under the
/// old one (one queued at each of the batch, cache and engine stages).
const SETTLING_BATCHES: usize = 4;

/// What the engine should do now.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Run the next window with this setting.
    Try(Setting),
    /// The backlog ran out mid-trial: back to the knob's resting setting
    /// (a trial of one thread on a large host must not outlive its window).
    Rest(Setting),
    /// The knob is decided: this setting stays; each candidate's rows per
    /// wall second, for the log and the gauges.
    Settle { setting: Setting, rates: Vec<(Setting, f64)> },
}

/// One knob's candidates, tried in turn.
#[derive(Debug, Clone)]
struct Knob {
    plan: Vec<Setting>,
    /// Index in `plan` of the setting being measured.
    trial: usize,
    /// (rows, ms) measured per candidate.
    measured: Vec<(Setting, usize, f64)>,
    /// Each window's rows per second, per candidate.
    windows: Vec<(Setting, f64)>,
    /// Kept unless another beats it by [`MARGIN`].
    preferred: Option<Setting>,
    /// In force whenever nothing is being measured.
    resting: Setting,
}

impl Knob {
    fn new(candidates: &[Setting], rounds: usize, preferred: Option<Setting>, resting: Setting) -> Self {
        let mut plan = Vec::with_capacity(candidates.len() * rounds);
        for round in 0..rounds.max(1) {
            if round % 2 == 0 {
                plan.extend(candidates.iter().copied());
            } else {
                plan.extend(candidates.iter().rev().copied());
            }
        }
        let measured = candidates.iter().map(|&c| (c, 0, 0.0)).collect();
        Self { plan, trial: 0, measured, windows: Vec::new(), preferred, resting }
    }

    fn current(&self) -> Setting {
        self.plan[self.trial]
    }

    fn record(&mut self, rows: usize, ms: f64) {
        let setting = self.current();
        if let Some(entry) = self.measured.iter_mut().find(|(s, _, _)| *s == setting) {
            entry.1 += rows;
            entry.2 += ms;
        }
        self.windows.push((setting, rows as f64 * 1000.0 / ms.max(1e-9)));
    }

    /// The slowest and the fastest window of `setting`.
    fn window_range(&self, setting: Setting) -> (f64, f64) {
        self.windows
            .iter()
            .filter(|(s, _)| *s == setting)
            .fold((f64::INFINITY, 0.0), |(low, high), &(_, rate)| (low.min(rate), high.max(rate)))
    }

    fn rates(&self) -> Vec<(Setting, f64)> {
        self.measured.iter().map(|&(s, rows, ms)| (s, rows as f64 * 1000.0 / ms.max(1e-9))).collect()
    }

    /// The most rows per second; the preferred setting unless the fastest
    /// beat it in every window by the margin (only the fastest in total is
    /// weighed against it: a share that won every window but answered less
    /// in all than another is not a clear winner).
    fn best(&self) -> Setting {
        let rates = self.rates();
        let fastest =
            rates.iter().copied().fold((rates[0].0, f64::MIN), |best, r| if r.1 > best.1 { r } else { best }).0;
        match self.preferred {
            Some(preferred) if preferred != fastest => {
                let (slowest_of_fastest, _) = self.window_range(fastest);
                let (_, fastest_of_preferred) = self.window_range(preferred);
                if slowest_of_fastest > fastest_of_preferred * (1.0 + MARGIN) {
                    fastest
                } else {
                    preferred
                }
            }
            _ => fastest,
        }
    }
}

/// The window being measured.
#[derive(Debug, Clone, Copy, Default)]
struct Window {
    /// The start of its first counted batch; `None` until one.
    started_ms: Option<f64>,
    /// Rows of the batches finished within it.
    rows: usize,
    batches: usize,
    /// Rows of the batch that started last (counted once the next starts).
    running: usize,
    /// Batches still to run before it starts (a change settling in).
    settling: usize,
}

/// The knobs to tune, in order, and the window being measured.
#[derive(Debug, Clone)]
pub struct Tuner {
    knobs: Vec<Knob>,
    length: TrialLength,
    window: Window,
    /// Whether the current trial's setting is in force (else the knob's
    /// resting one).
    trying: bool,
    /// Windows still to run before anything is measured.
    warm_up_left: usize,
}

impl Tuner {
    /// What the worker's arguments ask to tune on live traffic: nothing on
    /// CUDA or with tuning off; the thread counts unless fixed; the batch
    /// share.
    pub fn for_worker(args: &WorkerArgs, device: tch::Device) -> Self {
        let length =
            TrialLength { window_ms: args.engine_tuning_window.as_secs_f64() * 1000.0, ..TrialLength::default() };
        if !args.engine_tuning || device.is_cuda() {
            return Self::new(&[], 1, &[], length);
        }
        let threads = match args.intra_op_threads {
            Some(_) => Vec::new(),
            None => thread_candidates(cores()),
        };
        Self::new(&threads, args.intra_op_threads(), &BATCH_PERCENTS, length)
    }

    /// Tunes the thread counts `threads` (none or one: left as they are;
    /// `start_threads` until decided), then the batch percents
    /// `batch_percents` (the first is preferred, and in force until decided).
    pub fn new(threads: &[usize], start_threads: usize, batch_percents: &[u32], length: TrialLength) -> Self {
        let mut knobs = Vec::new();
        if threads.len() > 1 {
            let candidates: Vec<Setting> = threads.iter().map(|&t| Setting::Threads(t)).collect();
            knobs.push(Knob::new(&candidates, length.rounds, None, Setting::Threads(start_threads)));
        }
        if batch_percents.len() > 1 {
            let candidates: Vec<Setting> = batch_percents.iter().map(|&p| Setting::BatchPercent(p)).collect();
            knobs.push(Knob::new(&candidates, length.rounds, Some(candidates[0]), candidates[0]));
        }
        Self { knobs, length, window: Window::default(), trying: false, warm_up_left: length.warm_up_windows }
    }

    /// Every candidate of the knobs left to tune.
    pub fn candidates(&self) -> Vec<Setting> {
        self.knobs.iter().flat_map(|knob| knob.measured.iter().map(|&(s, _, _)| s)).collect()
    }

    /// Whether anything is left to tune.
    pub fn is_done(&self) -> bool {
        self.knobs.is_empty()
    }

    /// A batch of `rows` starts at `at_ms`; `backlog`: the worker holds more
    /// work than the engine can take at once. The change to apply before
    /// it runs, if any.
    pub fn observe(&mut self, at_ms: f64, rows: usize, backlog: bool) -> Option<Change> {
        let knob = self.knobs.first_mut()?;
        if !backlog {
            // An idle engine would measure the load: this window is lost,
            // and the trial's setting gives way until the backlog is back.
            self.window = Window::default();
            if self.trying {
                self.trying = false;
                return Some(Change::Rest(knob.resting));
            }
            return None;
        }
        if !self.trying {
            self.trying = true;
            self.window = Window { settling: SETTLING_BATCHES, ..Window::default() };
            return Some(Change::Try(knob.current()));
        }
        let window = &mut self.window;
        if window.settling > 0 {
            window.settling -= 1;
            return None;
        }
        let Some(started_ms) = window.started_ms else {
            window.started_ms = Some(at_ms);
            window.running = rows;
            return None;
        };
        window.rows += window.running;
        window.batches += 1;
        window.running = rows;
        let elapsed = at_ms - started_ms;
        if elapsed < self.length.window_ms || window.batches < self.length.min_batches {
            return None;
        }
        if self.warm_up_left > 0 {
            self.warm_up_left -= 1;
            self.window = Window::default();
            return None;
        }
        knob.record(window.rows, elapsed);
        self.window = Window { settling: SETTLING_BATCHES, ..Window::default() };
        knob.trial += 1;
        if knob.trial < knob.plan.len() {
            return Some(Change::Try(knob.current()));
        }
        let settled = Change::Settle { setting: knob.best(), rates: knob.rates() };
        self.knobs.remove(0);
        // The next knob starts its trials with the next batch under backlog.
        self.trying = false;
        Some(settled)
    }
}

/// The intra-op thread counts worth trying on `cores`: each up to 4, then
/// powers of two and the last two counts (a 64-core host tries 8, not 64).
pub fn thread_candidates(cores: usize) -> Vec<usize> {
    let cores = cores.max(1);
    let mut counts: Vec<usize> = (1..=cores.min(4)).collect();
    let mut next = 8;
    while next < cores {
        counts.push(next);
        next *= 2;
    }
    for last in [cores.saturating_sub(1), cores] {
        if last > 4 && !counts.contains(&last) {
            counts.push(last);
        }
    }
    counts
}

/// The batch budgets tried: the configured ones first (preferred), then
/// half and a quarter of them.
pub const BATCH_PERCENTS: [u32; 3] = [100, 50, 25];

#[cfg(test)]
mod tests;
