//! The served model of either kind behind one face: what one request's input
//! is, how the model is checked against its config and warmed up, and its
//! outputs as answer JSON (the task's shape). The other stages batch and
//! retry without knowing which kind or task it serves.

use super::answer::{labels_mismatch, not_one_score, Answer};
use super::error::EngineError;
use super::memory::MemoryGuard;
use super::precision_choice::{self as precision, Agreement, Candidate, Target};
use super::split::{run_with_split, CallError, RowFailure, SplitRun};
use super::torch::{ImageModule, TextModule};
use crate::config::batching::BucketLimits;
use crate::config::device::Precision as Configured;
use crate::config::{ModelKind, ModelVersion};
use crate::core::input::{stretch, ModelInput};
use crate::core::precision::{CpuFeatures, Precision};
use crate::guard;
use serde_json::Value;
use tch::Device;

/// The TorchScript module of the version's kind.
enum Torch {
    Text(TextModule),
    Image(ImageModule),
}

/// A loaded, warm version: its module, what its answers look like, the
/// memory guard in front of it, and the precision it runs at.
pub struct Model {
    torch: Torch,
    answer: Answer,
    guard: MemoryGuard,
    pub precision: Precision,
    /// The task's tag (`TaskConfig::tag`), in its feature-cache keys.
    pub task_tag: String,
}

/// What warming up found: the batches that had to be split to fit, as
/// (bucket, most rows that fit), for the batcher to start with.
#[derive(Debug, Default)]
pub struct WarmUp {
    pub row_caps: Vec<(usize, usize)>,
}

/// Where a version is loaded, and what its precision is judged on.
pub struct LoadTarget<'a> {
    pub device: Device,
    /// The CPU's bf16 features (detected, or as `--cpu-features` says).
    pub cpu: CpuFeatures,
    /// Real inputs both precisions run on: their outputs must agree.
    pub probes: &'a [ModelInput],
}

impl Model {
    /// Loads the version's model.pt (and the labels of a classifier),
    /// checks it against the config's signature on the probes (a mismatch
    /// is [`EngineError::Signature`], naming the key), and chooses its
    /// precision (`precision`): with `auto`, bf16 on a CPU that computes it
    /// fast and fp16 on CUDA, each only when its outputs on the probes agree
    /// with fp32's. `guard`'s estimate is for fp32 and is scaled to the
    /// precision chosen.
    pub fn load(version: &ModelVersion, target: &LoadTarget<'_>, guard: MemoryGuard) -> Result<Self, EngineError> {
        let configured = version.config.device.precision;
        let where_ = if target.device.is_cuda() { Target::Cuda } else { Target::Cpu(target.cpu) };
        let candidate = precision::candidate(configured, where_);
        let answer = Answer::for_version(version)?;
        let fp32 = Torch::load(version, target.device)?;
        check_signature(&fp32, &answer, target.probes)?;
        let (torch, choice) = match &candidate {
            Candidate::Fp32Only(_) => (fp32, precision::choose(configured, &candidate, None)),
            Candidate::Try(lower) => {
                let mut lowered = Torch::load(version, target.device)?;
                let agreement = lowered.convert(*lower, &fp32, &answer, target.probes);
                let choice = precision::choose(configured, &candidate, Some(&agreement));
                // On a CPU the flags do not say how fast bf16 is: time it.
                let speed = (configured == Configured::Auto && !target.device.is_cuda() && choice.precision == *lower)
                    .then(|| speed(&fp32, &lowered, target.probes))
                    .flatten();
                let choice = precision::keep_if_faster(choice, configured, speed);
                (if choice.precision == *lower { lowered } else { fp32 }, choice)
            }
        };
        tracing::info!(
            version = version.version,
            precision = choice.precision.as_str(),
            reason = choice.reason,
            "precision chosen"
        );
        let guard = MemoryGuard { cost: guard.cost.scaled(choice.precision.element_bytes(), 4), ..guard };
        Ok(Self { torch, answer, guard, precision: choice.precision, task_tag: version.config.task.tag() })
    }

    /// Sets the bytes a batch may use (the estimate is the model config's).
    pub fn set_memory_limit(&mut self, limit: Option<u64>) {
        self.guard.limit = limit;
    }

