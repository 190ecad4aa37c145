//! Which write failures a retry can cure. Pure: the sink asks, per message,
//! with the error code Redis or Kafka gave, and acts on the answer.
//!
//! - `Transient`: the dependency is slow, restarting or unreachable; the
//!   same write will work later. Retry with backoff, holding the message.
//! - `Message`: this message's write can never work (its Redis key holds
//!   another type, its dead-letter copy is too large), while the others'
//!   do. Retrying would hold back every message behind it forever, so it
//!   ends another way (a dead letter, or the local record) and the offset
//!   moves on.
//! - `Fleet`: no write of this worker can work until an operator acts
//!   (ACL, a missing topic, Redis out of memory). Retrying is all the worker
//!   can do, but it stops reading and says so in its probes rather than
//!   retrying silently.

use crate::backoff::Backoff;
use rdkafka::types::RDKafkaErrorCode;
use std::time::Duration;

/// What the sink writes to: the `target` label of its failures (`answers`:
/// the model's answers topics on Kafka).
pub const WRITE_TARGETS: [&str; 3] = ["redis", "answers", "dlq"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureClass {
    Transient,
    Message,
    Fleet,
}

impl FailureClass {
    pub const ALL: [Self; 3] = [Self::Transient, Self::Message, Self::Fleet];

    /// The sink's pace for retrying a write: from 50 ms, doubling to 5 s.
    pub fn retry_backoff() -> Backoff {
        Backoff::new(Duration::from_millis(50), Duration::from_secs(5))
    }

    /// Waits before the next try of a write that failed this way. What only
    /// an operator can fix is retried no faster than once a second.
    pub async fn wait_to_retry(self, backoff: &mut Backoff) {
        if self == Self::Fleet {
            backoff.at_least(Duration::from_secs(1));
        }
        backoff.wait().await;
    }

    /// The `class` label of `fleet_sink_failures_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Transient => "transient",
            Self::Message => "message",
            Self::Fleet => "fleet",
        }
    }
}

/// A Redis error reply's code (its first word), or `None` for an error that
/// never reached the server (connection refused or dropped, timeout).
pub fn redis_class(code: Option<&str>) -> FailureClass {
    match code {
        None => FailureClass::Transient,
        // The keys of this one request hold another type (someone wrote
        // them): only this request's answer is affected.
        Some("WRONGTYPE") => FailureClass::Message,
        // Failover, restart, resharding: the server says to come back.
        Some("LOADING" | "BUSY" | "TRYAGAIN" | "CLUSTERDOWN" | "MASTERDOWN" | "READONLY" | "MOVED" | "ASK") => {
            FailureClass::Transient
        }
        // NOPERM, NOAUTH, WRONGPASS, OOM, MISCONF, CROSSSLOT, a generic ERR
        // and anything unknown: every write of this worker meets it.
        Some(_) => FailureClass::Fleet,
    }
}

/// The class of a failed Redis call.
pub fn redis_error_class(error: &redis::RedisError) -> FailureClass {
    if error.is_io_error() || error.is_timeout() || error.is_connection_dropped() || error.is_connection_refusal() {
        return FailureClass::Transient;
    }
    redis_class(error.code())
}

/// What to do about a failed dead-letter send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KafkaAction {
    Retry(FailureClass),
    /// The idempotent producer failed fatally: only a new producer sends again.
    ReplaceProducer,
}

/// A failed produce's error code.
pub fn kafka_action(code: RDKafkaErrorCode) -> KafkaAction {
    use RDKafkaErrorCode as E;
    match code {
        E::Fatal => KafkaAction::ReplaceProducer,
        // This record is refused for what it is.
        E::MessageSizeTooLarge | E::InvalidMessageSize | E::InvalidMessage | E::InvalidRecord => {
            KafkaAction::Retry(FailureClass::Message)
        }
        // The topic is missing or this worker may not write to it: every
        // dead letter meets the same.
        E::UnknownTopicOrPartition
        | E::UnknownTopic
        | E::UnknownPartition
        | E::TopicAuthorizationFailed
        | E::ClusterAuthorizationFailed
        | E::TransactionalIdAuthorizationFailed
        | E::SaslAuthenticationFailed
        | E::Authentication
        | E::InvalidTopic
        | E::PolicyViolation => KafkaAction::Retry(FailureClass::Fleet),
        _ => KafkaAction::Retry(FailureClass::Transient),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_codes_sort_into_their_classes() {
        assert_eq!(redis_class(Some("WRONGTYPE")), FailureClass::Message);
        for code in ["NOPERM", "OOM", "NOAUTH", "ERR", "MISCONF", "SOMETHINGNEW"] {
            assert_eq!(redis_class(Some(code)), FailureClass::Fleet, "{code}");
        }
        for code in [None, Some("LOADING"), Some("READONLY"), Some("TRYAGAIN"), Some("MASTERDOWN")] {
            assert_eq!(redis_class(code), FailureClass::Transient, "{code:?}");
        }
    }

    #[test]
    fn kafka_codes_sort_into_their_actions() {
        use RDKafkaErrorCode as E;
        assert_eq!(kafka_action(E::Fatal), KafkaAction::ReplaceProducer);
        assert_eq!(kafka_action(E::MessageSizeTooLarge), KafkaAction::Retry(FailureClass::Message));
        assert_eq!(kafka_action(E::UnknownTopicOrPartition), KafkaAction::Retry(FailureClass::Fleet));
        assert_eq!(kafka_action(E::TopicAuthorizationFailed), KafkaAction::Retry(FailureClass::Fleet));
        assert_eq!(kafka_action(E::MessageTimedOut), KafkaAction::Retry(FailureClass::Transient));
        assert_eq!(kafka_action(E::BrokerTransportFailure), KafkaAction::Retry(FailureClass::Transient));
    }
}
