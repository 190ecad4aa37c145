//! Image benchmarks.
//!
//! `image-decode`: camera-like 8K and 5K JPEGs to the model's 224 px input,
//! shrink-on-load (DCT-domain 1/8 decode, then crop) against full-size
//! decodes capped at 2048 px and then cropped, in one run. Time per image
//! and the peak resident memory each decode adds. Resident memory, not a
//! counting allocator: libjpeg-turbo allocates through C's malloc, which a
//! Rust global allocator never sees.
//!
//! `image-burst`: many 8K JPEG requests sent at once to a running worker;
//! its peak RSS (VmHWM, the kernel's high-water mark) once every answer is in.

use crate::common::machine;
use anyhow::{bail, Context, Result};
use clap::Args;
use fleet_image::{decode, fit_within, model_input, probe, synthetic, Format, ImageLimits, InputGeometry, RgbImage};
use futures::StreamExt;
use std::io::Cursor;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct ImageDecodeArgs {
    /// Distinct photos per size.
    #[arg(long, default_value_t = 3)]
    photos: usize,
    /// Passes over the photos per path.
    #[arg(long, default_value_t = 2)]
    repeats: usize,
}

#[derive(Args)]
pub struct ImageBurstArgs {
    #[arg(long, default_value = "127.0.0.1:9092")]
    brokers: String,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// The image model's worker process, whose memory is measured.
    #[arg(long)]
    worker_pid: u32,
    #[arg(long, default_value_t = 300)]
    count: usize,
    /// Distinct photos cycled through the burst.
    #[arg(long, default_value_t = 6)]
    distinct: usize,
}

/// The model a burst is sent to.
const BURST_MODEL: &str = "efficientnet_lite0";

const GEOMETRY: InputGeometry = InputGeometry { resize_shorter: 256, crop: 224 };
const GATEWAY_CAP: u32 = 2048;

pub fn camera_jpeg(width: u32, height: u32, seed: u64) -> Vec<u8> {
    let photo = synthetic::photo(width, height, seed);
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 90)
        .encode(&photo.pixels, width, height, image::ExtendedColorType::Rgb8)
        .expect("encoding a synthetic photo");
    out
}

struct Path {
    name: &'static str,
    run: fn(&[u8]) -> Result<Vec<u8>>,
}

/// What the worker does: header, DCT-scaled decode (libjpeg-turbo), one
/// resize to the crop.
fn shrink_on_load(bytes: &[u8]) -> Result<Vec<u8>> {
    let header = probe(bytes, Some(Format::Jpeg), &ImageLimits::default())?;
    let image = decode(bytes, &header, GEOMETRY.resize_shorter)?;
    Ok(model_input(&image, GEOMETRY)?)
}

/// The candidate not chosen: the same DCT scaling in pure Rust.
fn shrink_on_load_jpeg_decoder(bytes: &[u8]) -> Result<Vec<u8>> {
    let header = probe(bytes, Some(Format::Jpeg), &ImageLimits::default())?;
    let (width, height) = header.decoded_size(GEOMETRY.resize_shorter);
    let image = jpeg_decoder_rgb(bytes, (width as u16, height as u16))?;
    Ok(model_input(&image, GEOMETRY)?)
}

/// The seed's fix: decode everything (the image crate, zune-jpeg), cap at
/// 2048 px, then the model input.
fn full_image_crate(bytes: &[u8]) -> Result<Vec<u8>> {
    let full = image::load_from_memory_with_format(bytes, image::ImageFormat::Jpeg)?.into_rgb8();
    let full = RgbImage { width: full.width(), height: full.height(), pixels: full.into_raw() };
    Ok(model_input(&fit_within(&full, GATEWAY_CAP)?, GEOMETRY)?)
}

/// libjpeg-turbo at full scale: separates the decoder's speed from the
/// scaling's.
fn full_libjpeg_turbo(bytes: &[u8]) -> Result<Vec<u8>> {
    let header = probe(bytes, Some(Format::Jpeg), &ImageLimits::default())?;
    let full = decode(bytes, &header, u32::MAX)?;
    Ok(model_input(&fit_within(&full, GATEWAY_CAP)?, GEOMETRY)?)
}

fn full_jpeg_decoder(bytes: &[u8]) -> Result<Vec<u8>> {
    let full = jpeg_decoder_rgb(bytes, (u16::MAX, u16::MAX))?;
    Ok(model_input(&fit_within(&full, GATEWAY_CAP)?, GEOMETRY)?)
}

