//! The soak of a fleet that runs elsewhere (staging): the load goes to its
//! brokers under its names, its workers' /metrics are read at the
//! addresses given, and each fault is a command the operator names.

use super::inject::{burst_note, Injector};
use super::sampler::{sample_once, Addresses, Samples};
use super::{soak_while_loaded, SoakLoad, SoakOutcome, DRAIN};
use crate::profile::Profile;
use crate::runner::RunConfig;
use crate::soak::schedule::{Fault, Planned};
use anyhow::{bail, Context, Result};
use fleet_proto::ModelName;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::time::Instant;

/// A fleet running elsewhere, and how to soak it.
pub struct StagingConfig {
    pub kafka: fleet_producer::KafkaConfig,
    pub redis: fleet_connect::redis::RedisTarget,
    pub names: fleet_proto::Namespace,
    pub text_model: ModelName,
    pub image_model: ModelName,
    /// Its plan already left without the faults that have no command (see
    /// [`FaultCommands::keep`]).
    pub load: SoakLoad,
    pub text_rate: f64,
    pub image_rate: f64,
    /// Each worker's name and metrics address (host:port of its /metrics).
    pub workers: Vec<(String, SocketAddr)>,
    pub commands: FaultCommands,
    /// How long a fault's command may run beyond the fault's own length
    /// before it is killed and the fault counted as not injected.
    pub command_timeout: Duration,
}

/// The operator's command for each fault (run with `sh -c`); the burst
/// needs none: the load makes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultCommands(pub Vec<(Fault, String)>);

impl FaultCommands {
    /// `fault=command`, e.g. `broker-restart=kubectl -n staging delete pod kafka-0`.
    pub fn parse_one(arg: &str) -> Result<(Fault, String), String> {
        let (name, command) = arg.split_once('=').ok_or("expected FAULT=COMMAND")?;
        let fault = Fault::ALL
            .into_iter()
            .find(|f| f.name() == name.trim())
            .ok_or_else(|| format!("unknown fault {name:?}: one of {}", fault_names()))?;
        if fault == Fault::Burst {
            return Err("the burst needs no command: the load makes it".into());
        }
        if command.trim().is_empty() {
            return Err(format!("no command for {name}"));
        }
        Ok((fault, command.trim().to_owned()))
    }

    fn of(&self, fault: Fault) -> Option<&str> {
        self.0.iter().find(|(f, _)| *f == fault).map(|(_, c)| c.as_str())
    }

    /// The planned faults this soak can make: those with a command, and
    /// the bursts.
    pub fn keep(&self, plan: Vec<Planned>) -> Vec<Planned> {
        plan.into_iter().filter(|p| p.fault == Fault::Burst || self.of(p.fault).is_some()).collect()
    }

    /// Runs the fault's command; its status and last line of output are
    /// the note. Lasting faults (a broker restart, a Redis freeze) are the
    /// command's to undo: the soak waits for it to return, for the fault's
    /// length and `timeout` more at most (a hung `kubectl` must not hold
    /// the faults after it); then its shell is killed and the fault is not
    /// injected. The kill undoes nothing the command had started.
    async fn run(&self, planned: &Planned, timeout: Duration) -> Result<String> {
        let command = self.of(planned.fault).with_context(|| format!("no command for {}", planned.fault.name()))?;
        let limit = Duration::from_secs_f64(planned.lasts_s) + timeout;
        let mut shell = tokio::process::Command::new("sh");
        shell
            .args(["-c", command])
            .env("FLEET_SOAK_FAULT", planned.fault.name())
            .env("FLEET_SOAK_FAULT_SECONDS", format!("{:.0}", planned.lasts_s))
            .kill_on_drop(true);
        let output = tokio::time::timeout(limit, shell.output())
            .await
            .map_err(|_| anyhow::anyhow!("`{command}` had not returned after {limit:?}: killed"))?
            .with_context(|| format!("running {command:?}"))?;
        let said = String::from_utf8_lossy(if output.stdout.is_empty() { &output.stderr } else { &output.stdout })
            .lines()
            .last()
            .unwrap_or("")
            .to_owned();
        if !output.status.success() {
            bail!("`{command}` failed ({}): {said}", output.status);
        }
        Ok(format!("`{command}`: {said}"))
    }
}

/// A running fleet's faults: the operator's commands.
struct Commands<'a> {
    commands: &'a FaultCommands,
    burst_factor: f64,
    timeout: Duration,
}

impl Injector for Commands<'_> {
    async fn one(&mut self, planned: &Planned) -> Result<String> {
        if planned.fault == Fault::Burst {
            return Ok(burst_note(self.burst_factor, planned));
        }
        self.commands.run(planned, self.timeout).await
    }
}

