//! What the run samples beside its load: the consumer group's lag and the
//! workers' backlog report each second, and the dead-letter topic's count
//! before and after.

use anyhow::{Context, Result};
use fleet_connect::redis::Connection;
use fleet_producer::admission;
use fleet_proto::backlog::Load;
use fleet_proto::{ModelName, Namespace};
use rdkafka::consumer::BaseConsumer;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

#[derive(Default)]
pub(super) struct Samples {
    pub(super) lag: Vec<(f64, u64)>,
    pub(super) load: Vec<(f64, Load)>,
}

/// Once a second until stopped: the group's total lag, and the backlog
/// report the workers published (as a producer's admission reads it).
pub(super) async fn sample_fleet(
    consumer: Arc<BaseConsumer>,
    mut redis: Connection,
    names: Namespace,
    model: ModelName,
    start: Instant,
    mut stop: oneshot::Receiver<()>,
) -> Samples {
    let mut samples = Samples::default();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = &mut stop => return samples,
            _ = tick.tick() => {}
        }
        if let Ok(Some(load)) = admission::read_load(&mut redis, &names.backlog_key(&model)).await {
            samples.load.push((start.elapsed().as_secs_f64(), load));
        }
        let (consumer, group, topic) = (consumer.clone(), names.consumer_group(&model), names.topic(&model));
        let measured = tokio::task::spawn_blocking(move || {
            fleet_ops::probe::measure(consumer.as_ref(), &group, &topic, Duration::from_secs(2))
        })
        .await;
        if let Ok(Ok(lag)) = measured {
            samples.lag.push((start.elapsed().as_secs_f64(), lag.total()));
        }
    }
}

/// Messages ever written to the model's dead-letter topic (partition 0).
pub(super) async fn dlq_high_watermark(consumer: &Arc<BaseConsumer>, dlq_topic: &str) -> Result<u64> {
    use rdkafka::consumer::Consumer;
    let (consumer, topic) = (consumer.clone(), dlq_topic.to_owned());
    let (_, high) = tokio::task::spawn_blocking(move || consumer.fetch_watermarks(&topic, 0, Duration::from_secs(10)))
        .await?
        .context("reading the dead-letter topic's watermark")?;
    Ok(u64::try_from(high).unwrap_or(0))
}
