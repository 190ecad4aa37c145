//! JPEG pixels through libjpeg-turbo, shrunk on load.
//!
//! Why libjpeg-turbo (the `turbojpeg` crate, built from its vendored
//! source): its Huffman decoder is the fastest available, and at 1/8 scale
//! its IDCT reduces each 8×8 block to its DC term, so an 8K photo costs
//! little more than reading its entropy-coded data once. docs/benchmarks.md
//! measures it against jpeg-decoder's own DCT scaling and against full
//! decodes in one run.
//!
//! Damaged files: TurboJPEG turns every libjpeg warning (premature end,
//! extraneous bytes, a bad code it notices) into an error, so those are
//! `decode_failed`. Its fast Huffman path, though, decodes a code that
//! exists in no table as a zero without a warning and resynchronises, so
//! some corrupt streams would decode into a picture with a damaged band.
//! [`impossible_one_run`] catches the common form of that (erased-flash or
//! padding 0xFF runs inside the scan) before any pixel is decoded.

use crate::error::ImageError;
use crate::probe::Header;
use image::metadata::Orientation;
use image::DynamicImage;
use std::io::Cursor;

/// A real progressive JPEG has about ten scans. Each scan is one more pass
/// over every coefficient, so a file of thousands of tiny scans is a CPU
/// bomb: libjpeg-turbo stops past this many.
const MAX_PROGRESSIVE_SCANS: u32 = 64;

/// Decodes at the DCT scale `header.dct_eighths(min_side)` to RGB, with the
/// EXIF orientation still to apply.
pub(crate) fn decode(bytes: &[u8], header: &Header, min_side: u32) -> Result<(DynamicImage, Orientation), ImageError> {
    if !header.progressive && impossible_one_run(bytes) {
        return Err(ImageError::malformed("corrupt entropy-coded data (a run of 1-bits no Huffman code can make)"));
    }
    let mut decompressor = turbojpeg::Decompressor::new().map_err(ImageError::malformed)?;
    decompressor.set_scan_limit(MAX_PROGRESSIVE_SCANS).map_err(ImageError::malformed)?;
    let jpeg = decompressor.read_header(bytes).map_err(ImageError::malformed)?;
    if (jpeg.width, jpeg.height) != (header.width as usize, header.height as usize) {
        return Err(ImageError::malformed("the header changed between probe and decode"));
    }
    let factor = turbojpeg::ScalingFactor::new(header.dct_eighths(min_side) as usize, 8);
    decompressor.set_scaling_factor(factor).map_err(ImageError::malformed)?;
    let scaled = jpeg.scaled(factor);
    // CMYK and YCCK files decode only to CMYK; everything else (grey
    // included) straight to RGB.
    let cmyk = matches!(jpeg.colorspace, turbojpeg::Colorspace::CMYK | turbojpeg::Colorspace::YCCK);
    let format = if cmyk { turbojpeg::PixelFormat::CMYK } else { turbojpeg::PixelFormat::RGB };
    let pitch = scaled.width * format.size();
    let mut pixels = vec![0u8; pitch * scaled.height];
    let output =
        turbojpeg::Image { pixels: pixels.as_mut_slice(), width: scaled.width, pitch, height: scaled.height, format };
    decompressor.decompress(bytes, output).map_err(ImageError::malformed)?;
    let rgb = if cmyk { cmyk_to_rgb(&pixels) } else { pixels };
    let image = image::RgbImage::from_raw(scaled.width as u32, scaled.height as u32, rgb)
        .ok_or_else(|| ImageError::malformed("the JPEG decoder returned a short buffer"))?;
    Ok((DynamicImage::ImageRgb8(image), exif_orientation(bytes)))
}

