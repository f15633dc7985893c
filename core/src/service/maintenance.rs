//! Looking after the snapshot stores: `snapshot restore` with a capture recorded first (so the restore can
//! itself be undone and gc keeps what it overwrote), and gc (SPEC sections 2.4 and 11): delete old
//! sessions, then collect the objects nothing refers to.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::model::{Capture, GcReport, LeaseKey, RelPath, RestoreOutcome, SessionId, SnapshotId};
use crate::ports::{Change, Transaction};

use super::record::normalise_directory;
use super::{Rewind, new_token};

/// What `restore_snapshot` did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRestore {
    /// The worktree's state before the restore, recorded in the database (`snapshot restore` it to undo).
    pub capture: SnapshotId,
    /// The files written, deleted and kept.
    pub outcome: RestoreOutcome,
}

/// What gc should do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GcRequest {
    /// Delete the sessions not updated, and the captures not taken, for this long first (none: delete
    /// nothing, only collect).
    pub older_than_ms: Option<u64>,
    /// Objects returned by `track` or `revert` within this period are kept (SPEC 2.4, default 1 hour).
    pub grace: Duration,
    /// Worktrees whose stores are collected even when no session or capture names them (the caller's own
    /// directory, say).
    pub directories: Vec<String>,
}

/// A session gc left alone, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GcSkipped {
    /// The session.
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    /// Why (a step or an operation holds it).
    pub reason: String,
}

/// What gc did in one worktree's store.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorktreeGc {
    /// The worktree.
    pub directory: String,
    /// How many snapshots the database still refers to there (all kept).
    pub kept_snapshots: u64,
    /// What the store freed, when it could be collected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<GcReport>,
    /// Why it could not be collected (the worktree is gone, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The whole store was removed (or, with `error`, could not be): its worktree is gone and nothing the
    /// database names needs it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub store_removed: bool,
    /// `error` says only why the store is left for a later gc, which is no failure of this one: an
    /// operation held the worktree or its store, or the worktree cannot be used now (gone: its store stays
    /// while the database names it, as it may come back).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub left: bool,
}

/// What gc did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GcSummary {
    /// The sessions deleted (older than the cut-off).
    pub sessions_deleted: Vec<SessionId>,
    /// Old sessions left alone because they are busy.
    pub sessions_skipped: Vec<GcSkipped>,
    /// How many captures older than the cut-off were deleted.
    pub captures_deleted: u64,
    /// How many old events were deleted from the outbox, which keeps its newest `ServiceConfig::outbox_kept`
    /// events and at most `ServiceConfig::outbox_kept_bytes` of their text (the newest whatever its size).
    pub events_deleted: u64,
    /// The bytes the database file gave back to the file system (`MessageRepo::reclaim_space`).
    #[serde(default)]
    pub database_bytes_freed: u64,
    /// Per worktree, what its store freed.
    pub worktrees: Vec<WorktreeGc>,
}

impl GcSummary {
    /// Objects removed over every store.
    pub fn objects_removed(&self) -> u64 {
        self.worktrees
            .iter()
            .filter_map(|w| w.report.as_ref())
            .map(|r| r.objects_removed)
            .sum()
    }

    /// Bytes freed over every store.
    pub fn bytes_freed(&self) -> u64 {
        self.worktrees
            .iter()
            .filter_map(|w| w.report.as_ref())
            .map(|r| r.bytes_freed)
            .sum()
    }
}

impl Rewind {
    /// Puts the worktree `directory` (or only `paths`) back to snapshot `to`. The current state is tracked
    /// first and recorded as a capture in the database before any file is touched, so the restore can be
    /// undone with another restore and gc keeps what it overwrote. Refused (409) while a step is open in a
    /// session of the worktree or another operation holds it.
    pub async fn restore_snapshot(
        &self,
        directory: &str,
        to: &SnapshotId,
        paths: Option<Vec<RelPath>>,
    ) -> Result<SnapshotRestore> {
        self.restore_snapshot_reporting(directory, to, paths, |_| {})
            .await
    }

