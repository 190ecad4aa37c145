//! Load tests, fault drills and capacity runs for the fleet.
//!
//! Pure parts ([`profile`], [`ledger`], [`timeline`], [`plan`],
//! [`workload`]) are apart from the I/O: [`runner`] sends on the profile's
//! clock and collects answers ([`collect`]), [`fleet`] starts processes on
//! this machine for [`drill`]s, and [`report`] writes CSVs and [`plot`]s.
//! A [`soak`] runs that fleet for hours with faults on a schedule. A
//! benchmark prints the [`machine`] it ran on beside its results.

pub mod admission_bench;
pub mod bulk_answers_bench;
pub mod capacity;
pub mod collect;
pub mod drill;
pub mod fleet;
pub mod lanes_bench;
pub mod ledger;
pub mod machine;
pub mod peer_bench;
pub mod plan;
pub mod plot;
pub mod profile;
pub mod report;
pub mod runner;
pub mod soak;
pub mod timeline;
pub mod workload;
