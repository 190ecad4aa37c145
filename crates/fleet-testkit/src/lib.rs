//! Real servers for integration tests: a nisshi broker and a redis-server on
//! free ports, each stopped when its handle drops, and the helpers that
//! send requests to them and read what comes back. Shared by every crate
//! whose tests talk to Kafka or Redis, so they all start them and read
//! them the same way.
//!
//! # Layout
//!
//! - The servers: [`broker`] (nisshi, in memory or on a [`postgres`]
//!   database), [`redis_server`] (one server, a cluster, mutual TLS with
//!   [`tls`] certificates), on the [`process`] helpers (ports, logs,
//!   signals, a handle that kills its process).
//! - What goes in: [`corpus`] (the text), [`requests`] (many requests at
//!   once), [`raw`] (messages the Rust clients will not build).
//! - What comes out: [`redis_answers`] and [`answers`] (answers in Redis and
//!   on Kafka), [`dlq`] (dead letters), [`offsets`] (what a consumer group
//!   committed), [`scrape`] (an HTTP GET and the samples of a /metrics
//!   scrape).

pub mod answers;
pub mod broker;
pub mod corpus;
pub mod dlq;
pub mod offsets;
pub mod postgres;
pub mod process;
pub mod raw;
pub mod redis_answers;
pub mod redis_server;
pub mod requests;
pub mod scrape;
pub mod tls;

pub use broker::{Broker, Storage};
pub use postgres::PostgresDatabase;
pub use process::{free_port, log_file, signal, wait_for_port, Killed};
pub use redis_server::{Redis, RedisCluster, TlsRedis};
pub use scrape::{http_get, metric_value, present_metric_value};
pub use tls::TestCertificates;
