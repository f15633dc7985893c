//! The adapter's own errors, and their mapping to the core's domain errors.

use std::path::Path;

use rewind_core::Error;

/// What can go wrong inside the git store.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// A filesystem operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path concerned.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A tree or blob is not in the store.
    #[error("object {0} is not in the snapshot store")]
    Missing(String),
    /// A stored object cannot be decoded.
    #[error("corrupt snapshot store: {0}")]
    Corrupt(String),
    /// A worktree file cannot be read.
    #[error("cannot read {path}: {reason}")]
    Unreadable {
        /// Worktree-relative path.
        path: String,
        /// Why.
        reason: String,
    },
    /// The request cannot be carried out as asked.
    #[error("{0}")]
    Refused(String),
    /// Another process holds the store and cannot go on (it is stopped): waiting would never end.
    #[error("{0}")]
    Busy(String),
    /// A `revert_when` whose go-ahead was refused or dropped: nothing was touched.
    #[error("the revert was called off before any file was touched")]
    CalledOff,
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

impl GitError {
    /// An IO error about `path`.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        GitError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// The adapter's result type.
pub type GitResult<T> = Result<T, GitError>;

impl From<GitError> for Error {
    fn from(error: GitError) -> Self {
        match error {
            GitError::Missing(id) => Error::MissingObject(id),
            GitError::Unreadable { path, reason } => Error::Unreadable { path, reason },
            GitError::Refused(message) => Error::InvalidInput(message),
            GitError::Busy(message) => Error::Busy {
                session_id: None,
                message,
            },
            GitError::CalledOff => rewind_core::ports::called_off(),
            other => Error::backend(other),
        }
    }
}
