//! Revert, unrevert, cleanup and preview (SPEC sections 5 to 7). Every operation that touches files writes
//! its intent record first and, when it fails part-way, rolls its files back from that record before it
//! returns the error.

use std::collections::HashSet;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex, PoisonError};

use crate::error::{Error, Result, StorageFault};
use crate::model::{
    Capture, DiffSummary, EventPayload, FileStatus, IntentOperation, IntentRecord, LeaseToken,
    Message, MessageWithParts, Part, PartBody, PatchPart, RelPath, RevertDescriptor,
    RevertHistoryEntry, RevertOutcome, Role, Session, SessionId, SkipReason, SnapshotId,
    TrackOutcome, Warning,
};
use crate::ports::{Change, Guard, Transaction};
use crate::revert::{
    HistorySeen, RevertPoint, RevertTarget, cleanup_plan, hidden_patches, is_hidden,
    select_revert_point, snapshot_patches, steps_closed_without_a_patch, unrecorded_steps,
};

use super::record::path_set;
use super::{FileCounts, HeldLease, Preview, PreviewFile, Rewind, new_token, worktree};

/// The tokens of the file operations running in this process, in any of its `Rewind`s: their intents
/// are theirs to finish. Any other intent of this process is one whose operation ended without finishing
/// it (its rollback failed too, on a full disk say), which recovery finishes as one whose process is gone.
static RUNNING: LazyLock<Mutex<HashSet<LeaseToken>>> = LazyLock::new(Mutex::default);

/// An operation's place in `RUNNING`, given up when it is dropped.
struct Running(LeaseToken);

impl Running {
    fn new(token: &LeaseToken) -> Running {
        running().insert(token.clone());
        Running(token.clone())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        running().remove(&self.0);
    }
}

fn running() -> std::sync::MutexGuard<'static, HashSet<LeaseToken>> {
    RUNNING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether the operation whose token is `token` runs in this process (see `RUNNING`).
pub(super) fn is_running(token: &LeaseToken) -> bool {
    running().contains(token)
}

/// What a commit of the operation of intent `token` needs: both its leases (the session's and the
/// worktree's) still held, and the intent still there.
fn intent_guards(token: &LeaseToken, leases: [&HeldLease; 2]) -> Vec<Guard> {
    let mut guards: Vec<Guard> = leases.iter().map(|held| held.guard()).collect();
    guards.push(Guard::IntentExists(token.clone()));
    guards
}

/// The leases and intent of a running file operation.
struct Operation {
    token: LeaseToken,
    /// Its place in `RUNNING` while it runs.
    _running: Running,
    session_lease: HeldLease,
    worktree_lease: HeldLease,
    /// When the leases were taken (host clock, ms).
    taken_at: u64,
    /// Set once a committed transaction released both leases (see `finishing`).
    released: AtomicBool,
    /// Set when its rollback failed and left its intent record: its leases then go to that interrupted
    /// operation (`end_operation`), not free.
    left_intent: std::sync::Mutex<Option<IntentRecord>>,
}

impl Operation {
    /// Leaves `intent` for recovery: the leases go to it when the operation ends (`end_operation`).
    fn leave(&self, intent: &IntentRecord) {
        *self
            .left_intent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(intent.clone());
    }

    fn guards(&self) -> Vec<Guard> {
        intent_guards(&self.token, [&self.session_lease, &self.worktree_lease])
    }

    /// `transaction` made the one that stores the operation's result: it commits only while both leases
    /// and the intent are still this operation's, deletes the intent, and releases both leases as it
    /// commits (two round trips fewer than releasing them after it).
    fn finishing(&self, mut transaction: Transaction) -> Transaction {
        transaction.guards = self.guards();
        transaction
            .changes
            .push(Change::DeleteIntent(self.token.clone()));
        for lease in [&self.session_lease, &self.worktree_lease] {
            transaction.changes.push(Change::ReleaseLease {
                key: lease.key.clone(),
                token: lease.token.clone(),
            });
        }
        transaction
    }
}

/// What finished an operation's intent record while its result's commit went unanswered
/// (`Rewind::finished_by`).
enum Finisher {
    /// The operation's own result: it stands.
    Result,
    /// Another host's recovery, which put the files back, their state before it kept in this capture.
    Recovery(SnapshotId),
    /// Cannot be told.
    Unknown,
}

/// A reverted session's pre-revert snapshot and `applied` (none when it is not reverted, or its descriptor
/// names no snapshot).
fn current_revert(session: &Session) -> Option<(SnapshotId, SnapshotId)> {
    match (&session.revert, &session.applied) {
        (
            Some(RevertDescriptor {
                snapshot: Some(snapshot),
                ..
            }),
            Some(applied),
        ) => Some((snapshot.clone(), applied.clone())),
        _ => None,
    }
}

/// What a revert computed before its result is stored.
struct RevertResult {
    counts: FileCounts,
    descriptor: RevertDescriptor,
    applied: SnapshotId,
    diff: Vec<crate::model::FileDiff>,
    warnings: Vec<Warning>,
}

/// What a session's cleanup (SPEC 7) stores: `Rewind::cleanup_of`.
pub(super) struct Cleanup {
    /// The session as the cleanup leaves it (not reverted).
    pub(super) session: Session,
    changes: Vec<Change>,
    events: Vec<crate::model::Event>,
    /// The ids of the parts it deletes (those of the messages it deletes included).
    removed: std::collections::HashSet<crate::model::PartId>,
    /// The messages it keeps, without the parts it cuts.
    pub(super) kept: Vec<MessageWithParts>,
}

impl Cleanup {
    /// Adds the cleanup's changes and events to `transaction`, which must hold no change or event yet
    /// (guards it may): what follows builds on the session it leaves and without the parts it deletes,
    /// both returned.
    pub(super) fn add_to(
        self,
        transaction: &mut Transaction,
    ) -> (Session, std::collections::HashSet<crate::model::PartId>) {
        transaction.changes.extend(self.changes);
        transaction.events.extend(self.events);
        (self.session, self.removed)
    }
}

impl Rewind {
    /// Reverts the session's files and visible conversation to `target` (SPEC section 6).
    pub async fn revert(&self, session_id: &SessionId, target: RevertTarget) -> Result<Session> {
        Ok(self.revert_counted(session_id, target).await?.0)
    }

    /// `revert`, also saying how many files it wrote, deleted and kept.
    pub async fn revert_counted(
        &self,
        session_id: &SessionId,
        target: RevertTarget,
    ) -> Result<(Session, FileCounts)> {
        self.revert_as_seen(session_id, target, None).await
    }

    /// `revert_counted` of a target chosen from the history `seen` shows (the command line's `undo` and
    /// `redo`): refused with `Error::Stale`, before any file is touched, when the session no longer shows
    /// it once the operation holds its leases.
    pub async fn revert_as_seen(
        &self,
        session_id: &SessionId,
        target: RevertTarget,
        seen: Option<&HistorySeen>,
    ) -> Result<(Session, FileCounts)> {
        let session = self.load_session(session_id).await?;
        let sessions = self.prepare_worktree(&session.directory).await?;
        refuse_open_steps(&session, &sessions)?;
        let operation = self.begin_operation(&session).await?;
        let result = self
            .revert_locked(session_id, &session.directory, &operation, (&target, seen))
            .await;
        self.end_operation(&operation).await;
        result
    }

    async fn revert_locked(
        &self,
        session_id: &SessionId,
        directory: &str,
        operation: &Operation,
        (target, seen): (&RevertTarget, Option<&HistorySeen>),
    ) -> Result<(Session, FileCounts)> {
        // Read under the leases: a step may have begun, or the session changed, since the checks above.
        // A target that names no message or part is refused here, before any file is written.
        // The session and its messages are read while the worktree is tracked (the track only adds objects
        // to the store, so it is harmless when the session turns out to be refused).
        let (session, messages, tracked) = futures::future::join3(
            self.load_leased(session_id, directory),
            self.repo.messages(session_id),
            self.snapshots.track(Path::new(directory)),
        )
        .await;
        let session = session?;
        let wt = worktree(&session);
        let messages = messages?;
        if let Some(seen) = seen {
            seen.check(&session, &messages)?;
        }
        let point = select_revert_point(&messages, target)?;
        let patches = snapshot_patches(&hidden_patches(&messages, &point), &session.directory)?;
        let tracked = tracked?;
        let left_out = self
            .left_out_warning(&session, &messages, &point, &tracked)
            .await;
        let before = tracked.id;
        // The current revert (its pre-revert snapshot and `applied`), if any: undone first.
        let Some((previous, applied)) = current_revert(&session) else {
            let files = patches
                .iter()
                .flat_map(|p| p.files.iter().cloned())
                .collect();
            return self
                .revert_gated(
                    &session,
                    operation,
                    &messages,
                    (point, left_out),
                    &patches,
                    before,
                    files,
                )
                .await;
        };
        // The files the current revert changed are in the intent too.
        let previous_changed = self.changed_between(wt, &previous, &applied).await?;
        let files: BTreeSet<RelPath> = patches
            .iter()
            .flat_map(|p| p.files.iter().cloned())
            .chain(previous_changed.iter().cloned())
            .collect();
        let compare = (!previous_changed.is_empty()).then_some((&applied, &before));
        let (intent, since_applied) = self
            .intent_beside_changes(
                &session,
                operation,
                (IntentOperation::Revert, before.clone(), files),
                compare,
            )
            .await?;
        if let Err(error) = self.renew_operation(operation).await {
            return Err(self.roll_back(operation, &session, &intent, error).await);
        }
        let reverted = match since_applied {
            Ok(since_applied) => {
                self.revert_files(
                    &session,
                    operation,
                    &messages,
                    (point, left_out),
                    &patches,
                    before,
                    &previous,
                    (previous_changed, since_applied),
                )
                .await
            }
            Err(error) => Err(error),
        };
        match reverted {
            Ok(result) => {
                self.store_revert(&session, operation, &intent, result)
                    .await
            }
            // Stopped where it was: the lease's new holder finishes the intent (SPEC 8).
            Err(error @ Error::LeaseLost(_)) => Err(error),
            Err(error) => Err(self.roll_back(operation, &session, &intent, error).await),
        }
    }