/// The EXIF orientation, read from the markers before the first scan.
fn exif_orientation(bytes: &[u8]) -> Orientation {
    let mut markers = jpeg_decoder::Decoder::new(Cursor::new(bytes));
    match markers.read_info() {
        Ok(()) => markers.exif_data().and_then(Orientation::from_exif_chunk).unwrap_or(Orientation::NoTransforms),
        Err(_) => Orientation::NoTransforms,
    }
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

/// Stuffed 0xFF data bytes in a row (each `FF 00` in the file) that prove
/// corruption in a sequential (baseline) scan. No Huffman code is all
/// 1-bits (T.81 reserves them), so a run of ones can span at most a code's
/// tail (15), one magnitude field (11) and the next code's head (15): 41
/// bits. Six bytes are 48.
const IMPOSSIBLE_FF_RUN: usize = 6;

/// True when the first scan's entropy-coded data holds a run of 1-bits no
/// valid sequential stream can contain. One pass over the bytes, no
/// decoding. Progressive refinement scans carry raw correction bits and
/// may legally hold long runs: callers skip progressive files.
pub(crate) fn impossible_one_run(bytes: &[u8]) -> bool {
    let Some(data) = first_scan_data(bytes) else {
        return false; // structural problems are the decoder's to report
    };
    let mut run = 0;
    let mut i = 0;
    while i + 1 < data.len() {
        if data[i] != 0xFF {
            run = 0;
            i += 1;
            continue;
        }
        match data[i + 1] {
            0x00 => {
                run += 1;
                if run >= IMPOSSIBLE_FF_RUN {
                    return true;
                }
            }
            0xD0..=0xD7 => run = 0, // a restart marker resets the decoder
            _ => return false,      // the scan's end (or a marker the decoder will judge)
        }
        i += 2;
    }
    false
}

/// The bytes after the first SOS segment's header: the entropy-coded data
/// up to the end of the file.
fn first_scan_data(bytes: &[u8]) -> Option<&[u8]> {
    let mut at = 2; // after SOI
    while at + 4 <= bytes.len() {
        if bytes[at] != 0xFF {
            return None;
        }
        let marker = bytes[at + 1];
        if marker == 0xFF {
            at += 1; // fill byte
            continue;
        }
        let length = usize::from(u16::from_be_bytes([bytes[at + 2], bytes[at + 3]]));
        let body_end = at + 2 + length;
        if marker == 0xDA {
            return bytes.get(body_end..);
        }
        at = body_end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SOI, an APP0 of 2 bytes, SOS with a 2-byte header, then `data`.
    fn with_scan(data: &[u8]) -> Vec<u8> {
        let mut file = vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0xAA, 0xBB, 0xFF, 0xDA, 0x00, 0x04, 0x01, 0x02];
        file.extend_from_slice(data);
        file.extend_from_slice(&[0xFF, 0xD9]);
        file
    }

    #[test]
    fn six_stuffed_ff_bytes_in_a_row_are_corrupt_five_are_not() {
        let six: Vec<u8> = [0x12].into_iter().chain([0xFF, 0x00].repeat(6)).chain([0x34]).collect();
        assert!(impossible_one_run(&with_scan(&six)));
        let five: Vec<u8> = [0x12].into_iter().chain([0xFF, 0x00].repeat(5)).chain([0x34]).collect();
        assert!(!impossible_one_run(&with_scan(&five)));
    }

    #[test]
    fn a_restart_marker_or_other_bytes_break_the_run() {
        let mut split = [0xFF, 0x00].repeat(3);
        split.extend_from_slice(&[0xFF, 0xD3]);
        split.extend_from_slice(&[0xFF, 0x00].repeat(3));
        assert!(!impossible_one_run(&with_scan(&split)));
        let mut interrupted = [0xFF, 0x00].repeat(3);
        interrupted.push(0x7F);
        interrupted.extend_from_slice(&[0xFF, 0x00].repeat(3));
        assert!(!impossible_one_run(&with_scan(&interrupted)));
    }

    #[test]
    fn headers_before_the_scan_are_not_scanned() {
        // 0xFF 0x00 pairs inside a segment before SOS are not scan data.
        let mut file = vec![0xFF, 0xD8, 0xFF, 0xE1, 0x00, 0x0E];
        file.extend_from_slice(&[0xFF, 0x00].repeat(6));
        file.extend_from_slice(&[0xFF, 0xDA, 0x00, 0x02, 0x55, 0xFF, 0xD9]);
        assert!(!impossible_one_run(&file));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
        /// No valid file trips the check: photos, flat white and black
        /// (long runs of identical codes), every quality, both encoders.
        #[test]
        fn valid_baseline_jpegs_never_look_corrupt(
            width in 8u16..160, height in 8u16..120, quality in 1u8..=100, seed in 0u64..1000, flat in 0u8..3,
        ) {
            let pixels = match flat {
                0 => crate::synthetic::photo(u32::from(width), u32::from(height), seed).pixels,
                1 => vec![255; usize::from(width) * usize::from(height) * 3],
                _ => vec![0; usize::from(width) * usize::from(height) * 3],
            };
            let mut by_jpeg_encoder = Vec::new();
            jpeg_encoder::Encoder::new(&mut by_jpeg_encoder, quality)
                .encode(&pixels, width, height, jpeg_encoder::ColorType::Rgb)
                .unwrap();
            let mut by_image_crate = Vec::new();
            image::codecs::jpeg::JpegEncoder::new_with_quality(&mut by_image_crate, quality)
                .encode(&pixels, u32::from(width), u32::from(height), image::ExtendedColorType::Rgb8)
                .unwrap();
            proptest::prop_assert!(!impossible_one_run(&by_jpeg_encoder));
            proptest::prop_assert!(!impossible_one_run(&by_image_crate));
        }
    }

    #[test]
    fn cmyk_white_and_black_convert_like_the_image_crate() {
        // Inverted storage: 0 = full ink.
        assert_eq!(cmyk_to_rgb(&[255, 255, 255, 255]), vec![0, 0, 0]);
        assert_eq!(cmyk_to_rgb(&[0, 0, 0, 0]), vec![255, 255, 255]);
        assert_eq!(cmyk_to_rgb(&[0, 255, 255, 0]), vec![255, 0, 0]);
    }
}
