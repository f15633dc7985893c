//! An in-memory `MessageRepo`: the reference implementation of the repo contract, for the services' tests.
//!
//! Everything lives in one state struct behind a `std::sync::Mutex`. A commit applies its changes to a clone
//! of the rows and swaps the clone in only when every change succeeded, so a failed transaction leaves
//! nothing behind, exactly as a database rollback would.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::model::{
    Capture, EventId, EventPayload, FileDiff, IntentRecord, Lease, LeaseKey, LeaseTake, LeaseToken,
    Message, MessageHead, MessageId, MessageWithParts, Part, PartBody, PartId, Replacing,
    RevertHistoryEntry, Session, SessionFields, SessionId, SnapshotId, StoredEvent, Warning,
    worktrees_overlap,
};
use crate::ports::{Change, Guard, MessageRepo, Transaction};
use crate::revert::{RevertPoint, is_hidden};

/// A message with its parts, keyed by id so they come back in id order.
#[derive(Clone, Debug)]
struct StoredMessage {
    info: Message,
    parts: BTreeMap<PartId, Part>,
}

/// A session with every row that belongs to it, so deleting the session drops them all.
#[derive(Clone, Debug)]
struct StoredSession {
    info: Session,
    messages: BTreeMap<MessageId, StoredMessage>,
    diff: Vec<FileDiff>,
    warnings: Vec<Warning>,
    history: Vec<RevertHistoryEntry>,
}

/// The rows a transaction may change; cloned by every commit so that a failure can be thrown away.
#[derive(Clone, Debug, Default)]
struct Rows {
    sessions: BTreeMap<SessionId, StoredSession>,
    intents: BTreeMap<LeaseToken, IntentRecord>,
    captures: Vec<Capture>,
}

#[derive(Debug, Default)]
struct State {
    rows: Rows,
    // Leases and the outbox are outside `Rows`: transactions only read leases (guards) and only append to
    // the outbox, so neither needs to be cloned per commit.
    leases: BTreeMap<LeaseKey, Lease>,
    outbox: Vec<StoredEvent>,
    fail_next_commit: bool,
    fail_next_result_commit: bool,
    /// Armed by `fail_next_intent_delete`.
    fail_next_intent_delete: bool,
    /// Armed by `finish_intents_before_next_intent_delete`.
    finish_intents_before_next_intent_delete: bool,
    /// Armed by `fail_next_capture`.
    fail_next_capture: bool,
    /// The storage fault a hook's next failure is (`fail_as`), instead of a backend fault.
    hook_faults: HashMap<&'static str, crate::error::StorageFault>,
    /// Armed by `fail_next_step_start`.
    fail_next_step_start: bool,
    /// Armed by `fail_next_message_put`.
    fail_next_message_put: bool,
    /// Armed by `unreachable_from_next_result_commit`.
    unreachable_from_next_result_commit: bool,
    /// Set by that hook or `go_unreachable`, cleared by `reachable_again`: every write, every lease call and
    /// the reads of sessions, intents and captures fail.
    unreachable: bool,
    /// Armed by `fail_next_intent_check`.
    fail_next_intent_check: bool,
    /// Armed by `fail_next_captures_read`.
    fail_next_captures_read: bool,
    /// Armed by `lose_next_take_answer`.
    lose_next_take_answer: bool,
    /// Armed by `lose_next_result_answer`.
    lose_next_result_answer: bool,
    /// Armed by `land_next_result_late`.
    land_next_result_late: bool,
    /// The result commit that hook held back, made at the start of the next `commit`.
    landing_late: Option<Transaction>,
}

/// An in-memory `MessageRepo` (see the module doc). Cheap to create: give every test its own.
#[derive(Debug, Default)]
pub struct MemRepo {
    state: Mutex<State>,
    /// Armed by `pause_next_lease_read` and `pause_next_lease_take`.
    pause: Mutex<Option<(PausedCall, Pause)>>,
}

/// Which call a race hook pauses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PausedCall {
    SessionRead,
    LeaseRead,
    LeaseTake,
    Commit,
    ResultCommit,
}

/// The two ends of a paused call: signalled when it is reached, resumed when told.
#[derive(Debug)]
struct Pause {
    reached: futures::channel::oneshot::Sender<()>,
    resume: futures::channel::oneshot::Receiver<()>,
}

impl MemRepo {
    /// An empty repo; the first committed event gets outbox position 1.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fault hook: the next `commit` fails with `Error::Backend` and stores nothing (no rows, no events).
    /// Later commits behave normally again.
    pub fn fail_next_commit(&self) {
        self.lock().fail_next_commit = true;
    }

