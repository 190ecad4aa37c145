//! The worker's configuration: command line and environment ([`args`],
//! clap) for where things are, the model's `config.toml` ([`model`]) for
//! how it is served, with its [`batching`] limits and [`device`] settings.

pub mod answers;
pub mod args;
pub mod batching;
pub mod device;
pub mod model;
pub mod signature;

pub use answers::AnswersConfig;
pub use args::{DeviceChoice, WorkerArgs};
pub use batching::{BatchingConfig, BucketLimits};
pub use device::{DeviceConfig, Precision};
pub use model::{ModelConfig, ModelKind, ModelVersion};
pub use signature::{Activation, ImageLayout, Pooling, TaskConfig, TextInput};
