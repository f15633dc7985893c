//! The error type shared by rewind's core, its ports and its services.

use crate::model::{LeaseKey, MessageId, PartId, SessionId};

/// A boxed error from an adapter's backend (git, the database, the filesystem).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Every failure the core, a port or a service can report.
///
/// Adapters map their backend errors to the domain variants where one fits (a missing row is `NotFound`, a
/// held lease is `Busy`, a database locked by another process or a full disk is `Storage` with its
/// [`StorageFault`]) and use `Backend` otherwise. Callers decide on the variant alone, never on an
/// adapter's own error type or text.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An id, message, part, session or snapshot that does not exist.
    #[error("{0}")]
    NotFound(String),
    /// Input that is malformed or breaks a rule (bad id, id out of order, path outside the worktree).
    #[error("{0}")]
    InvalidInput(String),
    /// The session or worktree is held by another operation (an open step, a revert in progress).
    #[error("{message}")]
    Busy {
        /// The session that is busy, when one is concerned.
        session_id: Option<SessionId>,
        /// What holds it, in words a user can act on.
        message: String,
    },
    /// What a write was built on changed before it could commit: another request stored or deleted a
    /// message or part where this one's id or parent was chosen (`Guard::LastMessageIs`,
    /// `Guard::LastPartIs`). The services build such a write again on what is stored then, so a caller sees
    /// this only from the port, or when that kept happening (as `Busy` then).
    #[error("{message}")]
    Stale {
        /// The session written to.
        session_id: SessionId,
        /// What changed.
        message: String,
    },
    /// The operation's lease or intent record was taken from it (it stalled past its lease).
    #[error("lease lost: {0}")]
    LeaseLost(String),
    /// A tree or blob a snapshot needs is not in the snapshot store.
    #[error("snapshot object missing: {0}")]
    MissingObject(String),
    /// An object of the snapshot store cannot be decoded (a damaged pack or loose file). Unlike
    /// `MissingObject`, it may be met after files were touched (a blob is decoded as it is written).
    #[error("the snapshot store is damaged: {0}")]
    Damaged(String),
    /// A file of the worktree could not be read, so no snapshot was taken.
    #[error("cannot read {path}: {reason}")]
    Unreadable {
        /// The worktree-relative path of the file.
        path: String,
        /// Why it could not be read.
        reason: String,
    },
    /// A fault of the storage under an adapter of a kind the user can act on (retry later, free space,
    /// restore a backup): the adapter's own error, with every cause, is the source.
    #[error("{source}")]
    Storage {
        /// What kind of fault.
        fault: StorageFault,
        /// The adapter's error.
        #[source]
        source: BoxError,
    },
    /// A fault of an adapter's backend.
    #[error("{0}")]
    Backend(#[source] BoxError),
}

/// The kinds of storage fault an adapter names ([`Error::Storage`]), each one a user can act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StorageFault {
    /// Another process holds the database's write lock past the busy timeout: the request may be sent again
    /// once it lets go.
    Locked,
    /// This process had more database work at once than its connections serve: none came free in time (a
    /// SQLite file's connection pool, or a PostgreSQL pool whose every connection was in use). The request
    /// may be sent again once the load drops.
    Busy,
    /// The database, or a disk rewind writes to, can only be read.
    ReadOnly,
    /// The database server cannot be reached (no connection could be had in time, or made).
    Unreachable,
    /// The connection to the database server broke during a statement (the server restarted, or ended
    /// the connection): whether that statement was stored is not known. The next request gets a new
    /// connection.
    ConnectionLost,
    /// The database file was deleted or replaced while it was open.
    Replaced,
    /// The database is corrupt or is not one.
    Corrupt,
    /// A disk rewind writes to (the worktree's or the data directory's) is full, or a quota is reached.
    DiskFull,
}

impl StorageFault {
    /// Whether this is the database being away (it cannot be reached, or it ended a connection): what it
    /// stopped is finished by the next operation once it answers, and a request may be sent again then.
    pub fn is_outage(self) -> bool {
        matches!(
            self,
            StorageFault::Unreachable | StorageFault::ConnectionLost
        )
    }
}

