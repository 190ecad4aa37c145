//! The bucket batcher's rules, by example (its properties: `properties.rs`).

use super::*;

fn limits() -> BucketLimits {
    BucketLimits {
        boundaries: vec![16, 32, 64, 128],
        max_batch_size: 4,
        max_batch_tokens: 256,
        max_attention_cells: 128 * 128,
        max_wait_ms: vec![5, 5, 10, 20],
    }
}

#[test]
fn buckets_by_length_and_pads_to_the_longest_member() {
    let mut b = BucketBatcher::new(limits());
    b.push("short", 10, 1_000, 0);
    b.push("long", 100, 1_000, 0);
    b.push("short2", 12, 1_000, 0);
    let p = b.poll(5);
    let batch = p.batch.unwrap();
    assert_eq!(batch.items, vec!["short", "short2"]);
    assert_eq!(batch.padded_len(), 12);
    assert_eq!(batch.computed_tokens(), 24);
    assert!((batch.padding_efficiency() - 22.0 / 24.0).abs() < 1e-9);
    assert_eq!(p.wake_at_ms, Some(20), "the long one waits for its own bucket's max_wait");
    assert!(b.poll(19).batch.is_none());
    assert_eq!(b.poll(20).batch.unwrap().items, vec!["long"]);
}

fn push_lane(b: &mut BucketBatcher<&'static str>, item: &'static str, len: usize, lane: Lane) {
    b.push_in_lane(item, len, 1, 1_000_000, 0, lane);
}

#[test]
fn interactive_rows_go_first_in_their_bucket_and_bulk_fills_what_is_left() {
    let mut b = BucketBatcher::new(limits());
    push_lane(&mut b, "bulk-1", 8, Lane::Bulk);
    push_lane(&mut b, "bulk-2", 8, Lane::Bulk);
    push_lane(&mut b, "person-1", 8, Lane::Interactive);
    push_lane(&mut b, "bulk-3", 8, Lane::Bulk);
    push_lane(&mut b, "person-2", 8, Lane::Interactive);
    assert_eq!(b.poll(0).batch.unwrap().items, vec!["person-1", "person-2", "bulk-1", "bulk-2"]);
    assert_eq!(b.flush(0).batch.unwrap().items, vec!["bulk-3"]);
}

#[test]
fn without_fill_an_interactive_batch_takes_interactive_rows_only() {
    let mut b = BucketBatcher::new(limits()).with_bulk_fill(false);
    push_lane(&mut b, "bulk-1", 8, Lane::Bulk);
    push_lane(&mut b, "person-1", 8, Lane::Interactive);
    push_lane(&mut b, "bulk-2", 8, Lane::Bulk);
    assert!(b.poll(0).batch.is_none(), "one interactive row, not waited out, is not a full batch");
    assert_eq!(b.poll(5).batch.unwrap().items, vec!["person-1"]);
    assert_eq!(b.poll(5).batch.unwrap().items, vec!["bulk-1", "bulk-2"], "then the bulk rows, alone");
}

#[test]
fn a_due_interactive_bucket_goes_before_bulk_ones_which_keep_their_share() {
    let mut b = BucketBatcher::new(limits()).with_bulk_share(0.25);
    for _ in 0..40 {
        push_lane(&mut b, "bulk", 8, Lane::Bulk);
        push_lane(&mut b, "person", 100, Lane::Interactive);
    }
    // Every batch is full (4 rows); interactive and bulk batches are both
    // due at every poll: bulk gets 1 in 4.
    let lanes: Vec<&str> = (0..8).map(|_| b.poll(0).batch.unwrap().items[0]).collect();
    assert_eq!(lanes, vec!["person", "person", "person", "bulk", "person", "person", "person", "bulk"]);
}