    /// Fault hook: the next `commit` that releases a lease (the one that stores an operation's result, see
    /// `Change::ReleaseLease`) fails with `Error::Backend` and stores nothing; commits before it (the
    /// intent's) and after it behave normally.
    pub fn fail_next_result_commit(&self) {
        self.lock().fail_next_result_commit = true;
    }

    /// Fault hook: the next `commit` that deletes an intent record (an operation's result, or recovery's
    /// last step) fails with `Error::Backend` and stores nothing; other commits behave normally.
    pub fn fail_next_intent_delete(&self) {
        self.lock().fail_next_intent_delete = true;
    }

    /// Race hook: right before the next `commit` that deletes an intent record, every intent record is
    /// removed, as another process's recovery that finished them meanwhile would: that commit's
    /// `IntentExists` guard then fails (`Error::LeaseLost`) and it stores nothing.
    pub fn finish_intents_before_next_intent_delete(&self) {
        self.lock().finish_intents_before_next_intent_delete = true;
    }

    /// Fault hook: the next `commit` that adds a capture (a rollback's or a recovery's, before it puts the
    /// files back) fails with `Error::Backend` and stores nothing; other commits behave normally.
    pub fn fail_next_capture(&self) {
        self.lock().fail_next_capture = true;
    }

    /// Makes the next failure of the fault hook named `hook` (`"fail_next_intent_delete"`, say; armed as
    /// usual) an `Error::Storage` of `fault` (a full disk) instead of a backend fault.
    pub fn fail_as(&self, hook: &'static str, fault: crate::error::StorageFault) {
        self.lock().hook_faults.insert(hook, fault);
    }

    /// Fault hook: the database goes away at the next `commit` that releases a lease (the one that stores an
    /// operation's result) and stays away until `reachable_again`: that commit and every one after it, every
    /// lease call and the reads of sessions, intents and captures fail with `StorageFault::Unreachable` and store
    /// nothing, as a PostgreSQL server stopped in the middle of an operation.
    pub fn unreachable_from_next_result_commit(&self) {
        self.lock().unreachable_from_next_result_commit = true;
    }

    /// Fault hook: the next `commit` that only checks that an intent record exists (its guard and no
    /// change: whether a failed result commit was made after all) fails with `Error::Backend`, as a
    /// database that cannot say would; other calls behave normally.
    pub fn fail_next_intent_check(&self) {
        self.lock().fail_next_intent_check = true;
    }

    /// Fault hook: the next read of the captures fails with `StorageFault::ConnectionLost`; other calls
    /// behave normally.
    pub fn fail_next_captures_read(&self) {
        self.lock().fail_next_captures_read = true;
    }

    /// Fault hook: the next `take_leases` applies as it would, then fails with `StorageFault::Unreachable`,
    /// as a commit whose answer a broken connection lost.
    pub fn lose_next_take_answer(&self) {
        self.lock().lose_next_take_answer = true;
    }

    /// Fault hook: the next `commit` that stores an operation's result (it releases a lease) is made, then
    /// fails with `StorageFault::ConnectionLost`, as a commit whose connection broke before its answer came.
    pub fn lose_next_result_answer(&self) {
        self.lock().lose_next_result_answer = true;
    }

    /// Race hook: the next `commit` that stores an operation's result fails with
    /// `StorageFault::ConnectionLost` having stored nothing yet, and is made at the start of the next
    /// `commit` (before it), as a commit still under way on a PostgreSQL server after its connection broke
    /// lands before the next one that takes the write lock; reads in between do not see it.
    pub fn land_next_result_late(&self) {
        self.lock().land_next_result_late = true;
    }

    /// Fault hook: the database goes away now, as `unreachable_from_next_result_commit` makes it go, until
    /// `reachable_again`.
    pub fn go_unreachable(&self) {
        self.lock().unreachable = true;
    }

    /// Ends the outage `unreachable_from_next_result_commit` or `go_unreachable` began: every call works
    /// again.
    pub fn reachable_again(&self) {
        self.lock().unreachable = false;
    }

    /// `Err` during such an outage.
    fn reachable(&self) -> Result<()> {
        if self.lock().unreachable {
            return Err(unreachable("the database is away"));
        }
        Ok(())
    }

    /// Fault hook: the next `commit` that stores a `step-start` part fails with `Error::Backend` and stores
    /// nothing; other commits (a cleanup before it, say) behave normally.
    pub fn fail_next_step_start(&self) {
        self.lock().fail_next_step_start = true;
    }

    /// Fault hook: the next `commit` that stores a message (a new one, or one put back to working)
    /// fails with `Error::Backend` and stores nothing; other commits behave normally.
    pub fn fail_next_message_put(&self) {
        self.lock().fail_next_message_put = true;
    }

