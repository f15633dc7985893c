//! Recording a session (SPEC section 4): sessions, messages and parts, and the steps whose snapshots make
//! the files revertable; abandoned steps are aborted before the next operation.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::error::{Error, Result};
use crate::id::ensure_sorts_after;
use crate::model::{
    EventPayload, HolderKind, LeaseKey, LeaseToken, Message, MessageHead, MessageId, MessageTime,
    MessageWithParts, OpenStep, Part, PartBody, PartId, PatchPart, RelPath, Role, Session,
    SessionFields, SessionId, SessionStatus, SessionTime, SkipReason, SkippedPath, SnapshotId,
    StepFinishPart, StepStartPart, Tokens, TrackOutcome, Warning, worktrees_overlap,
};
use crate::ports::{Change, Guard, Transaction};

use super::{NewMessage, NewPart, Rewind, StepEnd, new_token, worktree};

/// What `Rewind::delete_session_if` asks of the session, as stored once its lease is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteIf {
    /// Last updated, and given its newest message, before this time (host clock, ms): gc's `--older-than`.
    /// A session a turn, a revert, a rename or a new message updated since gc listed it stays.
    UpdatedBefore(u64),
    /// Holding no message: the command line's own new session whose first turn could not begin. One that
    /// another process recorded a message in meanwhile stays.
    Empty,
}

impl Rewind {
    /// Creates a session for the worktree `directory` (an absolute path).
    pub async fn create_session(&self, directory: &str, title: Option<String>) -> Result<Session> {
        self.create_child_session(directory, title, None).await
    }

    /// `create_session`, under the session `parent` when one is given (OpenCode's subagent sessions,
    /// `parentID`): it must exist (`Error::NotFound` otherwise, and nothing is created). A child is a session
    /// of its own: its worktree need not be its parent's; `delete_session_and_children` deletes it with
    /// its parent, `delete_session` leaves it.
    pub async fn create_child_session(
        &self,
        directory: &str,
        title: Option<String>,
        parent: Option<SessionId>,
    ) -> Result<Session> {
        let directory = normalise_directory(directory)?;
        if let Some(parent) = &parent
            && self.repo.session(parent).await?.is_none()
        {
            return Err(Error::NotFound(format!(
                "Session not found: {parent} (the parentID of the session to create)"
            )));
        }
        let store = self
            .snapshots
            .store_location(std::path::Path::new(&directory))
            .await?;
        let now = self.now();
        let id: SessionId = self.ids.descending(now);
        let slug = format!("session-{}", &id.as_str()[id.as_str().len() - 6..]).to_lowercase();
        let session = Session {
            id: id.clone(),
            slug,
            project_id: store.clone(),
            directory,
            parent_id: parent,
            title: title.unwrap_or_else(|| "New session".to_owned()),
            version: self.config.version.clone(),
            metadata: None,
            time: SessionTime {
                created: now,
                updated: now,
                archived: None,
            },
            summary: None,
            cost: 0.0,
            tokens: Tokens::default(),
            revert: None,
            store,
            applied: None,
            reverted_at: None,
            step: None,
            skipped: Vec::new(),
        };
        let created = self.event(EventPayload::SessionCreated {
            session_id: id,
            info: Box::new(session.clone()),
        });
        self.repo
            .commit(Transaction {
                guards: Vec::new(),
                changes: vec![Change::PutSession(Box::new(session.clone()))],
                events: vec![created],
            })
            .await?;
        Ok(session)
    }

    /// Deletes a session with its messages (never its files). Busy while a step or an operation holds it.
    pub async fn delete_session(&self, id: &SessionId) -> Result<()> {
        self.delete_session_if(id, None).await.map(|_| ())
    }

    /// `DELETE /session/:id`: `delete_session`, after the sessions created under it (`parent_id`, at any
    /// depth, each before its parent), as OpenCode deletes a session's children with it: a client that
    /// hides child sessions from its lists would never show them again (SDK audit). Only children whose
    /// worktree `within` accepts (the server's project roots) are touched. A step open in any of them is
    /// aborted first, as OpenCode aborts a session it deletes and as `abort` does (SDK audit: the delete
    /// was refused until the step timed out); one owned by another live process (a running `rewind exec`)
    /// is not taken from it, and nothing is deleted (`Busy`). A child that cannot be deleted then (a step
    /// begun in it meanwhile, its worktree's recovery failing) stays, a root of its own from then on, and
    /// is returned with why; the others and the session are deleted. A child deleted meanwhile by another
    /// request is passed over.
    pub async fn delete_session_and_children(
        &self,
        id: &SessionId,
        within: &(dyn Fn(&str) -> bool + Send + Sync),
    ) -> Result<Vec<(SessionId, Error)>> {
        let session = self.load_session(id).await?;
        let sessions = self.repo.sessions(None).await?;
        let mut below: Vec<&Session> = Vec::new();
        let mut parents = vec![id];
        while let Some(parent) = parents.pop() {
            for child in sessions.iter().filter(|s| {
                s.parent_id.as_ref() == Some(parent) && s.id != *id && within(&s.directory)
            }) {
                if !below.iter().any(|seen| seen.id == child.id) {
                    below.push(child);
                    parents.push(&child.id);
                }
            }
        }
        let all: Vec<&Session> = std::iter::once(&session)
            .chain(below.iter().copied())
            .collect();
        for open in all.iter().filter(|s| s.step.is_some()) {
            if let Some(step) = &open.step
                && !self.speaks_for(&step.holder)
                && !self.step_is_abandoned(open).await?
            {
                return Err(self.step_busy(open, step, ", which is still running").await);
            }
        }
        for open in all.iter().filter(|s| s.step.is_some()) {
            match self.abort(&open.id).await {
                Ok(_) | Err(Error::NotFound(_)) => {}
                Err(error) => return Err(error),
            }
        }
        // Each comes after its parent in `below`: the reverse deletes children before their parents.
        let mut left = Vec::new();
        for child in below.iter().rev() {
            match self.delete_session(&child.id).await {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(error) => left.push((child.id.clone(), error)),
            }
        }
        self.delete_session(id).await?;
        Ok(left)
    }

    /// `delete_session`, only while the session, as stored once its lease is held, meets `condition`
    /// (always without one): `Ok(false)` when it did not, and nothing is deleted. A caller that judged the
    /// session from an earlier read (gc's age, the command line's "still empty") cannot delete one that
    /// another process used meanwhile.
    pub async fn delete_session_if(
        &self,
        id: &SessionId,
        condition: Option<DeleteIf>,
    ) -> Result<bool> {
        // An empty session (one a refused `exec` made) has no step or revert for the preparation to look
        // at: deleted without it, also when the worktree's preparation fails (review: a damaged store
        // left such a session behind as the directory's latest).
        let session = if condition == Some(DeleteIf::Empty) {
            self.load_session(id).await?
        } else {
            self.load_prepared(id).await?
        };
        refuse_open_step(&session)?;
        let lease = self
            .acquire(
                LeaseKey::Session(id.clone()),
                &new_token(),
                self.config.operation_lease_ms,
                Some(id),
            )
            .await?;
        let result = async {
            // Read again under the lease: a rename takes none, and may have landed since; so may a turn,
            // a revert or a message, before the lease was taken.
            let session = self.repo.session(id).await?.unwrap_or(session);
            let mut guards = vec![lease.guard()];
            match condition {
                // A message other than a prompt (an assistant's, recorded without a step) does not change the
                // session's update time: the newest message's counts too.
                Some(DeleteIf::UpdatedBefore(cutoff))
                    if session.time.updated >= cutoff
                        || self
                            .repo
                            .message_infos(id)
                            .await?
                            .last()
                            .is_some_and(|m| m.time.created >= cutoff) =>
                {
                    return Ok(false);
                }
                // A message is recorded without the session's lease when the command that records it saw
                // the lease free: the guard sees one that committed before this delete does.
                Some(DeleteIf::Empty) => guards.push(Guard::LastMessageIs {
                    session: id.clone(),
                    message: None,
                }),
                _ => {}
            }
            // Deleted by hand: the snapshots its warnings name (files a revert overwrote, the state an abort
            // found) stay as captures of the worktree, kept by gc as long as any capture, so deleting a
            // session loses no file (gc's own deletions by age keep none: they are as old).
            let mut changes = Vec::new();
            if condition.is_none() {
                changes = self.captures_of_warnings(&session).await?;
            }
            changes.push(Change::DeleteSession(id.clone()));
            let deleted = self.event(EventPayload::SessionDeleted {
                session_id: id.clone(),
                info: Box::new(session),
            });
            let committed = self
                .repo
                .commit(Transaction {
                    guards,
                    changes,
                    events: vec![deleted],
                })
                .await;
            match committed {
                Ok(()) => Ok(true),
                Err(Error::Stale { .. }) if condition == Some(DeleteIf::Empty) => Ok(false),
                Err(error) => Err(error),
            }
        }
        .await;
        self.release(&lease).await;
        result
    }

    /// A capture for each snapshot the warnings of `session` name, those of its reverts made permanent
    /// included (once each): what deleting it would otherwise leave to gc.
    async fn captures_of_warnings(&self, session: &Session) -> Result<Vec<Change>> {
        let mut warnings = self.repo.warnings(&session.id).await?;
        for entry in self.repo.revert_history(&session.id).await? {
            warnings.extend(entry.warnings);
        }
        let prefix = format!("{}/", session.directory.trim_end_matches('/'));
        let now = self.now();
        let mut seen = HashSet::new();
        let mut changes = Vec::new();
        for warning in warnings {
            let Some(snapshot) = warning.snapshot else {
                continue;
            };
            if !seen.insert(snapshot.clone()) {
                continue;
            }
            changes.push(Change::AddCapture(Box::new(crate::model::Capture {
                directory: session.directory.clone(),
                snapshot,
                time: now,
                message: format!(
                    "kept from deleted session {} ({}): {}",
                    session.id, session.title, warning.message
                ),
                paths: warning
                    .files
                    .iter()
                    .filter_map(|file| file.strip_prefix(&prefix).map(str::to_owned))
                    .collect(),
                intent: None,
            })));
        }
        Ok(changes)
    }

    /// Sets what a client sets of a session (OpenCode's `session.update`: title, metadata, archive
    /// time); with nothing to set, the session as it is. It lands at any time, while a step is open or an
    /// operation runs too: those fields are the ones a session's own writes keep as stored
    /// (`Change::PutSession`), and the announcement carries the session as stored when the update commits.
    pub async fn update_session(&self, id: &SessionId, fields: SessionFields) -> Result<Session> {
        let session = self.load_session(id).await?;
        if fields.is_empty() {
            return Ok(session);
        }
        let updated = self.now();
        let mut changed = session;
        fields.apply_to(&mut changed);
        changed.time.updated = updated;
        self.repo
            .commit(Transaction {
                guards: Vec::new(),
                changes: vec![Change::UpdateSession {
                    session: id.clone(),
                    fields,
                    updated,
                }],
                events: vec![self.updated_event(&changed)],
            })
            .await?;
        // As stored; the update's own view when the session was deleted right after (the update stands).
        Ok(self.repo.session(id).await?.unwrap_or(changed))
    }

