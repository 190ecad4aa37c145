//! The wall clock as the fleet's timestamps use it: Unix milliseconds, the
//! unit of `created_ms`, `deadline_ms` and the backlog reports. The only
//! clock read in this crate; its rules take the time as an argument.

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 for a clock set before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
