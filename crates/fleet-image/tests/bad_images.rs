//! Every kind of bad image ends in a typed error, never a panic, and never
//! an allocation the header did not announce. Files are made here from a
//! synthetic photo, then broken in the ways uploads break.

use fleet_image::{decode, model_input, probe, synthetic, Format, ImageError, ImageLimits, InputGeometry};
use image::ImageEncoder;
use proptest::prelude::*;

const IMAGENET: InputGeometry = InputGeometry { resize_shorter: 256, crop: 224 };

fn jpeg(width: u16, height: u16, seed: u64) -> Vec<u8> {
    let photo = synthetic::photo(u32::from(width), u32::from(height), seed);
    let mut out = Vec::new();
    jpeg_encoder::Encoder::new(&mut out, 85)
        .encode(&photo.pixels, width, height, jpeg_encoder::ColorType::Rgb)
        .unwrap();
    out
}

fn png(width: u32, height: u32, color: image::ExtendedColorType, pixels: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    image::codecs::png::PngEncoder::new(&mut out).write_image(pixels, width, height, color).unwrap();
    out
}

fn photo_png(width: u32, height: u32) -> Vec<u8> {
    png(width, height, image::ExtendedColorType::Rgb8, &synthetic::photo(width, height, 3).pixels)
}

/// Runs the worker's whole preparation: probe, decode, crop.
fn prepare(bytes: &[u8], declared: Option<Format>) -> Result<Vec<u8>, ImageError> {
    let header = probe(bytes, declared, &ImageLimits::default())?;
    let image = decode(bytes, &header, IMAGENET.resize_shorter)?;
    model_input(&image, IMAGENET)
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

fn png_chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
    let mut chunk = (data.len() as u32).to_be_bytes().to_vec();
    chunk.extend_from_slice(kind);
    chunk.extend_from_slice(data);
    let crc = crc32(&chunk[4..]);
    chunk.extend_from_slice(&crc.to_be_bytes());
    chunk
}

/// A valid PNG whose IHDR is rewritten to declare `width × height`.
fn png_declaring(width: u32, height: u32) -> Vec<u8> {
    let mut file = photo_png(8, 8);
    let mut ihdr = file[16..29].to_vec();
    ihdr[..4].copy_from_slice(&width.to_be_bytes());
    ihdr[4..8].copy_from_slice(&height.to_be_bytes());
    file.splice(8..33, png_chunk(b"IHDR", &ihdr));
    file
}

#[test]
fn a_real_photo_prepares_to_the_model_input() {
    for (bytes, format) in [(jpeg(640, 480, 1), Format::Jpeg), (photo_png(300, 500), Format::Png)] {
        let input = prepare(&bytes, Some(format)).unwrap();
        assert_eq!(input.len(), 224 * 224 * 3);
    }
}

#[test]
fn a_decompression_bomb_is_refused_from_its_header() {
    let bomb = png_declaring(100_000, 100_000);
    assert!(bomb.len() < 1000, "the bomb is small: {} bytes", bomb.len());
    let refused = probe(&bomb, Some(Format::Png), &ImageLimits::default()).unwrap_err();
    assert!(matches!(refused, ImageError::TooLarge(ref m) if m.contains("100000×100000")), "{refused:?}");
}

