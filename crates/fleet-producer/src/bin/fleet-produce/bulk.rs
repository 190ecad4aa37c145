//! `fleet-produce bulk`: streams a file of texts into a model's bulk lane
//! (`infer.<model>.bulk`), one line at a time, with many sends in flight and
//! a progress bar over the file's bytes; keeps the job's record on the jobs
//! topic (how many requests, where the answers go); with `--out`, collects
//! the answers into a file as they come, with a second bar. What a line
//! becomes (a request, a skipped blank, a bad line) is
//! `fleet_producer::bulk_file`'s; this is the reading, sending and counting
//! around it.

use super::jobs::{answers_bar, collect_with, report, OutArgs};
use anyhow::{bail, Context, Result};
use clap::Args;
use fleet_producer::bulk_file::{self, LineFormat, LineIds, NumberedLines};
use fleet_producer::jobs::JobRecords;
use fleet_producer::producer::Delivered;
use fleet_producer::{FleetProducer, KafkaConfig, Request, SendError};
use fleet_proto::clock::now_ms;
use fleet_proto::job_record::{JobRecord, JobState};
use fleet_proto::keys::DEFAULT_REDIS_PREFIX;
use fleet_proto::{Destinations, JobId, Lane, ModelName, Namespace, RequestId};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use std::collections::HashSet;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct BulkArgs {
    #[arg(long, env = "FLEET_MODEL")]
    model: ModelName,
    /// The file of texts: one per line (blank lines are skipped), or with
    /// --jsonl one JSON object per line. Read as it is sent, never whole.
    #[arg(long)]
    file: PathBuf,
    /// Each line is {"text": "...", "id": "..."}: id optional (default
    /// <job>-<line number>), other fields ignored.
    #[arg(long)]
    jsonl: bool,
    /// The job id (ce_fleetjob) of every request, which `fleet-produce
    /// cancel --job` names; default: bulk-<unix ms>-<random hex>, printed.
    #[arg(long)]
    job: Option<JobId>,
    /// Deadline of each request from when it is sent (sets ce_deadline);
    /// default: none set, the workers' own for the bulk lane applies.
    #[arg(long, value_parser = humantime::parse_duration)]
    ttl: Option<Duration>,
    /// Most requests sent and not yet acknowledged by the broker.
    #[arg(long, default_value_t = 10_000)]
    in_flight: usize,
    /// Where the answers go (ce_fleetreplyto): kafka (collectable), redis
    /// or redis,kafka, within what the model allows; default: the bulk
    /// lane's (kafka unless the model's config says otherwise).
    #[arg(long)]
    reply_to: Option<Destinations>,
    #[command(flatten)]
    out: OutArgs,
    /// Name written into ce_source.
    #[arg(long, default_value = "fleet-produce")]
    source: String,
}

/// Bad lines and failed deliveries are each shown this many times, then only
/// counted: a file in the wrong format must not flood the terminal.
const SHOWN_PER_KIND: u64 = 20;
/// The file is read in chunks of this size.
const READ_BUFFER_BYTES: usize = 1 << 20;
/// The progress bar's counts are rewritten every this many lines.
const MESSAGE_EVERY_LINES: u64 = 256;
/// The job's record is written again (with the requests sent so far) this often.
const RECORD_EVERY: Duration = Duration::from_secs(5);

/// What became of the file's lines.
#[derive(Debug, Default)]
struct Tally {
    /// The number of the last line read.
    lines: u64,
    sent: u64,
    delivered: u64,
    failed: u64,
    blank: u64,
    bad: u64,
    /// Lines whose id an earlier line of the file had (JSONL `id`s).
    repeated: u64,
}

impl Tally {
    fn brief(&self) -> String {
        let bad = self.bad + self.repeated;
        format!("{} sent, {} delivered, {bad} bad lines, {} failed", self.sent, self.delivered, self.failed)
    }

    /// Counts one broker acknowledgement, or shows its failure.
    fn settle(&mut self, line_number: u64, outcome: Result<Delivered, SendError>, progress: &ProgressBar) {
        match outcome {
            Ok(_) => self.delivered += 1,
            Err(e) => {
                self.failed += 1;
                if self.failed <= SHOWN_PER_KIND {
                    say(progress, format!("line {line_number}: not delivered: {e}"));
                } else if self.failed == SHOWN_PER_KIND + 1 {
                    say(progress, "more deliveries failed: counted, not shown".to_owned());
                }
            }
        }
    }