/// jpeg-decoder at the smallest DCT scale that reaches `request`.
fn jpeg_decoder_rgb(bytes: &[u8], request: (u16, u16)) -> Result<RgbImage> {
    let mut decoder = jpeg_decoder::Decoder::new(Cursor::new(bytes));
    let (width, height) = decoder.scale(request.0, request.1)?;
    let pixels = decoder.decode()?;
    if pixels.len() != usize::from(width) * usize::from(height) * 3 {
        bail!("jpeg-decoder: not an RGB image");
    }
    Ok(RgbImage { width: u32::from(width), height: u32::from(height), pixels })
}

/// The path the RESULT line compares the worker against: what a Rust
/// service decoding with the `image` crate does.
const BASELINE: &str = "full decode: image crate (zune-jpeg)";
const WORKER: &str = "shrink-on-load: libjpeg-turbo (worker)";

const PATHS: [Path; 5] = [
    Path { name: WORKER, run: shrink_on_load },
    Path { name: "shrink-on-load: jpeg-decoder", run: shrink_on_load_jpeg_decoder },
    Path { name: "full decode: libjpeg-turbo", run: full_libjpeg_turbo },
    Path { name: BASELINE, run: full_image_crate },
    Path { name: "full decode: jpeg-decoder", run: full_jpeg_decoder },
];

struct Row {
    name: &'static str,
    ms_per_image: f64,
    peak_mib: f64,
}

fn status_kib_self(field: &str) -> Result<u64> {
    status_kib(std::process::id(), field)
}

/// Runs `call` and returns what it added to the resident set at its peak.
/// Freed heap is handed back to the kernel first (malloc_trim) and the
/// high-water mark reset (clear_refs 5), so each call's peak is its own.
fn peak_rss_added<T>(call: impl FnOnce() -> T) -> Result<(T, u64)> {
    // SAFETY: malloc_trim only returns free heap pages to the kernel.
    unsafe { libc::malloc_trim(0) };
    std::fs::write("/proc/self/clear_refs", "5").context("resetting VmHWM")?;
    let before = status_kib_self("VmRSS:")?;
    let out = call();
    let peak = status_kib_self("VmHWM:")?;
    Ok((out, peak.saturating_sub(before) * 1024))
}

fn measure(path: &Path, photos: &[Vec<u8>], repeats: usize) -> Result<Row> {
    (path.run)(&photos[0])?; // warm caches and the resizer's buffers
    let (mut peak, mut busy) = (0u64, Duration::ZERO);
    for _ in 0..repeats {
        for photo in photos {
            let ((input, took), added) = peak_rss_added(|| {
                let started = Instant::now();
                let input = (path.run)(photo);
                (input, started.elapsed())
            })?;
            let input = input?;
            busy += took;
            peak = peak.max(added);
            if input.len() != 224 * 224 * 3 {
                bail!("{} produced {} bytes", path.name, input.len());
            }
        }
    }
    let per_image = busy.as_secs_f64() * 1000.0 / (repeats * photos.len()) as f64;
    Ok(Row { name: path.name, ms_per_image: per_image, peak_mib: peak as f64 / (1024.0 * 1024.0) })
}

