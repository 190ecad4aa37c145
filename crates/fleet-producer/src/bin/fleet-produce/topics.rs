//! `fleet-produce topics`: makes each model's topics the fleet's way
//! (`fleet_producer::topics`) and prints one verdict a topic.

use anyhow::{Context, Result};
use clap::Args;
use fleet_producer::topics::{ensure_topics, TopicChange, TopicSettings};
use fleet_producer::KafkaConfig;
use fleet_proto::{ModelName, Namespace};

#[derive(Args)]
pub struct TopicArgs {
    #[arg(long = "model", required = true)]
    models: Vec<ModelName>,
    #[command(flatten)]
    settings: TopicSettings,
}

pub async fn run(kafka: &KafkaConfig, names: &Namespace, args: TopicArgs) -> Result<()> {
    for model in &args.models {
        let changes = ensure_topics(kafka, names, model, args.settings)
            .await
            .with_context(|| format!("creating topics of {model}"))?;
        for change in &changes {
            println!("{}: {change}", verdict(change));
        }
    }
    Ok(())
}

/// `ok` as asked, `changed` made or grown, `left` differing and not touched.
fn verdict(change: &TopicChange) -> &'static str {
    match change {
        TopicChange::KeptMorePartitions { .. } | TopicChange::ConfigDiffers { .. } => "left",
        TopicChange::Unchanged { .. } => "ok",
        TopicChange::Created { .. } | TopicChange::Grown { .. } => "changed",
    }
}
