//! Shrink-on-load decoding to 8-bit RGB, orientation applied.

use crate::error::{guarded, ImageError};
use crate::format::Format;
use crate::jpeg;
use crate::probe::Header;
use image::metadata::Orientation;
use image::{DynamicImage, ImageDecoder};
use std::io::Cursor;

/// Interleaved 8-bit RGB pixels.
#[derive(Clone, PartialEq, Eq)]
pub struct RgbImage {
    pub width: u32,
    pub height: u32,
    pub pixels: Vec<u8>,
}

impl std::fmt::Debug for RgbImage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RgbImage({}×{})", self.width, self.height)
    }
}

/// Decodes `bytes` (already probed into `header`) so that its shorter side
/// is at least `min_side`, or at full size when the image is smaller. JPEG
/// is scaled in the DCT domain; the result is at most about twice the target
/// on its shorter side. Allocation stays within `header.decode_cost(min_side)`.
pub fn decode(bytes: &[u8], header: &Header, min_side: u32) -> Result<RgbImage, ImageError> {
    let (image, orientation) = match header.format {
        Format::Jpeg => guarded("the JPEG decoder", || jpeg::decode(bytes, header, min_side))?,
        Format::Png | Format::WebP => {
            guarded("the image decoder", || decode_other(bytes, header, header.decode_cost(min_side)))?
        }
    };
    let mut image = image;
    image.apply_orientation(orientation);
    let rgb = image.into_rgb8();
    Ok(RgbImage { width: rgb.width(), height: rgb.height(), pixels: rgb.into_raw() })
}

fn decode_other(bytes: &[u8], header: &Header, budget: u64) -> Result<(DynamicImage, Orientation), ImageError> {
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(header.width);
    limits.max_image_height = Some(header.height);
    limits.max_alloc = Some(budget);
    let mut decoder: Box<dyn ImageDecoder> = match header.format {
        Format::Png => Box::new(image::codecs::png::PngDecoder::with_limits(Cursor::new(bytes), limits.clone())?),
        _ => Box::new(image::codecs::webp::WebPDecoder::new(Cursor::new(bytes))?),
    };
    decoder.set_limits(limits)?;
    if decoder.dimensions() != (header.width, header.height) {
        return Err(ImageError::malformed("the header changed between probe and decode"));
    }
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    Ok((DynamicImage::from_decoder(decoder)?, orientation))
}
