//! The use cases over the ports: recording a session (messages, parts, steps), revert, unrevert, cleanup,
//! preview and recovery (SPEC sections 4 to 8). Everything here is async over the ports and does no IO of
//! its own; the decisions themselves are the pure functions of `crate::revert`.

mod activity;
mod leases;
mod maintenance;
mod query;
mod record;
mod recovery;
mod revert;

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::id::IdGenerator;
use crate::model::{
    Event, EventPayload, FileActionKind, Holder, HolderKind, LeaseToken, MessageId, PartBody,
    PartId, RelPath, Role, Session, SessionFields, SessionId, SnapshotId, Tokens, Warning,
};
use crate::ports::{HostPort, MessageRepo, SnapshotPort};
use crate::revert::RevertPoint;

pub use leases::HeldLease;
pub use maintenance::{GcRequest, GcSkipped, GcSummary, SnapshotRestore, WorktreeGc};
pub use record::{AbandonedSteps, DeleteIf, STEP_NOT_REVERTABLE, normalise_directory};

/// How the services behave.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// Whose leases this process takes: `Process` for the command line and embedded use, `Server` for the
    /// HTTP server (its steps expire after `step_timeout_ms` without a request on the session).
    pub holder_kind: HolderKind,
    /// How long a server-owned step may go without a request before it is abandoned (default 10 minutes).
    pub step_timeout_ms: u64,
    /// How long an operation's lease lasts before it must be renewed (default 2 minutes).
    pub operation_lease_ms: u64,
    /// The version recorded on new sessions.
    pub version: String,
    /// How many of the newest outbox events gc keeps (default 10,000). Events exist to reach the servers'
    /// event streams, which follow the outbox within milliseconds; older ones only fill the database (a
    /// revert's events carry its whole diff).
    pub outbox_kept: u64,
    /// How many bytes of event text gc keeps at most, counted from the newest event back (default 64 MiB;
    /// `MessageRepo::outbox_over`): the events of large reverts and turns outlive their sessions in the
    /// outbox, each carrying its diff, so a count alone bounds nothing on disk. The newest event always
    /// stays.
    pub outbox_kept_bytes: u64,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            holder_kind: HolderKind::Process,
            step_timeout_ms: 10 * 60 * 1000,
            operation_lease_ms: 2 * 60 * 1000,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            outbox_kept: 10_000,
            outbox_kept_bytes: 64 * 1024 * 1024,
        }
    }
}

/// A message to record.
#[derive(Clone, Debug, PartialEq)]
pub struct NewMessage {
    /// The client's own id; it must sort after every message of the session.
    pub id: Option<MessageId>,
    /// User or assistant.
    pub role: Role,
    /// For an assistant message, its turn's user message (default: the latest user message).
    pub parent_id: Option<MessageId>,
    /// Other fields to keep (agent, model, …).
    pub extra: Map<String, Value>,
    /// Parts recorded with the message.
    pub parts: Vec<NewPart>,
}

impl NewMessage {
    /// A user message with one text part.
    pub fn user_text(text: impl Into<String>) -> Self {
        NewMessage {
            id: None,
            role: Role::User,
            parent_id: None,
            extra: Map::new(),
            parts: vec![NewPart::new(PartBody::text(text))],
        }
    }

    /// An assistant message of the latest turn, without parts.
    pub fn assistant() -> Self {
        NewMessage {
            id: None,
            role: Role::Assistant,
            parent_id: None,
            extra: Map::new(),
            parts: Vec::new(),
        }
    }
}

/// A part to record.
#[derive(Clone, Debug, PartialEq)]
pub struct NewPart {
    /// The client's own id; it must sort after every part of the message.
    pub id: Option<PartId>,
    /// Its type and fields.
    pub body: PartBody,
}

impl NewPart {
    /// A part with a generated id.
    pub fn new(body: PartBody) -> Self {
        NewPart { id: None, body }
    }
}

/// How a step ended, with the agent's usage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepEnd {
    /// Why it ended (default `stop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The step's cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// The step's tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<Tokens>,
}