    /// `restore_snapshot`, calling `captured` with the capture once it is recorded and before any file is
    /// touched: a restore has no intent record, so a caller that is killed during the writes leaves the
    /// worktree part restored, and the capture, told in advance, is how the user puts it back.
    pub async fn restore_snapshot_reporting(
        &self,
        directory: &str,
        to: &SnapshotId,
        paths: Option<Vec<RelPath>>,
        captured: impl FnOnce(&SnapshotId) + Send,
    ) -> Result<SnapshotRestore> {
        let directory = normalise_directory(directory)?;
        refuse_open_steps(&self.prepare_worktree(&directory).await?)?;
        let token = new_token();
        let lease = self
            .acquire(
                LeaseKey::Worktree(directory.clone()),
                &token,
                self.config.operation_lease_ms,
                None,
            )
            .await?;
        let result = self
            .restore_locked(&directory, to, paths, lease.guard(), captured)
            .await;
        self.release(&lease).await;
        result
    }

    async fn restore_locked(
        &self,
        directory: &str,
        to: &SnapshotId,
        paths: Option<Vec<RelPath>>,
        guard: crate::ports::Guard,
        captured: impl FnOnce(&SnapshotId) + Send,
    ) -> Result<SnapshotRestore> {
        let worktree = Path::new(directory);
        // Again under the lease: a step holds the worktree only while it tracks, so one may have begun
        // since the look above; the restore would then be recorded as that step's change, and undone with
        // its turn.
        refuse_open_steps(&self.repo.sessions_overlapping(directory).await?)?;
        // Reading `to` against the worktree fails on an unknown snapshot before anything is recorded or
        // written: bad input changes nothing.
        self.snapshots.changed_files(worktree, to).await?;
        let capture = self.snapshots.track(worktree).await?.id;
        let record = Capture {
            directory: directory.to_owned(),
            snapshot: capture.clone(),
            time: self.now(),
            message: format!("captured before `snapshot restore {to}`"),
            paths: paths
                .iter()
                .flatten()
                .map(|p| p.as_str().to_owned())
                .collect(),
            intent: None,
        };
        self.repo
            .commit(Transaction {
                guards: vec![guard],
                changes: vec![Change::AddCapture(Box::new(record))],
                events: Vec::new(),
            })
            .await?;
        captured(&capture);
        let outcome = self.snapshots.restore(worktree, to, paths).await?;
        Ok(SnapshotRestore { capture, outcome })
    }

    /// The captures, oldest first; only those of `directory` when given.
    pub async fn captures(&self, directory: Option<&str>) -> Result<Vec<Capture>> {
        self.repo.captures(directory.map(str::to_owned)).await
    }

