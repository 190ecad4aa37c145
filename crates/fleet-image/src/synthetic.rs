//! Camera-like test photos, generated from a seed: smooth light, objects with
//! edges, fine texture at several scales and per-pixel sensor noise. JPEG
//! cost depends on content, so the benchmarks and tests need detail like a
//! real photo's, not flat colour; and they need it without shipping 8K files.

use crate::decode::RgbImage;

/// SplitMix64: tiny, seedable, good enough for test content.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Hash-based lattice noise in [0, 1) at integer point (x, y).
fn lattice(seed: u64, x: i64, y: i64) -> f32 {
    let mut rng =
        Rng(seed ^ (x as u64).wrapping_mul(0x1656_67B1_9E37_79F9) ^ (y as u64).wrapping_mul(0x27D4_EB2F_1656_67C5));
    rng.unit()
}

/// Smoothly interpolated value noise with a period of `cell` pixels.
fn value_noise(seed: u64, x: f32, y: f32, cell: f32) -> f32 {
    let (gx, gy) = (x / cell, y / cell);
    let (x0, y0) = (gx.floor(), gy.floor());
    let (tx, ty) = (gx - x0, gy - y0);
    let (sx, sy) = (tx * tx * (3.0 - 2.0 * tx), ty * ty * (3.0 - 2.0 * ty));
    let (ix, iy) = (x0 as i64, y0 as i64);
    let top = lattice(seed, ix, iy) * (1.0 - sx) + lattice(seed, ix + 1, iy) * sx;
    let bottom = lattice(seed, ix, iy + 1) * (1.0 - sx) + lattice(seed, ix + 1, iy + 1) * sx;
    top * (1.0 - sy) + bottom * sy
}

struct Blob {
    cx: f32,
    cy: f32,
    rx: f32,
    ry: f32,
    colour: [f32; 3],
}

/// A `width × height` photo-like RGB image, the same for the same seed.
pub fn photo(width: u32, height: u32, seed: u64) -> RgbImage {
    let mut rng = Rng(seed);
    let (w, h) = (width as f32, height as f32);
    let scale = w.min(h);
    let blobs: Vec<Blob> = (0..24)
        .map(|_| Blob {
            cx: rng.unit() * w,
            cy: rng.unit() * h,
            rx: (0.03 + rng.unit() * 0.2) * scale,
            ry: (0.03 + rng.unit() * 0.2) * scale,
            colour: [rng.unit() * 255.0, rng.unit() * 255.0, rng.unit() * 255.0],
        })
        .collect();
    let sky = [rng.unit() * 120.0 + 80.0, rng.unit() * 120.0 + 80.0, rng.unit() * 120.0 + 100.0];
    let mut pixels = Vec::with_capacity(width as usize * height as usize * 3);
    let mut grain = Rng(seed ^ 0xA5A5_A5A5);
    for y in 0..height {
        let fy = y as f32;
        for x in 0..width {
            let fx = x as f32;
            // Light falls off towards the bottom and the corners.
            let light = 0.75 + 0.25 * (1.0 - fy / h) - 0.15 * (((fx / w) - 0.5).powi(2) + ((fy / h) - 0.5).powi(2));
            let mut rgb = sky;
            for blob in &blobs {
                let (dx, dy) = ((fx - blob.cx) / blob.rx, (fy - blob.cy) / blob.ry);
                if dx * dx + dy * dy <= 1.0 {
                    rgb = blob.colour;
                }
            }
            // Texture at 3 scales relative to the image, plus a fixed fine one.
            let texture = 0.5 * value_noise(seed, fx, fy, scale / 8.0)
                + 0.3 * value_noise(seed + 1, fx, fy, scale / 40.0)
                + 0.2 * value_noise(seed + 2, fx, fy, 3.0)
                - 0.5;
            for (channel, base) in rgb.iter().enumerate() {
                let noise = (grain.unit() - 0.5) * 16.0;
                let v = base * light + texture * 60.0 + noise + channel as f32;
                pixels.push(v.clamp(0.0, 255.0) as u8);
            }
        }
    }
    RgbImage { width, height, pixels }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_photo_and_another_seed_another() {
        let a = photo(64, 48, 7);
        assert_eq!(a, photo(64, 48, 7));
        assert_ne!(a, photo(64, 48, 8));
        assert_eq!(a.pixels.len(), 64 * 48 * 3);
    }

    #[test]
    fn the_photo_has_detail_not_flat_colour() {
        let p = photo(128, 128, 1);
        let mean = p.pixels.iter().map(|&v| f64::from(v)).sum::<f64>() / p.pixels.len() as f64;
        let var = p.pixels.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / p.pixels.len() as f64;
        assert!(var.sqrt() > 20.0, "std {}", var.sqrt());
        let neighbours_differ = p.pixels.windows(4).filter(|w| w[0] != w[3]).count();
        assert!(neighbours_differ > p.pixels.len() * 9 / 10);
    }
}
