//! `ce_time`'s text form, RFC 3339, to and from the Unix epoch milliseconds
//! the fleet's rules take; shared with the answer records' `ce_time`.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// RFC 3339 text → Unix epoch milliseconds; times before 1970 are refused.
pub fn parse_rfc3339_ms(text: &str) -> Option<u64> {
    let t = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// Unix epoch milliseconds → RFC 3339 in UTC with millisecond precision.
pub fn format_rfc3339_ms(epoch_ms: u64) -> String {
    let nanos = i128::from(epoch_ms) * 1_000_000;
    OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00Z".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_offsets_and_fractions_in_ce_time() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(parse_rfc3339_ms("1970-01-01T01:00:01+01:00"), Some(1000));
        assert_eq!(parse_rfc3339_ms("1969-12-31T23:59:59Z"), None);
        assert_eq!(format_rfc3339_ms(1500), "1970-01-01T00:00:01.5Z");
    }

    proptest! {
        #[test]
        fn times_round_trip(ms in 0u64..4_102_444_800_000) {
            prop_assert_eq!(parse_rfc3339_ms(&format_rfc3339_ms(ms)), Some(ms));
        }
    }
}
