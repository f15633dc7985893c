//! Taking, renewing and releasing leases by the rules of SPEC section 1, and the busy checks that come
//! before every operation on a session or a worktree.

use crate::error::{Error, Result};
use crate::model::{
    HolderKind, Lease, LeaseKey, LeaseTake, LeaseToken, Replacing, Session, SessionId,
    may_take_over,
};
use crate::ports::Guard;

use super::{Rewind, new_token};

/// A lease this process holds; released explicitly (leases outlive a crash on purpose, so recovery can
/// find them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldLease {
    /// What is held.
    pub key: LeaseKey,
    /// With which token.
    pub token: LeaseToken,
}

impl HeldLease {
    /// What holding `lease` is.
    pub(super) fn of(lease: &Lease) -> HeldLease {
        HeldLease {
            key: lease.key.clone(),
            token: lease.token.clone(),
        }
    }

    /// The guard that makes a transaction commit only while this lease is still held.
    pub fn guard(&self) -> Guard {
        Guard::LeaseHeld {
            key: self.key.clone(),
            token: self.token.clone(),
        }
    }
}

impl Rewind {
    /// True when the lease's owner is gone or its lease may be taken over (SPEC section 1). An operation's
    /// lease is a process's (`operation_holder`), so one of this process, or of another live process on
    /// this host, never is, however long it runs.
    pub(super) fn is_abandoned(&self, lease: &Lease) -> bool {
        let this = self.host.this_process();
        may_take_over(lease, self.now(), &this, |process| {
            self.host.is_alive(process)
        })
    }

    /// `is_abandoned` for the lease of a session's open step. To a server, an HTTP client's step (a lease a
    /// server holds) is the client's, whichever server it began through (README: any server of the
    /// database takes its parts and keeps it alive): it is abandoned once its client has been silent past
    /// the step timeout (its lease expired), also when the server process it began through has ended
    /// (multi-server fuzz: a client at work through another server lost its step when the first stopped,
    /// as a rolling restart would lose every one). To the command line, such a step of a server process
    /// that is gone stays abandoned at once: no client of its own keeps it, and a `rewind undo` after a
    /// server's crash is not held up for the step timeout.
    pub(super) fn step_lease_is_abandoned(&self, lease: &Lease) -> bool {
        if lease.holder.kind == HolderKind::Server && self.speaks_for(&lease.holder) {
            return self.now() >= lease.expires_at;
        }
        self.is_abandoned(lease)
    }

    /// True when the session has an open step whose owner is gone or whose lease may be taken over (or
    /// was lost: no lease at all): the step the next operation aborts (SPEC section 4). False when no step
    /// is open. A lease of another token (the step's owner finishing it under a token of its own, say) is
    /// judged by its own holder: while that one is alive, the step is being closed, not abandoned (review:
    /// taken for abandoned, another session's request in the same worktree tried to abort it, found the
    /// lease held, and failed with 409).
    pub async fn step_is_abandoned(&self, session: &Session) -> Result<bool> {
        if session.step.is_none() {
            return Ok(false);
        }
        Ok(
            match self
                .repo
                .lease(&LeaseKey::Session(session.id.clone()))
                .await?
            {
                Some(lease) => self.step_lease_is_abandoned(&lease),
                None => true,
            },
        )
    }

    /// `Busy` while an operation (a revert, unrevert or cleanup) holds `session`'s lease (one whose holder
    /// is gone is taken over first): for a caller about to answer from the session as it reads it now, such
    /// as "nothing to redo" while an undo is about to store its revert.
    pub async fn refuse_if_operating(&self, session: &Session) -> Result<()> {
        self.refuse_while_operating(session).await.map(|_| ())
    }

    /// `Busy` (409) while an operation (a revert, unrevert or cleanup) holds the session's lease: what it is
    /// about to store would hide, undo or ignore what this request does (a message recorded during a revert
    /// would land in its hidden range; an unrevert or commit would find no revert yet and answer that
    /// nothing was done). The lease of the session's own open step is not such an operation.
    ///
    /// Otherwise the guard for the request's transaction: an operation that takes the lease between this
    /// check and that commit makes the commit fail with `Busy` too, where it would otherwise have
    /// written behind the operation's back.
    pub(super) async fn refuse_while_operating(&self, session: &Session) -> Result<Guard> {
        let key = LeaseKey::Session(session.id.clone());
        let seen = match self.repo.lease(&key).await? {
            Some(current)
                if session
                    .step
                    .as_ref()
                    .is_some_and(|step| step.token == current.token) =>
            {
                Some(current.token)
            }
            Some(current) if self.is_abandoned(&current) => {
                // An operation that stalled past its lease (or died) without being taken over would still
                // store its result, over this request's write: it is taken over (its intent finished) and
                // the lease released, so its own commit fails on its lease guard.
                let taken = self
                    .acquire(
                        key.clone(),
                        &new_token(),
                        self.config.operation_lease_ms,
                        Some(&session.id),
                    )
                    .await?;
                self.release(&taken).await;
                None
            }
            Some(current) => return Err(busy_error(&current, Some(&session.id))),
            None => None,
        };
        Ok(Guard::LeaseNotTaken { key, seen })
    }