    /// Records a message with its parts. While the session is reverted, cleanup runs first (the redo
    /// history is dropped, as in OpenCode), in the message's own transaction: a message that is refused,
    /// fails or is killed before its commit changes nothing (`create_message_reverted`).
    pub async fn create_message(
        &self,
        session_id: &SessionId,
        input: NewMessage,
    ) -> Result<MessageWithParts> {
        // Input checked before anything else: preparing the worktree may abort an abandoned step or finish
        // an interrupted operation, and a refused request changes nothing.
        reject_message_input(&input)?;
        let session = self.load_prepared(session_id).await?;
        let mut not_operating = self.refuse_while_operating(&session).await?;
        if let Some(point) = revert_point_of(&session) {
            // A parent the revert hides exists, but cleanup would delete it: say so rather than "not found".
            if input.role == Role::Assistant
                && let Some(parent) = &input.parent_id
                && crate::revert::is_hidden(&point, parent, None)
                && self.repo.message_head(session_id, parent).await?.is_some()
            {
                return Err(Error::InvalidInput(format!(
                    "parentID {parent} is reverted: a message recorded while the session is reverted deletes \
                     the reverted messages first; unrevert the session, or answer a message before the revert \
                     point"
                )));
            }
            return self.create_message_reverted(&session, input).await;
        }
        // The messages without their parts: a long session's parts are not read for each message. The
        // parts' ids are checked by the commit's guards.
        let messages = self.repo.message_infos(session_id).await?;
        let ids_free: Vec<Guard> =
            part_id_guards(session_id, input.parts.iter().map(|p| p.id.as_ref())).collect();
        let given = (input.id.clone(), input.parent_id.clone());
        let (mut info, mut parts) = self.new_message(&session, &messages, input)?;
        let mut last = messages.last().map(|m| m.id.clone());
        let mut tries = 0;
        loop {
            if tries > 0 {
                // A message stored since: this one follows it (its parts' ids do not depend on it).
                let messages = self.repo.message_infos(session_id).await?;
                last = messages.last().map(|m| m.id.clone());
                info = self.message_info(
                    session_id,
                    &messages,
                    info.role,
                    given.clone(),
                    std::mem::take(&mut info.extra),
                )?;
                for part in &mut parts {
                    part.message_id = info.id.clone();
                }
            }
            // Not reverted now (cleanup ran): a revert stored since the checks would hide this message.
            let unreverted = Guard::RevertIs {
                session: session_id.clone(),
                point: None,
            };
            let mut guards = vec![not_operating.clone(), unreverted];
            guards.extend(ids_free.iter().cloned());
            // The user message an assistant message answers: a revert and its cleanup since the checks may
            // have deleted it, leaving the revert point as it was.
            if let Some(parent) = &info.parent_id {
                guards.push(Guard::MessageExists {
                    session: session_id.clone(),
                    message: parent.clone(),
                });
            }
            // Last: a refusal above is the answer, whatever else was stored meanwhile.
            guards.push(Guard::LastMessageIs {
                session: session_id.clone(),
                message: last.clone(),
            });
            let mut transaction = Transaction {
                guards,
                ..Transaction::default()
            };
            self.push_message(&mut transaction, info.clone(), &session.directory);
            for part in &parts {
                self.push_part(&mut transaction, part.clone());
            }
            self.push_tool_outside_a_step(&mut transaction, &session, &info, &parts);
            if info.role == Role::User {
                self.push_touch(&mut transaction, &session);
            }
            let committed = self.repo.commit(transaction).await;
            if self
                .settle(
                    committed,
                    session_id,
                    (&mut not_operating, None),
                    &mut tries,
                )
                .await?
            {
                break;
            }
        }
        self.touch_step(&session).await;
        Ok(MessageWithParts { info, parts })
    }

    /// A prompt touches its session, as OpenCode's does (`Session.touch` after the user message): its update
    /// time becomes now, announced with `session.updated` after the message's own events, so a client's list
    /// of sessions by update time puts it first (SDK review D6: only a step's end did). Nothing else of the
    /// session changes (`Change::UpdateSession` with no field; the announcement carries the session as
    /// stored). On a reverted session too, after the cleanup's events and the message's, as OpenCode runs
    /// cleanup, then the message, then the touch.
    fn push_touch(&self, transaction: &mut Transaction, session: &Session) {
        let updated = self.now();
        let mut touched = session.clone();
        touched.time.updated = touched.time.updated.max(updated);
        transaction.changes.push(Change::UpdateSession {
            session: session.id.clone(),
            fields: SessionFields::default(),
            updated,
        });
        transaction.events.push(self.updated_event(&touched));
    }

    /// `create_message` on a reverted session (`session` as the checks found it): the session's cleanup
    /// (SPEC 7) and the message are stored in one transaction under the session's lease, so no message or
    /// part is stored between them, and a message that is refused (its parent hidden, its id out of
    /// order, a part id taken in what the cleanup keeps), fails or is killed before its commit leaves the
    /// redo history whole. The message follows the messages the cleanup keeps.
    async fn create_message_reverted(
        &self,
        session: &Session,
        input: NewMessage,
    ) -> Result<MessageWithParts> {
        let session_id = &session.id;
        let lease = self
            .acquire(
                LeaseKey::Session(session_id.clone()),
                &new_token(),
                self.config.operation_lease_ms,
                Some(session_id),
            )
            .await?;
        let result = async {
            let doing = "this message was being recorded";
            let (_, cleanup) = self
                .load_cleaned(session_id, &session.revert, doing)
                .await?;
            // Reverted as the checks saw it (`load_cleaned`), so it comes with its cleanup.
            let Some(cleanup) = cleanup else {
                return Err(Error::busy(
                    session_id,
                    format!(
                        "Session is busy: {session_id} (it was unreverted while {doing}); try again"
                    ),
                ));
            };
            let (info, parts) = self.new_message(session, &infos(&cleanup.kept), input)?;
            let mut transaction = Transaction {
                guards: vec![lease.guard()],
                ..Transaction::default()
            };
            // The cleanup first: a part id it deletes is free for the new message's parts.
            let (_, removed) = cleanup.add_to(&mut transaction);
            transaction.guards.extend(part_id_guards(
                session_id,
                parts
                    .iter()
                    .filter(|p| !removed.contains(&p.id))
                    .map(|p| Some(&p.id)),
            ));
            self.push_message(&mut transaction, info.clone(), &session.directory);
            for part in &parts {
                self.push_part(&mut transaction, part.clone());
            }
            self.push_tool_outside_a_step(&mut transaction, session, &info, &parts);
            if info.role == Role::User {
                self.push_touch(&mut transaction, session);
            }
            self.repo.commit(transaction).await?;
            Ok(MessageWithParts { info, parts })
        }
        .await;
        self.release(&lease).await;
        result
    }

    /// What the commit of a message or part write (`committed`) means for its loop: `true` when it is
    /// stored, `false` when it is to be built again (its reads went stale, or a step began under it:
    /// `not_operating` is then the new lease guard); its error otherwise. `revert_seen` is the revert the
    /// write was checked against.
    async fn settle(
        &self,
        committed: Result<()>,
        session_id: &SessionId,
        (not_operating, revert_seen): (&mut Guard, Option<(MessageId, Option<PartId>)>),
        tries: &mut usize,
    ) -> Result<bool> {
        if matches!(committed, Err(Error::Busy { .. }))
            && let Some(guard) = self
                .lease_now_the_open_step(session_id, not_operating, revert_seen)
                .await?
        {
            *not_operating = guard;
            *tries += 1;
            return Ok(false);
        }
        match super::again_if_stale(committed, tries) {
            Some(done) => done.map(|()| true),
            None => Ok(false),
        }
    }

    /// After a write's commit was refused as busy: the lease guard to build it again with when the
    /// session's lease, free (or another's) at the write's check, is now its open step's (a step began
    /// meanwhile; one after the other, the write would have been recorded in that step), and the revert
    /// is still `revert_seen`; `None` when the refusal stands.
    async fn lease_now_the_open_step(
        &self,
        session_id: &SessionId,
        not_operating: &Guard,
        revert_seen: Option<(MessageId, Option<PartId>)>,
    ) -> Result<Option<Guard>> {
        let session = self.load_session(session_id).await?;
        let Some(step) = &session.step else {
            return Ok(None);
        };
        let Guard::LeaseNotTaken { seen, .. } = not_operating else {
            return Ok(None);
        };
        if seen.as_ref() == Some(&step.token)
            || session.revert.as_ref().map(|r| r.point()) != revert_seen
        {
            return Ok(None);
        }
        Ok(match self.refuse_while_operating(&session).await {
            Ok(guard) if matches!(&guard, Guard::LeaseNotTaken { seen: Some(token), .. } if token == &step.token) => {
                Some(guard)
            }
            _ => None,
        })
    }

    /// The message `input` describes, following `messages` (the session's), with its parts; the checks of
    /// the input made here are its id's order, its parent and its parts' order. That its parts' ids are
    /// free in the session is the caller's to check (`refuse_taken_part_ids`, or the commit's guards), and
    /// its fields and parts, before anything else (`reject_message_input`).
    fn new_message(
        &self,
        session: &Session,
        messages: &[Message],
        input: NewMessage,
    ) -> Result<(Message, Vec<Part>)> {
        let mut info = self.message_info(
            &session.id,
            messages,
            input.role,
            (input.id, input.parent_id),
            input.extra,
        )?;
        info.fill_required_fields(&session.directory);
        let parts = self.build_parts(&info, None, input.parts)?;
        Ok((info, parts))
    }

