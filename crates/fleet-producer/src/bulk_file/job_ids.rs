//! Naming a bulk job and its requests: a job that was not named gets a
//! name, and each line's request is `<job>-<line number>`, so an answer
//! leads back to its line.

use fleet_proto::request_id::MAX_LEN;
use fleet_proto::{JobId, RequestId};
use std::hash::BuildHasher;

/// The most digits a line number has (`u64::MAX`): what a job id must leave
/// room for in `<job>-<line number>`.
const LINE_NUMBER_DIGITS: usize = 20;

/// The longest job id whose requests can all be named `<job>-<line number>`.
pub const MAX_JOB_LEN: usize = MAX_LEN - 1 - LINE_NUMBER_DIGITS;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job id {job} is {len} characters: at most {MAX_JOB_LEN} leave room for `-<line number>` in its request ids")]
pub struct JobTooLong {
    pub job: JobId,
    pub len: usize,
}

/// Names a job's requests `<job>-<line number>`. Made only for a job short
/// enough for every line number, so naming a line cannot fail halfway
/// through a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineIds {
    job: JobId,
}

impl LineIds {
    pub fn new(job: JobId) -> Result<Self, JobTooLong> {
        let len = job.as_str().len();
        if len > MAX_JOB_LEN {
            return Err(JobTooLong { job, len });
        }
        Ok(Self { job })
    }

    pub fn job(&self) -> &JobId {
        &self.job
    }

    pub fn for_line(&self, line_number: u64) -> RequestId {
        // The job's characters are an id's, '-' and digits are too, and
        // `new` left room for the longest number.
        RequestId::parse(&format!("{}-{line_number}", self.job)).expect("a checked job id with a line number is an id")
    }
}

/// `bulk-<unix ms>-<16 hex digits>`: sorts by start time, and two runs
/// started in the same millisecond still differ by their `nonce`.
pub fn generated_job_id(now_ms: u64, nonce: u64) -> JobId {
    RequestId::parse(&format!("bulk-{now_ms}-{nonce:016x}")).expect("digits and hex make an id")
}

/// A number no other run is likely to draw: std's `RandomState` is keyed
/// from the operating system's randomness, which is all a job name needs
/// (it is not a secret), without a crate for it.
pub fn random_nonce() -> u64 {
    let salt = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    std::collections::hash_map::RandomState::new().hash_one((salt, std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_job_id_must_leave_room_for_line_numbers() {
        let longest = JobId::parse(&"j".repeat(MAX_JOB_LEN)).unwrap();
        let ids = LineIds::new(longest).unwrap();
        assert_eq!(ids.for_line(u64::MAX).as_str().len(), MAX_LEN);
        let too_long = JobId::parse(&"j".repeat(MAX_JOB_LEN + 1)).unwrap();
        let error = LineIds::new(too_long).unwrap_err();
        assert_eq!(error.len, MAX_JOB_LEN + 1);
        assert!(error.to_string().contains(&MAX_JOB_LEN.to_string()), "{error}");
    }

    #[test]
    fn generated_job_ids_are_valid_and_differ() {
        let id = generated_job_id(1_765_000_000_123, 0xabc);
        assert_eq!(id.as_str(), "bulk-1765000000123-0000000000000abc");
        assert!(LineIds::new(id).is_ok());
        let drawn: std::collections::HashSet<u64> = (0..64).map(|_| random_nonce()).collect();
        assert_eq!(drawn.len(), 64, "two nonces collided");
    }

    proptest! {
        #[test]
        fn a_line_is_named_after_its_job_and_number(name in "[A-Za-z0-9._:-]{1,107}", number in any::<u64>()) {
            let ids = LineIds::new(JobId::parse(&name).unwrap()).unwrap();
            let id = ids.for_line(number);
            prop_assert_eq!(id.as_str(), format!("{name}-{number}"));
        }
    }
}
