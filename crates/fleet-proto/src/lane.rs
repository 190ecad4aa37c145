//! Lanes: the two kinds of traffic one model serves. Interactive requests
//! (a person waits; seconds matter) go to `infer.<model>` as they always
//! did; bulk requests (a backfill, a nightly run; throughput matters) go to
//! `infer.<model>.bulk`, same message contract. One consumer group reads
//! both, and a worker takes bulk work only with the capacity interactive
//! work leaves, keeping bulk a minimum share so a backfill always ends.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Lane {
    #[default]
    Interactive,
    Bulk,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lane {0:?} is not one of interactive, bulk")]
pub struct InvalidLane(pub String);

impl Lane {
    /// Interactive first: the order a worker prefers them in.
    pub const ALL: [Self; 2] = [Self::Interactive, Self::Bulk];

    /// The `lane` label of the per-lane metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Interactive => "interactive",
            Self::Bulk => "bulk",
        }
    }

    /// What the lane's topic adds to `infer.<model>`.
    pub fn topic_suffix(self) -> &'static str {
        match self {
            Self::Interactive => "",
            Self::Bulk => ".bulk",
        }
    }
}

impl fmt::Display for Lane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Lane {
    type Err = InvalidLane;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|lane| lane.as_str() == s).ok_or_else(|| InvalidLane(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_read_back_from_their_names() {
        for lane in Lane::ALL {
            assert_eq!(lane.as_str().parse::<Lane>(), Ok(lane));
        }
        assert!("Bulk".parse::<Lane>().is_err());
        assert_eq!(Lane::default(), Lane::Interactive);
    }
}