    /// The message following `messages` (the session's) with role `role`, the client's id and parent
    /// (`given`), when given, and `extra`: its id's order and its parent are checked here.
    fn message_info(
        &self,
        session_id: &SessionId,
        messages: &[Message],
        role: Role,
        (id, parent): (Option<MessageId>, Option<MessageId>),
        extra: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Message> {
        let last = messages.last().map(|m| m.id.clone());
        let id = match id {
            Some(id) => {
                ensure_sorts_after(&id, last.as_ref())?;
                id
            }
            None => self.ids.ascending(self.now(), last.as_ref()),
        };
        let parent_id = match role {
            Role::User => None,
            Role::Assistant => Some(assistant_parent(messages, parent)?),
        };
        Ok(Message {
            id,
            session_id: session_id.clone(),
            role,
            time: MessageTime {
                created: self.now(),
                completed: None,
            },
            parent_id,
            extra,
        })
    }

    /// Appends a part (text, tool, or any type rewind does not know) to a message. Step parts come only
    /// from the step operations, so every snapshot a patch names is one rewind took.
    pub async fn append_part(
        &self,
        session_id: &SessionId,
        message_id: &MessageId,
        input: NewPart,
    ) -> Result<Part> {
        // Before preparing the worktree, as `create_message`.
        reject_recorded_kinds(std::slice::from_ref(&input))?;
        let session = self.load_prepared(session_id).await?;
        let mut not_operating = self.refuse_while_operating(&session).await?;
        // Its head only: a long message's parts are not read for each part appended to it.
        let message = self.load_message_head(session_id, message_id).await?;
        refuse_reverted_message(&session, message_id)?;
        // In the message the revert point lies in, a new part would come after the point: hidden at once,
        // and deleted by the next cleanup.
        if let Some(point) = revert_point_of(&session)
            && &point.message_id == message_id
            && let Some(part) = &point.part_id
        {
            return Err(Error::InvalidInput(format!(
                "message {message_id} is reverted from part {part} on; unrevert the session or record a new \
                 message"
            )));
        }
        // A part id another message has is refused by this guard, in the commit.
        let id_free = part_id_guards(session_id, std::iter::once(input.id.as_ref())).next();
        let given = input.id.is_some();
        let mut last = message.last_part;
        let mut parts = self.build_parts(&message.info, last.clone(), vec![input])?;
        let mut part = parts
            .pop()
            .ok_or_else(|| Error::InvalidInput("no part given".to_owned()))?;
        // A call that comes after its message's step was aborted (abandoned while its client was still at
        // work: by this very request, say) is ended as that abort ended the message's calls, not stored
        // running for good: nothing could end it afterwards (multi-server fuzz). A step begun on the
        // message again takes the abort back (`note_step_begun`), and its calls are stored as they come.
        if message.info.last_step_aborted()
            && session
                .step
                .as_ref()
                .is_none_or(|step| &step.message_id != message_id)
            && let PartBody::Tool(tool) = &part.body
            && let Some(ended) = tool.aborted(self.now())
        {
            part.body = PartBody::Tool(ended);
        }
        let as_checked = Guard::RevertIs {
            session: session_id.clone(),
            point: session.revert.as_ref().map(|r| r.point()),
        };
        // Held while the warning is to be said; given back if the part is not stored with it.
        let mut claim = self
            .tool_outside_a_step(&session, &message.info, &part)
            .await
            .then(|| ToolWarningClaim {
                rewind: self,
                message: message_id,
                kept: false,
            });
        let mut tries = 0;
        loop {
            if tries > 0 && claim.is_some() {
                // A step of the message begun under this write: the part is inside it after all.
                let now = self.load_session(session_id).await?;
                if now.step.is_some_and(|step| &step.message_id == message_id) {
                    claim = None;
                }
            }
            if tries > 0 {
                // A part stored since: this one follows it, or is refused as it would have been then.
                last = self
                    .load_message_head(session_id, message_id)
                    .await?
                    .last_part;
                if given {
                    ensure_sorts_after(&part.id, last.as_ref())?;
                } else {
                    part.id = self.ids.ascending(self.now(), last.as_ref());
                }
            }
            let last_is = Guard::LastPartIs {
                session: session_id.clone(),
                message: message_id.clone(),
                part: last.clone(),
            };
            let mut transaction = Transaction {
                guards: [not_operating.clone(), as_checked.clone()]
                    .into_iter()
                    .chain(id_free.clone())
                    .chain([last_is])
                    .collect(),
                ..Transaction::default()
            };
            self.push_part(&mut transaction, part.clone());
            if claim.is_some() {
                let warning = self.tool_outside_a_step_warning(&session, message_id, &part.id);
                self.push_warning(&mut transaction, session_id, warning);
            }
            let committed = self.repo.commit(transaction).await;
            let revert_seen = session.revert.as_ref().map(|r| r.point());
            if self
                .settle(
                    committed,
                    session_id,
                    (&mut not_operating, revert_seen),
                    &mut tries,
                )
                .await?
            {
                break;
            }
        }
        if let Some(claim) = &mut claim {
            claim.kept = true;
        }
        self.touch_step(&session).await;
        Ok(part)
    }

    /// Whether `part` is a tool part recorded while no step of its assistant message is open, the first
    /// such part of that message (the warning is said once per message). A step is a `step-start`, its tool
    /// parts, then its `step-finish` (SPEC's glossary): what a tool changes before its step begins is in the
    /// step's start snapshot, and what it changes after the step finished in no patch, so neither is undone
    /// (OpenCode's `snapshot-tool-race` test guards its own processor against the first; a client of
    /// rewind begins the step itself). Said, as rewind cannot tell when the tool ran.
    ///
    /// Once per message: claimed in this process first (two appends at once say it once), then looked for
    /// among the session's warnings (said by another process, or before a restart), which are read at most
    /// once per message; warnings that cannot be read say it again rather than fail the append.
    async fn tool_outside_a_step(&self, session: &Session, message: &Message, part: &Part) -> bool {
        if !matches!(part.body, PartBody::Tool(_))
            || message.role != Role::Assistant
            || session
                .step
                .as_ref()
                .is_some_and(|step| step.message_id == message.id)
            || !self.claim_tool_warning(&message.id)
        {
            return false;
        }
        let said = tool_outside_a_step_words(&message.id);
        !self.repo.warnings(&session.id).await.is_ok_and(|warnings| {
            warnings
                .iter()
                .any(|warning| warning.message.contains(&said))
        })
    }

    /// Whether this process is the first to warn of `message`'s tool parts outside a step; a claim is given
    /// back (`ToolWarningClaim`) when the part is not stored with its warning (it was inside a step after
    /// all, or the append failed). Bounded: past 10,000 messages the claims are forgotten (such a message's
    /// warnings are read again).
    fn claim_tool_warning(&self, message: &MessageId) -> bool {
        let mut warned = self
            .tool_warned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if warned.len() >= 10_000 {
            warned.clear();
        }
        warned.insert(message.clone())
    }

    fn give_back_tool_warning(&self, message: &MessageId) {
        self.tool_warned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(message);
    }

    /// A new assistant message's parts: the warning for the first tool part among them, if any (no step of
    /// a message not stored yet is open; [`Self::tool_outside_a_step`]).
    fn push_tool_outside_a_step(
        &self,
        transaction: &mut Transaction,
        session: &Session,
        info: &Message,
        parts: &[Part],
    ) {
        if info.role != Role::Assistant {
            return;
        }
        if let Some(tool) = parts.iter().find(|p| matches!(p.body, PartBody::Tool(_))) {
            let warning = self.tool_outside_a_step_warning(session, &info.id, &tool.id);
            self.push_warning(transaction, &session.id, warning);
            self.claim_tool_warning(&info.id);
        }
    }

    /// The warning for a tool part recorded while no step of its message was open
    /// ([`Self::tool_outside_a_step`]).
    fn tool_outside_a_step_warning(
        &self,
        session: &Session,
        message_id: &MessageId,
        part: &PartId,
    ) -> Warning {
        Warning {
            time: self.now(),
            message: format!(
                "tool part {part}: {}. What a tool changes outside a step is in no step's patch, so undo and \
                 revert do not take it back (it counts as a change made outside the session's steps): begin a \
                 step (`POST /session/{}/message/{message_id}/step`) before the agent's tools run, and record \
                 their parts before it finishes. Said once per message",
                tool_outside_a_step_words(message_id),
                session.id
            ),
            snapshot: None,
            files: Vec::new(),
        }
    }

    /// Begins a step of an assistant message: takes the session's lease for the step, snapshots the
    /// worktree and appends `step-start`.
    pub async fn begin_step(&self, session_id: &SessionId, message_id: &MessageId) -> Result<Part> {
        let session = self.load_prepared(session_id).await?;
        refuse_open_step(&session)?;
        // Checked before cleanup, which deletes for good: a refused step changes nothing.
        let message = self.load_message_head(session_id, message_id).await?;
        if message.info.role != Role::Assistant {
            return Err(Error::InvalidInput(format!(
                "message {message_id} is a user message; steps belong to assistant messages"
            )));
        }
        refuse_reverted_message(&session, message_id)?;
        self.under_step_lease(session_id, async |session_lease| {
            let (session, cleanup) = self
                .load_cleaned(session_id, &session.revert, "this step was starting")
                .await?;
            // Under the step's lease: no step begins or ends meanwhile. The cleanup, if any, is stored with
            // the step's start: a refusal here changes nothing.
            match &cleanup {
                Some(cleanup) => refuse_before_later_steps(&cleanup.kept, message_id)?,
                None => refuse_before_later_steps(
                    &self.repo.messages_from(session_id, message_id).await?,
                    message_id,
                )?,
            }
            let mut message = self.load_message_head(session_id, message_id).await?;
            if let Some(kept) = cleanup
                .as_ref()
                .and_then(|c| c.kept.iter().find(|m| &m.info.id == message_id))
            {
                // The step-start follows the parts the cleanup keeps, not those it cuts in the same
                // transaction (a revert point inside this message).
                message.last_part = kept.parts.last().map(|p| p.id.clone());
            }
            self.store_step_start(&session, (&message, &[]), session_lease, cleanup)
                .await
        })
        .await
    }

    /// A whole turn's start in one go: a user message, the assistant message answering it, and a step of
    /// that assistant message (`begin_step`), stored in one transaction. When the step cannot begin (the
    /// session or its worktree is busy, the snapshot fails), nothing is recorded: no turn is left without
    /// its step. `rewind exec` records its command this way.
    pub async fn begin_turn(
        &self,
        session_id: &SessionId,
        user: NewMessage,
        assistant: NewMessage,
    ) -> Result<(MessageWithParts, MessageWithParts, Part)> {
        if user.role != Role::User || assistant.role != Role::Assistant {
            return Err(Error::InvalidInput(
                "a turn is a user message and an assistant message".to_owned(),
            ));
        }
        reject_message_input(&user)?;
        reject_message_input(&assistant)?;
        let session = self.load_prepared(session_id).await?;
        refuse_open_step(&session)?;
        if let Some(point) = revert_point_of(&session) {
            // Checked on the messages cleanup keeps before it deletes for good: a refused turn changes
            // nothing.
            let kept = self.kept_messages(session_id, &point).await?;
            let (new_user, new_assistant) =
                self.new_turn(&session, infos(&kept), user.clone(), assistant.clone())?;
            refuse_taken_part_ids(&kept, &new_user.parts)?;
            refuse_taken_part_ids(&kept, &new_assistant.parts)?;
        }
        self.under_step_lease(session_id, async |session_lease| {
            let reverted = session.revert.clone();
            let (session, cleanup) = self
                .load_cleaned(session_id, &reverted, "this step was starting")
                .await?;
            // Without their parts; the new parts' ids are checked by the commit's guards. A reverted
            // session's are those its cleanup keeps (stored with the step, so a turn that cannot begin
            // leaves the redo history as it was).
            let messages = match &cleanup {
                Some(cleanup) => infos(&cleanup.kept),
                None => self.repo.message_infos(session_id).await?,
            };
            let (user, assistant) = self.new_turn(&session, messages, user, assistant)?;
            let head = MessageHead {
                info: assistant.info.clone(),
                last_part: assistant.parts.last().map(|p| p.id.clone()),
            };
            let part = self
                .store_step_start(
                    &session,
                    (&head, &[&user, &assistant]),
                    session_lease,
                    cleanup,
                )
                .await?;
            Ok((user, assistant, part))
        })
        .await
    }

    /// The messages of a reverted session that its cleanup keeps (those before the revert point `point`):
    /// what a new message is checked against before cleanup deletes the rest for good.
    async fn kept_messages(
        &self,
        session_id: &SessionId,
        point: &crate::revert::RevertPoint,
    ) -> Result<Vec<MessageWithParts>> {
        Ok(self
            .repo
            .messages(session_id)
            .await?
            .into_iter()
            .filter(|m| !crate::revert::is_hidden(point, &m.info.id, None))
            .map(|mut m| {
                // The parts of the point's message from the point's part on go too.
                let id = m.info.id.clone();
                m.parts
                    .retain(|p| !crate::revert::is_hidden(point, &id, Some(&p.id)));
                m
            })
            .collect())
    }

    /// A user message following `messages` and the assistant message answering it (not stored). The two
    /// have no part id in common; the session's other parts are the caller's to check.
    fn new_turn(
        &self,
        session: &Session,
        mut messages: Vec<Message>,
        user: NewMessage,
        assistant: NewMessage,
    ) -> Result<(MessageWithParts, MessageWithParts)> {
        let (info, parts) = self.new_message(session, &messages, user)?;
        let user = MessageWithParts { info, parts };
        messages.push(user.info.clone());
        let (info, parts) = self.new_message(session, &messages, assistant)?;
        refuse_taken_part_ids(std::slice::from_ref(&user), &parts)?;
        Ok((user, MessageWithParts { info, parts }))
    }

    /// Runs `locked` holding the session's lease for a step (taken with a new token, for the step
    /// timeout); the lease is released when `locked` fails, and kept by the step otherwise.
    async fn under_step_lease<T>(
        &self,
        session_id: &SessionId,
        locked: impl AsyncFnOnce(&super::HeldLease) -> Result<T>,
    ) -> Result<T> {
        let token = new_token();
        let session_lease = self.acquire_step(session_id, &token).await?;
        let result = locked(&session_lease).await;
        if result.is_err() {
            self.release(&session_lease).await;
        }
        result
    }

    /// The session read again under the session's lease, reverted as the checks before found it
    /// (`reverted`): a revert, unrevert or cleanup, or a step, may have come between the checks and the
    /// lease (`Busy` then, saying what was `doing`). A reverted session comes with its cleanup, which the
    /// caller's own transaction stores (SPEC 7: cleanup before a message is created or a step begins), and
    /// as the cleanup leaves it.
    async fn load_cleaned(
        &self,
        session_id: &SessionId,
        reverted: &Option<crate::model::RevertDescriptor>,
        doing: &str,
    ) -> Result<(Session, Option<super::revert::Cleanup>)> {
        let session = self.load_session(session_id).await?;
        if session.revert != *reverted || session.step.is_some() {
            return Err(Error::busy(
                session_id,
                format!(
                    "Session is busy: {session_id} (it was reverted, unreverted, or a step began, while \
                     {doing}); try again"
                ),
            ));
        }
        match &session.revert {
            Some(descriptor) => {
                let messages = self.repo.messages(session_id).await?;
                let cleanup = self.cleanup_of(&session, descriptor, &messages).await?;
                Ok((cleanup.session.clone(), Some(cleanup)))
            }
            None => Ok((session, None)),
        }
    }

    /// Tracks and stores the step-start of `message`, with `new` messages (not stored yet) stored first in
    /// the same transaction. The worktree's lease is held meanwhile: the step-start is stored before it is
    /// given up, so no operation on the worktree sees the worktree tracked for a step that is not open.
    /// The new ids follow what was read under the session's lease, which no other message or part is
    /// stored under (`refuse_while_operating`, `Guard::LeaseNotTaken`): they need no order guard.
    async fn store_step_start(
        &self,
        session: &Session,
        message: (&MessageHead, &[&MessageWithParts]),
        session_lease: &super::HeldLease,
        cleanup: Option<super::revert::Cleanup>,
    ) -> Result<Part> {
        let worktree_lease = self
            .acquire(
                LeaseKey::Worktree(session.directory.clone()),
                &session_lease.token,
                self.config.operation_lease_ms,
                Some(&session.id),
            )
            .await?;
        let result = self
            .store_step_start_locked(session, message, (session_lease, &worktree_lease), cleanup)
            .await;
        self.release(&worktree_lease).await;
        result
    }

    async fn store_step_start_locked(
        &self,
        session: &Session,
        (message, new): (&MessageHead, &[&MessageWithParts]),
        (session_lease, worktree_lease): (&super::HeldLease, &super::HeldLease),
        cleanup: Option<super::revert::Cleanup>,
    ) -> Result<Part> {
        let tracked = self.snapshots.track(worktree(session)).await?;
        let now = self.now();
        let part = Part {
            id: self.ids.ascending(now, message.last_part.as_ref()),
            session_id: session.id.clone(),
            message_id: message.info.id.clone(),
            body: PartBody::StepStart(StepStartPart {
                snapshot: Some(tracked.id.clone()),
                extra: Default::default(),
            }),
        };
        let mut updated = session.clone();
        updated.step = Some(OpenStep {
            message_id: message.info.id.clone(),
            snapshot: tracked.id,
            token: session_lease.token.clone(),
            holder: self.holder(),
            started: now,
        });
        let newly_skipped = newly_skipped(session, &tracked.skipped);
        updated.skipped = tracked.skipped.iter().map(|s| s.path.clone()).collect();
        updated.time.updated = now;
        let mut transaction = Transaction {
            guards: vec![session_lease.guard(), worktree_lease.guard()],
            ..Default::default()
        };
        // A reverted session's cleanup first: the rest is built on the session it leaves.
        let removed: HashSet<PartId> = cleanup
            .map(|cleanup| cleanup.add_to(&mut transaction).1)
            .unwrap_or_default();
        let mut working = message.info.clone();
        working.time.completed = None;
        working.note_step_begun();
        if working != message.info {
            // Working again: complete only when this step ends.
            self.push_message(&mut transaction, working, &session.directory);
        }
        for created in new {
            // Their ids were checked against the new messages only: free in the rest of the session too
            // (a hidden part the cleanup deletes first may have one: checked against the kept messages).
            transaction.guards.extend(part_id_guards(
                &session.id,
                created
                    .parts
                    .iter()
                    .filter(|p| !removed.contains(&p.id))
                    .map(|p| Some(&p.id)),
            ));
            self.push_message(&mut transaction, created.info.clone(), &session.directory);
            for part in &created.parts {
                self.push_part(&mut transaction, part.clone());
            }
            // A turn's prompt touches the session as the prompt route's does (`push_touch`): announced
            // after the user message's events, with the session as this transaction stores it.
            if created.info.role == Role::User {
                transaction.events.push(self.updated_event(&updated));
            }
        }
        // Busy before the step-start part, as OpenCode marks a session busy before its step begins (black-box:
        // a client saw the part first); after the turn's new messages, as OpenCode records the user's first.
        transaction
            .events
            .push(self.event(EventPayload::SessionStatus {
                session_id: session.id.clone(),
                status: SessionStatus::Busy,
            }));
        self.push_part(&mut transaction, part.clone());
        transaction
            .changes
            .push(Change::PutSession(Box::new(updated.clone())));
        self.push_skipped_warning(&mut transaction, &updated, &newly_skipped);
        self.push_steps_beside_warnings(&mut transaction, session)
            .await?;
        self.repo.commit(transaction).await?;
        Ok(part)
    }

    /// Warns this session and each other session with a step open in the same worktree (or one inside or
    /// around it) when this session's step begins beside theirs: rewind snapshots the whole worktree, so
    /// each step records what the other changes meanwhile, and a revert of either undoes both. Two steps
    /// that overlap in time always meet here: the later one begins while the earlier is open. Read under
    /// the worktree's lease, which every step's beginning and end take, so no step begins or ends
    /// meanwhile. (Review: concurrent steps recorded each other's changes without a word.)
    async fn push_steps_beside_warnings(
        &self,
        transaction: &mut Transaction,
        session: &Session,
    ) -> Result<()> {
        let now = self.now();
        for other in self.repo.sessions_overlapping(&session.directory).await? {
            let Some(other_step) = other.step.as_ref().filter(|_| other.id != session.id) else {
                continue;
            };
            // Once for each pair while the other's step stays open: its session is not told again at
            // each step this one begins beside it, nor this one at each of its steps (review: a long
            // `exec` beside an agent's hundred steps got a hundred copies).
            // A list that cannot be read (a damaged warning row) counts as not told: the warning is only
            // advice, and must not keep the step from beginning (review).
            let told = async |whom: &SessionId, of: &SessionId| -> bool {
                self.repo.warnings(whom).await.is_ok_and(|warnings| {
                    warnings.iter().any(|w| {
                        w.time >= other_step.started
                            && w.message.contains(STEPS_BESIDE)
                            && w.message.contains(of.as_str())
                    })
                })
            };
            let tell_this = !told(&session.id, &other.id).await;
            let tell_other = !told(&other.id, &session.id).await;
            let why = format!(
                "rewind snapshots the whole worktree, so {STEPS_BESIDE} while both are open, and reverting \
                 either one also undoes the other's changes in that time. Run one agent at a time in a \
                 worktree, or give each session a worktree of its own (a git worktree, say), to keep them \
                 apart"
            );
            let mine = Warning {
                time: now,
                message: format!(
                    "this session's step began while a step of session {} is open in {}: {why}",
                    other.id, other.directory
                ),
                snapshot: None,
                files: Vec::new(),
            };
            let theirs = Warning {
                time: now,
                message: format!(
                    "a step of session {} began in {} while this session's step is open: {why}",
                    session.id, session.directory
                ),
                snapshot: None,
                files: Vec::new(),
            };
            if tell_this {
                self.push_warning(transaction, &session.id, mine);
            }
            if tell_other {
                self.push_warning(transaction, &other.id, theirs);
            }
        }
        Ok(())
    }

    /// Finishes the open step of `message_id`: snapshots again, appends `step-finish` and, when files
    /// changed, a `patch`; updates the turn's `summary.diffs`.
    pub async fn finish_step(
        &self,
        session_id: &SessionId,
        message_id: &MessageId,
        end: StepEnd,
    ) -> Result<Vec<Part>> {
        let session = self.load_session(session_id).await?;
        let step = match open_step_of(&session, message_id) {
            Ok(step) => step,
            Err(error) => return Err(self.explain_no_step(&session, message_id, error).await),
        };
        check_usage(&session, &end)?;
        // Abandoned (its owner gone, or its HTTP client silent past the step timeout): the step is aborted,
        // as the next operation on the session aborts it (SPEC section 4), and the answer says so (review:
        // 409 naming a dead process, and the step left open until some other operation came; a timed-out
        // step finished as `stop`, or aborted when a part came first). The finish's usage is the step's,
        // and its end is now, not late (`Closing::EndedNow`).
        if self.step_is_abandoned(&session).await? {
            let aborted = StepEnd {
                reason: Some("aborted".to_owned()),
                ..end
            };
            let session = self
                .abort_as_read(session, aborted, Closing::EndedNow)
                .await?;
            return Err(self
                .explain_no_step(
                    &session,
                    message_id,
                    Error::InvalidInput(format!(
                        "no step is open in message {message_id} of session {session_id}"
                    )),
                )
                .await);
        }
        if !self.speaks_for(&step.holder) {
            return Err(self.step_busy(&session, &step, "").await);
        }
        self.close_step(&session, end, Closing::EndedNow)
            .await?
            .ok_or_else(|| {
            Error::InvalidInput(format!(
                "no step is open in message {message_id} of session {session_id} (it was closed meanwhile)"
            ))
        })
    }

    /// Aborts the open step of `message_id`, so what it changed can still be reverted.
    pub async fn abort_step(
        &self,
        session_id: &SessionId,
        message_id: &MessageId,
    ) -> Result<Vec<Part>> {
        let session = self.load_session(session_id).await?;
        if let Err(error) = open_step_of(&session, message_id) {
            return Err(self.explain_no_step(&session, message_id, error).await);
        }
        // The step just looked at, not whichever is open when the abort reads the session again: that one
        // may have finished since, and a step begun on another message (review: it was aborted instead).
        self.abort_as_read(session, aborted_end(), Closing::Aborted)
            .await?;
        let message = self.load_message(session_id, message_id).await?;
        let parts = message.parts;
        let from = parts
            .iter()
            .rposition(|p| matches!(p.body, PartBody::StepFinish(_)))
            .unwrap_or(parts.len());
        Ok(parts[from..].to_vec())
    }

    /// `POST /session/:id/abort`: aborts the open step when this process owns it or its owner is gone; a
    /// step owned by another live process is not taken from it (`Busy`).
    pub async fn abort(&self, session_id: &SessionId) -> Result<Session> {
        let session = self.load_session(session_id).await?;
        self.abort_as_read(session, aborted_end(), Closing::Aborted)
            .await
    }

    /// `abort` of the step `session` shows (a step closed since is not closed again, nor another taken
    /// for it: `close_step`), ended with `end` (an abort's reason), closed as `closing` says; the session
    /// as stored afterwards.
    async fn abort_as_read(
        &self,
        session: Session,
        end: StepEnd,
        closing: Closing,
    ) -> Result<Session> {
        let session_id = &session.id;
        let Some(step) = session.step.clone() else {
            return Ok(session);
        };
        let owned = self.speaks_for(&step.holder);
        let gone = self.step_is_abandoned(&session).await?;
        if !owned && !gone {
            return Err(self
                .step_busy(&session, &step, ", which is still running")
                .await);
        }
        let closing = match closing {
            Closing::Aborted if !owned => Closing::Abandoned,
            closing => closing,
        };
        self.close_step(&session, end, closing).await?;
        self.load_session(session_id).await
    }

    /// `Busy` when a live process is at work on the session's open step: its owner, or another process that
    /// is closing it, named by the session's lease it holds (`step_busy`). No step, or an abandoned one
    /// (which the next operation aborts), passes. For a caller about to begin a turn of its own, such as
    /// `rewind exec` (review: it named the step's owner while another process was closing the step).
    pub async fn refuse_if_step_busy(&self, session: &Session) -> Result<()> {
        match &session.step {
            Some(step) if !self.step_is_abandoned(session).await? => Err(self
                .step_busy(session, step, ", which is still running")
                .await),
            _ => Ok(()),
        }
    }

    /// The refusal of an operation on a step another live process owns: named by the holder of the step's
    /// lease when another token holds it (the step is being closed by that one: review, the step's dead
    /// owner was named "still running" while another process aborted its step), else by the step's owner,
    /// `running` said of it.
    async fn step_busy(&self, session: &Session, step: &OpenStep, running: &str) -> Error {
        if let Ok(Some(lease)) = self
            .repo
            .lease(&LeaseKey::Session(session.id.clone()))
            .await
            && lease.token != step.token
        {
            return Error::lease_busy(&lease.key, &lease.holder, Some(&session.id));
        }
        Error::busy(
            &session.id,
            format!(
                "Session is busy: {} (its step is owned by {}{running}); try again when it has finished",
                session.id, step.holder
            ),
        )
    }

    /// Runs recovery for the worktree's intent records and aborts its abandoned steps: what SPEC sections 4
    /// and 8 ask before any operation. Returns the worktree's sessions as they are then. The worktrees
    /// inside it or around it (`/x` and `/x/sub`) count as the same worktree here: a revert of either
    /// writes files of both.
    pub(super) async fn prepare_worktree(&self, directory: &str) -> Result<Vec<Session>> {
        self.recover_worktree(directory).await?;
        let sessions = self.repo.sessions_overlapping(directory).await?;
        let mut aborted = false;
        for session in &sessions {
            if self.step_is_abandoned(session).await? {
                self.close_step(session, aborted_end(), Closing::Abandoned)
                    .await?;
                aborted = true;
            }
        }
        if aborted {
            return self.repo.sessions_overlapping(directory).await;
        }
        Ok(sessions)
    }

    /// What a server does every few seconds with the open steps found abandoned now (SPEC 4), so that no
    /// session stays busy to its clients (no `session.status` idle was sent until some later operation
    /// came; event stream review):
    /// - a step whose owner is a process on this host that is gone (a `rewind exec` killed) is aborted at
    ///   once, its worktree prepared as an operation would prepare it (`prepare_worktree`): nothing of its
    ///   owner can write any more, and what it changed is recorded while it is fresh;
    /// - any other (an HTTP client silent past the step timeout, also one whose step began through a
    ///   server that has ended since, or a step of another host) is announced idle once (`announced`
    ///   holds the step tokens said so far; a step of another server of this host that still runs is that
    ///   server's to announce) and left to the next operation on its session, as before: a client still
    ///   at work (a tool running past the timeout) keeps what it writes until then in the step's patch
    ///   (diff review).
    ///
    /// Steps are found by their session's lease (a step holds it while open), so only the lease table is
    /// read when none is abandoned. A worktree with an interrupted operation in `waiting` (backing off after
    /// a failed recovery) is left alone, as recovery leaves it. One session that cannot be read or whose
    /// step cannot be aborted is reported and the others are seen to.
    pub async fn tend_abandoned_steps(
        &self,
        announced: &HashSet<LeaseToken>,
        waiting: &HashSet<LeaseToken>,
    ) -> Result<AbandonedSteps> {
        let mut report = AbandonedSteps::default();
        let mut prepared: HashSet<String> = HashSet::new();
        let this = self.host.this_process();
        let mut intents = None;
        for lease in self.repo.leases().await? {
            let LeaseKey::Session(id) = &lease.key else {
                continue;
            };
            // A step's lease is judged as a step's (an operation's as any lease): only its steps are seen to.
            if !self.step_lease_is_abandoned(&lease) {
                continue;
            }
            let session = match self.repo.session(id).await {
                Ok(Some(session)) => session,
                Ok(None) => continue,
                Err(error) => {
                    report.failed.push((id.clone(), error));
                    continue;
                }
            };
            if session
                .step
                .as_ref()
                .is_none_or(|step| step.token != lease.token)
            {
                continue;
            }
            let here = lease.holder.process.same_host(&this);
            let gone_here = here && !self.host.is_alive(&lease.holder.process);
            let owner_gone_here = lease.holder.kind == HolderKind::Process && gone_here;
            if !owner_gone_here {
                // Said by the step's own server while it runs (another server on this host would say it
                // again), else by any that sees it.
                let says = lease.holder.process == this || gone_here || !here;
                if says && !announced.contains(&lease.token) {
                    match self.announce_idle(&session.id).await {
                        Ok(()) => report.announced.push(lease.token.clone()),
                        Err(error) => report.failed.push((session.id.clone(), error)),
                    }
                }
                continue;
            }
            if prepared.contains(&session.directory) {
                continue;
            }
            let intents = match &intents {
                Some(intents) => intents,
                None => intents.insert(self.repo.intents().await?),
            };
            if intents.iter().any(|intent| {
                waiting.contains(&intent.token)
                    && worktrees_overlap(&intent.directory, &session.directory)
            }) {
                continue;
            }
            prepared.insert(session.directory.clone());
            // A step whose end cannot be snapshotted now is closed without a patch (SPEC 4): when that is
            // the store's disk (full, read-only), the pass waits for it instead, as no one is waiting on
            // this abort (black-box review: the step stayed unrevertable after space was freed).
            if let Err(error @ Error::Storage { .. }) =
                self.snapshots.track(worktree(&session)).await
            {
                report.failed.push((session.id.clone(), error));
                continue;
            }
            match self.prepare_worktree(&session.directory).await {
                Ok(after) => {
                    let closed = after
                        .iter()
                        .find(|now| now.id == session.id)
                        .is_none_or(|now| now.step.as_ref().is_none_or(|s| s.token != lease.token));
                    if closed {
                        report.aborted.push(session.id.clone());
                    }
                }
                // Another process is closing it, or an operation holds the worktree: the next pass sees.
                Err(Error::Busy { .. } | Error::LeaseLost(_)) => {}
                Err(error) => report.failed.push((session.id.clone(), error)),
            }
        }
        Ok(report)
    }

    /// Publishes `session.status` idle (and `session.idle`) for a session whose open step is abandoned: its
    /// clients see what `GET /session/status` says; the step itself is aborted by the next operation.
    async fn announce_idle(&self, session: &SessionId) -> Result<()> {
        let transaction = Transaction {
            events: vec![
                self.event(EventPayload::SessionStatus {
                    session_id: session.clone(),
                    status: SessionStatus::Idle,
                }),
                self.event(EventPayload::SessionIdle {
                    session_id: session.clone(),
                }),
            ],
            ..Transaction::default()
        };
        self.repo.commit(transaction).await
    }

    /// Closes the session's open step (as `session` shows it): the step's lease is taken (over) with its own
    /// token, the session is read again, and, when that step is still open, the worktree is tracked and the
    /// finish, patch, summary and status are stored in one transaction. `None` when the step was closed
    /// meanwhile (by its owner, or by another operation that found it abandoned): a step is closed once.
    /// Closed by its owner (this process: a finish, or an abort of its own step), it takes the step's own
    /// lease; otherwise only a lease that may be taken over (the step was found abandoned:
    /// `take_step_lease`). `closing` says whether its end snapshot may be late (`late_end_warning`).
    async fn close_step(
        &self,
        session: &Session,
        end: StepEnd,
        closing: Closing,
    ) -> Result<Option<Vec<Part>>> {
        let step = session.step.clone().ok_or_else(|| {
            Error::InvalidInput(format!("no step is open in session {}", session.id))
        })?;
        let as_owner = self.speaks_for(&step.holder);
        let (session_lease, replaced) = self.take_step_lease(&session.id, &step, as_owner).await?;
        // An owner's abort of a step whose lease had lapsed (its HTTP client silent past the step timeout)
        // is as late as another's (review: the user's edits since went into the patch without a word).
        let late = match closing {
            Closing::EndedNow => false,
            Closing::Abandoned => true,
            Closing::Aborted => replaced
                .as_ref()
                .is_none_or(|lease| self.is_abandoned(lease)),
        };
        let result = async {
            let current = self.load_session(&session.id).await?;
            match &current.step {
                Some(open) if open.token == step.token => self
                    .close_step_locked(&current, &step, (end, late), &session_lease)
                    .await
                    .map(Some),
                _ => Ok(None),
            }
        }
        .await;
        // Not closed (as the session now says): the step stays open, with its lease. When the session
        // cannot be read (the database away), that is decided once it answers (`Return::StepCloser`).
        if result.is_err() {
            match self.repo.session(&session.id).await {
                Ok(now)
                    if now
                        .as_ref()
                        .and_then(|now| now.step.as_ref())
                        .is_some_and(|open| open.token == step.token) =>
                {
                    self.hand_back_step_lease(&session_lease, replaced).await;
                }
                Ok(_) => self.release(&session_lease).await,
                Err(_) => self.note_unreturned(
                    &session_lease,
                    super::leases::Return::StepCloser {
                        session: session.id.clone(),
                        step: step.token.clone(),
                        replaced,
                    },
                ),
            }
        } else {
            self.release(&session_lease).await;
        }
        result
    }

    /// Takes the worktree's lease (with the step's token) and closes the step under it, from its track to
    /// its commit: a step never snapshots a half-reverted tree, and gc, which reads what to keep under
    /// that lease, never reads it between the end snapshot's track and the commit that stores its id.
    async fn close_step_locked(
        &self,
        session: &Session,
        step: &OpenStep,
        end: (StepEnd, bool),
        session_lease: &super::HeldLease,
    ) -> Result<Vec<Part>> {
        let worktree_lease = match self
            .acquire(
                LeaseKey::Worktree(session.directory.clone()),
                &session_lease.token,
                self.config.operation_lease_ms,
                Some(&session.id),
            )
            .await
        {
            Ok(lease) => lease,
            // A revert or another session's step in or around the worktree: the step stays open, and the
            // refusal names the holder.
            Err(Error::Busy { message, .. }) => {
                return Err(not_finished_yet(&session.id, &message));
            }
            Err(error) => return Err(error),
        };
        let result = self
            .close_step_under(session, step, end, (session_lease, &worktree_lease))
            .await;
        self.release(&worktree_lease).await;
        result
    }

    /// `late`: the end snapshot may come long after the step's owner stopped (`close_step`).
    async fn close_step_under(
        &self,
        session: &Session,
        step: &OpenStep,
        (end, late): (StepEnd, bool),
        (session_lease, worktree_lease): (&super::HeldLease, &super::HeldLease),
    ) -> Result<Vec<Part>> {
        let directory = session.directory.clone();
        // The message's head, and later its turn: a step's end does not read the whole session.
        let message = self
            .load_message_head(&session.id, &step.message_id)
            .await?;
        let mut warnings = Vec::new();
        let mut skipped_now = None;
        let (snapshot, reason, files) = match self
            .snapshots
            .track_changes(worktree(session), &step.snapshot)
            .await
        {
            Ok((tracked, listed)) => {
                // Files the step's start already left out were named then, not a second time.
                let skipped = newly_skipped(session, &tracked.skipped);
                warnings.extend(skipped_warnings(self.now(), &directory, &skipped));
                skipped_now = Some(tracked.skipped.iter().map(|s| s.path.clone()).collect());
                match self.step_changes(session, step, &tracked, listed).await {
                    Ok((files, ignored)) => {
                        warnings.extend(ignored);
                        (
                            Some(tracked.id),
                            end.reason.clone().unwrap_or_else(|| "stop".to_owned()),
                            files,
                        )
                    }
                    Err(Error::Busy { message, .. }) => {
                        return Err(not_finished_yet(&session.id, &message));
                    }
                    // The start's snapshot is gone from the store: the step is closed all the same, with
                    // its end snapshot and no patch (SPEC 4: a failing snapshot never leaves a session
                    // busy; this step could never be closed, and would refuse every operation in the
                    // worktree). Another failure (the worktree read again, the database) leaves it open, as
                    // one that may pass when tried again.
                    Err(error @ (Error::MissingObject(_) | Error::Damaged(_))) => {
                        warnings.push(self.unrevertable_step(
                            format!("what this step changed cannot be worked out ({error})"),
                            Some(tracked.id.clone()),
                            Vec::new(),
                        ));
                        (Some(tracked.id), "error".to_owned(), Vec::new())
                    }
                    Err(error) => return Err(error),
                }
            }
            // The store's lock is held: the step stays open, and the refusal names the holder.
            Err(Error::Busy { message, .. }) => {
                return Err(not_finished_yet(&session.id, &message));
            }
            Err(error) => {
                let files = match &error {
                    Error::Unreadable { path, .. } => {
                        vec![format!("{}/{path}", directory.trim_end_matches('/'))]
                    }
                    _ => Vec::new(),
                };
                // The step's start snapshot holds the files as they were before it.
                warnings.push(self.unrevertable_step(
                    format!("the snapshot at the end of this step failed ({error})"),
                    Some(step.snapshot.clone()),
                    files,
                ));
                (None, "error".to_owned(), Vec::new())
            }
        };
        let now = self.now();
        if late && !files.is_empty() {
            warnings.push(late_end_warning(now, step, &directory, &files, &snapshot));
        }
        let mut last = message.last_part.clone();
        let mut next_id = |ids: &crate::id::IdGenerator| {
            let id: PartId = ids.ascending(now, last.as_ref());
            last = Some(id.clone());
            id
        };
        let tokens = end.tokens.unwrap_or_default();
        let cost = end.cost.unwrap_or(0.0);
        let finish = reason.clone();
        // An aborted step's tool calls that had not ended are ended as failed, as OpenCode's processor does
        // (SDK audit: a client showed them running for good). Their parts keep their ids and places.
        // Asked as an abort: also when the end snapshot failed and the reason became `error`.
        let aborted = finish == "aborted" || end.reason.as_deref() == Some("aborted");
        let calls_ended = if aborted {
            self.tool_calls_aborted(&session.id, &step.message_id, now)
                .await?
        } else {
            Vec::new()
        };
        let mut parts = vec![Part {
            id: next_id(&self.ids),
            session_id: session.id.clone(),
            message_id: step.message_id.clone(),
            body: PartBody::StepFinish(StepFinishPart {
                reason,
                snapshot: snapshot.clone(),
                cost,
                tokens,
                extra: Default::default(),
            }),
        }];
        if !files.is_empty() {
            parts.push(Part {
                id: next_id(&self.ids),
                session_id: session.id.clone(),
                message_id: step.message_id.clone(),
                body: PartBody::Patch(PatchPart {
                    hash: step.snapshot.clone(),
                    files: files.iter().map(|f| f.to_absolute(&directory)).collect(),
                    extra: Default::default(),
                }),
            });
        }
        let mut updated = session.clone();
        updated.step = None;
        if let Some(skipped) = skipped_now {
            updated.skipped = skipped;
        }
        updated.cost += cost;
        updated.tokens = updated.tokens.add(&tokens);
        updated.time.updated = now;

        let mut transaction = Transaction {
            guards: vec![session_lease.guard(), worktree_lease.guard()],
            ..Default::default()
        };
        for part in calls_ended.into_iter().chain(parts.iter().cloned()) {
            self.push_part(&mut transaction, part);
        }
        // The assistant message is complete as of its last step's end (OpenCode's `time.completed`, which a
        // client may not set itself); a step begun after clears it again.
        let mut completed = message.info.clone();
        completed.time.completed = Some(now);
        completed.add_step_usage(cost, end.tokens.as_ref());
        completed.note_step_end(&finish, aborted);
        self.push_message(&mut transaction, completed, &directory);
        // The turn's summary is left as it was when its diff cannot be made (a snapshot of the turn gone
        // from the store): the step is closed all the same.
        if let Some(end_snapshot) = &snapshot {
            match self
                .turn_summary(&session.id, &message.info, end_snapshot, &directory)
                .await
            {
                Ok(Some(user)) => self.push_message(&mut transaction, user, &directory),
                Ok(None) | Err(Error::MissingObject(_) | Error::Damaged(_)) => {}
                Err(error) => return Err(error),
            }
        }
        for warning in warnings {
            self.push_warning(&mut transaction, &session.id, warning);
        }
        transaction
            .changes
            .push(Change::PutSession(Box::new(updated.clone())));
        transaction
            .events
            .push(self.event(EventPayload::SessionStatus {
                session_id: session.id.clone(),
                status: crate::model::SessionStatus::Idle,
            }));
        transaction
            .events
            .push(self.event(EventPayload::SessionIdle {
                session_id: session.id.clone(),
            }));
        transaction.events.push(self.updated_event(&updated));
        self.repo.commit(transaction).await?;
        Ok(parts)
    }

    /// The tool parts of message `message_id` whose call had not ended (`pending` or `running`), as an abort
    /// at `now` leaves them (`ToolPart::aborted`).
    async fn tool_calls_aborted(
        &self,
        session: &SessionId,
        message_id: &MessageId,
        now: u64,
    ) -> Result<Vec<Part>> {
        let Some(message) = self.repo.message(session, message_id).await? else {
            return Ok(Vec::new());
        };
        Ok(message
            .parts
            .into_iter()
            .filter_map(|part| match &part.body {
                PartBody::Tool(tool) => tool.aborted(now).map(|tool| Part {
                    body: PartBody::Tool(tool),
                    ..part
                }),
                _ => None,
            })
            .collect())
    }

    /// The turn's user message with `summary.diffs` = diff(first step-start of the turn, `end`); none when
    /// it has no step start, or when the turn's last stored step end is the same snapshot `end` (a step that
    /// changed nothing, with nothing changed since the step before: the summary that step made stands, and
    /// the user message, whose diffs can run to megabytes, is neither made, stored nor announced again).
    async fn turn_summary(
        &self,
        session: &SessionId,
        message: &Message,
        end: &crate::model::SnapshotId,
        directory: &str,
    ) -> Result<Option<Message>> {
        let Some(user_id) = &message.parent_id else {
            return Ok(None);
        };
        // The turn's messages come after its user message (ids ascend), which is the first read.
        let messages = self.repo.messages_from(session, user_id).await?;
        let Some(user) = messages.iter().find(|m| &m.info.id == user_id) else {
            return Ok(None);
        };
        let turn_parts = || {
            messages
                .iter()
                .filter(|m| m.info.parent_id.as_ref() == Some(user_id))
                .flat_map(|m| m.parts.iter())
        };
        let first = turn_parts().find_map(|p| match &p.body {
            PartBody::StepStart(start) => start.snapshot.clone(),
            _ => None,
        });
        let Some(first) = first else { return Ok(None) };
        // The end of the turn's last step that has one (a step closed without a snapshot left the summary
        // as it was): the summary was made from it, or left as it was when it could not be made then, as
        // it could not be now.
        let previous_end = turn_parts()
            .filter_map(|p| match &p.body {
                PartBody::StepFinish(finish) => finish.snapshot.as_ref(),
                _ => None,
            })
            .next_back();
        if previous_end == Some(end) {
            return Ok(None);
        }
        let diffs = self
            .snapshots
            .diff(std::path::Path::new(directory), &first, end)
            .await?;
        let mut info = user.info.clone();
        info.set_summary_diffs(&diffs);
        Ok(Some(info))
    }

    /// The warning of a step whose changes cannot be reverted, saying `why`.
    fn unrevertable_step(
        &self,
        why: String,
        snapshot: Option<SnapshotId>,
        files: Vec<String>,
    ) -> Warning {
        Warning {
            time: self.now(),
            message: format!("{why}; {STEP_NOT_REVERTABLE}"),
            snapshot,
            files,
        }
    }

    /// What a step changed, its end tracked as `tracked`: the files that differ from its start's snapshot
    /// in the worktree (`listed`: `changed_files`, which leaves out a path ignored now, from the same look
    /// as `tracked`) and between its two snapshots both (its patch: a file written after the end's
    /// track, by the user a moment later, is not the step's; black-box: under concurrent edits a patch
    /// named files its two snapshots held alike), and the warning for files that left the tracked content
    /// without being named.
    async fn step_changes(
        &self,
        session: &Session,
        step: &OpenStep,
        tracked: &TrackOutcome,
        listed: Result<Vec<RelPath>>,
    ) -> Result<(Vec<RelPath>, Option<Warning>)> {
        let listed = listed?;
        let differing = if tracked.id == step.snapshot {
            Vec::new()
        } else {
            self.snapshots
                .changed_between(worktree(session), &step.snapshot, &tracked.id)
                .await?
        };
        let in_both: HashSet<&RelPath> = differing.iter().collect();
        let files: Vec<RelPath> = listed
            .into_iter()
            .filter(|path| in_both.contains(path))
            .collect();
        let ignored =
            self.newly_ignored_warning(session, &step.snapshot, tracked, &files, &differing);
        Ok((files, ignored))
    }

    /// Renews a server-owned step's lease on any request about its session (the step timeout counts
    /// silence, not duration). Failure is harmless: the step is then judged by its old expiry.
    async fn touch_step(&self, session: &Session) {
        let _ = self.renew_own_step(session, None).await;
    }

    /// The warning for files that left the tracked content during a step without being named in its
    /// patch: they differ between the step's two snapshots, yet `changed_files` leaves them out, as it
    /// leaves out every path ignored now (SPEC 2.4, OpenCode's tests 25-27; a file whose place a
    /// directory ignored as one took, `build/` in a `.gitignore`, included, as git's check-ignore calls
    /// the path ignored), and the end snapshot did not skip them. A file edited or deleted in the same
    /// step that made it ignored is not put back by `undo`; the user should know, and where its content
    /// before the step is.
    fn newly_ignored_warning(
        &self,
        session: &Session,
        start: &SnapshotId,
        tracked: &TrackOutcome,
        patched: &[RelPath],
        differing: &[RelPath],
    ) -> Option<Warning> {
        let named: HashSet<&str> = patched
            .iter()
            .map(RelPath::as_str)
            .chain(tracked.skipped.iter().map(|s| s.path.as_str()))
            .collect();
        let left: Vec<String> = differing
            .iter()
            .filter(|path| !named.contains(path.as_str()))
            .map(|path| path.to_absolute(&session.directory))
            .collect();
        if left.is_empty() {
            return None;
        }
        Some(Warning {
            time: self.now(),
            message: format!(
                "{} file(s) became ignored during this step (a .gitignore or exclude rule changed, a \
                 directory the rules ignore as one took a file's place, or the nested repository whose \
                 own rules tracked them was moved or lost its .git): the step's patch leaves them out, \
                 so undoing it does not put them back; their content before the step is in snapshot \
                 {start}: `rewind snapshot restore {start} PATH…` brings a file back (once a directory \
                 standing at its path is moved away)",
                left.len()
            ),
            snapshot: Some(start.clone()),
            files: left,
        })
    }

    pub(super) async fn load_message(
        &self,
        session: &SessionId,
        message: &MessageId,
    ) -> Result<MessageWithParts> {
        self.repo
            .message(session, message)
            .await?
            .ok_or_else(|| Error::NotFound(format!("Message not found: {message}")))
    }

    /// `load_message` without the parts: the message and its last part's id.
    pub(super) async fn load_message_head(
        &self,
        session: &SessionId,
        message: &MessageId,
    ) -> Result<MessageHead> {
        self.repo
            .message_head(session, message)
            .await?
            .ok_or_else(|| Error::NotFound(format!("Message not found: {message}")))
    }

    fn build_parts(
        &self,
        message: &Message,
        last: Option<PartId>,
        inputs: Vec<NewPart>,
    ) -> Result<Vec<Part>> {
        let mut last = last;
        let mut parts = Vec::with_capacity(inputs.len());
        for input in inputs {
            let id = match input.id {
                Some(id) => {
                    ensure_sorts_after(&id, last.as_ref())?;
                    id
                }
                None => self.ids.ascending(self.now(), last.as_ref()),
            };
            last = Some(id.clone());
            parts.push(Part {
                id,
                session_id: message.session_id.clone(),
                message_id: message.id.clone(),
                body: input.body,
            });
        }
        Ok(parts)
    }

    /// Stores `info` (a message's new state) with its `message.updated` event, with the fields OpenCode's
    /// schema requires (a message stored by an older rewind lacks them; `directory` is its session's).
    fn push_message(&self, transaction: &mut Transaction, mut info: Message, directory: &str) {
        info.fill_required_fields(directory);
        transaction
            .events
            .push(self.event(EventPayload::MessageUpdated {
                session_id: info.session_id.clone(),
                info: Box::new(info.clone()),
            }));
        transaction.changes.push(Change::PutMessage(Box::new(info)));
    }

    fn push_part(&self, transaction: &mut Transaction, part: Part) {
        transaction
            .events
            .push(self.event(EventPayload::PartUpdated {
                session_id: part.session_id.clone(),
                part: Box::new(part.clone()),
                time: self.now(),
            }));
        transaction.changes.push(Change::PutPart(Box::new(part)));
    }

    fn push_skipped_warning(
        &self,
        transaction: &mut Transaction,
        session: &Session,
        skipped: &[SkippedPath],
    ) {
        if skipped.is_empty() {
            return;
        }
        let warning = skipped_warning(self.now(), &session.directory, skipped);
        self.push_warning(transaction, &session.id, warning);
    }
}

/// A guard for each of `parts` whose id the client gave (`given`): no other request stores a part with
/// that id between the check and the commit.
fn part_id_guards<'a>(
    session: &SessionId,
    given: impl Iterator<Item = Option<&'a PartId>>,
) -> impl Iterator<Item = Guard> {
    given.flatten().map(|part| Guard::PartIdFree {
        session: session.clone(),
        part: part.clone(),
    })
}

