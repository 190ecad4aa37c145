//! One worker's scrape, read into the row a soak keeps every interval: the
//! process's own figures, what librdkafka holds, what the worker holds, and
//! the counters the ledger needs. Pure: a scrape in, a row out.

use fleet_testkit::metric_value;

/// One worker at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Seconds from the soak's start.
    pub at_s: f64,
    pub worker: String,
    pub rss_bytes: f64,
    pub cpu_seconds: f64,
    pub open_fds: f64,
    pub threads: f64,
    /// Messages read and not yet answered, both lanes.
    pub in_flight: f64,
    /// What librdkafka holds fetched and not yet read, both lanes.
    pub prefetch_bytes: f64,
    pub prefetch_messages: f64,
    pub reply_queue: f64,
    pub rebalances: f64,
    pub answers: f64,
    pub duplicate_answers: f64,
    pub model_version: f64,
    pub load_failures: f64,
    /// When the process started (Unix s): a change is a restart.
    pub started_s: f64,
    /// What the C heap has handed out and not had back (0 from a worker
    /// that does not export it): flat while RSS grows is the allocator
    /// keeping freed memory, not a leak.
    pub heap_in_use_bytes: f64,
    /// Seconds the worker's heap trims have taken since it started.
    pub heap_trim_seconds: f64,
    /// The engine's settings now (tuned under a backlog unless fixed): a
    /// change of speed after a burst shows whether tuning moved them.
    pub intra_op_threads: f64,
    pub batch_percent: f64,
}

/// The columns of samples.csv, in [`Sample::csv_row`]'s order.
pub const CSV_HEADER: &str = "at_s,worker,rss_bytes,cpu_seconds,open_fds,threads,in_flight,prefetch_bytes,\
prefetch_messages,reply_queue,rebalances,answers,duplicate_answers,model_version,load_failures,started_s,heap_in_use_bytes,heap_trim_seconds,\
intra_op_threads,batch_percent";

impl Sample {
    pub fn from_scrape(at_s: f64, worker: &str, scrape: &str) -> Self {
        let value = |name: &str| metric_value(scrape, name, &[]);
        Self {
            at_s,
            worker: worker.to_owned(),
            rss_bytes: value("process_resident_memory_bytes"),
            cpu_seconds: value("process_cpu_seconds_total"),
            open_fds: value("process_open_fds"),
            threads: value("process_threads"),
            in_flight: value("fleet_queue_depth"),
            prefetch_bytes: value("fleet_kafka_fetch_queue_bytes"),
            prefetch_messages: value("fleet_kafka_fetch_queue_messages"),
            reply_queue: value("fleet_kafka_reply_queue_ops"),
            rebalances: value("fleet_kafka_rebalances_total"),
            answers: value("fleet_requests_total"),
            duplicate_answers: value("fleet_duplicate_answers_total"),
            model_version: value("fleet_model_version"),
            load_failures: value("fleet_model_load_failures_total"),
            started_s: value("process_start_time_seconds"),
            heap_in_use_bytes: value("fleet_heap_in_use_bytes"),
            heap_trim_seconds: value("fleet_heap_trim_seconds_sum"),
            intra_op_threads: value("fleet_engine_intra_op_threads"),
            batch_percent: value("fleet_engine_batch_percent"),
        }
    }

    pub fn csv_row(&self) -> String {
        format!(
            "{:.1},{},{:.0},{:.2},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.0},{:.4},{:.0},{:.0}",
            self.at_s,
            self.worker,
            self.rss_bytes,
            self.cpu_seconds,
            self.open_fds,
            self.threads,
            self.in_flight,
            self.prefetch_bytes,
            self.prefetch_messages,
            self.reply_queue,
            self.rebalances,
            self.answers,
            self.duplicate_answers,
            self.model_version,
            self.load_failures,
            self.started_s,
            self.heap_in_use_bytes,
            self.heap_trim_seconds,
            self.intra_op_threads,
            self.batch_percent
        )
    }
}

/// Each worker's samples, in the order the workers first appear, each
/// series in time order.
pub fn by_worker(samples: &[Sample]) -> Vec<(String, Vec<&Sample>)> {
    let mut workers: Vec<(String, Vec<&Sample>)> = Vec::new();
    for sample in samples {
        match workers.iter_mut().find(|(name, _)| *name == sample.worker) {
            Some((_, series)) => series.push(sample),
            None => workers.push((sample.worker.clone(), vec![sample])),
        }
    }
    for (_, series) in &mut workers {
        series.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    }
    workers
}

/// Requests computed twice over the soak, from the workers'
/// `fleet_duplicate_answers_total`: what each worker counted between two of
/// its samples, split by whether that stretch touches a window where a
/// kill forces them (a broker killed loses the offsets committed in its
/// last second: those messages are read again).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Duplicates {
    pub forced: u64,
    pub unforced: u64,
}

