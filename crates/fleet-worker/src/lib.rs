//! The fleet worker: consumes `infer.<model>` (interactive) and
//! `infer.<model>.bulk` (bulk), answers into Redis or onto the lane's
//! answers topic on Kafka, as each request's reply says.
//!
//! # Layout
//!
//! The modules stand on floors, and imports run downward only
//! (`scripts/check-layout.py` fails `make test` on one that runs back up):
//!
//! 1. Foundations: [`metrics`] (the series' names, a contract), [`guard`]
//!    (a panic stays one message's failure), [`shutdown`], [`heap`] (the C
//!    heap's bytes in use, and its trim), [`backoff`] (the one retry pace).
//! 2. Settings: [`config`] (command line; a model's `config.toml` with its
//!    batching limits and device), [`kernel_caches`] (libtorch's per-shape
//!    caches, bounded at start).
//! 3. [`core`]: what the stages share. The job that travels between them
//!    (the consumed message, the model input, the batch), the precision and
//!    serving version answers are tagged with, and the state several tasks
//!    read and write: health facts, cancel tracking, batches ahead.
//! 4. [`stages`]: the path a message takes, one folder a stage, each a
//!    struct with one `run`, joined to the next by a bounded channel.
//! 5. [`versions`]: the model repository, which version serves, the one
//!    load path, the watcher that swaps new versions in.
//! 6. [`status`]: what the worker says about itself: probes, backlog and
//!    lag reports, drain rate, lost-data detection, GPU memory.
//! 7. [`worker`]: the wiring: builds each stage, joins them, runs them and
//!    drains them.
//!
//! # A message's path
//!
//! [`stages::source`] reads it from its partition's queue and tracks it
//! in flight (the ledger, the commit watermark); [`stages::admission`]
//! reads while the flow bounds allow, validates it (stable error codes,
//! deadlines, cancelled jobs) and tokenizes it or decodes its image under
//! the memory budget; [`stages::batch`] holds it in its length bucket
//! until a batch is due (answering `expired` what can no longer be served
//! in time); [`stages::cache`] answers from the feature cache what was
//! computed before; [`stages::engine`] runs the batch on the serving
//! version on a thread of its own (split when out of memory, swapping
//! versions between batches); [`stages::sink`] writes the answer to Redis
//! and/or the answers topic, or a dead letter, and only then lets the
//! source commit the offset. A new version travels the same path as a
//! [`stages::handover`], so every message is served wholly by one version.

pub mod backoff;
pub mod config;
pub mod core;
pub mod guard;
pub mod heap;
pub mod kernel_caches;
pub mod metrics;
pub mod shutdown;
pub mod stages;
pub mod status;
pub mod versions;
pub mod worker;