fn fault_names() -> String {
    Fault::ALL.iter().filter(|f| **f != Fault::Burst).map(|f| f.name()).collect::<Vec<_>>().join(", ")
}

/// Soaks a running fleet: its topics, its Redis, its workers' metrics, the
/// operator's fault commands. Nothing is started here.
pub async fn run_staging(config: StagingConfig) -> Result<SoakOutcome> {
    let load = &config.load;
    if load.images.is_empty() {
        bail!("a soak needs at least one image");
    }
    let run_id = super::run_id();
    let offered = |model: &ModelName, rate: f64, seed: u64, run_id: String| RunConfig {
        names: config.names.clone(),
        arrivals: Some(load.arrivals(rate, seed)),
        drain: DRAIN,
        seed,
        ..RunConfig::new(
            config.kafka.clone(),
            config.redis.clone(),
            model.clone(),
            Profile::Steady { rate },
            load.duration,
            load.corpus.clone(),
            run_id,
        )
    };
    let texts = offered(&config.text_model, config.text_rate, load.seed, format!("soak-t-{run_id}"));
    let images = RunConfig {
        images: load.images.clone(),
        ..offered(&config.image_model, config.image_rate, load.seed + 1, format!("soak-i-{run_id}"))
    };
    let targets = Addresses(config.workers.clone());
    let samples = Samples::new(load.samples_file.as_deref())?;
    let start = Instant::now();
    let mut commands =
        Commands { commands: &config.commands, burst_factor: load.burst_factor, timeout: config.command_timeout };
    let (texts, images, injected, deaths) =
        soak_while_loaded(texts, images, load, start, &mut commands, &targets, &samples).await;
    let (_, answered) = sample_once(&targets, &samples, start).await;
    let mut deaths = deaths;
    deaths.extend(
        answered
            .into_iter()
            .filter(|(_, answered)| !answered)
            .map(|(name, _)| format!("{name} did not answer /metrics at the end")),
    );
    let samples = samples.take();
    Ok(SoakOutcome {
        text_model: config.text_model.to_string(),
        image_model: config.image_model.to_string(),
        text_capacity: None,
        image_capacity: None,
        text_rate: config.text_rate,
        image_rate: config.image_rate,
        texts: texts?,
        images: images?,
        samples,
        faults: injected,
        deaths,
        initial_workers: config.workers.iter().map(|(name, _)| name.clone()).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_command_names_its_fault_and_the_burst_needs_none() {
        let (fault, command) = FaultCommands::parse_one("broker-restart=kubectl delete pod kafka-0").unwrap();
        assert_eq!((fault, command.as_str()), (Fault::BrokerRestart, "kubectl delete pod kafka-0"));
        assert!(FaultCommands::parse_one("burst=true").unwrap_err().contains("needs no command"));
        assert!(FaultCommands::parse_one("earthquake=true").unwrap_err().contains("unknown fault"));
        assert!(FaultCommands::parse_one("redis-freeze=").is_err());
        assert!(FaultCommands::parse_one("redis-freeze").is_err());
    }

    #[test]
    fn only_faults_with_a_command_and_the_bursts_are_kept() {
        let commands = FaultCommands(vec![(Fault::RedisFreeze, "true".into())]);
        let planned = |fault, at_s| Planned { fault, at_s, lasts_s: 0.0 };
        let kept = commands.keep(vec![
            planned(Fault::MemberJoin, 10.0),
            planned(Fault::RedisFreeze, 20.0),
            planned(Fault::Burst, 30.0),
        ]);
        assert_eq!(kept.iter().map(|p| p.fault).collect::<Vec<_>>(), [Fault::RedisFreeze, Fault::Burst]);
    }

    #[tokio::test]
    async fn a_fault_command_says_what_it_did_and_one_that_hangs_is_killed() {
        let commands = FaultCommands(vec![
            (Fault::RedisFreeze, "echo froze for $FLEET_SOAK_FAULT_SECONDS s".into()),
            (Fault::BrokerRestart, "exec sleep 600".into()),
        ]);
        let planned = |fault, lasts_s| Planned { fault, at_s: 0.0, lasts_s };
        let note = commands.run(&planned(Fault::RedisFreeze, 5.0), Duration::from_secs(60)).await.unwrap();
        assert!(note.ends_with(": froze for 5 s"), "{note}");
        let hung = commands.run(&planned(Fault::BrokerRestart, 0.0), Duration::from_millis(300)).await.unwrap_err();
        assert!(format!("{hung:#}").contains("had not returned"), "{hung:#}");
    }
}