    /// Deletes the sessions and captures older than the cut-off (when one is given), then collects, in every
    /// worktree's store, the objects no snapshot the database refers to needs. A busy session is left alone
    /// and reported; a store that cannot be collected is reported and the others still are.
    pub async fn gc(&self, request: GcRequest) -> Result<GcSummary> {
        self.recover().await?;
        let mut summary = GcSummary::default();
        let mut sessions = self.repo.sessions(None).await?;
        let mut captures = self.repo.captures(None).await?;
        if let Some(older_than) = request.older_than_ms {
            let cutoff = self.now().saturating_sub(older_than);
            for session in sessions.iter().filter(|s| s.time.updated < cutoff) {
                // Judged again under the session's lease: one used since it was listed stays.
                let old = Some(super::DeleteIf::UpdatedBefore(cutoff));
                match self.delete_session_if(&session.id, old).await {
                    Ok(true) => summary.sessions_deleted.push(session.id.clone()),
                    Ok(false) => summary.sessions_skipped.push(GcSkipped {
                        session_id: session.id.clone(),
                        reason: "it was used while gc ran (updated after the cut-off)".to_owned(),
                    }),
                    Err(Error::Busy { message, .. }) => summary.sessions_skipped.push(GcSkipped {
                        session_id: session.id.clone(),
                        reason: message,
                    }),
                    // Deleted meanwhile by another process: nothing left to do.
                    Err(Error::NotFound(_)) => {}
                    Err(error) => return Err(error),
                }
            }
            // The captures of an intent still pending stay, however old, and so do those taken after the
            // oldest of them: an interrupted recovery took them before it put any file back, so they
            // hold what the files were before, which its next attempt reports (review).
            let pending: BTreeSet<String> = self
                .repo
                .intents()
                .await?
                .into_iter()
                .map(|intent| intent.token.0)
                .collect();
            let before = captures
                .iter()
                .filter(|c| c.intent.as_ref().is_some_and(|t| pending.contains(t)))
                .map(|c| c.time)
                .fold(cutoff, u64::min);
            summary.captures_deleted = captures.iter().filter(|c| c.time < before).count() as u64;
            if summary.captures_deleted > 0 {
                self.repo
                    .commit(Transaction {
                        guards: Vec::new(),
                        changes: vec![Change::DeleteCapturesBefore { before }],
                        events: Vec::new(),
                    })
                    .await?;
            }
            // What the database names once they are gone: the store of a directory that is gone too, and
            // that only they named, is removed in this run.
            sessions = self.repo.sessions(None).await?;
            captures = self.repo.captures(None).await?;
        }
        let mut directories: BTreeSet<String> = request
            .directories
            .iter()
            .map(|d| normalise_directory(d))
            .collect::<Result<_>>()?;
        directories.extend(sessions.iter().map(|s| s.directory.clone()));
        directories.extend(captures.iter().map(|c| c.directory.clone()));
        directories.extend(self.repo.intents().await?.into_iter().map(|i| i.directory));
        // The stores of worktrees that are gone and that nothing here names are removed whole (their
        // objects cannot be collected one by one: a store cannot be opened without its worktree).
        let named: Vec<std::path::PathBuf> = directories.iter().map(Into::into).collect();
        for (worktree, outcome) in self
            .snapshots
            .remove_gone_stores(&named, request.grace)
            .await?
        {
            let (report, error) = match outcome {
                Ok(report) => (Some(report), None),
                Err(error) => (None, Some(error.to_string())),
            };
            summary.worktrees.push(WorktreeGc {
                directory: worktree.to_string_lossy().into_owned(),
                kept_snapshots: 0,
                report,
                error,
                store_removed: true,
                left: false,
            });
        }
        // Stores that no session or capture names any more (their sessions deleted) are collected too. A
        // data directory that cannot be listed only leaves them out: those the database names are
        // collected all the same.
        directories.extend(
            self.snapshots
                .stored_worktrees()
                .await
                .unwrap_or_default()
                .into_iter()
                .filter_map(|path| path.to_str().map(str::to_owned)),
        );
        summary.events_deleted = self.cut_outbox().await?;
        for directory in directories {
            let (keep, from) = match self.keep_of(&directory).await {
                Ok(keep) => keep,
                // Busy, the worktree is left for the next gc (the refusal says to try again); a worktree
                // whose references cannot be read (a damaged row of its own) is left uncollected, and the
                // others are collected (review: one damaged intent stopped gc).
                Err(error) => {
                    let (error, left) = match error {
                        Error::Busy { message, .. } => (message, true),
                        other => (
                            format!("what its sessions refer to cannot be read: {other}"),
                            false,
                        ),
                    };
                    summary.worktrees.push(WorktreeGc {
                        directory,
                        kept_snapshots: 0,
                        report: None,
                        error: Some(error),
                        store_removed: false,
                        left,
                    });
                    continue;
                }
            };
            let kept_snapshots = keep.len() as u64;
            // An id the store returned since `from` may be about to be stored: kept whatever the grace
            // period (the store logs the ids it returns by the same clock, in milliseconds, and keeps
            // those of the grace period's first millisecond too).
            let since = Duration::from_millis(self.now().saturating_sub(from));
            let grace = request.grace.max(since);
            let (report, error, left) = match self
                .snapshots
                .gc_since(Path::new(&directory), &keep, grace, from)
                .await
            {
                Ok(report) => (Some(report), None, false),
                Err(error) => {
                    let left = matches!(error, Error::Busy { .. } | Error::InvalidInput(_));
                    (None, Some(error.to_string()), left)
                }
            };
            summary.worktrees.push(WorktreeGc {
                directory,
                kept_snapshots,
                report,
                error,
                store_removed: false,
                left,
            });
        }
        // Last, once every row gc deletes is gone. Giving the space back is no part of what gc promises:
        // a database that cannot do it now (locked past the busy timeout) keeps the space for its own
        // next rows, and gc's work stands.
        summary.database_bytes_freed = self.repo.reclaim_space().await.unwrap_or(0);
        Ok(summary)
    }