#[test]
fn bulk_behind_interactive_rows_of_its_own_bucket_still_gets_its_share() {
    let mut b = BucketBatcher::new(limits()).with_bulk_share(0.25);
    for _ in 0..40 {
        push_lane(&mut b, "bulk", 8, Lane::Bulk);
        push_lane(&mut b, "person", 8, Lane::Interactive);
    }
    let batches: Vec<Vec<&str>> = (0..4).map(|_| b.poll(0).batch.unwrap().items).collect();
    assert_eq!(batches[3], vec!["bulk"; 4], "the bulk turn takes bulk rows, not the interactive ones before them");
    assert!(batches[..3].iter().all(|batch| batch == &vec!["person"; 4]), "{batches:?}");
}

#[test]
fn held_back_bulk_waits_while_interactive_goes_and_a_flush_takes_it_anyway() {
    let mut b = BucketBatcher::new(limits());
    for _ in 0..4 {
        push_lane(&mut b, "bulk", 8, Lane::Bulk);
    }
    push_lane(&mut b, "person", 100, Lane::Interactive);
    b.hold_back_bulk(true);
    assert!(b.holds(Lane::Bulk) && b.holds(Lane::Interactive));
    assert_eq!(b.next_wake_ms(0), Some(20), "only the interactive bucket's wait wakes a poll");
    assert!(b.poll(0).batch.is_none(), "bulk is full but held back; the interactive one has not waited out");
    assert_eq!(b.poll(20).batch.unwrap().items, vec!["person"]);
    assert!(b.poll(20).batch.is_none());
    // Held back, bulk still gets its share of the turns interactive
    // batches are due for (1 in 10 by default).
    let mut contested = BucketBatcher::new(limits());
    for _ in 0..40 {
        push_lane(&mut contested, "bulk", 8, Lane::Bulk);
        push_lane(&mut contested, "person", 100, Lane::Interactive);
    }
    contested.hold_back_bulk(true);
    let firsts: Vec<&str> = (0..10).map(|_| contested.poll(0).batch.unwrap().items[0]).collect();
    assert_eq!(firsts.iter().filter(|&&f| f == "bulk").count(), 1, "{firsts:?}");
    b.hold_back_bulk(false);
    assert!(b.has_due_batch(20));
    assert_eq!(b.poll(20).batch.unwrap().items.len(), 4);
    push_lane(&mut b, "late-bulk", 8, Lane::Bulk);
    b.hold_back_bulk(true);
    assert_eq!(b.flush(20).batch.unwrap().items, vec!["late-bulk"], "a flush (the drain) forms it");
}

#[test]
fn removed_requests_leave_the_count_and_come_back_in_order() {
    let mut b = BucketBatcher::new(limits());
    for (item, len) in [("a", 8), ("x", 100), ("b", 8), ("y", 20)] {
        b.push(item, len, 1_000, 0);
    }
    assert_eq!(b.remove_where(|item| ["x", "y", "b"].contains(item)), vec!["b", "y", "x"]);
    assert_eq!(b.len(), 1);
    let mut batch = b.flush(0).batch.unwrap();
    assert_eq!(batch.items, vec!["a"]);
    assert_eq!(batch.remove_where(|item| *item == "a"), vec!["a"]);
    assert!(batch.items.is_empty() && batch.lens.is_empty());
}

#[test]
fn a_full_batch_leaves_without_waiting() {
    let mut b = BucketBatcher::new(limits());
    for i in 0..5 {
        b.push(i, 8, 1_000, 0);
    }
    let batch = b.poll(0).batch.unwrap();
    assert_eq!(batch.items, vec![0, 1, 2, 3]);
    assert!(b.poll(0).batch.is_none(), "one left, not full, not waited out");
}

#[test]
fn the_token_and_attention_budgets_cap_rows() {
    let mut tokens = limits();
    tokens.max_attention_cells = usize::MAX;
    let mut b = BucketBatcher::new(tokens);
    for i in 0..4 {
        b.push(i, 100, 1_000, 0); // 2 × 100 = 200 tokens fit, 3 × 100 do not
    }
    assert_eq!(b.poll(0).batch.unwrap().items, vec![0, 1]);
    let mut cells = limits();
    cells.max_attention_cells = 3 * 60 * 60;
    let mut b = BucketBatcher::new(cells);
    for i in 0..4 {
        b.push(i, 60, 1_000, 0);
    }
    assert_eq!(b.poll(0).batch.unwrap().items.len(), 3);
}

