/// Why an image was refused. The worker maps each kind to one stable answer
/// code (`image_too_large`, `unsupported_format`, `decode_failed`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Over a byte, pixel or side limit, or over what the decode budget can
    /// ever hold.
    #[error("{0}")]
    TooLarge(String),
    /// Not JPEG/PNG/WebP, a format the model does not allow, a content type
    /// that disagrees with the bytes, or a kind of file not served (animated).
    #[error("{0}")]
    Unsupported(String),
    /// The bytes claim a supported format but cannot be decoded.
    #[error("{0}")]
    Malformed(String),
}

impl ImageError {
    pub(crate) fn malformed(what: impl std::fmt::Display) -> Self {
        Self::Malformed(format!("image cannot be decoded: {what}"))
    }
}

impl From<image::ImageError> for ImageError {
    fn from(e: image::ImageError) -> Self {
        match e {
            image::ImageError::Limits(limit) => Self::TooLarge(format!("image exceeds the decode limits: {limit}")),
            image::ImageError::Unsupported(what) => Self::Unsupported(format!("image not supported: {what}")),
            other => Self::malformed(other),
        }
    }
}

/// Runs a third-party decoder call, turning a panic inside it into an error:
/// malformed input must never take the worker down, and decoders have had
/// such bugs (jpeg-decoder panics on some component counts).
pub(crate) fn guarded<T>(what: &str, call: impl FnOnce() -> Result<T, ImageError>) -> Result<T, ImageError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(call))
        .unwrap_or_else(|_| Err(ImageError::malformed(format!("{what} rejected malformed data"))))
}
