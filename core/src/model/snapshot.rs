//! Snapshot ids, worktree-relative paths, per-file diffs and the results of the snapshot port's operations.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The id of a snapshot: the 40-hex git tree id of the worktree's tracked content at one moment.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SnapshotId(String);

impl SnapshotId {
    /// An id that stands for no known snapshot (forty zeros, which no tree hashes to): the placeholder of
    /// a record whose real id could not be read (`IntentRecord::unreadable`).
    pub fn unknown() -> Self {
        SnapshotId("0".repeat(40))
    }

    /// Parses a 40-digit lower-case hex id.
    pub fn parse(text: &str) -> Result<Self> {
        if text.len() == 40
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            Ok(SnapshotId(text.to_owned()))
        } else {
            Err(Error::InvalidInput(format!(
                "malformed snapshot id {text:?}: expected 40 lower-case hex digits"
            )))
        }
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for SnapshotId {
    type Error = Error;
    fn try_from(text: String) -> Result<Self> {
        SnapshotId::parse(&text)
    }
}

impl From<SnapshotId> for String {
    fn from(id: SnapshotId) -> String {
        id.0
    }
}

impl fmt::Display for SnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SnapshotId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SnapshotId({})", &self.0[..self.0.len().min(10)])
    }
}

/// A worktree-relative path with forward slashes (`a/b.txt`): relative, normalised (no `.`, `..` or empty
/// components), never leaving the worktree. Every path that crosses a port is one of these. A backslash is
/// an ordinary character of a name (`back\slash.txt` is one file on the filesystems rewind runs on, SPEC
/// 12.10), never a separator.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RelPath(String);

impl RelPath {
    /// Checks and wraps a worktree-relative path.
    pub fn new(text: impl Into<String>) -> Result<Self> {
        let text = text.into();
        let refuse = |why: &str| Err(Error::InvalidInput(format!("path {text:?} {why}")));
        if text.is_empty() {
            return refuse("is empty");
        }
        if text.starts_with('/') || text.contains('\0') {
            return refuse("is not a relative path inside the worktree");
        }
        if text
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
        {
            return refuse("is not normalised or leaves the worktree");
        }
        Ok(RelPath(text))
    }

    /// The path's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path's components.
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The parent directories of this path, outermost first (`a`, `a/b` for `a/b/c`).
    pub fn ancestors(&self) -> impl Iterator<Item = RelPath> + '_ {
        self.0
            .match_indices('/')
            .map(|(i, _)| RelPath(self.0[..i].to_owned()))
    }

    /// True when `self` lies strictly inside directory `dir`.
    pub fn is_inside(&self, dir: &RelPath) -> bool {
        self.0.len() > dir.0.len()
            && self.0.starts_with(&dir.0)
            && self.0.as_bytes()[dir.0.len()] == b'/'
    }

    /// The absolute, forward-slash form of this path under `worktree` (the form of `patch.files`).
    pub fn to_absolute(&self, worktree: &str) -> String {
        format!("{}/{}", worktree.trim_end_matches('/'), self.0)
    }

    /// The worktree-relative form of an absolute `patch.files` path; an error when it is not inside
    /// `worktree`.
    pub fn from_absolute(path: &str, worktree: &str) -> Result<Self> {
        let root = worktree.trim_end_matches('/');
        match path
            .strip_prefix(root)
            .and_then(|rest| rest.strip_prefix('/'))
        {
            Some(rest) => RelPath::new(rest),
            None => Err(Error::InvalidInput(format!(
                "path {path:?} is outside the worktree {worktree:?}"
            ))),
        }
    }
}

impl TryFrom<String> for RelPath {
    type Error = Error;
    fn try_from(text: String) -> Result<Self> {
        RelPath::new(text)
    }
}

impl TryFrom<&str> for RelPath {
    type Error = Error;
    fn try_from(text: &str) -> Result<Self> {
        RelPath::new(text)
    }
}

impl From<RelPath> for String {
    fn from(path: RelPath) -> String {
        path.0
    }
}

impl fmt::Display for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for RelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// How a file changed between two snapshots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum FileStatus {
    /// Present only in the newer side.
    Added,
    /// Present only in the older side.
    Deleted,
    /// Present in both with different content or mode.
    #[default]
    Modified,
}

/// One file's change (OpenCode's `FileDiff`). Stored rows may lack `file` or `patch` (OpenCode #26574), so
/// both default to empty when read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FileDiff {
    /// The worktree-relative path.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub file: String,
    /// A unified diff with 3 lines of context; empty for binary files and files over the size cap.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub patch: String,
    /// Lines added.
    pub additions: u64,
    /// Lines removed.
    pub deletions: u64,
    /// Added, deleted or modified.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub status: FileStatus,
}