#[test]
fn a_single_long_request_always_fits_alone() {
    let mut l = limits();
    l.max_batch_tokens = 64;
    let mut b = BucketBatcher::new(l);
    b.push("huge", 128, 1_000, 0);
    assert_eq!(b.poll(20).batch.unwrap().items, vec!["huge"]);
}

#[test]
fn the_earliest_deadline_goes_first() {
    let mut b = BucketBatcher::new(limits());
    b.push("relaxed", 10, 9_000, 0);
    b.push("urgent", 100, 500, 0);
    assert_eq!(b.poll(30).batch.unwrap().items, vec!["urgent"]);
    assert_eq!(b.poll(30).batch.unwrap().items, vec!["relaxed"]);
}

#[test]
fn deadlines_that_cannot_be_met_expire_before_compute() {
    let mut b = BucketBatcher::new(limits());
    b.observe_inference(0, 40.0);
    b.push("tight", 10, 30, 0); // 0 + 40 ms of inference > 30
    b.push("fine", 10, 1_000, 0);
    let p = b.poll(0);
    assert_eq!(p.expired, vec!["tight"]);
    assert!(p.batch.is_none());
    assert_eq!(b.poll(5).batch.unwrap().items, vec!["fine"]);
}

#[test]
fn expiring_alone_releases_no_batch_and_says_when_the_next_expiry_is() {
    let mut b = BucketBatcher::new(limits());
    b.observe_inference(0, 10.0);
    b.push("soon", 10, 50, 0);
    b.push("later", 10, 200, 0);
    assert!(b.has_due_batch(5), "waited out its 5 ms");
    assert!(!b.has_due_batch(4));
    // "soon" stops being servable at 50 - 10 ms of inference.
    assert_eq!(b.next_expiry_ms(), Some(40));
    assert!(b.expire(39).is_empty());
    assert_eq!(b.expire(40), vec!["soon"]);
    assert_eq!((b.len(), b.next_expiry_ms()), (1, Some(190)));
    assert_eq!(b.poll(40).batch.unwrap().items, vec!["later"]);
    assert_eq!((b.has_due_batch(40), b.next_expiry_ms(), b.next_wake_ms(40)), (false, None, None));
}

#[test]
fn the_most_rows_of_a_bucket_are_its_cap_within_every_budget_at_its_bound() {
    let mut b: BucketBatcher<()> = BucketBatcher::new(limits());
    // Rows, rows (4 × 64 = 256 tokens, 4 × 64² cells), then tokens and
    // cells (one row of 128: 128 × 128 cells).
    assert_eq!((0..4).map(|bucket| b.most_rows(bucket)).collect::<Vec<_>>(), vec![4, 4, 4, 1]);
    b.cap_rows(1, 3);
    b.set_batch_percent(50);
    // Half the rows and tokens: 2 rows, 2 × 64 = 128 tokens.
    assert_eq!((0..4).map(|bucket| b.most_rows(bucket)).collect::<Vec<_>>(), vec![2, 2, 2, 1]);
    b.set_batch_percent(100);
    assert_eq!(b.most_rows(1), 3);
}

#[test]
fn a_row_cap_after_out_of_memory_shrinks_later_batches_of_that_bucket_only() {
    let mut b = BucketBatcher::new(limits());
    b.cap_rows(0, 2);
    b.cap_rows(0, 3);
    assert_eq!(b.row_cap(0), 2, "caps only go down");
    b.cap_rows(1, 0);
    assert_eq!(b.row_cap(1), 1, "a single request always fits a batch");
    for i in 0..3 {
        b.push(("short", i), 10, 1_000, 0);
        b.push(("mid", i), 20, 1_000, 0);
    }
    // Two rows fill bucket 0's batch: it leaves without waiting.
    let first = b.poll(0).batch.unwrap();
    assert_eq!((first.bucket, first.items.len()), (0, 2));
    let mut sizes: Vec<(usize, usize)> = Vec::new();
    while let Some(batch) = b.flush(10).batch {
        sizes.push((batch.bucket, batch.items.len()));
    }
    assert_eq!(sizes, vec![(0, 1), (1, 1), (1, 1), (1, 1)]);
}