    /// Race hook: the next `lease` read signals `reached` and then waits until `resume` is sent (or
    /// dropped), so a test can run another operation in between, as a concurrent request would.
    pub fn pause_next_lease_read(
        &self,
    ) -> (
        futures::channel::oneshot::Receiver<()>,
        futures::channel::oneshot::Sender<()>,
    ) {
        self.pause_next(PausedCall::LeaseRead)
    }

    /// `pause_next_lease_read` for the next `session` read, once it has read the session: the caller goes
    /// on with what it read, after whatever the test did meanwhile.
    pub fn pause_after_next_session_read(
        &self,
    ) -> (
        futures::channel::oneshot::Receiver<()>,
        futures::channel::oneshot::Sender<()>,
    ) {
        self.pause_next(PausedCall::SessionRead)
    }

    /// `pause_next_lease_read` for the next `take_lease`.
    pub fn pause_next_lease_take(
        &self,
    ) -> (
        futures::channel::oneshot::Receiver<()>,
        futures::channel::oneshot::Sender<()>,
    ) {
        self.pause_next(PausedCall::LeaseTake)
    }

    /// `pause_next_lease_read` for the next `commit` (before it checks or stores anything).
    pub fn pause_next_commit(
        &self,
    ) -> (
        futures::channel::oneshot::Receiver<()>,
        futures::channel::oneshot::Sender<()>,
    ) {
        self.pause_next(PausedCall::Commit)
    }

    /// `pause_next_lease_read` for the next `commit` that releases a lease (the one that stores an
    /// operation's result, its intent stored before), before it checks or stores anything.
    pub fn pause_next_result_commit(
        &self,
    ) -> (
        futures::channel::oneshot::Receiver<()>,
        futures::channel::oneshot::Sender<()>,
    ) {
        self.pause_next(PausedCall::ResultCommit)
    }

    fn pause_next(
        &self,
        call: PausedCall,
    ) -> (
        futures::channel::oneshot::Receiver<()>,
        futures::channel::oneshot::Sender<()>,
    ) {
        let (reached_tx, reached_rx) = futures::channel::oneshot::channel();
        let (resume_tx, resume_rx) = futures::channel::oneshot::channel();
        *self
            .pause
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some((
            call,
            Pause {
                reached: reached_tx,
                resume: resume_rx,
            },
        ));
        (reached_rx, resume_tx)
    }