    /// Counts a line that is not sent, and shows why.
    fn skip_bad(&mut self, line_number: u64, error: &bulk_file::LineError, progress: &ProgressBar) {
        self.bad += 1;
        if self.bad <= SHOWN_PER_KIND {
            say(progress, format!("line {line_number}: {error}; skipped"));
        } else if self.bad == SHOWN_PER_KIND + 1 {
            say(progress, "more bad lines: counted, not shown".to_owned());
        }
    }
}

/// A line on stderr that the progress bar does not overwrite (and that is
/// printed even when the bar is hidden, stderr not being a terminal).
fn say(progress: &ProgressBar, line: String) {
    progress.suspend(|| eprintln!("{line}"));
}

pub async fn run(kafka: &KafkaConfig, names: &Namespace, args: BulkArgs) -> Result<()> {
    let job = args.job.clone().unwrap_or_else(|| bulk_file::generated_job_id(now_ms(), bulk_file::random_nonce()));
    let ids = LineIds::new(job.clone())?;
    let file = File::open(&args.file).with_context(|| format!("opening {}", args.file.display()))?;
    // A pipe or device has no length: the bar then counts bytes alone.
    let file_bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    let producer = FleetProducer::new(kafka, &args.source)?.with_namespace(names.clone());
    let topic = names.lane_topic(&args.model, Lane::Bulk);
    let records = JobRecords::new(kafka, names)?;
    let mut record = first_record(&records, &args, names, &job).await?;
    records.write(&record).await.with_context(|| format!("writing the record of job {job} to {}", records.topic()))?;
    eprintln!("job {job}: sending the lines of {} to {topic}", args.file.display());
    eprintln!("stop it with: {}", cancel_command(names, &job));

    let bars = MultiProgress::new();
    let progress = bars.add(progress_bar(file_bytes));
    let collecting = args.out.options(&job).map(|options| {
        let bar = bars.add(answers_bar(ProgressBar::new(0)));
        let (kafka, names) = (kafka.clone(), names.clone());
        tokio::spawn(async move {
            let collected = collect_with(&kafka, &names, &options, bar.clone()).await;
            bar.finish_and_clear();
            collected.map(|collected| (options, collected))
        })
    });
    let started = Instant::now();
    let sending = Sending { args: &args, producer: &producer, ids: &ids, records: &records };
    let (tally, stopped) = sending.stream(file, &progress, &mut record).await;
    progress.finish_and_clear();

    record.state = JobState::Sent;
    record.requests = tally.delivered;
    record.updated_ms = now_ms();
    let recorded = records.write(&record).await;
    let Tally { lines, sent, delivered, failed, blank, bad, repeated } = tally;
    let took = started.elapsed();
    println!("job {job}: {sent} requests sent to {topic} in {took:.1?}, {delivered} delivered, {failed} failed");
    println!("job {job}: of {lines} lines, {blank} blank, {bad} bad and {repeated} with a repeated id were skipped");
    println!("cancel it: {}", cancel_command(names, &job));
    println!("its progress: fleet-produce job --job {job}");
    recorded.with_context(|| format!("writing the final record of job {job} (its collectors wait for it)"))?;
    if let Some(error) = stopped {
        return Err(error.context(format!("job {job} stopped after line {lines}")));
    }
    if failed > 0 {
        bail!("{failed} of {sent} requests of job {job} were not delivered");
    }
    if let Some(collecting) = collecting {
        let (options, collected) = collecting.await.context("the collector")??;
        return report(&options, &collected);
    }
    println!("collect its answers: fleet-produce collect --job {job} --out answers.jsonl");
    Ok(())
}

/// The record a run starts with: sending, nothing sent yet; a job sent
/// again keeps its first start, so answers of the first run still count.
async fn first_record(records: &JobRecords, args: &BulkArgs, names: &Namespace, job: &JobId) -> Result<JobRecord> {
    let now = now_ms();
    let earlier = match &args.job {
        Some(_) => records.find(job).await.with_context(|| format!("reading {}", records.topic()))?,
        None => None,
    };
    Ok(JobRecord {
        reply_to: args.reply_to.map(|d| d.to_string()),
        started_ms: earlier.map_or(now, |e| e.started_ms.min(now)),
        input: Some(args.file.display().to_string()),
        ..JobRecord::starting(names, &args.model, Lane::Bulk, job, now)
    })
}

/// The command that cancels `job`, with the release's key prefix when it is
/// not the default one (the Redis URL is the caller's to add).
fn cancel_command(names: &Namespace, job: &JobId) -> String {
    let mut command = format!("fleet-produce cancel --job {job}");
    if names.redis_prefix() != DEFAULT_REDIS_PREFIX {
        command.push_str(&format!(" --redis-prefix {}", names.redis_prefix()));
    }
    command
}

