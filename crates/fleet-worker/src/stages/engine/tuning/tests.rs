//! The tuner's rules, on synthetic batch timings: what it tries, in which
//! order, and what it keeps.

use super::*;

const SHORT: TrialLength = TrialLength { window_ms: 1_000.0, min_batches: 3, rounds: 2, warm_up_windows: 0 };

/// Feeds batches of 10 rows whose length depends on the settings in
/// force, until the tuner is done; the settings it ends with, and the
/// sequence of changes.
fn drive(
    tuner: &mut Tuner,
    mut batch_ms: impl FnMut(usize, u32) -> f64,
    backlog: impl Fn(usize) -> bool,
) -> ((usize, u32), Vec<Change>) {
    let (mut threads, mut percent, mut now, mut changes) = (1, 100, 0.0, Vec::new());
    for i in 0..100_000 {
        if tuner.is_done() {
            break;
        }
        let held = backlog(i);
        if !held {
            // The backlog ran out: the engine waited for work.
            now += 1_000.0;
        }
        if let Some(change) = tuner.observe(now, 10, held) {
            let setting = match &change {
                Change::Try(s) | Change::Rest(s) | Change::Settle { setting: s, .. } => *s,
            };
            match setting {
                Setting::Threads(t) => threads = t,
                Setting::BatchPercent(p) => percent = p,
            }
            changes.push(change);
        }
        now += batch_ms(threads, percent);
    }
    assert!(tuner.is_done(), "the tuner never finished");
    ((threads, percent), changes)
}

#[test]
fn keeps_the_thread_count_that_answers_most_and_tries_each_in_a_b_b_a_order() {
    let mut tuner = Tuner::new(&[1, 2], 1, &[], SHORT);
    let ((threads, _), changes) = drive(&mut tuner, |t, _| if t == 2 { 80.0 } else { 100.0 }, |_| true);
    assert_eq!(threads, 2);
    let tried: Vec<Setting> =
        changes.iter().filter_map(|c| if let Change::Try(s) = c { Some(*s) } else { None }).collect();
    let order = [1, 2, 2, 1].map(Setting::Threads);
    assert_eq!(tried, order);
    let Some(Change::Settle { rates, .. }) = changes.last() else { panic!("no settle: {changes:?}") };
    assert!((rates[0].1 - 100.0).abs() < 1e-6 && (rates[1].1 - 125.0).abs() < 1e-6, "{rates:?}");
}

#[test]
fn the_configured_batch_budget_stays_unless_a_smaller_one_is_clearly_faster() {
    // 3 % faster at half: within the margin, the configured budget stays.
    let mut tuner = Tuner::new(&[], 1, &BATCH_PERCENTS, SHORT);
    let ((_, percent), _) = drive(&mut tuner, |_, p| if p == 50 { 97.0 } else { 100.0 }, |_| true);
    assert_eq!(percent, 100);
    // 20 % faster at a quarter: it is kept.
    let mut tuner = Tuner::new(&[], 1, &BATCH_PERCENTS, SHORT);
    let ((_, percent), _) = drive(&mut tuner, |_, p| if p == 25 { 80.0 } else { 100.0 }, |_| true);
    assert_eq!(percent, 25);
}

#[test]
fn a_smaller_batch_share_must_win_every_window_to_replace_the_configured_one() {
    // Windows of 100 % at 100 and 140 rows/s, of 50 % at 130 and 125:
    // 50 % answered more in all, but not in every window.
    let mut knob = Knob::new(
        &[Setting::BatchPercent(100), Setting::BatchPercent(50)],
        2,
        Some(Setting::BatchPercent(100)),
        Setting::BatchPercent(100),
    );
    for (rows, ms) in [(100, 1000.0), (130, 1000.0), (125, 1000.0), (140, 1000.0)] {
        knob.record(rows, ms);
        knob.trial += 1;
    }
    assert_eq!(knob.best(), Setting::BatchPercent(100));
    assert!(knob.rates()[1].1 > knob.rates()[0].1);
}