    /// Waits here when a race hook is armed for `call`.
    async fn paused(&self, call: PausedCall) {
        let pause = {
            let mut armed = self
                .pause
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match armed.take() {
                Some((armed_for, pause)) if armed_for == call => Some(pause),
                other => {
                    *armed = other;
                    None
                }
            }
        };
        if let Some(pause) = pause {
            let _ = pause.reached.send(());
            let _ = pause.resume.await;
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock cannot have left a half-applied commit behind (commits
        // swap in a finished clone), so the state is still consistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The fault an outage hook injects (`what` says which).
fn unreachable(what: &str) -> Error {
    Error::storage(
        crate::error::StorageFault::Unreachable,
        format!("injected fault: MemRepo: {what}"),
    )
}

fn session_not_found(id: &SessionId) -> Error {
    Error::NotFound(format!("Session not found: {id}"))
}

fn message_not_found(id: &MessageId) -> Error {
    Error::NotFound(format!("Message not found: {id}"))
}

impl Rows {
    fn session_mut(&mut self, id: &SessionId) -> Result<&mut StoredSession> {
        self.sessions
            .get_mut(id)
            .ok_or_else(|| session_not_found(id))
    }

    fn apply(&mut self, change: Change) -> Result<()> {
        match change {
            Change::PutSession(session) => {
                let session = *session;
                // Replacing a session keeps its messages and other rows: only the session row changes.
                match self.sessions.get_mut(&session.id) {
                    Some(stored) => {
                        // What a client sets stays (only `UpdateSession` changes it: title, metadata,
                        // archive time), and so does a later update time.
                        let kept = SessionFields::of(&stored.info);
                        let updated = stored.info.time.updated;
                        stored.info = session;
                        kept.apply_to(&mut stored.info);
                        stored.info.time.updated = stored.info.time.updated.max(updated);
                    }
                    None => {
                        self.sessions.insert(
                            session.id.clone(),
                            StoredSession {
                                info: session,
                                messages: BTreeMap::new(),
                                diff: Vec::new(),
                                warnings: Vec::new(),
                                history: Vec::new(),
                            },
                        );
                    }
                }
            }
            Change::UpdateSession {
                session,
                fields,
                updated,
            } => {
                let stored = self.session_mut(&session)?;
                fields.apply_to(&mut stored.info);
                stored.info.time.updated = stored.info.time.updated.max(updated);
            }
            Change::DeleteSession(id) => {
                if self.sessions.remove(&id).is_none() {
                    return Err(session_not_found(&id));
                }
                self.intents.retain(|_, intent| intent.session_id != id);
            }
            Change::PutMessage(message) => {
                let message = *message;
                let session = self.session_mut(&message.session_id)?;
                // Replacing a message keeps its parts.
                match session.messages.get_mut(&message.id) {
                    Some(stored) => stored.info = message,
                    None => {
                        session.messages.insert(
                            message.id.clone(),
                            StoredMessage {
                                info: message,
                                parts: BTreeMap::new(),
                            },
                        );
                    }
                }
            }
            Change::PutPart(part) => {
                let part = *part;
                let session = self.session_mut(&part.session_id)?;
                let message = session
                    .messages
                    .get_mut(&part.message_id)
                    .ok_or_else(|| message_not_found(&part.message_id))?;
                message.parts.insert(part.id.clone(), part);
            }
            Change::DeleteHiddenRange {
                session,
                message,
                part,
            } => {
                let stored = self.session_mut(&session)?;
                if !stored.messages.contains_key(&message) {
                    return Err(message_not_found(&message));
                }
                let point = RevertPoint {
                    message_id: message,
                    part_id: part,
                };
                // `is_hidden(.., None)` asks about the message row itself: hidden when it lies after the
                // point, or is the point's message and the point names no part.
                stored.messages.retain(|id, _| !is_hidden(&point, id, None));
                for (id, kept) in &mut stored.messages {
                    kept.parts
                        .retain(|part_id, _| !is_hidden(&point, id, Some(part_id)));
                }
            }
            Change::SetSessionDiff { session, diff } => {
                self.session_mut(&session)?.diff = diff;
            }
            Change::AddWarning { session, warning } => {
                self.session_mut(&session)?.warnings.push(warning);
            }
            Change::AddRevertHistory { session, entry } => {
                self.session_mut(&session)?.history.push(*entry);
            }
            Change::PutIntent(intent) => {
                self.session_mut(&intent.session_id)?;
                self.intents.insert(intent.token.clone(), *intent);
            }
            Change::DeleteIntent(token) => {
                // Deleting an absent intent is not an error, like a `DELETE … WHERE token = ?` that matches
                // no row; a transaction that needs the intent to exist says so with `Guard::IntentExists`.
                self.intents.remove(&token);
            }
            Change::AddCapture(capture) => self.captures.push(*capture),
            Change::DeleteCapturesBefore { before } => {
                self.captures.retain(|capture| capture.time >= before);
            }
            // The outbox and the leases are outside `Rows`: `commit` applies these.
            Change::DeleteEventsThrough { .. } | Change::ReleaseLease { .. } => {}
        }
        Ok(())
    }
}

impl State {
    /// A lease on another key than `lease`'s that overlaps it (a worktree inside or around), held by
    /// another token than `lease`'s.
    fn nested_holder(&self, lease: &Lease) -> Option<Lease> {
        self.leases
            .values()
            .find(|other| {
                other.key != lease.key
                    && other.key.overlaps(&lease.key)
                    && other.token != lease.token
            })
            .cloned()
    }

    /// Removes the lease on `key` while `token` holds it.
    fn release(&mut self, key: &LeaseKey, token: &LeaseToken) {
        if self.leases.get(key).is_some_and(|l| &l.token == token) {
            self.leases.remove(key);
        }
    }

    fn check(&self, guard: &Guard) -> Result<()> {
        match guard {
            // Expiry is deliberately not checked: whether an expired lease may be taken over is the services'
            // decision (`may_take_over`), and until someone takes it over it is still held.
            Guard::LeaseHeld { key, token } => match self.leases.get(key) {
                Some(lease) if &lease.token == token => Ok(()),
                Some(lease) => Err(Error::LeaseLost(format!(
                    "the lease on {key:?} is now held by {} (token {})",
                    lease.holder, lease.token
                ))),
                None => Err(Error::LeaseLost(format!(
                    "the lease on {key:?} is no longer held"
                ))),
            },
            Guard::LeaseNotTaken { key, seen } => match self.leases.get(key) {
                Some(lease) if Some(&lease.token) != seen.as_ref() => {
                    Err(Error::lease_busy(key, &lease.holder, key.session()))
                }
                _ => Ok(()),
            },
            Guard::RevertIs { session, point } => {
                let stored = self
                    .rows
                    .sessions
                    .get(session)
                    .ok_or_else(|| session_not_found(session))?;
                if stored.info.revert.as_ref().map(|r| r.point()) == *point {
                    Ok(())
                } else {
                    Err(Error::revert_changed(session))
                }
            }
            Guard::MessageExists { session, message } => {
                let stored = self
                    .rows
                    .sessions
                    .get(session)
                    .is_some_and(|s| s.messages.contains_key(message));
                if stored {
                    Ok(())
                } else {
                    Err(Error::revert_changed(session))
                }
            }
            Guard::LastMessageIs { session, message } => {
                let stored = self
                    .rows
                    .sessions
                    .get(session)
                    .ok_or_else(|| session_not_found(session))?;
                if stored.messages.keys().next_back() == message.as_ref() {
                    Ok(())
                } else {
                    Err(Error::stale(
                        session,
                        format!("the last message of session {session}"),
                    ))
                }
            }
            Guard::LastPartIs {
                session,
                message,
                part,
            } => {
                let stored = self
                    .rows
                    .sessions
                    .get(session)
                    .and_then(|s| s.messages.get(message))
                    .ok_or_else(|| message_not_found(message))?;
                if stored.parts.keys().next_back() == part.as_ref() {
                    Ok(())
                } else {
                    Err(Error::stale(
                        session,
                        format!("the last part of message {message}"),
                    ))
                }
            }
            Guard::PartIdFree { session, part } => {
                let holder = self.rows.sessions.get(session).and_then(|s| {
                    s.messages
                        .iter()
                        .find(|(_, m)| m.parts.contains_key(part))
                        .map(|(id, _)| id)
                });
                match holder {
                    Some(holder) => Err(Error::part_id_taken(part, holder)),
                    None => Ok(()),
                }
            }
            Guard::IntentExists(token) => {
                if self.rows.intents.contains_key(token) {
                    Ok(())
                } else {
                    Err(Error::LeaseLost(format!(
                        "the intent record {token} no longer exists"
                    )))
                }
            }
        }
    }
}

fn with_parts(message: &StoredMessage) -> MessageWithParts {
    MessageWithParts {
        info: message.info.clone(),
        parts: message.parts.values().cloned().collect(),
    }
}

/// Every snapshot id one session's rows refer to.
fn session_snapshots(stored: &StoredSession, out: &mut BTreeSet<SnapshotId>) {
    let info = &stored.info;
    out.extend(info.revert.iter().filter_map(|r| r.snapshot.clone()));
    out.extend(info.applied.iter().cloned());
    out.extend(info.step.iter().map(|s| s.snapshot.clone()));
    for message in stored.messages.values() {
        for part in message.parts.values() {
            match &part.body {
                PartBody::StepStart(p) => out.extend(p.snapshot.iter().cloned()),
                PartBody::StepFinish(p) => out.extend(p.snapshot.iter().cloned()),
                PartBody::Patch(p) => {
                    out.insert(p.hash.clone());
                }
                PartBody::Text(_) | PartBody::Tool(_) | PartBody::Other { .. } => {}
            }
        }
    }
    let warning_snapshots = |warnings: &[Warning]| {
        warnings
            .iter()
            .filter_map(|w| w.snapshot.clone())
            .collect::<Vec<_>>()
    };
    out.extend(warning_snapshots(&stored.warnings));
    for entry in &stored.history {
        out.extend(entry.descriptor.snapshot.iter().cloned());
        out.extend(entry.applied.iter().cloned());
        out.extend(warning_snapshots(&entry.warnings));
    }
}

#[async_trait]
impl MessageRepo for MemRepo {
    async fn session(&self, id: &SessionId) -> Result<Option<Session>> {
        self.reachable()?;
        let session = self.lock().rows.sessions.get(id).map(|s| s.info.clone());
        self.paused(PausedCall::SessionRead).await;
        Ok(session)
    }

    async fn sessions(&self, directory: Option<String>) -> Result<Vec<Session>> {
        // Session ids descend in time, so ascending id order is newest first.
        Ok(self
            .lock()
            .rows
            .sessions
            .values()
            .filter(|s| directory.as_ref().is_none_or(|d| &s.info.directory == d))
            .map(|s| s.info.clone())
            .collect())
    }

    async fn sessions_overlapping(&self, directory: &str) -> Result<Vec<Session>> {
        Ok(self
            .lock()
            .rows
            .sessions
            .values()
            .filter(|s| worktrees_overlap(&s.info.directory, directory))
            .map(|s| s.info.clone())
            .collect())
    }

    async fn messages(&self, session: &SessionId) -> Result<Vec<MessageWithParts>> {
        // An unknown session simply has no messages, as a `SELECT … WHERE session_id = ?` would answer.
        Ok(self
            .lock()
            .rows
            .sessions
            .get(session)
            .map(|s| s.messages.values().map(with_parts).collect())
            .unwrap_or_default())
    }

    async fn messages_from(
        &self,
        session: &SessionId,
        from: &MessageId,
    ) -> Result<Vec<MessageWithParts>> {
        self.messages_between(session, from, None).await
    }

    async fn messages_between(
        &self,
        session: &SessionId,
        from: &MessageId,
        before: Option<MessageId>,
    ) -> Result<Vec<MessageWithParts>> {
        // An empty or reversed range is no messages (BTreeMap::range panics on a reversed one).
        if before.as_ref().is_some_and(|before| before <= from) {
            return Ok(Vec::new());
        }
        let range = (
            std::ops::Bound::Included(from.clone()),
            before.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded),
        );
        Ok(self
            .lock()
            .rows
            .sessions
            .get(session)
            .map(|s| {
                s.messages
                    .range(range)
                    .map(|(_, m)| with_parts(m))
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn message(
        &self,
        session: &SessionId,
        message: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        Ok(self
            .lock()
            .rows
            .sessions
            .get(session)
            .and_then(|s| s.messages.get(message))
            .map(with_parts))
    }

    async fn message_infos(&self, session: &SessionId) -> Result<Vec<Message>> {
        Ok(self
            .lock()
            .rows
            .sessions
            .get(session)
            .map(|s| {
                s.messages
                    .values()
                    .map(|m| {
                        let mut info = m.info.clone();
                        info.extra.remove("summary");
                        info
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn message_head(
        &self,
        session: &SessionId,
        message: &MessageId,
    ) -> Result<Option<MessageHead>> {
        Ok(self
            .lock()
            .rows
            .sessions
            .get(session)
            .and_then(|s| s.messages.get(message))
            .map(|m| MessageHead {
                info: m.info.clone(),
                last_part: m.parts.keys().next_back().cloned(),
            }))
    }

    async fn session_diff(&self, session: &SessionId) -> Result<Vec<FileDiff>> {
        Ok(self
            .lock()
            .rows
            .sessions
            .get(session)
            .map(|s| s.diff.clone())
            .unwrap_or_default())
    }

    async fn warnings(&self, session: &SessionId) -> Result<Vec<Warning>> {
        Ok(self
            .lock()
            .rows
            .sessions
            .get(session)
            .map(|s| s.warnings.clone())
            .unwrap_or_default())
    }

    async fn revert_history(&self, session: &SessionId) -> Result<Vec<RevertHistoryEntry>> {
        Ok(self
            .lock()
            .rows
            .sessions
            .get(session)
            .map(|s| s.history.clone())
            .unwrap_or_default())
    }

    async fn intents(&self) -> Result<Vec<IntentRecord>> {
        self.reachable()?;
        Ok(self.lock().rows.intents.values().cloned().collect())
    }

    async fn lease(&self, key: &LeaseKey) -> Result<Option<Lease>> {
        self.paused(PausedCall::LeaseRead).await;
        self.reachable()?;
        Ok(self.lock().leases.get(key).cloned())
    }

    async fn leases(&self) -> Result<Vec<Lease>> {
        self.reachable()?;
        Ok(self.lock().leases.values().cloned().collect())
    }

    async fn take_lease(&self, lease: &Lease, replacing: Option<Replacing>) -> Result<LeaseTake> {
        self.paused(PausedCall::LeaseTake).await;
        self.reachable()?;
        let mut state = self.lock();
        if let Some(existing) = state.leases.get(&lease.key) {
            let ours = existing.token == lease.token;
            let replaced = replacing.as_ref().is_some_and(|r| r.matches(existing));
            if !ours && !replaced {
                return Ok(LeaseTake::Held(existing.clone()));
            }
        }
        if let Some(nested) = state.nested_holder(lease) {
            return Ok(LeaseTake::Held(nested));
        }
        state.leases.insert(lease.key.clone(), lease.clone());
        Ok(LeaseTake::Taken)
    }

    async fn take_leases(&self, leases: &[Lease]) -> Result<Vec<LeaseTake>> {
        self.reachable()?;
        let mut state = self.lock();
        let takes: Vec<LeaseTake> = leases
            .iter()
            .map(|lease| match state.leases.get(&lease.key) {
                Some(existing) if existing.token != lease.token => {
                    LeaseTake::Held(existing.clone())
                }
                _ => match state.nested_holder(lease) {
                    Some(nested) => LeaseTake::Held(nested),
                    None => LeaseTake::Taken,
                },
            })
            .collect();
        if takes.iter().all(|take| *take == LeaseTake::Taken) {
            for lease in leases {
                state.leases.insert(lease.key.clone(), lease.clone());
            }
        }
        if std::mem::take(&mut state.lose_next_take_answer) {
            return Err(unreachable("lose_next_take_answer"));
        }
        Ok(takes)
    }

    async fn renew_lease(
        &self,
        key: &LeaseKey,
        token: &LeaseToken,
        expires_at: u64,
    ) -> Result<bool> {
        self.reachable()?;
        let mut state = self.lock();
        match state.leases.get_mut(key) {
            Some(lease) if &lease.token == token => {
                lease.expires_at = expires_at;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn release_lease(&self, key: &LeaseKey, token: &LeaseToken) -> Result<()> {
        self.reachable()?;
        self.lock().release(key, token);
        Ok(())
    }

    async fn commit(&self, transaction: Transaction) -> Result<()> {
        // A result commit `land_next_result_late` held back lands first, as a server's write lock orders a
        // commit still under way before the next.
        let late = self.lock().landing_late.take();
        if let Some(late) = late {
            let _ = self.commit_now(late).await;
        }
        self.commit_now(transaction).await
    }

    async fn last_event_seq(&self) -> Result<u64> {
        Ok(self.lock().outbox.last().map_or(0, |stored| stored.seq))
    }

    async fn event_id_at(&self, seq: u64) -> Result<Option<EventId>> {
        let state = self.lock();
        let at = state.outbox.binary_search_by_key(&seq, |stored| stored.seq);
        Ok(at.ok().map(|i| state.outbox[i].event.id.clone()))
    }

    /// Each event counts as its JSON text (this adapter shares no text between events).
    async fn outbox_over(&self, bytes: u64) -> Result<Option<u64>> {
        let state = self.lock();
        let mut total: u64 = 0;
        for stored in state.outbox.iter().rev() {
            let text =
                serde_json::to_string(&stored.event).map_err(|e| Error::Backend(Box::new(e)))?;
            total = total.saturating_add(u64::try_from(text.len()).unwrap_or(u64::MAX));
            if total > bytes {
                return Ok(Some(stored.seq));
            }
        }
        Ok(None)
    }

    async fn events_after(&self, after: u64, limit: u32) -> Result<Vec<StoredEvent>> {
        let state = self.lock();
        // The outbox is in position order (old events may have been deleted from its front).
        let start = state.outbox.partition_point(|stored| stored.seq <= after);
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        Ok(state
            .outbox
            .iter()
            .skip(start)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn referenced_snapshots(
        &self,
        directory: Option<String>,
    ) -> Result<BTreeSet<SnapshotId>> {
        let state = self.lock();
        let wanted = |dir: &str| directory.as_deref().is_none_or(|d| d == dir);
        let mut out = BTreeSet::new();
        for stored in state.rows.sessions.values() {
            if wanted(&stored.info.directory) {
                session_snapshots(stored, &mut out);
            }
        }
        for intent in state.rows.intents.values() {
            if wanted(&intent.directory) {
                out.insert(intent.before.clone());
            }
        }
        for capture in &state.rows.captures {
            if wanted(&capture.directory) {
                out.insert(capture.snapshot.clone());
            }
        }
        Ok(out)
    }

    async fn captures(&self, directory: Option<String>) -> Result<Vec<Capture>> {
        self.reachable()?;
        let mut state = self.lock();
        if std::mem::take(&mut state.fail_next_captures_read) {
            return Err(Error::storage(
                crate::error::StorageFault::ConnectionLost,
                "injected fault: MemRepo::fail_next_captures_read",
            ));
        }
        Ok(state
            .rows
            .captures
            .iter()
            .filter(|capture| directory.as_deref().is_none_or(|d| d == capture.directory))
            .cloned()
            .collect())
    }
}

impl MemRepo {
    /// `commit`, once any commit held back has landed.
    async fn commit_now(&self, transaction: Transaction) -> Result<()> {
        let result_commit = transaction
            .changes
            .iter()
            .any(|c| matches!(c, Change::ReleaseLease { .. }));
        if result_commit {
            self.paused(PausedCall::ResultCommit).await;
        }
        self.paused(PausedCall::Commit).await;
        let mut state = self.lock();
        if result_commit && std::mem::take(&mut state.unreachable_from_next_result_commit) {
            state.unreachable = true;
        }
        if state.unreachable {
            return Err(unreachable("the database is away"));
        }
        if result_commit && std::mem::take(&mut state.land_next_result_late) {
            state.landing_late = Some(transaction);
            return Err(Error::storage(
                crate::error::StorageFault::ConnectionLost,
                "injected fault: MemRepo::land_next_result_late",
            ));
        }
        if std::mem::take(&mut state.fail_next_commit) {
            return Err(Error::backend("injected fault: MemRepo::fail_next_commit"));
        }
        let has = |wanted: fn(&Change) -> bool| transaction.changes.iter().any(wanted);
        let hooks = &mut *state;
        let armed = [
            (
                &mut hooks.fail_next_result_commit,
                has(|c| matches!(c, Change::ReleaseLease { .. })),
                "fail_next_result_commit",
            ),
            (
                &mut hooks.fail_next_intent_delete,
                has(|c| matches!(c, Change::DeleteIntent(_))),
                "fail_next_intent_delete",
            ),
            (
                &mut hooks.fail_next_capture,
                has(|c| matches!(c, Change::AddCapture(_))),
                "fail_next_capture",
            ),
            (
                &mut hooks.fail_next_step_start,
                has(|c| {
                    matches!(c, Change::PutPart(part)
                        if matches!(part.body, crate::model::PartBody::StepStart(_)))
                }),
                "fail_next_step_start",
            ),
            (
                &mut hooks.fail_next_message_put,
                has(|c| matches!(c, Change::PutMessage(_))),
                "fail_next_message_put",
            ),
            (
                &mut hooks.fail_next_intent_check,
                transaction.changes.is_empty()
                    && transaction
                        .guards
                        .iter()
                        .any(|g| matches!(g, Guard::IntentExists(_))),
                "fail_next_intent_check",
            ),
        ];
        // The first armed hook whose kind of change this transaction makes fires (and is disarmed).
        let mut fired = None;
        for (flag, applies, hook) in armed {
            if *flag && applies {
                *flag = false;
                fired = Some(hook);
                break;
            }
        }
        if let Some(hook) = fired {
            let text = format!("injected fault: MemRepo::{hook}");
            return Err(match hooks.hook_faults.remove(hook) {
                Some(fault) => Error::storage(fault, text),
                None => Error::backend(text),
            });
        }
        if hooks.finish_intents_before_next_intent_delete
            && has(|c| matches!(c, Change::DeleteIntent(_)))
        {
            hooks.finish_intents_before_next_intent_delete = false;
            hooks.rows.intents.clear();
        }
        for guard in &transaction.guards {
            state.check(guard)?;
        }
        let mut rows = state.rows.clone();
        let mut prune_through = None;
        let mut released = Vec::new();
        // The sessions put and renamed: their `session.updated` events carry what is stored at the end.
        let mut put = HashSet::new();
        let mut renamed = HashSet::new();
        // The sessions deleted, as they were stored then: their `session.deleted` events carry the
        // client's fields and update time of that moment (an update takes no lease).
        let mut deleted = HashMap::new();
        for change in transaction.changes {
            match &change {
                Change::PutSession(session) => {
                    put.insert(session.id.clone());
                }
                Change::UpdateSession { session, .. } => {
                    renamed.insert(session.clone());
                }
                Change::DeleteSession(id) => {
                    if let Some(stored) = rows.sessions.get(id) {
                        deleted.insert(id.clone(), stored.info.clone());
                    }
                }
                _ => {}
            }
            match change {
                Change::DeleteEventsThrough { seq } => {
                    prune_through = prune_through.max(Some(seq));
                }
                Change::ReleaseLease { key, token } => released.push((key, token)),
                change => rows.apply(change)?,
            }
        }
        let mut events = transaction.events;
        for event in &mut events {
            if let EventPayload::SessionDeleted { session_id, info } = &mut event.payload
                && let Some(stored) = deleted.get(session_id)
            {
                SessionFields::of(stored).apply_to(info);
                info.time.updated = stored.time.updated;
                continue;
            }
            let EventPayload::SessionUpdated { session_id, info } = &mut event.payload else {
                continue;
            };
            let Some(stored) = rows.sessions.get(session_id) else {
                continue;
            };
            if renamed.contains(session_id) {
                **info = stored.info.clone();
            } else if put.contains(session_id) {
                SessionFields::of(&stored.info).apply_to(info);
                info.time.updated = stored.info.time.updated;
            }
        }
        state.rows = rows;
        for (key, token) in released {
            state.release(&key, &token);
        }
        if let Some(seq) = prune_through {
            let last = state.outbox.last().map_or(0, |stored| stored.seq);
            state
                .outbox
                .retain(|stored| stored.seq > seq || stored.seq == last);
        }
        let first = state.outbox.last().map_or(0, |e| e.seq) + 1;
        let stored = (first..).zip(events);
        state
            .outbox
            .extend(stored.map(|(seq, event)| StoredEvent { seq, event }));
        if result_commit && std::mem::take(&mut state.lose_next_result_answer) {
            return Err(Error::storage(
                crate::error::StorageFault::ConnectionLost,
                "injected fault: MemRepo::lose_next_result_answer",
            ));
        }
        Ok(())
    }
}