/// The paths of `skipped` (what a step's snapshot left out) that the session's last step snapshot did not
/// leave out: those not named in a warning yet. A file left out turn after turn (an old FIFO, a big
/// untracked file) is named once, and again only after a snapshot has held it or not seen it.
fn newly_skipped(session: &Session, skipped: &[SkippedPath]) -> Vec<SkippedPath> {
    // A set: a tree can leave out thousands of files (a data directory of big files).
    let named: HashSet<&str> = session.skipped.iter().map(String::as_str).collect();
    skipped
        .iter()
        .filter(|s| !named.contains(s.path.as_str()))
        .cloned()
        .collect()
}

/// The warning of a step closed because it was found abandoned, with changes: its end snapshot is taken at
/// the abort, which may come long after its owner stopped (the next operation on the worktree), so its
/// patch also holds what was changed in those files since, by hand or by another program, and a revert of
/// the step undoes that too. The snapshot holds the files as they were at the abort. (Review: such a patch
/// took the user's own edits without a word.)
fn late_end_warning(
    now: u64,
    step: &OpenStep,
    directory: &str,
    files: &[RelPath],
    end: &Option<SnapshotId>,
) -> Warning {
    // Black-box review: "gone or silent" named a live server as the owner of a step its client had left.
    let why = match step.holder.kind {
        HolderKind::Process => format!("its owner ({}) is gone", step.holder),
        HolderKind::Server => format!(
            "its owner ({}) is gone, or its HTTP client sent nothing on the session for longer than the step \
             timeout",
            step.holder
        ),
    };
    Warning {
        time: now,
        message: format!(
            "the step of message {} was aborted because {why}; its end snapshot was taken at the abort, so \
             its patch also holds any change made to these files after the owner stopped (by hand or by \
             another program), and reverting the step undoes those changes too (the revert keeps what it \
             overwrites; the snapshot here holds the files as they were at the abort)",
            step.message_id
        ),
        snapshot: end.clone(),
        files: files.iter().map(|f| f.to_absolute(directory)).collect(),
    }
}

