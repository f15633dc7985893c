//! Leases (who holds a session or a worktree until when), the rule for taking one over, and the intent
//! records that make revert and unrevert recoverable (SPEC sections 1 and 8).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{RelPath, SessionId, SnapshotId};

/// What a lease guards.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "lowercase")]
pub enum LeaseKey {
    /// One session: its steps, reverts, unreverts and cleanups.
    Session(SessionId),
    /// One worktree (by its absolute path): reverts, unreverts and the snapshots of steps.
    Worktree(String),
}

impl LeaseKey {
    /// A stable text form, for storage.
    pub fn as_storage_key(&self) -> String {
        match self {
            LeaseKey::Session(id) => format!("session:{id}"),
            LeaseKey::Worktree(path) => format!("worktree:{path}"),
        }
    }

    /// Whether an operation holding one of the two keys must keep out of the other: the same key, or two
    /// worktrees one of which lies inside the other (`/x` and `/x/sub`: a revert of either writes files of
    /// both).
    pub fn overlaps(&self, other: &LeaseKey) -> bool {
        match (self, other) {
            (LeaseKey::Worktree(a), LeaseKey::Worktree(b)) => worktrees_overlap(a, b),
            _ => self == other,
        }
    }

    /// The session leased, when the key is a session's.
    pub fn session(&self) -> Option<&SessionId> {
        match self {
            LeaseKey::Session(id) => Some(id),
            LeaseKey::Worktree(_) => None,
        }
    }
}

impl fmt::Debug for LeaseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_storage_key())
    }
}

/// Whether worktree `a` is `b`, lies inside it or encloses it (by path components: `/x` and `/x/sub` do,
/// `/x` and `/xy` do not).
pub fn worktrees_overlap(a: &str, b: &str) -> bool {
    let inside = |inner: &str, outer: &str| {
        inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || outer.ends_with('/'))
    };
    inside(a, b) || inside(b, a)
}

/// A process, identified so that a reused pid is never mistaken for the original one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "camelCase")]
pub struct ProcessIdentity {
    /// The host name.
    pub host: String,
    /// The process id.
    pub pid: u32,
    /// The process start time (clock ticks since boot on Linux), so a reused pid is told apart.
    pub start_time: u64,
    /// The boot the process ran in (Linux's `/proc/sys/kernel/random/boot_id`), when known: after a
    /// restart of the host, a pid and a start time can come back, a boot id does not. Absent in leases
    /// written before it was recorded.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot: Option<String>,
    /// The machine and pid namespace the pid is one of (`/etc/machine-id` and `/proc/self/ns/pid`), when
    /// known: two machines can share a host name (and a PostgreSQL database), and a container can share
    /// its host's name but not its process table; a pid of either cannot be looked up here. Absent in
    /// leases written before it was recorded.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}

impl ProcessIdentity {
    /// Whether `other` runs where this process can look its pid up: the same host name and, when both
    /// say, the same machine and pid namespace (`machine`). One written before `machine` was recorded is
    /// judged by its host name alone, as it was.
    pub fn same_host(&self, other: &ProcessIdentity) -> bool {
        self.host == other.host
            && match (&self.machine, &other.machine) {
                (Some(mine), Some(theirs)) => mine == theirs,
                _ => true,
            }
    }
}

/// Whose a lease is: a process working for itself (the command line, embedded use) or a server working for
/// HTTP clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum HolderKind {
    /// A process that does the work itself: its lease lives as long as the process.
    Process,
    /// A server working for HTTP clients: its step leases expire after the step timeout of silence.
    Server,
}

/// The owner of a lease.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Holder {
    /// Process or server.
    pub kind: HolderKind,
    /// The process that runs the operation.
    pub process: ProcessIdentity,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            HolderKind::Process => "process",
            HolderKind::Server => "server process",
        };
        write!(f, "{what} {} on {}", self.process.pid, self.process.host)
    }
}

/// A token unique to one operation (or one step).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(transparent)]
pub struct LeaseToken(pub String);

impl LeaseToken {
    /// The token of the expired lease a failed rollback or recovery leaves for the interrupted operation
    /// whose token this is: not the operation's own, so that operation, should it still run, no longer
    /// holds it (its guards and renewals fail, its release leaves it).
    pub fn interrupted(&self) -> LeaseToken {
        LeaseToken(format!("{}.interrupted", self.0))
    }
}

impl fmt::Display for LeaseToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A lease row: who holds `key`, until when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// What is held.
    pub key: LeaseKey,
    /// The operation's token.
    pub token: LeaseToken,
    /// Who holds it.
    pub holder: Holder,
    /// When it expires unless renewed, epoch milliseconds.
    pub expires_at: u64,
}

/// The lease a take replaces (`MessageRepo::take_lease`): its token and, for a takeover, the expiry the
/// taker judged it by. A lease renewed since that judgement has another expiry and is not replaced: its
/// holder is alive after all (review: a holder stalled past its expiry renewed it and went on writing,
/// while another host, having judged it expired, replaced it by its token alone and recovered the same
/// files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replacing {
    /// The token the replaced lease must hold.
    pub token: LeaseToken,
    /// The expiry it must still have; none for a lease the caller holds itself (a hand-back).
    pub expires_at: Option<u64>,
}

