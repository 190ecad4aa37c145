//! The producer side of the fleet, for services that send inference requests.
//!
//! [`FleetProducer`] writes one Kafka message per (request, model) in the
//! CloudEvents binary layout of `fleet-proto`, keeping many sends in flight;
//! [`ResultClient`] reads the answers back from Redis, either by polling or by
//! blocking on the request's ready list, and cancels jobs. [`topics`] holds
//! the one place where topic settings are decided; [`bulk_file`] turns a
//! file's lines into bulk requests; [`jobs`] records a bulk job and
//! collects its answers from Kafka into a file. This crate must never depend on libtorch:
//! producers embed it.

pub mod admission;
pub mod bulk_file;
pub mod jobs;
pub mod kafka_config;
pub mod producer;
pub mod request;
pub mod results;
pub mod summary;
pub mod topics;

pub use admission::{BacklogGuard, Overloaded};
pub use kafka_config::KafkaConfig;
pub use producer::{Delivery, FleetProducer, SendError};
pub use request::Request;
pub use results::{ResultClient, ResultError};