/// The warnings of what a step's snapshot left out (`skipped_warning`), the nested repositories' `.git`
/// directories the step removed apart (`SkipReason::RemovedGitDir`): what was in them is lost to an undo
/// (FS review: a step's `rm -rf` of a nested clone was undone without its history, and nothing said so).
fn skipped_warnings(now: u64, directory: &str, skipped: &[SkippedPath]) -> Vec<Warning> {
    let (removed, left_out): (Vec<SkippedPath>, Vec<SkippedPath>) = skipped
        .iter()
        .cloned()
        .partition(|s| s.reason == SkipReason::RemovedGitDir);
    let mut warnings = Vec::new();
    if !removed.is_empty() {
        warnings.push(Warning {
            time: now,
            message: format!(
                "this step removed the .git of {} nested repositor{}: a snapshot never holds a .git, so \
                 undoing the step brings back the repository's files but not its history, branches or \
                 stashes",
                removed.len(),
                if removed.len() == 1 { "y" } else { "ies" }
            ),
            snapshot: None,
            files: removed.iter().map(|s| skipped_file(directory, s)).collect(),
        });
    }
    if !left_out.is_empty() {
        warnings.push(skipped_warning(now, directory, &left_out));
    }
    warnings
}

fn skipped_warning(now: u64, directory: &str, skipped: &[SkippedPath]) -> Warning {
    if skipped
        .iter()
        .any(|s| s.reason == SkipReason::IgnoredWorktree)
    {
        return Warning {
            time: now,
            message: format!(
                "the worktree {directory} lies in a directory that its enclosing git repository ignores \
                 (a .gitignore or info/exclude rule): nothing in it is snapshotted, so rewind cannot \
                 revert any change made here; un-ignore the directory or use rewind in another one"
            ),
            snapshot: None,
            files: vec![directory.to_owned()],
        };
    }
    Warning {
        time: now,
        message: format!(
            "{} file(s) were left out of the snapshot (over the size cap, special files, names that are not \
             UTF-8, or git directories such as a bare repository, which rewind never snapshots nor writes): \
             rewind cannot revert them",
            skipped.len()
        ),
        snapshot: None,
        files: skipped.iter().map(|s| skipped_file(directory, s)).collect(),
    }
}

