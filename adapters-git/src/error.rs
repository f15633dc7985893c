//! The adapter's own errors, and their mapping to the core's domain errors.

use std::path::Path;

use rewind_core::Error;
use rewind_core::error::StorageFault;

/// What can go wrong inside the git store.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// A filesystem operation failed.
    #[error("{path}: {source}{}", hint(source))]
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
    /// The snapshot store cannot be written: its disk is full, a quota is reached, it is read-only, or
    /// this user may not write there.
    #[error(
        "cannot write to the snapshot store {store} (in rewind's data directory): {source}; {}, or give \
         rewind another data directory (--data-dir, REWIND_DATA_DIR)",
        remedy(source)
    )]
    StoreWrite {
        /// The store's directory.
        store: String,
        /// The cause.
        #[source]
        source: std::io::Error,
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

/// What an `Io` error's cause says too little about: `EPERM` on a worktree path is an attribute the
/// system's own message does not name (the fuzz's `chattr +i` files: "Operation not permitted" alone).
fn hint(source: &std::io::Error) -> &'static str {
    if source.raw_os_error() == Some(rustix::io::Errno::PERM.raw_os_error()) {
        " (an immutable or append-only attribute refuses it, see `lsattr -d`; or a sticky directory owned \
         by another user)"
    } else {
        ""
    }
}

/// What the user can do about a store that cannot be written, by the cause: free space, or make it
/// writable (a read-only mount, another user's data directory, an immutable file).
fn remedy(source: &std::io::Error) -> &'static str {
    match storage_fault(source) {
        Some(StorageFault::DiskFull) => "free space there",
        _ => "make it writable for this user",
    }
}

/// `error`, met while the store at `store` was opened, made or written to: `GitError::StoreWrite` when
/// the cause is one the user can act on (a full disk or quota, a read-only mount, no permission to
/// write there), so the message names the store and what to do, otherwise the failure of `path`.
pub fn store_write(store: &Path, path: &Path, error: std::io::Error) -> GitError {
    if is_write_failure(&error) || error.kind() == std::io::ErrorKind::PermissionDenied {
        GitError::StoreWrite {
            store: store.display().to_string(),
            source: error,
        }
    } else {
        GitError::io(path, error)
    }
}

/// Whether `error`, met while a file was read and stored, came from writing to the store: a read never
/// fails for a full disk, a quota or a read-only mount (`storage_fault`'s kinds).
pub fn is_write_failure(error: &std::io::Error) -> bool {
    storage_fault(error).is_some()
}

/// The adapter's result type.
pub type GitResult<T> = Result<T, GitError>;

impl From<GitError> for Error {
    fn from(error: GitError) -> Self {
        match error {
            GitError::Missing(id) => Error::MissingObject(id),
            // Its own kind: a step whose start cannot be read is closed all the same (review: a damaged
            // pack left a step open for good, and every later command failed on it), and, unlike a
            // missing object, it does not say that nothing was touched.
            GitError::Corrupt(why) => Error::Damaged(why),
            GitError::Unreadable { path, reason } => Error::Unreadable { path, reason },
            GitError::Refused(message) => Error::InvalidInput(message),
            GitError::Busy(message) => Error::Busy {
                session_id: None,
                message,
            },
            GitError::CalledOff => rewind_core::ports::called_off(),
            GitError::Io { ref source, .. } | GitError::StoreWrite { ref source, .. } => {
                match storage_fault(source) {
                    Some(fault) => Error::storage(fault, error),
                    None => Error::backend(error),
                }
            }
            other => Error::backend(other),
        }
    }
}

/// The storage fault a failed write is, if it is one the user can act on: a full disk, a quota or a file
/// size limit reached (the worktree's disk or the data directory's), or a read-only mount.
fn storage_fault(error: &std::io::Error) -> Option<StorageFault> {
    match error.kind() {
        std::io::ErrorKind::StorageFull
        | std::io::ErrorKind::QuotaExceeded
        | std::io::ErrorKind::FileTooLarge => Some(StorageFault::DiskFull),
        std::io::ErrorKind::ReadOnlyFilesystem => Some(StorageFault::ReadOnly),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A change refused with `EPERM` names the attributes that refuse one; other causes get no hint.
    #[test]
    fn a_change_the_system_does_not_permit_names_what_refuses_it() {
        let os = std::io::Error::from_raw_os_error;
        let text = GitError::io(Path::new("/work/a.txt"), os(1)).to_string();
        assert!(
            text.starts_with("/work/a.txt: Operation not permitted"),
            "{text}"
        );
        assert!(
            text.contains("immutable or append-only attribute refuses it, see `lsattr -d`"),
            "{text}"
        );
        let text = GitError::io(Path::new("/work/a.txt"), os(13)).to_string();
        assert!(!text.contains("lsattr"), "{text}");
    }

    /// Only the failures a write can meet are the store's: a file that cannot be read stays `Unreadable`.
    #[test]
    fn only_write_side_failures_are_the_store_s() {
        let os = std::io::Error::from_raw_os_error;
        // ENOSPC, EDQUOT, EROFS, EFBIG.
        for code in [28, 122, 30, 27] {
            assert!(is_write_failure(&os(code)), "{code}");
        }
        // EACCES, ENOENT, EIO, EISDIR.
        for code in [13, 2, 5, 21] {
            assert!(!is_write_failure(&os(code)), "{code}");
        }
    }

    /// A full disk, a quota reached or a read-only mount reaches the core as a storage fault of its kind,
    /// whether the worktree's disk or the store's; any other failure of a file stays a backend fault.
    #[test]
    fn a_full_or_read_only_disk_is_a_storage_fault() {
        let os = std::io::Error::from_raw_os_error;
        let io = |code| GitError::io(Path::new("/work/a.txt"), os(code));
        let store = |code| GitError::StoreWrite {
            store: "/data/stores/x".to_owned(),
            source: os(code),
        };
        for (code, fault) in [
            (28, Some(StorageFault::DiskFull)),
            (122, Some(StorageFault::DiskFull)),
            (27, Some(StorageFault::DiskFull)),
            (30, Some(StorageFault::ReadOnly)),
            (5, None),
            (13, None),
        ] {
            // The remedy fits the cause.
            let remedy = if fault == Some(StorageFault::DiskFull) {
                "; free space there, or give"
            } else {
                "; make it writable for this user, or give"
            };
            assert!(store(code).to_string().contains(remedy), "{code}");
            for error in [io(code), store(code)] {
                let text = error.to_string();
                let core = Error::from(error);
                assert_eq!(core.storage_fault(), fault, "{text}");
                assert_eq!(core.to_string(), text);
            }
        }
    }
}
