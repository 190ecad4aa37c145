//! Noticing that Redis forgot what the fleet wrote.
//!
//! An offset is committed once Redis acknowledged the answer. If Redis then
//! loses its memory (a restart without persistence, a failover to a replica
//! that had not received the write, a flush), the answers of the last
//! result-TTL window are gone while their messages are committed: a client
//! would wait for nothing. Workers keep one marker key with no TTL
//! (`Namespace::memory_marker_key`) and look at it every second with
//! `SET marker <token> NX GET` (one command, allowed by the worker's ACL,
//! Redis 7.0 or later): the reply is the value that was there, or nil when
//! the key was gone and this worker's token was set now. A marker that is
//! gone, or holds another value than this worker saw last (another worker
//! found it gone first and set its own), means Redis forgot: the worker
//! replays what a client may still wait for (`Source::replay_since`).
//!
//! What it cannot see: a loss while no worker of the namespace runs (the
//! first worker to start finds no marker and cannot tell a new Redis from
//! an emptied one), and, on a Redis Cluster, a loss on a node other than
//! the marker's.

use fleet_connect::redis::{Connection, RedisTarget};
use std::time::Duration;

/// What one look at the marker says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerLook {
    /// The first look of this worker: nothing to compare with yet.
    FirstLook,
    /// The marker is as this worker saw it last.
    Kept,
    /// The marker was gone or replaced: Redis lost what was written.
    Forgotten,
}

/// Judges one reply. `seen`: the value this worker saw last (`None`
/// before its first look); `reply`: what `SET .. NX GET` returned (`None`:
/// the key was gone and `offered` is its value now). Returns the verdict
/// and the value to remember.
pub fn judge(seen: Option<&str>, reply: Option<&str>, offered: &str) -> (MarkerLook, String) {
    let now = reply.unwrap_or(offered).to_owned();
    let verdict = match (seen, reply) {
        (None, _) => MarkerLook::FirstLook,
        (Some(_), None) => MarkerLook::Forgotten,
        (Some(seen), Some(reply)) if seen != reply => MarkerLook::Forgotten,
        (Some(_), Some(_)) => MarkerLook::Kept,
    };
    (verdict, now)
}

/// The marker, looked at once a second by the status reporter.
pub struct LostDataMarker {
    conn: Connection,
    key: String,
    worker_id: String,
    seen: Option<String>,
}

impl LostDataMarker {
    pub async fn connect(redis: &RedisTarget, key: String, worker_id: String) -> Result<Self, redis::RedisError> {
        let conn = redis.managed(Duration::from_secs(2), Duration::from_secs(2)).await?;
        Ok(Self { conn, key, worker_id, seen: None })
    }

    /// Looks at the marker (and sets it where it is gone).
    pub async fn look(&mut self, now_ms: u64) -> Result<MarkerLook, redis::RedisError> {
        let offered = format!("{}@{now_ms}", self.worker_id);
        let reply: Option<String> =
            redis::cmd("SET").arg(&self.key).arg(&offered).arg("NX").arg("GET").query_async(&mut self.conn).await?;
        let (verdict, now) = judge(self.seen.as_deref(), reply.as_deref(), &offered);
        self.seen = Some(now);
        Ok(verdict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_look_only_learns_the_marker() {
        assert_eq!(judge(None, Some("w1@1"), "w2@5"), (MarkerLook::FirstLook, "w1@1".to_owned()));
        assert_eq!(judge(None, None, "w2@5"), (MarkerLook::FirstLook, "w2@5".to_owned()));
    }

    #[test]
    fn the_same_marker_is_kept() {
        assert_eq!(judge(Some("w1@1"), Some("w1@1"), "w2@9"), (MarkerLook::Kept, "w1@1".to_owned()));
    }

    #[test]
    fn a_gone_or_replaced_marker_means_redis_forgot_once() {
        // Gone: this worker's token is the marker now.
        let (verdict, now) = judge(Some("w1@1"), None, "w2@9");
        assert_eq!((verdict, now.as_str()), (MarkerLook::Forgotten, "w2@9"));
        // Another worker found it gone first and set its own.
        let (verdict, now) = judge(Some("w1@1"), Some("w3@8"), "w2@9");
        assert_eq!((verdict, now.as_str()), (MarkerLook::Forgotten, "w3@8"));
        // The next look sees the new marker kept: one replay per loss.
        assert_eq!(judge(Some(&now), Some("w3@8"), "w2@10").0, MarkerLook::Kept);
    }
}
