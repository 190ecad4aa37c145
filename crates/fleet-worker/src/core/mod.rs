//! What the stages, the version lifecycle and the probes share, one floor
//! below all of them: the [`job`] that travels between stages with its
//! [`batch`],
//! [`message`] (the consumed Kafka message) and model [`input`]; the
//! [`precision`] a version computes in and the [`serving`] version answers
//! are tagged with; and the state several tasks read and write: [`health`]
//! (what the probes judge), [`cancel_tracking`] (which jobs are cancelled)
//! and [`batches_ahead`] (how many batches wait past the batch stage).

pub mod batch;
pub mod batches_ahead;
pub mod cancel_tracking;
pub mod health;
pub mod input;
pub mod job;
pub mod message;
pub mod precision;
pub mod serving;