    /// The revert of a session that is not reverted: the snapshot store plans the revert and checks what it
    /// needs while the intent record is stored, and touches no file before it is (SPEC section 6, step 2).
    #[allow(clippy::too_many_arguments)]
    async fn revert_gated(
        &self,
        session: &Session,
        operation: &Operation,
        messages: &[MessageWithParts],
        (point, left_out): (RevertPoint, Option<Warning>),
        patches: &[crate::model::SnapshotPatch],
        before: SnapshotId,
        files: BTreeSet<RelPath>,
    ) -> Result<(Session, FileCounts)> {
        let (ready, gate) = futures::channel::oneshot::channel();
        let intent_stored = async {
            let intent = self
                .write_intent(
                    session,
                    operation,
                    IntentOperation::Revert,
                    before.clone(),
                    files,
                )
                .await;
            let renewed = match &intent {
                Ok(_) => self.renew_operation(operation).await,
                Err(_) => Ok(()),
            };
            // A refusal (or this future dropped) makes the store touch nothing.
            let _ = ready.send(intent.is_ok() && renewed.is_ok());
            (intent, renewed)
        };
        let reverting = self
            .snapshots
            .revert_when(worktree(session), patches, &before, gate);
        let ((intent, renewed), outcome) = futures::future::join(intent_stored, reverting).await;
        let intent = intent?;
        let result = match (renewed, outcome) {
            (Err(error), _) | (Ok(()), Err(error)) => Err(error),
            (Ok(()), Ok(outcome)) => {
                self.finish_revert(
                    session,
                    messages,
                    (point, left_out),
                    before,
                    outcome,
                    Vec::new(),
                    FileCounts::default(),
                )
                .await
            }
        };
        match result {
            Ok(result) => self.store_revert(session, operation, &intent, result).await,
            Err(error) => Err(self.roll_back(operation, session, &intent, error).await),
        }
    }

    /// The revert of a session that is reverted (`current` is its pre-revert snapshot and `applied`): the
    /// current revert is undone first, scoped as unrevert, so every revert starts from the un-reverted
    /// worktree, which is then tracked again as this revert's pre-revert state. The leases are checked
    /// again between the undo's writes and the revert's (SPEC 8: before each batch of writes): the track
    /// between them walks the whole worktree.
    #[allow(clippy::too_many_arguments)]
    async fn revert_files(
        &self,
        session: &Session,
        operation: &Operation,
        messages: &[MessageWithParts],
        (point, left_out): (RevertPoint, Option<Warning>),
        patches: &[crate::model::SnapshotPatch],
        before: SnapshotId,
        previous: &SnapshotId,
        (previous_changed, since_applied): (Vec<RelPath>, Vec<RelPath>),
    ) -> Result<RevertResult> {
        let wt = worktree(session);
        let reverting: BTreeSet<RelPath> = patches
            .iter()
            .flat_map(|patch| patch.files.iter().cloned())
            .collect();
        let (warnings, counts) = self
            .undo_revert(
                session,
                previous,
                (previous_changed, since_applied),
                (&before, Undoing::BeforeAnotherRevert(&reverting)),
            )
            .await?;
        let snapshot = self.snapshots.track(wt).await?.id;
        self.renew_operation(operation).await?;
        let outcome = self.snapshots.revert(wt, patches, &snapshot).await?;
        self.finish_revert(
            session,
            messages,
            (point, left_out),
            snapshot,
            outcome,
            warnings,
            counts,
        )
        .await
    }

    /// The files a revert to `point` cannot put back: the snapshot it goes back to (the start of the
    /// earliest step it undoes: the first hidden patch's `hash`, or the first hidden step start when that
    /// comes first) has a file there, and what stands there now is left out of every snapshot (a FIFO or
    /// another special file, an untracked file over the size cap), which the revert leaves as it is (the
    /// plan keeps it). Named in a warning with that snapshot, which holds the earlier content. No warning
    /// when there is nothing left out, no hidden step, or the trees cannot be compared (the revert must
    /// not fail for a warning; one whose snapshot is gone fails on its own).
    async fn left_out_warning(
        &self,
        session: &Session,
        messages: &[MessageWithParts],
        point: &RevertPoint,
        tracked: &TrackOutcome,
    ) -> Option<Warning> {
        let left_out: BTreeSet<RelPath> = tracked
            .skipped
            .iter()
            .filter(|s| matches!(s.reason, SkipReason::Special | SkipReason::TooLarge { .. }))
            .filter_map(|s| RelPath::new(s.path.as_str()).ok())
            .collect();
        if left_out.is_empty() {
            return None;
        }
        // A point inside a step hides its patch and not its start: the patch's hash is that start.
        let target = messages
            .iter()
            .flat_map(|m| m.parts.iter().map(move |p| (m, p)))
            .filter(|(m, p)| is_hidden(point, &m.info.id, Some(&p.id)))
            .find_map(|(_, p)| match &p.body {
                // A start without a snapshot (its track failed): what it went back to is not known.
                PartBody::StepStart(start) => Some(start.snapshot.clone()),
                PartBody::Patch(patch) => Some(Some(patch.hash.clone())),
                _ => None,
            })??;
        let files: Vec<RelPath> = self
            .changed_between(worktree(session), &target, &tracked.id)
            .await
            .ok()?
            .into_iter()
            .filter(|path| left_out.contains(path))
            .collect();
        if files.is_empty() {
            return None;
        }
        Some(Warning {
            time: self.now(),
            message: format!(
                "{} file(s) could not be put back: rewind leaves out of its snapshots what stands there now (a \
                 special file such as a FIFO, or an untracked file over the size cap), so the revert left it as \
                 it is. The content they had is in snapshot {target}: move what stands there away, then \
                 `rewind snapshot restore {target} PATH…` brings a file back",
                files.len()
            ),
            snapshot: Some(target),
            files: files
                .iter()
                .map(|p| p.to_absolute(&session.directory))
                .collect(),
        })
    }

    /// What a revert computed, once its files are written: the diffs, the warnings and the descriptor.
    #[allow(clippy::too_many_arguments)]
    async fn finish_revert(
        &self,
        session: &Session,
        messages: &[MessageWithParts],
        (point, left_out): (RevertPoint, Option<Warning>),
        snapshot: SnapshotId,
        outcome: RevertOutcome,
        mut warnings: Vec<Warning>,
        mut counts: FileCounts,
    ) -> Result<RevertResult> {
        let wt = worktree(session);
        let directory = &session.directory;
        counts.add(
            outcome.written.len(),
            outcome.deleted.len(),
            outcome.kept.iter().map(|k| k.path.clone()),
        );
        // The worktree's tracked content is now `applied`: the text diff and the session diff come from the
        // two trees, without a second walk of the worktree.
        let diffs = self
            .snapshots
            .revert_diffs(wt, &snapshot, &outcome.applied)
            .await?;
        let now = self.now();
        // A file named with the snapshot that holds it (`left_out_warning`) is not named again.
        let named: BTreeSet<&str> = left_out
            .iter()
            .flat_map(|w| w.files.iter().map(String::as_str))
            .collect();
        let mut blocked: BTreeMap<&SnapshotId, Vec<String>> = BTreeMap::new();
        let mut kept: Vec<String> = Vec::new();
        for k in &outcome.kept {
            let file = k.path.to_absolute(directory);
            if named.contains(file.as_str()) {
                continue;
            }
            match &k.from {
                Some(from) => blocked.entry(from).or_default().push(file),
                None => kept.push(file),
            }
        }
        warnings.extend(left_out);
        // What the revert was to put back where something else stands now: named with the snapshot that
        // holds it, as the files left out of snapshots are (review: a deleted file with a directory standing
        // in its place was reported as "no file changed", with no way back named).
        for (from, files) in blocked {
            warnings.push(Warning {
                time: now,
                message: format!(
                    "{} file(s) could not be put back: something the revert does not remove stands where they go \
                     (a directory holding other files, or a file that is not tracked content), and was left as it \
                     is. The content they had is in snapshot {from}: move what stands there away, then `rewind \
                     snapshot restore {from} PATH…` brings a file back",
                    files.len()
                ),
                snapshot: Some(from.clone()),
                files,
            });
        }
        if !kept.is_empty() {
            warnings.push(Warning {
                time: now,
                message: format!(
                    "{} file(s) were left as they are: they are not tracked content (ignored or over the size cap), \
                     a directory stands where they were to be deleted, they were not tracked content when the step \
                     that made them began (ignored then, or skipped, or not known because the snapshot store's record \
                     of that is missing: they may have existed then, so they are not deleted), or they changed while the revert ran (their new content is in no snapshot), so \
                     rewind did not revert them",
                    kept.len()
                ),
                snapshot: None,
                files: kept,
            });
        }
        // Files this revert overwrote whose content no step of this session produced: edited by the user or
        // another session, between two steps or after the last one. They stay recoverable from the
        // pre-revert snapshot, which holds their current content. A file written again with the content it
        // had (a file the user had already put back as it was) lost nothing, and is not named.
        let differs: BTreeSet<&str> = diffs.files.iter().map(|d| d.file.as_str()).collect();
        let touched: BTreeSet<RelPath> = outcome
            .written
            .iter()
            .chain(&outcome.deleted)
            .filter(|path| differs.contains(path.as_str()))
            .cloned()
            .collect();
        if !touched.is_empty() {
            let changed = self
                .changed_outside_steps(wt, messages, directory, &snapshot)
                .await?;
            let touched_of = |paths: BTreeSet<RelPath>| -> Vec<RelPath> {
                paths
                    .into_iter()
                    .filter(|path| touched.contains(path))
                    .collect()
            };
            let edited = touched_of(changed.outside);
            let unrecorded = touched_of(changed.unrecorded);
            // Those the pre-revert snapshot does not hold had been deleted: the revert brought them back, and
            // restoring them from the snapshot deletes them again, which the warning must say as such.
            let absent_before: BTreeSet<&str> = diffs
                .files
                .iter()
                .filter(|diff| diff.status == FileStatus::Deleted)
                .map(|diff| diff.file.as_str())
                .collect();
            let (brought_back, overwritten): (Vec<RelPath>, Vec<RelPath>) = edited
                .into_iter()
                .partition(|path| absent_before.contains(path.as_str()));
            warnings.extend(files_warning(now, directory, &snapshot, &overwritten, |n| {
                format!(
                    "{n} file(s) had been changed outside the session's steps (by you or another session, \
                     between two steps or after the last one); the revert overwrote or removed them. Their \
                     content is kept in snapshot {snapshot}: `rewind snapshot restore {snapshot} PATH…` \
                     brings a file back"
                )
            }));
            warnings.extend(files_warning(now, directory, &snapshot, &brought_back, |n| {
                format!(
                    "{n} file(s) had been deleted outside the session's steps (by you or another session, \
                     between two steps or after the last one); the revert brought them back as they were \
                     before the steps it undid. `rewind snapshot restore {snapshot} PATH…` deletes a file \
                     again (snapshot {snapshot}, taken before the revert, does not hold them)"
                )
            }));
            // Who changed these is not known: a step that recorded no changes, or someone between the
            // steps (review: a step's own changes were said to be the user's or another session's).
            warnings.extend(files_warning(now, directory, &snapshot, &unrecorded, |n| {
                format!(
                    "{n} file(s) had been changed or deleted by a step whose changes were not recorded (its \
                     snapshot at the start or the end failed or was lost), or outside the session's steps; \
                     the revert overwrote, removed or brought them back. Their state before the revert is in \
                     snapshot {snapshot}: `rewind snapshot restore {snapshot} PATH…` puts a file back as it \
                     was (deleting one the snapshot does not hold)"
                )
            }));
        }
        // Steps it undoes whose changes were never recorded: said, or the revert would look complete.
        let mut unrecorded = unrecorded_steps(messages, &point);
        // A step closed with its end snapshot and no patch because its start was lost from the store: what
        // it changed is not known either (review: a revert to its message left its changes without a word).
        for (start, end) in steps_closed_without_a_patch(messages, &point) {
            if matches!(
                self.changed_between(wt, &start, &end).await,
                Err(Error::MissingObject(_) | Error::Damaged(_))
            ) {
                unrecorded.push(None);
            }
        }
        if !unrecorded.is_empty() {
            let earliest = unrecorded.iter().flatten().next().cloned();
            let earlier = earliest.as_ref().map_or_else(String::new, |start| {
                format!(
                    ". The files as they were when the first of them began are in snapshot {start}: `rewind \
                     snapshot restore {start} PATH…` brings a file back"
                )
            });
            warnings.push(Warning {
                time: now,
                message: format!(
                    "{} step(s) this revert undoes recorded no changes (the snapshot at the end of the step \
                     failed, or the one at its start was lost, as its warning said then): what they changed \
                     is not taken back{earlier}",
                    unrecorded.len()
                ),
                snapshot: earliest,
                files: Vec::new(),
            });
        }
        Ok(RevertResult {
            counts,
            descriptor: RevertDescriptor {
                message_id: point.message_id,
                part_id: point.part_id,
                snapshot: Some(snapshot),
                diff: Some(diffs.text),
            },
            applied: outcome.applied,
            diff: diffs.files,
            warnings,
        })
    }

