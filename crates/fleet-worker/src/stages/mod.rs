//! The stages a message passes, in order: [`source`] → [`admission`] →
//! [`batch`] → [`cache`] → [`engine`] → [`sink`]. Each is a struct of its
//! inputs, outputs and dependencies with one `run`, joined to the next by a
//! bounded channel. [`handover`] is how a new model version reaches them:
//! each stage takes its part of it as the handover passes down the path.

pub mod admission;
pub mod batch;
pub mod cache;
pub mod engine;
pub mod handover;
pub mod sink;
pub mod source;