    /// Takes the lease on `key` with `token` for `ttl_ms`, taking it over when its holder is gone; `Busy`
    /// (naming the holder) otherwise.
    ///
    /// A holder that is gone may have died in the middle of a revert or unrevert, after the caller's
    /// recovery ran: its intent record is finished first (SPEC 8: before any operation), as recovery does,
    /// and the lease, released by that, is then taken as a free one. An intent that cannot be finished is
    /// the error.
    pub(super) async fn acquire(
        &self,
        key: LeaseKey,
        token: &LeaseToken,
        ttl_ms: u64,
        session: Option<&SessionId>,
    ) -> Result<HeldLease> {
        let holder = self.operation_holder();
        self.acquire_with(
            key,
            (token, holder),
            ttl_ms,
            session,
            GoneHolder::FinishItsIntent,
        )
        .await
    }

    /// `acquire` for the session's lease of a step of its own, with `token`, for the step timeout: held
    /// by this process as its configuration says (`Server` for the HTTP server: the step belongs to a
    /// client, and expires after the step timeout of silence).
    pub(super) async fn acquire_step(
        &self,
        session: &SessionId,
        token: &LeaseToken,
    ) -> Result<HeldLease> {
        let key = LeaseKey::Session(session.clone());
        let (holder, ttl) = (self.holder(), self.config.step_timeout_ms);
        self.acquire_with(
            key,
            (token, holder),
            ttl,
            Some(session),
            GoneHolder::FinishItsIntent,
        )
        .await
    }

    /// `acquire` for recovery itself, which is finishing the intent: a holder that is gone is taken over
    /// as it is.
    pub(super) async fn acquire_recovering(
        &self,
        key: LeaseKey,
        token: &LeaseToken,
        ttl_ms: u64,
        session: Option<&SessionId>,
    ) -> Result<HeldLease> {
        let holder = self.operation_holder();
        self.acquire_with(key, (token, holder), ttl_ms, session, GoneHolder::TakeOver)
            .await
    }

    async fn acquire_with(
        &self,
        key: LeaseKey,
        (token, holder): (&LeaseToken, crate::model::Holder),
        ttl_ms: u64,
        session: Option<&SessionId>,
        gone: GoneHolder,
    ) -> Result<HeldLease> {
        let mut replacing = None;
        let mut attempts = 0;
        loop {
            // After a recovery (a track and a restore, which can take a while) the lease counts from now.
            let lease = Lease {
                holder: holder.clone(),
                ..self.new_lease(key.clone(), token, ttl_ms)
            };
            let current = match self
                .take_or_note(&lease, replacing.clone(), Return::Release)
                .await?
            {
                LeaseTake::Taken => return Ok(HeldLease::of(&lease)),
                LeaseTake::Held(current) => current,
            };
            attempts += 1;
            if !self.is_abandoned(&current) || attempts > TAKEOVER_ATTEMPTS {
                return Err(busy_error(&current, session));
            }
            let recovered = if gone == GoneHolder::FinishItsIntent {
                self.finish_intents_of(&current, session).await?
            } else {
                false
            };
            if recovered {
                // Recovery released the holder's leases.
            } else if current.key == key {
                // As judged: a holder that renewed it since is alive, and keeps it.
                replacing = Some(Replacing::seen(&current));
            } else if gone == GoneHolder::TakeOver
                && self
                    .repo
                    .intents()
                    .await?
                    .iter()
                    .any(|intent| super::recovery::is_intents(intent, &current.token))
            {
                // Recovery itself does not finish another interrupted operation on a nested worktree:
                // the next operation there (or on this worktree) recovers it first.
                return Err(busy_error(&current, session));
            } else {
                // A gone holder's lease on a worktree inside or around this one, with no intent left to
                // finish: taken over and dropped, as its own key's next taker would take it over.
                self.drop_gone_lease(&current).await?;
            }
        }
    }

