//! The C heap (glibc's malloc), where libtorch's tensors live: what it
//! holds in use, as a gauge, and a trim on a period that hands the pages
//! it holds free back to the kernel.
//!
//! Why: in a two-hour soak a text worker's RSS climbed in steps, at model
//! swaps and bursts, while the bytes its heap held *in use* stayed nearly
//! flat (glibc's own counters; the figures are in docs/soak.md). Not a leak: freed
//! memory kept in the allocator's arenas. Nearly every batch has a shape
//! of its own (rows × its longest text), so its tensors have sizes of
//! their own; freed blocks seldom fit the next request whole, pile up as
//! fragments, and glibc gives memory back only from the top of a heap.
//! `malloc_trim(0)` also releases the free pages inside every arena, a
//! few milliseconds with each arena locked in turn.
//!
//! `fleet_heap_in_use_bytes` tells an operator which it is when RSS grows:
//! a leak grows what is in use; retention grows only RSS.

use crate::metrics::{HEAP_IN_USE_BYTES, HEAP_TRIMMED_BYTES_TOTAL, HEAP_TRIM_SECONDS};
use std::time::{Duration, Instant};

/// How often the figures are read when trimming is off.
const FIGURES_EVERY: Duration = Duration::from_secs(30);

/// Every `trim_every` (or every 30 s without a trim when `None`): the
/// heap's bytes in use to the gauge, then the trim and what it released.
/// Runs until aborted.
pub async fn keep_trimmed(trim_every: Option<Duration>) {
    let mut tick = tokio::time::interval(trim_every.unwrap_or(FIGURES_EVERY));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is at once: the figures are there from the first scrape.
    loop {
        tick.tick().await;
        let trim = trim_every.is_some();
        match tokio::task::spawn_blocking(move || look_and_trim(trim)).await {
            Ok(Some(Trimmed { released, took })) => {
                metrics::counter!(HEAP_TRIMMED_BYTES_TOTAL).increment(released);
                metrics::histogram!(HEAP_TRIM_SECONDS).record(took.as_secs_f64());
                tracing::debug!(released_bytes = released, took_ms = took.as_secs_f64() * 1e3, "heap trimmed");
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "the heap figures could not be read"),
        }
    }
}

/// What one trim did.
#[derive(Debug, PartialEq)]
struct Trimmed {
    /// Resident bytes that went back to the kernel.
    released: u64,
    took: Duration,
}

/// Sets the gauge; with `trim`, trims and says what that did.
fn look_and_trim(trim: bool) -> Option<Trimmed> {
    if let Some(in_use) = in_use_bytes() {
        metrics::gauge!(HEAP_IN_USE_BYTES).set(in_use as f64);
    }
    if !trim {
        return None;
    }
    let before = resident_bytes()?;
    let started = Instant::now();
    release_free_pages();
    let took = started.elapsed();
    let after = resident_bytes()?;
    Some(Trimmed { released: before.saturating_sub(after), took })
}

/// Bytes handed out by malloc and not freed: in the arenas and in blocks
/// of their own (mmap). `None` off glibc.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn in_use_bytes() -> Option<u64> {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    let info = unsafe { libc::mallinfo2() };
    Some((info.uordblks + info.hblkhd) as u64)
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn in_use_bytes() -> Option<u64> {
    None
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_free_pages() {
    // SAFETY: malloc_trim only returns free pages to the kernel; it is
    // thread-safe (each arena is locked while it is trimmed).
    unsafe { libc::malloc_trim(0) };
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_free_pages() {}

/// The process's resident bytes (`/proc/self/statm`, pages × page size).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf only reads a system constant.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(page).ok().map(|page| pages * page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn what_is_allocated_counts_as_in_use_until_freed() {
        // 256 MiB, judged to half of it: other tests allocate and free
        // beside this one, never that much. Zeroed, so no page is touched.
        const BLOCK: u64 = 256 << 20;
        let before = in_use_bytes().unwrap();
        // black_box: an allocation nothing reads may be optimised away.
        let block = std::hint::black_box(vec![0u8; BLOCK as usize]);
        let holding = in_use_bytes().unwrap();
        assert!(holding >= before + BLOCK / 2, "{before} then {holding} bytes in use");
        drop(block);
        let after = in_use_bytes().unwrap();
        assert!(after + BLOCK / 2 <= holding, "{holding} then {after} bytes in use");
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn a_trim_hands_freed_fragments_back_and_keeps_what_is_in_use() {
        // 64 KiB blocks (under glibc's mmap threshold, so they come from an
        // arena, and far over its small-block caches), every other one
        // freed: 32 MiB of holes between kept blocks of the same size,
        // which free() cannot hand back (it returns only the top of a
        // heap), as after a run of batches of many shapes. The kept blocks
        // are as large as the holes, so what earlier tests left free in
        // the arena cannot take them and put the freed ones side by side.
        // Judged to half: other tests allocate beside this one, never tens
        // of MiB of touched pages.
        const BLOCK: usize = 64 << 10;
        const PAIRS: usize = 512;
        let mut freed = Vec::with_capacity(PAIRS);
        let mut kept = Vec::with_capacity(PAIRS);
        for i in 0..PAIRS {
            // Filled, so every page is touched and resident.
            freed.push(std::hint::black_box(vec![1u8; BLOCK]));
            kept.push(std::hint::black_box(vec![i as u8; BLOCK]));
        }
        drop(std::hint::black_box(freed));
        let released = look_and_trim(true).unwrap().released;
        assert!(
            released >= (PAIRS * BLOCK / 2) as u64,
            "the trim released {released} bytes of {} freed",
            PAIRS * BLOCK
        );
        for (i, block) in kept.iter().enumerate() {
            assert!(block.iter().all(|&b| b == i as u8), "kept block {i} changed");
        }
        assert_eq!(look_and_trim(false), None);
    }
}
