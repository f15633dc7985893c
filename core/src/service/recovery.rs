//! Recovery (SPEC section 8): an intent record whose owner is gone is finished by putting its files back
//! to their pre-operation content, so after a crash at any instant the worktree and the session are wholly
//! before or wholly after the operation.

use crate::error::{Error, Result};
use crate::model::{
    IntentOperation, IntentRecord, Lease, LeaseKey, LeaseTake, LeaseToken, Replacing,
    worktrees_overlap,
};

use super::{RecoveryFailure, RecoveryReport, Rewind, new_token};

/// What became of one intent record.
pub(super) enum Outcome {
    Recovered,
    InProgress,
    /// Finished by someone else, or its session is gone: nothing to do.
    Gone,
}

impl Rewind {
    /// Finishes every intent record whose owner is gone (every worktree). Every command-line invocation and
    /// every server start runs this. An intent that cannot be finished (its worktree was removed, a file
    /// cannot be read) is reported in `failed` and the others are still recovered. Every operation on its
    /// worktree, and those that take the lease of a worktree inside or around it, are refused: each runs
    /// the recovery again and fails with the reason.
    pub async fn recover(&self) -> Result<RecoveryReport> {
        // A process that starts has no intent of its own yet.
        self.recover_others(&std::collections::HashSet::new()).await
    }

    /// `recover` for a process that runs it again and again (a server, every few seconds): the intents of
    /// this process's running operations are left to them (alive by definition, whatever their leases
    /// say), and so are those in `skip` (ones the caller tries again later: each try captures the
    /// worktree; operations on their worktree still try them at once). An intent of this process whose
    /// operation has ended (its rollback failed as well) is finished as any other: black-box, a server's
    /// revert that failed on a full disk stayed half done, the database saying otherwise, until the next
    /// request on that worktree.
    pub async fn recover_others(
        &self,
        skip: &std::collections::HashSet<LeaseToken>,
    ) -> Result<RecoveryReport> {
        self.return_unreturned().await;
        let mut report = RecoveryReport::default();
        let this_process = self.host.this_process();
        for intent in self.repo.intents().await? {
            if skip.contains(&intent.token)
                || (intent.holder.process == this_process
                    && super::revert::is_running(&intent.token))
            {
                continue;
            }
            self.recover_into(&intent, &mut report).await;
        }
        Ok(report)
    }

    /// Finishes `intent`, adding its outcome, or why it could not be finished, to `report`.
    async fn recover_into(&self, intent: &IntentRecord, report: &mut RecoveryReport) {
        match self.recover_intent(intent).await {
            Ok(outcome) => report.add(intent, outcome),
            Err(error) => report.failed.push(RecoveryFailure {
                token: intent.token.clone(),
                directory: intent.directory.clone(),
                error: error.to_string(),
            }),
        }
    }

    /// Finishes the intent records of one worktree, and of the worktrees inside it or around it (an
    /// interrupted revert of either wrote files of both), before an operation on it. The first of this
    /// worktree's own that cannot be finished is the error; one of a worktree inside or around it is
    /// reported (`failed`) and stays to be finished: the operations that take this worktree's lease meet
    /// its holder's lease and are refused with the reason, while recording messages goes on.
    pub(super) async fn recover_worktree(&self, directory: &str) -> Result<RecoveryReport> {
        self.return_unreturned().await;
        let mut report = RecoveryReport::default();
        for intent in self.repo.intents().await? {
            if intent.directory == directory {
                let outcome = self
                    .recover_intent(&intent)
                    .await
                    .map_err(|error| unrecovered(&intent, error))?;
                report.add(&intent, outcome);
            } else if worktrees_overlap(&intent.directory, directory) {
                self.recover_into(&intent, &mut report).await;
            }
        }
        Ok(report)
    }

    /// Finishes one intent record when its owner is gone.
    pub(super) async fn recover_intent(&self, intent: &IntentRecord) -> Result<Outcome> {
        // What it was writing is not known: nothing is put back, and its worktree stays refused.
        if let Some(reason) = &intent.unreadable {
            return Err(Error::Backend(
                format!(
                    "its intent record {} cannot be read ({reason}), so the files it may have written are \
                     not known and are left as they are; check them, then repair or delete that row of the \
                     database's `intent` table (token {})",
                    intent.token, intent.token
                )
                .into(),
            ));
        }
        let session_key = LeaseKey::Session(intent.session_id.clone());
        // The owner is gone when the session's lease is absent, or held by a process that is gone or
        // whose lease may be taken over. A live holder (the owner or an operation already recovering it)
        // is left alone.
        let current = self.repo.lease(&session_key).await?;
        if let Some(lease) = &current
            && !self.is_abandoned(lease)
        {
            return Ok(Outcome::InProgress);
        }
        // No lease: its operation may have stored its result since the intents were read (the result's
        // transaction deletes the intent and releases the leases together). Taking the session's lease
        // then would hold a live session up for the rest of this recovery: its next operation was refused
        // as busy (black-box: a `rewind status` elsewhere made a server's revert 409).
        if current.is_none()
            && !self
                .repo
                .intents()
                .await?
                .iter()
                .any(|other| other.token == intent.token)
        {
            return Ok(Outcome::Gone);
        }
        let token = new_token();
        let lease = self.new_lease(session_key, &token, self.config.operation_lease_ms);
        // Should the take apply with its answer lost, the lease goes back to the operation it was taken
        // from.
        let back = current.clone().map_or(
            super::leases::Return::Release,
            super::leases::Return::HandBack,
        );
        if let LeaseTake::Held(_) = self
            .take_or_note(&lease, current.as_ref().map(Replacing::seen), back)
            .await?
        {
            return Ok(Outcome::InProgress);
        }
        let session_lease = super::HeldLease::of(&lease);
        // Given up (the worktree is busy, or finishing failed): the session's lease goes back to the gone
        // holder (or to the intent's holder, expired, when none was there), not free, so no other
        // operation takes the session while the intent waits: an operation that finds that lease tries
        // this recovery again first (`acquire`).
        // The operation's own lease is not handed back under its own token (`interrupted`): should the
        // operation still run (stalled past its lease, on another host), it would hold it again.
        let gone = match current {
            Some(other) if !is_intents(intent, &other.token) => other,
            _ => interrupted(intent, lease.key.clone()),
        };
        let worktree_lease = match self
            .acquire_recovering(
                LeaseKey::Worktree(intent.directory.clone()),
                &token,
                self.config.operation_lease_ms,
                Some(&intent.session_id),
            )
            .await
        {
            Ok(lease) => lease,
            // Another operation holds the worktree: it runs recovery for it first.
            Err(Error::Busy { .. }) => {
                self.hand_back(&session_lease, &gone).await;
                return Ok(Outcome::InProgress);
            }
            Err(error) => {
                self.hand_back(&session_lease, &gone).await;
                return Err(error);
            }
        };
        let result = self
            .finish_held_intent(intent, [&session_lease, &worktree_lease])
            .await;
        match &result {
            Ok(_) => {
                self.release(&worktree_lease).await;
                self.release(&session_lease).await;
            }
            // The worktree's lease goes back to the interrupted operation as well (expired): whatever
            // takes it next, a step's snapshot included, tries this recovery first.
            Err(_) => {
                let to = interrupted(intent, worktree_lease.key.clone());
                self.hand_back(&worktree_lease, &to).await;
                self.hand_back(&session_lease, &gone).await;
            }
        }
        result
    }

