//! `fleet-bench precision`: a lower precision (bf16 by default) against
//! fp32, in one process, rounds interleaved so that whatever else the
//! machine does hits both alike. Both models:
//!
//! - MiniLM: batches of 32 rows × 64 tokens cut from the demo's real
//!   sentences; sentences per second and the smallest cosine of a row's
//!   embedding to its fp32 embedding;
//! - EfficientNet-Lite0: batches of 8 of the version's reference photos;
//!   images per second, whether every photo keeps its top-1 class, and the
//!   largest move of a top-5 probability.
//!
//! Prints `RESULT precision model=<m> speedup=<lower/fp32> …` per model.

use crate::common::{machine, BenchPrecision, Common};
use anyhow::{Context, Result};
use clap::Args;
use fleet_worker::stages::admission::tokenize::TextTokenizer;
use fleet_worker::stages::engine::precision_choice::{classes_agreement, min_cosine, top_class, Agreement};
use fleet_worker::stages::engine::torch::{ImageModule, TextModule};
use fleet_worker::versions::repository;
use std::path::{Path, PathBuf};
use std::time::Instant;

const TEXT_ROWS: usize = 32;
const TEXT_LEN: usize = 64;
const TEXT_BATCHES: usize = 2;
const IMAGE_ROWS: usize = 8;

#[derive(Args)]
pub struct PrecisionCommand {
    /// Timed rounds of each precision, interleaved.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
}

pub fn run(common: &Common, args: &PrecisionCommand) -> Result<()> {
    common.set_threads();
    // The flag's fp32 default means "compare bf16" here.
    let lower = match common.precision {
        BenchPrecision::Fp32 | BenchPrecision::Bf16 => BenchPrecision::Bf16,
        BenchPrecision::Fp16 => BenchPrecision::Fp16,
    };
    println!("machine: {}", machine());
    println!("intra-op threads {}", common.threads);
    compare(&PrecisionArgs {
        repo: &common.model_repo,
        corpus: &args.corpus,
        lower: lower.kind(),
        lower_name: &lower.name(),
        rounds: args.rounds,
    })
}

struct PrecisionArgs<'a> {
    repo: &'a Path,
    corpus: &'a Path,
    lower: tch::Kind,
    lower_name: &'a str,
    rounds: usize,
}

fn compare(args: &PrecisionArgs<'_>) -> Result<()> {
    text(args)?;
    image(args)
}

fn text(args: &PrecisionArgs<'_>) -> Result<()> {
    let version = repository::resolve(args.repo, &fleet_proto::ModelName::parse("minilm")?)?;
    let max_seq_len = version.config.text().context("minilm is a text model")?.max_seq_len;
    let tokenizer = TextTokenizer::load(&version.file("tokenizer.json"), max_seq_len, true)?;
    let corpus = std::fs::read_to_string(args.corpus).with_context(|| args.corpus.display().to_string())?;
    let mut stream = Vec::new();
    for line in corpus.lines().filter(|l| !l.trim().is_empty()) {
        let ids = tokenizer.tokenize(line)?.ids;
        stream.extend_from_slice(&ids[1..ids.len().saturating_sub(1)]);
    }
    let (cls, sep) = (101, 102);
    let rows: Vec<Vec<i64>> = stream
        .chunks(TEXT_LEN - 2)
        .take(TEXT_ROWS * TEXT_BATCHES)
        .map(|body| [&[cls][..], body, &[sep][..]].concat())
        .filter(|row| row.len() == TEXT_LEN)
        .collect();
    anyhow::ensure!(rows.len() == TEXT_ROWS * TEXT_BATCHES, "the corpus is too short for {} rows", rows.len());
    let batches: Vec<Vec<&[i64]>> = rows.chunks(TEXT_ROWS).map(|b| b.iter().map(Vec::as_slice).collect()).collect();
    let fp32 = TextModule::for_version(&version, tch::Device::Cpu)?;
    let mut lower = TextModule::for_version(&version, tch::Device::Cpu)?;
    lower.convert(args.lower)?;
    let (mut reference, mut lowered) = (Vec::new(), Vec::new());
    for batch in &batches {
        reference.extend(fp32.vectors(batch)?);
        lowered.extend(lower.vectors(batch)?);
    }
    let cosine = min_cosine(&reference, &lowered);
    let (fp32_s, lower_s) = interleaved(args.rounds, |which| {
        for batch in &batches {
            if which {
                lower.vectors(batch)?
            } else {
                fp32.vectors(batch)?
            };
        }
        Ok(())
    })?;
    let sentences = (args.rounds * rows.len()) as f64;
    println!(
        "minilm, batches of {TEXT_ROWS} x {TEXT_LEN} tokens, {} rounds: fp32 {:.1} sentences/s, {} {:.1} sentences/s",
        args.rounds,
        sentences / fp32_s,
        args.lower_name,
        sentences / lower_s
    );
    println!(
        "RESULT precision model=minilm precision={} speedup={:.2} min_cosine={cosine:.5}",
        args.lower_name,
        fp32_s / lower_s
    );
    Ok(())
}

