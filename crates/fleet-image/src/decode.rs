//! Shrink-on-load decoding to 8-bit RGB, orientation applied.

use crate::error::{guarded, ImageError};
use crate::format::Format;
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
    let budget = header.decode_cost(min_side);
    let (image, orientation) = match header.format {
        Format::Jpeg => guarded("the JPEG decoder", || decode_jpeg(bytes, header, min_side, budget))?,
        Format::Png | Format::WebP => guarded("the image decoder", || decode_other(bytes, header, budget))?,
    };
    let mut image = image;
    image.apply_orientation(orientation);
    let rgb = image.into_rgb8();
    Ok(RgbImage { width: rgb.width(), height: rgb.height(), pixels: rgb.into_raw() })
}

fn decode_jpeg(
    bytes: &[u8],
    header: &Header,
    min_side: u32,
    budget: u64,
) -> Result<(DynamicImage, Orientation), ImageError> {
    let mut decoder = jpeg_decoder::Decoder::new(Cursor::new(bytes));
    decoder.set_max_decoding_buffer_size(usize::try_from(budget).unwrap_or(usize::MAX));
    let (want_w, want_h) = header.scale_request(min_side);
    let (width, height) = decoder.scale(want_w, want_h).map_err(ImageError::malformed)?;
    let pixels = decoder.decode().map_err(ImageError::malformed)?;
    let info = decoder.info().ok_or_else(|| ImageError::malformed("no JPEG frame header"))?;
    let (width, height) = (u32::from(width), u32::from(height));
    let rgb = match info.pixel_format {
        jpeg_decoder::PixelFormat::RGB24 => pixels,
        jpeg_decoder::PixelFormat::L8 => pixels.iter().flat_map(|&l| [l, l, l]).collect(),
        jpeg_decoder::PixelFormat::CMYK32 => cmyk_to_rgb(&pixels),
        jpeg_decoder::PixelFormat::L16 => {
            return Err(ImageError::Unsupported("16-bit (lossless) JPEG is not served".into()));
        }
    };
    let orientation = decoder.exif_data().and_then(Orientation::from_exif_chunk).unwrap_or(Orientation::NoTransforms);
    let image = image::RgbImage::from_raw(width, height, rgb)
        .ok_or_else(|| ImageError::malformed("the JPEG decoder returned a short buffer"))?;
    Ok((DynamicImage::ImageRgb8(image), orientation))
}

/// Adobe CMYK JPEGs store inverted components; this is the conversion the
/// `image` crate applies to them.
fn cmyk_to_rgb(cmyk: &[u8]) -> Vec<u8> {
    cmyk.chunks_exact(4)
        .flat_map(|p| {
            let k = 255 - u16::from(p[3]);
            [0, 1, 2].map(|i| ((255 - u16::from(p[i])) * k / 255) as u8)
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cmyk_white_and_black_convert_like_the_image_crate() {
        // Inverted storage: 0 = full ink.
        assert_eq!(cmyk_to_rgb(&[255, 255, 255, 255]), vec![0, 0, 0]);
        assert_eq!(cmyk_to_rgb(&[0, 0, 0, 0]), vec![255, 255, 255]);
        assert_eq!(cmyk_to_rgb(&[0, 255, 255, 0]), vec![255, 0, 0]);
    }
}
