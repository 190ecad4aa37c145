//! The `content-type` header: what kind of raw input the message value holds.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContentType {
    Text,
    Jpeg,
    Png,
    Webp,
    /// A structured request: a rerank model's `{"query", "documents"}`.
    Json,
}

impl ContentType {
    pub const TEXT: &'static str = "text/plain; charset=utf-8";

    /// Parses a header value. Media types are case-insensitive and may carry
    /// parameters; text must be UTF-8 (absent charset is taken as UTF-8, any
    /// other charset is refused rather than guessed).
    pub fn parse(raw: &str) -> Option<Self> {
        let mut parts = raw.split(';').map(str::trim);
        let essence = parts.next()?.to_ascii_lowercase();
        let params: Vec<String> = parts.map(|p| p.to_ascii_lowercase().replace(' ', "")).collect();
        match essence.as_str() {
            "text/plain" => {
                let charset_ok = params
                    .iter()
                    .filter_map(|p| p.strip_prefix("charset="))
                    .all(|cs| matches!(cs.trim_matches('"'), "utf-8" | "utf8"));
                charset_ok.then_some(Self::Text)
            }
            "image/jpeg" | "image/jpg" => Some(Self::Jpeg),
            "image/png" => Some(Self::Png),
            "image/webp" => Some(Self::Webp),
            "application/json" => Some(Self::Json),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Text => Self::TEXT,
            Self::Jpeg => "image/jpeg",
            Self::Png => "image/png",
            Self::Webp => "image/webp",
            Self::Json => "application/json",
        }
    }

    pub fn is_image(self) -> bool {
        matches!(self, Self::Jpeg | Self::Png | Self::Webp)
    }
}

impl fmt::Display for ContentType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_producers_send() {
        assert_eq!(ContentType::parse(ContentType::TEXT), Some(ContentType::Text));
        assert_eq!(ContentType::parse("text/plain"), Some(ContentType::Text));
        assert_eq!(ContentType::parse("Text/Plain; Charset=\"UTF-8\""), Some(ContentType::Text));
        assert_eq!(ContentType::parse("image/jpeg"), Some(ContentType::Jpeg));
        assert_eq!(ContentType::parse("image/png"), Some(ContentType::Png));
        assert_eq!(ContentType::parse("image/webp"), Some(ContentType::Webp));
        assert_eq!(ContentType::parse("application/json; charset=utf-8"), Some(ContentType::Json));
        assert!(!ContentType::Json.is_image() && ContentType::Png.is_image());
    }

    #[test]
    fn refuses_unknown_types_and_charsets() {
        assert_eq!(ContentType::parse("application/xml"), None);
        assert_eq!(ContentType::parse("text/plain; charset=latin1"), None);
        assert_eq!(ContentType::parse(""), None);
    }

    #[test]
    fn round_trips() {
        for ct in [ContentType::Text, ContentType::Jpeg, ContentType::Png, ContentType::Webp, ContentType::Json] {
            assert_eq!(ContentType::parse(ct.as_str()), Some(ct));
        }
    }
}
