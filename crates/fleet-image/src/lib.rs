//! Safe image preparation, shared by the worker (model input) and the
//! producer (the gateway-side size cap).
//!
//! Every image goes through the same three steps, each bounded before the
//! next one allocates:
//!
//! 1. [`probe`]: magic bytes, declared type, and the header's dimensions, read
//!    without decoding a pixel; anything over the limits is refused here, so a
//!    small file declaring a huge canvas never allocates.
//! 2. [`decode`]: shrink-on-load. JPEG is decoded at 1/2, 1/4 or 1/8 scale in
//!    the DCT domain when the target allows; PNG and WebP decode at full size
//!    under the `image` crate's allocation limits. EXIF orientation is applied.
//!    [`Header::decode_cost`] says beforehand how many bytes that takes, so a
//!    caller can hold a memory budget for it.
//! 3. [`model_input`] / [`shrink_for_transport`]: a SIMD resize to what the
//!    model (or Kafka) needs.

mod decode;
mod error;
mod format;
mod jpeg;
mod probe;
mod resize;
pub mod synthetic;
mod transport;

pub use decode::{decode, RgbImage};
pub use error::ImageError;
pub use format::Format;
pub use probe::{probe, Header, ImageLimits};
pub use resize::{model_input, InputGeometry};
pub use transport::{fit_within, shrink_for_transport};
