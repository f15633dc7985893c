//! The ports: what the core needs from the outside world, each with its contract.
//!
//! `SnapshotPort` (the snapshot store, on gitoxide), `MessageRepo` (sessions, messages, leases and the event
//! outbox, on SeaORM), `EventBus` (live delivery, on a tokio broadcast channel) and `HostPort` (the clock and
//! process liveness). Ports take and return domain types only.

use std::collections::BTreeSet;
use std::path::Path;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use futures_core::Stream;

use crate::error::{Error, Result};
use crate::model::{
    Capture, Event, EventId, FileAction, FileDiff, GcReport, IntentRecord, Lease, LeaseKey,
    LeaseTake, LeaseToken, Message, MessageHead, MessageId, MessageWithParts, Part, PartId,
    ProcessIdentity, RelPath, Replacing, RestoreOutcome, RevertDiffs, RevertHistoryEntry,
    RevertOutcome, Session, SessionFields, SessionId, SnapshotId, SnapshotPatch, StoredEvent,
    TrackOutcome, Warning,
};

/// The snapshot store of SPEC section 2.
///
/// # Contract
/// - Every call about a worktree MUST name it (`stored_worktrees` and `remove_gone_stores` are about the
///   stores of this database); paths in and out MUST be worktree-relative.
/// - `track` MUST return the same id for the same tracked content, MUST list every path it skipped, and MUST
///   fail with an error naming the file, never return a stale or empty id, when a regular file cannot be
///   read. Re-tracking an unchanged tree MUST NOT read file content.
/// - `changed_files` MUST list, sorted, the tracked paths whose content or mode differs between `from` and
///   the worktree now (added, modified, deleted), and MUST NOT list a path that is not tracked content now.
/// - `changed_between` MUST list, sorted, the paths whose content or mode differs between two snapshots.
/// - `diff` MUST give one row per changed file in git's path order, with line counts equal to
///   `git diff --numstat --no-renames` for files under the size cap, and `patch: ""`, 0/0 for binary files.
/// - `revert_diffs(before, applied)` MUST equal `unified_diff(before)` taken with the worktree holding
///   `applied`, and `diff(applied, before)`.
/// - `restore` MUST make the tracked content (or the given paths) equal `to`, MUST NOT touch a path that is
///   already equal, and MUST NOT overwrite or delete anything that is not tracked content (ignored or
///   skipped files are left alone and reported as kept). It MUST NOT delete a file that `to` did not track
///   (ignored by its rules, or skipped by the `track` that returned it; every such file when the store no
///   longer knows what that track skipped): it may have existed then, so it is kept and reported as kept.
/// - `restore_since` MUST act as `restore` of its paths, with two differences: a path whose tracked content
///   (or absence) now differs from snapshot `since` MUST be left as it is and reported as kept, and a file
///   `to` did not track is deleted like any other (it puts back exactly the state it captured).
/// - `plan` MUST NOT change anything. For every file named in the patches the first patch naming it wins.
/// - `revert` MUST check that every tree and blob it needs exists before touching any file; a missing one is
///   `Error::MissingObject` and no file is touched. It MUST delete a file only when it is tracked content now
///   and was absent (and not untracked) at the winning patch's snapshot.
/// - A call MUST NOT write through a symlink or outside the worktree; every write MUST be atomic.
/// - `gc` MUST NOT delete an object reachable from `keep`, from the stat cache, or from an id returned by
///   `track` or `revert` within `grace`.
/// - `remove_gone_stores` MUST NOT remove the store of a worktree that exists, of one in `named`, or of one
///   that returned an id within `grace`.
#[cfg_attr(any(test, feature = "testkit"), mockall::automock)]
#[async_trait]
pub trait SnapshotPort: Send + Sync {
    /// The identity of the worktree's snapshot store (recorded with its sessions).
    async fn store_location(&self, worktree: &Path) -> Result<String>;
    /// Writes the worktree's tracked content as a snapshot.
    async fn track(&self, worktree: &Path) -> Result<TrackOutcome>;
    /// Whether `id` is a snapshot this worktree's store took (a `track` returned it), not merely a tree
    /// it holds (a subdirectory's, or git's empty tree): what an id a user typed must be before it is
    /// restored or compared. `MissingObject` when the store does not hold it at all, `InvalidInput` when it
    /// holds it as another kind of object (a blob). True by default, for any id (a store that keeps no
    /// such list: a missing one fails where it is used).
    async fn is_snapshot(&self, worktree: &Path, id: &SnapshotId) -> Result<bool> {
        let _ = (worktree, id);
        Ok(true)
    }
    /// Tracked paths that differ between `from` and the worktree now.
    async fn changed_files(&self, worktree: &Path, from: &SnapshotId) -> Result<Vec<RelPath>>;
    /// `track`, and what `changed_files(worktree, from)` lists, from one look at the worktree: what a
    /// step's end needs. The list is an error of its own (`from` gone from the store, say) beside the
    /// snapshot, which stands. An adapter that can should walk the worktree once; this default tracks and
    /// then lists, as two calls.
    async fn track_changes(
        &self,
        worktree: &Path,
        from: &SnapshotId,
    ) -> Result<(TrackOutcome, Result<Vec<RelPath>>)> {
        let tracked = self.track(worktree).await?;
        let changed = self.changed_files(worktree, from).await;
        Ok((tracked, changed))
    }
    /// Paths that differ between two snapshots.
    async fn changed_between(
        &self,
        worktree: &Path,
        from: &SnapshotId,
        to: &SnapshotId,
    ) -> Result<Vec<RelPath>>;
    /// Per-file diffs between two snapshots.
    async fn diff(
        &self,
        worktree: &Path,
        from: &SnapshotId,
        to: &SnapshotId,
    ) -> Result<Vec<FileDiff>>;
    /// The git-style text diff from `from` to the worktree now.
    async fn unified_diff(&self, worktree: &Path, from: &SnapshotId) -> Result<String>;
    /// A revert's two diffs between its pre-revert snapshot `before` and `applied`, from one reading of
    /// the files that differ: the text diff `unified_diff(before)` would give once the worktree holds
    /// `applied` (with no walk of the worktree), and the per-file diffs `diff(applied, before)` gives.
    async fn revert_diffs(
        &self,
        worktree: &Path,
        before: &SnapshotId,
        applied: &SnapshotId,
    ) -> Result<RevertDiffs>;
    /// Makes the tracked content, or only `paths`, equal snapshot `to`, keeping the files `to` did not track.
    async fn restore(
        &self,
        worktree: &Path,
        to: &SnapshotId,
        paths: Option<Vec<RelPath>>,
    ) -> Result<RestoreOutcome>;
    /// `restore` of `paths`, each only while its tracked content is still what snapshot `since` holds (a
    /// snapshot the caller took just before): a path that differs from `since` now was changed since by
    /// someone else, and is left as it is and reported as kept, so no content that is in no snapshot is
    /// overwritten or deleted. Unlike `restore`, a file `to` did not track is deleted like any other: this
    /// puts back exactly the state the caller captured.
    async fn restore_since(
        &self,
        worktree: &Path,
        to: &SnapshotId,
        paths: Vec<RelPath>,
        since: &SnapshotId,
    ) -> Result<RestoreOutcome>;
    /// What `revert` would do, changing nothing: an action for every file the patches name, then a
    /// deletion for each tracked file or symlink a write replaces on its way (one standing where a
    /// directory above a written file must come back; one the patches name to keep, as untracked when
    /// its step began, is such a deletion too, and `revert` reports it deleted, not kept).
    async fn plan(&self, worktree: &Path, patches: &[SnapshotPatch]) -> Result<Vec<FileAction>>;
    /// Carries out `plan`; `applied` is `base` with the written and deleted paths replaced.
    async fn revert(
        &self,
        worktree: &Path,
        patches: &[SnapshotPatch],
        base: &SnapshotId,
    ) -> Result<RevertOutcome>;
    /// `revert`, touching nothing until `ready` says `true` (the caller has stored its intent record):
    /// the plan and the checks may run before. When `ready` says `false` or is dropped, nothing is touched
    /// and the call fails. By default it waits for `ready` first, then reverts.
    async fn revert_when(
        &self,
        worktree: &Path,
        patches: &[SnapshotPatch],
        base: &SnapshotId,
        ready: Ready,
    ) -> Result<RevertOutcome> {
        if ready.await != Ok(true) {
            return Err(called_off());
        }
        self.revert(worktree, patches, base).await
    }
    /// Deletes stored objects that nothing keeps.
    async fn gc(&self, worktree: &Path, keep: &[SnapshotId], grace: Duration) -> Result<GcReport>;
    /// `gc` for a `keep` read from the database at `read_ms` (epoch milliseconds, taken before the read),
    /// with `grace` reaching back to it at least: every id returned since then is kept, since it may be
    /// stored after the read. A store that can no longer tell which ids it returned since then (another
    /// gc dropped them from its log meanwhile) refuses with `Busy`. By default, `gc`.
    async fn gc_since(
        &self,
        worktree: &Path,
        keep: &[SnapshotId],
        grace: Duration,
        read_ms: u64,
    ) -> Result<GcReport> {
        let _ = read_ms;
        self.gc(worktree, keep, grace).await
    }
    /// Removes the empty directories at and above `paths` (deepest first; the worktree itself never) that
    /// were made at or after `made_since` (epoch ms: when the operation began; a store may allow a few
    /// milliseconds of slack for the clock of the file system's birth times) and that snapshot `to` does
    /// not have: neither as a directory holding tracked content nor as one its tracks saw empty. What an
    /// interrupted operation made and emptied, which the restore that puts its files back has no file left
    /// in to delete (SPEC 8: wholly before); a directory the user had made before stays. Nothing when what
    /// `to`'s tracks saw empty, or when a directory was made, is not known. The directories removed; none
    /// by default (a store that keeps no directories).
    async fn remove_emptied_dirs(
        &self,
        worktree: &Path,
        to: &SnapshotId,
        paths: Vec<RelPath>,
        made_since: u64,
    ) -> Result<Vec<RelPath>> {
        let _ = (worktree, to, paths, made_since);
        Ok(Vec::new())
    }
    /// The worktrees that have a store here (of this database), as their stores recorded them, that
    /// still exist: `gc` visits them too, also when no session or capture names them any more (their
    /// objects would otherwise never be collected). None by default.
    async fn stored_worktrees(&self) -> Result<Vec<std::path::PathBuf>> {
        Ok(Vec::new())
    }
    /// Removes whole the stores here (of this database) whose worktree no longer exists, that no one of
    /// `named` is (the worktrees the database still names) and that returned no id within `grace`: none
    /// of their objects can be needed, and `gc` cannot open a store without its worktree. Each removed
    /// store's worktree with what was freed, or why it could not be removed. None by default.
    async fn remove_gone_stores(
        &self,
        named: &[std::path::PathBuf],
        grace: Duration,
    ) -> Result<Vec<(std::path::PathBuf, Result<GcReport>)>> {
        let _ = (named, grace);
        Ok(Vec::new())
    }
}

