//! report.md, section by section: the run, the verdict, the faults, the
//! ledger, memory, latency after each fault. Apart from the judging
//! because it is only the writing of what was judged.

use super::{last_sample_s, mib, partition_books, About, Judged, KILL_AFTERMATH_S};
use crate::soak::run::SoakOutcome;
use crate::soak::samples::{self, Sample};
use crate::soak::verdict;
use std::fmt::Write as _;

pub(super) fn markdown(about: &About, outcome: &SoakOutcome, judged: &Judged) -> String {
    let mut md = String::new();
    header(&mut md, about, outcome);
    verdict_section(&mut md, about, judged);
    faults(&mut md, outcome);
    ledger(&mut md, outcome, judged);
    memory(&mut md, outcome, judged);
    latency(&mut md, outcome, judged);
    let _ = writeln!(md, "\nEvery worker's samples: samples.csv; latency per interval: latency-<model>.csv.\n");
    let _ = writeln!(md, "```\n{}\n```", judged.result_line);
    md
}

/// The run: machine, command, length, load.
fn header(md: &mut String, about: &About, outcome: &SoakOutcome) {
    let end_s = last_sample_s(outcome);
    let _ = writeln!(md, "# Soak report\n");
    let _ = writeln!(md, "- machine: {}", about.machine);
    let _ = writeln!(md, "- command: `{}`", about.command);
    let _ = writeln!(
        md,
        "- length: {:.1} h of load ({:.0} s), sampled every {:.0} s",
        end_s / 3600.0,
        end_s,
        about.interval_s
    );
    let share = match (outcome.text_capacity, outcome.image_capacity) {
        (Some(texts), Some(images)) => format!(
            ": {:.0} % and {:.0} % of what each worker answered alone ({texts:.1} texts/s, {images:.2} images/s)",
            outcome.text_rate / texts.max(1e-9) * 100.0,
            outcome.image_rate / images.max(1e-9) * 100.0
        ),
        _ => String::new(),
    };
    let _ = writeln!(
        md,
        "- load: {:.1} texts/s ({}) and {:.2} images/s ({}), open loop{share}",
        outcome.text_rate, outcome.text_model, outcome.image_rate, outcome.image_model
    );
    let _ = writeln!(md, "- memory after warm-up is judged from {:.0} s on\n", about.warm_up_s);
}

/// The budgets broken (or none), and what they are.
fn verdict_section(md: &mut String, about: &About, judged: &Judged) {
    let _ = writeln!(md, "## Verdict\n");
    let failures = judged.failures();
    if failures.is_empty() {
        let _ = writeln!(md, "Every budget held.\n");
    } else {
        for failure in &failures {
            let _ = writeln!(md, "- **broken:** {failure}");
        }
        md.push('\n');
    }
    let b = &judged.budgets;
    let _ = writeln!(
        md,
        "Budgets: RSS growth after warm-up ≤ {:.1} % per hour per worker (judged once the run is long enough to \
         measure it), peak RSS ≤ {:.0} MiB, p99 after each fault back within {:.1}× its value before within {:.0} s, \
         no request missing, dead-lettered or answered with an error, at most {} requests computed twice where no \
         kill forced it, no worker death or restart, every fault injected.\n",
        b.rss_growth_pct_per_hour,
        mib(about.rss_limit_bytes),
        b.p99_recovery_factor,
        b.p99_recovery_s,
        b.allowed_duplicates
    );
}

/// Each fault as it was injected.
fn faults(md: &mut String, outcome: &SoakOutcome) {
    let _ = writeln!(md, "## Faults\n");
    let _ = writeln!(md, "| fault | planned s | began s | over s | what was done |");
    let _ = writeln!(md, "| --- | ---: | ---: | ---: | --- |");
    for f in &outcome.faults {
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.1} | {:.1} | {} |",
            f.planned.fault.name(),
            f.planned.at_s,
            f.at_s,
            f.ended_s,
            f.note
        );
    }
}

/// The books per partition and in all, the work done twice.
fn ledger(md: &mut String, outcome: &SoakOutcome, judged: &Judged) {
    let _ = writeln!(md, "\n## Ledger per partition\n");
    let _ = writeln!(md, "| model | partition | sent | ok | error | expired | missing |");
    let _ = writeln!(md, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for ((model, partition), p) in &partition_books(outcome) {
        let _ = writeln!(
            md,
            "| {model} | {partition} | {} | {} | {} | {} | {} |",
            p.sent, p.ok, p.error, p.expired, p.missing
        );
    }
    let t = &judged.books;
    let _ = writeln!(
        md,
        "| **all** | | **{}** | **{}** | **{}** | **{}** | **{}** |\n",
        t.sent, t.ok, t.error, t.expired, t.missing
    );
    let _ = writeln!(
        md,
        "Requests computed twice (the workers' `fleet_duplicate_answers_total`; the first answer is kept, so no \
         client saw two): {} where no kill forced it, {} within {KILL_AFTERMATH_S:.0} s of a broker kill. \
         Dead-lettered: {}. Not accepted by the producer (never sent): {}.\n",
        judged.verdict.duplicates,
        judged.forced_duplicates,
        judged.verdict.dlq,
        outcome.texts.ledger.send_failed + outcome.images.ledger.send_failed
    );
}

/// Each worker's RSS and heap over the run.
fn memory(md: &mut String, outcome: &SoakOutcome, judged: &Judged) {
    let _ = writeln!(md, "## Memory\n\n![RSS](rss.png)\n");
    let _ = writeln!(
        md,
        "| worker | first MiB | last MiB | peak MiB | growth after warm-up, %/h | heap in use, first → last MiB \
         | time trimming, % |"
    );
    let _ = writeln!(md, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    let workers = samples::by_worker(&outcome.samples);
    for w in &judged.verdict.memory {
        let growth = w.growth_pct_per_hour.map_or_else(|| "too short to say".to_owned(), |g| format!("{g:+.2}"));
        let series = workers.iter().find(|(name, _)| *name == w.worker).map(|(_, series)| series.as_slice());
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.0} | {:.0} | {growth} | {} | {} |",
            w.worker,
            mib(w.first_bytes),
            mib(w.last_bytes),
            mib(w.peak_bytes),
            series.map_or_else(|| "-".to_owned(), heap_in_use),
            series.map_or_else(|| "-".to_owned(), time_trimming)
        );
    }
    let _ = writeln!(
        md,
        "\nRSS that grows while the heap's bytes in use stay flat is the allocator keeping freed memory \
         (`--heap-trim-interval` hands it back), not a leak; a leak grows what is in use."
    );
}