/// `initial`: the workers that ran before the soak's load began, whose
/// first sample is their baseline (their counters hold the capacity
/// measurement's). Any other worker started during the soak, from 0.
/// `forced_windows`: (from s, to s) of each kill and the time its effects
/// take to pass.
pub fn duplicates(samples: &[Sample], initial: &[String], forced_windows: &[(f64, f64)]) -> Duplicates {
    let mut counted = Duplicates::default();
    for (name, series) in by_worker(samples) {
        let Some(first) = series.first() else { continue };
        let mut previous =
            if initial.contains(&name) { (first.at_s, first.duplicate_answers) } else { (f64::NEG_INFINITY, 0.0) };
        for sample in &series {
            // A counter that went down is a new process counting from 0.
            let grown = if sample.duplicate_answers >= previous.1 {
                sample.duplicate_answers - previous.1
            } else {
                sample.duplicate_answers
            };
            let forced = forced_windows.iter().any(|&(from, to)| previous.0 < to && sample.at_s >= from);
            let grown = grown.round() as u64;
            if forced {
                counted.forced += grown;
            } else {
                counted.unforced += grown;
            }
            previous = (sample.at_s, sample.duplicate_answers);
        }
    }
    counted
}

/// Workers whose process restarted during the soak (its start time moved).
pub fn restarted(samples: &[Sample]) -> Vec<String> {
    by_worker(samples)
        .into_iter()
        .filter(|(_, series)| series.windows(2).any(|pair| (pair[1].started_s - pair[0].started_s).abs() > 0.5))
        .map(|(name, _)| name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = "\
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes{model=\"minilm\"} 600000000
process_cpu_seconds_total{model=\"minilm\"} 12.5
process_open_fds{model=\"minilm\"} 40
process_threads{model=\"minilm\"} 20
process_start_time_seconds{model=\"minilm\"} 1700000000
fleet_queue_depth{model=\"minilm\",lane=\"interactive\"} 7
fleet_queue_depth{model=\"minilm\",lane=\"bulk\"} 1
fleet_kafka_fetch_queue_bytes{model=\"minilm\",lane=\"interactive\",partition=\"0\"} 1000
fleet_kafka_fetch_queue_bytes{model=\"minilm\",lane=\"interactive\",partition=\"1\"} 500
fleet_kafka_rebalances_total{model=\"minilm\",lane=\"interactive\"} 2
fleet_kafka_rebalances_total{model=\"minilm\",lane=\"bulk\"} 2
fleet_requests_total{model=\"minilm\",status=\"ok\",lane=\"interactive\"} 90
fleet_requests_total{model=\"minilm\",status=\"expired\",lane=\"interactive\"} 10
fleet_duplicate_answers_total{model=\"minilm\"} 3
fleet_model_version{model=\"minilm\"} 2
fleet_heap_in_use_bytes{model=\"minilm\"} 400000000
fleet_heap_trim_seconds_sum{model=\"minilm\"} 0.25
fleet_heap_trim_seconds_count{model=\"minilm\"} 20
fleet_engine_intra_op_threads{model=\"minilm\"} 2
fleet_engine_batch_percent{model=\"minilm\"} 25
";

    #[test]
    fn a_scrape_reads_into_one_row_lanes_and_partitions_summed() {
        let s = Sample::from_scrape(10.0, "text-1", SCRAPE);
        assert_eq!((s.rss_bytes, s.cpu_seconds, s.open_fds, s.threads), (6e8, 12.5, 40.0, 20.0));
        assert_eq!((s.in_flight, s.prefetch_bytes, s.rebalances), (8.0, 1500.0, 4.0));
        assert_eq!((s.answers, s.duplicate_answers, s.model_version), (100.0, 3.0, 2.0));
        assert_eq!((s.heap_in_use_bytes, s.heap_trim_seconds), (4e8, 0.25));
        assert_eq!((s.intra_op_threads, s.batch_percent), (2.0, 25.0));
        assert_eq!(s.csv_row().split(',').count(), CSV_HEADER.split(',').count());
    }

    #[test]
    fn duplicates_count_each_worker_s_growth_and_a_moved_start_time_is_a_restart() {
        let at = |t: f64, worker: &str, duplicates: f64, started: f64| Sample {
            duplicate_answers: duplicates,
            started_s: started,
            ..Sample::from_scrape(t, worker, "")
        };
        let samples = [
            at(0.0, "a", 5.0, 100.0),
            at(0.0, "b", 1.0, 200.0),
            at(10.0, "a", 7.0, 100.0),
            at(10.0, "b", 0.0, 260.0),
            at(20.0, "a", 10.0, 100.0),
            at(20.0, "b", 4.0, 260.0),
        ];
        // a: 5 before the soak (its baseline), 2 then 3 during it. b
        // joined: 1 counted; then restarted at 0, and 4 more.
        let initial = ["a".to_owned()];
        assert_eq!(duplicates(&samples, &initial, &[]), Duplicates { forced: 0, unforced: 10 });
        // A kill's window from 12 to 15 s touches the stretch 10..20 s.
        assert_eq!(duplicates(&samples, &initial, &[(12.0, 15.0)]), Duplicates { forced: 7, unforced: 3 });
        assert_eq!(restarted(&samples), ["b"]);
        assert_eq!(by_worker(&samples).iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    }
}
