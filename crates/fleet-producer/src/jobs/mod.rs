//! A bulk job from its sender to its owner's file.
//!
//! `fleet-produce bulk` sends a file's lines to a model's bulk lane as one
//! job and writes the job's [record](records) (how many requests, where the
//! answers go) to the release's jobs topic. The workers produce each
//! answer to the lane's answers topic (`fleet_proto::answer_record`). A
//! [collector](collect) reads them back into a file, JSONL or Parquet
//! ([`output`]), exactly once per request whatever was delivered twice,
//! and resumes where its file ends; [`status`] shows a job at a glance.
//! Everything here reads Kafka, never Redis: a job's answers survive a
//! Redis that loses its data, a collector restarted hours later, a machine
//! other than the sender's.

pub mod answers;
pub mod collect;
pub mod ledger;
pub mod output;
pub mod records;
pub mod status;

pub use collect::{collect, CollectError, CollectOptions, Collected};
pub use ledger::JobLedger;
pub use output::OutputFormat;
pub use records::{JobRecords, JobsError};