/// The go-ahead `SnapshotPort::revert_when` waits for before it touches a file.
pub type Ready = futures::channel::oneshot::Receiver<bool>;

/// The error of a `revert_when` whose go-ahead was refused or dropped (nothing was touched).
pub fn called_off() -> Error {
    Error::backend("the revert was called off before any file was touched")
}

/// A condition a transaction needs to commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Guard {
    /// The lease on `key` is still held with `token`.
    LeaseHeld {
        /// What is leased.
        key: LeaseKey,
        /// The token that must still hold it.
        token: LeaseToken,
    },
    /// The intent record with this token still exists.
    IntentExists(LeaseToken),
    /// No holder other than `seen` has the lease on `key`: it is free, or still held by `seen` (the holder
    /// the caller saw and judged harmless, such as the session's own open step). Fails with `Busy` naming
    /// the holder when someone else took it since the caller looked: a write that an operation would
    /// hide or undo (a message recorded while a revert runs) is refused instead. Adapters order lease
    /// takes and guarded commits, so a take that commits first is seen by this guard, and one that
    /// commits after sees this transaction's writes.
    LeaseNotTaken {
        /// What is leased.
        key: LeaseKey,
        /// The holder the caller saw, if any.
        seen: Option<LeaseToken>,
    },
    /// Session `session` is reverted to `point` (its descriptor's message and part), or not reverted when
    /// `None`, as the caller read it: no revert, unrevert or cleanup was stored since. Fails with `Busy`
    /// otherwise (a message recorded behind a revert that ran meanwhile would land in its hidden range),
    /// and with `NotFound` when the session is gone.
    RevertIs {
        /// The session.
        session: SessionId,
        /// The revert point the caller saw.
        point: Option<(MessageId, Option<PartId>)>,
    },
    /// Message `message` of session `session` still exists: no cleanup deleted it since the caller read it
    /// (a revert and its cleanup can both land between a request's checks and its commit, leaving the
    /// revert point as it was). Fails with `Busy` otherwise, as `RevertIs` does.
    MessageExists {
        /// The session.
        session: SessionId,
        /// The message.
        message: MessageId,
    },
    /// The last message of session `session` (in id order) is still `message` (`None`: the session has
    /// none): no message was stored or deleted since the caller read them. A new message's id sorts after
    /// the last, and an assistant message's default parent is the last user message, so a message stored
    /// meanwhile would leave this one out of order, or answering the wrong message. Fails with
    /// `Error::Stale` otherwise, and with `NotFound` when the session is gone.
    LastMessageIs {
        /// The session.
        session: SessionId,
        /// Its last message as the caller read it.
        message: Option<MessageId>,
    },
    /// The last part of message `message` of session `session` (in id order) is still `part` (`None`: it
    /// has none), as `LastMessageIs` is for messages: a new part's id sorts after the message's last.
    /// Fails with `Error::Stale` otherwise, and with `NotFound` when the message is gone.
    LastPartIs {
        /// The session.
        session: SessionId,
        /// The message.
        message: MessageId,
        /// Its last part as the caller read it.
        part: Option<PartId>,
    },
    /// No part of session `session` has id `part` (a client's own part id): no request stored a part with
    /// that id, before or since the caller's checks. Fails with `InvalidInput` (`Error::part_id_taken`,
    /// naming the first message in id order that has it) otherwise.
    PartIdFree {
        /// The session.
        session: SessionId,
        /// The part id.
        part: PartId,
    },
}

