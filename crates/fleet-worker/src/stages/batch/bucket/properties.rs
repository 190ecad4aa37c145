//! The bucket batcher's rules as properties over random arrivals and
//! limits: nothing lost or duplicated, every batch within its budgets and
//! one bucket, nothing held past its wait.

use super::*;
use crate::core::batch::Batch;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// One random event: a request arriving, or time passing with a poll.
#[derive(Debug, Clone)]
enum Event {
    Push { len: usize, ttl_ms: u64 },
    Advance { ms: u64 },
    Observe { bucket: usize, ms: u64 },
    Cap { bucket: usize, rows: usize },
}

fn events() -> impl Strategy<Value = Vec<Event>> {
    let event = prop_oneof![
        4 => (1usize..=140, 1u64..200).prop_map(|(len, ttl_ms)| Event::Push { len, ttl_ms }),
        2 => (0u64..15).prop_map(|ms| Event::Advance { ms }),
        1 => (0usize..4, 0u64..30).prop_map(|(bucket, ms)| Event::Observe { bucket, ms }),
        1 => (0usize..4, 0usize..6).prop_map(|(bucket, rows)| Event::Cap { bucket, rows }),
    ];
    proptest::collection::vec(event, 0..120)
}

fn arbitrary_limits() -> impl Strategy<Value = BucketLimits> {
    (1usize..8, 128usize..600, 128usize * 128..128 * 128 * 4, proptest::collection::vec(0u64..25, 4)).prop_map(
        |(max_batch_size, max_batch_tokens, max_attention_cells, max_wait_ms)| BucketLimits {
            boundaries: vec![16, 32, 64, 128],
            max_batch_size,
            max_batch_tokens,
            max_attention_cells,
            max_wait_ms,
        },
    )
}

/// Items are (sequence number, len, deadline).
type Item = (usize, usize, u64);

struct Run {
    /// Each batch with the row cap of its bucket when it left.
    batches: Vec<(u64, Batch<Item>)>,
    caps_at_batch: Vec<usize>,
    expired: Vec<(u64, Item)>,
    pushed: Vec<(u64, Item)>,
    input_stopped_ms: u64,
}

/// Drives a batcher through `events`, polling after each until no batch
/// is due (as the worker does), then lets time run out with no input.
fn drive(limits: &BucketLimits, events: &[Event]) -> (Run, BucketBatcher<Item>) {
    let mut b = BucketBatcher::new(limits.clone());
    let mut run = Run { batches: vec![], caps_at_batch: vec![], expired: vec![], pushed: vec![], input_stopped_ms: 0 };
    let mut now = 0u64;
    let drain = |b: &mut BucketBatcher<Item>, now: u64, run: &mut Run| loop {
        let p = b.poll(now);
        run.expired.extend(p.expired.into_iter().map(|i| (now, i)));
        match p.batch {
            Some(batch) => {
                run.caps_at_batch.push(b.row_cap(batch.bucket));
                run.batches.push((now, batch));
            }
            None => break p.wake_at_ms,
        }
    };
    for (seq, event) in events.iter().enumerate() {
        match *event {
            Event::Push { len, ttl_ms } => {
                let item = (seq, len, now + ttl_ms);
                b.push(item, len, now + ttl_ms, now);
                run.pushed.push((now, item));
            }
            Event::Advance { ms } => now += ms,
            Event::Observe { bucket, ms } => b.observe_inference(bucket, ms as f64),
            Event::Cap { bucket, rows } => b.cap_rows(bucket, rows),
        }
        drain(&mut b, now, &mut run);
    }
    // Input stops: follow the batcher's own wake-ups.
    run.input_stopped_ms = now;
    while let Some(wake) = drain(&mut b, now, &mut run) {
        now = wake.max(now + 1);
    }
    (run, b)
}

proptest! {
    #[test]
    fn no_request_is_lost_or_duplicated(limits in arbitrary_limits(), events in events()) {
        let (run, b) = drive(&limits, &events);
        prop_assert!(b.is_empty());
        let mut out: Vec<usize> = run.batches.iter().flat_map(|(_, batch)| batch.items.iter().map(|i| i.0)).collect();
        out.extend(run.expired.iter().map(|(_, i)| i.0));
        out.sort_unstable();
        let mut pushed: Vec<usize> = run.pushed.iter().map(|(_, i)| i.0).collect();
        pushed.sort_unstable();
        prop_assert_eq!(out, pushed);
    }

    #[test]
    fn every_batch_is_one_bucket_within_every_limit(limits in arbitrary_limits(), events in events()) {
        let (run, _) = drive(&limits, &events);
        for ((_, batch), cap) in run.batches.iter().zip(&run.caps_at_batch) {
            prop_assert!(!batch.items.is_empty());
            prop_assert!(batch.items.len() <= *cap, "{} rows over the bucket's cap {}", batch.items.len(), cap);
            prop_assert!(batch.items.iter().all(|i| limits.bucket_of(i.1) == batch.bucket));
            prop_assert_eq!(batch.lens.clone(), batch.items.iter().map(|i| i.1).collect::<Vec<_>>());
            if batch.items.len() > 1 {
                prop_assert!(limits.fits(batch.items.len(), batch.padded_len()), "{:?}", batch.lens);
            }
        }
    }

    #[test]
    fn order_is_fifo_within_a_bucket(limits in arbitrary_limits(), events in events()) {
        let (run, _) = drive(&limits, &events);
        let mut last_seen: BTreeMap<usize, usize> = BTreeMap::new();
        for (_, batch) in &run.batches {
            for item in &batch.items {
                if let Some(prev) = last_seen.insert(batch.bucket, item.0) {
                    prop_assert!(prev < item.0, "bucket {} gave {} after {}", batch.bucket, item.0, prev);
                }
            }
        }
    }

    #[test]
    fn expired_requests_never_reach_the_model(limits in arbitrary_limits(), events in events()) {
        let (run, _) = drive(&limits, &events);
        for (at, batch) in &run.batches {
            prop_assert!(batch.items.iter().all(|i| i.2 > *at), "a batch at {} holds a request past its deadline", at);
        }
        for (at, item) in &run.expired {
            prop_assert!(item.2 <= *at + 30, "{item:?} expired at {at} although 30 ms is the largest estimate");
        }
    }

    #[test]
    fn when_input_stops_everything_leaves_within_its_max_wait(limits in arbitrary_limits(), events in events()) {
        let (run, _) = drive(&limits, &events);
        let left_at: BTreeMap<usize, u64> = run
            .batches
            .iter()
            .flat_map(|(at, batch)| batch.items.iter().map(move |i| (i.0, *at)))
            .chain(run.expired.iter().map(|(at, i)| (i.0, *at)))
            .collect();
        let seen: BTreeSet<usize> = left_at.keys().copied().collect();
        prop_assert_eq!(seen.len(), run.pushed.len());
        let stopped = run.input_stopped_ms;
        for (arrived, item) in &run.pushed {
            let left = left_at[&item.0];
            // Held when input stopped: gone by the end of its bucket's wait.
            if left >= stopped {
                let bound = stopped.max(arrived + limits.max_wait_ms[limits.bucket_of(item.1)]);
                prop_assert!(left <= bound, "{:?} arrived {}, left {}, bound {}", item, arrived, left, bound);
            }
        }
    }
}