    async fn store_revert(
        &self,
        session: &Session,
        operation: &Operation,
        intent: &IntentRecord,
        result: RevertResult,
    ) -> Result<(Session, FileCounts)> {
        let now = self.now();
        let mut updated = session.clone();
        updated.revert = Some(result.descriptor);
        updated.applied = Some(result.applied);
        updated.summary = Some(DiffSummary::of(&result.diff));
        // When the operation began: the revert's own warnings, raised on the way, are not older than it.
        updated.reverted_at = Some(operation.taken_at);
        updated.time.updated = now;
        let mut transaction = Transaction::default();
        for warning in &result.warnings {
            self.push_warning(&mut transaction, &session.id, warning.clone());
        }
        transaction
            .events
            .push(self.event(EventPayload::SessionDiff {
                session_id: session.id.clone(),
                diff: result.diff.clone(),
            }));
        transaction.events.push(self.updated_event(&updated));
        transaction.changes.push(Change::SetSessionDiff {
            session: session.id.clone(),
            diff: result.diff,
        });
        transaction
            .changes
            .push(Change::PutSession(Box::new(updated.clone())));
        self.store_result(operation, session, intent, (transaction, &updated))
            .await?;
        Ok((self.with_stored_client_fields(updated).await, result.counts))
    }

    /// Puts the session's files forward again: exactly the files the revert changed go back to their
    /// pre-revert content; a user's edit of one of them is captured first (SPEC section 6).
    pub async fn unrevert(&self, session_id: &SessionId) -> Result<Session> {
        Ok(self.unrevert_counted(session_id).await?.0)
    }

    /// `unrevert`, also saying how many files it wrote, deleted and kept.
    pub async fn unrevert_counted(&self, session_id: &SessionId) -> Result<(Session, FileCounts)> {
        self.unrevert_as_seen(session_id, None).await
    }

    /// `unrevert_counted` decided on from the history `seen` shows (the command line's `redo` at the last
    /// turn): refused with `Error::Stale`, before any file is touched, when the session no longer shows it
    /// once the operation holds its leases.
    pub async fn unrevert_as_seen(
        &self,
        session_id: &SessionId,
        seen: Option<&HistorySeen>,
    ) -> Result<(Session, FileCounts)> {
        let session = self.load_session(session_id).await?;
        let sessions = self.prepare_worktree(&session.directory).await?;
        let session = super::session_in(session_id, &sessions)?;
        refuse_open_steps(&session, &sessions)?;
        if session.revert.is_none() {
            // Nothing to undo, unless a revert holding the session is about to store one.
            self.refuse_while_operating(&session).await?;
            if let Some(seen) = seen {
                seen.check(&session, &self.repo.messages(session_id).await?)?;
            }
            return Ok((session, FileCounts::default()));
        }
        let operation = self.begin_operation(&session).await?;
        let result = self
            .unrevert_locked(session_id, &session.directory, &operation, seen)
            .await;
        self.end_operation(&operation).await;
        result
    }

    async fn unrevert_locked(
        &self,
        session_id: &SessionId,
        directory: &str,
        operation: &Operation,
        seen: Option<&HistorySeen>,
    ) -> Result<(Session, FileCounts)> {
        // The session is read while the worktree is tracked (see `revert_locked`); its messages only when
        // the caller's choice is to be checked.
        let (session, tracked, messages) = futures::future::join3(
            self.load_leased(session_id, directory),
            self.snapshots.track(Path::new(directory)),
            async {
                match seen {
                    Some(_) => self.repo.messages(session_id).await.map(Some),
                    None => Ok(None),
                }
            },
        )
        .await;
        let session = session?;
        if let (Some(seen), Some(messages)) = (seen, messages?) {
            seen.check(&session, &messages)?;
        }
        let (Some(descriptor), Some(applied)) = (session.revert.clone(), session.applied.clone())
        else {
            return Ok((session, FileCounts::default()));
        };
        let wt = worktree(&session);
        let before = tracked?.id;
        let files = match &descriptor.snapshot {
            Some(snapshot) => self.changed_between(wt, snapshot, &applied).await?,
            None => Vec::new(),
        };
        let compare =
            (descriptor.snapshot.is_some() && !files.is_empty()).then_some((&applied, &before));
        let (intent, since_applied) = self
            .intent_beside_changes(
                &session,
                operation,
                (
                    IntentOperation::Unrevert,
                    before.clone(),
                    files.iter().cloned().collect(),
                ),
                compare,
            )
            .await?;
        if let Err(error) = self.renew_operation(operation).await {
            return Err(self.roll_back(operation, &session, &intent, error).await);
        }
        let undone = match (&descriptor.snapshot, since_applied) {
            (Some(snapshot), Ok(since_applied)) => {
                self.undo_revert(
                    &session,
                    snapshot,
                    (files, since_applied),
                    (&before, Undoing::Unrevert),
                )
                .await
            }
            (None, _) => Ok((Vec::new(), FileCounts::default())),
            (_, Err(error)) => Err(error),
        };
        let (warnings, counts) = match undone {
            Ok(done) => done,
            Err(error) => return Err(self.roll_back(operation, &session, &intent, error).await),
        };
        let mut updated = session.clone();
        updated.revert = None;
        updated.applied = None;
        updated.reverted_at = None;
        updated.time.updated = self.now();
        let mut transaction = Transaction::default();
        for warning in warnings {
            self.push_warning(&mut transaction, &session.id, warning);
        }
        transaction.events.push(self.updated_event(&updated));
        transaction
            .changes
            .push(Change::PutSession(Box::new(updated.clone())));
        self.store_result(operation, &session, &intent, (transaction, &updated))
            .await?;
        Ok((self.with_stored_client_fields(updated).await, counts))
    }