/// p99 before and after each fault, and the rule's record where nothing
/// happened.
fn latency(md: &mut String, outcome: &SoakOutcome, judged: &Judged) {
    let b = &judged.budgets;
    let _ = writeln!(md, "\n## Latency after each fault\n");
    for model in [&outcome.text_model, &outcome.image_model] {
        let _ = writeln!(md, "![{model}](latency-{model}.png)\n");
    }
    let _ = writeln!(
        md,
        "p99 is taken over the ok answers seen in the {:.0} s before a fault and in each {:.0} s window \
         from its end (windows every {:.0} s, the last ending {:.0} s after the end); a fault is recovered \
         from the first window back within {:.1}× after the last one over it.\n",
        verdict::BEFORE_WINDOW_S,
        verdict::AFTER_WINDOW_S,
        verdict::AFTER_WINDOW_STEP_S,
        b.p99_recovery_s,
        b.p99_recovery_factor
    );
    let _ = writeln!(
        md,
        "| model | fault | at s | p99 before, ms | worst window, ms | back within {:.1}× from, s |",
        b.p99_recovery_factor
    );
    let _ = writeln!(md, "| --- | --- | ---: | ---: | ---: | ---: |");
    let per_model = judged.verdict.recoveries.len() / 2;
    for (i, r) in judged.verdict.recoveries.iter().enumerate() {
        let model = if i < per_model { &outcome.text_model } else { &outcome.image_model };
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
        let back = match (r.before_p99_ms, r.recovered_after_s) {
            (None, _) => "no answers before".to_owned(),
            (Some(_), Some(s)) => format!("{s:.0}"),
            (Some(_), None) => format!("**not within {:.0} s**", b.p99_recovery_s),
        };
        let _ = writeln!(
            md,
            "| {model} | {} | {:.0} | {} | {} | {back} |",
            r.fault.fault.name(),
            r.fault.at_s,
            ms(r.before_p99_ms),
            ms(r.worst_p99_ms)
        );
    }
    let _ = writeln!(
        md,
        "\nThe same rule at the minute marks of this run clear of every fault (a fault of no length placed there), to show \
         how often it fails by chance:"
    );
    for (model, (judged_marks, failed)) in [&outcome.text_model, &outcome.image_model].iter().zip(judged.fault_free) {
        let _ = writeln!(md, "- {model}: {failed} of {judged_marks} fault-free moments would fail");
    }
}

/// A worker's heap in use at its first and last sample with a figure;
/// "-" from workers that do not export it.
fn heap_in_use(series: &[&Sample]) -> String {
    let mut known = series.iter().map(|s| s.heap_in_use_bytes).filter(|&bytes| bytes > 0.0);
    match (known.next(), known.next_back()) {
        (Some(first), last) => format!("{:.0} → {:.0}", mib(first), mib(last.unwrap_or(first))),
        (None, _) => "-".to_owned(),
    }
}

/// The share of a worker's sampled time its heap trims took, in percent:
/// the time they held malloc's arenas locked (the page faults that refill
/// what they handed back come on top). "-" without a trim counted (off,
/// or an older worker) or across a restart.
fn time_trimming(series: &[&Sample]) -> String {
    let (Some(first), Some(last)) = (series.first(), series.last()) else { return "-".to_owned() };
    let (spent, over) = (last.heap_trim_seconds - first.heap_trim_seconds, last.at_s - first.at_s);
    // A restart starts the sum again: the span then says nothing.
    let restarted = first.started_s != last.started_s;
    if restarted || last.heap_trim_seconds <= 0.0 || spent < 0.0 || over <= 0.0 {
        return "-".to_owned();
    }
    format!("{:.3}", 100.0 * spent / over)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(at_s: f64, heap_trim_seconds: f64) -> Sample {
        Sample { heap_trim_seconds, ..Sample::from_scrape(at_s, "text-1", "") }
    }

    #[test]
    fn time_trimming_is_the_trims_share_of_the_sampled_span() {
        let (a, b) = (at(100.0, 0.5), at(1100.0, 1.5));
        assert_eq!(time_trimming(&[&a, &b]), "0.100");
        // Off (nothing counted), one sample, or a restart in between.
        assert_eq!(time_trimming(&[&at(0.0, 0.0), &at(10.0, 0.0)]), "-");
        assert_eq!(time_trimming(&[&a]), "-");
        assert_eq!(time_trimming(&[&b, &at(2000.0, 0.1)]), "-");
        let restarted = Sample { started_s: 1.0, ..at(2000.0, 9.0) };
        assert_eq!(time_trimming(&[&a, &restarted]), "-");
    }
}
