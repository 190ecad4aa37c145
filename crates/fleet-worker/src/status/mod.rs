//! What the worker says about itself: its probes ([`health`], served by
//! [`endpoints`]), and every second its backlog, drain rate, lag and GPU
//! memory ([`reporter`], from [`backlog`], [`drain_rate`], [`gpu`]), and
//! whether Redis forgot what the fleet wrote ([`redis_memory`]).

pub mod backlog;
pub mod drain_rate;
pub mod endpoints;
pub mod gpu;
pub mod health;
pub mod redis_memory;
pub mod reporter;
