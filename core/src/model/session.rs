//! Sessions, their revert state, warnings and revert history, in OpenCode's JSON shapes.

use serde::{Deserialize, Serialize};

use super::{FileDiff, Holder, LeaseToken, MessageId, PartId, SessionId, SnapshotId};

/// Creation and update times, epoch milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionTime {
    /// When the session was created.
    pub created: u64,
    /// When it last changed.
    pub updated: u64,
    /// When a client archived it (OpenCode's `time.archived`, set by `PATCH /session/:id`); nothing of
    /// rewind's depends on it.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived: Option<u64>,
}

/// The sums of a diff: what a revert undid, or what a session changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DiffSummary {
    /// Lines added.
    pub additions: u64,
    /// Lines removed.
    pub deletions: u64,
    /// Files changed.
    pub files: u64,
}

impl DiffSummary {
    /// The sums over a list of file diffs.
    pub fn of(diffs: &[FileDiff]) -> Self {
        DiffSummary {
            additions: diffs.iter().map(|d| d.additions).sum(),
            deletions: diffs.iter().map(|d| d.deletions).sum(),
            files: diffs.len() as u64,
        }
    }
}

/// Token usage as OpenCode reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Tokens {
    /// Total, when the provider reports one.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// Input tokens.
    #[serde(default)]
    pub input: f64,
    /// Output tokens.
    #[serde(default)]
    pub output: f64,
    /// Reasoning tokens.
    #[serde(default)]
    pub reasoning: f64,
    /// Cache reads and writes.
    #[serde(default)]
    pub cache: TokenCache,
}

/// Cache token usage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenCache {
    /// Tokens read from the cache.
    #[serde(default)]
    pub read: f64,
    /// Tokens written to the cache.
    #[serde(default)]
    pub write: f64,
}

impl Tokens {
    /// Each count with its name, as OpenCode's JSON names it (`total` only when reported).
    pub fn named_values(&self) -> Vec<(&'static str, f64)> {
        let mut values = vec![
            ("tokens.input", self.input),
            ("tokens.output", self.output),
            ("tokens.reasoning", self.reasoning),
            ("tokens.cache.read", self.cache.read),
            ("tokens.cache.write", self.cache.write),
        ];
        if let Some(total) = self.total {
            values.push(("tokens.total", total));
        }
        values
    }

    /// The element-wise sum.
    pub fn add(&self, other: &Tokens) -> Tokens {
        let total = match (self.total, other.total) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
        Tokens {
            total,
            input: self.input + other.input,
            output: self.output + other.output,
            reasoning: self.reasoning + other.reasoning,
            cache: TokenCache {
                read: self.cache.read + other.cache.read,
                write: self.cache.write + other.cache.write,
            },
        }
    }
}

/// The revert descriptor stored on a session while it is reverted (OpenCode's `session.revert`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RevertDescriptor {
    /// The first hidden message (or the message whose parts from `partID` on are hidden).
    #[serde(rename = "messageID")]
    pub message_id: MessageId,
    /// The first hidden part of `messageID`, when only part of it is hidden.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(rename = "partID", default, skip_serializing_if = "Option::is_none")]
    pub part_id: Option<PartId>,
    /// The pre-revert snapshot.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotId>,
    /// The unified diff from the pre-revert snapshot to the worktree after the revert.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

impl RevertDescriptor {
    /// Where the hidden range begins: the message, and the part when only part of it is hidden.
    pub fn point(&self) -> (MessageId, Option<PartId>) {
        (self.message_id.clone(), self.part_id.clone())
    }
}

/// A step that has begun and not finished: it holds the session's lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OpenStep {
    /// The assistant message the step belongs to.
    #[serde(rename = "messageID")]
    pub message_id: MessageId,
    /// The snapshot taken when the step began.
    pub snapshot: SnapshotId,
    /// The step's lease token (the session lease).
    pub token: LeaseToken,
    /// Who owns the step.
    pub holder: Holder,
    /// When the step began, epoch milliseconds.
    pub started: u64,
}