#[test]
fn each_broken_file_gets_its_own_kind_of_error() {
    let good = jpeg(320, 240, 2);
    let truncated_jpeg = good[..good.len() / 3].to_vec();
    let mut corrupt_huffman = good.clone();
    let scan = good.windows(2).position(|w| w == [0xFF, 0xDA]).unwrap() + 20;
    for pair in corrupt_huffman[scan..scan + 400].chunks_exact_mut(2) {
        // Stuffed 0xFF bytes: a run of 1-bits, which is no valid Huffman code.
        pair.copy_from_slice(&[0xFF, 0x00]);
    }
    let good_png = photo_png(64, 64);
    let truncated_png = good_png[..good_png.len() / 2].to_vec();
    let mut wrong_magic = good.clone();
    wrong_magic[..4].copy_from_slice(b"GIF8");

    type Expected = fn(&ImageError) -> bool;
    let cases: Vec<(&str, Vec<u8>, Option<Format>, Expected)> = vec![
        ("zero bytes", Vec::new(), Some(Format::Jpeg), |e| matches!(e, ImageError::Malformed(_))),
        ("wrong magic", wrong_magic, Some(Format::Jpeg), |e| matches!(e, ImageError::Unsupported(_))),
        ("content type lies", good.clone(), Some(Format::Png), |e| matches!(e, ImageError::Unsupported(_))),
        ("truncated PNG", truncated_png, Some(Format::Png), |e| matches!(e, ImageError::Malformed(_))),
        ("corrupt Huffman data", corrupt_huffman, Some(Format::Jpeg), |e| matches!(e, ImageError::Malformed(_))),
        ("truncated JPEG", truncated_jpeg, Some(Format::Jpeg), |e| matches!(e, ImageError::Malformed(_))),
    ];
    for (name, bytes, declared, expected) in cases {
        match prepare(&bytes, declared) {
            Err(e) => assert!(expected(&e), "{name}: unexpected {e:?}"),
            Ok(_) => panic!("{name}: accepted"),
        }
    }
}

#[test]
fn animated_png_is_refused_as_unsupported() {
    let mut file = photo_png(16, 16);
    // acTL (1 frame, play once) right after IHDR marks the file as APNG.
    let actl = png_chunk(b"acTL", &[0, 0, 0, 1, 0, 0, 0, 0]);
    file.splice(33..33, actl);
    let refused = probe(&file, Some(Format::Png), &ImageLimits::default()).unwrap_err();
    assert!(matches!(refused, ImageError::Unsupported(ref m) if m.contains("animated")), "{refused:?}");
}