#[test]
fn validation_names_the_bad_key() {
    let mut l = limits();
    l.max_batch_tokens = 64;
    assert_eq!(l.validate(128).unwrap_err().key, "batching.max_batch_tokens");
    let mut l = limits();
    l.boundaries = vec![16, 16, 128, 256];
    assert_eq!(l.validate(128).unwrap_err().key, "batching.buckets");
    assert_eq!(limits().validate(256).unwrap_err().key, "batching.buckets");
    assert!(limits().validate(128).is_ok());
}

#[test]
fn retain_drops_held_requests_and_batch_rows_with_their_lengths() {
    let mut b = BucketBatcher::new(limits());
    for (i, len) in [5usize, 20, 6, 70].into_iter().enumerate() {
        b.push(i, len, 10_000, 0);
    }
    assert_eq!(b.retain(|&i| i % 2 == 0), 2);
    assert_eq!(b.len(), 2);
    let batch = b.flush(1).batch.expect("a batch");
    assert_eq!(batch.items, vec![0, 2]);
    let mut batch = Batch { bucket: 0, items: vec![1, 2, 3], lens: vec![10, 20, 30] };
    assert_eq!(batch.retain(|&i| i != 2), 1);
    assert_eq!((batch.items, batch.lens), (vec![1, 3], vec![10, 30]));
}

#[test]
fn an_item_of_many_rows_counts_them_all_and_stays_whole() {
    let mut b = BucketBatcher::new(limits());
    b.push_rows("three pairs", 10, 3, 1_000, 0);
    b.push_rows("two pairs", 12, 2, 1_000, 0);
    b.push("one text", 9, 1_000, 0);
    // 3 + 2 rows exceed max_batch_size 4: the first goes without the second.
    let first = b.poll(0).batch.unwrap();
    assert_eq!(first.items, vec!["three pairs"], "a full batch leaves at once");
    let second = b.poll(5).batch.unwrap();
    assert_eq!(second.items, vec!["two pairs", "one text"], "2 + 1 rows fit");
    b.push_rows("too many pairs", 10, 9, 1_000, 10);
    assert_eq!(b.poll(10).batch.unwrap().items, vec!["too many pairs"], "alone, never split or stuck");
}

#[test]
fn a_batch_share_scales_both_the_row_and_the_token_budget() {
    // Rows: 4 at 100 %, 2 at 50 %.
    let mut b = BucketBatcher::new(limits()).with_batch_percent(50);
    for item in ["a", "b", "c"] {
        b.push(item, 10, 1_000, 0);
    }
    assert_eq!(b.row_cap(0), 2);
    assert_eq!(b.flush(0).batch.unwrap().items, vec!["a", "b"]);
    // Tokens: 256 at 100 % (two rows of 70), 128 at 50 % (one).
    let mut b = BucketBatcher::new(limits()).with_batch_percent(50);
    b.push("long", 70, 1_000, 0);
    b.push("long2", 70, 1_000, 0);
    assert_eq!(b.flush(0).batch.unwrap().items, vec!["long"]);
    // Back at 100 %, both go together; a single row always goes.
    b.set_batch_percent(100);
    b.push("long3", 70, 1_000, 0);
    assert_eq!(b.flush(0).batch.unwrap().items, vec!["long2", "long3"]);
    b.set_batch_percent(1);
    b.push("alone", 128, 1_000, 0);
    assert_eq!(b.flush(0).batch.unwrap().items, vec!["alone"]);
}
