//! The model's input from a decoded image: shorter side to `resize_shorter`,
//! centre crop `crop`×`crop`, done as one SIMD resize of the source region
//! that becomes the crop (no intermediate image).

use crate::decode::RgbImage;
use crate::error::ImageError;
use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use std::cell::RefCell;

/// The classic ImageNet evaluation geometry: resize the shorter side to 256,
/// centre-crop 224.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputGeometry {
    pub resize_shorter: u32,
    pub crop: u32,
}

impl InputGeometry {
    /// The source rectangle (left, top, side) that maps onto the crop.
    pub fn source_crop(&self, width: u32, height: u32) -> (f64, f64, f64) {
        let short = f64::from(width.min(height));
        let side = (short * f64::from(self.crop) / f64::from(self.resize_shorter)).min(short);
        ((f64::from(width) - side) / 2.0, (f64::from(height) - side) / 2.0, side)
    }
}

thread_local! {
    // Resizers keep their coefficient buffers between calls.
    static RESIZER: RefCell<Resizer> = RefCell::new(Resizer::new());
}

/// `crop × crop × 3` RGB bytes, row-major.
pub fn model_input(image: &RgbImage, geometry: InputGeometry) -> Result<Vec<u8>, ImageError> {
    let (left, top, side) = geometry.source_crop(image.width, image.height);
    let source = ImageRef::new(image.width, image.height, &image.pixels, PixelType::U8x3)
        .map_err(|e| ImageError::malformed(format!("pixel buffer: {e}")))?;
    let mut target = Image::new(geometry.crop, geometry.crop, PixelType::U8x3);
    let options =
        ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Bilinear)).crop(left, top, side, side);
    RESIZER
        .with(|resizer| resizer.borrow_mut().resize(&source, &mut target, &options))
        .map_err(|e| ImageError::malformed(format!("resize: {e}")))?;
    Ok(target.into_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    const IMAGENET: InputGeometry = InputGeometry { resize_shorter: 256, crop: 224 };

    #[test]
    fn the_crop_is_centred_on_the_shorter_side() {
        let (left, top, side) = IMAGENET.source_crop(512, 256);
        assert_eq!((left, top, side), (144.0, 16.0, 224.0));
        let (left, top, side) = IMAGENET.source_crop(100, 200);
        assert_eq!(side, 87.5);
        assert_eq!((left, top), (6.25, 56.25));
    }

    #[test]
    fn a_flat_image_stays_flat_and_has_the_crop_size() {
        let image = RgbImage { width: 640, height: 480, pixels: [10u8, 120, 250].repeat(640 * 480) };
        let input = model_input(&image, IMAGENET).unwrap();
        assert_eq!(input.len(), 224 * 224 * 3);
        assert!(input.chunks_exact(3).all(|p| p == [10, 120, 250]));
    }

    #[test]
    fn the_crop_keeps_the_centre_and_drops_the_sides() {
        // Left third red, middle third green, right third blue.
        let (w, h) = (900u32, 300u32);
        let pixels = (0..h)
            .flat_map(|_| {
                (0..w).flat_map(|x| match x * 3 / w {
                    0 => [255, 0, 0],
                    1 => [0, 255, 0],
                    _ => [0, 0, 255],
                })
            })
            .collect();
        let input = model_input(&RgbImage { width: w, height: h, pixels }, IMAGENET).unwrap();
        // The 262-px-wide centre region lies inside the green third.
        assert!(input.chunks_exact(3).all(|p| p == [0, 255, 0]));
    }
}
