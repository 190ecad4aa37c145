//! The last line of defence: a panic while handling one message (its
//! headers, its tokenization, its decode, its batch's model call) is caught
//! where that message is handled and becomes that message's failure, counted
//! in `fleet_panics_total{stage}`. The worker goes on with the next one.
//!
//! Without this, one input that trips a bug in a dependency takes the
//! process down; its offset is never committed, so every worker the
//! partition moves to dies on the same message in turn.

use crate::metrics::PANICS_TOTAL;
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Where in the data path a panic was caught (the metric's `stage` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Admission and tokenization of one message.
    Prepare,
    /// One image's decode.
    Decode,
    /// A batch's model call.
    Model,
}

impl Stage {
    pub const ALL: [Self; 3] = [Self::Prepare, Self::Decode, Self::Model];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Prepare => "prepare",
            Self::Decode => "decode",
            Self::Model => "model",
        }
    }
}

/// Runs `work`; a panic comes back as its message, counted and logged.
///
/// `AssertUnwindSafe`: what `work` touches is either owned by it or left
/// consistent by construction (the callers pass one message's state, which
/// is dropped or turned into an error answer after a panic).
pub fn contain<T>(stage: Stage, work: impl FnOnce() -> T) -> Result<T, String> {
    catch_unwind(AssertUnwindSafe(work)).map_err(|payload| {
        let message = panic_message(payload.as_ref());
        record(stage, &message);
        message
    })
}

/// Counts and logs a panic caught elsewhere (a task's `JoinError`).
pub fn record(stage: Stage, message: &str) {
    metrics::counter!(PANICS_TOTAL, "stage" => stage.as_str()).increment(1);
    tracing::error!(stage = stage.as_str(), panic = message, "a panic was contained to one message");
}

/// The text a panic was raised with (`panic!("...")`, `unwrap` on `Err`).
pub fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

/// Locks `mutex` whether or not a holder panicked: the fleet's locks guard
/// state that a panic cannot leave worse than losing it (no holder panics
/// halfway through an update), so a poisoned one is used as it stands.
pub fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_its_message_and_work_that_finishes_its_value() {
        assert_eq!(contain(Stage::Prepare, || 7), Ok(7));
        let caught = contain(Stage::Prepare, || -> u32 { panic!("header {} is bad", 3) });
        assert_eq!(caught, Err("header 3 is bad".to_owned()));
        let unwrapped = contain(Stage::Model, || "x".parse::<u32>().unwrap());
        assert!(unwrapped.unwrap_err().contains("ParseIntError"));
    }
}
