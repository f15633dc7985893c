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
