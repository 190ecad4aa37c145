//! `loadtest run`: open-loop load against a running fleet (its brokers,
//! its Redis, its names); writes a report folder and fails when a request
//! was lost.

use super::{finish, read_corpus, unix_s};
use anyhow::Result;
use clap::{Args, ValueEnum};
use fleet_connect::namespace::NamespaceArgs;
use fleet_connect::redis::RedisConfig;
use fleet_producer::KafkaConfig;
use fleet_proto::ModelName;
use loadtest::profile::Profile;
use loadtest::runner::{self, RunConfig};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Copy, ValueEnum)]
pub enum ProfileName {
    Steady,
    Ramp,
    Burst,
}

impl ProfileName {
    /// The arrivals' clock the flags describe.
    fn profile(self, args: &RunArgs) -> Profile {
        match self {
            ProfileName::Steady => Profile::Steady { rate: args.rate },
            ProfileName::Ramp => Profile::Ramp { from: args.ramp_from, to: args.rate },
            ProfileName::Burst => Profile::Burst {
                rate: args.rate,
                factor: args.burst_factor,
                start_s: args.burst_at.as_secs_f64(),
                burst_s: args.burst_for.as_secs_f64(),
            },
        }
    }

    /// The profile's name in the run id and the report folder.
    fn name(self) -> &'static str {
        match self {
            ProfileName::Steady => "steady",
            ProfileName::Ramp => "ramp",
            ProfileName::Burst => "burst",
        }
    }
}

#[derive(Args)]
pub struct RunArgs {
    #[command(flatten)]
    kafka: fleet_connect::kafka::KafkaArgs,
    /// One Redis server, or a Redis Cluster with --redis-cluster.
    #[command(flatten)]
    redis: RedisConfig,
    /// The measured release's topic, group and Redis key prefixes, as its
    /// workers were given them.
    #[command(flatten)]
    namespace: NamespaceArgs,
    #[arg(long, default_value = "minilm")]
    model: ModelName,
    #[arg(long, value_enum, default_value = "steady")]
    profile: ProfileName,
    /// Requests per second (steady; the base of a burst; the end of a ramp).
    #[arg(long, default_value_t = 50.0)]
    rate: f64,
    /// Ramp: the rate at the start.
    #[arg(long, default_value_t = 1.0)]
    ramp_from: f64,
    /// Burst: how many times the base rate.
    #[arg(long, default_value_t = 10.0)]
    burst_factor: f64,
    /// Burst: when it starts.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    burst_at: Duration,
    /// Burst: how long it lasts.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    burst_for: Duration,
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// At most this many requests, whatever the profile.
    #[arg(long, default_value_t = 200_000)]
    max_requests: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Each request's deadline after its send; default: the model's TTL.
    #[arg(long, value_parser = humantime::parse_duration)]
    ttl: Option<Duration>,
    /// How long to keep collecting answers after the last send.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    drain: Duration,
    /// The report folder; default loadtest-report/<profile>-<unix time>.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Sentences the texts are made of.
    #[arg(long, default_value = "scripts/demo-sentences.txt")]
    corpus: PathBuf,
    #[arg(long)]
    no_progress: bool,
}

pub async fn execute(args: RunArgs) -> Result<()> {
    let (profile, name) = (args.profile.profile(&args), args.profile.name());
    // Settings that cannot work fail here, before the Kafka check's wait.
    let (redis, names) = (args.redis.target()?, args.namespace.namespace()?);
    // What is measured, said once: a prefix exported for the workers
    // (FLEET_*_PREFIX) applies here too.
    let server = if matches!(redis, fleet_connect::redis::RedisTarget::Cluster(_)) {
        "a Redis Cluster"
    } else {
        "one Redis server"
    };
    println!(
        "measuring topic {}, group {}, answers on {server}",
        names.topic(&args.model),
        names.consumer_group(&args.model)
    );
    let kafka = KafkaConfig::from_args(&args.kafka)?;
    fleet_connect::kafka_check::check_at_start(&kafka.client_config(), Duration::from_secs(10))?;
    let started = unix_s();
    let outcome = runner::run(RunConfig {
        kafka,
        redis,
        names,
        model: args.model.clone(),
        profile,
        duration: args.duration,
        seed: args.seed,
        max_requests: args.max_requests,
        corpus: read_corpus(&args.corpus)?,
        ttl: args.ttl,
        drain: args.drain,
        run_id: format!("lt-{name}-{started}"),
        progress: !args.no_progress,
        admission: None,
        arrivals: None,
        images: Vec::new(),
    })
    .await?;
    let dir = args.out.unwrap_or_else(|| PathBuf::from(format!("loadtest-report/{name}-{started}")));
    let title = format!("{name} {} req/s, {:?}, {}", args.rate, args.duration, args.model);
    finish(&dir, &title, &outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Cli, Command};
    use clap::Parser;
    use fleet_connect::redis::RedisTarget;
    use fleet_proto::Namespace;

    fn run_args(argv: &[&str]) -> RunArgs {
        match Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{e}")).command {
            Command::Run(args) => *args,
            _ => panic!("not a run"),
        }
    }

    #[test]
    fn a_run_measures_a_prefixed_release_on_a_cluster() {
        let args = run_args(&[
            "loadtest",
            "run",
            "--topic-prefix",
            "blue.infer.",
            "--group-prefix",
            "blue-fleet.",
            "--redis-prefix",
            "blue:fleet:",
            "--redis-cluster",
            "--redis",
            "redis://a:7000,redis://b:7001",
        ]);
        let names = args.namespace.namespace().unwrap();
        assert_eq!(names, Namespace::new("blue.infer.", "blue-fleet.", "blue:fleet:").unwrap());
        assert!(matches!(args.redis.target(), Ok(RedisTarget::Cluster(_))));
    }
}
