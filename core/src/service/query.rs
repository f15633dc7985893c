//! Reading a session's state: sessions, messages, warnings, the last revert's diff and the history.

use crate::error::Result;
use crate::model::{
    FileDiff, MessageId, MessageWithParts, RevertHistoryEntry, Session, SessionId, Warning,
};

use super::Rewind;
use super::record::normalise_directory;

impl Rewind {
    /// One session (`NotFound` when unknown).
    pub async fn session(&self, id: &SessionId) -> Result<Session> {
        self.load_session(id).await
    }

    /// Sessions, newest first; only those of `directory` when given (normalised as `create_session`
    /// normalises what it stores, so `/wt/` finds the sessions of `/wt`).
    pub async fn sessions(&self, directory: Option<&str>) -> Result<Vec<Session>> {
        let directory = directory.map(normalise_directory).transpose()?;
        self.repo.sessions(directory).await
    }

    /// The sessions created under session `id` (`parentID`), newest first; `Error::NotFound` when `id` names
    /// no session.
    pub async fn children(&self, id: &SessionId) -> Result<Vec<Session>> {
        self.load_session(id).await?;
        let mut sessions = self.repo.sessions(None).await?;
        sessions.retain(|session| session.parent_id.as_ref() == Some(id));
        Ok(sessions)
    }

    /// Every message of a session with its parts, ascending; reverted messages are included until cleanup.
    pub async fn messages(&self, id: &SessionId) -> Result<Vec<MessageWithParts>> {
        let session = self.load_session(id).await?;
        let mut messages = self.repo.messages(id).await?;
        for message in &mut messages {
            // Stored before rewind gave them (review): a client typed against OpenCode's schema reads
            // them all the same.
            message.info.fill_required_fields(&session.directory);
        }
        Ok(messages)
    }

    /// A page of the session's messages with their parts, ascending: the newest `limit` (at least one)
    /// whose id sorts before `before` (every message when none), and the first message's id when older
    /// ones are left (the next page's `before`). Only the page's messages are read with their parts.
    pub async fn messages_page(
        &self,
        id: &SessionId,
        before: Option<&MessageId>,
        limit: usize,
    ) -> Result<(Vec<MessageWithParts>, Option<MessageId>)> {
        let session = self.load_session(id).await?;
        // Ids alone first (no parts, no summaries), to find where the page starts.
        let infos = self.repo.message_infos(id).await?;
        let older: Vec<&MessageId> = infos
            .iter()
            .map(|m| &m.id)
            .filter(|m| before.is_none_or(|before| *m < before))
            .collect();
        let start = older.len().saturating_sub(limit.max(1));
        let (Some(first), Some(last)) = (older.get(start), older.last()) else {
            return Ok((Vec::new(), None));
        };
        let mut messages = self
            .repo
            .messages_between(id, first, before.cloned())
            .await?;
        // Exactly the page chosen: a message stored since the ids were read sorts after every one of them
        // (SPEC 3), so it is not in it.
        messages.retain(|m| m.info.id <= **last);
        for message in &mut messages {
            message.info.fill_required_fields(&session.directory);
        }
        let next = (start > 0).then(|| (*first).clone());
        Ok((messages, next))
    }

    /// One message with its parts.
    pub async fn message(
        &self,
        session: &SessionId,
        message: &MessageId,
    ) -> Result<MessageWithParts> {
        let directory = self.load_session(session).await?.directory;
        let mut message = self.load_message(session, message).await?;
        message.info.fill_required_fields(&directory);
        Ok(message)
    }

    /// The session's warnings, oldest first.
    pub async fn warnings(&self, id: &SessionId) -> Result<Vec<Warning>> {
        self.load_session(id).await?;
        self.repo.warnings(id).await
    }

    /// The session diff of the last revert.
    pub async fn session_diff(&self, id: &SessionId) -> Result<Vec<FileDiff>> {
        self.load_session(id).await?;
        self.repo.session_diff(id).await
    }

    /// The session's revert history, oldest first.
    pub async fn revert_history(&self, id: &SessionId) -> Result<Vec<RevertHistoryEntry>> {
        self.load_session(id).await?;
        self.repo.revert_history(id).await
    }
}