impl Replacing {
    /// Replaces the lease of `token`, whatever its expiry: one the caller holds itself.
    pub fn token(token: LeaseToken) -> Replacing {
        Replacing {
            token,
            expires_at: None,
        }
    }

    /// Replaces `lease` as the caller saw it: the same token with the same expiry.
    pub fn seen(lease: &Lease) -> Replacing {
        Replacing {
            token: lease.token.clone(),
            expires_at: Some(lease.expires_at),
        }
    }

    /// Whether `existing` is the lease this replaces.
    pub fn matches(&self, existing: &Lease) -> bool {
        existing.token == self.token && self.expires_at.is_none_or(|at| at == existing.expires_at)
    }
}

/// The answer to an attempt to take a lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaseTake {
    /// The lease is now ours.
    Taken,
    /// Someone else holds it (or the lease we meant to replace was not the current one).
    Held(Lease),
}

/// SPEC section 1: a lease may be taken over when its process is known to be gone (same host as `this`
/// process, `ProcessIdentity::same_host`: that pid with that start time no longer runs), or when it has
/// expired and its process is on another host or is a server's. A lease whose process still runs on this
/// host is never taken over, even when expired.
pub fn may_take_over(
    lease: &Lease,
    now_ms: u64,
    this: &ProcessIdentity,
    is_alive: impl Fn(&ProcessIdentity) -> bool,
) -> bool {
    let expired = now_ms >= lease.expires_at;
    if lease.holder.process.same_host(this) {
        if !is_alive(&lease.holder.process) {
            return true;
        }
        expired && lease.holder.kind == HolderKind::Server
    } else {
        expired
    }
}

/// The operation an intent record protects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IntentOperation {
    /// A revert (including the undo of a previous revert that it starts with).
    Revert,
    /// An unrevert.
    Unrevert,
}

impl fmt::Display for IntentOperation {
    /// As a sentence names it: `revert`, `unrevert`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IntentOperation::Revert => "revert",
            IntentOperation::Unrevert => "unrevert",
        })
    }
}

/// Written before an operation touches any file, deleted in the transaction that stores its result; a
/// record left behind by a dead owner is finished by recovery (SPEC section 8).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IntentRecord {
    /// The operation's token (also the session lease's token while it runs).
    pub token: LeaseToken,
    /// The session operated on.
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    /// The worktree.
    pub directory: String,
    /// Revert or unrevert.
    pub operation: IntentOperation,
    /// Who runs it.
    pub holder: Holder,
    /// The worktree's snapshot before the operation touched anything.
    pub before: SnapshotId,
    /// The files the operation may touch (worktree-relative).
    pub files: Vec<RelPath>,
    /// When it was written, epoch milliseconds.
    pub created: u64,
    /// Set when the stored record could not be read (a damaged or hand-edited row): then only `token`,
    /// `session_id` and `directory` are known, the other fields are placeholders that nothing may use,
    /// and recovery refuses the record with this reason (`IntentRecord::unreadable`). Never stored.
    #[serde(skip)]
    pub unreadable: Option<String>,
}

impl IntentRecord {
    /// A record an adapter found but could not read (`reason`): the operation it protects is not known,
    /// so recovery cannot finish it. It still names its worktree and its token, so the worktree's
    /// operations, and the leases of the operation's holder, stay refused as for any interrupted operation
    /// that cannot be finished, while every other worktree goes on.
    pub fn unreadable(
        token: LeaseToken,
        session_id: SessionId,
        directory: String,
        reason: String,
    ) -> IntentRecord {
        IntentRecord {
            token,
            session_id,
            directory,
            operation: IntentOperation::Revert,
            holder: Holder {
                kind: HolderKind::Process,
                process: ProcessIdentity {
                    host: String::new(),
                    pid: 0,
                    start_time: 0,
                    boot: None,
                    machine: None,
                },
            },
            before: SnapshotId::unknown(),
            files: Vec::new(),
            created: 0,
            unreadable: Some(reason),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worktrees_overlap_by_whole_path_components() {
        for (a, b) in [
            ("/x", "/x"),
            ("/x", "/x/sub"),
            ("/x/sub/deeper", "/x"),
            ("/", "/x"),
        ] {
            assert!(worktrees_overlap(a, b), "{a} and {b} overlap");
            assert!(worktrees_overlap(b, a), "{b} and {a} overlap");
        }
        for (a, b) in [
            ("/x", "/xy"),
            ("/x/sub", "/x/sub2"),
            ("/x", "/X/sub"),
            ("/a\\b", "/a"),
            ("/x/a", "/x/b"),
        ] {
            assert!(!worktrees_overlap(a, b), "{a} and {b} do not overlap");
            assert!(!worktrees_overlap(b, a), "{b} and {a} do not overlap");
        }
        let session =
            LeaseKey::Session(crate::id::IdGenerator::new().descending(1_700_000_000_000));
        assert!(session.overlaps(&session));
        assert!(!session.overlaps(&LeaseKey::Worktree("/x".to_owned())));
        assert!(
            LeaseKey::Worktree("/x".to_owned()).overlaps(&LeaseKey::Worktree("/x/sub".to_owned()))
        );
    }
}