/// A skipped file's absolute path. A name that is not UTF-8 is written escaped (`\xHH`, `\` as `\\`), and
/// then so is the worktree's part: the whole path reads back as one name only.
fn skipped_file(directory: &str, skipped: &SkippedPath) -> String {
    let directory = directory.trim_end_matches('/');
    match skipped.reason {
        SkipReason::NotUtf8 => format!("{}/{}", directory.replace('\\', "\\\\"), skipped.path),
        _ => format!("{directory}/{}", skipped.path),
    }
}

impl Rewind {
    /// `error` (from `open_step_of`) saying, when no step is open, what became of the message's last
    /// step: an agent whose step-finish is refused must know whether its step was aborted meanwhile (its
    /// owner gone, or silent past the step timeout) or never begun. A message that cannot be read leaves
    /// `error` as it is; an unknown message is `NotFound`.
    async fn explain_no_step(
        &self,
        session: &Session,
        message_id: &MessageId,
        error: Error,
    ) -> Error {
        if session.step.is_some() {
            return error;
        }
        let message = match self.load_message(&session.id, message_id).await {
            Ok(message) => message,
            Err(not_found @ Error::NotFound(_)) => return not_found,
            Err(_) => return error,
        };
        let last_step = message.parts.iter().rev().find_map(|p| match &p.body {
            PartBody::StepFinish(finish) => Some(Some(finish.reason.clone())),
            PartBody::StepStart(_) => Some(None),
            _ => None,
        });
        let why = match last_step {
            None => "no step was begun in it".to_owned(),
            Some(Some(reason)) if reason == "aborted" => format!(
                "its step was aborted: its owner was gone or silent for longer than the step timeout ({} s), and \
                 the next request on the worktree (this one, when it is the step's finish) aborted it (or a \
                 server, at once, when its process had died), or an abort was asked; what the step changed \
                 until then is recorded and can be reverted. Begin a new step to go on",
                self.config.step_timeout_ms / 1000
            ),
            Some(Some(reason)) => format!("its step is finished already (reason `{reason}`)"),
            // A start without a finish while the session has no open step: not a state rewind leaves.
            Some(None) => return error,
        };
        Error::InvalidInput(format!(
            "no step is open in message {message_id} of session {}: {why}",
            session.id
        ))
    }
}