/// One row-level change of a transaction.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Insert a session, or replace a stored one except what a client sets (its title, metadata and
    /// archive time), which it keeps, and its update time when that is later: only `UpdateSession`
    /// changes those, so an operation's write of the session from what it read earlier never puts an old
    /// title back (OpenCode renames a session while a step runs), nor the update time before the rename's.
    PutSession(Box<Session>),
    /// Set the given fields of a stored session (`SessionFields`), and `updated` as its update time unless
    /// the stored one is later; nothing else of it changes.
    UpdateSession {
        /// The session.
        session: SessionId,
        /// What changes.
        fields: SessionFields,
        /// The update time, epoch milliseconds.
        updated: u64,
    },
    /// Delete a session with its messages, parts, warnings, history, diff and intents.
    DeleteSession(SessionId),
    /// Insert or replace a message; its session must exist.
    PutMessage(Box<Message>),
    /// Insert or replace a part; its message must exist in its session.
    PutPart(Box<Part>),
    /// The hidden-range delete of SPEC section 5: every message of `session` with id > `message`, and
    /// `message` itself when `part` is none, else its parts with id >= `part`.
    DeleteHiddenRange {
        /// The session.
        session: SessionId,
        /// The descriptor's message.
        message: MessageId,
        /// The descriptor's part.
        part: Option<PartId>,
    },
    /// Store the session diff of the last revert (`GET /session/:id/diff`).
    SetSessionDiff {
        /// The session.
        session: SessionId,
        /// The diff.
        diff: Vec<FileDiff>,
    },
    /// Append a warning to a session.
    AddWarning {
        /// The session.
        session: SessionId,
        /// The warning.
        warning: Warning,
    },
    /// Append an entry to a session's revert history.
    AddRevertHistory {
        /// The session.
        session: SessionId,
        /// The entry.
        entry: Box<RevertHistoryEntry>,
    },
    /// Insert an intent record.
    PutIntent(Box<IntentRecord>),
    /// Delete an intent record.
    DeleteIntent(LeaseToken),
    /// Record a capture (a worktree's state saved before `snapshot restore` overwrote it).
    AddCapture(Box<Capture>),
    /// Delete the captures taken before `before` (epoch milliseconds), of every worktree.
    DeleteCapturesBefore {
        /// The cut-off time.
        before: u64,
    },
    /// Release a lease when `token` holds it (nothing otherwise), as `MessageRepo::release_lease` does:
    /// an operation gives up its leases in the transaction that stores its result.
    ReleaseLease {
        /// What is released.
        key: LeaseKey,
        /// The token that must hold it.
        token: LeaseToken,
    },
    /// Delete the outbox events at positions up to `seq`, except the newest event, which always stays:
    /// the next event's position follows it, so no relay ever sees a position again.
    DeleteEventsThrough {
        /// The last position that may go.
        seq: u64,
    },
}