fn image(args: &PrecisionArgs<'_>) -> Result<()> {
    let version = repository::resolve(args.repo, &fleet_proto::ModelName::parse("efficientnet_lite0")?)?;
    let size = version.config.image().context("efficientnet_lite0 is an image model")?.size;
    let expected = (size as usize).pow(2) * 3;
    let mut photos: Vec<_> = std::fs::read_dir(version.file("reference"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "rgb"))
        .collect();
    photos.sort();
    let pixels: Vec<Vec<u8>> = photos
        .iter()
        .map(std::fs::read)
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|p| p.len() == expected)
        .collect();
    anyhow::ensure!(!pixels.is_empty(), "no reference photos of {size}x{size} in {}", version.dir.display());
    let load = || ImageModule::for_version(&version, tch::Device::Cpu);
    let fp32 = load()?;
    let mut lower = load()?;
    lower.convert(args.lower)?;
    let photo_refs: Vec<&[u8]> = pixels.iter().map(Vec::as_slice).collect();
    let reference = fp32.vectors(&photo_refs)?;
    let lowered = match lower.vectors(&photo_refs) {
        Ok(lowered) => lowered,
        Err(e) => {
            println!("efficientnet_lite0 does not run in {}: {e}", args.lower_name);
            println!("RESULT precision model=efficientnet_lite0 precision={} speedup=none", args.lower_name);
            return Ok(());
        }
    };
    let agreement = match classes_agreement(&reference, &lowered) {
        Agreement::Agrees(how) | Agreement::Differs(how) | Agreement::Fails(how) => how,
    };
    let top1 = reference.iter().zip(&lowered).filter(|(a, b)| top_class(a) == top_class(b)).count() as f64
        / reference.len() as f64;
    let batch: Vec<&[u8]> = photo_refs.iter().cycle().take(IMAGE_ROWS).copied().collect();
    fp32.vectors(&batch)?;
    lower.vectors(&batch)?;
    let (fp32_s, lower_s) = interleaved(args.rounds, |which| {
        if which {
            lower.vectors(&batch)?
        } else {
            fp32.vectors(&batch)?
        };
        Ok(())
    })?;
    let images = (args.rounds * IMAGE_ROWS) as f64;
    println!(
        "efficientnet_lite0, batches of {IMAGE_ROWS} photos, {} rounds: fp32 {:.1} images/s, {} {:.1} images/s; {agreement}",
        args.rounds,
        images / fp32_s,
        args.lower_name,
        images / lower_s
    );
    println!(
        "RESULT precision model=efficientnet_lite0 precision={} speedup={:.2} top1_agreement={top1:.2}",
        args.lower_name,
        fp32_s / lower_s
    );
    Ok(())
}

/// Seconds spent in fp32 and in the lower precision, `rounds` of each,
/// alternating (`work(true)` runs the lower one).
fn interleaved(rounds: usize, mut work: impl FnMut(bool) -> Result<()>) -> Result<(f64, f64)> {
    // Untimed: libtorch's profiling executor optimises a graph only after
    // its first runs of a shape.
    for _ in 0..3 {
        work(false)?;
        work(true)?;
    }
    let (mut fp32, mut lower) = (0.0, 0.0);
    for _ in 0..rounds {
        for which in [false, true] {
            let started = Instant::now();
            work(which)?;
            let seconds = started.elapsed().as_secs_f64();
            if which {
                lower += seconds;
            } else {
                fp32 += seconds;
            }
        }
    }
    Ok((fp32, lower))
}
