//! What can go wrong running a model, and which failures a batch split can
//! fix (out of memory) and which name a config key (signature).

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("loading {path}: {source}")]
    Load { path: String, source: tch::TchError },
    #[error("model call failed: {0}")]
    Forward(tch::TchError),
    /// The batch did not fit: the memory guard refused it, or libtorch's
    /// allocator failed. Split and retried, unlike the other errors.
    #[error("out of device memory: {0}")]
    OutOfMemory(String),
    #[error("CUDA was asked for, but libtorch sees no CUDA device")]
    NoCuda,
    #[error("model returned shape {got:?}, expected [{rows}, dim]")]
    BadShape { got: Vec<i64>, rows: usize },
    #[error("labels: {0}")]
    Labels(String),
    /// The module does not fit what the config declares: the key to change.
    #[error("{key}: {problem}")]
    Signature { key: &'static str, problem: String },
    #[error("warm-up failed: {0}")]
    WarmUp(String),
    #[error("{0}")]
    Incompatible(String),
}

impl From<tch::TchError> for EngineError {
    fn from(e: tch::TchError) -> Self {
        let message = e.to_string();
        if super::memory::is_out_of_memory(&message) {
            // The first line names the allocation; the rest is a C++ backtrace.
            Self::OutOfMemory(message.lines().next().unwrap_or_default().to_owned())
        } else {
            Self::Forward(e)
        }
    }
}