/// A unit of work: all of its changes and events are stored, or none.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Transaction {
    /// Conditions checked inside the transaction before any change.
    pub guards: Vec<Guard>,
    /// The changes, applied in order.
    pub changes: Vec<Change>,
    /// The events describing the changes, appended to the outbox in order.
    pub events: Vec<Event>,
}

/// The store of sessions, messages, parts, leases, intents, warnings and events.
///
/// # Contract
/// - `commit` MUST apply all of a transaction's changes and append all of its events to the outbox, or none
///   of them. It MUST fail with the error a guard names when it does not hold (`Error::LeaseLost` for
///   `LeaseHeld` and `IntentExists`, `Error::Busy` for `LeaseNotTaken`), and with `Error::NotFound` when a
///   change refers to a session or message that does not exist (nothing stored in either case).
/// - Commits are serialised, guards included: a commit's guards MUST be checked after every commit that
///   began before it has ended (stored or not), also one whose caller's connection broke under it and that
///   the database is still making. Core relies on it to learn whether a result commit whose connection
///   broke was made (`Rewind::confirm_intent`, a commit of an intent's guard alone); an adapter that
///   cannot wait for such a commit fails instead (the service then leaves the intent to recovery).
/// - A `session.updated` event of a session the transaction puts or updates MUST carry what a client
///   sets (title, metadata, archive time) and the update time as stored when it commits, and, when the
///   transaction updates it (`UpdateSession`), the whole session as stored when it commits: what an
///   update read before is not announced over what was stored since. A `session.deleted` event of a session
///   the transaction deletes MUST carry what a client sets and the update time as they were stored when
///   it was deleted (an update takes no lease, and may land after the deleting caller read the session).
/// - `messages` MUST return messages in id order, each with its parts in id order. `messages_from(s, from)`
///   MUST equal `messages(s)` without the messages whose id sorts before `from` (which need not exist), and
///   `messages_between(s, from, before)` MUST equal it without those whose id is `before` or later.
///   `message_head` MUST return the message as `message` does, with the greatest of its part ids, without
///   reading the parts' bodies. `message_infos` MUST equal the `info` of each of `messages`, in order, but
///   without a message's `summary` (the diffs of a user message's turn, which can run to megabytes: a
///   caller placing a message reads ids, roles, parents and times, and never stores an info it got here).
///   `sessions` MUST return newest first (ascending session id).
/// - `take_lease` MUST be a conditional write: it MUST succeed only when no lease exists for the key, when the
///   existing one has the same token (re-entry), or when `replacing` names the existing lease's token (and
///   its expiry, when given) as the caller read them (a takeover the caller has judged allowed, of the
///   lease as it was then); a worktree's lease MUST NOT be taken while another token holds the lease of a
///   worktree inside it or enclosing it. Otherwise it MUST answer `Held` with the lease that stands in
///   the way.
/// - `take_leases` MUST take every one of `leases` (each by `take_lease`'s rule, with no takeover) in one
///   transaction, or none of them: when one is held by another token, no lease is changed, and the answer
///   is `Held` for each lease that was refused and `Taken` for the others (which would have been taken:
///   none is held after the call).
/// - `leases` MUST return every stored lease, each as `lease` returns it for its key, and no other.
/// - `renew_lease` MUST extend the lease only while `token` holds it, and report whether it did.
/// - `release_lease` MUST remove the lease only while `token` holds it.
/// - `events_after` MUST return committed events in commit order, with no gaps and no duplicates, and MUST
///   NOT return an event of a transaction that did not commit.
/// - `event_id_at` MUST return the id of the event `events_after` returns at that position, and `None` for
///   a position the outbox does not hold (0, past its end, or deleted).
/// - `referenced_snapshots` MUST include every snapshot id the stored rows refer to (step, patch parts,
///   descriptors, `applied`, intents, warnings, revert history, captures).
/// - `captures` MUST return the recorded captures oldest first, only those of `directory` when given.
#[cfg_attr(any(test, feature = "testkit"), mockall::automock)]
#[async_trait]
pub trait MessageRepo: Send + Sync {
    /// One session.
    async fn session(&self, id: &SessionId) -> Result<Option<Session>>;
    /// Sessions, newest first; only those of `directory` when given.
    async fn sessions(&self, directory: Option<String>) -> Result<Vec<Session>>;
    /// The sessions whose worktree is `directory`, lies inside it or encloses it
    /// (`model::worktrees_overlap`), newest first.
    async fn sessions_overlapping(&self, directory: &str) -> Result<Vec<Session>>;
    /// Every message of a session with its parts, ascending.
    async fn messages(&self, session: &SessionId) -> Result<Vec<MessageWithParts>>;
    /// The session's messages whose id is `from` or later (a turn's user message, say, and every message
    /// after it), with their parts, ascending: `messages` without the ones before.
    async fn messages_from(
        &self,
        session: &SessionId,
        from: &MessageId,
    ) -> Result<Vec<MessageWithParts>>;
    /// `messages_from(session, from)` without the messages whose id is `before` or later: one page of a
    /// long session, read without the rest.
    async fn messages_between(
        &self,
        session: &SessionId,
        from: &MessageId,
        before: Option<MessageId>,
    ) -> Result<Vec<MessageWithParts>> {
        let mut messages = self.messages_from(session, from).await?;
        if let Some(before) = before {
            messages.retain(|m| m.info.id < before);
        }
        Ok(messages)
    }
    /// One message with its parts.
    async fn message(
        &self,
        session: &SessionId,
        message: &MessageId,
    ) -> Result<Option<MessageWithParts>>;
    /// Every message of a session without its parts and without its `summary`, ascending: what placing a
    /// new message needs (the last id, the user message an answer follows), without reading the parts or a
    /// turn's diffs.
    async fn message_infos(&self, session: &SessionId) -> Result<Vec<Message>>;
    /// One message and its last part's id, without reading the parts' bodies.
    async fn message_head(
        &self,
        session: &SessionId,
        message: &MessageId,
    ) -> Result<Option<MessageHead>>;
    /// The stored session diff of the last revert.
    async fn session_diff(&self, session: &SessionId) -> Result<Vec<FileDiff>>;
    /// The session's warnings, oldest first.
    async fn warnings(&self, session: &SessionId) -> Result<Vec<Warning>>;
    /// The session's revert history, oldest first.
    async fn revert_history(&self, session: &SessionId) -> Result<Vec<RevertHistoryEntry>>;
    /// Every intent record.
    async fn intents(&self) -> Result<Vec<IntentRecord>>;
    /// The lease on `key`, if any (expired or not).
    async fn lease(&self, key: &LeaseKey) -> Result<Option<Lease>>;
    /// Every lease stored, expired or not, in no particular order: what a server looks through for steps
    /// whose owner is gone (the table holds a row per lease held, so it stays small).
    async fn leases(&self) -> Result<Vec<Lease>>;
    /// Takes a lease (see the contract): where none is stored, where the stored one holds `lease`'s own
    /// token, or where it is the one `replacing` names (its token, and its expiry when that is given: a
    /// lease renewed since the caller judged it is not replaced). A worktree's lease is also refused while
    /// another token holds the lease of a worktree inside it or enclosing it (`LeaseKey::overlaps`), even
    /// one the take replaces on its own key: the answer is `Held` with that lease.
    async fn take_lease(&self, lease: &Lease, replacing: Option<Replacing>) -> Result<LeaseTake>;
    /// Takes all of `leases` or none (see the contract): one round trip for an operation's two leases.
    /// A worktree's lease is refused as `take_lease` refuses it.
    async fn take_leases(&self, leases: &[Lease]) -> Result<Vec<LeaseTake>>;
    /// Extends a held lease.
    async fn renew_lease(
        &self,
        key: &LeaseKey,
        token: &LeaseToken,
        expires_at: u64,
    ) -> Result<bool>;
    /// Releases a held lease.
    async fn release_lease(&self, key: &LeaseKey, token: &LeaseToken) -> Result<()>;
    /// Applies a transaction.
    async fn commit(&self, transaction: Transaction) -> Result<()>;
    /// Committed events after outbox position `after`, in order, at most `limit`; an adapter MAY return
    /// fewer when they are large (at least one when any is committed after `after`), so a short answer is
    /// no sign of the end: an empty one is.
    async fn events_after(&self, after: u64, limit: u32) -> Result<Vec<StoredEvent>>;
    /// The position of the last committed event (0 when the outbox is empty), so a follower can start at the
    /// end without reading the outbox through.
    async fn last_event_seq(&self) -> Result<u64>;
    /// The id of the event at outbox position `seq`, while the outbox holds it: a follower that comes back
    /// with a position checks it is this outbox's (another database's, or one restored from a backup, holds
    /// another event there).
    async fn event_id_at(&self, seq: u64) -> Result<Option<EventId>>;
    /// Where the outbox passes a budget of `bytes`, counted from its newest event back: the position of
    /// the newest event whose stored text, with that of every later event, is more than `bytes` (each
    /// text as the adapter stores it; a text several events share is counted once). `None` when the
    /// whole outbox fits. Deleting the events through that position (`Change::DeleteEventsThrough`)
    /// leaves at most `bytes` of them, or the newest event alone when it is larger by itself.
    async fn outbox_over(&self, bytes: u64) -> Result<Option<u64>>;
    /// Gives the space of deleted rows back to the file system, where the store can do that as it runs (a
    /// SQLite file made with incremental auto-vacuum; PostgreSQL's own vacuum does it there). Returns the
    /// bytes given back (0 where nothing is done). It MUST change no row. `gc` calls it last.
    async fn reclaim_space(&self) -> Result<u64> {
        Ok(0)
    }
    /// The captures, oldest first; only those of `directory` when given.
    async fn captures(&self, directory: Option<String>) -> Result<Vec<Capture>>;
    /// Every snapshot id the stored rows refer to; when `directory` is given, those of its sessions and of
    /// the intents and captures of that directory.
    async fn referenced_snapshots(&self, directory: Option<String>)
    -> Result<BTreeSet<SnapshotId>>;
}

