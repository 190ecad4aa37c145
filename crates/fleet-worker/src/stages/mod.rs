//! The stages a message passes, in order: [`source`] → [`admission`] →
//! [`batch`] → [`cache`] → [`engine`] → [`sink`]. Each is a struct of its
//! inputs, outputs and dependencies with one `run`, joined to the next by a
//! bounded channel. [`cancel`] is what the stages share about cancelled jobs.

pub mod admission;
pub mod batch;
pub mod cache;
pub mod cancel;
pub mod engine;
pub mod sink;
pub mod source;