    /// Undoes a revert that left `applied` from the pre-revert `snapshot`: only `changed` (the files that
    /// differ between the two) go back. `current` is the worktree's snapshot taken by the caller just
    /// before, and `since_applied` the files that differ between `applied` and it
    /// (`intent_beside_changes`): a changed file among them was changed by the user since the revert, and
    /// `current` already holds it, so it serves as the capture without another walk.
    /// A changed path that cannot go back without removing a file the user made while reverted (one below
    /// it, where the revert left a directory, or one standing where it needs a directory) is left as it is:
    /// a file the user created while reverted survives (SPEC section 6).
    /// `undoing` says what the undo is part of, which its warnings say: an unrevert, or a revert of a
    /// reverted session, which reverts again right after (review: its warning said the user's edits were
    /// put back to their pre-revert content, and the files ended as the new revert left them).
    async fn undo_revert(
        &self,
        session: &Session,
        snapshot: &SnapshotId,
        (changed, since_applied): (Vec<RelPath>, Vec<RelPath>),
        (current, undoing): (&SnapshotId, Undoing<'_>),
    ) -> Result<(Vec<Warning>, FileCounts)> {
        let wt = worktree(session);
        let directory = &session.directory;
        if changed.is_empty() {
            return Ok((Vec::new(), FileCounts::default()));
        }
        let mut warnings = Vec::new();
        let changed_set = path_set(&changed);
        let (edited, made): (Vec<RelPath>, Vec<RelPath>) = since_applied
            .into_iter()
            .partition(|path| changed_set.contains(path));
        let blocked = blocked_by_new_files(&changed_set, &made);
        let scope: Vec<RelPath> = changed
            .into_iter()
            .filter(|path| !blocked.contains(path))
            .collect();
        // Only while each file is as `current` holds it: one changed since (by someone else) is left as it
        // is, since its content is in no snapshot.
        let outcome = if scope.is_empty() {
            crate::model::RestoreOutcome::default()
        } else {
            self.snapshots
                .restore_since(wt, snapshot, scope, current)
                .await?
        };
        // The user's versions named are those the restore replaced or removed (one it left is not put back).
        let touched: BTreeSet<&RelPath> = outcome.written.iter().chain(&outcome.deleted).collect();
        let edited: Vec<&RelPath> = edited.iter().filter(|p| touched.contains(p)).collect();
        // Those the restore created the user had deleted while reverted: `current` does not hold them, so
        // restoring them from it deletes them again, which their warning must say as such.
        let created: BTreeSet<&RelPath> = outcome.created.iter().collect();
        let (brought_back, edited): (Vec<&RelPath>, Vec<&RelPath>) =
            edited.into_iter().partition(|path| created.contains(path));
        let now = self.now();
        // Before another revert, the files it reverts again are said to be so; the others stay as the undo
        // leaves them, as after an unrevert (review: every file was said to be reverted again).
        const PUT_BACK: &str = "have been put back to their pre-revert content";
        const PUT_BACK_THEN_AGAIN: &str = "were put back to their pre-revert content by the undo of that \
                                          revert, which this revert does first, and then reverted again to \
                                          the point asked for";
        let (edited_again, edited) = undoing.reverted_again(edited);
        let (brought_back_again, brought_back) = undoing.reverted_again(brought_back);
        for (paths, put_back) in [(edited_again, PUT_BACK_THEN_AGAIN), (edited, PUT_BACK)] {
            warnings.extend(files_warning(now, directory, current, paths, |n| {
                format!(
                    "{n} file(s) were changed while the session was reverted and {put_back}. Your versions \
                     are kept in snapshot {current}: `rewind snapshot restore {current} PATH…` brings a file \
                     back"
                )
            }));
        }
        for (paths, put_back) in [
            (brought_back_again, PUT_BACK_THEN_AGAIN),
            (brought_back, PUT_BACK),
        ] {
            warnings.extend(files_warning(now, directory, current, paths, |n| {
                format!(
                    "{n} file(s) were deleted while the session was reverted and {put_back}. `rewind \
                     snapshot restore {current} PATH…` deletes a file again (snapshot {current}, taken just \
                     before, does not hold them)"
                )
            }));
        }
        warnings.extend(files_warning(now, directory, snapshot, &blocked, |n| {
            format!(
                "{n} file(s) were not put back: while the session was reverted you created files below them, \
                 or in their place where they need a directory, and putting them back would remove yours. \
                 Their state before the revert is in snapshot {snapshot}: move yours away, then `rewind \
                 snapshot restore {snapshot} PATH…` puts a file back"
            )
        }));
        let counts = FileCounts {
            written: outcome.written.len(),
            deleted: outcome.deleted.len(),
            kept: outcome
                .kept
                .iter()
                .map(|k| k.path.clone())
                .chain(blocked.iter().cloned())
                .collect(),
        };
        if !outcome.kept.is_empty() {
            warnings.push(Warning {
                time: self.now(),
                message: format!(
                    "{} file(s) were left as they are: they are not tracked content now (ignored or over the size \
                     cap), something that is not tracked content stands where they need a directory, or they \
                     changed while rewind was putting them back (their content is in no snapshot), so rewind did \
                     not overwrite them. Their state before the revert is in snapshot {snapshot}: `rewind \
                     snapshot restore {snapshot} PATH…` puts a file back once what stands there is moved away",
                    outcome.kept.len()
                ),
                snapshot: Some(snapshot.clone()),
                files: outcome.kept.iter().map(|k| k.path.to_absolute(directory)).collect(),
            });
        }
        Ok((warnings, counts))
    }

    /// `POST /session/:id/revert/commit`: makes the revert permanent (cleanup, SPEC section 7).
    pub async fn commit_revert(&self, session_id: &SessionId) -> Result<Session> {
        let session = self.load_prepared(session_id).await?;
        if session.revert.is_none() {
            // Nothing to commit, unless a revert holding the session is about to store one.
            self.refuse_while_operating(&session).await?;
        }
        self.cleanup(&session).await
    }

    /// Deletes the hidden range, moves the revert into the history and clears the descriptor, in one
    /// transaction under the session's lease. Never touches files.
    pub(super) async fn cleanup(&self, session: &Session) -> Result<Session> {
        let Some(descriptor) = session.revert.clone() else {
            return Ok(session.clone());
        };
        let token = new_token();
        let lease = self
            .acquire(
                crate::model::LeaseKey::Session(session.id.clone()),
                &token,
                self.config.operation_lease_ms,
                Some(&session.id),
            )
            .await?;
        let result = self.cleanup_locked(&session.id, &descriptor, &lease).await;
        self.release(&lease).await;
        result
    }

    async fn cleanup_locked(
        &self,
        session_id: &SessionId,
        descriptor: &RevertDescriptor,
        lease: &HeldLease,
    ) -> Result<Session> {
        let session = self.load_session(session_id).await?;
        if session.revert.as_ref() != Some(descriptor) {
            // Committed meanwhile, by another commit (a double click) or by the message that came to the
            // reverted session: what was asked is done.
            let committed = session.revert.is_none()
                && self
                    .repo
                    .revert_history(session_id)
                    .await?
                    .last()
                    .is_some_and(|entry| entry.descriptor == *descriptor);
            if committed {
                return Ok(self.with_stored_client_fields(session).await);
            }
            // Another revert or an unrevert stored its result between the request's look and the lease:
            // nothing was committed, which a 200 would hide (as `create_message_reverted` refuses).
            let now = if session.revert.is_some() {
                "reverted again"
            } else {
                "unreverted"
            };
            return Err(Error::busy(
                session_id,
                format!(
                    "Session is busy: {session_id} (it was {now} while its revert was being committed); \
                     nothing was committed: try again"
                ),
            ));
        }
        let messages = self.repo.messages(session_id).await?;
        let cleanup = self.cleanup_of(&session, descriptor, &messages).await?;
        let mut transaction = Transaction {
            guards: vec![lease.guard()],
            ..Default::default()
        };
        let (updated, _) = cleanup.add_to(&mut transaction);
        self.repo.commit(transaction).await?;
        Ok(self.with_stored_client_fields(updated).await)
    }

    /// The cleanup of `session`, reverted by `descriptor`, over its `messages`: what its transaction
    /// changes and announces, and the session as it leaves it. Stored by `cleanup`, or with the message
    /// or step that comes to the reverted session (`create_message_reverted`, `begin_step`, `begin_turn`):
    /// a message or step that is not stored then leaves the redo history as it was.
    pub(super) async fn cleanup_of(
        &self,
        session: &Session,
        descriptor: &RevertDescriptor,
        messages: &[MessageWithParts],
    ) -> Result<Cleanup> {
        let session_id = &session.id;
        let point = RevertPoint::of(descriptor);
        let plan = cleanup_plan(messages, &point);
        let removed_messages: BTreeSet<_> = plan.removed_messages.iter().collect();
        let removed_parts: BTreeSet<_> = plan.removed_parts.iter().map(|(_, p)| p).collect();
        let (cost, tokens) = messages
            .iter()
            .filter(|m| !removed_messages.contains(&m.info.id))
            .flat_map(|m| m.parts.iter())
            .filter(|p| !removed_parts.contains(&p.id))
            .filter_map(|p| match &p.body {
                PartBody::StepFinish(finish) => Some(finish),
                _ => None,
            })
            .fold(
                (0.0, crate::model::Tokens::default()),
                |(cost, tokens), finish| (cost + finish.cost, tokens.add(&finish.tokens)),
            );
        let since = session.reverted_at.unwrap_or(0);
        let warnings: Vec<Warning> = self
            .repo
            .warnings(session_id)
            .await?
            .into_iter()
            .filter(|w| w.time >= since)
            .collect();
        let now = self.now();
        let mut updated = session.clone();
        updated.revert = None;
        updated.applied = None;
        updated.reverted_at = None;
        updated.cost = cost;
        updated.tokens = tokens;
        updated.time.updated = now;
        let mut changes = vec![
            Change::DeleteHiddenRange {
                session: session_id.clone(),
                message: point.message_id.clone(),
                part: point.part_id.clone(),
            },
            Change::AddRevertHistory {
                session: session_id.clone(),
                entry: Box::new(RevertHistoryEntry {
                    time: now,
                    descriptor: descriptor.clone(),
                    applied: session.applied.clone(),
                    summary: session.summary,
                    warnings,
                }),
            },
        ];
        changes.push(Change::PutSession(Box::new(updated.clone())));
        let removed: std::collections::HashSet<crate::model::PartId> = messages
            .iter()
            .flat_map(|m| m.parts.iter().map(move |p| (m, p)))
            .filter(|(m, p)| removed_messages.contains(&m.info.id) || removed_parts.contains(&p.id))
            .map(|(_, p)| p.id.clone())
            .collect();
        let mut kept: Vec<MessageWithParts> = messages
            .iter()
            .filter(|m| !removed_messages.contains(&m.info.id))
            .map(|m| {
                let mut kept = m.clone();
                kept.parts.retain(|p| !removed.contains(&p.id));
                kept
            })
            .collect();
        let mut events = Vec::new();
        let mut cut_message = None;
        // The message the point cuts steps from (a revert to one of its parts): its sums are those of the
        // steps it keeps, as the session's are.
        let finishes = |m: &MessageWithParts, cut: bool| -> Vec<crate::model::StepFinishPart> {
            m.parts
                .iter()
                .filter(|p| removed.contains(&p.id) == cut)
                .filter_map(|p| match &p.body {
                    PartBody::StepFinish(finish) => Some(finish.clone()),
                    _ => None,
                })
                .collect()
        };
        if point.part_id.is_some()
            && let Some(message) = kept.iter_mut().find(|m| m.info.id == point.message_id)
            && let Some(original) = messages.iter().find(|m| m.info.id == point.message_id)
        {
            let cut = finishes(original, true);
            if !cut.is_empty() {
                let left = finishes(original, false);
                let cut_cost = cut.iter().map(|finish| finish.cost).sum();
                message.info.note_steps_cut(
                    cut_cost,
                    left.last()
                        .map(|finish| (finish.reason.as_str(), &finish.tokens)),
                );
                let mut info = message.info.clone();
                info.fill_required_fields(&session.directory);
                changes.push(Change::PutMessage(Box::new(info.clone())));
                cut_message = Some(info);
            }
        }
        // The turn the point cuts steps from keeps a user message whose `summary.diffs` must again be
        // diff(first step-start of the turn, last step-finish) over the steps it keeps (SPEC 4).
        let summary = self
            .summary_of_cut_turn(session, messages, (&kept, &removed), &point)
            .await;
        if let Some(user) = &summary {
            if let Some(message) = kept.iter_mut().find(|m| m.info.id == user.id) {
                message.info = user.clone();
            }
            changes.push(Change::PutMessage(Box::new(user.clone())));
        }
        for message_id in plan.removed_messages {
            events.push(self.event(EventPayload::MessageRemoved {
                session_id: session_id.clone(),
                message_id,
            }));
        }
        for (message_id, part_id) in plan.removed_parts {
            events.push(self.event(EventPayload::PartRemoved {
                session_id: session_id.clone(),
                message_id,
                part_id,
            }));
        }
        // After its parts' removal, as a client applies them.
        for info in cut_message.into_iter().chain(summary) {
            events.push(self.event(EventPayload::MessageUpdated {
                session_id: session_id.clone(),
                info: Box::new(info),
            }));
        }
        events.push(self.updated_event(&updated));
        Ok(Cleanup {
            session: updated,
            changes,
            events,
            removed,
            kept,
        })
    }

    /// The user message of the turn a cleanup cuts steps from (a revert to a part of one of its messages,
    /// made permanent), with `summary.diffs` made again from the steps the turn keeps: the diff from their
    /// first start to their last finish, or none when no finished step is left. None when the cleanup
    /// removes no step of a turn whose user message it keeps, or when the diff cannot be made (the summary
    /// is then left as it was).
    async fn summary_of_cut_turn(
        &self,
        session: &Session,
        messages: &[MessageWithParts],
        (kept, removed): (
            &[MessageWithParts],
            &std::collections::HashSet<crate::model::PartId>,
        ),
        point: &RevertPoint,
    ) -> Option<Message> {
        point.part_id.as_ref()?;
        let at = messages.iter().find(|m| m.info.id == point.message_id)?;
        let user_id = match at.info.role {
            Role::User => &at.info.id,
            _ => at.info.parent_id.as_ref()?,
        };
        let user = kept.iter().find(|m| &m.info.id == user_id)?;
        let is_step =
            |part: &Part| matches!(part.body, PartBody::StepStart(_) | PartBody::StepFinish(_));
        let of_turn = |m: &&MessageWithParts| m.info.parent_id.as_ref() == Some(user_id);
        let cuts_a_step = messages
            .iter()
            .filter(of_turn)
            .flat_map(|m| m.parts.iter())
            .any(|p| is_step(p) && removed.contains(&p.id));
        if !cuts_a_step {
            return None;
        }
        let steps: Vec<&Part> = kept
            .iter()
            .filter(of_turn)
            .flat_map(|m| m.parts.iter())
            .collect();
        let first = steps.iter().find_map(|p| match &p.body {
            PartBody::StepStart(start) => start.snapshot.clone(),
            _ => None,
        });
        let last = steps.iter().rev().find_map(|p| match &p.body {
            PartBody::StepFinish(finish) => finish.snapshot.clone(),
            _ => None,
        });
        let diffs = match (first, last) {
            (Some(first), Some(last)) => {
                // A cleanup touches no file and needs no store: a diff that cannot be made (a snapshot
                // gone, the worktree moved away, the store busy) leaves the summary as it was rather
                // than fail the commit or the message that runs it (review: it failed them).
                self.snapshots
                    .diff(worktree(session), &first, &last)
                    .await
                    .ok()?
            }
            _ => Vec::new(),
        };
        let mut info = user.info.clone();
        info.set_summary_diffs(&diffs);
        info.fill_required_fields(&session.directory);
        Some(info)
    }

    /// What a revert to `target` would do, changing nothing. A session reverted already is reverted
    /// from its un-reverted worktree (SPEC 6): the files the current revert's undo puts back come first,
    /// and a file the new revert's patches name then takes the action they give it.
    pub async fn preview(&self, session_id: &SessionId, target: RevertTarget) -> Result<Preview> {
        let session = self.load_session(session_id).await?;
        let messages = self.repo.messages(session_id).await?;
        let point = select_revert_point(&messages, &target)?;
        let files = self
            .plan_patches(&session.directory, &hidden_patches(&messages, &point))
            .await?;
        let files = match current_revert(&session) {
            Some((snapshot, applied)) => {
                self.after_undo_preview(&session, (&snapshot, &applied), files)
                    .await?
            }
            None => files,
        };
        Ok(Preview {
            descriptor: point,
            files,
        })
    }

    /// What an unrevert would do to each file, changing nothing: the files the current revert changed go
    /// back to its pre-revert snapshot, but for those the user's new files block or that are not tracked
    /// content now, which are kept (SPEC 6).
    /// Nothing for a session that is not reverted. A user's edit of one of them is captured before it is
    /// written over, as `unrevert` does; the preview lists the write.
    pub async fn unrevert_preview(&self, session_id: &SessionId) -> Result<Vec<PreviewFile>> {
        let session = self.load_session(session_id).await?;
        match current_revert(&session) {
            Some((snapshot, applied)) => {
                self.after_undo_preview(&session, (&snapshot, &applied), Vec::new())
                    .await
            }
            None => Ok(Vec::new()),
        }
    }

    /// `planned` (the new revert's files) after what the undo of the current revert (from its pre-revert
    /// `snapshot` to `applied`) would do first, as `undo_revert` does it: each file it changed goes back to
    /// `snapshot`, but for one the user's new tracked files block or one that is not tracked content now,
    /// which is kept; a file it puts back where the new revert writes below it is replaced by that write,
    /// and not listed.
    /// Otherwise the worktree is weighed as it is now, not as that undo leaves it (an ignore rule it brings
    /// back or removes, a directory it puts back where a symlink stands, a directory it empties, are not
    /// seen), and the undo's keeps only where tracked files cause them (a directory of ignored files in its
    /// way is not seen): exact would take the snapshot port's plan of the undo (`restore_since`) and the
    /// new revert's plan over the state it leaves.
    async fn after_undo_preview(
        &self,
        session: &Session,
        (snapshot, applied): (&SnapshotId, &SnapshotId),
        planned: Vec<PreviewFile>,
    ) -> Result<Vec<PreviewFile>> {
        let wt = worktree(session);
        let directory = &session.directory;
        let changed = self.changed_between(wt, snapshot, applied).await?;
        if changed.is_empty() {
            return Ok(planned);
        }
        let changed_set = path_set(&changed);
        let since_applied = self.snapshots.changed_files(wt, applied).await?;
        // The paths whose tracked content left since `applied` while something stays on disk there (ignored
        // since, or over the cap): the tracked content differs (`changed_between`), yet `changed_files`,
        // which lists a path gone from it only when it is really gone and never one ignored now, does not
        // list it. The undo (`restore_since`) leaves what is not tracked content (dry-run fuzz: the preview
        // said `delete` where the unrevert kept the file).
        let now = self.snapshots.track(wt).await?.id;
        let listed = path_set(&since_applied);
        let untracked_now: BTreeSet<RelPath> = self
            .changed_between(wt, applied, &now)
            .await?
            .into_iter()
            .filter(|path| !listed.contains(path))
            .collect();
        let made: Vec<RelPath> = since_applied
            .into_iter()
            .filter(|path| !changed_set.contains(path))
            .collect();
        let blocked = blocked_by_new_files(&changed_set, &made);
        let scope: Vec<RelPath> = changed
            .into_iter()
            .filter(|path| !blocked.contains(path))
            .collect();
        // The undo puts each file back as `snapshot` holds it (`restore_since`, which, unlike a revert's
        // plan, keeps no file for having been untracked when a step began): written when it has the
        // file, deleted when it does not.
        let in_scope = path_set(&scope);
        let undo = if scope.is_empty() {
            Vec::new()
        } else {
            self.snapshots.diff(wt, applied, snapshot).await?
        };
        let mut files: BTreeMap<String, PreviewFile> = BTreeMap::new();
        for diff in undo {
            let Ok(path) = RelPath::new(&diff.file) else {
                continue;
            };
            if !in_scope.contains(&path) {
                continue;
            }
            let file = path.to_absolute(directory);
            let (action, reason) = match diff.status {
                _ if untracked_now.contains(&path) => (
                    crate::model::FileActionKind::Keep,
                    Some(
                        "it is not tracked content now (ignored since, or over the size cap): the undo of \
                         the current revert leaves it as it is"
                            .to_owned(),
                    ),
                ),
                crate::model::FileStatus::Deleted => (crate::model::FileActionKind::Delete, None),
                _ => (crate::model::FileActionKind::Write, None),
            };
            files.insert(
                file.clone(),
                PreviewFile {
                    file,
                    action,
                    reason,
                },
            );
        }
        for path in &blocked {
            let file = path.to_absolute(directory);
            files.insert(
                file.clone(),
                PreviewFile {
                    file,
                    action: crate::model::FileActionKind::Keep,
                    reason: Some(
                        "the undo of the current revert leaves it: files made while the session was \
                         reverted stand below it, or in its place where it needs a directory"
                            .to_owned(),
                    ),
                },
            );
        }
        let planned_files: BTreeSet<String> = planned.iter().map(|f| f.file.clone()).collect();
        let planned_writes: Vec<String> = planned
            .iter()
            .filter(|f| f.action == crate::model::FileActionKind::Write)
            .map(|f| f.file.clone())
            .collect();
        // The new revert's action stands, but a `keep` after the undo's write or delete: the revert leaves
        // the file as the undo left it, so what is done to it is the undo's (dry-run fuzz: a user's edit
        // the undo overwrites was listed as kept).
        for file in planned {
            let undone_first = files
                .get(&file.file)
                .is_some_and(|undo| undo.action != crate::model::FileActionKind::Keep);
            if file.action == crate::model::FileActionKind::Keep && undone_first {
                continue;
            }
            files.insert(file.file.clone(), file);
        }
        // A file the undo puts back where the new revert writes a file below it: that write replaces it
        // with the directory, so nothing is done to a file there (re-run fuzz H1: it was listed as
        // written). A tracked file standing there now is one `plan` names itself (a file a write replaces
        // on its way, deleted), and its entry stands.
        for written in &planned_writes {
            let mut at = written.as_str();
            while let Some((above, _)) = at.rsplit_once('/') {
                if above.len() <= directory.len() {
                    break;
                }
                at = above;
                if !planned_files.contains(above)
                    && files
                        .get(above)
                        .is_some_and(|f| f.action == crate::model::FileActionKind::Write)
                {
                    files.remove(above);
                }
            }
        }
        Ok(files.into_values().collect())
    }

    /// What a revert of `patches` (patch parts, in order) in worktree `directory` would do to each file,
    /// changing nothing: `preview`'s files, for a caller that holds the patches already (`exec`, for the
    /// turn it just recorded).
    pub async fn plan_patches(
        &self,
        directory: &str,
        patches: &[&PatchPart],
    ) -> Result<Vec<PreviewFile>> {
        let patches = snapshot_patches(patches, directory)?;
        let plan = self.snapshots.plan(Path::new(directory), &patches).await?;
        Ok(plan
            .into_iter()
            .map(|action| PreviewFile {
                file: action.path.to_absolute(directory),
                action: action.action,
                reason: action.reason,
            })
            .collect())
    }

    /// The paths whose last change before `now` (the pre-revert snapshot) no step of the session recorded:
    /// `outside` those changed between the end of one step and the start of the next, or after the last
    /// one; `unrecorded` those changed in a stretch that also holds a step whose changes were not recorded
    /// (its end snapshot failed, or its start snapshot cannot be read: such a step is closed with no patch),
    /// so they may be that step's as well as a user's. Walks the steps in order: a stretch's changes (one
    /// tree diff, only when its two snapshots differ) mark their paths, and a step's patch marks its files
    /// as changed by the step.
    async fn changed_outside_steps(
        &self,
        wt: &Path,
        messages: &[MessageWithParts],
        directory: &str,
        now: &SnapshotId,
    ) -> Result<ChangedOutside> {
        let mut last: BTreeMap<RelPath, LastChange> = BTreeMap::new();
        // Where the stretch being walked began (the last snapshot known to be readable there), and
        // whether a step that recorded no changes lies in it.
        let mut stretch: Option<(SnapshotId, bool)> = None;
        // The start of the step begun last while no finish has followed it. One that never gets one (its
        // finish cut by a cleanup after a revert to a part inside it, which undid the step's changes)
        // ends where it began: the stretch after it runs from its start (review: a hand edit between it
        // and the next step was overwritten by a later revert without a word).
        let mut step_start: Option<SnapshotId> = None;
        // The stretch before a step whose start cannot be read: it runs on to the step's end (review: a
        // revert overwrote such a step's changes without a word).
        let mut carried: Option<SnapshotId> = None;
        for part in messages.iter().flat_map(|m| m.parts.iter()) {
            match &part.body {
                PartBody::StepStart(start) => {
                    let from = stretch
                        .take()
                        .or_else(|| step_start.take().map(|start| (start, false)));
                    carried = None;
                    if let Some((from, with_unrecorded)) = from {
                        let compared = match &start.snapshot {
                            Some(start) => self.changed_between(wt, &from, start).await.ok(),
                            None => None,
                        };
                        match compared {
                            Some(paths) => mark(&mut last, paths, with_unrecorded),
                            None => carried = Some(from),
                        }
                    }
                    step_start = start.snapshot.clone();
                }
                PartBody::StepFinish(finish) => {
                    let started = step_start.take();
                    stretch = match (carried.take(), &finish.snapshot) {
                        // The start could not be read: from the stretch's beginning to this step's end,
                        // the step's own changes among them. A stretch that cannot be compared either (a
                        // tree gc took from an old step) names nothing; the revert's files are written by
                        // now and must not fail for it.
                        (Some(from), Some(end)) => {
                            let paths = self
                                .changed_between(wt, &from, end)
                                .await
                                .unwrap_or_default();
                            mark(&mut last, paths, true);
                            Some((end.clone(), false))
                        }
                        // Neither its start nor its end: the stretch runs on from its beginning, the last
                        // snapshot readable (review: it ran on from the unreadable start, and nothing
                        // after was named).
                        (Some(from), None) => Some((from, true)),
                        (None, Some(end)) => Some((end.clone(), false)),
                        // The end snapshot failed (no patch either): what the step changed is in the
                        // stretch from its start on.
                        (None, None) => started.map(|start| (start, true)),
                    };
                }
                PartBody::Patch(patch) => {
                    // Every patch rewind stored names paths in its worktree; one that does not (a row
                    // edited by hand) says nothing about this worktree's files.
                    for file in &patch.files {
                        if let Ok(path) = RelPath::from_absolute(file, directory) {
                            last.insert(path, LastChange::Step);
                        }
                    }
                }
                _ => {}
            }
        }
        let from = stretch.or_else(|| step_start.map(|start| (start, false)));
        if let Some((from, with_unrecorded)) = from {
            let paths = self
                .changed_between(wt, &from, now)
                .await
                .unwrap_or_default();
            mark(&mut last, paths, with_unrecorded);
        }
        let mut changed = ChangedOutside::default();
        for (path, change) in last {
            match change {
                LastChange::Step => {}
                LastChange::Outside => {
                    changed.outside.insert(path);
                }
                LastChange::Unrecorded => {
                    changed.unrecorded.insert(path);
                }
            }
        }
        Ok(changed)
    }

    /// Takes the session's and the worktree's leases for a new file operation.
    async fn begin_operation(&self, session: &Session) -> Result<Operation> {
        let token = new_token();
        let taken_at = self.now();
        let running = Running::new(&token);
        let (session_lease, worktree_lease) = self
            .acquire_session_and_worktree(&session.id, &session.directory, &token)
            .await?;
        Ok(Operation {
            token,
            _running: running,
            session_lease,
            worktree_lease,
            taken_at,
            released: AtomicBool::new(false),
            left_intent: std::sync::Mutex::new(None),
        })
    }

    /// Commits `transaction` as the one that stores `operation`'s result (see `Operation::finishing`), the
    /// session as `stored`.
    ///
    /// When that commit fails for another reason than a lost lease (which stops the operation where it is:
    /// its new holder's recovery finishes the intent, SPEC 8), the files are rolled back from `intent`
    /// before the error is returned, so the worktree and the database agree. Unless the intent is gone:
    /// the commit may have been made and only its answer lost. Which of the two is asked, when the
    /// commit's connection broke under it (any other failure stored nothing), with a commit of
    /// the intent's guard alone (`confirm_intent`), not a read: a commit whose connection
    /// broke may still be under way on a PostgreSQL server, holding the write lock every commit takes
    /// first, and a read beside it would still find the intent it is about to delete. A gone intent is
    /// then told apart from one another host's recovery finished (`finished_by`). When the database
    /// cannot say, the record stays for recovery, the files stay as the operation wrote them, and the
    /// leases go to it as to an operation whose rollback failed (`end_operation`), not released: the next
    /// taker finishes the intent first. (Should the commit have been made after all, the next taker finds
    /// no intent, and takes the lease as free.)
    async fn store_result(
        &self,
        operation: &Operation,
        session: &Session,
        intent: &IntentRecord,
        (transaction, stored): (Transaction, &Session),
    ) -> Result<()> {
        let error = match self.repo.commit(operation.finishing(transaction)).await {
            Ok(()) => {
                operation.released.store(true, Ordering::Relaxed);
                return Ok(());
            }
            Err(error @ Error::LeaseLost(_)) => return Err(error),
            Err(error) => error,
        };
        // Only a connection that broke under the commit leaves its fate unknown; any other failure stored
        // nothing (refused before it was sent or had the write lock, or answered with an error), so the
        // intent is there (this operation holds its lease), and asking again might be refused alike.
        let there = if error.storage_fault() == Some(StorageFault::ConnectionLost) {
            self.confirm_intent(intent).await
        } else {
            Ok(true)
        };
        let op = intent.operation;
        match there {
            // The intent is finished: by this commit, or by another host's recovery, which took the
            // operation over when it stalled past its leases and put its files back. Either way the
            // leases are not this operation's to release any more.
            Ok(false) => {
                operation.released.store(true, Ordering::Relaxed);
                let untold = |error: Error, why: String| {
                    error.noted(&format!(
                        "the {op}'s intent record was finished, by its result or by another process that \
                         took the {op} over, and which of the two cannot be told: {why}; `rewind log` shows \
                         whether it is reverted"
                    ))
                };
                match self.finished_by(intent, stored).await {
                    Ok(Finisher::Result) => Ok(()),
                    Ok(Finisher::Recovery(capture)) => Err(Error::LeaseLost(format!(
                        "the {op} stalled past its leases and another process took it over: it put the \
                         files back to their state before the {op} (what they were is kept in snapshot \
                         {capture}), and the {op}'s result, whose commit lost its connection ({error}), \
                         was not stored"
                    ))),
                    Ok(Finisher::Unknown) => Err(untold(
                        error,
                        "the session does not read as its result stored it, and no file was put back"
                            .to_owned(),
                    )),
                    Err(read) => Err(untold(
                        error,
                        format!("the session or its captures cannot be read ({read})"),
                    )),
                }
            }
            Ok(true) => Err(self.roll_back(operation, session, intent, error).await),
            Err(_) => {
                operation.leave(intent);
                Err(error.noted(&format!(
                    "whether the {op} was stored is not known, so its files are left as it wrote them; the \
                     intent record stays, and the next rewind command finishes it once the database answers \
                     (it puts the files back unless the {op} was stored)"
                )))
            }
        }
    }

    /// Whether `intent` still exists, asked with a commit that holds only its guard: it takes the write
    /// lock every commit takes first, so it waits for any commit still under way (one whose connection
    /// broke, which may yet delete the intent) and then finds what that commit left. `Err` when the
    /// database cannot say (away, or that lock not had in time).
    async fn confirm_intent(&self, intent: &IntentRecord) -> Result<bool> {
        let guard_only = Transaction {
            guards: vec![Guard::IntentExists(intent.token.clone())],
            ..Default::default()
        };
        match self.repo.commit(guard_only).await {
            Ok(()) => Ok(true),
            Err(Error::LeaseLost(_)) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// What finished `intent`, gone, whose operation's result would have stored the session as `stored`:
    /// another host's recovery, when one recorded a capture under the intent's token (it does before it
    /// puts back any file that differs from the intent's `before`, and a recovery that took the operation
    /// over leaves no lease under the operation's token, so its result can no longer be stored after
    /// that); otherwise that result, when the session reads as it put it (its revert point, applied
    /// snapshot, the operation's own start time for a revert, and its update time, which any later change
    /// moves: an unrevert's `None`s alone are what any later unrevert or cleanup leaves too). Neither is
    /// `Unknown`: a recovery that found every file as before, or the result, with the session changed by
    /// another operation since (both leave the session and the files agreeing).
    async fn finished_by(&self, intent: &IntentRecord, stored: &Session) -> Result<Finisher> {
        if let Some(capture) = self
            .captures_of_intent(&intent.directory, &intent.token)
            .await?
            .into_iter()
            .next()
        {
            return Ok(Finisher::Recovery(capture.snapshot));
        }
        let now = self.repo.session(&intent.session_id).await?;
        Ok(match &now {
            Some(now)
                if now.revert == stored.revert
                    && now.applied == stored.applied
                    && now.reverted_at == stored.reverted_at
                    && now.time.updated == stored.time.updated =>
            {
                Finisher::Result
            }
            _ => Finisher::Unknown,
        })
    }

    /// The captures of `directory` recorded under the intent `token` (by a recovery or rollback of it,
    /// before it put files back).
    async fn captures_of_intent(
        &self,
        directory: &str,
        token: &LeaseToken,
    ) -> Result<Vec<Capture>> {
        Ok(self
            .repo
            .captures(Some(directory.to_owned()))
            .await?
            .into_iter()
            .filter(|capture| capture.intent.as_deref() == Some(token.0.as_str()))
            .collect())
    }

    /// Releases an operation's leases, unless the transaction that stored its result did.
    async fn end_operation(&self, operation: &Operation) {
        if operation.released.load(Ordering::Relaxed) {
            return;
        }
        let left = operation
            .left_intent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        match left {
            // Its rollback failed, and the intent waits for recovery: both leases go to the interrupted
            // operation (expired), as a recovery that gives up hands them back, so whatever takes either
            // next, a step's snapshot of the half-reverted worktree included, finishes the intent first
            // (review: they were released, free to take without it).
            Some(intent) => {
                for held in [&operation.worktree_lease, &operation.session_lease] {
                    let to = super::recovery::interrupted(&intent, held.key.clone());
                    self.hand_back(held, &to).await;
                }
            }
            None => {
                self.release(&operation.worktree_lease).await;
                self.release(&operation.session_lease).await;
            }
        }
    }

    /// Renews both leases of an operation once more than half their time has passed since they were taken
    /// (a long track of a big worktree): done before the file writes, so an owner that stalled past its
    /// lease finds out before it writes. (The intent's transaction, just before, checks that both are
    /// still held.)
    async fn renew_operation(&self, operation: &Operation) -> Result<()> {
        let ttl = self.config.operation_lease_ms;
        if self.now().saturating_sub(operation.taken_at) < ttl / 2 {
            return Ok(());
        }
        self.renew(&operation.session_lease, ttl).await?;
        self.renew(&operation.worktree_lease, ttl).await
    }

    /// The session read again once its operation holds the leases (a step may have begun, or the session
    /// changed, since the checks before), refused (409) while a step is open in any session of its
    /// worktree `directory`, or of a worktree inside it or around it: one read of those sessions.
    async fn load_leased(&self, session_id: &SessionId, directory: &str) -> Result<Session> {
        let sessions = self.repo.sessions_overlapping(directory).await?;
        let session = super::session_in(session_id, &sessions)?;
        refuse_open_steps(&session, &sessions)?;
        Ok(session)
    }

    /// `write_intent`, and meanwhile the files that differ between the two snapshots of `compare` (none
    /// without): the database's commit and the store's comparison of trees use different resources, and
    /// the intent is stored before any file is touched either way. The comparison's error is returned with
    /// the stored intent, for the caller to roll back.
    async fn intent_beside_changes(
        &self,
        session: &Session,
        operation: &Operation,
        (kind, before, files): (IntentOperation, SnapshotId, BTreeSet<RelPath>),
        compare: Option<(&SnapshotId, &SnapshotId)>,
    ) -> Result<(IntentRecord, Result<Vec<RelPath>>)> {
        let wt = worktree(session);
        let (intent, changes) = futures::future::join(
            self.write_intent(session, operation, kind, before, files),
            async {
                match compare {
                    Some((from, to)) => self.changed_between(wt, from, to).await,
                    None => Ok(Vec::new()),
                }
            },
        )
        .await;
        Ok((intent?, changes))
    }

    async fn write_intent(
        &self,
        session: &Session,
        operation: &Operation,
        kind: IntentOperation,
        before: SnapshotId,
        files: BTreeSet<RelPath>,
    ) -> Result<IntentRecord> {
        let intent = IntentRecord {
            token: operation.token.clone(),
            session_id: session.id.clone(),
            directory: session.directory.clone(),
            operation: kind,
            holder: self.operation_holder(),
            before,
            files: files.into_iter().collect(),
            created: self.now(),
            unreadable: None,
        };
        self.repo
            .commit(Transaction {
                guards: vec![
                    operation.session_lease.guard(),
                    operation.worktree_lease.guard(),
                ],
                changes: vec![Change::PutIntent(Box::new(intent.clone()))],
                events: Vec::new(),
            })
            .await?;
        Ok(intent)
    }

    /// Puts the intent's files back to their pre-operation content after a failure, capturing their current
    /// state first, and returns the original error (with the rollback's own failure, if any, added).
    async fn roll_back(
        &self,
        operation: &Operation,
        session: &Session,
        intent: &IntentRecord,
        error: Error,
    ) -> Error {
        let why = format!("the {} failed: {error}", intent.operation);
        // Unless the rollback is recorded (or another process took the operation over), the intent stays.
        let leave = || operation.leave(intent);
        let leases = [&operation.session_lease, &operation.worktree_lease];
        // A full disk met by the rollback or its record too is still said to be one (diff review: only the
        // first error's kind was kept).
        let mut full = error.storage_fault() == Some(StorageFault::DiskFull);
        // A database outage (down, or its connection ended) that the rollback's record met too is still
        // said to be one, so a client is told what to wait for (stop 67: "internal error" after a burst of
        // ended connections); the files are back and the intent stays for the next operation.
        let outage = error.storage_fault().filter(|fault| fault.is_outage());
        // The same outage met again by `other`: the error said as that outage, `also` after its text and
        // what became of the files as its note, which an HTTP answer gives too (it leaves out the causes,
        // which may name the database's host).
        let again = |other: &Error, also: String, note: &str| {
            outage
                .filter(|_| other.storage_fault().is_some_and(StorageFault::is_outage))
                .map(|outage| Error::storage(outage, format!("{error}; {also}")).noted(note))
        };
        let failure = match self.put_back_intent(session, intent, &why, leases).await {
            Ok(mut put_back) => {
                match self.repo.commit(std::mem::take(&mut put_back.record)).await {
                    Ok(()) => return error.noted(&put_back.recorded(intent.operation)),
                    Err(recording) => {
                        leave();
                        full |= recording.storage_fault() == Some(StorageFault::DiskFull);
                        if let Some(said) = again(
                            &recording,
                            format!("recording the rollback failed too ({recording})"),
                            &put_back.awaiting_database(intent.operation),
                        ) {
                            return said;
                        }
                        put_back.unrecorded(intent.operation, &recording)
                    }
                }
            }
            Err(rollback @ Error::LeaseLost(_)) => {
                // Another process finishes it: said as a fault of this one, as before.
                format!(
                    "rolling the files back stopped ({rollback}): another process has taken the operation \
                     over and finishes it"
                )
            }
            Err(rollback) => {
                leave();
                full |= rollback.storage_fault() == Some(StorageFault::DiskFull);
                // The same outage met by the rollback's reads or its capture's record, which come before any
                // file is put back (the restore's own errors are not the database's): the files are as the
                // operation left them (review: said as an internal error).
                if let Some(said) = again(
                    &rollback,
                    format!("rolling the files back could not begin ({rollback})"),
                    &format!(
                        "the files are left as the {} left them; the intent record stays, and the next \
                         rewind command puts them back once the database answers",
                        intent.operation
                    ),
                ) {
                    return said;
                }
                // Files may be left changed: a fault to look into.
                format!(
                    "rolling the files back also failed ({rollback}); {}; the intent record stays, and the \
                     next rewind command will finish the rollback",
                    may_be_changed(&intent.files)
                )
            }
        };
        // Files may be left changed: a fault to look into, not a request to send again, whatever the error
        // was; a full disk is still said to be one (the likeliest reason both failed).
        let text = format!("{error}; {failure}");
        if full {
            Error::storage(StorageFault::DiskFull, text)
        } else {
            Error::backend(text)
        }
    }

    /// Restores an intent's files to its `before` snapshot (capturing their current state first, with a
    /// warning) and deletes the record. Shared by rollback and recovery.
    pub(super) async fn finish_intent(
        &self,
        session: &Session,
        intent: &IntentRecord,
        why: &str,
        leases: [&HeldLease; 2],
    ) -> Result<()> {
        let put_back = self.put_back_intent(session, intent, why, leases).await?;
        self.repo.commit(put_back.record).await
    }

    /// The part of `finish_intent` that captures the intent's files and puts them back: returns the
    /// transaction that records it (the warning, the intent's removal), not yet committed. `leases` are
    /// the session's and the worktree's, held by the caller: renewed before any file is put back, and
    /// guards of every commit, so a caller whose leases were taken over (it stalled past them: another
    /// host's recovery may be putting the same files back) stops (SPEC 8).
    async fn put_back_intent(
        &self,
        session: &Session,
        intent: &IntentRecord,
        why: &str,
        leases: [&HeldLease; 2],
    ) -> Result<PutBack> {
        let guards = || intent_guards(&intent.token, leases);
        let wt = worktree(session);
        // An earlier attempt at this intent that was interrupted after its capture (a recovery killed
        // too) may have put some files back already: its capture, not this one, holds what they were.
        let earlier = self
            .captures_of_intent(&session.directory, &intent.token)
            .await?;
        let capture = self.snapshots.track(wt).await?.id;
        let files: BTreeSet<&str> = intent.files.iter().map(RelPath::as_str).collect();
        // The operation's files, and the paths it replaced to write them: a file or symlink standing where
        // a directory was needed (above one of them), files of a directory standing where a file was
        // needed (below one).
        let changed: Vec<RelPath> = self
            .changed_between(wt, &intent.before, &capture)
            .await?
            .into_iter()
            .filter(|path| touched_for(path.as_str(), &files))
            .collect();
        let mut transaction = Transaction {
            guards: guards(),
            ..Default::default()
        };
        let mut captured = Captured::Nothing;
        let mut left = Vec::new();
        if !changed.is_empty() {
            // The capture is recorded before any file is put back: should the last commit fail, the state
            // the files had is still kept (gc keeps captures), and a later recovery captures anew. When the
            // intent is gone, someone else finished it: nothing is put back. Any other failure (the database
            // is down: a rollback after a failed result commit) still puts the files back, as SPEC 8 asks
            // before the error is returned; the capture then goes with the last commit (and a rollback's
            // error names its snapshot, should that commit fail too).
            let record = Capture {
                directory: session.directory.clone(),
                snapshot: capture.clone(),
                time: self.now(),
                message: format!("{why}: the state of its files before they were put back"),
                paths: changed.iter().map(|p| p.as_str().to_owned()).collect(),
                intent: Some(intent.token.0.clone()),
            };
            let recorded = self
                .repo
                .commit(Transaction {
                    guards: guards(),
                    changes: vec![Change::AddCapture(Box::new(record.clone()))],
                    events: Vec::new(),
                })
                .await;
            let stored = match recorded {
                Ok(()) => true,
                Err(error @ Error::LeaseLost(_)) => return Err(error),
                Err(_) => {
                    transaction
                        .changes
                        .push(Change::AddCapture(Box::new(record)));
                    false
                }
            };
            for held in leases {
                self.renew(held, self.config.operation_lease_ms).await?;
            }
            // A file changed after the capture (by someone else) is left as it is: its content is in no
            // snapshot.
            let outcome = self
                .snapshots
                .restore_since(wt, &intent.before, changed.clone(), &capture)
                .await?;
            left = outcome.kept.into_iter().map(|k| k.path).collect::<Vec<_>>();
            captured = if stored {
                Captured::Stored(capture.clone())
            } else {
                Captured::WithRecord(capture.clone())
            };
        }
        // Directories the operation made and emptied (a revert killed between deleting the files a part
        // of it had written and removing their directory) hold no file for the restore to delete: removed
        // too, so the worktree is wholly as before (black-box: chains of empty directories stayed). Best
        // effort: the files are back either way.
        if !intent.files.is_empty() {
            let _ = self
                .snapshots
                .remove_emptied_dirs(wt, &intent.before, intent.files.clone(), intent.created)
                .await;
        }
        // The warning names where the files' state before they were put back is kept: this attempt's
        // capture, or, after an interrupted attempt, that attempt's (it holds the files as they were before
        // any was put back; this one holds, for those, their state before the operation again), with this
        // one for files changed between the two attempts.
        let kept_in = match earlier.first() {
            None if changed.is_empty() => None,
            None => Some((
                capture.clone(),
                format!("; their state at that moment is kept in snapshot {capture}"),
                Vec::new(),
            )),
            Some(first) => Some((
                first.snapshot.clone(),
                format!(
                    ". An earlier attempt to put them back was interrupted; their state before that attempt is \
                     kept in snapshot {}{}",
                    first.snapshot,
                    if changed.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; any of them changed between the two attempts is kept as it was then in \
                             snapshot {capture}"
                        )
                    }
                ),
                first.paths.clone(),
            )),
        };
        if let Some((snapshot, where_kept, earlier_paths)) = kept_in {
            let files: BTreeSet<String> = earlier_paths
                .into_iter()
                .filter_map(|p| RelPath::new(p).ok())
                .chain(changed.iter().cloned())
                .map(|p| p.to_absolute(&session.directory))
                .collect();
            let warning = Warning {
                time: self.now(),
                message: format!(
                    "{why}. Its files were put back to their state before it{}{where_kept}",
                    left_as_they_are(&left)
                ),
                snapshot: Some(snapshot),
                files: files.into_iter().collect(),
            };
            self.push_warning(&mut transaction, &session.id, warning);
        }
        transaction
            .changes
            .push(Change::DeleteIntent(intent.token.clone()));
        Ok(PutBack {
            record: transaction,
            captured,
            untouched: changed.is_empty() && earlier.is_empty() && left.is_empty(),
            left,
        })
    }
}

/// An intent's files put back (`put_back_intent`): the transaction that records it, and the snapshot that
/// holds the files' state before they were put back.
struct PutBack {
    record: Transaction,
    captured: Captured,
    /// The files left as they are (changed meanwhile, or not tracked content now).
    left: Vec<RelPath>,
    /// Whether no file had changed since the operation began, and no earlier attempt put any back: the
    /// operation failed before it wrote one (a snapshot object missing, say), and nothing was put back.
    untouched: bool,
}

/// The snapshot of an intent's files before they were put back, and where it is recorded.
enum Captured {
    /// None of the files had changed: nothing was captured.
    Nothing,
    /// Its capture record is committed.
    Stored(SnapshotId),
    /// Its capture record goes with `PutBack::record` (its own commit was refused).
    WithRecord(SnapshotId),
}

impl PutBack {
    /// What a rollback says after the operation's error once its files are back and `record` is committed.
    fn recorded(&self, operation: IntentOperation) -> String {
        // Review: "the files it had changed were put back" was said when none had been written.
        if self.untouched {
            return format!(
                "{}: no file had been written yet, and the session is as it was",
                crate::error::NOTHING_CHANGED
            );
        }
        format!(
            "the files it had changed {} {operation}{}, and the session is as it was{}",
            crate::error::PUT_BACK,
            left_as_they_are(&self.left),
            self.kept(true)
        )
    }

