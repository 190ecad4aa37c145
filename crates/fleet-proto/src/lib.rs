//! The contract every part of the fleet agrees on (see `docs/protocol.md`).
//!
//! Producers, workers and clients in other languages meet only through what
//! this crate names: the CloudEvents binary-mode headers of a request message,
//! the request id rules, the answer JSON with its stable error codes, and the
//! Kafka topic / Redis key names. It does no I/O and its rules read no clock
//! (they take the time as an argument; `clock::now_ms` is the one reader), so
//! every rule here is unit-testable and identical on both sides of the broker.

pub mod answer;
pub mod answer_record;
pub mod backlog;
pub mod client_properties;
pub mod clock;
pub mod content_type;
pub mod envelope;
pub mod headers;
pub mod job_record;
pub mod keys;
pub mod lane;
pub mod limits;
pub mod reply;
pub mod request_id;
pub mod rerank;

pub use answer::{Answer, ErrorCode, ErrorInfo, Status, Timings};
pub use content_type::ContentType;
pub use envelope::{Envelope, Rejection};
pub use keys::{ModelName, Namespace};
pub use lane::Lane;
pub use reply::{Destination, Destinations};
pub use request_id::{JobId, RequestId};
pub use rerank::RerankRequest;
