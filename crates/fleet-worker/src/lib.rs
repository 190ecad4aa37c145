//! The fleet worker: consumes `infer.<model>` (interactive) and
//! `infer.<model>.bulk` (bulk), answers into Redis or onto the lane's
//! answers topic on Kafka, as each request's reply says.
//!
//! # Layout
//!
//! The folders are the path a message takes. [`worker`] builds the stages
//! and joins them by bounded channels; each stage is a struct with one
//! `run`:
//!
//! - [`stages::source`]: the Kafka consumer, one queue per partition; the
//!   message copy; the commit watermark and the ledger of what is in flight.
//! - [`stages::admission`]: reads while the flow bounds allow; validation,
//!   deadlines and the stable error codes; tokenization, or image decode
//!   under the memory budget.
//! - [`stages::batch`]: the pure length-bucket batcher and the task that
//!   owns it, answering `expired` what can no longer be served in time.
//! - [`stages::cache`]: answers from the feature cache what was computed
//!   before; the rest goes on.
//! - [`stages::engine`]: the engine thread running batches on the serving
//!   version (libtorch, split when out of memory), swapping versions; the
//!   module read as its config's signature and task say.
//! - [`stages::sink`]: answers into Redis and onto the answers topics,
//!   dead letters to the DLQ topic, each failure sorted by whether a retry
//!   can cure it.
//!
//! Beside the path: [`job`] (what travels between stages), [`versions`]
//! (repository, lifecycle, the one load path, the watcher), [`status`]
//! (probes, backlog and lag reports, drain rate, GPU memory), [`config`],
//! [`metrics`], [`heap`] (the C heap's bytes in use, and its trim),
//! [`kernel_caches`] (libtorch's per-shape kernel caches, bounded at start),
//! [`serving`] (the version answers are tagged with),
//! [`shutdown`] and [`guard`] (a panic stays one message's failure).

pub mod config;
pub mod guard;
pub mod heap;
pub mod job;
pub mod kernel_caches;
pub mod metrics;
pub mod serving;
pub mod shutdown;
pub mod stages;
pub mod status;
pub mod versions;
pub mod worker;