    /// Where the files' state before they were put back is kept (nothing when none was captured);
    /// `recorded`: whether `record`, which also records a capture whose own commit was refused, is
    /// committed.
    fn kept(&self, recorded: bool) -> String {
        match &self.captured {
            Captured::Nothing => String::new(),
            Captured::WithRecord(id) if !recorded => format!(
                "; the files' state before they were put back is in snapshot {id}, which no record names yet: \
                 `rewind gc` removes it once its grace period has passed, so restore what you need from it now \
                 (`rewind snapshot restore {id} PATH…`)"
            ),
            Captured::Stored(id) | Captured::WithRecord(id) => format!(
                "; the files' state before they were put back is kept in snapshot {id} (`rewind snapshot \
                 restore {id} PATH…` brings a file back)"
            ),
        }
    }

    /// What became of the files, said after the operation's error when the rollback's record is not
    /// committed: put back, or nothing changed when none had been written (review: "the files were put back"
    /// was said then too).
    fn what_became(&self, operation: IntentOperation) -> String {
        if self.untouched {
            return format!(
                "{}: no file had been written yet",
                crate::error::NOTHING_CHANGED
            );
        }
        format!(
            "the files {} {operation}{}",
            crate::error::PUT_BACK,
            left_as_they_are(&self.left)
        )
    }

