//! `fleet-produce`: send texts or images to a model's topic (an image with a
//! caption to two models at once), on the interactive or the bulk lane,
//! optionally wait for the answers; stream a file into the bulk lane as one
//! job, collect its answers into a file, see its progress, cancel it;
//! create the fleet's topics. A thin shell over the library.
// A subcommand's module lives in src/bin/fleet-produce/: a file directly in
// src/bin/ would be taken by cargo for a binary of its own. One module a
// command; `routing` holds the lane flags `send` and `image` share.
#[path = "fleet-produce/bulk.rs"]
mod bulk;
#[path = "fleet-produce/cancel.rs"]
mod cancel;
#[path = "fleet-produce/image.rs"]
mod image;
#[path = "fleet-produce/jobs.rs"]
mod jobs;
#[path = "fleet-produce/redis_acl.rs"]
mod redis_acl;
#[path = "fleet-produce/routing.rs"]
mod routing;
#[path = "fleet-produce/send.rs"]
mod send;
#[path = "fleet-produce/topics.rs"]
mod topics;

use anyhow::Result;
use clap::{Parser, Subcommand};
use fleet_connect::kafka::KafkaArgs;
use fleet_connect::namespace::NamespaceArgs;
use fleet_producer::KafkaConfig;
use std::time::Duration;

#[derive(Parser)]
#[command(version, about = "Send inference requests to the fleet and read the answers")]
struct Cli {
    #[command(flatten)]
    kafka: KafkaArgs,
    #[command(flatten)]
    namespace: NamespaceArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Send texts (from --text and/or --file, one per line) to infer.<model>
    /// (or infer.<model>.bulk with --lane bulk).
    Send(send::SendArgs),
    /// Send image files to an image model; with --caption, each also goes
    /// with its caption to --text-model as one two-part request.
    Image(image::ImageArgs),
    /// Stream a file of texts (one per line, or JSONL) into infer.<model>.bulk
    /// as one job, with a progress bar; prints the job id to cancel it by.
    /// With --out, collects its answers into a file as they come.
    Bulk(bulk::BulkArgs),
    /// Collect a job's answers from its answers topic into a file (JSONL,
    /// or Parquet for a path ending in .parquet), each request once, until
    /// every request has its final answer. Run again, it skips what the
    /// file holds. Exit status 4 when some answers are not ok.
    Collect(jobs::CollectArgs),
    /// A job at a glance: sent, answered by status, waiting, rate, ETA.
    Job(jobs::JobArgs),
    /// Cancel a job (ce_fleetjob): workers answer its requests `cancelled`
    /// instead of computing them, from within a second.
    Cancel(cancel::CancelArgs),
    /// Create infer.<model>, infer.<model>.bulk, infer.<model>.dlq, the
    /// answers topics (infer.<model>.answers, infer.<model>.bulk.answers)
    /// and the job records (infer.fleet.jobs) with these settings, grow
    /// existing lanes to --partitions (never shrink), report what differs.
    Topics(topics::TopicArgs),
    /// Print the ACL SETUSER commands of the worker and client Redis users
    /// for this release's key prefix (put the passwords in).
    RedisAcl(redis_acl::AclArgs),
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .init();
    let cli = Cli::parse();
    let names = cli.namespace.namespace()?;
    match cli.command {
        Command::Topics(args) => topics::run(&connect_kafka(&cli.kafka).await?, &names, args).await,
        Command::Send(args) => send::run(&connect_kafka(&cli.kafka).await?, &names, args).await,
        Command::Image(args) => image::run(&connect_kafka(&cli.kafka).await?, &names, args).await,
        Command::Bulk(args) => bulk::run(&connect_kafka(&cli.kafka).await?, &names, args).await,
        Command::Collect(args) => jobs::run_collect(&connect_kafka(&cli.kafka).await?, &names, args).await,
        Command::Job(args) => jobs::run_job(&connect_kafka(&cli.kafka).await?, &names, args).await,
        Command::Cancel(args) => cancel::run(&names, args).await,
        Command::RedisAcl(args) => {
            redis_acl::run(&names, args);
            Ok(())
        }
    }
}

/// The Kafka settings, checked: a wrong password or an untrusted
/// certificate ends the command with one clear line, now.
async fn connect_kafka(args: &KafkaArgs) -> Result<KafkaConfig> {
    let kafka = KafkaConfig::from_args(args)?;
    let probe = kafka.client_config();
    tokio::task::spawn_blocking(move || fleet_connect::kafka_check::check_at_start(&probe, Duration::from_secs(10)))
        .await??;
    Ok(kafka)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use fleet_producer::results::DEFAULT_CANCEL_KEEP;
    use fleet_producer::Request;
    use fleet_proto::{JobId, Lane, RequestId};

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn send_and_image_take_a_lane_and_a_job() {
        let cli = Cli::try_parse_from(["fleet-produce", "send", "--model", "m", "--text", "t"]).unwrap();
        let Command::Send(args) = cli.command else { panic!("not send") };
        assert_eq!((args.routing.lane, args.routing.job), (Lane::Interactive, None));
        let image = ["fleet-produce", "image", "--model", "m", "a.png", "--lane", "bulk", "--job", "j-1"];
        let Command::Image(args) = Cli::try_parse_from(image).unwrap().command else { panic!("not image") };
        assert_eq!(args.routing.lane, Lane::Bulk);
        let request = args.routing.apply(Request::text(RequestId::parse("r").unwrap(), "t"));
        assert_eq!((request.lane, request.job.as_ref().map(JobId::as_str)), (Lane::Bulk, Some("j-1")));
        for bad in [["--lane", "urgent"], ["--job", "a job"]] {
            let args = ["fleet-produce", "send", "--model", "m", "--text", "t", bad[0], bad[1]];
            assert!(Cli::try_parse_from(args).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_cancel_lasts_a_week_unless_told_in_a_duration_or_seconds() {
        fn keep(extra: &[&str]) -> Duration {
            let args = [&["fleet-produce", "cancel", "--job", "j-1"][..], extra].concat();
            let Command::Cancel(args) = Cli::try_parse_from(args).unwrap().command else { panic!("not cancel") };
            args.keep.unwrap_or(DEFAULT_CANCEL_KEEP)
        }
        assert_eq!(keep(&[]), Duration::from_secs(7 * 24 * 3600));
        assert_eq!(keep(&["--keep", "3600"]), Duration::from_secs(3600));
        assert_eq!(keep(&["--keep", "12h"]), Duration::from_secs(12 * 3600));
        assert_eq!(keep(&["--keep", "7days"]), DEFAULT_CANCEL_KEEP);
        for bad in ["0", "500ms", "soon", "-5"] {
            assert!(cancel::duration_or_seconds(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn bulk_needs_a_file_and_takes_a_job() {
        assert!(Cli::try_parse_from(["fleet-produce", "bulk", "--model", "m"]).is_err());
        let args = ["fleet-produce", "bulk", "--model", "m", "--file", "texts.jsonl", "--jsonl", "--job", "reembed-1"];
        assert!(matches!(Cli::try_parse_from(args).map(|c| c.command), Ok(Command::Bulk(_))));
    }

    #[test]
    fn prefixes_may_follow_the_subcommand_like_the_kafka_settings() {
        let cli = Cli::try_parse_from(["fleet-produce", "topics", "--model", "m", "--topic-prefix", "blue.infer."]);
        assert_eq!(cli.map(|c| c.namespace.topic_prefix).ok().as_deref(), Some("blue.infer."));
    }
}
