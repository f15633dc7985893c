//! A worktree as sessions record it, for the command line and the server alike: the directory's canonical
//! path (symlinks resolved, so one directory is always one worktree) and its text form (its UTF-8 text,
//! unchanged).

use std::path::{Path, PathBuf};

/// Why a directory cannot be a worktree.
#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    /// It does not exist or cannot be read.
    #[error("{path} does not exist or cannot be read: {source}")]
    Unreadable {
        /// The path as given.
        path: String,
        /// What the filesystem said.
        source: std::io::Error,
    },
    /// It is not a directory.
    #[error("{0} is not a directory")]
    NotADirectory(String),
    /// Its canonical path is not UTF-8.
    #[error("{0} is not a UTF-8 path; rewind needs one")]
    NotUtf8(String),
}

/// The canonical path of `directory` and its text form.
pub fn canonical_worktree(directory: &Path) -> Result<(PathBuf, String), WorktreeError> {
    let path = std::fs::canonicalize(directory).map_err(|source| WorktreeError::Unreadable {
        path: directory.display().to_string(),
        source,
    })?;
    if !path.is_dir() {
        return Err(WorktreeError::NotADirectory(path.display().to_string()));
    }
    let text = path_text(&path)?;
    Ok((path, text))
}

/// A path as sessions record it: its UTF-8 text, unchanged. On the Unix systems rewind runs on `/` is the
/// only separator and a backslash is a character of a name (`a\b` is one directory, not `a/b`), so it is
/// kept as it is (SPEC 12.10: never mangled).
pub fn path_text(path: &Path) -> Result<String, WorktreeError> {
    path.to_str()
        .map(str::to_owned)
        .ok_or_else(|| WorktreeError::NotUtf8(path.display().to_string()))
}

/// `path` with `.` and `..` resolved by name (nothing on disk is looked at; a `..` at the root stays
/// there), as SQLite resolves its file's path.
pub fn by_name(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}