impl Error {
    /// A `Busy` error about a session.
    pub fn busy(session_id: &SessionId, message: impl Into<String>) -> Self {
        Error::Busy {
            session_id: Some(session_id.clone()),
            message: message.into(),
        }
    }

    /// The `Busy` error for a lease on `key` held by `holder`, in the words every refusal uses.
    pub fn lease_busy(
        key: &LeaseKey,
        holder: impl std::fmt::Display,
        session_id: Option<&SessionId>,
    ) -> Self {
        let what = match key {
            LeaseKey::Session(id) => format!("Session is busy: {id}"),
            LeaseKey::Worktree(path) => format!("Worktree is busy: {path}"),
        };
        Error::Busy {
            session_id: session_id.cloned(),
            message: format!("{what} (held by {holder}); try again when it has finished"),
        }
    }

    /// The `Busy` error for a write to session `id` whose revert state changed after the write's checks
    /// (a revert, unrevert or cleanup was stored meanwhile; `Guard::RevertIs`).
    pub fn revert_changed(id: &SessionId) -> Self {
        Error::busy(
            id,
            format!(
                "Session {id} was reverted, unreverted or its revert made permanent while this request ran; \
                 try again"
            ),
        )
    }

    /// The `Stale` error for session `id`, where `what` (the session's last message, or a message's last
    /// part) changed between a write's reads and its commit.
    pub fn stale(id: &SessionId, what: impl std::fmt::Display) -> Self {
        Error::Stale {
            session_id: id.clone(),
            message: format!(
                "{what} changed while this request ran (another request wrote there first)"
            ),
        }
    }

    /// The `InvalidInput` error for a client's part id that a part of message `holder` of the session
    /// already has: a revert finds its target part by id alone (SPEC 5, as OpenCode), so a second part
    /// with that id would send a revert to it to the first one, and undo that turn instead.
    pub fn part_id_taken(id: &PartId, holder: &MessageId) -> Self {
        Error::InvalidInput(format!(
            "part id {id} is already the id of a part of message {holder}; a part id names one part of \
             its session"
        ))
    }

    /// Wraps any backend error.
    pub fn backend(error: impl Into<BoxError>) -> Self {
        Error::Backend(error.into())
    }

    /// A storage fault of kind `fault`, caused by `source`.
    pub fn storage(fault: StorageFault, source: impl Into<BoxError>) -> Self {
        Error::Storage {
            fault,
            source: source.into(),
        }
    }

    /// The storage fault this error is, if any.
    pub fn storage_fault(&self) -> Option<StorageFault> {
        match self {
            Error::Storage { fault, .. } => Some(*fault),
            _ => None,
        }
    }

    /// The same error, of the same kind, with `note` after its message: what was done about it (a failed
    /// revert's files put back). A backend error keeps its causes as the note's source ([`Noted`]).
    pub fn noted(self, note: &str) -> Error {
        let add = |message: String| format!("{message}; {note}");
        match self {
            Error::NotFound(message) => Error::NotFound(add(message)),
            Error::InvalidInput(message) => Error::InvalidInput(add(message)),
            Error::Busy {
                session_id,
                message,
            } => Error::Busy {
                session_id,
                message: add(message),
            },
            Error::Stale {
                session_id,
                message,
            } => Error::Stale {
                session_id,
                message: add(message),
            },
            Error::LeaseLost(message) => Error::LeaseLost(add(message)),
            Error::MissingObject(message) => Error::MissingObject(add(message)),
            Error::Damaged(message) => Error::Damaged(add(message)),
            Error::Unreadable { path, reason } => Error::Unreadable {
                path,
                reason: add(reason),
            },
            Error::Storage { fault, source } => Error::Storage {
                fault,
                source: Box::new(Noted {
                    error: source,
                    note: note.to_owned(),
                }),
            },
            Error::Backend(error) => Error::Backend(Box::new(Noted {
                error,
                note: note.to_owned(),
            })),
        }
    }
}

