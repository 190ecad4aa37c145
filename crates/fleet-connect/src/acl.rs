//! The two Redis ACL users of a release, worker and client, each with the
//! least it needs (docs/security.md). The rules live in one file the chart
//! renders too (`deploy/redis/acl.conf`, linked into the chart), so the chart, the docs'
//! command and the test apply the same rules.

use fleet_proto::Namespace;

const RULES: &str = include_str!("../../../deploy/redis/acl.conf");

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Writes answers, the feature cache and backlog reports.
    Worker,
    /// Reads answers and backlog reports, pops its ready lists, cancels jobs.
    Client,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Worker => "worker",
            Self::Client => "client",
        }
    }
}

/// The ACL rules of `role` (no user name, no password) for the keys of
/// `namespace`: what goes after `ACL SETUSER <name> reset on >PASSWORD`.
pub fn rules(role: Role, namespace: &Namespace) -> Vec<String> {
    let line = RULES
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|l| l.strip_prefix(role.as_str())?.strip_prefix(' '))
        .expect("redis-acl.conf has a line per role");
    line.split_whitespace().map(|rule| rule.replace("PREFIX", namespace.redis_prefix())).collect()
}

/// `ACL SETUSER <user> reset on >PASSWORD <rules>` for `role`, as one line
/// to paste into redis-cli (with the password put in).
pub fn setuser_command(role: Role, user: &str, namespace: &Namespace) -> String {
    format!("ACL SETUSER {user} reset on >PASSWORD {}", rules(role, namespace).join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_is_confined_to_the_release_prefix() {
        let ns = Namespace::new("infer.", "fleet.", "blue:").unwrap();
        let worker = rules(Role::Worker, &ns);
        assert!(worker.contains(&"~blue:*".to_owned()) && worker.contains(&"+eval".to_owned()), "{worker:?}");
        let client = rules(Role::Client, &ns);
        assert!(client.contains(&"%R~blue:result:*".to_owned()), "{client:?}");
        for write in ["+eval", "+set", "+hset", "+rpush", "+del", "+@all"] {
            assert!(!client.contains(&write.to_owned()), "the client may {write} on every key it may write");
        }
        assert!(rules(Role::Worker, &Namespace::default()).iter().all(|r| !r.contains("PREFIX")));
    }

    #[test]
    fn the_client_may_set_cancel_keys_and_nothing_else() {
        let client = rules(Role::Client, &Namespace::new("infer.", "fleet.", "blue:").unwrap());
        // A selector: its key and command rights hold only together, and its
        // words are joined again by Redis (split here like every rule).
        let selector = client.iter().position(|r| r.starts_with('(')).expect("the client has a selector");
        assert_eq!(client[selector..], ["(%W~blue:cancel:*", "+set)"], "{client:?}");
        // SET appears nowhere else: not on the ready lists the client may write.
        assert_eq!(client.iter().filter(|r| r.contains("+set")).count(), 1, "{client:?}");
        let commands: Vec<&str> = client.iter().map(|r| r.trim_matches(|c: char| c == '(' || c == ')')).collect();
        for other in ["+get", "+del", "+eval", "+hset", "+rpush", "+expire", "+@all"] {
            assert!(!commands.contains(&other), "the client may {other}: {client:?}");
        }
    }
}
