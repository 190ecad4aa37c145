//! Request ids: the Kafka key, `ce_id`, and the suffix of every Redis key of a
//! request. The character set is narrow on purpose: an id must be safe inside
//! a Redis key, a log line and a metric exemplar without escaping.

use std::fmt;

pub const MAX_LEN: usize = 128;

/// A job id (`ce_fleetjob`): what a bulk run's requests share so that one
/// cancel stops them all. Same alphabet as a request id, so a single request
/// can be cancelled by its own id.
pub type JobId = RequestId;

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RequestId(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRequestId {
    #[error("request id is empty")]
    Empty,
    #[error("request id is {0} bytes long, at most {MAX_LEN} allowed")]
    TooLong(usize),
    #[error("request id contains {0:?}; allowed are A-Z a-z 0-9 . _ : -")]
    BadChar(char),
    #[error("request id is not UTF-8")]
    NotUtf8,
}

impl RequestId {
    pub fn parse(raw: &str) -> Result<Self, InvalidRequestId> {
        if raw.is_empty() {
            return Err(InvalidRequestId::Empty);
        }
        if raw.len() > MAX_LEN {
            return Err(InvalidRequestId::TooLong(raw.len()));
        }
        if let Some(bad) = raw.chars().find(|c| !is_id_char(*c)) {
            return Err(InvalidRequestId::BadChar(bad));
        }
        Ok(Self(raw.to_owned()))
    }

    pub fn from_bytes(raw: &[u8]) -> Result<Self, InvalidRequestId> {
        let text = std::str::from_utf8(raw).map_err(|_| InvalidRequestId::NotUtf8)?;
        Self::parse(text)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for RequestId {
    type Err = InvalidRequestId;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_the_documented_alphabet() {
        assert!(RequestId::parse("req-1.a_b:C").is_ok());
        assert!(RequestId::parse(&"x".repeat(MAX_LEN)).is_ok());
    }

    #[test]
    fn rejects_each_kind_of_bad_id() {
        assert_eq!(RequestId::parse(""), Err(InvalidRequestId::Empty));
        assert_eq!(RequestId::parse(&"x".repeat(MAX_LEN + 1)), Err(InvalidRequestId::TooLong(MAX_LEN + 1)));
        assert_eq!(RequestId::parse("a b"), Err(InvalidRequestId::BadChar(' ')));
        assert_eq!(RequestId::parse("a/b"), Err(InvalidRequestId::BadChar('/')));
        assert_eq!(RequestId::parse("é"), Err(InvalidRequestId::BadChar('é')));
        assert_eq!(RequestId::from_bytes(&[0xff, 0x41]), Err(InvalidRequestId::NotUtf8));
    }

    proptest! {
        #[test]
        fn valid_ids_round_trip(id in "[A-Za-z0-9._:-]{1,128}") {
            let parsed = RequestId::parse(&id).unwrap();
            prop_assert_eq!(parsed.as_str(), id.as_str());
        }

        #[test]
        fn never_panics_on_arbitrary_bytes(raw in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = RequestId::from_bytes(&raw);
        }
    }
}
