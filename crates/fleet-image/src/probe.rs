//! Header first: what an image is and how big it will be, read without
//! decoding a pixel.

use crate::error::{guarded, ImageError};
use crate::format::Format;
use std::io::Cursor;

/// A model's (or a gateway's) limits on what it will decode.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageLimits {
    pub max_bytes: usize,
    /// Width × height as the header declares it.
    pub max_pixels: u64,
    pub formats: Vec<Format>,
}

impl Default for ImageLimits {
    fn default() -> Self {
        // 20 MB uploads; 8K (7680×4320 ≈ 33 Mpx) with room for 48 Mpx phone
        // cameras; beyond that is a bomb or a scan, not a photo.
        Self { max_bytes: 20_000_000, max_pixels: 50_000_000, formats: Format::ALL.to_vec() }
    }
}

/// What the header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub format: Format,
    pub width: u32,
    pub height: u32,
    /// Bytes per pixel of the decoder's native output (e.g. 8 for RGBA16).
    pub bytes_per_pixel: u8,
    /// Progressive JPEGs keep every DCT coefficient in memory while decoding.
    pub progressive: bool,
}

/// A side scaled by `eighths`/8, rounded up as libjpeg does (TJSCALED).
fn scaled(len: u32, eighths: u32) -> u32 {
    (u64::from(len) * u64::from(eighths)).div_ceil(8) as u32
}

/// Fixed allowance for decoder state beyond the pixel buffers.
const DECODER_OVERHEAD: u64 = 1 << 20;

impl Header {
    /// The DCT scale, in eighths (1, 2, 4 or 8), at which a JPEG is decoded
    /// so that its shorter side stays at least `min_side`: the smallest one
    /// that keeps it, or full size when even that is too small.
    pub fn dct_eighths(&self, min_side: u32) -> u32 {
        let short = self.width.min(self.height);
        [1, 2, 4].into_iter().find(|&eighths| scaled(short, eighths) >= min_side).unwrap_or(8)
    }

    /// The dimensions `decode(…, min_side)` produces before orientation.
    pub fn decoded_size(&self, min_side: u32) -> (u32, u32) {
        if self.format != Format::Jpeg {
            return (self.width, self.height);
        }
        let eighths = self.dct_eighths(min_side);
        (scaled(self.width, eighths), scaled(self.height, eighths))
    }

    /// An upper estimate of the bytes `decode(…, min_side)` holds at its
    /// peak: the decoder's planes, its output, the RGB copy, and for a
    /// progressive JPEG the full-size coefficients.
    pub fn decode_cost(&self, min_side: u32) -> u64 {
        let (w, h) = self.decoded_size(min_side);
        let out_pixels = u64::from(w) * u64::from(h);
        let native = u64::from(self.bytes_per_pixel);
        let mut cost = out_pixels * (native + 3) + DECODER_OVERHEAD;
        if self.format == Format::Jpeg {
            // Component planes next to the interleaved output.
            cost += out_pixels * native;
            if self.progressive {
                cost += u64::from(self.width) * u64::from(self.height) * native * 2;
            }
        }
        cost
    }
}

/// Reads the header and checks it against `limits`. `declared` is the
/// message's content type: when it disagrees with the bytes the image is
/// refused rather than guessed at.
pub fn probe(bytes: &[u8], declared: Option<Format>, limits: &ImageLimits) -> Result<Header, ImageError> {
    if bytes.is_empty() {
        return Err(ImageError::malformed("the body is empty"));
    }
    if bytes.len() > limits.max_bytes {
        return Err(ImageError::TooLarge(format!(
            "image is {} bytes, at most {} allowed",
            bytes.len(),
            limits.max_bytes
        )));
    }
    let Some(format) = Format::sniff(bytes) else {
        let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
        return Err(ImageError::Unsupported(format!("not a JPEG, PNG or WebP file (starts with {})", head.join(" "))));
    };
    if let Some(declared) = declared.filter(|&d| d != format) {
        return Err(ImageError::Unsupported(format!("content type says {}, the bytes are {format}", declared.mime())));
    }
    if !limits.formats.contains(&format) {
        return Err(ImageError::Unsupported(format!("{format} is not accepted by this model")));
    }
    let header = match format {
        Format::Jpeg => guarded("the JPEG decoder", || jpeg_header(bytes))?,
        Format::Png => guarded("the PNG decoder", || png_header(bytes))?,
        Format::WebP => guarded("the WebP decoder", || webp_header(bytes))?,
    };
    if header.width == 0 || header.height == 0 {
        return Err(ImageError::malformed("the header declares an empty canvas"));
    }
    let pixels = u64::from(header.width) * u64::from(header.height);
    if pixels > limits.max_pixels {
        return Err(ImageError::TooLarge(format!(
            "image is {}×{} ({pixels} pixels), at most {} allowed",
            header.width, header.height, limits.max_pixels
        )));
    }
    Ok(header)
}

