//! The fleet worker: consumes `infer.<model>`, answers into Redis.
//!
//! Modules follow a request's path: [`source`] (Kafka, offsets) →
//! [`admission`] (validation, deadlines, image headers) → [`tokenize`] or
//! image decode under the [`decode_budget`] → [`batcher`] (pure)
//! → [`engine`] (libtorch) → [`sink`] (Redis, DLQ; [`failure`] sorts what
//! a retry can cure), wired by [`pipeline`], with [`guard`] containing a
//! panic to the one message it came from,
//! with [`config`], [`repository`] and [`metrics`] beside them. The
//! engine thread ([`serve`]) splits batches that do not fit in device
//! memory ([`split`], [`memory`]); the [`watcher`] loads new model versions
//! beside the serving one and swaps them in ([`lifecycle`] decides which).

pub mod admission;
pub mod batcher;
pub mod cache;
pub mod commit;
pub mod config;
pub mod decode_budget;
pub mod drain;
pub mod engine;
pub mod failure;
pub mod flow;
pub mod gpu;
pub mod guard;
pub mod health;
pub mod in_flight_limit;
pub mod lifecycle;
pub mod memory;
pub mod message;
pub mod metrics;
pub mod model;
pub mod pipeline;
pub mod precision;
pub mod repository;
pub(crate) mod serve;
pub mod sink;
pub mod source;
pub mod split;
pub mod tokenize;
pub(crate) mod watcher;