    /// Finishes an intent record once both leases are held. What was read before them is read again: the
    /// owner (or another recovery) may have finished the intent in between, and then its files are as the
    /// session says and must not be put back (a user's edit since would be lost).
    async fn finish_held_intent(
        &self,
        intent: &IntentRecord,
        leases: [&super::HeldLease; 2],
    ) -> Result<Outcome> {
        let pending = self.repo.intents().await?;
        if !pending.iter().any(|i| i.token == intent.token) {
            return Ok(Outcome::Gone);
        }
        // Deleting a session deletes its intents, so a session that is gone has none left to finish.
        let Some(session) = self.repo.session(&intent.session_id).await? else {
            return Ok(Outcome::Gone);
        };
        let why = format!(
            "{} by {} was interrupted",
            article(intent.operation),
            intent.holder
        );
        self.finish_intent(&session, intent, &why, leases).await?;
        Ok(Outcome::Recovered)
    }
}

/// The operation with its article: `a revert`, `an unrevert`.
fn article(operation: IntentOperation) -> String {
    match operation {
        IntentOperation::Revert => format!("a {operation}"),
        IntentOperation::Unrevert => format!("an {operation}"),
    }
}

impl RecoveryReport {
    fn add(&mut self, intent: &IntentRecord, outcome: Outcome) {
        match outcome {
            Outcome::Recovered => self.recovered.push(intent.token.clone()),
            Outcome::InProgress => self.in_progress.push(intent.token.clone()),
            Outcome::Gone => {}
        }
    }
}

/// The lease on `key` of the operation `intent` records, expired: what a recovery that cannot finish
/// leaves where none of the operation's own was left. Any taker may take it over (after finishing the
/// intent): held as a server holds an HTTP step, so an operation of a process that still runs but has
/// ended (a server's, whose rollback failed) does not block the worktree for the process's life. Its
/// token is the intent's marked interrupted (`LeaseToken::interrupted`), never the operation's own: an
/// operation that stalled past its leases, whose recovery by another host failed after it had put files
/// back, would otherwise find its leases held by its token again, and store its result over files put
/// back (review). Its guards and renewals fail instead, and its release leaves this lease in place.
pub(super) fn interrupted(intent: &IntentRecord, key: LeaseKey) -> Lease {
    Lease {
        key,
        token: intent.token.interrupted(),
        holder: crate::model::Holder {
            kind: crate::model::HolderKind::Server,
            process: intent.holder.process.clone(),
        },
        expires_at: 0,
    }
}

/// Whether the lease token `token` is the operation's of `intent`: its own, or the one `interrupted`
/// leaves for it.
pub(super) fn is_intents(intent: &IntentRecord, token: &LeaseToken) -> bool {
    intent.token == *token || intent.token.interrupted() == *token
}

/// Why an operation on a worktree is refused when the interrupted operation `intent` there cannot be put
/// back (a file that cannot be written, say): the worktree stays refused until it can (SPEC 8), so it is
/// busy, with the cause, not an internal fault. A refusal of the recovery itself (busy, a lease lost) is
/// kept as it is, and so is the database being away (down, or a connection it ended): said as such, the
/// client waits for the database, not for the worktree (stop 67's review).
fn unrecovered(intent: &IntentRecord, error: Error) -> Error {
    match error {
        Error::Busy { .. } | Error::LeaseLost(_) | Error::Stale { .. } => error,
        Error::Storage { fault, .. } if fault.is_outage() => error,
        other => Error::Busy {
            session_id: Some(intent.session_id.clone()),
            message: format!(
                "Worktree is busy: {}: an interrupted {} of session {} could not be put back: {other}; \
                 operations on this worktree are refused until it can be (fix the cause, then try again)",
                intent.directory,
                match intent.operation {
                    _ if intent.unreadable.is_some() => "operation",
                    IntentOperation::Revert => "revert",
                    IntentOperation::Unrevert => "unrevert",
                },
                intent.session_id
            ),
        },
    }
}
