//! Message size limits every Kafka client of the fleet must agree on: a
//! broker, producer or consumer left at its ~1 MB default refuses images.

/// Largest message value (text, or the encoded image): an image model's
/// default `max_image_bytes`.
pub const MAX_VALUE_BYTES: u64 = 20_000_000;
/// Room for the key and CloudEvents headers on top of the value.
pub const HEADER_ALLOWANCE_BYTES: u64 = 64 * 1024;
/// `max.message.bytes` of the topics, `message.max.bytes` of producers and
/// the least `max.partition.fetch.bytes` of consumers.
pub const MAX_MESSAGE_BYTES: u64 = MAX_VALUE_BYTES + HEADER_ALLOWANCE_BYTES;