/// The words that end the warning of a step whose changes cannot be reverted (its end snapshot failed, or
/// what it changed cannot be worked out): what `rewind exec` looks for to say the step is not undoable.
pub const STEP_NOT_REVERTABLE: &str = "this step's changes cannot be reverted";

/// The words that mark the warning of steps open at once in one worktree (`push_steps_beside_warnings`).
const STEPS_BESIDE: &str = "each step records what the other changes";

/// How a step is being closed: whether its end snapshot may be late (`late_end_warning`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Closing {
    /// Ended now by the one ending it (a finish): its end snapshot is the step's end.
    EndedNow,
    /// Aborted when asked: late when the step's lease had lapsed or was lost (it was abandoned).
    Aborted,
    /// Found abandoned and aborted by the next operation: its end may come long after its owner stopped.
    Abandoned,
}

/// The end of an aborted step.
fn aborted_end() -> StepEnd {
    StepEnd {
        reason: Some("aborted".to_owned()),
        ..Default::default()
    }
}

fn open_step_of(session: &Session, message_id: &MessageId) -> Result<OpenStep> {
    match &session.step {
        Some(step) if &step.message_id == message_id => Ok(step.clone()),
        Some(step) => Err(Error::InvalidInput(format!(
            "the open step of session {} belongs to message {}, not {message_id}",
            session.id, step.message_id
        ))),
        None => Err(Error::InvalidInput(format!(
            "no step is open in message {message_id} of session {}",
            session.id
        ))),
    }
}