pub fn run_decode(args: &ImageDecodeArgs) -> Result<()> {
    println!("machine: {}", machine());
    let (photos_per_size, repeats) = (args.photos, args.repeats);
    // Allocations above 64 KiB get their own mapping and go back to the
    // kernel when freed (glibc would otherwise raise this threshold as it
    // goes), so resident memory follows what each decode really holds.
    // SAFETY: mallopt only changes allocator tuning.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 64 * 1024) };
    println!("image decode: camera-like JPEGs (synthetic::photo, quality 90) to a 224x224 model input");
    println!("peak = resident memory a decode adds (VmHWM after − VmRSS before), C and Rust heaps alike");
    println!("{:<42} {:>6} {:>11} {:>12}", "path", "size", "ms/image", "peak MiB");
    let mut eight_k = Vec::new();
    for (label, width, height) in [("8K", 7680, 4320), ("5K", 5120, 2880)] {
        let photos: Vec<Vec<u8>> = (0..photos_per_size as u64).map(|s| camera_jpeg(width, height, 100 + s)).collect();
        let mean_kb = photos.iter().map(Vec::len).sum::<usize>() as f64 / photos.len() as f64 / 1024.0;
        println!("-- {label} {width}x{height}: {} photos, {mean_kb:.0} KiB each on average", photos.len());
        for path in &PATHS {
            let row = measure(path, &photos, repeats)?;
            println!("{:<42} {:>6} {:>11.1} {:>12.1}", path.name, label, row.ms_per_image, row.peak_mib);
            if label == "8K" {
                eight_k.push(row);
            }
        }
    }
    let find = |name: &str| eight_k.iter().find(|r| r.name == name).context("a path is missing");
    let (worker, baseline) = (find(WORKER)?, find(BASELINE)?);
    let fastest_full = eight_k
        .iter()
        .filter(|r| r.name.starts_with("full decode"))
        .min_by(|a, b| a.ms_per_image.total_cmp(&b.ms_per_image))
        .context("no full-decode path")?;
    println!(
        "8K, worker vs the fastest full decode ({}): {:.1}x faster, {:.1}x less memory",
        fastest_full.name,
        fastest_full.ms_per_image / worker.ms_per_image,
        fastest_full.peak_mib / worker.peak_mib
    );
    println!(
        "RESULT image_decode speedup={:.1} memory_ratio={:.1}",
        baseline.ms_per_image / worker.ms_per_image,
        baseline.peak_mib / worker.peak_mib
    );
    Ok(())
}

fn status_kib(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading the worker's status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.trim().strip_suffix("kB")?.trim().parse().ok())
        .with_context(|| format!("{field} not in /proc/{pid}/status"))
}

pub fn run_burst(args: &ImageBurstArgs) -> Result<()> {
    println!("machine: {}", machine());
    tokio::runtime::Runtime::new()?.block_on(burst(args, fleet_proto::ModelName::parse(BURST_MODEL)?))
}

async fn burst(args: &ImageBurstArgs, model: fleet_proto::ModelName) -> Result<()> {
    use fleet_producer::{FleetProducer, KafkaConfig, Request, ResultClient};
    use fleet_proto::{ContentType, RequestId};
    let photos: Vec<Vec<u8>> = (0..args.distinct as u64).map(|s| camera_jpeg(7680, 4320, 200 + s)).collect();
    let rss_before = status_kib(args.worker_pid, "VmRSS:")?;
    let producer = FleetProducer::new(&KafkaConfig::new(&args.brokers), "image-burst")?;
    let run = std::process::id();
    let ids: Vec<RequestId> =
        (0..args.count).map(|i| RequestId::parse(&format!("burst-{run}-{i}")).expect("valid id")).collect();
    let started = Instant::now();
    let mut deliveries = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let request = Request::image(id.clone(), ContentType::Jpeg, photos[i % photos.len()].clone());
        deliveries.push(producer.send(&model, &request).await?);
    }
    for delivered in futures::future::join_all(deliveries).await {
        delivered?;
    }
    println!(
        "sent {} 8K JPEGs ({} distinct, {:.1} MB each) in {:.2?}",
        args.count,
        photos.len(),
        photos[0].len() as f64 / 1e6,
        started.elapsed()
    );

    let results = ResultClient::connect(&args.redis).await?;
    let models = [model.clone()];
    // All waits at once: an answer lives result_ttl_s (30 s), so waiting for
    // one id after another could look for an early answer after it expired.
    let outcomes: Vec<_> = futures::stream::iter(&ids)
        .map(|id| results.wait(id, &models, Duration::from_secs(120)))
        .buffer_unordered(64)
        .collect()
        .await;
    let mut counts = std::collections::BTreeMap::new();
    for answers in outcomes {
        let answers = answers?;
        let answer = &answers[model.as_str()];
        let key = match &answer.error {
            Some(e) => format!("{}:{}", answer.status.as_str(), e.code.as_str()),
            None => answer.status.as_str().to_owned(),
        };
        *counts.entry(key).or_insert(0usize) += 1;
    }
    let elapsed = started.elapsed();
    let hwm = status_kib(args.worker_pid, "VmHWM:")?;
    let answered: usize = counts.values().sum();
    println!("answers in {elapsed:.2?}: {counts:?}");
    println!("worker RSS before {:.0} MiB, peak (VmHWM) {:.0} MiB", rss_before as f64 / 1024.0, hwm as f64 / 1024.0);
    println!("RESULT image_burst peak_rss_mib={:.0} answered={answered}/{}", hwm as f64 / 1024.0, args.count);
    Ok(())
}
