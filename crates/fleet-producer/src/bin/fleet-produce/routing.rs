//! The lane and job a request travels with: one definition, so `send` and
//! `image` take the same flags.

use clap::Args;
use fleet_producer::Request;
use fleet_proto::{JobId, Lane};

/// Which lane requests travel in and the job they belong to; the same for
/// `send` and `image`.
#[derive(Args)]
pub struct LaneArgs {
    /// interactive (infer.<model>: a person waits) or bulk
    /// (infer.<model>.bulk: read with the capacity interactive work leaves).
    #[arg(long, default_value_t = Lane::Interactive)]
    pub lane: Lane,
    /// The job the requests belong to (ce_fleetjob): `fleet-produce cancel
    /// --job <id>` cancels them all.
    #[arg(long)]
    pub job: Option<JobId>,
}

impl LaneArgs {
    pub fn apply(&self, request: Request) -> Request {
        let request = request.in_lane(self.lane);
        match &self.job {
            Some(job) => request.with_job(job.clone()),
            None => request,
        }
    }
}
