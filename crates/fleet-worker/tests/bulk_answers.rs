//! Answers on Kafka with real parts (broker, Redis, a minilm worker, the
//! `fleet-produce` binary): where each lane's answers go and how a request
//! chooses; an offset committed only once the broker has the answer (a
//! missing answers topic holds the offsets and says so on /ready; a worker
//! killed after its answers and before its commit leaves repeats, never a
//! gap); a backfill collected into a file exactly once across a collector
//! killed and restarted; a job at a glance while it runs.

mod common;

use common::{
    answers_on, assert_committed_to_the_end, committed_offsets, ledger, minilm, send_requests, serial, serving_minilm,
    signal, texts, wait_for_answers_on, worker_bin, Broker, Redis, Worker,
};
use fleet_producer::jobs::output::{self, OutputFormat};
use fleet_producer::jobs::{collect, CollectOptions};
use fleet_producer::Request;
use fleet_proto::answer_record::AnswerMeta;
use fleet_proto::{Destinations, JobId, Lane, Namespace, RequestId, Status};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Sends `texts` on `lane` as `<prefix>-<n>`, in `job`, asking for `reply_to`.
async fn send(
    broker: &Broker,
    lane: Lane,
    job: Option<&JobId>,
    reply_to: Option<Destinations>,
    prefix: &str,
    texts: &[String],
) -> Vec<RequestId> {
    let shape = |request: Request| Request { lane, job: job.cloned(), reply_to, ..request };
    send_requests(broker, &Namespace::default(), &minilm(), prefix, texts, shape).await
}

fn ids_of(answers: &[AnswerMeta]) -> BTreeSet<String> {
    answers.iter().map(|a| a.id.to_string()).collect()
}

