//! The soak: the fleet on this machine for as long as asked (minutes to
//! days) under steady open-loop load of texts and images, with faults on a
//! schedule, every worker sampled every interval, and at the end a report
//! and a verdict against budgets.
//!
//! Pure parts: [`schedule`] (which fault when, the arrivals with their
//! bursts), [`samples`] (a worker's scrape read into one row), [`books`]
//! (the ledger per partition, latency per interval), [`verdict`] (the
//! budgets), judged with [`memory`] (RSS growth) and [`recovery`] (p99
//! after a fault). I/O: [`run`] (the fleet, the load, the faults, the sampler),
//! [`report`] and [`plot`] (what the run leaves behind).

pub mod books;
pub mod memory;
pub mod plot;
pub mod recovery;
pub mod report;
pub mod run;
pub mod samples;
pub mod schedule;
pub mod verdict;
