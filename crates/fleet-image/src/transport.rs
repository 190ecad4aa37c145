//! The gateway-side cap: shrink an upload before it goes to Kafka, so the
//! broker, the network and every worker carry a 2048 px JPEG instead of the
//! camera's 8K original.

use crate::decode::{decode, RgbImage};
use crate::error::ImageError;
use crate::format::Format;
use crate::probe::{probe, ImageLimits};
use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};

/// When the image's longer side exceeds `max_side`: the image shrunk to fit
/// `max_side`, orientation applied, as a JPEG of `quality` (1–100). `None`
/// when it already fits (send the original bytes unchanged).
pub fn shrink_for_transport(
    bytes: &[u8],
    declared: Option<Format>,
    limits: &ImageLimits,
    max_side: u32,
    quality: u8,
) -> Result<Option<Vec<u8>>, ImageError> {
    let header = probe(bytes, declared, limits)?;
    let (long, short) = (header.width.max(header.height), header.width.min(header.height));
    if long <= max_side {
        return Ok(None);
    }
    // Decode just large enough that the longer side still reaches max_side.
    let min_side = (u64::from(max_side) * u64::from(short)).div_ceil(u64::from(long)) as u32;
    let decoded = decode(bytes, &header, min_side.max(1))?;
    let fitted = fit_within(&decoded, max_side)?;
    let mut out = Vec::new();
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, quality.clamp(1, 100))
        .encode(&fitted.pixels, fitted.width, fitted.height, image::ExtendedColorType::Rgb8)
        .map_err(|e| ImageError::malformed(format!("re-encoding: {e}")))?;
    Ok(Some(out))
}

/// `image` resized (Catmull-Rom) so its longer side is at most `max_side`.
pub fn fit_within(image: &RgbImage, max_side: u32) -> Result<RgbImage, ImageError> {
    let long = image.width.max(image.height);
    if long <= max_side {
        return Ok(image.clone());
    }
    let scale = |len: u32| ((u64::from(len) * u64::from(max_side) + u64::from(long) / 2) / u64::from(long)).max(1);
    let (width, height) = (scale(image.width) as u32, scale(image.height) as u32);
    let source = ImageRef::new(image.width, image.height, &image.pixels, PixelType::U8x3)
        .map_err(|e| ImageError::malformed(format!("pixel buffer: {e}")))?;
    let mut target = Image::new(width, height, PixelType::U8x3);
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::CatmullRom));
    Resizer::new().resize(&source, &mut target, &options).map_err(|e| ImageError::malformed(format!("resize: {e}")))?;
    Ok(RgbImage { width, height, pixels: target.into_vec() })
}