    /// Finishes the intent records of `holder`'s token (it is gone): true when one was finished, which
    /// released its leases; `Busy` when another operation holds what recovery needs.
    async fn finish_intents_of(&self, holder: &Lease, session: Option<&SessionId>) -> Result<bool> {
        let mut recovered = false;
        for intent in self.repo.intents().await? {
            if super::recovery::is_intents(&intent, &holder.token) {
                // Recovery takes its own leases (`acquire_recovering`) and releases them when done.
                match Box::pin(self.recover_intent(&intent)).await? {
                    super::recovery::Outcome::Recovered | super::recovery::Outcome::Gone => {
                        recovered = true;
                    }
                    // Another operation holds the session or the worktree (and finishes the intent before
                    // it runs): the holder's work is not done, so its lease is not taken.
                    super::recovery::Outcome::InProgress => {
                        return Err(Error::Busy {
                            session_id: session.cloned(),
                            message: format!(
                                "an interrupted operation of {} on this session waits to be finished while \
                                 another operation holds its worktree; try again when that has finished",
                                holder.holder
                            ),
                        });
                    }
                }
            }
        }
        Ok(recovered)
    }

    /// Drops the lease `gone` (its holder is gone): removed only while that token still holds it, so a
    /// taker that got there first keeps its own. Not a take, which a lease around or inside it (another
    /// gone holder's) would refuse.
    async fn drop_gone_lease(&self, gone: &Lease) -> Result<()> {
        self.repo.release_lease(&gone.key, &gone.token).await
    }

    /// Takes the session lease of its open `step`, to close the step: the step's lease when this process
    /// holds it (its owner finishing it) or none is held; any lease only when its holder is gone (SPEC
    /// section 1). The caller has judged the step its own or abandoned from what it read, but another
    /// operation may have taken the session since; its live lease is `Busy`. The lease is taken with a new
    /// token, never the step's: two closers that both read the step's lease (a finish and an abort of the
    /// same process, say) cannot both hold it, since only the first replaces the step's token. Also returns
    /// the lease replaced, if any: it goes back (`hand_back_step_lease`) when the step stays open.
    ///
    /// The step's own lease, held by this process, is taken only `as_owner`. A closer that found the step
    /// abandoned (`prepare_worktree`) may have seen the lease of its owner's finish in progress, given back
    /// to the step since: that step is alive, and `Busy` (black-box: a revert of another session in the
    /// same server aborted a step whose finish it had made wait).
    pub(super) async fn take_step_lease(
        &self,
        session: &SessionId,
        step: &crate::model::OpenStep,
        as_owner: bool,
    ) -> Result<(HeldLease, Option<Lease>)> {
        let lease = self.new_lease(
            LeaseKey::Session(session.clone()),
            &new_token(),
            self.config.operation_lease_ms,
        );
        let replaced = match self.repo.lease(&lease.key).await? {
            None => None,
            Some(current)
                if (as_owner
                    && current.token == step.token
                    && self.speaks_for(&current.holder))
                    || self.is_abandoned(&current) =>
            {
                Some(current)
            }
            Some(current) => return Err(busy_error(&current, Some(session))),
        };
        // Should the take apply with its answer lost, the step gets its lease back.
        let back = replaced.clone().map_or(Return::Release, Return::HandBack);
        match self
            .take_or_note(&lease, replaced.as_ref().map(Replacing::seen), back)
            .await?
        {
            LeaseTake::Taken => Ok((HeldLease::of(&lease), replaced)),
            LeaseTake::Held(current) => Err(busy_error(&current, Some(session))),
        }
    }

    /// Gives back `held` (taken by `take_step_lease` to close a step that stays open: its closing failed,
    /// a revert holding the worktree, say) to the step's own lease `replaced`, as it was; released when
    /// there was none, or another token holds the key now. Released instead, the step's lease would be
    /// gone, and the step taken for abandoned by the next operation on the worktree (black-box: a revert
    /// of another session that made a step's finish wait aborted the step, and the finish, tried again,
    /// got 400). One the database fails is given back once it answers again, not released meanwhile.
    pub(super) async fn hand_back_step_lease(&self, held: &HeldLease, replaced: Option<Lease>) {
        match replaced {
            Some(replaced) => self.hand_back(held, &replaced).await,
            None => self.release(held).await,
        }
    }