    /// The snapshots the database refers to in `directory`, and the moment from which gc keeps every id the
    /// store returns (`gc`). Every operation that tracks and stores the id it tracked holds the worktree's
    /// lease from the track to the commit (a step's start and end, a revert, an unrevert, a restore's
    /// capture, recovery). The lease is read first, after that moment: held, the worktree is `Busy` (gc
    /// leaves it for its next run); free, no operation is between a track before that moment and its
    /// commit, so the ids it returned are stored by the time the list is read, and one that takes the
    /// lease after the read returns its ids after that moment. Only read, never taken: gc never makes an
    /// operation busy. A holder on this host that is gone counts as free (it will never commit); any
    /// other holder, also one whose lease expired, as holding (it may still commit).
    async fn keep_of(&self, directory: &str) -> Result<(Vec<SnapshotId>, u64)> {
        let from = self.now();
        if let Some(lease) = self
            .repo
            .lease(&LeaseKey::Worktree(directory.to_owned()))
            .await?
        {
            let gone = lease.holder.process.same_host(&self.host.this_process())
                && !self.host.is_alive(&lease.holder.process);
            if !gone {
                return Err(Error::lease_busy(&lease.key, &lease.holder, None));
            }
        }
        let keep = self
            .repo
            .referenced_snapshots(Some(directory.to_owned()))
            .await?;
        Ok((keep.into_iter().collect(), from))
    }

    /// Deletes the outbox's events but the newest `outbox_kept`, and those past `outbox_kept_bytes` of text
    /// counted from the newest back (the newest always stays, so positions go on after it). Returns how
    /// many were deleted. `gc` does it, and a server once an hour.
    pub async fn cut_outbox(&self) -> Result<u64> {
        let last = self.repo.last_event_seq().await?;
        let by_count = last.checked_sub(self.config.outbox_kept.max(1));
        let by_bytes = self.repo.outbox_over(self.config.outbox_kept_bytes).await?;
        // The adapter never deletes the newest event; clamping here keeps the count to what is deleted.
        let by_bytes = by_bytes.map(|seq| seq.min(last.saturating_sub(1)));
        let Some(through) = by_count.max(by_bytes) else {
            return Ok(0);
        };
        let first = match self.repo.events_after(0, 1).await?.first() {
            Some(oldest) => oldest.seq,
            None => return Ok(0),
        };
        if first > through {
            return Ok(0);
        }
        self.repo
            .commit(Transaction {
                guards: Vec::new(),
                changes: vec![Change::DeleteEventsThrough { seq: through }],
                events: Vec::new(),
            })
            .await?;
        Ok(through - first + 1)
    }
}

/// `Busy` when a step is open in one of `sessions` (those of a worktree and of worktrees inside or around
/// it): a restore then would be recorded as that step's change.
fn refuse_open_steps(sessions: &[crate::model::Session]) -> Result<()> {
    for session in sessions {
        if let Some(step) = &session.step {
            return Err(Error::Busy {
                session_id: Some(session.id.clone()),
                message: format!(
                    "Worktree is busy: a step is open in session {} of {} (message {}, owned by {}); try again when it has finished",
                    session.id, session.directory, step.message_id, step.holder
                ),
            });
        }
    }
    Ok(())
}
