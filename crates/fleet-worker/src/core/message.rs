//! An owned copy of a consumed Kafka message: what the rest of the worker sees
//! of the broker. Owning it lets the message outlive the consumer's borrow.
//!
//! Headers are copied as raw bytes, names included. Kafka does not promise
//! that a header name is UTF-8 (any client can send other bytes), and
//! rdkafka's own header iterator unwraps the conversion: one such message
//! would panic the worker, and every worker the partition moved to after it.
//! Reading the names through librdkafka's C API instead makes a bad name
//! what it is: one malformed request (see `admission`).

use fleet_proto::Lane;
use rdkafka::bindings as rdsys;
use rdkafka::message::{BorrowedMessage, Message};
use std::ffi::CStr;

/// Where a message sits in the topic, and under which assignment of its
/// partition it was read (`commit::CommitTracker` generations: work read
/// before a revocation is dropped, not computed).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position {
    /// Which of the model's topics it was read from.
    pub lane: Lane,
    pub partition: i32,
    pub offset: i64,
    pub generation: u64,
}

impl Position {
    pub fn lane_partition(&self) -> LanePartition {
        LanePartition { lane: self.lane, partition: self.partition }
    }
}

/// One partition of one of the model's topics: what the commit tracker and
/// the partition readers are keyed by (both lanes' topics have a partition 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LanePartition {
    pub lane: Lane,
    pub partition: i32,
}

impl std::fmt::Display for LanePartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.lane, self.partition)
    }
}

/// One header as it was on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawHeader {
    pub name: Vec<u8>,
    pub value: Option<Vec<u8>>,
}

impl RawHeader {
    pub fn new(name: impl Into<Vec<u8>>, value: Option<Vec<u8>>) -> Self {
        Self { name: name.into(), value }
    }
}

#[derive(Debug, Clone)]
pub struct Inbound {
    pub position: Position,
    pub key: Option<Vec<u8>>,
    pub headers: Vec<RawHeader>,
    pub payload: Option<Vec<u8>>,
    /// Read again because Redis lost its data (a replay): answered again
    /// only where Redis was to have its answer.
    pub replayed: bool,
}

/// A header whose name is not UTF-8: where it was, and its bytes shown
/// escaped (never the raw bytes, which could break a log line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedHeader {
    pub index: usize,
    pub escaped_name: String,
}

impl std::fmt::Display for MalformedHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "header {} has a name that is not UTF-8 ({})", self.index, self.escaped_name)
    }
}

impl Inbound {
    pub fn from_kafka(message: &BorrowedMessage<'_>, lane: Lane, generation: u64) -> Self {
        Self {
            position: Position { lane, partition: message.partition(), offset: message.offset(), generation },
            key: message.key().map(<[u8]>::to_vec),
            headers: raw_headers(message),
            payload: message.payload().map(<[u8]>::to_vec),
            replayed: false,
        }
    }

    /// Headers whose names are UTF-8, as the envelope reads them; the others
    /// are reported by [`malformed_header`](Self::malformed_header).
    pub fn header_pairs(&self) -> impl Iterator<Item = (&str, Option<&[u8]>)> {
        self.headers.iter().filter_map(|h| Some((std::str::from_utf8(&h.name).ok()?, h.value.as_deref())))
    }

    /// The request id an answer can be addressed to, from the key or else
    /// `ce_id`, read without judging the rest of the message (for messages
    /// that are refused before their envelope is read).
    pub fn readable_id(&self) -> Option<fleet_proto::RequestId> {
        let ce_id = self.header_pairs().find(|(name, _)| name.eq_ignore_ascii_case(fleet_proto::headers::ID));
        fleet_proto::envelope::readable_id(self.key.as_deref(), ce_id.and_then(|(_, value)| value))
    }

    /// The first header whose name is not UTF-8, if any.
    pub fn malformed_header(&self) -> Option<MalformedHeader> {
        self.headers.iter().enumerate().find(|(_, h)| std::str::from_utf8(&h.name).is_err()).map(|(index, h)| {
            MalformedHeader { index, escaped_name: h.name.escape_ascii().to_string().chars().take(64).collect() }
        })
    }

    /// Size counted against in-flight byte limits.
    pub fn size_bytes(&self) -> usize {
        self.payload.as_ref().map_or(0, Vec::len)
            + self.key.as_ref().map_or(0, Vec::len)
            + self.headers.iter().map(|h| h.name.len() + h.value.as_ref().map_or(0, Vec::len)).sum::<usize>()
    }
}

/// Every header of `message`, names as bytes, through librdkafka's C API
/// (`rd_kafka_message_headers`, `rd_kafka_header_get_all`).
fn raw_headers(message: &BorrowedMessage<'_>) -> Vec<RawHeader> {
    let mut headers: *mut rdsys::rd_kafka_headers_t = std::ptr::null_mut();
    // SAFETY: `message.ptr()` is a live rd_kafka_message_t for the borrow's
    // lifetime; librdkafka fills `headers` with a list it owns (freed with
    // the message), or reports an error and leaves it null.
    let err = unsafe { rdsys::rd_kafka_message_headers(message.ptr(), &mut headers) };
    if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || headers.is_null() {
        return Vec::new();
    }
    // SAFETY: `headers` is the non-null list librdkafka just returned.
    let count = unsafe { rdsys::rd_kafka_header_cnt(headers) };
    let mut out = Vec::with_capacity(count);
    for index in 0..count {
        let mut name: *const std::ffi::c_char = std::ptr::null();
        let mut value: *const std::ffi::c_void = std::ptr::null();
        let mut size = 0usize;
        // SAFETY: `index < count`; on success librdkafka points `name` at a
        // NUL-terminated string and `value` at `size` bytes (or null), both
        // owned by the header list and valid while the message is.
        let err = unsafe { rdsys::rd_kafka_header_get_all(headers, index, &mut name, &mut value, &mut size) };
        if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            continue;
        }
        // SAFETY: as above; both are copied before the message is released.
        let name = unsafe { CStr::from_ptr(name) }.to_bytes().to_vec();
        let value =
            (!value.is_null()).then(|| unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) }.to_vec());
        out.push(RawHeader { name, value });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbound(headers: Vec<RawHeader>) -> Inbound {
        Inbound {
            position: Position { lane: Lane::Interactive, partition: 0, offset: 0, generation: 1 },
            key: Some(b"id".to_vec()),
            headers,
            payload: Some(b"text".to_vec()),
            replayed: false,
        }
    }

    #[test]
    fn a_name_that_is_not_utf8_is_reported_escaped_and_left_out_of_the_pairs() {
        let message = inbound(vec![
            RawHeader::new("ce_id", Some(b"id".to_vec())),
            RawHeader::new(b"ce_\xff\xfe".to_vec(), Some(b"x".to_vec())),
        ]);
        let bad = message.malformed_header().expect("malformed");
        assert_eq!(bad.index, 1);
        assert_eq!(bad.escaped_name, "ce_\\xff\\xfe");
        let pairs: Vec<_> = message.header_pairs().map(|(name, _)| name).collect();
        assert_eq!(pairs, vec!["ce_id"]);
        assert_eq!(message.size_bytes(), 4 + 2 + 5 + 2 + 5 + 1);
    }

    #[test]
    fn well_formed_headers_have_nothing_to_report() {
        let message = inbound(vec![RawHeader::new("", None), RawHeader::new("ce_id", Some(Vec::new()))]);
        assert_eq!(message.malformed_header(), None);
        assert_eq!(message.header_pairs().count(), 2);
    }
}