    /// Puts `to` back in the place of `held`: the lease goes back to the operation or step it was taken
    /// from. One the database fails to write is noted and written again before this process's next
    /// recovery or take (`return_unreturned`).
    pub(super) async fn hand_back(&self, held: &HeldLease, to: &Lease) {
        if self
            .repo
            .take_lease(to, Some(Replacing::token(held.token.clone())))
            .await
            .is_err()
        {
            self.note_unreturned(held, Return::HandBack(to.clone()));
        }
    }

    /// A lease on `key` for an operation of this process with `token`, for `ttl_ms` from now.
    pub(super) fn new_lease(&self, key: LeaseKey, token: &LeaseToken, ttl_ms: u64) -> Lease {
        Lease {
            key,
            token: token.clone(),
            holder: self.operation_holder(),
            expires_at: self.now().saturating_add(ttl_ms),
        }
    }

    /// Who holds the leases and intents of this process's operations (revert, unrevert, cleanup, a step's
    /// beginning and end, recovery, gc): this process, as a process, also in a server. SPEC 1 never takes
    /// a live process's lease over on its host, even expired (it may be suspended, not dead); only an HTTP
    /// step, whose owner is a client, expires on a live server (`holder`, `acquire_step`). Black-box: a
    /// server's revert stopped (SIGSTOP) past its lease was taken over by another server on the host,
    /// whose recovery then waited on its store and refused unrelated requests.
    pub(super) fn operation_holder(&self) -> crate::model::Holder {
        crate::model::Holder {
            kind: crate::model::HolderKind::Process,
            process: self.host.this_process(),
        }
    }

    /// Takes the session's lease and the worktree's: both in one round trip when both are free, else the
    /// session's and then the worktree's (taking over one whose holder is gone), releasing the first when
    /// the second is busy.
    pub(super) async fn acquire_session_and_worktree(
        &self,
        session: &SessionId,
        directory: &str,
        token: &LeaseToken,
    ) -> Result<(HeldLease, HeldLease)> {
        let ttl = self.config.operation_lease_ms;
        let both = [
            self.new_lease(LeaseKey::Session(session.clone()), token, ttl),
            self.new_lease(LeaseKey::Worktree(directory.to_owned()), token, ttl),
        ];
        self.return_unreturned().await;
        let taken = match self.repo.take_leases(&both).await {
            Ok(taken) => taken,
            // Taken with the answer lost, they would stay this live process's: released once it answers.
            Err(error) => {
                for lease in &both {
                    self.note_unreturned(&HeldLease::of(lease), Return::Release);
                }
                return Err(error);
            }
        };
        if taken.iter().all(|take| *take == LeaseTake::Taken) {
            return Ok((HeldLease::of(&both[0]), HeldLease::of(&both[1])));
        }
        let session_lease = self
            .acquire(
                LeaseKey::Session(session.clone()),
                token,
                ttl,
                Some(session),
            )
            .await?;
        match self
            .acquire(
                LeaseKey::Worktree(directory.to_owned()),
                token,
                ttl,
                Some(session),
            )
            .await
        {
            Ok(worktree_lease) => Ok((session_lease, worktree_lease)),
            Err(error) => {
                self.release(&session_lease).await;
                Err(error)
            }
        }
    }

    /// Extends a held lease; `LeaseLost` when it was taken from us.
    pub(super) async fn renew(&self, lease: &HeldLease, ttl_ms: u64) -> Result<()> {
        let expires = self.now().saturating_add(ttl_ms);
        if self
            .repo
            .renew_lease(&lease.key, &lease.token, expires)
            .await?
        {
            Ok(())
        } else {
            Err(Error::LeaseLost(format!(
                "the lease on {:?} was taken over by another process; this operation stopped",
                lease.key
            )))
        }
    }

    /// Releases a lease. One the database fails to release is noted and released again before this
    /// process's next recovery or take (`return_unreturned`): held by a live process, it would otherwise
    /// never be taken over on this host (SPEC 1), and a server kept it for its whole life.
    pub(super) async fn release(&self, lease: &HeldLease) {
        if self
            .repo
            .release_lease(&lease.key, &lease.token)
            .await
            .is_err()
        {
            self.note_unreturned(lease, Return::Release);
        }
    }

    /// `MessageRepo::take_lease`, noting what becomes of `lease` (`back`) should the database fail the
    /// call: a take can apply with its answer lost (a connection ended during the commit), and the lease
    /// would then stay this live process's, unknown to it.
    pub(super) async fn take_or_note(
        &self,
        lease: &Lease,
        replacing: Option<Replacing>,
        back: Return,
    ) -> Result<LeaseTake> {
        self.return_unreturned().await;
        let taken = self.repo.take_lease(lease, replacing).await;
        if taken.is_err() {
            self.note_unreturned(&HeldLease::of(lease), back);
        }
        taken
    }

