//! What the worker says about itself: its [`probes`] (judging the facts of
//! `core::health`, served by [`endpoints`]), and every second its backlog, drain rate, lag and GPU
//! memory ([`reporter`], from [`backlog`], [`drain_rate`], [`gpu`]), and
//! whether Redis forgot what the fleet wrote ([`lost_data`]).

pub mod backlog;
pub mod drain_rate;
pub mod endpoints;
pub mod gpu;
pub mod lost_data;
pub mod probes;
pub mod reporter;