/// A session (OpenCode's `Session.Info`), with rewind's extensions: the snapshot store, the state the last
/// revert left (`applied`) and the open step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Session {
    /// The session id.
    pub id: SessionId,
    /// A short readable name.
    pub slug: String,
    /// The project id (rewind uses the store's identity).
    #[serde(rename = "projectID")]
    pub project_id: String,
    /// The worktree: an absolute, forward-slash path, fixed at creation.
    pub directory: String,
    /// The session this one was created under (OpenCode's subagent sessions), fixed at creation.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(rename = "parentID", default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<SessionId>,
    /// The title.
    pub title: String,
    /// A client's own data about the session (OpenCode's `metadata`, set by `PATCH /session/:id`), kept as
    /// given.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    /// The rewind version that created the session.
    pub version: String,
    /// Creation and update times.
    pub time: SessionTime,
    /// The sums of the last revert's session diff.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<DiffSummary>,
    /// The sum of the cost of the stored `step-finish` parts.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub cost: f64,
    /// The sum of the tokens of the stored `step-finish` parts.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub tokens: Tokens,
    /// Present while the session is reverted.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revert: Option<RevertDescriptor>,
    /// rewind: the snapshot store of the worktree.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub store: String,
    /// rewind: the snapshot the last revert left the worktree in, while reverted.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<SnapshotId>,
    /// rewind: when the current revert began, epoch milliseconds (its warnings are those raised since).
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(
        rename = "revertedAt",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub reverted_at: Option<u64>,
    /// rewind: the step in progress, if any (the session is busy while it is set).
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<OpenStep>,
    /// rewind: the worktree-relative paths the session's last step snapshot (a step's start or end) left
    /// out: over the size cap, special files, names that are not UTF-8. Each was named in a warning when a
    /// step's snapshot first left it out; a later step names only paths not in this list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// What a client sets of a session (`PATCH /session/:id`, OpenCode's `session.update`): each field given
/// replaces the stored one; the others stay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionFields {
    /// A new title.
    pub title: Option<String>,
    /// New metadata, replacing the stored object whole; `Some(None)` clears it.
    pub metadata: Option<Option<serde_json::Map<String, serde_json::Value>>>,
    /// A new archive time (`time.archived`); `Some(None)` clears it.
    pub archived: Option<Option<u64>>,
}

impl SessionFields {
    /// A new title alone.
    pub fn title(title: String) -> SessionFields {
        SessionFields {
            title: Some(title),
            ..SessionFields::default()
        }
    }

    /// Every field a client sets, as `session` has them: what a put of the session keeps of the stored
    /// one, and what an answer read before a commit takes from the session stored after it.
    pub fn of(session: &Session) -> SessionFields {
        SessionFields {
            title: Some(session.title.clone()),
            metadata: Some(session.metadata.clone()),
            archived: Some(session.time.archived),
        }
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.title.is_none() && self.metadata.is_none() && self.archived.is_none()
    }

    /// `session` with these fields set.
    pub fn apply_to(&self, session: &mut Session) {
        if let Some(title) = &self.title {
            session.title.clone_from(title);
        }
        if let Some(metadata) = &self.metadata {
            session.metadata.clone_from(metadata);
        }
        if let Some(archived) = self.archived {
            session.time.archived = archived;
        }
    }
}

/// Something the user should know about a session's files, with the snapshot that holds what was
/// overwritten, if anything.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Warning {
    /// When it was raised, epoch milliseconds.
    pub time: u64,
    /// What happened and what the user can do.
    pub message: String,
    /// A snapshot holding the files as the message says (their earlier content, or as they were when a
    /// step was aborted): `rewind snapshot restore ID PATH…` puts them back so.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotId>,
    /// The files concerned, absolute forward-slash paths.
    pub files: Vec<String>,
}

/// A revert made permanent by cleanup, kept as long as the session so nothing it overwrote is lost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RevertHistoryEntry {
    /// When cleanup ran, epoch milliseconds.
    pub time: u64,
    /// The descriptor the session had.
    pub descriptor: RevertDescriptor,
    /// The state the revert left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<SnapshotId>,
    /// The sums of the revert's session diff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<DiffSummary>,
    /// The warnings raised while the session was reverted.
    pub warnings: Vec<Warning>,
}