#[test]
fn sixteen_bit_grey_alpha_and_cmyk_files_are_served_as_rgb() {
    let rgb16: Vec<u8> = synthetic::photo(40, 30, 4).pixels.iter().flat_map(|&v| [v, 0x80]).collect();
    let sixteen_bit = png(40, 30, image::ExtendedColorType::Rgb16, &rgb16);
    let grey_alpha = png(40, 30, image::ExtendedColorType::La8, &[200u8, 255].repeat(40 * 30));
    let mut cmyk = Vec::new();
    jpeg_encoder::Encoder::new(&mut cmyk, 90)
        .encode(&[0u8, 255, 255, 0].repeat(48 * 32), 48, 32, jpeg_encoder::ColorType::Cmyk)
        .unwrap();
    for (name, bytes, format) in [
        ("16-bit PNG", sixteen_bit, Format::Png),
        ("grey+alpha PNG", grey_alpha, Format::Png),
        ("CMYK JPEG", cmyk, Format::Jpeg),
    ] {
        let header = probe(&bytes, Some(format), &ImageLimits::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let image = decode(&bytes, &header, 256).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(image.pixels.len(), (image.width * image.height * 3) as usize, "{name}");
    }
}

#[test]
fn exif_orientation_is_applied() {
    // 60×20, left half black, right half white; EXIF orientation 6 (rotate
    // 90° clockwise to display): shown as 20×60, top black, bottom white.
    let pixels: Vec<u8> =
        (0..20).flat_map(|_| (0..60).flat_map(|x| if x < 30 { [0u8; 3] } else { [255u8; 3] })).collect();
    let tiff = [b"Exif\0\0II*\0".as_slice(), &[8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0]]
        .concat();
    let mut file = Vec::new();
    let mut encoder = jpeg_encoder::Encoder::new(&mut file, 95);
    encoder.add_app_segment(1, tiff).unwrap();
    encoder.encode(&pixels, 60, 20, jpeg_encoder::ColorType::Rgb).unwrap();
    let header = probe(&file, Some(Format::Jpeg), &ImageLimits::default()).unwrap();
    let image = decode(&file, &header, 256).unwrap();
    assert_eq!((image.width, image.height), (20, 60));
    let at = |x: u32, y: u32| image.pixels[((y * image.width + x) * 3) as usize];
    assert!(at(10, 5) < 40 && at(10, 55) > 215, "top {} bottom {}", at(10, 5), at(10, 55));
}

#[test]
fn an_8k_jpeg_decodes_at_an_eighth_of_its_size() {
    let big = jpeg(7680, 4320, 5);
    let header = probe(&big, Some(Format::Jpeg), &ImageLimits::default()).unwrap();
    let image = decode(&big, &header, 256).unwrap();
    assert_eq!((image.width, image.height), (960, 540));
    let shrunk = fleet_image::shrink_for_transport(&big, Some(Format::Jpeg), &ImageLimits::default(), 2048, 90)
        .unwrap()
        .expect("an 8K photo is over 2048 px");
    let header = probe(&shrunk, Some(Format::Jpeg), &ImageLimits::default()).unwrap();
    assert_eq!((header.width, header.height), (2048, 1152));
    assert!(shrunk.len() < big.len() / 4, "{} vs {}", shrunk.len(), big.len());
    let small = jpeg(800, 600, 6);
    assert_eq!(fleet_image::shrink_for_transport(&small, None, &ImageLimits::default(), 2048, 90).unwrap(), None);
}

#[derive(Debug, Clone)]
enum Mutation {
    Truncate(usize),
    Flip { at: usize, bits: u8 },
    Insert { at: usize, bytes: Vec<u8> },
    Overwrite { at: usize, bytes: Vec<u8> },
}

fn apply(mut file: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = file.len().max(1);
        match m {
            Mutation::Truncate(n) => file.truncate(n % len),
            Mutation::Flip { at, bits } => {
                if let Some(b) = file.get_mut(at % len) {
                    *b ^= bits;
                }
            }
            Mutation::Insert { at, bytes } => {
                let at = (at % len).min(file.len());
                file.splice(at..at, bytes.iter().copied());
            }
            Mutation::Overwrite { at, bytes } => {
                for (i, b) in bytes.iter().enumerate() {
                    if let Some(slot) = file.get_mut(at % len + i) {
                        *slot = *b;
                    }
                }
            }
        }
    }
    file
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 1u8..).prop_map(|(at, bits)| Mutation::Flip { at, bits }),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Overwrite { at, bytes }),
    ]
}

proptest! {
    // Bounded for CI: ~2 × 300 mutated files, a few seconds.
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn mutated_jpegs_never_panic_and_stay_within_their_header(mutations in proptest::collection::vec(mutation(), 1..6)) {
        fuzz_once(apply(jpeg(96, 64, 9), &mutations), Format::Jpeg)?;
    }

    #[test]
    fn mutated_pngs_never_panic_and_stay_within_their_header(mutations in proptest::collection::vec(mutation(), 1..6)) {
        fuzz_once(apply(photo_png(48, 40), &mutations), Format::Png)?;
    }
}

fn fuzz_once(file: Vec<u8>, format: Format) -> Result<(), TestCaseError> {
    let limits = ImageLimits { max_pixels: 4_000_000, ..ImageLimits::default() };
    let Ok(header) = probe(&file, Some(format), &limits) else { return Ok(()) };
    prop_assert!(u64::from(header.width) * u64::from(header.height) <= limits.max_pixels);
    if let Ok(image) = decode(&file, &header, 256) {
        prop_assert_eq!(image.pixels.len(), (image.width * image.height * 3) as usize);
        prop_assert!(image.width.max(image.height) <= header.width.max(header.height));
        // A decoded image becomes exactly one model input, or (a degenerate
        // size the resizer refuses) a clear resize error: never another length.
        match model_input(&image, IMAGENET) {
            Ok(input) => prop_assert_eq!(input.len(), 224 * 224 * 3),
            Err(e) => prop_assert!(e.to_string().contains("resize"), "{}x{}: {e}", image.width, image.height),
        }
    }
    Ok(())
}