/// The revert point of a reverted session.
fn revert_point_of(session: &Session) -> Option<crate::revert::RevertPoint> {
    session.revert.as_ref().map(crate::revert::RevertPoint::of)
}

/// Refuses (400) a message the session's revert hides whole (cleanup would delete it): nothing more is
/// recorded in it.
fn refuse_reverted_message(session: &Session, message_id: &MessageId) -> Result<()> {
    match revert_point_of(session) {
        Some(point) if crate::revert::is_hidden(&point, message_id, None) => {
            Err(Error::InvalidInput(format!(
                "message {message_id} is reverted; unrevert the session or record a new message"
            )))
        }
        _ => Ok(()),
    }
}

fn assistant_parent(messages: &[Message], given: Option<MessageId>) -> Result<MessageId> {
    match given {
        Some(parent) => match messages.iter().find(|m| m.id == parent) {
            Some(m) if m.role == Role::User => Ok(parent),
            Some(_) => Err(Error::InvalidInput(format!(
                "parentID {parent} is an assistant message; it must be the turn's user message"
            ))),
            None => Err(Error::NotFound(format!("Message not found: {parent}"))),
        },
        None => messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| m.id.clone())
            .ok_or_else(|| {
                Error::InvalidInput(
                    "an assistant message needs a user message before it in the session".to_owned(),
                )
            }),
    }
}

/// The fields of a stored message that are its own, not among its other fields (`Message::extra`).
const MESSAGE_FIELDS: &[&str] = &["id", "sessionID", "role", "time", "parentID"];

/// The infos of `messages`.
fn infos(messages: &[MessageWithParts]) -> Vec<Message> {
    messages.iter().map(|m| m.info.clone()).collect()
}

/// Refuses `parts` when one's id is the id of a part of `messages` (`Error::part_id_taken`).
fn refuse_taken_part_ids(messages: &[MessageWithParts], parts: &[Part]) -> Result<()> {
    let holders: HashMap<&PartId, &MessageId> = messages
        .iter()
        .flat_map(|m| m.parts.iter().map(move |p| (&p.id, &m.info.id)))
        .collect();
    match parts
        .iter()
        .find_map(|p| holders.get(&p.id).map(|h| (&p.id, *h)))
    {
        Some((part, holder)) => Err(Error::part_id_taken(part, holder)),
        None => Ok(()),
    }
}

/// A step that cannot be closed now (the worktree or its store is held): it stays open, and the refusal
/// names the holder.
fn not_finished_yet(session: &SessionId, holder: &str) -> Error {
    Error::busy(
        session,
        format!("the step cannot be finished yet: {holder}"),
    )
}

/// What a new message may not be given, refused before anything is read or done: a field among its
/// other fields that is rewind's to set (kept beside the message's own field of that name, it would be
/// stored twice, and the message, with its whole session, could not be read back), and the parts
/// `reject_recorded_kinds` refuses.
fn reject_message_input(input: &NewMessage) -> Result<()> {
    if let Some(key) = input
        .extra
        .keys()
        .find(|key| MESSAGE_FIELDS.contains(&key.as_str()))
    {
        return Err(Error::InvalidInput(format!(
            "a message's {key} is rewind's to set; it cannot be given among the message's other fields"
        )));
    }
    reject_recorded_kinds(&input.parts)
}

fn reject_recorded_kinds(parts: &[NewPart]) -> Result<()> {
    for part in parts {
        if matches!(
            part.body,
            PartBody::StepStart(_) | PartBody::StepFinish(_) | PartBody::Patch(_)
        ) {
            return Err(Error::InvalidInput(format!(
                "{} parts are recorded by the step operations (begin, finish, abort), not sent by clients",
                part.body.kind()
            )));
        }
        if let PartBody::Tool(tool) = &part.body {
            check_tool_part(&tool.extra)?;
        }
    }
    Ok(())
}

/// The fields of a `tool` part that OpenCode's clients read and SPEC 5 relies on (a tool part is output
/// that keeps a revert inside its turn): `callID` and `tool` strings, and a `state` object whose `status`
/// is one of OpenCode's four. Anything else in it is kept as it came. Black-box: `{"type":"tool",
/// "callID":5,"state":"x"}` was stored and returned, and a client reading `part.state.status` failed on it.
fn check_tool_part(fields: &serde_json::Map<String, serde_json::Value>) -> Result<()> {
    let refuse = |what: &str| {
        Err(Error::InvalidInput(format!(
            "a tool part needs {what} (OpenCode's ToolPart)"
        )))
    };
    for name in ["callID", "tool"] {
        if !fields.get(name).is_some_and(serde_json::Value::is_string) {
            return refuse(&format!("\"{name}\" as a string"));
        }
    }
    let status = fields
        .get("state")
        .and_then(serde_json::Value::as_object)
        .and_then(|state| state.get("status"))
        .and_then(serde_json::Value::as_str);
    match status {
        Some("pending" | "running" | "completed" | "error") => Ok(()),
        _ => refuse(
            "\"state\" as an object whose \"status\" is \"pending\", \"running\", \"completed\" or \"error\"",
        ),
    }
}

/// The cost and token counts an agent reports at a step's end: each finite and not negative, and the
/// session's totals with them still finite. A sum that overflowed to infinity would be stored as JSON
/// `null` and make the session unreadable, so such a finish is refused (400) and the step stays open.
fn check_usage(session: &Session, end: &StepEnd) -> Result<()> {
    let cost = end.cost.unwrap_or(0.0);
    let tokens = end.tokens.unwrap_or_default();
    let mut given = vec![("cost", cost)];
    given.extend(tokens.named_values());
    for (name, value) in given {
        if !value.is_finite() || value < 0.0 {
            return Err(Error::InvalidInput(format!(
                "{name} must be a finite number, not negative; got {value}"
            )));
        }
    }
    let mut totals = vec![("cost", session.cost + cost)];
    totals.extend(session.tokens.add(&tokens).named_values());
    match totals.into_iter().find(|(_, total)| !total.is_finite()) {
        Some((name, _)) => Err(Error::InvalidInput(format!(
            "the session's total {name} would exceed the largest number rewind can store; the step is \
             still open: finish it with smaller counts"
        ))),
        None => Ok(()),
    }
}

/// The worktree as sessions record it: absolute, without `.`/`..` components or a trailing slash. A
/// backslash is a character of a directory's name on Unix, never a separator: turning it into `/` would
/// name another directory (SPEC 12.10).
pub fn normalise_directory(directory: &str) -> Result<String> {
    if !directory.starts_with('/') {
        return Err(Error::InvalidInput(format!(
            "worktree {directory:?} must be an absolute path"
        )));
    }
    let trimmed = directory.trim_end_matches('/');
    let normalised = if trimmed.is_empty() { "/" } else { trimmed };
    if normalised.split('/').any(|c| c == "." || c == "..") {
        return Err(Error::InvalidInput(format!(
            "worktree {directory:?} must be a normalised absolute path"
        )));
    }
    Ok(normalised.to_owned())
}

/// Paths as the set the services compare them in.
pub(super) fn path_set(paths: &[RelPath]) -> BTreeSet<RelPath> {
    paths.iter().cloned().collect()
}

/// `InvalidInput` when a message after `message_id` among `messages` (the session's, those the cleanup of
/// a revert keeps) has steps. A step of `message_id` would record, in that earlier message, changes made
/// after the later message's steps: a revert to the later message would undo them (its patches go back to
/// before them) while the message recording them stays visible (SPEC 5: what the client hides and what
/// the files lose are the same range; black-box). A later message without steps (the next user message,
/// sent while this one's agent works) does not stop it.
fn refuse_before_later_steps(messages: &[MessageWithParts], message_id: &MessageId) -> Result<()> {
    let later = messages.iter().find(|m| {
        &m.info.id > message_id
            && m.parts
                .iter()
                .any(|p| matches!(p.body, PartBody::StepStart(_)))
    });
    match later {
        Some(later) => Err(Error::InvalidInput(format!(
            "message {message_id} comes before message {}, which has steps: a step begins on a message after \
             every step of the session, so that its changes follow theirs; record a new assistant message \
             for it",
            later.info.id
        ))),
        None => Ok(()),
    }
}

/// `Busy` while a step is open in `session`.
fn refuse_open_step(session: &Session) -> Result<()> {
    match &session.step {
        Some(step) => Err(Error::busy(
            &session.id,
            format!(
                "Session is busy: {} (a step is already open in message {})",
                session.id, step.message_id
            ),
        )),
        None => Ok(()),
    }
}

/// A claim to say the tool-part warning of `message` (`Rewind::claim_tool_warning`), given back when dropped
/// unless the warning was stored.
struct ToolWarningClaim<'a> {
    rewind: &'a Rewind,
    message: &'a MessageId,
    kept: bool,
}

impl Drop for ToolWarningClaim<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.rewind.give_back_tool_warning(self.message);
        }
    }
}

/// What [`Rewind::tend_abandoned_steps`] did.
#[derive(Debug, Default)]
pub struct AbandonedSteps {
    /// The sessions whose step was aborted, its owner gone (or closed at the same moment by another).
    pub aborted: Vec<SessionId>,
    /// The tokens of the steps announced idle this time, left open for the next operation.
    pub announced: Vec<LeaseToken>,
    /// The sessions that could not be read, announced or have their step aborted, with why.
    pub failed: Vec<(SessionId, Error)>,
}

/// The words that say a tool part of `message` was recorded while no step of it was open.
fn tool_outside_a_step_words(message: &MessageId) -> String {
    format!("recorded in message {message} while no step of that message was open")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skipped_name_that_is_not_utf8_is_escaped_with_its_worktrees_part() {
        let skipped = |path: &str, reason| SkippedPath {
            path: path.to_owned(),
            reason,
        };
        let warning = skipped_warning(
            7,
            "/work/a\\b/",
            &[
                skipped("x\\\\y/n\\xff.txt", SkipReason::NotUtf8),
                skipped("big\\file.bin", SkipReason::TooLarge { size: 9 }),
            ],
        );
        assert_eq!(
            warning.files,
            ["/work/a\\\\b/x\\\\y/n\\xff.txt", "/work/a\\b/big\\file.bin"]
        );
    }
}