fn jpeg_header(bytes: &[u8]) -> Result<Header, ImageError> {
    let mut decoder = jpeg_decoder::Decoder::new(Cursor::new(bytes));
    decoder.read_info().map_err(ImageError::malformed)?;
    let info = decoder.info().ok_or_else(|| ImageError::malformed("no JPEG frame header"))?;
    let bytes_per_pixel = match info.pixel_format {
        jpeg_decoder::PixelFormat::L8 => 1,
        jpeg_decoder::PixelFormat::RGB24 => 3,
        jpeg_decoder::PixelFormat::CMYK32 => 4,
        jpeg_decoder::PixelFormat::L16 => {
            return Err(ImageError::Unsupported("16-bit (lossless) JPEG is not served".into()));
        }
    };
    Ok(Header {
        format: Format::Jpeg,
        width: u32::from(info.width),
        height: u32::from(info.height),
        bytes_per_pixel,
        progressive: info.coding_process == jpeg_decoder::CodingProcess::DctProgressive,
    })
}

fn png_header(bytes: &[u8]) -> Result<Header, ImageError> {
    use image::ImageDecoder;
    // Limits only bound the header's own chunks here; the canvas is
    // checked against the model's limits by the caller.
    let decoder = image::codecs::png::PngDecoder::with_limits(Cursor::new(bytes), image::Limits::default())?;
    if decoder.is_apng()? {
        return Err(ImageError::Unsupported("animated PNG is not served; send one frame".into()));
    }
    let (width, height) = decoder.dimensions();
    Ok(Header {
        format: Format::Png,
        width,
        height,
        bytes_per_pixel: decoder.color_type().bytes_per_pixel(),
        progressive: false,
    })
}

fn webp_header(bytes: &[u8]) -> Result<Header, ImageError> {
    use image::ImageDecoder;
    let decoder = image::codecs::webp::WebPDecoder::new(Cursor::new(bytes))?;
    if decoder.has_animation() {
        return Err(ImageError::Unsupported("animated WebP is not served; send one frame".into()));
    }
    let (width, height) = decoder.dimensions();
    Ok(Header {
        format: Format::WebP,
        width,
        height,
        bytes_per_pixel: decoder.color_type().bytes_per_pixel(),
        progressive: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(format: Format, width: u32, height: u32) -> Header {
        Header { format, width, height, bytes_per_pixel: 3, progressive: false }
    }

    #[test]
    fn jpeg_shrinks_by_the_largest_dct_scale_that_keeps_the_target() {
        let eight_k = header(Format::Jpeg, 7680, 4320);
        assert_eq!(eight_k.decoded_size(256), (960, 540)); // 1/8: 540 ≥ 256
        assert_eq!(eight_k.decoded_size(2048), (3840, 2160)); // 1/2
        assert_eq!(eight_k.decoded_size(4320), (7680, 4320)); // full
        assert_eq!(header(Format::Jpeg, 300, 200).decoded_size(256), (300, 200));
        // Other formats always decode at full size.
        assert_eq!(header(Format::Png, 7680, 4320).decoded_size(256), (7680, 4320));
    }

    #[test]
    fn decode_cost_of_a_scaled_8k_jpeg_is_a_sixtieth_of_a_full_decode() {
        let eight_k = header(Format::Jpeg, 7680, 4320);
        let (scaled, full) = (eight_k.decode_cost(256), eight_k.decode_cost(u32::MAX));
        assert!(full > 60 * (scaled - DECODER_OVERHEAD), "{scaled} vs {full}");
        let progressive = Header { progressive: true, ..eight_k };
        assert!(progressive.decode_cost(256) > 7680 * 4320 * 6);
    }

    #[test]
    fn refuses_before_decoding() {
        let limits = ImageLimits { max_bytes: 10, ..ImageLimits::default() };
        assert!(matches!(probe(&[0xFF; 11], None, &limits), Err(ImageError::TooLarge(_))));
        let limits = ImageLimits::default();
        assert!(matches!(probe(b"", None, &limits), Err(ImageError::Malformed(_))));
        assert!(matches!(probe(b"GIF89a....", None, &limits), Err(ImageError::Unsupported(_))));
        let png_only = ImageLimits { formats: vec![Format::Png], ..ImageLimits::default() };
        assert!(matches!(probe(&[0xFF, 0xD8, 0xFF, 0xE0], None, &png_only), Err(ImageError::Unsupported(_))));
        let lying = probe(&[0xFF, 0xD8, 0xFF, 0xE0], Some(Format::Png), &limits).unwrap_err();
        assert_eq!(lying, ImageError::Unsupported("content type says image/png, the bytes are jpeg".into()));
    }
}