/// The words a failed revert's or unrevert's error carries once its rollback has put the files back
/// ([`Error::noted`]): a caller that would add "nothing was changed" leaves that out.
pub const PUT_BACK: &str = "were put back to their state before the";

/// The words a failed revert's or unrevert's error carries when its rollback found no file changed yet
/// (the operation failed before it wrote any): a caller adds nothing more.
pub const NOTHING_CHANGED: &str = "nothing was changed";

/// A backend or storage error with a note after it ([`Error::noted`]): its text is the error's with every
/// cause ([`chain`]), then the note; its source is the error.
#[derive(Debug)]
pub struct Noted {
    error: BoxError,
    note: String,
}

impl Noted {
    /// The error the note follows.
    pub fn error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self.error.as_ref()
    }

    /// The note.
    pub fn note(&self) -> &str {
        &self.note
    }
}

impl std::fmt::Display for Noted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; {}", chain(self.error.as_ref()), self.note)
    }
}

impl std::error::Error for Noted {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.error.as_ref())
    }
}

/// The text of `error` followed by each of its causes whose text it does not already hold, joined by
/// `: `.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(current) = cause {
        let text = current.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = current.source();
    }
    line
}

/// The result type of the core, its ports and its services.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot write a.txt")]
    struct Write(#[source] std::io::Error);

    #[test]
    fn a_noted_error_keeps_its_kind_and_says_the_note_last() {
        let session = SessionId::parse("ses_0123456789abABCDEFGHIJKLMN").expect("id");
        let note = "the files were put back";
        let cases = [
            Error::NotFound("x".into()),
            Error::InvalidInput("x".into()),
            Error::busy(&session, "x"),
            Error::stale(&session, "x"),
            Error::LeaseLost("x".into()),
            Error::MissingObject("x".into()),
            Error::Damaged("x".into()),
            Error::Unreadable {
                path: "a.txt".into(),
                reason: "x".into(),
            },
            Error::storage(StorageFault::Locked, "x"),
        ];
        for error in cases {
            let kind = std::mem::discriminant(&error);
            let before = error.to_string();
            let noted = error.noted(note);
            assert_eq!(std::mem::discriminant(&noted), kind, "{noted:?}");
            assert_eq!(noted.to_string(), format!("{before}; {note}"));
        }
    }

    /// A storage fault keeps its kind under a note, so a locked database is still one after a rollback.
    #[test]
    fn a_noted_storage_fault_keeps_its_fault() {
        for fault in [
            StorageFault::Locked,
            StorageFault::Busy,
            StorageFault::ReadOnly,
            StorageFault::Unreachable,
            StorageFault::ConnectionLost,
            StorageFault::Replaced,
            StorageFault::Corrupt,
            StorageFault::DiskFull,
        ] {
            let error = Error::storage(fault, Write(std::io::Error::other("disk gone")));
            let noted = error.noted("the files were put back");
            assert_eq!(noted.storage_fault(), Some(fault));
            assert_eq!(
                noted.to_string(),
                "cannot write a.txt: disk gone; the files were put back"
            );
        }
        assert_eq!(Error::backend("x").noted("y").storage_fault(), None);
    }

    #[test]
    fn a_noted_backend_error_says_its_causes_then_the_note_and_keeps_them_as_its_source() {
        let error = Error::backend(Write(std::io::Error::other("No space left on device")));
        let Error::Backend(noted) = error.noted("the files were put back") else {
            panic!("a backend error stays one");
        };
        assert_eq!(
            noted.to_string(),
            "cannot write a.txt: No space left on device; the files were put back"
        );
        let source = std::error::Error::source(noted.as_ref()).expect("the error is the source");
        assert!(source.downcast_ref::<Write>().is_some(), "{source:?}");
        assert_eq!(
            chain(noted.as_ref()),
            noted.to_string(),
            "printing the chain says each cause once"
        );
    }
}
