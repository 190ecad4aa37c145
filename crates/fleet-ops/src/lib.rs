//! The fleet's operations surface, shared by the worker and the `fleet-lag`
//! exporter (neither links anything the other does not need):
//!
//! - [`lag`]: consumer-group lag per partition, the kafka_exporter / KEDA
//!   definition (pure);
//! - [`probe`]: reads the offsets it needs from the broker and publishes
//!   them as `kafka_consumergroup_lag`, per topic and lane (a model's
//!   interactive `infer.<model>` and bulk `infer.<model>.bulk`);
//! - [`hpa`]: the Kubernetes HPA's replica arithmetic, to replay a recorded
//!   lag series and document what the autoscaler will do (pure);
//! - [`endpoints`]: `/metrics`, `/healthz` and `/ready` on one port;
//! - [`stats`]: the median the tuners and the benchmarks share (pure).

pub mod endpoints;
pub mod hpa;
pub mod lag;
pub mod probe;
pub mod stats;
