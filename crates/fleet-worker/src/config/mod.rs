//! The worker's configuration: command line and environment ([`args`],
//! clap) for where things are, the model's `config.toml` ([`model`]) for
//! how it is served.

pub mod answers;
pub mod args;
pub mod model;
pub mod signature;

pub use answers::AnswersConfig;
pub use args::{DeviceChoice, WorkerArgs};
pub use model::{ModelConfig, ModelKind, ModelVersion, Precision};
pub use signature::{Activation, ImageLayout, Pooling, TaskConfig, TextInput};