    /// How the next command finds the files when it finishes the intent record.
    fn found_next(&self) -> &'static str {
        if self.untouched {
            "it finds them unchanged"
        } else {
            "it finds the files already back"
        }
    }

    /// What a rollback says when its files are back but `record` could not be committed because the
    /// database is away: nothing of the database's own error (it may name its host).
    fn awaiting_database(&self, operation: IntentOperation) -> String {
        format!(
            "{}; the intent record stays, and the next rewind command finishes it once the database \
             answers ({}){}",
            self.what_became(operation),
            self.found_next(),
            self.kept(false)
        )
    }

    /// What a rollback says when its files are back but `record` could not be committed (`recording`).
    fn unrecorded(&self, operation: IntentOperation, recording: &Error) -> String {
        let kept = self.kept(false);
        let put_back = self.what_became(operation);
        match recording {
            // The intent's guard: another process's recovery finished the record meanwhile.
            Error::LeaseLost(_) => format!(
                "{put_back}, and another process finished its record meanwhile ({recording}){kept}"
            ),
            _ => format!(
                "{put_back}, but recording that failed ({recording}){kept}; the intent record stays, and the \
                 next rewind command finishes it ({})",
                self.found_next()
            ),
        }
    }
}

/// `the files it was changing, as it may have left them (N): a, b` for an intent whose rollback failed:
/// its files, the first 20 of them named (a path it replaced on their way, a file where one of their
/// directories was, is not named: the rollback would have put it back too).
fn may_be_changed(files: &[RelPath]) -> String {
    const NAMED: usize = 20;
    let named: Vec<&str> = files.iter().take(NAMED).map(RelPath::as_str).collect();
    let more = match files.len().saturating_sub(NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    format!(
        "the files it was changing, as it may have left them ({}): {}{more}",
        files.len(),
        named.join(", ")
    )
}

/// ` (N of them … left as they are: a, b)` for the files a rollback left as they are; empty for none.
fn left_as_they_are(left: &[RelPath]) -> String {
    match left.len() {
        0 => String::new(),
        n => format!(
            " ({n} of them changed meanwhile, or are not tracked content now, and were left as they are: {})",
            left.iter()
                .map(RelPath::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Refuses (409) while a step is open in any of `sessions` (those of `session`'s worktree).
fn refuse_open_steps(session: &Session, sessions: &[Session]) -> Result<()> {
    for other in sessions {
        if let Some(step) = &other.step {
            let place = if other.id == session.id {
                // Its own step (review: it was named as if another session's).
                "(this session)".to_owned()
            } else if other.directory == session.directory {
                "of this worktree".to_owned()
            } else {
                format!(
                    "of {}, a worktree inside or around this one",
                    other.directory
                )
            };
            return Err(Error::busy(
                &session.id,
                format!(
                    "Session is busy: {} (a step is open in session {} {place}, message {}, owned by {}); try again when it has finished",
                    session.id, other.id, step.message_id, step.holder
                ),
            ));
        }
    }
    Ok(())
}

/// Whether `path` is one of `files`, or lies above or below one of them (`a` for `a/b.txt`, `a/b.txt` for
/// `a`): one lookup per parent of `path`, and one for the first file at or after `path/`.
fn touched_for(path: &str, files: &BTreeSet<&str>) -> bool {
    let below_one = || {
        path.match_indices('/')
            .any(|(i, _)| files.contains(&path[..i]))
    };
    let prefix = format!("{path}/");
    let above_one = || {
        files
            .range(prefix.as_str()..)
            .next()
            .is_some_and(|file| file.starts_with(prefix.as_str()))
    };
    files.contains(path) || below_one() || above_one()
}

/// The paths of `changed` that cannot be put back without removing one of `made` (paths the user changed
/// while reverted that the revert did not touch): one of them lies below the path (the user's file in a
/// directory standing where the path's file goes) or is a parent of it (the user's file where the path
/// needs a directory).
fn blocked_by_new_files(changed: &BTreeSet<RelPath>, made: &[RelPath]) -> BTreeSet<RelPath> {
    let made_set = path_set(made);
    let mut blocked: BTreeSet<RelPath> = made
        .iter()
        .flat_map(|path| path.ancestors())
        .filter(|dir| changed.contains(dir))
        .collect();
    blocked.extend(
        changed
            .iter()
            .filter(|path| path.ancestors().any(|dir| made_set.contains(&dir)))
            .cloned(),
    );
    blocked
}

/// The warning about `paths` (of worktree `directory`) whose other content snapshot `snapshot` holds, with
/// the `message` their count gives; none when there are none.
fn files_warning<P: std::borrow::Borrow<RelPath>>(
    time: u64,
    directory: &str,
    snapshot: &SnapshotId,
    paths: impl IntoIterator<Item = P>,
    message: impl FnOnce(usize) -> String,
) -> Option<Warning> {
    let files: Vec<String> = paths
        .into_iter()
        .map(|p| p.borrow().to_absolute(directory))
        .collect();
    (!files.is_empty()).then(|| Warning {
        time,
        message: message(files.len()),
        snapshot: Some(snapshot.clone()),
        files,
    })
}

/// Who last changed a path before a revert, as far as the session's parts tell (`changed_outside_steps`).
#[derive(Clone, Copy)]
enum LastChange {
    /// A step, whose patch names it.
    Step,
    /// Someone outside the session's steps: the user, or another session.
    Outside,
    /// The same, or a step whose changes were not recorded.
    Unrecorded,
}

/// The paths `changed_outside_steps` found last changed by no recorded step.
#[derive(Default)]
struct ChangedOutside {
    outside: BTreeSet<RelPath>,
    unrecorded: BTreeSet<RelPath>,
}

/// Marks `paths` as last changed in a stretch between steps (`with_unrecorded`: one that holds a step
/// whose changes were not recorded).
fn mark(last: &mut BTreeMap<RelPath, LastChange>, paths: Vec<RelPath>, with_unrecorded: bool) {
    let change = if with_unrecorded {
        LastChange::Unrecorded
    } else {
        LastChange::Outside
    };
    for path in paths {
        last.insert(path, change);
    }
}

/// What an undo of a revert (`undo_revert`) is part of.
#[derive(Clone, Copy)]
enum Undoing<'a> {
    /// An unrevert: the files stay as the undo leaves them.
    Unrevert,
    /// A revert of a reverted session, which reverts the files its patches name again right after the
    /// undo (SPEC 6 step 3).
    BeforeAnotherRevert(&'a BTreeSet<RelPath>),
}

impl Undoing<'_> {
    /// `paths` split into those reverted again right after the undo and the others.
    fn reverted_again(self, paths: Vec<&RelPath>) -> (Vec<&RelPath>, Vec<&RelPath>) {
        match self {
            Undoing::Unrevert => (Vec::new(), paths),
            Undoing::BeforeAnotherRevert(reverting) => paths
                .into_iter()
                .partition(|path| reverting.contains(*path)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn touched_for_finds_the_files_and_the_paths_above_and_below_them() {
        let files: BTreeSet<&str> = ["a/b.txt", "c", "d/e/f"].into_iter().collect();
        for (path, touched) in [
            ("a/b.txt", true),
            ("a", true),
            ("c/x", true),
            ("c/x/y", true),
            ("d", true),
            ("d/e", true),
            ("a/b", false),
            ("ab", false),
            ("a/b.txt2", false),
            ("cc", false),
            ("d/e/g", false),
            ("b.txt", false),
        ] {
            assert_eq!(touched_for(path, &files), touched, "{path}");
        }
    }

    #[test]
    fn a_changed_path_is_blocked_by_a_new_file_below_it_or_in_place_of_a_parent() {
        let paths = |list: &[&str]| -> Vec<RelPath> {
            list.iter()
                .map(|p| RelPath::new(*p).expect("a valid path"))
                .collect()
        };
        let changed = path_set(&paths(&[
            "n.txt",
            "d",
            "d/f",
            "sub/f.txt",
            "keep/x",
            "other",
        ]));
        let made = paths(&["n.txt/inner", "d/g", "sub", "keepsake", "other2", "keep/y"]);
        let blocked: Vec<String> = blocked_by_new_files(&changed, &made)
            .into_iter()
            .map(|p| p.as_str().to_owned())
            .collect();
        // `d/f` stays in scope: putting back its absence removes nothing of the user's.
        assert_eq!(blocked, ["d", "n.txt", "sub/f.txt"]);
        assert!(blocked_by_new_files(&changed, &[]).is_empty());
    }
}