fn strings(ids: &[RequestId]) -> BTreeSet<String> {
    ids.iter().map(RequestId::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_lane_answers_where_its_config_and_its_requests_say() {
    let _serial = serial().await;
    let redis = Redis::start();
    let (broker, mut worker) = serving_minilm(2, &redis, &[]).await;
    let names = Namespace::default();
    let job = JobId::parse("routes-1").unwrap();
    let bulk_default = send(&broker, Lane::Bulk, Some(&job), None, "bulk-default", &texts("a", 6)).await;
    let bulk_redis =
        send(&broker, Lane::Bulk, Some(&job), Some(Destinations::REDIS), "bulk-redis", &texts("b", 4)).await;
    let bulk_both = send(&broker, Lane::Bulk, Some(&job), Some(Destinations::BOTH), "bulk-both", &texts("c", 3)).await;
    let interactive = send(&broker, Lane::Interactive, None, None, "interactive", &texts("d", 4)).await;
    let interactive_kafka =
        send(&broker, Lane::Interactive, None, Some(Destinations::KAFKA), "interactive-kafka", &texts("e", 3)).await;

    // In Redis: what chose it, or whose lane sends it there; each once, ok.
    let redis_bound = [bulk_redis.clone(), bulk_both.clone(), interactive.clone()].concat();
    let statuses = ledger(&redis, &minilm(), &redis_bound, Duration::from_secs(120)).await;
    assert_eq!(statuses.get("ok"), Some(&redis_bound.len()), "{statuses:?}");

    // On the bulk lane's answers topic: its default and the ones that asked for both, in the job.
    let on_bulk = wait_for_answers_on(&broker, &names.answers_topic(&minilm(), Lane::Bulk), &bulk_default).await;
    assert_eq!(ids_of(&on_bulk), strings(&[bulk_default.clone(), bulk_both].concat()), "bulk answers on Kafka");
    assert!(on_bulk.iter().all(|a| a.status == Status::Ok && a.job.as_ref() == Some(&job)), "{on_bulk:?}");
    let on_interactive =
        wait_for_answers_on(&broker, &names.answers_topic(&minilm(), Lane::Interactive), &interactive_kafka).await;
    assert_eq!(ids_of(&on_interactive), strings(&interactive_kafka), "interactive answers on Kafka");
    assert!(on_interactive.iter().all(|a| a.job.is_none()));
    // Not in Redis: what went to Kafka only.
    assert_eq!(
        common::answered_now(&redis, &[bulk_default, interactive_kafka].concat()).await,
        0,
        "Kafka-only answers in Redis"
    );

    for lane in Lane::ALL {
        assert_committed_to_the_end(&broker, &minilm(), lane, 2).await;
    }
    let scrape = worker.scrape().await;
    let delivered = |destination, lane| {
        common::metric_value(&scrape, "fleet_answers_delivered_total", &[("destination", destination), ("lane", lane)])
    };
    assert_eq!((delivered("kafka", "bulk"), delivered("redis", "bulk")), (9.0, 7.0));
    assert!(worker.stop().success());
}

/// The model's topics without its answers topics (and no job records).
async fn request_topics_only(broker: &Broker, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = broker.kafka().client_config().create().unwrap();
    let names = Namespace::default();
    let (interactive, bulk, dlq) = (
        names.lane_topic(&minilm(), Lane::Interactive),
        names.lane_topic(&minilm(), Lane::Bulk),
        names.dlq_topic(&minilm()),
    );
    let topics = [
        NewTopic::new(&interactive, partitions, TopicReplication::Fixed(1)),
        NewTopic::new(&bulk, partitions, TopicReplication::Fixed(1)),
        NewTopic::new(&dlq, 1, TopicReplication::Fixed(1)),
    ];
    for created in admin.create_topics(&topics, &AdminOptions::new()).await.unwrap() {
        created.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answers_topic_that_cannot_be_written_holds_the_offsets_and_says_so_on_ready() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    request_topics_only(&broker, 2).await;
    let worker = Worker::start("minilm", &broker, &redis, &[]);
    worker.wait_until_serving(2).await;
    let names = Namespace::default();
    let job = JobId::parse("no-topic-yet").unwrap();
    let ids = send(&broker, Lane::Bulk, Some(&job), None, "held", &texts("held", 5)).await;

    let (code, body) = worker.wait_for_status("/ready", 503, Duration::from_secs(120)).await;
    assert_eq!(code, 503, "/ready while the answers topic is missing: {body}");
    assert!(body.contains("answers"), "/ready names the answers topic's failure: {body}");
    let failures = worker
        .wait_for_metric(
            "fleet_sink_failures_total",
            &[("target", "answers"), ("class", "fleet")],
            1.0,
            Duration::from_secs(30),
        )
        .await;
    assert!(failures >= 1.0, "the missing topic counts as a fleet failure");
    let bulk_topic = names.lane_topic(&minilm(), Lane::Bulk);
    let committed = committed_offsets(&broker, &names.consumer_group(&minilm()), &bulk_topic, 2);
    assert!(committed.iter().all(|&o| o <= 0), "an offset moved past an unwritten answer");
    assert_eq!(worker.get("/healthz").await.map(|(code, _)| code), Some(200), "a dependency is no liveness fault");

    // The operator creates it: the held answers go out, the offsets follow.
    broker.create_topics(&minilm(), 2).await;
    let answers = wait_for_answers_on(&broker, &names.answers_topic(&minilm(), Lane::Bulk), &ids).await;
    assert_eq!(ids_of(&answers), strings(&ids));
    assert_committed_to_the_end(&broker, &minilm(), Lane::Bulk, 2).await;
    let (code, body) = worker.wait_for_status("/ready", 200, Duration::from_secs(60)).await;
    assert_eq!(code, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_between_its_answers_and_its_commit_leaves_repeats_never_a_gap() {
    let _serial = serial().await;
    let redis = Redis::start();
    // Offsets stored but not committed for ten minutes: a kill lands
    // between the answers and their commit.
    let no_commit = ["--kafka-property", "auto.commit.interval.ms=600000"];
    let (broker, mut first) = serving_minilm(2, &redis, &no_commit).await;
    let names = Namespace::default();
    let answers_topic = names.answers_topic(&minilm(), Lane::Bulk);
    let job = JobId::parse("killed-1").unwrap();
    let ids = send(&broker, Lane::Bulk, Some(&job), None, "killed-1", &texts("killed", 20)).await;
    wait_for_answers_on(&broker, &answers_topic, &ids).await;
    first.kill();

    let second = Worker::start("minilm", &broker, &redis, &[]);
    second.wait_until_serving(2).await;
    assert_committed_to_the_end(&broker, &minilm(), Lane::Bulk, 2).await;
    let answers = answers_on(&broker, &answers_topic);
    assert_eq!(ids_of(&answers), strings(&ids), "every request answered on the topic");
    assert!(answers.len() > ids.len(), "the second worker answered again what was not committed");

    // The collector writes each once.
    write_job_record(&broker, &job, ids.len() as u64).await;
    let out = scratch_dir("killed").join("answers.jsonl");
    let options = CollectOptions { job: job.clone(), out: out.clone(), format: OutputFormat::Jsonl };
    let collected = collect(&broker.kafka(), &names, &options, &|_, _| {}).await.unwrap();
    assert_eq!((collected.ledger.answered(), collected.ledger.not_ok()), (20, 0));
    assert!(collected.ledger.repeats() > 0, "the repeats were read and written once");
    let (held, _) = output::open(&out, OutputFormat::Jsonl).unwrap();
    assert_eq!(held.len(), 20);
}

/// A job's record as `fleet-produce bulk` leaves it: `requests` sent.
async fn write_job_record(broker: &Broker, job: &JobId, requests: u64) {
    use fleet_proto::job_record::{JobRecord, JobState};
    let names = Namespace::default();
    let record = JobRecord {
        job: job.to_string(),
        model: "minilm".into(),
        lane: "bulk".into(),
        answers_topic: names.answers_topic(&minilm(), Lane::Bulk),
        reply_to: None,
        state: JobState::Sent,
        requests,
        started_ms: fleet_proto::clock::now_ms() - 600_000,
        updated_ms: fleet_proto::clock::now_ms(),
        input: None,
    };
    let records = fleet_producer::jobs::JobRecords::new(&broker.kafka(), &names).unwrap();
    records.write(&record).await.unwrap();
}

fn scratch_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fleet-bulk-answers-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `fleet-produce`, built beside the worker (`cargo build --workspace --bins`).
fn fleet_produce(broker: &Broker) -> Command {
    let bin = std::env::var_os("FLEET_PRODUCE_BIN")
        .map_or_else(|| worker_bin().with_file_name("fleet-produce"), PathBuf::from);
    assert!(bin.exists(), "{} is missing: cargo build --release --workspace --bins", bin.display());
    let mut command = Command::new(bin);
    command.args(["--brokers", &broker.addr]).env("RUST_LOG", "warn");
    command
}

async fn run(mut command: Command) -> Output {
    tokio::task::spawn_blocking(move || command.output().expect("running fleet-produce")).await.unwrap()
}

fn lines_in(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |text| text.lines().count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_is_collected_once_across_a_collector_killed_and_its_progress_is_shown() {
    let _serial = serial().await;
    let (broker, redis) = (Broker::start(), Redis::start());
    broker.create_topics(&minilm(), 2).await;
    let dir = scratch_dir("backfill");
    let input = dir.join("texts.txt");
    std::fs::write(&input, texts("backfill", 120).join("\n")).unwrap();
    let job = "backfill-1";

    // Sent before any worker runs: nothing answered yet.
    let sent = run({
        let mut c = fleet_produce(&broker);
        c.args(["bulk", "--model", "minilm", "--file"]).arg(&input).args(["--job", job]);
        c
    })
    .await;
    assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
    let view = |broker: &Broker| {
        let mut c = fleet_produce(broker);
        c.args(["job", "--job", job]);
        run(c)
    };
    let before = String::from_utf8_lossy(&view(&broker).await.stdout).into_owned();
    assert!(before.contains("sent:      120 requests (sent)"), "{before}");
    assert!(before.contains("answered:  0 ") && before.contains("waiting:   120"), "{before}");

    // A job nobody sent: a clear refusal.
    let unknown = run({
        let mut c = fleet_produce(&broker);
        c.args(["collect", "--job", "never-sent", "--out"]).arg(dir.join("never.jsonl"));
        c
    })
    .await;
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no record of job never-sent"), "{unknown:?}");

    // A collector killed mid-job, a worker that stops mid-job.
    let out = dir.join("answers.jsonl");
    let mut collector = fleet_produce(&broker);
    collector.args(["collect", "--job", job, "--out"]).arg(&out).stdout(Stdio::null()).stderr(Stdio::null());
    let mut collector = collector.spawn().unwrap();
    let mut worker = Worker::start("minilm", &broker, &redis, &[]);
    let deadline = Instant::now() + Duration::from_secs(180);
    while lines_in(&out) < 10 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    signal(collector.id(), "-KILL");
    let _ = collector.wait();
    assert!(worker.stop().success());
    let on_topic = answers_on(&broker, &Namespace::default().answers_topic(&minilm(), Lane::Bulk));
    let answered = ids_of(&on_topic).len();
    let mid = String::from_utf8_lossy(&view(&broker).await.stdout).into_owned();
    assert!(mid.contains(&format!("answered:  {answered} (ok {answered},")), "{answered} on the topic: {mid}");
    assert!(mid.contains(&format!("waiting:   {}", 120 - answered)), "{mid}");

    // Collected again to the end, beside a worker that finishes the job.
    let worker = Worker::start("minilm", &broker, &redis, &[]);
    let finished = run({
        let mut c = fleet_produce(&broker);
        c.args(["collect", "--job", job, "--out"]).arg(&out);
        c
    })
    .await;
    assert!(finished.status.success(), "{}", String::from_utf8_lossy(&finished.stderr));
    let text = std::fs::read_to_string(&out).unwrap();
    let rows: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let distinct: BTreeSet<&str> = rows.iter().map(|r| r["request_id"].as_str().unwrap()).collect();
    assert_eq!((rows.len(), distinct.len()), (120, 120), "each request once in the file");
    assert!(rows
        .iter()
        .all(|r| r["status"] == "ok" && r["answer"]["output"]["embedding"].as_array().unwrap().len() == 384));
    assert!(rows.iter().all(|r| r["line"].as_u64().is_some_and(|n| (1..=120).contains(&n))));
    let again = run({
        let mut c = fleet_produce(&broker);
        c.args(["collect", "--job", job, "--out"]).arg(&out);
        c
    })
    .await;
    assert!(again.status.success());
    assert_eq!(lines_in(&out), 120, "a collector run again adds nothing");

    // And as Parquet, for a vector store.
    let parquet = dir.join("answers.parquet");
    let as_parquet = run({
        let mut c = fleet_produce(&broker);
        c.args(["collect", "--job", job, "--out"]).arg(&parquet);
        c
    })
    .await;
    assert!(as_parquet.status.success(), "{}", String::from_utf8_lossy(&as_parquet.stderr));
    let (held, _) = output::open(&parquet, OutputFormat::Parquet).unwrap();
    assert_eq!(held.len(), 120);
    let done = String::from_utf8_lossy(&view(&broker).await.stdout).into_owned();
    assert!(done.contains("waiting:   0") && done.contains("eta:       done"), "{done}");
    drop(worker);
}