#[test]
fn threads_are_decided_before_the_batch_budget_and_each_once() {
    let mut tuner = Tuner::new(&[1, 2, 3], 2, &BATCH_PERCENTS, SHORT);
    let ((threads, percent), changes) =
        drive(&mut tuner, |t, p| 100.0 / t as f64 * if p == 50 { 0.5 } else { 1.0 }, |_| true);
    assert_eq!((threads, percent), (3, 50));
    let settled: Vec<Setting> = changes
        .iter()
        .filter_map(|c| if let Change::Settle { setting, .. } = c { Some(*setting) } else { None })
        .collect();
    assert_eq!(settled, [Setting::Threads(3), Setting::BatchPercent(50)]);
    assert!(matches!(changes.first(), Some(Change::Try(Setting::Threads(1)))));
}

#[test]
fn windows_without_a_backlog_are_thrown_away() {
    // Every fourth batch finds no backlog: a window needs more batches
    // in a row than that, so none completes.
    let length = TrialLength { window_ms: 200.0, min_batches: 4, rounds: 1, warm_up_windows: 0 };
    let mut tuner = Tuner::new(&[1, 2], 1, &[], length);
    for i in 0..1_000 {
        assert_eq!(
            tuner.observe(i as f64 * 100.0, 10, i % 4 != 3).filter(|c| matches!(c, Change::Settle { .. })),
            None
        );
    }
    // Held for 14 batches in 15, windows complete, and the waits for
    // work between them never count: each setting is measured at its speed.
    let mut tuner = Tuner::new(&[1, 2], 1, &[], length);
    let ((threads, _), changes) = drive(&mut tuner, |t, _| if t == 1 { 50.0 } else { 100.0 }, |i| i % 15 != 14);
    assert_eq!(threads, 1);
    let Some(Change::Settle { rates, .. }) = changes.last() else { panic!() };
    assert!((rates[0].1 - 200.0).abs() < 1e-6 && (rates[1].1 - 100.0).abs() < 1e-6, "{rates:?}");
}

#[test]
fn the_first_windows_warm_the_worker_up_and_are_not_measured() {
    // The first 40 batches are slow whatever the setting (first calls
    // of each shape); two warm-up windows of 1 s cover them.
    let length = TrialLength { warm_up_windows: 2, ..SHORT };
    let mut tuner = Tuner::new(&[1, 2], 1, &[], length);
    let mut batches = 0;
    let ((threads, _), changes) = drive(
        &mut tuner,
        |t, _| {
            batches += 1;
            if batches <= 40 {
                50.0
            } else if t == 2 {
                80.0
            } else {
                100.0
            }
        },
        |_| true,
    );
    assert_eq!(threads, 2);
    let Some(Change::Settle { rates, .. }) = changes.last() else { panic!("{changes:?}") };
    assert!((rates[0].1 - 100.0).abs() < 1e-6 && (rates[1].1 - 125.0).abs() < 1e-6, "{rates:?}");
}

#[test]
fn a_trial_gives_way_to_the_resting_setting_when_the_backlog_runs_out() {
    let mut tuner = Tuner::new(&[1, 2, 3], 3, &[], SHORT);
    assert_eq!(tuner.observe(0.0, 10, true), Some(Change::Try(Setting::Threads(1))));
    assert_eq!(tuner.observe(100.0, 10, true), None);
    assert_eq!(tuner.observe(200.0, 10, false), Some(Change::Rest(Setting::Threads(3))));
    assert_eq!(tuner.observe(300.0, 10, false), None);
    // Back under backlog, the same trial starts over.
    assert_eq!(tuner.observe(400.0, 10, true), Some(Change::Try(Setting::Threads(1))));
}

#[test]
fn nothing_to_tune_with_one_candidate_or_none() {
    let mut tuner = Tuner::new(&[2], 2, &[100], SHORT);
    assert!(tuner.is_done());
    assert_eq!(tuner.observe(0.0, 10, true), None);
}

#[test]
fn thread_candidates_cover_small_hosts_fully_and_large_ones_sparsely() {
    assert_eq!(thread_candidates(1), [1]);
    assert_eq!(thread_candidates(2), [1, 2]);
    assert_eq!(thread_candidates(4), [1, 2, 3, 4]);
    assert_eq!(thread_candidates(6), [1, 2, 3, 4, 5, 6]);
    assert_eq!(thread_candidates(16), [1, 2, 3, 4, 8, 15, 16]);
    assert_eq!(thread_candidates(64), [1, 2, 3, 4, 8, 16, 32, 63, 64]);
}
