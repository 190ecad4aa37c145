//! The worker's text engine as `batching`, `raw` and `redis` run it: the
//! model's version, its tokenizer and its module on the chosen device and
//! precision, loaded and described the same way for each, with the
//! device's memory reported after a GPU run.

use crate::common::{machine, BenchPrecision, Common};
use anyhow::{Context, Result};
use fleet_worker::config::ModelVersion;
use fleet_worker::stages::admission::tokenize::TextTokenizer;
use fleet_worker::stages::engine::torch::TextModule;
use fleet_worker::versions::repository;
use std::path::Path;

pub struct TextEngine {
    pub version: ModelVersion,
    pub tokenizer: TextTokenizer,
    pub module: TextModule,
    pub max_seq_len: usize,
}

/// Loads the text engine `common` names, prints the machine and the model,
/// runs `bench` on it, then on a GPU prints the device's memory in use.
pub fn run_with(common: &Common, bench: impl FnOnce(&TextEngine) -> Result<()>) -> Result<()> {
    common.set_threads();
    let version = repository::resolve(&common.model_repo, &common.model)?;
    let text = version.config.text().cloned().context("a text model is needed")?;
    let tokenizer = TextTokenizer::load(&version.file("tokenizer.json"), text.max_seq_len, true)?;
    let device = fleet_worker::stages::engine::torch::choose_device(common.device)?;
    let mut module = TextModule::for_version(&version, device)?;
    if common.precision != BenchPrecision::Fp32 {
        module.convert(common.precision.kind())?;
    }
    println!("machine: {}", machine());
    println!(
        "model: {} version {}, device {device:?} {}, intra-op threads {}",
        version.name,
        version.version,
        common.precision.name(),
        common.threads
    );
    let engine = TextEngine { version, tokenizer, module, max_seq_len: text.max_seq_len };
    let outcome = bench(&engine);
    if let tch::Device::Cuda(index) = device {
        match fleet_worker::stages::engine::memory::device_memory(index as u32) {
            Ok((total, used)) => println!("device memory: {} of {} MiB in use", used >> 20, total >> 20),
            Err(e) => println!("device memory: unknown ({e})"),
        }
    }
    outcome
}

impl TextEngine {
    /// Each text's token ids, as the worker's tokenizer gives them.
    pub fn tokenize_all(&self, texts: &[String]) -> Result<Vec<Vec<i64>>> {
        texts.iter().map(|t| Ok(self.tokenizer.tokenize(t)?.ids)).collect()
    }
}

/// The lines of a file of texts that are not blank.
pub fn read_lines(path: &Path) -> Result<Vec<String>> {
    let body = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(body.lines().filter(|l| !l.trim().is_empty()).map(str::to_owned).collect())
}