    /// Notes that `held` is to be given back as `to` though the database failed to write it.
    pub(super) fn note_unreturned(&self, held: &HeldLease, to: Return) {
        self.unreturned().push(Unreturned {
            key: held.key.clone(),
            token: held.token.clone(),
            to,
        });
    }

    fn unreturned(&self) -> std::sync::MutexGuard<'_, Vec<Unreturned>> {
        self.unreturned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes again what the releases and hand-backs noted by `note_unreturned` were to write; those the
    /// database fails again stay noted. Each acts only on a lease still held by its own token (a release
    /// deletes only that; a hand-back is made only while the key is read so, never into a key none holds:
    /// a step's lease put back after its step was closed would refuse the session until it expired), so
    /// one another process took over since is left to it.
    ///
    /// The first that fails again ends the pass, the rest left noted untried: the database is likely still
    /// away, and each try would wait out its timeout (30 s for a PostgreSQL connection) before the caller's
    /// own call.
    pub(super) async fn return_unreturned(&self) {
        let mut noted = std::mem::take(&mut *self.unreturned()).into_iter();
        while let Some(unreturned) = noted.next() {
            if self.give_back(&unreturned).await.is_err() {
                let mut left = self.unreturned();
                left.push(unreturned);
                left.extend(noted);
                return;
            }
        }
    }

    async fn give_back(&self, unreturned: &Unreturned) -> Result<()> {
        let Unreturned { key, token, to } = unreturned;
        let to = match to {
            Return::Release => None,
            Return::HandBack(to) => Some(to),
            // Decided now: handed back while the step is still open, else released.
            Return::StepCloser {
                session,
                step,
                replaced,
            } => {
                let open = self
                    .repo
                    .session(session)
                    .await?
                    .and_then(|now| now.step)
                    .is_some_and(|open| &open.token == step);
                replaced.as_ref().filter(|_| open)
            }
        };
        match to {
            None => self.repo.release_lease(key, token).await,
            Some(to) => match self.repo.lease(key).await? {
                Some(current) if &current.token == token => self
                    .repo
                    .take_lease(to, Some(Replacing::token(token.clone())))
                    .await
                    .map(|_| ()),
                _ => Ok(()),
            },
        }
    }
}

/// A lease this process let go of, or may hold unknown to it (a take whose answer was lost), that the
/// database did not let it write so (PostgreSQL down, a SQLite file locked past its timeout): its key and
/// token, and what it is to become. The same process then runs, so SPEC 1 never lets another take it over
/// on this host, even expired (PostgreSQL outage fuzz: a server's revert whose result and rollback met the
/// outage kept its worktree's lease, and the worktree answered 409 until the server was restarted).
#[derive(Clone, Debug)]
pub(super) struct Unreturned {
    key: LeaseKey,
    token: LeaseToken,
    to: Return,
}

/// What a noted lease becomes (`Unreturned`).
#[derive(Clone, Debug)]
pub(super) enum Return {
    /// Released.
    Release,
    /// Replaced by this lease (the operation's or step's it was taken from).
    HandBack(Lease),
    /// A step closer's lease when whether it closed the step is not known (the session could not be read
    /// after the closing failed): handed back to the step's lease `replaced` while `session` still has the
    /// step `step` open, else released.
    StepCloser {
        session: SessionId,
        step: LeaseToken,
        replaced: Option<Lease>,
    },
}

/// How many gone holders one take may take over or clear (its own key's, then those of worktrees inside
/// or around it) before it answers `Busy`.
const TAKEOVER_ATTEMPTS: u32 = 8;

/// `Busy`, naming the lease `current` that refused a take: the one asked for, or the lease of a worktree
/// inside or around the one asked for.
fn busy_error(current: &Lease, session: Option<&SessionId>) -> Error {
    Error::lease_busy(&current.key, &current.holder, session)
}

/// What `acquire_with` does with a lease whose holder is gone.
#[derive(Clone, Copy, PartialEq, Eq)]
enum GoneHolder {
    /// Finishes the holder's intent record first (SPEC 8), then takes the lease as a free one.
    FinishItsIntent,
    /// Takes the lease over as it is: the caller is recovery, finishing that intent itself.
    TakeOver,
}