fn progress_bar(file_bytes: u64) -> ProgressBar {
    let (bar, template) = if file_bytes > 0 {
        (
            ProgressBar::new(file_bytes),
            "{elapsed_precise} [{bar:40}] {bytes}/{total_bytes} ({bytes_per_sec}, {eta} left) {msg}",
        )
    } else {
        (ProgressBar::no_length(), "{elapsed_precise} {bytes} ({bytes_per_sec}) {msg}")
    };
    let style = ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style.progress_chars("=> "));
    bar
}

/// What sending a job's lines uses.
struct Sending<'a> {
    args: &'a BulkArgs,
    producer: &'a FleetProducer,
    ids: &'a LineIds,
    records: &'a JobRecords,
}

impl Sending<'_> {
    /// Sends every line of `file` that makes a request, keeping at most
    /// `--in-flight` unacknowledged, and waits for the last acknowledgement;
    /// the job's record is written again every few seconds with the requests
    /// acknowledged so far. What stopped it early (the file unreadable, the
    /// producer refusing) comes back beside the counts, after what was already
    /// sent has been settled, so the counts are final either way.
    async fn stream(
        &self,
        file: File,
        progress: &ProgressBar,
        record: &mut JobRecord,
    ) -> (Tally, Option<anyhow::Error>) {
        let Self { args, producer, ids, records } = *self;
        let format = if args.jsonl { LineFormat::Jsonl } else { LineFormat::Text };
        // Each id once: the collector counts answers by id, so a repeated id
        // would leave the job one answer short forever.
        let mut sent_ids: HashSet<RequestId> = HashSet::new();
        let mut last_record = Instant::now();
        let max_in_flight = args.in_flight.max(1);
        let mut lines = NumberedLines::new(BufReader::with_capacity(READ_BUFFER_BYTES, file));
        let mut tally = Tally::default();
        let mut in_flight = FuturesUnordered::new();
        let mut stopped = None;
        while let Some(line) = lines.next() {
            let line = match line {
                Ok(line) => line,
                Err(e) => {
                    let context = format!("reading {} after line {}", args.file.display(), tally.lines);
                    stopped = Some(anyhow::Error::new(e).context(context));
                    break;
                }
            };
            tally.lines = line.number;
            match bulk_file::parse_line(format, ids, &line) {
                Ok(None) => tally.blank += 1,
                Err(error) => tally.skip_bad(line.number, &error, progress),
                Ok(Some(text)) if format == LineFormat::Jsonl && !sent_ids.insert(text.id.clone()) => {
                    tally.repeated += 1;
                    if tally.repeated <= SHOWN_PER_KIND {
                        say(
                            progress,
                            format!("line {}: id {} was sent already in this job; skipped", line.number, text.id),
                        );
                    }
                }
                Ok(Some(text)) => {
                    let mut request = Request::text(text.id, text.text).in_lane(Lane::Bulk).with_job(ids.job().clone());
                    if let Some(ttl) = args.ttl {
                        request = request.with_deadline_ms(now_ms().saturating_add(ttl.as_millis() as u64));
                    }
                    if let Some(reply_to) = args.reply_to {
                        request = request.reply_to(reply_to);
                    }
                    match producer.send(&args.model, &request).await {
                        Ok(delivery) => {
                            tally.sent += 1;
                            let number = line.number;
                            in_flight.push(async move { (number, delivery.await) });
                        }
                        Err(e) => {
                            stopped = Some(anyhow::Error::new(e).context(format!("sending line {}", line.number)));
                            break;
                        }
                    }
                }
            }
            // Count what the broker has acknowledged so far; wait only while
            // too many are out.
            while let Some(Some((number, outcome))) = in_flight.next().now_or_never() {
                tally.settle(number, outcome, progress);
            }
            while in_flight.len() >= max_in_flight {
                let Some((number, outcome)) = in_flight.next().await else { break };
                tally.settle(number, outcome, progress);
            }
            progress.set_position(lines.bytes_read());
            if line.number % MESSAGE_EVERY_LINES == 0 {
                progress.set_message(tally.brief());
            }
            if last_record.elapsed() >= RECORD_EVERY {
                record.requests = tally.delivered;
                record.updated_ms = now_ms();
                // A record not written now is written at the next tick or the end.
                if let Err(e) = records.write(record).await {
                    say(progress, format!("job record not updated: {e}"));
                }
                last_record = Instant::now();
            }
        }
        progress.set_position(lines.bytes_read());
        progress.set_message(format!("{}; waiting for the broker", tally.brief()));
        while let Some((number, outcome)) = in_flight.next().await {
            tally.settle(number, outcome, progress);
        }
        (tally, stopped)
    }
}