/// How git names side `prefix` (`a/` or `b/`) of `path`'s diff in its headers (with `core.quotePath=false`):
/// `/dev/null` when the side is absent; as it is; or, when the path holds a control character (a newline),
/// a double quote or a backslash, in double quotes with C escapes, so that a name cannot break a header
/// line in two (SPEC 12.10).
pub fn diff_side(prefix: &str, path: &str, present: bool) -> String {
    let special = |c: char| c == '"' || c == '\\' || c < ' ' || c == '\x7f';
    if !present {
        return "/dev/null".to_owned();
    }
    if !path.contains(special) {
        return format!("{prefix}{path}");
    }
    let mut out = format!("\"{prefix}");
    for c in path.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\x0b' => out.push_str("\\v"),
            '\x0c' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if special(c) => out.push_str(&format!("\\{:03o}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The `diff --git` line of `path`'s diff, as git writes it.
pub fn diff_git_line(path: &str) -> String {
    format!(
        "diff --git {} {}\n",
        diff_side("a/", path, true),
        diff_side("b/", path, true)
    )
}

/// The `---` and `+++` lines of `path`'s diff, as git writes them: a side with a space is followed by a tab
/// (for GNU patch).
pub fn diff_file_headers(path: &str, has_old: bool, has_new: bool) -> String {
    let line = |marker: &str, side: String| {
        let tab = if side.contains(' ') { "\t" } else { "" };
        format!("{marker} {side}{tab}\n")
    };
    line("---", diff_side("a/", path, has_old)) + &line("+++", diff_side("b/", path, has_new))
}

/// The two diffs a revert stores (SPEC section 6, steps 5 and 6), between its pre-revert snapshot and
/// `applied`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RevertDiffs {
    /// The git-style text diff from the pre-revert snapshot to `applied` (the descriptor's `diff`).
    pub text: String,
    /// The per-file diffs from `applied` to the pre-revert snapshot: the changes being undone, in the
    /// forward direction (the session diff).
    pub files: Vec<FileDiff>,
}

/// Why `track` left a path out of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "camelCase")]
pub enum SkipReason {
    /// An untracked file over the size cap.
    TooLarge {
        /// Its size in bytes.
        size: u64,
    },
    /// A name that is not valid UTF-8 (the path is shown lossily).
    NotUtf8,
    /// A FIFO, socket or device: never opened.
    Special,
    /// The worktree itself (path `.`): it lies in a directory that its enclosing git repository ignores,
    /// so under SPEC 2.2 nothing in it is tracked content, and no change to it can be reverted.
    IgnoredWorktree,
    /// A directory laid out as a git directory (`HEAD`, `objects/`, `refs/`: a bare repository, or a
    /// repository's own directory under another name): like `.git`, never snapshotted nor written, so no
    /// change to what is in it can be reverted.
    GitDir,
    /// The `.git` of a nested repository that the snapshot a step began from had, gone at the step's end
    /// (the step removed it, or the whole repository): a snapshot never holds a `.git`, so an undo of the
    /// step brings back the repository's files, not its history. Said by `track_changes` only.
    RemovedGitDir,
}

/// A path `track` skipped, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedPath {
    /// The worktree-relative path (lossy for names that are not UTF-8).
    pub path: String,
    /// Why it was skipped.
    #[serde(flatten)]
    pub reason: SkipReason,
}

/// What `track` returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackOutcome {
    /// The snapshot's id.
    pub id: SnapshotId,
    /// The paths left out.
    pub skipped: Vec<SkippedPath>,
    /// How many files had to be read and hashed (0 when the stat cache answered for every file).
    pub hashed: u64,
}

/// One patch as the snapshot port sees it: the snapshot taken when a step began, and the worktree-relative
/// files the step changed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotPatch {
    /// The snapshot at step start.
    pub hash: SnapshotId,
    /// The files the step changed.
    pub files: Vec<RelPath>,
}

/// What a revert does to one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum FileActionKind {
    /// Write the file's content from the snapshot.
    Write,
    /// Delete the file: it did not exist in the snapshot.
    Delete,
    /// Leave the file as it is (not tracked content, so a revert must not touch it).
    Keep,
}

/// One entry of a revert plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileAction {
    /// The worktree-relative path.
    pub path: RelPath,
    /// What the revert does to it.
    pub action: FileActionKind,
    /// The snapshot whose content wins for this path (the first patch naming it).
    pub from: SnapshotId,
    /// Why the file is kept, for `Keep`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A path an operation left alone, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptPath {
    /// The worktree-relative path.
    pub path: RelPath,
    /// Why it was not written or deleted.
    pub reason: String,
    /// The snapshot holding the content a revert was to put at this path (the first patch naming it),
    /// when it was to put content there: what stands in the way is kept, and that content can be put
    /// back from this snapshot once it is moved away. `None` for a path it was to delete, or leave.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<SnapshotId>,
}

/// What `restore` did (each list in path order).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreOutcome {
    /// Files written (created or overwritten).
    pub written: Vec<RelPath>,
    /// Of `written`, those where no tracked file stood before: the restore created them (a file the user
    /// deleted, put back).
    #[serde(default)]
    pub created: Vec<RelPath>,
    /// Files deleted.
    pub deleted: Vec<RelPath>,
    /// Paths left alone because they are not tracked content.
    pub kept: Vec<KeptPath>,
}

/// What `revert` did (each list in path order).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevertOutcome {
    /// The state the revert left: `base` with the written and deleted paths replaced.
    pub applied: SnapshotId,
    /// Files written.
    pub written: Vec<RelPath>,
    /// Files deleted.
    pub deleted: Vec<RelPath>,
    /// Files left alone, with the reason.
    pub kept: Vec<KeptPath>,
}

/// What `gc` freed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GcReport {
    /// Objects deleted.
    pub objects_removed: u64,
    /// Bytes freed on disk.
    pub bytes_freed: u64,
    /// Objects kept.
    pub objects_kept: u64,
}
