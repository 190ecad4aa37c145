//! The sink: where finished requests leave the worker. Answers go where
//! their request's reply names: Redis (`fleet:result:{<id>}` hash field +
//! `fleet:ready:{<id>}` push, both with the version's result TTL), the
//! lane's answers topic on Kafka ([`answer_records`]), or both; messages
//! without a readable id go to the DLQ topic.
//!
//! A batch of answers is a small Lua script per answer, all sent at once on
//! the multiplexed connection (one round trip; in Redis Cluster one per
//! node: a request's two keys share a hash tag, so each script runs on one
//! node, and no pipeline spans two requests). Each script is atomic, so a waiter woken by the ready-list
//! push always finds the hash field, and it writes only if the field is not
//! there yet: the first answer wins. A message redelivered after a crash or
//! a rebalance can then never replace an `ok` answer with a later `expired`
//! one, nor push the ready list twice.
//!
//! Each answer's write succeeds or fails on its own (`failure` sorts the
//! failures): one request whose keys cannot be written ends as a dead
//! letter without holding back the rest of its batch.

mod answer_lane;
pub mod answer_records;
pub mod dead_letters;
mod ends;
pub mod failure;
mod kafka_producer;
pub mod results;
mod stage;

pub use answer_records::AnswerRecords;
pub use dead_letters::{DeadLetters, LocalRecord};
pub use results::{Attempt, ResultSink};
pub use stage::SinkStage;