/// One file of a revert preview.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PreviewFile {
    /// The absolute, forward-slash path.
    pub file: String,
    /// What a revert would do to it.
    pub action: FileActionKind,
    /// Why it would be kept, for `keep`.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What a revert would do, computed without changing anything.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Preview {
    /// The descriptor the revert would store (without snapshot and diff).
    pub descriptor: RevertPoint,
    /// The files it would write, delete or keep.
    pub files: Vec<PreviewFile>,
}

/// How many files a revert or unrevert wrote and deleted, and which it left as they were (for logs and
/// reports: a report of what an unrevert put back leaves these out).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileCounts {
    /// Files written.
    pub written: usize,
    /// Files deleted.
    pub deleted: usize,
    /// Files left as they were (not tracked content where the operation needed to change them, or, for an
    /// unrevert, the user's own files standing below or in their place).
    pub kept: Vec<RelPath>,
}

impl FileCounts {
    fn add(&mut self, written: usize, deleted: usize, kept: impl IntoIterator<Item = RelPath>) {
        self.written += written;
        self.deleted += deleted;
        self.kept.extend(kept);
    }
}

/// What recovery finished.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Intent records of dead owners that were rolled back.
    pub recovered: Vec<LeaseToken>,
    /// Intent records still owned by a live operation, left alone.
    pub in_progress: Vec<LeaseToken>,
    /// Intent records that could not be finished (`recover` goes on with the others).
    pub failed: Vec<RecoveryFailure>,
}

/// An intent record recovery could not finish: operations on its worktree stay refused until it can.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryFailure {
    /// The intent's token.
    pub token: LeaseToken,
    /// Its worktree.
    pub directory: String,
    /// Why it could not be finished.
    pub error: String,
}

/// rewind's services over its ports.
pub struct Rewind {
    snapshots: Arc<dyn SnapshotPort>,
    repo: Arc<dyn MessageRepo>,
    host: Arc<dyn HostPort>,
    config: ServiceConfig,
    ids: IdGenerator,
    /// The messages this process has warned of a tool part recorded outside a step (bounded), so the
    /// session's warnings are read at most once per message (`record::tool_outside_a_step`).
    tool_warned: std::sync::Mutex<std::collections::HashSet<MessageId>>,
    /// The leases this process let go of but could not write so: the database failed the release or the
    /// hand-back (`leases::Unreturned`). Written again before its next recovery.
    unreturned: std::sync::Mutex<Vec<leases::Unreturned>>,
}