/// What a subscriber receives.
#[derive(Clone, Debug, PartialEq)]
pub enum Delivery {
    /// The next event, with its outbox position (which an event stream sends as the SSE `id`, so a client
    /// that reconnects can resume after it).
    Event(StoredEvent),
    /// The subscriber fell behind and `missed` events were dropped for it.
    Lagged {
        /// How many.
        missed: u64,
    },
}

/// A subscriber's stream of deliveries; it ends when the bus is dropped.
pub type Subscription = Pin<Box<dyn Stream<Item = Delivery> + Send>>;

/// Live delivery of committed events to subscribers.
///
/// # Contract
/// - `publish` MUST NOT block, whatever the subscribers do.
/// - Each subscriber MUST receive events in publish order; one that falls behind MUST receive
///   `Delivery::Lagged` with the number it missed, then continue with the oldest event still held.
#[cfg_attr(any(test, feature = "testkit"), mockall::automock)]
pub trait EventBus: Send + Sync {
    /// Sends an event (an outbox row) to every current subscriber.
    fn publish(&self, event: StoredEvent);
    /// A new subscriber, receiving events published from now on.
    fn subscribe(&self) -> Subscription;
}

/// The host: the clock and process liveness, so the services stay pure and testable.
///
/// # Contract
/// - `now_ms` MUST be epoch milliseconds.
/// - `is_alive` MUST answer false only when the process is known to be gone: on this host, no process with
///   that pid and that start time runs. For another host it MUST answer true (it cannot know).
#[cfg_attr(any(test, feature = "testkit"), mockall::automock)]
pub trait HostPort: Send + Sync {
    /// Epoch milliseconds.
    fn now_ms(&self) -> u64;
    /// This process.
    fn this_process(&self) -> ProcessIdentity;
    /// Whether a process still runs.
    fn is_alive(&self, process: &ProcessIdentity) -> bool;
}