    /// Runs every bucket's shape on real input stretched to the bucket's
    /// bound, so that libtorch's first-call optimisation of each new shape
    /// is not met by live traffic. Under a memory limit (CUDA, or
    /// `--engine-memory-limit-bytes`) each bucket's *largest* batch runs,
    /// so a batch too big for the device is found here: it is split, and
    /// what fitted comes back as the bucket's row cap. Without a limit one
    /// row per bucket does (the largest batches cost 26 s on 2 CPU cores
    /// and find nothing; a worker joining a busy host must not take that
    /// long). Any other failure refuses the version.
    pub fn warm_up(&self, limits: &BucketLimits, sample: &ModelInput) -> Result<WarmUp, EngineError> {
        let mut warm = WarmUp::default();
        for (bucket, &bound) in limits.boundaries.iter().enumerate() {
            let row = stretch(sample, bound);
            let fitting = (1..=limits.max_batch_size).rev().find(|&r| limits.fits(r, row.len())).unwrap_or(1);
            let most = if self.guard.limit.is_some() { fitting } else { 1 };
            // Image batches differ by row count only: warm every count
            // (cheap: a few rows of one small shape each).
            let counts: Vec<usize> = match self.torch {
                Torch::Image(_) => (1..=fitting).collect(),
                Torch::Text(_) => vec![most],
            };
            for rows in counts {
                let batch = vec![&row; rows];
                let run = self.infer_split(&batch);
                if let Some(Err(RowFailure::Failed(m))) =
                    run.outputs.iter().find(|o| matches!(o, Err(RowFailure::Failed(_))))
                {
                    return Err(EngineError::WarmUp(m.clone()));
                }
                if let Some(cap) = run.row_cap {
                    tracing::warn!(bucket, bound, rows, fits = cap, "warm-up batch did not fit; capping the bucket");
                    warm.row_caps.push((bucket, cap));
                    break;
                }
            }
        }
        Ok(warm)
    }

    /// One output per input, in order, as the answer's `output` JSON. A
    /// batch over the memory guard's limit fails with `OutOfMemory` before
    /// the model runs.
    pub fn infer(&self, inputs: &[&ModelInput]) -> Result<Vec<Value>, EngineError> {
        let padded_len = inputs.iter().map(|i| i.len()).max().unwrap_or(0);
        let rows = inputs.iter().map(|i| i.rows()).sum();
        self.guard.check(rows, padded_len).map_err(|over| EngineError::OutOfMemory(over.to_string()))?;
        let mut vectors = self.torch.vectors(inputs)?.into_iter();
        // One vector per row, in row order: each input takes its own rows.
        inputs
            .iter()
            .map(|input| {
                let own: Vec<Vec<f32>> = vectors.by_ref().take(input.rows()).collect();
                self.answer.json(own, input.text_fields())
            })
            .collect()
    }

    /// [`infer`](Self::infer), halving the batch while it does not fit in
    /// device memory (`split::run_with_split`): one result per input. A
    /// panic in a call is that call's failure (`guard`): its rows are
    /// retried alone, and those that still fail are answered `model_failed`.
    pub fn infer_split(&self, inputs: &[&ModelInput]) -> SplitRun<Value> {
        run_with_split(inputs, &mut |part| match guard::contain(guard::Stage::Model, || self.infer(part)) {
            Ok(Ok(outputs)) => Ok(outputs),
            Ok(Err(EngineError::OutOfMemory(message))) => Err(CallError::OutOfMemory(message)),
            Ok(Err(other)) => Err(CallError::Failed(other.to_string())),
            Err(panic) => Err(CallError::Failed(format!("the model call panicked: {panic}"))),
        })
    }
}

impl Torch {
    fn load(version: &ModelVersion, device: Device) -> Result<Self, EngineError> {
        match version.config.kind {
            ModelKind::Text => Ok(Self::Text(TextModule::for_version(version, device)?)),
            ModelKind::Image => Ok(Self::Image(ImageModule::for_version(version, device)?)),
        }
    }