impl std::fmt::Debug for Rewind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rewind")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Rewind {
    /// The services over the given adapters.
    pub fn new(
        snapshots: Arc<dyn SnapshotPort>,
        repo: Arc<dyn MessageRepo>,
        host: Arc<dyn HostPort>,
        config: ServiceConfig,
    ) -> Self {
        Rewind {
            snapshots,
            repo,
            host,
            config,
            ids: IdGenerator::new(),
            tool_warned: std::sync::Mutex::default(),
            unreturned: std::sync::Mutex::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ServiceConfig {
        &self.config
    }

    fn now(&self) -> u64 {
        self.host.now_ms()
    }

    fn holder(&self) -> Holder {
        Holder {
            kind: self.config.holder_kind,
            process: self.host.this_process(),
        }
    }

    /// Whether this process acts for `holder`'s step as its owner (finishes, aborts and renews it): the
    /// process itself, or, for a server, any server's step. An HTTP step belongs to its client, which
    /// may reach any server of a shared database (a load balancer, a reconnect: SPEC 4 names its owner
    /// "the server"). Review: only the server that began it could finish or abort it, and another
    /// answered 409 "Session is busy" while nothing else used the session.
    fn speaks_for(&self, holder: &Holder) -> bool {
        *holder == self.holder()
            || (holder.kind == HolderKind::Server && self.config.holder_kind == HolderKind::Server)
    }

    fn event(&self, payload: EventPayload) -> Event {
        Event {
            id: self.ids.ascending(self.now(), None),
            payload,
        }
    }

    fn warning_event(&self, session: &SessionId, warning: &Warning) -> Event {
        self.event(EventPayload::SessionWarning {
            session_id: session.clone(),
            message: warning.message.clone(),
            snapshot: warning.snapshot.clone(),
            files: warning.files.clone(),
        })
    }

    /// Adds a warning and its `session.warning` event to a transaction.
    fn push_warning(
        &self,
        transaction: &mut crate::ports::Transaction,
        session: &SessionId,
        warning: Warning,
    ) {
        transaction
            .events
            .push(self.warning_event(session, &warning));
        transaction.changes.push(crate::ports::Change::AddWarning {
            session: session.clone(),
            warning,
        });
    }

    /// `session` as an operation stored it, with what a client set stored now (title, metadata, archive
    /// time): an update may have landed since the operation read the session (its own write kept those,
    /// `Change::PutSession`), and the answer should not show the old ones. The session as given when it
    /// cannot be read (the result is stored).
    async fn with_stored_client_fields(&self, mut session: Session) -> Session {
        if let Ok(Some(stored)) = self.repo.session(&session.id).await {
            SessionFields::of(&stored).apply_to(&mut session);
            session.time.updated = session.time.updated.max(stored.time.updated);
        }
        session
    }

    fn updated_event(&self, session: &Session) -> Event {
        self.event(EventPayload::SessionUpdated {
            session_id: session.id.clone(),
            info: Box::new(session.clone()),
        })
    }

    /// Loads a session after recovery and the abort of abandoned steps in its worktree, which SPEC
    /// sections 4 and 8 ask before any operation on a session.
    async fn load_prepared(&self, id: &SessionId) -> Result<Session> {
        let session = self.load_session(id).await?;
        let sessions = self.prepare_worktree(&session.directory).await?;
        session_in(id, &sessions)
    }

    /// Paths that differ between two snapshots; none, without asking the store, when they are the same
    /// snapshot (an id names its content).
    async fn changed_between(
        &self,
        worktree: &Path,
        from: &SnapshotId,
        to: &SnapshotId,
    ) -> Result<Vec<RelPath>> {
        if from == to {
            return Ok(Vec::new());
        }
        self.snapshots.changed_between(worktree, from, to).await
    }

    async fn load_session(&self, id: &SessionId) -> Result<Session> {
        self.repo
            .session(id)
            .await?
            .ok_or_else(|| session_not_found(id))
    }
}

/// How many times a write whose reads went stale is tried in all (`again_if_stale`).
const FRESH_TRIES: usize = 16;

/// Whether a write (its reads, checks and commit) that gave `result` is to be built again: when its commit
/// found its reads stale (`Error::Stale`: another request stored a message or part first), it is done
/// again as if it had come after the winner: its id follows the winner's, or it is refused as it would
/// have been then. `None` means again; `tries` counts the stale attempts, and after `FRESH_TRIES` of them
/// the session is reported busy. (A loop in each write rather than a helper taking an async closure: the
/// futures of such closures are not known to be `Send`, which the server's handlers must be.)
fn again_if_stale<T>(result: Result<T>, tries: &mut usize) -> Option<Result<T>> {
    match result {
        Err(Error::Stale {
            session_id,
            message,
        }) => {
            *tries += 1;
            if *tries < FRESH_TRIES {
                None
            } else {
                Some(Err(Error::busy(
                    &session_id,
                    format!("{message}, {FRESH_TRIES} times in a row; try again"),
                )))
            }
        }
        other => Some(other),
    }
}

fn session_not_found(id: &SessionId) -> Error {
    Error::NotFound(format!("Session not found: {id}"))
}

/// Session `id` out of a list of its worktree's sessions.
fn session_in(id: &SessionId, sessions: &[Session]) -> Result<Session> {
    sessions
        .iter()
        .find(|s| &s.id == id)
        .cloned()
        .ok_or_else(|| session_not_found(id))
}

/// A fresh token for one operation or step.
fn new_token() -> LeaseToken {
    LeaseToken(format!(
        "tok_{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    ))
}

fn worktree(session: &Session) -> &Path {
    Path::new(&session.directory)
}
