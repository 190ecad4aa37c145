//! What a benchmark of the text model alone (`flops`, `shapes`) runs on:
//! the model in the benchmark's precision on the CPU, the batching limits
//! of its version, and batches of real token ids cut to any shape from a
//! corpus. Shared so both benchmarks measure the same batches.

use crate::common::{machine, Common};
use anyhow::{Context, Result};
use fleet_worker::config::BucketLimits;
use fleet_worker::config::ModelVersion;
use fleet_worker::stages::admission::tokenize::TextTokenizer;
use fleet_worker::stages::engine::torch::TextModule;
use fleet_worker::versions::repository;
use std::path::Path;
use tch::{Device, Kind};

/// What a benchmark of the text model alone runs on (`flops`, `shapes`).
pub struct TextBenchArgs<'a> {
    pub repo: &'a Path,
    pub model: &'a fleet_proto::ModelName,
    pub corpus: &'a Path,
    pub kind: Kind,
    pub precision: String,
    pub threads: i32,
}

impl<'a> TextBenchArgs<'a> {
    /// Sets libtorch's threads and names the machine (the benchmark's
    /// first line), then the benchmark's settings.
    pub fn start(common: &'a Common, corpus: &'a Path) -> Self {
        common.set_threads();
        println!("machine: {}", machine());
        Self {
            repo: &common.model_repo,
            model: &common.model,
            corpus,
            kind: common.precision.kind(),
            precision: common.precision.name(),
            threads: common.threads,
        }
    }
}

/// The text model in the benchmark's precision, on the CPU, with the
/// corpus its batches are cut from and the version's batching limits.
pub(crate) struct TextBench {
    pub version: ModelVersion,
    pub module: TextModule,
    pub corpus: Corpus,
    pub limits: BucketLimits,
    pub max_seq_len: usize,
}

impl TextBench {
    pub(crate) fn load(args: &TextBenchArgs<'_>) -> Result<Self> {
        let version = repository::resolve(args.repo, args.model)?;
        let max_seq_len = version.config.text().context("a text model is needed")?.max_seq_len;
        let tokenizer = TextTokenizer::load(&version.file("tokenizer.json"), max_seq_len, true)?;
        let mut module = TextModule::for_version(&version, Device::Cpu)?;
        if args.kind != Kind::Float {
            module.convert(args.kind)?;
        }
        let corpus = Corpus::read(&tokenizer, args.corpus)?;
        let limits = version.config.batching.limits(max_seq_len);
        Ok(Self { version, module, corpus, limits, max_seq_len })
    }
}

/// The corpus' sentences as one stream of token ids without their special
/// tokens, and the [CLS] and [SEP] ids the tokenizer puts around a text
/// (read from its output, not assumed).
pub(crate) struct Corpus {
    stream: Vec<i64>,
    cls: i64,
    sep: i64,
}

impl Corpus {
    pub(crate) fn read(tokenizer: &TextTokenizer, path: &Path) -> Result<Self> {
        let body = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let mut stream = Vec::new();
        let mut ends = None;
        for line in body.lines().filter(|l| !l.trim().is_empty()) {
            let ids = tokenizer.tokenize(line)?.ids;
            if ids.len() < 3 {
                continue;
            }
            ends = ends.or(Some((ids[0], ids[ids.len() - 1])));
            stream.extend_from_slice(&ids[1..ids.len() - 1]);
        }
        let (cls, sep) = ends.with_context(|| format!("{} has no sentences", path.display()))?;
        Ok(Self { stream, cls, sep })
    }
}

/// `count` rows of exactly `len` ids: [CLS], the next window of the
/// corpus' stream (from the start again when it runs out), [SEP]. Real
/// text in every row, none padded.
pub(crate) fn token_rows(corpus: &Corpus, len: usize, count: usize) -> Vec<Vec<i64>> {
    let body = len.saturating_sub(2);
    (0..count)
        .map(|row| {
            let mut ids = Vec::with_capacity(len);
            ids.push(corpus.cls);
            ids.extend(corpus.stream.iter().cycle().skip(row * body).take(body));
            ids.push(corpus.sep);
            ids
        })
        .collect()
}

/// The most rows of `len` tokens one batch may hold under the batching
/// limits; 1 where even one row is over them (the worker lets a single
/// request through alone).
pub(crate) fn max_rows(limits: &BucketLimits, len: usize) -> usize {
    let len = len.max(1);
    let bound = limits
        .max_batch_size
        .min(limits.max_batch_tokens / len)
        .min(limits.max_attention_cells / len.saturating_mul(len));
    (1..=bound).rev().find(|&rows| limits.fits(rows, len)).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_real_ids_between_cls_and_sep() {
        let corpus = Corpus { stream: vec![5, 6, 7], cls: 101, sep: 102 };
        let rows = token_rows(&corpus, 5, 2);
        assert_eq!(rows, vec![vec![101, 5, 6, 7, 102], vec![101, 5, 6, 7, 102]]);
        let rows = token_rows(&corpus, 4, 2);
        assert_eq!(rows, vec![vec![101, 5, 6, 102], vec![101, 7, 5, 102]]);
    }

    #[test]
    fn the_most_rows_follow_every_batching_budget() {
        let limits = BucketLimits {
            boundaries: vec![512],
            max_batch_size: 32,
            max_batch_tokens: 2048,
            max_attention_cells: 262_144,
            max_wait_ms: vec![5],
        };
        assert_eq!(max_rows(&limits, 16), 32);
        assert_eq!(max_rows(&limits, 128), 16);
        assert_eq!(max_rows(&limits, 256), 4);
        assert_eq!(max_rows(&limits, 512), 1);
        assert_eq!(max_rows(&limits, 1024), 1);
    }
}
