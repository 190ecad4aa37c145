//! How every fleet binary (worker, producer CLI, lag exporter, benches)
//! connects to Kafka and Redis, so each takes the same settings the same
//! way and none of them prints a secret:
//!
//! - [`kafka`]: brokers, a librdkafka properties file (for what must not be
//!   on a command line, e.g. `sasl.password`), the TLS and SASL settings of
//!   [`kafka_security`], then `--kafka-property` overrides; [`kafka_check`]
//!   makes the first contact fail fast with the reason;
//! - [`redis`]: a `redis://` or `rediss://` URL (ACL user and password may
//!   be in it), a private CA for TLS, a client certificate for mutual TLS,
//!   one server or a Redis Cluster;
//! - [`namespace`]: the prefixes of topics, groups and Redis keys;
//! - [`acl`]: the Redis ACL rules of the worker and client users.

pub mod acl;
pub mod kafka;
pub mod kafka_check;
pub mod kafka_security;
pub mod namespace;
pub mod redis;