    /// The config key that declares this kind's module inputs.
    fn inputs_key(&self) -> &'static str {
        match self {
            Self::Text(_) => "text.inputs",
            Self::Image(_) => "image.layout",
        }
    }

    /// Converts the weights to `lower` and compares the outputs on
    /// `probes` with `fp32`'s (a panic in the lower precision counts as
    /// failing to run in it).
    fn convert(&mut self, lower: Precision, fp32: &Torch, answer: &Answer, probes: &[ModelInput]) -> Agreement {
        let rows: Vec<&ModelInput> = probes.iter().collect();
        let reference = match fp32.vectors(&rows) {
            Ok(outputs) => outputs,
            Err(e) => return Agreement::Fails(format!("fp32 itself failed on the probes: {e}")),
        };
        let lowered = guard::contain(guard::Stage::Model, || {
            match self {
                Self::Text(module) => module.convert(lower.kind())?,
                Self::Image(module) => module.convert(lower.kind())?,
            }
            self.vectors(&rows)
        });
        match (lowered, answer) {
            (Ok(Ok(outputs)), Answer::Embedding) => precision::embeddings_agreement(&reference, &outputs),
            (Ok(Ok(outputs)), Answer::Classes { .. }) => precision::classes_agreement(&reference, &outputs),
            (Ok(Ok(outputs)), Answer::Ranked) => precision::scores_agreement(&reference, &outputs),
            (Ok(Err(e)), _) => Agreement::Fails(e.to_string().lines().next().unwrap_or_default().to_owned()),
            (Err(panic), _) => Agreement::Fails(format!("it panicked: {panic}")),
        }
    }

    /// One vector per row of the inputs, in order: the task's embedding or
    /// scores (an input of pairs has a row per pair).
    fn vectors(&self, inputs: &[&ModelInput]) -> Result<Vec<Vec<f32>>, EngineError> {
        match self {
            Self::Text(module) => module.vectors_of(&inputs.iter().flat_map(|i| i.text_rows()).collect::<Vec<_>>()),
            Self::Image(module) => module.vectors(&inputs.iter().map(|i| i.pixels()).collect::<Vec<_>>()),
        }
    }
}

/// Rows of the batch both precisions are timed on: the probes in turn, a
/// batch of the size live traffic forms under load.
const TIMED_ROWS: usize = 16;
/// Timed runs of each precision (the best counts), after one untimed run
/// (libtorch optimises a shape on its first runs).
const TIMED_RUNS: usize = 3;

/// fp32's and the lower precision's best time on the same batch of the
/// probes; `None` when either fails.
fn speed(fp32: &Torch, lower: &Torch, probes: &[ModelInput]) -> Option<precision::Speed> {
    if probes.is_empty() {
        return None;
    }
    let batch: Vec<&ModelInput> = probes.iter().cycle().take(TIMED_ROWS).collect();
    let best = |torch: &Torch| -> Option<f64> {
        torch.vectors(&batch).ok()?;
        (0..TIMED_RUNS)
            .map(|_| {
                let started = std::time::Instant::now();
                torch.vectors(&batch).ok().map(|_| started.elapsed().as_secs_f64())
            })
            .collect::<Option<Vec<f64>>>()?
            .into_iter()
            .reduce(f64::min)
    };
    Some(precision::Speed { fp32_s: best(fp32)?, lower_s: best(lower)? })
}

/// Runs real inputs of several lengths through the fp32 module before
/// anything else: a module that refuses the inputs the config declares, or
/// answers in a shape its task cannot read, is refused with the key to change.
fn check_signature(torch: &Torch, answer: &Answer, probes: &[ModelInput]) -> Result<(), EngineError> {
    let rows: Vec<&ModelInput> = probes.iter().take(3).collect();
    let vectors = torch.vectors(&rows).map_err(|e| match e {
        EngineError::Forward(e) => EngineError::Signature {
            key: torch.inputs_key(),
            problem: format!(
                "the module refused its inputs as declared: {}",
                e.to_string().lines().next().unwrap_or_default()
            ),
        },
        other => other,
    })?;
    match (answer, vectors.first()) {
        (Answer::Classes { labels, .. }, Some(vector)) if vector.len() != labels.len() => {
            Err(labels_mismatch(labels.len(), vector.len()))
        }
        (Answer::Ranked, Some(vector)) if vector.len() != 1 => Err(not_one_score(vector.len())),
        _ => Ok(()),
    }
}
