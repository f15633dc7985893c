//! An in-memory snapshot store over an in-memory filesystem: the `SnapshotPort` fake that the services'
//! tests and the snapshot contract suite run on.
//!
//! [`MemFs`] holds worktrees as flat maps from worktree-relative path to [`Node`] (directories are implicit,
//! so an empty directory does not exist). [`MemSnapshotStore`] keeps, per worktree, the trees that `track`
//! and `revert` produced, the paths each snapshot skipped, a log of returned ids for gc's grace period, and
//! the last tracked tree, which plays the part of git's index (the stat cache).
//!
//! Snapshot ids are git tree ids: the fake hashes its trees exactly as `git write-tree` would, so an id
//! from the fake looks like, and for the same content equals, one from the real store.
//!
//! The ignore language is a small subset of git's, read from the worktree's root `.gitignore` only: `name`
//! (that basename anywhere, file or directory), `dir/name` (that path from the root), `*.ext` (a suffix of
//! any component), `name/` and `dir/name/` (everything under such a directory); blank lines and `#`
//! comments are skipped, and so are patterns the fake does not understand (negation, `?`, `[`, `**`).

use sha1::Digest as _;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::model::{
    FileAction, FileActionKind, FileDiff, FileStatus, GcReport, KeptPath, RelPath, RestoreOutcome,
    RevertDiffs, RevertOutcome, SkipReason, SkippedPath, SnapshotId, SnapshotPatch, TrackOutcome,
    diff_file_headers, diff_git_line, diff_side,
};
use crate::ports::SnapshotPort;
use crate::revert::file_plan;
use crate::testkit::contract::snapshot::WorktreeHarness;

/// The default size cap: untracked files larger than this are skipped (SPEC 2.3).
pub const DEFAULT_SIZE_CAP: u64 = 2 * 1024 * 1024;

/// How many leading bytes git inspects for a NUL byte to call a file binary.
const BINARY_PROBE: usize = 8000;

/// Lines of context in a unified diff.
const CONTEXT_LINES: usize = 3;

/// Why an operation leaves a file alone that exists but is not tracked content.
const NOT_TRACKED_NOW: &str =
    "exists but is not tracked content now (ignored or over the size cap), so it is left as it is";

/// Why a restore to a snapshot leaves a file that snapshot did not track.
const UNTRACKED_THEN: &str = "it was not tracked content in the snapshot restored (ignored or skipped then), so \
                              it may have existed then; it is left as it is";

/// Which restore `MemSnapshotStore::restore_now` makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Restoring {
    /// `restore`: a file the target snapshot did not track is kept.
    ToSnapshot,
    /// `restore_since`: the state the caller captured, exactly.
    Since,
}

/// Why `restore_since` leaves a path alone.
const CHANGED_SINCE: &str = "it changed after the snapshot this restore started from (by someone else), so \
                             its content is in no snapshot; it is left as it is";

/// One entry of a worktree or a tree: a regular file or a symlink. Directories are implicit.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Node {
    /// A regular file.
    File {
        /// Its content.
        bytes: Vec<u8>,
        /// Whether its executable bit is set (git mode 100755 rather than 100644).
        executable: bool,
    },
    /// A symlink, with its link text.
    Symlink(String),
}

impl Node {
    /// A regular, non-executable file.
    pub fn file(bytes: impl Into<Vec<u8>>) -> Self {
        Node::File {
            bytes: bytes.into(),
            executable: false,
        }
    }

    /// A regular, executable file.
    pub fn executable(bytes: impl Into<Vec<u8>>) -> Self {
        Node::File {
            bytes: bytes.into(),
            executable: true,
        }
    }

    /// A symlink to `target`.
    pub fn symlink(target: impl Into<String>) -> Self {
        Node::Symlink(target.into())
    }

    /// What git stores as the blob: the file's bytes, or the link text.
    pub fn content(&self) -> &[u8] {
        match self {
            Node::File { bytes, .. } => bytes,
            Node::Symlink(target) => target.as_bytes(),
        }
    }

    /// The git mode: `100644`, `100755` or `120000`.
    pub fn mode(&self) -> &'static str {
        match self {
            Node::File {
                executable: false, ..
            } => "100644",
            Node::File {
                executable: true, ..
            } => "100755",
            Node::Symlink(_) => "120000",
        }
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Test failures print nodes; short text content is far easier to read than a list of numbers.
        match self {
            Node::File { bytes, executable } if bytes.len() <= 200 => f
                .debug_struct("File")
                .field("bytes", &String::from_utf8_lossy(bytes))
                .field("executable", executable)
                .finish(),
            Node::File { bytes, executable } => f
                .debug_struct("File")
                .field("len", &bytes.len())
                .field("executable", executable)
                .finish(),
            Node::Symlink(target) => f.debug_tuple("Symlink").field(target).finish(),
        }
    }
}

/// A snapshot's content, or a worktree's: worktree-relative path to node, in git's path order.
pub type Tree = BTreeMap<String, Node>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking test must not poison the fake for the tests that share it.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The parent directories of a path, outermost first (`a`, `a/b` for `a/b/c`).
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(move |(i, _)| &path[..i])
}

/// The entries of `tree` strictly inside directory `dir`.
fn inside<'t>(tree: &'t Tree, dir: &str) -> impl Iterator<Item = (&'t String, &'t Node)> {
    let prefix = format!("{dir}/");
    tree.range(prefix.clone()..)
        .take_while(move |(path, _)| path.starts_with(&prefix))
}

/// A file the plan deletes where a directory stands now is kept, as the git adapter's plan does, unless
/// the state gone back to has a directory there (the plan writes files in it) or the plan deletes every
/// file under it: the directory holds files that are not the plan's to remove (a user's made after the
/// step).
fn keep_deletes_under_occupied_dirs(nodes: &Tree, actions: &mut [FileAction]) {
    let deleted: BTreeSet<String> = actions
        .iter()
        .filter(|a| a.action == FileActionKind::Delete)
        .map(|a| a.path.as_str().to_owned())
        .collect();
    let dirs_written: BTreeSet<String> = actions
        .iter()
        .filter(|a| a.action == FileActionKind::Write)
        .flat_map(|a| {
            ancestors(a.path.as_str())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    for action in actions.iter_mut() {
        let path = action.path.as_str();
        if action.action != FileActionKind::Delete || dirs_written.contains(path) {
            continue;
        }
        let mut under = inside(nodes, path).peekable();
        if under.peek().is_some() && !under.all(|(p, _)| deleted.contains(p)) {
            action.action = FileActionKind::Keep;
            action.reason = Some("a directory stands there now; it is left as it is".to_owned());
        }
    }
}

fn is_git_path(path: &str) -> bool {
    path.split('/').any(|component| component == ".git")
}

/// One worktree of the in-memory filesystem.
#[derive(Clone, Debug, Default)]
struct MemWorktree {
    nodes: Tree,
    /// Paths whose content cannot be read (fault injection).
    failing_reads: BTreeSet<String>,
}

/// An in-memory filesystem: worktrees keyed by their root, each a flat map of files and symlinks.
#[derive(Debug, Default)]
pub struct MemFs {
    worktrees: Mutex<HashMap<PathBuf, MemWorktree>>,
}

impl MemFs {
    /// An empty filesystem, with no worktree.
    pub fn new() -> Self {
        MemFs::default()
    }

    /// Creates an empty worktree at `root`; does nothing when it exists.
    pub fn create_worktree(&self, root: impl Into<PathBuf>) {
        lock(&self.worktrees).entry(root.into()).or_default();
    }

    fn with_worktree<T>(&self, root: &Path, f: impl FnOnce(&mut MemWorktree) -> T) -> Result<T> {
        let mut worktrees = lock(&self.worktrees);
        let worktree = worktrees.get_mut(root).ok_or_else(|| {
            Error::NotFound(format!("worktree {} does not exist", root.display()))
        })?;
        Ok(f(worktree))
    }

    /// Writes a file, creating its parent directories; an existing file keeps its executable bit, as it
    /// would on disk. Fails when a parent is a file or `path` is a directory.
    pub fn write(&self, root: &Path, path: &str, bytes: &[u8]) -> Result<()> {
        let executable = matches!(
            self.read(root, path),
            Some(Node::File {
                executable: true,
                ..
            })
        );
        self.put(
            root,
            path,
            Node::File {
                bytes: bytes.to_vec(),
                executable,
            },
        )
    }

    /// Creates or replaces a symlink.
    pub fn symlink(&self, root: &Path, path: &str, target: &str) -> Result<()> {
        self.put(root, path, Node::Symlink(target.to_owned()))
    }

    /// Puts any node at `path`, as a write on disk would: fails when a parent is a file or symlink, or when
    /// `path` is a directory.
    pub fn put(&self, root: &Path, path: &str, node: Node) -> Result<()> {
        let path = RelPath::new(path)?;
        self.with_worktree(root, |worktree| {
            if let Some(parent) = path
                .ancestors()
                .find(|dir| worktree.nodes.contains_key(dir.as_str()))
            {
                return Err(Error::InvalidInput(format!(
                    "cannot write {path}: {parent} is not a directory"
                )));
            }
            if inside(&worktree.nodes, path.as_str()).next().is_some() {
                return Err(Error::InvalidInput(format!(
                    "cannot write {path}: it is a directory"
                )));
            }
            worktree.nodes.insert(path.as_str().to_owned(), node);
            Ok(())
        })?
    }

    /// Removes the file, symlink or directory tree at `path` (directories it leaves empty vanish, since
    /// directories are implicit); does nothing when nothing is there.
    pub fn remove(&self, root: &Path, path: &str) -> Result<()> {
        self.with_worktree(root, |worktree| {
            worktree.nodes.remove(path);
            let inner: Vec<String> = inside(&worktree.nodes, path)
                .map(|(p, _)| p.clone())
                .collect();
            for p in inner {
                worktree.nodes.remove(&p);
            }
        })
    }

    /// Sets or clears a file's executable bit; fails when `path` is not a regular file.
    pub fn set_executable(&self, root: &Path, path: &str, executable: bool) -> Result<()> {
        self.with_worktree(root, |worktree| match worktree.nodes.get_mut(path) {
            Some(Node::File { executable: x, .. }) => {
                *x = executable;
                Ok(())
            }
            _ => Err(Error::NotFound(format!("{path} is not a regular file"))),
        })?
    }

    /// The node at `path`, if any.
    pub fn read(&self, root: &Path, path: &str) -> Option<Node> {
        lock(&self.worktrees)
            .get(root)
            .and_then(|worktree| worktree.nodes.get(path).cloned())
    }

    /// Every file and symlink of the worktree, `.git` excluded.
    pub fn list(&self, root: &Path) -> Tree {
        lock(&self.worktrees)
            .get(root)
            .map(|worktree| {
                worktree
                    .nodes
                    .iter()
                    .filter(|(path, _)| !is_git_path(path))
                    .map(|(path, node)| (path.clone(), node.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Fault injection: reading the content of `path` fails from now on.
    pub fn fail_reads(&self, root: &Path, path: &str) -> Result<()> {
        self.with_worktree(root, |worktree| {
            worktree.failing_reads.insert(path.to_owned());
        })
    }

    fn worktree(&self, root: &Path) -> Result<MemWorktree> {
        self.with_worktree(root, |worktree| worktree.clone())
    }

    /// Applies per-path changes (`None` deletes), leaving every other path as it is.
    fn apply(&self, root: &Path, changes: Vec<(String, Option<Node>)>) -> Result<()> {
        self.with_worktree(root, |worktree| {
            for (path, node) in changes {
                match node {
                    Some(node) => worktree.nodes.insert(path, node),
                    None => worktree.nodes.remove(&path),
                };
            }
        })
    }
}

/// The ignore rules of one `.gitignore`, in the fake's small language (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IgnoreRules {
    patterns: Vec<Pattern>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Pattern {
    /// A basename anywhere: a file, or a directory and everything under it.
    Name(String),
    /// A path from the root: that file, or that directory and everything under it.
    Path(String),
    /// A suffix of any component (`*.log`).
    Suffix(String),
    /// Everything under any directory with this name (`build/`).
    DirName(String),
    /// Everything under this directory from the root (`out/build/`).
    DirPath(String),
}

impl IgnoreRules {
    /// Parses the text of a `.gitignore`.
    pub fn parse(text: &str) -> Self {
        let patterns = text
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty() && !line.starts_with('#'))
            .filter(|line| !line.starts_with('!') && !line.contains(['?', '[', '\\']))
            .filter(|line| !line.contains("**"))
            .filter_map(|line| {
                let (body, dir_only) = match line.strip_suffix('/') {
                    Some(body) => (body, true),
                    None => (line, false),
                };
                let anchored = body.contains('/');
                let body = body.trim_start_matches('/');
                if body.is_empty() {
                    return None;
                }
                if let Some(suffix) = body.strip_prefix('*') {
                    // Only a leading `*` on a single component is understood.
                    return (!anchored && !dir_only && !suffix.contains('*'))
                        .then(|| Pattern::Suffix(suffix.to_owned()));
                }
                if body.contains('*') {
                    return None;
                }
                Some(match (anchored, dir_only) {
                    (false, false) => Pattern::Name(body.to_owned()),
                    (true, false) => Pattern::Path(body.to_owned()),
                    (false, true) => Pattern::DirName(body.to_owned()),
                    (true, true) => Pattern::DirPath(body.to_owned()),
                })
            })
            .collect();
        IgnoreRules { patterns }
    }

    /// The rules of the root `.gitignore` of `tree` (none when it has no such regular file).
    pub fn of_tree(tree: &Tree) -> Self {
        match tree.get(".gitignore") {
            Some(Node::File { bytes, .. }) => IgnoreRules::parse(&String::from_utf8_lossy(bytes)),
            _ => IgnoreRules::default(),
        }
    }

    /// Whether `path` (a file's worktree-relative path) is ignored.
    pub fn is_ignored(&self, path: &str) -> bool {
        let components: Vec<&str> = path.split('/').collect();
        let (dirs, _) = components.split_at(components.len().saturating_sub(1));
        self.patterns.iter().any(|pattern| match pattern {
            Pattern::Name(name) => components.iter().any(|c| c == name),
            Pattern::Path(prefix) => {
                path == prefix
                    || path
                        .strip_prefix(prefix.as_str())
                        .is_some_and(|rest| rest.starts_with('/'))
            }
            Pattern::Suffix(suffix) => components.iter().any(|c| c.ends_with(suffix.as_str())),
            Pattern::DirName(name) => dirs.iter().any(|c| c == name),
            Pattern::DirPath(prefix) => path
                .strip_prefix(prefix.as_str())
                .is_some_and(|rest| rest.starts_with('/')),
        })
    }
}

/// The tracked content of a worktree: every file and symlink except `.git`, ignored paths, and untracked
/// files over `size_cap` (those are returned as skipped). A file in `previous` (the last tracked tree)
/// stays tracked however large it grows.
fn tracked_content(nodes: &Tree, previous: &Tree, size_cap: u64) -> (Tree, Vec<SkippedPath>) {
    let rules = IgnoreRules::of_tree(nodes);
    let mut tracked = Tree::new();
    let mut skipped = Vec::new();
    for (path, node) in nodes {
        if is_git_path(path) || rules.is_ignored(path) {
            continue;
        }
        let size = node.content().len() as u64;
        if matches!(node, Node::File { .. }) && size > size_cap && !previous.contains_key(path) {
            skipped.push(SkippedPath {
                path: path.clone(),
                reason: SkipReason::TooLarge { size },
            });
            continue;
        }
        tracked.insert(path.clone(), node.clone());
    }
    (tracked, skipped)
}

/// The git tree id of `tree`, computed exactly as `git write-tree` would (blobs, then nested trees, with
/// git's entry order, where a directory sorts as if its name ended in `/`).
pub fn tree_id(tree: &Tree) -> SnapshotId {
    enum Entry<'a> {
        Blob(&'a Node),
        Dir(BTreeMap<&'a str, Entry<'a>>),
    }

    fn insert<'a>(dir: &mut BTreeMap<&'a str, Entry<'a>>, path: &'a str, node: &'a Node) {
        match path.split_once('/') {
            None => {
                dir.insert(path, Entry::Blob(node));
            }
            Some((first, rest)) => {
                let entry = dir
                    .entry(first)
                    .or_insert_with(|| Entry::Dir(BTreeMap::new()));
                // A tree never holds a file and a directory of one name; should a caller hand one in, the
                // directory wins rather than the fake panicking.
                if let Entry::Blob(_) = entry {
                    *entry = Entry::Dir(BTreeMap::new());
                }
                if let Entry::Dir(inner) = entry {
                    insert(inner, rest, node);
                }
            }
        }
    }

    fn object_id(kind: &str, content: &[u8]) -> [u8; 20] {
        let mut hasher = sha1::Sha1::new();
        hasher.update(format!("{kind} {}\0", content.len()).as_bytes());
        hasher.update(content);
        hasher.finalize().into()
    }

    fn hash_dir(dir: &BTreeMap<&str, Entry<'_>>) -> [u8; 20] {
        let mut entries: Vec<(String, &str, [u8; 20])> = dir
            .iter()
            .map(|(name, entry)| match entry {
                Entry::Blob(node) => (
                    (*name).to_owned(),
                    node.mode(),
                    object_id("blob", node.content()),
                ),
                Entry::Dir(inner) => (format!("{name}/"), "40000", hash_dir(inner)),
            })
            .collect();
        entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let mut content = Vec::new();
        for (sort_key, mode, id) in entries {
            let name = sort_key.strip_suffix('/').unwrap_or(&sort_key);
            content.extend_from_slice(mode.as_bytes());
            content.push(b' ');
            content.extend_from_slice(name.as_bytes());
            content.push(0);
            content.extend_from_slice(&id);
        }
        object_id("tree", &content)
    }

    let mut root = BTreeMap::new();
    for (path, node) in tree {
        insert(&mut root, path, node);
    }
    let hex: String = hash_dir(&root)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    SnapshotId::parse(&hex).expect("a SHA-1 digest in hex is 40 lower-case hex digits")
}

// ---------------------------------------------------------------------------------------------------------
// Line diffs

/// One step of an edit script between two line lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Equal,
    Delete,
    Insert,
}

/// A line diff of two texts: the edit script and its counts, as `git diff --numstat` gives them.
struct LineDiff<'a> {
    old: Vec<&'a [u8]>,
    new: Vec<&'a [u8]>,
    ops: Vec<Op>,
    additions: u64,
    deletions: u64,
}

/// Splits text into lines, each keeping its `\n` (a last line without one differs from the same line
/// with one, as in git).
fn split_lines(bytes: &[u8]) -> Vec<&[u8]> {
    bytes.split_inclusive(|&b| b == b'\n').collect()
}

fn is_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(BINARY_PROBE)].contains(&0)
}

impl<'a> LineDiff<'a> {
    fn new(old_text: &'a [u8], new_text: &'a [u8]) -> Self {
        let old = split_lines(old_text);
        let new = split_lines(new_text);
        // The common prefix and suffix need no search, and trimming them keeps Myers' work small.
        let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
        let suffix = old[prefix..]
            .iter()
            .rev()
            .zip(new[prefix..].iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        let middle = myers(
            &old[prefix..old.len() - suffix],
            &new[prefix..new.len() - suffix],
        );
        let mut ops = vec![Op::Equal; prefix];
        ops.extend(middle);
        ops.extend(std::iter::repeat_n(Op::Equal, suffix));
        let additions = ops.iter().filter(|&&op| op == Op::Insert).count() as u64;
        let deletions = ops.iter().filter(|&&op| op == Op::Delete).count() as u64;
        LineDiff {
            old,
            new,
            ops,
            additions,
            deletions,
        }
    }

    /// The hunks, with `CONTEXT_LINES` of context, in git's format.
    fn hunks(&self) -> String {
        // Where each op stands in the old and new line lists.
        let mut positions = Vec::with_capacity(self.ops.len() + 1);
        let (mut i, mut j) = (0, 0);
        for op in &self.ops {
            positions.push((i, j));
            match op {
                Op::Equal => {
                    i += 1;
                    j += 1;
                }
                Op::Delete => i += 1,
                Op::Insert => j += 1,
            }
        }
        positions.push((i, j));

        let mut out = String::new();
        let mut at = 0;
        while let Some(first_change) = (at..self.ops.len()).find(|&k| self.ops[k] != Op::Equal) {
            let start = first_change.saturating_sub(CONTEXT_LINES).max(at);
            // Extend over further changes while the equal run between them is short enough that their
            // contexts would touch.
            let mut end_of_changes = first_change;
            let mut k = first_change;
            loop {
                while k < self.ops.len() && self.ops[k] != Op::Equal {
                    k += 1;
                }
                end_of_changes = end_of_changes.max(k);
                let run = (k..self.ops.len())
                    .take_while(|&e| self.ops[e] == Op::Equal)
                    .count();
                if k + run < self.ops.len() && run <= 2 * CONTEXT_LINES {
                    k += run;
                } else {
                    break;
                }
            }
            let end = (end_of_changes + CONTEXT_LINES).min(self.ops.len());
            let (old_start, new_start) = positions[start];
            let (old_end, new_end) = positions[end];
            out.push_str(&format!(
                "@@ -{} +{} @@\n",
                hunk_range(old_start, old_end - old_start),
                hunk_range(new_start, new_end - new_start)
            ));
            let (mut i, mut j) = (old_start, new_start);
            for op in &self.ops[start..end] {
                let (sign, line) = match op {
                    Op::Equal => {
                        i += 1;
                        j += 1;
                        (' ', self.old[i - 1])
                    }
                    Op::Delete => {
                        i += 1;
                        ('-', self.old[i - 1])
                    }
                    Op::Insert => {
                        j += 1;
                        ('+', self.new[j - 1])
                    }
                };
                out.push(sign);
                out.push_str(&String::from_utf8_lossy(line));
                if !line.ends_with(b"\n") {
                    out.push_str("\n\\ No newline at end of file\n");
                }
            }
            at = end;
        }
        out
    }
}

/// A hunk header's range: 1-based start and count, the count left out when it is 1, and the start being
/// the line before when the count is 0, as git writes it.
fn hunk_range(start: usize, count: usize) -> String {
    match count {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        _ => format!("{},{count}", start + 1),
    }
}

/// Myers' shortest edit script between two line lists (deletions before insertions within a change).
fn myers(old: &[&[u8]], new: &[&[u8]]) -> Vec<Op> {
    let (n, m) = (old.len() as isize, new.len() as isize);
    let max = n + m;
    let offset = max + 1;
    let at = |k: isize| (k + offset) as usize;
    let mut v = vec![0isize; (2 * max + 3) as usize];
    let mut trace: Vec<Vec<isize>> = Vec::new();
    'search: for d in 0..=max {
        trace.push(v.clone());
        let mut k = -d;
        while k <= d {
            let mut x = if k == -d || (k != d && v[at(k - 1)] < v[at(k + 1)]) {
                v[at(k + 1)]
            } else {
                v[at(k - 1)] + 1
            };
            let mut y = x - k;
            while x < n && y < m && old[x as usize] == new[y as usize] {
                x += 1;
                y += 1;
            }
            v[at(k)] = x;
            if x >= n && y >= m {
                break 'search;
            }
            k += 2;
        }
    }

    // Walk the trace back from the end to recover the script.
    let mut ops = Vec::new();
    let (mut x, mut y) = (n, m);
    for (d, v) in trace.iter().enumerate().rev() {
        let d = d as isize;
        let k = x - y;
        let prev_k = if k == -d || (k != d && v[at(k - 1)] < v[at(k + 1)]) {
            k + 1
        } else {
            k - 1
        };
        let prev_x = v[at(prev_k)];
        let prev_y = prev_x - prev_k;
        while x > prev_x && y > prev_y {
            ops.push(Op::Equal);
            x -= 1;
            y -= 1;
        }
        if d > 0 {
            ops.push(if x == prev_x { Op::Insert } else { Op::Delete });
        }
        x = prev_x;
        y = prev_y;
    }
    ops.reverse();
    ops
}

/// Whether a pair of sides gets no line diff: binary (as git decides) or over the size cap.
fn without_line_diff(old: &[u8], new: &[u8], size_cap: u64) -> bool {
    is_binary(old) || is_binary(new) || old.len() as u64 > size_cap || new.len() as u64 > size_cap
}

/// The per-file diffs between two trees, in git's path order (which is byte order of the full paths).
fn diff_trees(from: &Tree, to: &Tree, size_cap: u64) -> Vec<FileDiff> {
    let paths: BTreeSet<&String> = from.keys().chain(to.keys()).collect();
    let mut diffs = Vec::new();
    for path in paths {
        let (old, new) = (from.get(path), to.get(path));
        if old == new {
            continue;
        }
        let status = match (old, new) {
            (None, _) => FileStatus::Added,
            (_, None) => FileStatus::Deleted,
            _ => FileStatus::Modified,
        };
        let old_bytes = old.map_or(&[][..], Node::content);
        let new_bytes = new.map_or(&[][..], Node::content);
        if without_line_diff(old_bytes, new_bytes, size_cap) {
            diffs.push(FileDiff {
                file: path.clone(),
                patch: String::new(),
                additions: 0,
                deletions: 0,
                status,
            });
            continue;
        }
        let lines = LineDiff::new(old_bytes, new_bytes);
        let mut patch = diff_file_headers(path, old.is_some(), new.is_some());
        patch.push_str(&lines.hunks());
        diffs.push(FileDiff {
            file: path.clone(),
            patch,
            additions: lines.additions,
            deletions: lines.deletions,
            status,
        });
    }
    diffs
}

/// The git-style text diff between two trees (`diff --git` headers, mode lines, hunks).
fn unified_text(from: &Tree, to: &Tree, size_cap: u64) -> String {
    let paths: BTreeSet<&String> = from.keys().chain(to.keys()).collect();
    let mut out = String::new();
    for path in paths {
        let (old, new) = (from.get(path), to.get(path));
        if old == new {
            continue;
        }
        out.push_str(&diff_git_line(path));
        match (old, new) {
            (None, Some(node)) => out.push_str(&format!("new file mode {}\n", node.mode())),
            (Some(node), None) => out.push_str(&format!("deleted file mode {}\n", node.mode())),
            (Some(a), Some(b)) if a.mode() != b.mode() => {
                out.push_str(&format!("old mode {}\nnew mode {}\n", a.mode(), b.mode()));
            }
            _ => {}
        }
        let old_bytes = old.map_or(&[][..], Node::content);
        let new_bytes = new.map_or(&[][..], Node::content);
        if old_bytes == new_bytes {
            continue;
        }
        if without_line_diff(old_bytes, new_bytes, size_cap) {
            out.push_str(&format!(
                "Binary files {} and {} differ\n",
                diff_side("a/", path, old.is_some()),
                diff_side("b/", path, new.is_some())
            ));
            continue;
        }
        out.push_str(&diff_file_headers(path, old.is_some(), new.is_some()));
        out.push_str(&LineDiff::new(old_bytes, new_bytes).hunks());
    }
    out
}

// ---------------------------------------------------------------------------------------------------------
// Writing to a simulated worktree

/// What one write or delete did to the simulated worktree.
enum Step {
    Changed,
    Unchanged,
    Kept(String),
}

/// A copy of a worktree that restore and revert change step by step, so that every decision sees the
/// effects of the ones before it (patch order), and the real worktree is changed only once all is decided.
struct Applier<'a> {
    nodes: Tree,
    /// Paths this operation may overwrite or delete: tracked content at the start, plus what it wrote.
    owned: BTreeSet<String>,
    /// Whether a tracked file or symlink standing where a directory is needed may be removed.
    may_displace_ancestor: &'a dyn Fn(&str) -> bool,
    /// Whether a tracked file inside a directory standing where a file is needed may be removed.
    may_displace_inside: &'a dyn Fn(&str) -> bool,
}

impl Applier<'_> {
    fn write(&mut self, path: &str, node: &Node) -> Step {
        match self.nodes.get(path) {
            Some(current) if current == node => return Step::Unchanged,
            Some(_) if !self.owned.contains(path) => return Step::Kept(NOT_TRACKED_NOW.to_owned()),
            _ => {}
        }
        let mut displaced = Vec::new();
        for ancestor in ancestors(path) {
            if self.nodes.contains_key(ancestor) {
                if self.owned.contains(ancestor) && (self.may_displace_ancestor)(ancestor) {
                    displaced.push(ancestor.to_owned());
                } else {
                    return Step::Kept(format!(
                        "{ancestor} stands where a directory is needed, and it is not tracked content \
                         this operation may replace"
                    ));
                }
            }
        }
        for (inner, _) in inside(&self.nodes, path) {
            if self.owned.contains(inner) && (self.may_displace_inside)(inner) {
                displaced.push(inner.clone());
            } else {
                return Step::Kept(format!(
                    "a directory stands here holding {inner}, which is not tracked content or not \
                     removed by this operation"
                ));
            }
        }
        for gone in displaced {
            self.nodes.remove(&gone);
            self.owned.remove(&gone);
        }
        self.nodes.insert(path.to_owned(), node.clone());
        self.owned.insert(path.to_owned());
        Step::Changed
    }

    fn delete(&mut self, path: &str) -> Step {
        match self.nodes.get(path) {
            None => Step::Unchanged,
            Some(_) if !self.owned.contains(path) => Step::Kept(NOT_TRACKED_NOW.to_owned()),
            Some(_) => {
                self.nodes.remove(path);
                self.owned.remove(path);
                Step::Changed
            }
        }
    }
}

/// The files written (created or changed) and deleted between two states of a worktree, in path order.
fn changes_between(before: &Tree, after: &Tree) -> (Vec<String>, Vec<String>) {
    let paths: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let mut written = Vec::new();
    let mut deleted = Vec::new();
    for path in paths {
        match (before.get(path), after.get(path)) {
            (old, Some(new)) if old != Some(new) => written.push(path.clone()),
            (Some(_), None) => deleted.push(path.clone()),
            _ => {}
        }
    }
    (written, deleted)
}

fn rel_paths(paths: Vec<String>) -> Result<Vec<RelPath>> {
    paths.into_iter().map(RelPath::new).collect()
}

// ---------------------------------------------------------------------------------------------------------
// The store

/// A clock for gc's grace period, in milliseconds; the default one always answers 0, so that nothing in a
/// test depends on wall time.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// How the in-memory store behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemSnapshotConfig {
    /// Untracked files larger than this many bytes are skipped.
    pub size_cap: u64,
}

impl Default for MemSnapshotConfig {
    fn default() -> Self {
        MemSnapshotConfig {
            size_cap: DEFAULT_SIZE_CAP,
        }
    }
}

/// One worktree's store.
#[derive(Default)]
struct WorktreeStore {
    trees: HashMap<SnapshotId, Tree>,
    /// Per snapshot, the union of the paths skipped by every `track` that returned it.
    skipped: HashMap<SnapshotId, BTreeSet<String>>,
    /// When each id was last returned by `track` or `revert`.
    returned: HashMap<SnapshotId, u64>,
    /// The last tracked tree: the fake's stat cache, and the "previous snapshot" of the size cap rule.
    last_tracked: Option<(SnapshotId, Tree)>,
}

impl WorktreeStore {
    fn previous(&self) -> &Tree {
        static EMPTY: Tree = Tree::new();
        self.last_tracked.as_ref().map_or(&EMPTY, |(_, tree)| tree)
    }

    fn tree(&self, id: &SnapshotId) -> Result<&Tree> {
        self.trees
            .get(id)
            .ok_or_else(|| Error::MissingObject(format!("tree {id}")))
    }

    /// Whether `path` was not tracked content at snapshot `id`: ignored by that tree's `.gitignore`, or
    /// skipped by a `track` that returned it.
    fn untracked_at(&self, id: &SnapshotId, tree: &Tree, path: &str) -> bool {
        IgnoreRules::of_tree(tree).is_ignored(path)
            || self.skipped.get(id).is_some_and(|set| set.contains(path))
    }
}

/// The in-memory `SnapshotPort`, over a [`MemFs`] it shares with the test.
pub struct MemSnapshotStore {
    fs: Arc<MemFs>,
    config: MemSnapshotConfig,
    clock: Clock,
    stores: Mutex<HashMap<PathBuf, WorktreeStore>>,
    /// Armed by `fill_disk`.
    disk_full: std::sync::atomic::AtomicBool,
}

impl MemSnapshotStore {
    /// A store over `fs` with the default configuration and a clock that always answers 0.
    pub fn new(fs: Arc<MemFs>) -> Self {
        MemSnapshotStore::with_config(fs, MemSnapshotConfig::default())
    }

    /// A store over `fs` with the given configuration.
    pub fn with_config(fs: Arc<MemFs>, config: MemSnapshotConfig) -> Self {
        MemSnapshotStore {
            fs,
            config,
            clock: Arc::new(|| 0),
            stores: Mutex::new(HashMap::new()),
            disk_full: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Fault injection: while `full`, every `track` fails as the store's disk being full
    /// (`Error::Storage` with `StorageFault::DiskFull`) and stores nothing.
    pub fn fill_disk(&self, full: bool) {
        self.disk_full
            .store(full, std::sync::atomic::Ordering::SeqCst);
    }

    /// Uses `clock` (milliseconds) for the times logged with returned ids and for gc's grace period.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The filesystem the store reads and writes.
    pub fn fs(&self) -> &Arc<MemFs> {
        &self.fs
    }

    /// The content of a stored snapshot, if it is stored.
    pub fn tree(&self, worktree: &Path, id: &SnapshotId) -> Option<Tree> {
        lock(&self.stores)
            .get(worktree)
            .and_then(|store| store.trees.get(id).cloned())
    }

    /// Fault injection: deletes a stored tree, as if its object were lost. Answers whether it was stored.
    pub fn remove_tree(&self, worktree: &Path, id: &SnapshotId) -> bool {
        lock(&self.stores)
            .get_mut(worktree)
            .is_some_and(|store| store.trees.remove(id).is_some())
    }

    /// Refuses the filesystem root; SPEC 2.2.
    fn check_worktree(worktree: &Path) -> Result<()> {
        if worktree.parent().is_none() {
            return Err(Error::InvalidInput(format!(
                "refusing to snapshot {}: a filesystem root is not a worktree",
                worktree.display()
            )));
        }
        Ok(())
    }

    /// The worktree's nodes and its tracked content now, failing with `Unreadable` when a tracked file's
    /// content cannot be read.
    fn read_tracked(
        &self,
        worktree: &Path,
        store: &WorktreeStore,
    ) -> Result<(Tree, Tree, Vec<SkippedPath>)> {
        let state = self.fs.worktree(worktree)?;
        let (tracked, skipped) =
            tracked_content(&state.nodes, store.previous(), self.config.size_cap);
        if let Some(path) = tracked
            .keys()
            .find(|path| state.failing_reads.contains(*path))
        {
            return Err(Error::Unreadable {
                path: path.clone(),
                reason: "permission denied (injected read failure)".to_owned(),
            });
        }
        Ok((state.nodes, tracked, skipped))
    }

    /// The tracked content now, as `changed_files` and `unified_diff` compare it with tree `from`: paths
    /// that are not tracked content now (ignored, or existing but skipped) are taken out of both sides.
    fn comparable(
        &self,
        worktree: &Path,
        store: &WorktreeStore,
        from: &SnapshotId,
    ) -> Result<(Tree, Tree)> {
        let old = store.tree(from)?;
        let (nodes, tracked, _) = self.read_tracked(worktree, store)?;
        let rules = IgnoreRules::of_tree(&nodes);
        // A path of `from` is left out when it is ignored now, when something untracked stands there, or
        // when a directory that is ignored as one stands there.
        let ignored_dir_now = |path: &str| {
            let below = format!("{path}/");
            nodes
                .range(below.clone()..)
                .next()
                .is_some_and(|(p, _)| p.starts_with(&below))
                && rules.is_ignored(&below)
        };
        let old = old
            .iter()
            .filter(|(path, _)| {
                !rules.is_ignored(path)
                    && !is_git_path(path)
                    && (tracked.contains_key(*path) || !nodes.contains_key(*path))
                    && !ignored_dir_now(path)
            })
            .map(|(path, node)| (path.clone(), node.clone()))
            .collect();
        Ok((old, tracked))
    }

    fn track_now(&self, worktree: &Path) -> Result<TrackOutcome> {
        Self::check_worktree(worktree)?;
        if self.disk_full.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Error::storage(
                crate::error::StorageFault::DiskFull,
                "the snapshot store's disk is full (MemSnapshotStore::fill_disk)",
            ));
        }
        let mut stores = lock(&self.stores);
        let store = stores.entry(worktree.to_path_buf()).or_default();
        let (_, tracked, skipped) = self.read_tracked(worktree, store)?;
        // The stat cache: a node equal to the one the last track saw needs no reading.
        let hashed = tracked
            .iter()
            .filter(|(path, node)| store.previous().get(*path) != Some(*node))
            .count() as u64;
        let id = tree_id(&tracked);
        store
            .skipped
            .entry(id.clone())
            .or_default()
            .extend(skipped.iter().map(|s| s.path.clone()));
        store.trees.insert(id.clone(), tracked.clone());
        store.returned.insert(id.clone(), (self.clock)());
        store.last_tracked = Some((id.clone(), tracked));
        Ok(TrackOutcome {
            id,
            skipped,
            hashed,
        })
    }

    fn changed_files_now(&self, worktree: &Path, from: &SnapshotId) -> Result<Vec<RelPath>> {
        Self::check_worktree(worktree)?;
        let mut stores = lock(&self.stores);
        let store = stores.entry(worktree.to_path_buf()).or_default();
        let (old, new) = self.comparable(worktree, store, from)?;
        let (written, deleted) = changes_between(&old, &new);
        let mut paths: Vec<String> = written.into_iter().chain(deleted).collect();
        paths.sort();
        rel_paths(paths)
    }

    fn two_trees(
        &self,
        worktree: &Path,
        from: &SnapshotId,
        to: &SnapshotId,
    ) -> Result<(Tree, Tree)> {
        Self::check_worktree(worktree)?;
        let mut stores = lock(&self.stores);
        let store = stores.entry(worktree.to_path_buf()).or_default();
        Ok((store.tree(from)?.clone(), store.tree(to)?.clone()))
    }

    /// `restore_now` of `paths`, leaving the files that differ from `since` now (within `paths`) as they
    /// are: the others are named one by one (a named directory holding a changed file is replaced by its
    /// files).
    fn restore_since_now(
        &self,
        worktree: &Path,
        to: &SnapshotId,
        paths: Vec<RelPath>,
        since: &SnapshotId,
    ) -> Result<RestoreOutcome> {
        Self::check_worktree(worktree)?;
        let (changed, candidates) = {
            let mut stores = lock(&self.stores);
            let store = stores.entry(worktree.to_path_buf()).or_default();
            let then = store.tree(since)?;
            let target = store.tree(to)?;
            let nodes = self.fs.worktree(worktree)?.nodes;
            let (tracked, _) = tracked_content(&nodes, store.previous(), self.config.size_cap);
            let under = |path: &str, named: &str| {
                path == named
                    || path
                        .strip_prefix(named)
                        .is_some_and(|rest| rest.starts_with('/'))
            };
            let in_scope = |path: &str| paths.iter().any(|p| under(path, p.as_str()));
            let changed: BTreeSet<String> = tracked
                .keys()
                .chain(then.keys())
                .filter(|path| in_scope(path) && tracked.get(*path) != then.get(*path))
                .cloned()
                .collect();
            let candidates: BTreeSet<String> = tracked
                .keys()
                .chain(target.keys())
                .filter(|path| in_scope(path))
                .cloned()
                .chain(paths.iter().map(|p| p.as_str().to_owned()))
                .collect();
            (changed, candidates)
        };
        let scope = candidates
            .into_iter()
            .filter(|path| {
                !changed.iter().any(|c| {
                    c == path
                        || c.strip_prefix(path.as_str())
                            .is_some_and(|rest| rest.starts_with('/'))
                })
            })
            .map(RelPath::new)
            .collect::<Result<Vec<_>>>()?;
        let mut outcome = self.restore_now(worktree, to, Some(scope), Restoring::Since)?;
        for path in changed {
            outcome.kept.push(KeptPath {
                path: RelPath::new(path)?,
                reason: CHANGED_SINCE.to_owned(),
                from: None,
            });
        }
        outcome.kept.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(outcome)
    }

    fn restore_now(
        &self,
        worktree: &Path,
        to: &SnapshotId,
        paths: Option<Vec<RelPath>>,
        restoring: Restoring,
    ) -> Result<RestoreOutcome> {
        Self::check_worktree(worktree)?;
        let mut stores = lock(&self.stores);
        let store = stores.entry(worktree.to_path_buf()).or_default();
        let target = store.tree(to)?;
        let nodes = self.fs.worktree(worktree)?.nodes;
        let (tracked, _) = tracked_content(&nodes, store.previous(), self.config.size_cap);
        let in_scope = |path: &str| {
            paths.as_ref().is_none_or(|paths| {
                paths.iter().any(|p| {
                    path == p.as_str()
                        || path
                            .strip_prefix(p.as_str())
                            .is_some_and(|rest| rest.starts_with('/'))
                })
            })
        };
        // Deletions come first, so that a file can take the place of a directory they empty and the
        // reverse; after them, anything still in a write's way is not this restore's to remove.
        let never = |_: &str| false;
        let mut applier = Applier {
            nodes: nodes.clone(),
            owned: tracked.keys().cloned().collect(),
            may_displace_ancestor: &never,
            may_displace_inside: &never,
        };
        let mut kept = Vec::new();
        for path in tracked.keys() {
            if in_scope(path) && !target.contains_key(path) {
                // A file `to` did not track may have existed then: a restore to it keeps the file.
                if restoring == Restoring::ToSnapshot && store.untracked_at(to, target, path) {
                    kept.push(KeptPath {
                        path: RelPath::new(path.as_str())?,
                        reason: UNTRACKED_THEN.to_owned(),
                        from: None,
                    });
                    continue;
                }
                applier.delete(path);
            }
        }
        for path in paths.iter().flatten() {
            let path = path.as_str();
            if nodes.contains_key(path) && !tracked.contains_key(path) && !target.contains_key(path)
            {
                kept.push(KeptPath {
                    path: RelPath::new(path)?,
                    reason: NOT_TRACKED_NOW.to_owned(),
                    from: None,
                });
            }
        }
        for (path, node) in target {
            if in_scope(path)
                && let Step::Kept(reason) = applier.write(path, node)
            {
                kept.push(KeptPath {
                    path: RelPath::new(path.as_str())?,
                    reason,
                    from: None,
                });
            }
        }
        kept.sort_by(|a, b| a.path.cmp(&b.path));
        let (written, deleted) = changes_between(&nodes, &applier.nodes);
        let changes = written
            .iter()
            .map(|path| (path.clone(), applier.nodes.get(path).cloned()))
            .chain(deleted.iter().map(|path| (path.clone(), None)))
            .collect();
        self.fs.apply(worktree, changes)?;
        let created = written
            .iter()
            .filter(|path| !tracked.contains_key(path.as_str()))
            .cloned()
            .collect();
        Ok(RestoreOutcome {
            created: rel_paths(created)?,
            written: rel_paths(written)?,
            deleted: rel_paths(deleted)?,
            kept,
        })
    }

    /// Runs the plan of `patches` on a copy of the worktree: the actions, and the worktree they leave.
    fn simulate(
        &self,
        store: &WorktreeStore,
        nodes: &Tree,
        patches: &[SnapshotPatch],
    ) -> Result<(Vec<FileAction>, Tree)> {
        let entries = file_plan(patches);
        let missing: BTreeSet<String> = entries
            .iter()
            .filter(|(_, from)| !store.trees.contains_key(from))
            .map(|(_, from)| from.to_string())
            .collect();
        if !missing.is_empty() {
            return Err(Error::MissingObject(format!(
                "tree {}",
                missing.into_iter().collect::<Vec<_>>().join(", ")
            )));
        }
        let (tracked, _) = tracked_content(nodes, store.previous(), self.config.size_cap);
        let named: BTreeSet<String> = entries
            .iter()
            .map(|(path, _)| path.as_str().to_owned())
            .collect();
        // A tracked file where a directory is needed is replaced (SPEC: only untracked ones are kept); a
        // directory where a file is needed goes only when the plan removes all it holds.
        let always = |_: &str| true;
        let named_by_plan = |path: &str| named.contains(path);
        let mut applier = Applier {
            nodes: nodes.clone(),
            owned: tracked.keys().cloned().collect(),
            may_displace_ancestor: &always,
            may_displace_inside: &named_by_plan,
        };
        let mut actions = Vec::with_capacity(entries.len());
        for (path, from) in entries {
            let tree = store.tree(&from)?;
            let key = path.as_str();
            let exists = applier.nodes.contains_key(key);
            let (action, reason) = if exists && !applier.owned.contains(key) {
                (FileActionKind::Keep, Some(NOT_TRACKED_NOW.to_owned()))
            } else if let Some(node) = tree.get(key) {
                match applier.write(key, node) {
                    Step::Kept(reason) => (FileActionKind::Keep, Some(reason)),
                    Step::Changed | Step::Unchanged => (FileActionKind::Write, None),
                }
            } else if exists && store.untracked_at(&from, tree, key) {
                (
                    FileActionKind::Keep,
                    Some(format!(
                        "was not tracked content in snapshot {from} (ignored or over the size cap), so it \
                         may have existed then; it is not deleted"
                    )),
                )
            } else {
                match applier.delete(key) {
                    Step::Kept(reason) => (FileActionKind::Keep, Some(reason)),
                    Step::Changed | Step::Unchanged => (FileActionKind::Delete, None),
                }
            };
            actions.push(FileAction {
                path,
                action,
                from,
                reason,
            });
        }
        keep_deletes_under_occupied_dirs(nodes, &mut actions);
        // A tracked file standing where a written file's directory must be is replaced by the write
        // (`may_displace_ancestor`): listed as deleted, once, unless the plan names it itself.
        // One the plan keeps (a later patch's, untracked when its step began) is replaced all the same.
        let mut made_way: Vec<FileAction> = Vec::new();
        for action in actions.iter().filter(|a| a.action == FileActionKind::Write) {
            if let Some(ancestor) = ancestors(action.path.as_str()).find(|a| nodes.contains_key(*a))
                && !made_way.iter().any(|m| m.path.as_str() == ancestor)
            {
                made_way.push(FileAction {
                    path: RelPath::new(ancestor)?,
                    action: FileActionKind::Delete,
                    from: action.from.clone(),
                    reason: Some(format!(
                        "it stands where the directory of {} must come back: it is replaced",
                        action.path
                    )),
                });
            }
        }
        for replaced in made_way {
            match actions.iter_mut().find(|a| a.path == replaced.path) {
                Some(named) if named.action == FileActionKind::Keep => {
                    named.action = FileActionKind::Delete;
                    named.reason = replaced.reason;
                }
                Some(_) => {}
                None => actions.push(replaced),
            }
        }
        Ok((actions, applier.nodes))
    }

    fn plan_now(&self, worktree: &Path, patches: &[SnapshotPatch]) -> Result<Vec<FileAction>> {
        Self::check_worktree(worktree)?;
        let mut stores = lock(&self.stores);
        let store = stores.entry(worktree.to_path_buf()).or_default();
        let nodes = self.fs.worktree(worktree)?.nodes;
        Ok(self.simulate(store, &nodes, patches)?.0)
    }

    fn revert_now(
        &self,
        worktree: &Path,
        patches: &[SnapshotPatch],
        base: &SnapshotId,
    ) -> Result<RevertOutcome> {
        Self::check_worktree(worktree)?;
        let mut stores = lock(&self.stores);
        let store = stores.entry(worktree.to_path_buf()).or_default();
        // `simulate` checks every patch tree before anything is decided; the base is checked here, and
        // the worktree is changed only after both.
        let mut applied = store.tree(base)?.clone();
        let nodes = self.fs.worktree(worktree)?.nodes;
        let (actions, after) = self.simulate(store, &nodes, patches)?;
        let (written, deleted) = changes_between(&nodes, &after);

        // `applied` is computed from the trees: the base with the written and deleted paths replaced.
        for path in &deleted {
            applied.remove(path);
        }
        for path in &written {
            if let Some(node) = after.get(path) {
                for ancestor in ancestors(path) {
                    applied.remove(ancestor);
                }
                let inner: Vec<String> = inside(&applied, path).map(|(p, _)| p.clone()).collect();
                for p in inner {
                    applied.remove(&p);
                }
                applied.insert(path.clone(), node.clone());
            }
        }
        let applied_id = tree_id(&applied);
        let base_skipped = store.skipped.get(base).cloned().unwrap_or_default();
        store
            .skipped
            .entry(applied_id.clone())
            .or_default()
            .extend(base_skipped);
        store.trees.insert(applied_id.clone(), applied);
        store.returned.insert(applied_id.clone(), (self.clock)());

        let changes = written
            .iter()
            .map(|path| (path.clone(), after.get(path).cloned()))
            .chain(deleted.iter().map(|path| (path.clone(), None)))
            .collect();
        self.fs.apply(worktree, changes)?;
        // A kept path the revert was to put content at names the snapshot holding it.
        let kept = actions
            .into_iter()
            .filter(|action| action.action == FileActionKind::Keep)
            .map(|action| {
                let holds = store
                    .trees
                    .get(&action.from)
                    .is_some_and(|tree| tree.contains_key(action.path.as_str()));
                KeptPath {
                    from: holds.then_some(action.from),
                    path: action.path,
                    reason: action.reason.unwrap_or_default(),
                }
            })
            .collect();
        Ok(RevertOutcome {
            applied: applied_id,
            written: rel_paths(written)?,
            deleted: rel_paths(deleted)?,
            kept,
        })
    }

    fn gc_now(&self, worktree: &Path, keep: &[SnapshotId], grace: Duration) -> Result<GcReport> {
        Self::check_worktree(worktree)?;
        let now = (self.clock)();
        let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        let mut stores = lock(&self.stores);
        let Some(store) = stores.get_mut(worktree) else {
            return Ok(GcReport::default());
        };
        let stat_cache = store.last_tracked.as_ref().map(|(id, _)| id.clone());
        let protected = |id: &SnapshotId| {
            keep.contains(id)
                || stat_cache.as_ref() == Some(id)
                || store
                    .returned
                    .get(id)
                    .is_some_and(|&at| now.saturating_sub(at) < grace_ms)
        };
        let doomed: Vec<SnapshotId> = store
            .trees
            .keys()
            .filter(|id| !protected(id))
            .cloned()
            .collect();
        let mut report = GcReport::default();
        for id in doomed {
            if let Some(tree) = store.trees.remove(&id) {
                report.objects_removed += 1;
                report.bytes_freed += tree
                    .iter()
                    .map(|(path, node)| (path.len() + node.content().len()) as u64)
                    .sum::<u64>();
            }
            store.skipped.remove(&id);
            store.returned.remove(&id);
        }
        report.objects_kept = store.trees.len() as u64;
        Ok(report)
    }
}

#[async_trait]
impl SnapshotPort for MemSnapshotStore {
    async fn store_location(&self, worktree: &Path) -> Result<String> {
        Self::check_worktree(worktree)?;
        Ok(format!("memory:{}", worktree.display()))
    }

    async fn track(&self, worktree: &Path) -> Result<TrackOutcome> {
        self.track_now(worktree)
    }

    async fn changed_files(&self, worktree: &Path, from: &SnapshotId) -> Result<Vec<RelPath>> {
        self.changed_files_now(worktree, from)
    }

    async fn changed_between(
        &self,
        worktree: &Path,
        from: &SnapshotId,
        to: &SnapshotId,
    ) -> Result<Vec<RelPath>> {
        let (old, new) = self.two_trees(worktree, from, to)?;
        let (written, deleted) = changes_between(&old, &new);
        let mut paths: Vec<String> = written.into_iter().chain(deleted).collect();
        paths.sort();
        rel_paths(paths)
    }

    async fn diff(
        &self,
        worktree: &Path,
        from: &SnapshotId,
        to: &SnapshotId,
    ) -> Result<Vec<FileDiff>> {
        let (old, new) = self.two_trees(worktree, from, to)?;
        Ok(diff_trees(&old, &new, self.config.size_cap))
    }

    async fn unified_diff(&self, worktree: &Path, from: &SnapshotId) -> Result<String> {
        Self::check_worktree(worktree)?;
        let mut stores = lock(&self.stores);
        let store = stores.entry(worktree.to_path_buf()).or_default();
        let (old, new) = self.comparable(worktree, store, from)?;
        Ok(unified_text(&old, &new, self.config.size_cap))
    }

    async fn revert_diffs(
        &self,
        worktree: &Path,
        before: &SnapshotId,
        applied: &SnapshotId,
    ) -> Result<RevertDiffs> {
        let (old, new) = self.two_trees(worktree, before, applied)?;
        Ok(RevertDiffs {
            text: unified_text(&old, &new, self.config.size_cap),
            files: diff_trees(&new, &old, self.config.size_cap),
        })
    }

    async fn restore(
        &self,
        worktree: &Path,
        to: &SnapshotId,
        paths: Option<Vec<RelPath>>,
    ) -> Result<RestoreOutcome> {
        self.restore_now(worktree, to, paths, Restoring::ToSnapshot)
    }

    async fn restore_since(
        &self,
        worktree: &Path,
        to: &SnapshotId,
        paths: Vec<RelPath>,
        since: &SnapshotId,
    ) -> Result<RestoreOutcome> {
        self.restore_since_now(worktree, to, paths, since)
    }

    async fn plan(&self, worktree: &Path, patches: &[SnapshotPatch]) -> Result<Vec<FileAction>> {
        self.plan_now(worktree, patches)
    }

    async fn revert(
        &self,
        worktree: &Path,
        patches: &[SnapshotPatch],
        base: &SnapshotId,
    ) -> Result<RevertOutcome> {
        self.revert_now(worktree, patches, base)
    }

    async fn gc(&self, worktree: &Path, keep: &[SnapshotId], grace: Duration) -> Result<GcReport> {
        self.gc_now(worktree, keep, grace)
    }
}

// ---------------------------------------------------------------------------------------------------------
// The contract harness

/// The snapshot contract harness over the in-memory store: a fresh filesystem with one worktree.
pub struct MemHarness {
    store: MemSnapshotStore,
    root: PathBuf,
}

impl MemHarness {
    /// The worktree every in-memory harness uses.
    pub const ROOT: &'static str = "/mem/worktree";

    /// A harness with the default configuration.
    pub fn new() -> Self {
        MemHarness::with_config(MemSnapshotConfig::default())
    }

    /// A harness whose store has the given configuration.
    pub fn with_config(config: MemSnapshotConfig) -> Self {
        let fs = Arc::new(MemFs::new());
        let root = PathBuf::from(Self::ROOT);
        fs.create_worktree(&root);
        MemHarness {
            store: MemSnapshotStore::with_config(fs, config),
            root,
        }
    }

    /// The store under test.
    pub fn store(&self) -> &MemSnapshotStore {
        &self.store
    }
}

impl Default for MemHarness {
    fn default() -> Self {
        MemHarness::new()
    }
}

impl WorktreeHarness for MemHarness {
    fn port(&self) -> &dyn SnapshotPort {
        &self.store
    }

    fn root(&self) -> &Path {
        &self.root
    }

    fn write(&self, path: &str, bytes: &[u8]) {
        self.store
            .fs
            .write(&self.root, path, bytes)
            .unwrap_or_else(|e| panic!("harness: write {path}: {e}"));
    }

    fn remove(&self, path: &str) {
        self.store
            .fs
            .remove(&self.root, path)
            .unwrap_or_else(|e| panic!("harness: remove {path}: {e}"));
    }

    fn set_executable(&self, path: &str, executable: bool) {
        self.store
            .fs
            .set_executable(&self.root, path, executable)
            .unwrap_or_else(|e| panic!("harness: chmod {path}: {e}"));
    }

    fn symlink(&self, path: &str, target: &str) {
        self.store
            .fs
            .symlink(&self.root, path, target)
            .unwrap_or_else(|e| panic!("harness: symlink {path}: {e}"));
    }

    fn read(&self, path: &str) -> Option<Node> {
        self.store.fs.read(&self.root, path)
    }

    fn list(&self) -> BTreeMap<String, Node> {
        self.store.fs.list(&self.root)
    }

    fn fail_reads(&self, path: &str) {
        self.store
            .fs
            .fail_reads(&self.root, path)
            .unwrap_or_else(|e| panic!("harness: fail_reads {path}: {e}"));
    }

    fn remove_snapshot_object(&self, id: &SnapshotId) {
        assert!(
            self.store.remove_tree(&self.root, id),
            "harness: snapshot {id} is not stored"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numstat(old: &str, new: &str) -> (u64, u64) {
        let diff = LineDiff::new(old.as_bytes(), new.as_bytes());
        (diff.additions, diff.deletions)
    }

    fn lines(range: std::ops::RangeInclusive<u32>) -> Vec<String> {
        range.map(|i| format!("{i}\n")).collect()
    }

    /// The long file of the git comparison: 1..=30, with 2 and 15 replaced, "25.5" inserted after 25 and
    /// 30 deleted.
    fn long_pair() -> (String, String) {
        let old = lines(1..=30);
        let mut new = old.clone();
        new[1] = "two\n".to_owned();
        new[14] = "fifteen\n".to_owned();
        new.insert(25, "25.5\n".to_owned());
        new.pop();
        (old.concat(), new.concat())
    }

    #[test]
    fn line_counts_match_git_numstat() {
        // Expected numbers produced by `git diff --cached --numstat --no-renames` (git 2.47.3) on these
        // exact contents.
        assert_eq!(numstat("a\nb\nc\n", "a\nb\nc\nd\ne\n"), (2, 0));
        assert_eq!(numstat("1\n2\n3\n4\n", "1\n4\n"), (0, 2));
        assert_eq!(
            numstat(
                "one\ntwo\nthree\nfour\nfive\n",
                "one\n2\nthree\nfour\nfive\nsix\n"
            ),
            (2, 1)
        );
        assert_eq!(numstat("", "x\ny\nz\n"), (3, 0));
        assert_eq!(numstat("gone\n", ""), (0, 1));
        assert_eq!(numstat("a\nb", "a\nb\n"), (1, 1));
        assert_eq!(numstat("a\n", "a\n\n"), (1, 0));
        assert_eq!(numstat("a\nb\nc\nd\ne\nf\n", "b\na\nc\nf\ne\nd\n"), (3, 3));
        assert_eq!(
            numstat("x\nx\ny\nx\ny\ny\nx\n", "y\nx\nx\ny\ny\nx\nx\n"),
            (2, 2)
        );
        let (old, new) = long_pair();
        assert_eq!(numstat(&old, &new), (3, 3));
    }

    #[test]
    fn hunks_match_git_output() {
        // Expected hunks copied from `git diff --cached` (git 2.47.3) on the same contents.
        let (old, new) = long_pair();
        let expected = "\
@@ -1,5 +1,5 @@
 1
-2
+two
 3
 4
 5
@@ -12,7 +12,7 @@
 12
 13
 14
-15
+fifteen
 16
 17
 18
@@ -23,8 +23,8 @@
 23
 24
 25
+25.5
 26
 27
 28
 29
-30
";
        assert_eq!(
            LineDiff::new(old.as_bytes(), new.as_bytes()).hunks(),
            expected
        );
        assert_eq!(
            LineDiff::new(b"a\nb", b"a\nb\n").hunks(),
            "@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"
        );
        assert_eq!(
            LineDiff::new(b"", b"x\ny\nz\n").hunks(),
            "@@ -0,0 +1,3 @@\n+x\n+y\n+z\n"
        );
        assert_eq!(
            LineDiff::new(b"gone\n", b"").hunks(),
            "@@ -1 +0,0 @@\n-gone\n"
        );
    }

    #[test]
    fn tree_ids_match_git_write_tree() {
        // Ids produced by `git add -A && git write-tree` (git 2.47.3) in a directory holding these files
        // (`link` a symlink to `a.txt`, `run.sh` executable), and `git hash-object -t tree /dev/null`.
        let tree: Tree = [
            ("a.txt", Node::file("a\n")),
            ("a-b", Node::file("dash\n")),
            ("a/x", Node::file("inner\n")),
            ("run.sh", Node::executable("#!/bin/sh\n")),
            ("link", Node::symlink("a.txt")),
        ]
        .into_iter()
        .map(|(path, node)| (path.to_owned(), node))
        .collect();
        assert_eq!(
            tree_id(&tree).as_str(),
            "d2421ceb55d7bb6bf225715379eb97ff490d45b8"
        );
        assert_eq!(
            tree_id(&Tree::new()).as_str(),
            "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
        );
    }

    #[test]
    fn binary_means_a_nul_byte_in_the_first_8000_bytes() {
        let mut late_nul = vec![b'a'; 8000];
        late_nul.push(0);
        assert!(!is_binary(&late_nul));
        late_nul[7999] = 0;
        assert!(is_binary(&late_nul));
    }

    #[test]
    fn ignore_rules_understand_the_small_language() {
        let rules = IgnoreRules::parse(
            "# comment\n\n*.log\nbuild/\nsecret.txt\nout/gen/\ndocs/private.md\n!keep.log\n",
        );
        assert!(rules.is_ignored("app.log"));
        assert!(rules.is_ignored("deep/er/app.log"));
        assert!(rules.is_ignored("build/x.o"));
        assert!(rules.is_ignored("src/build/x.o"));
        assert!(
            !rules.is_ignored("build"),
            "build/ only matches a directory"
        );
        assert!(rules.is_ignored("secret.txt"));
        assert!(rules.is_ignored("a/secret.txt"));
        assert!(rules.is_ignored("out/gen/a.rs"));
        assert!(!rules.is_ignored("src/out/gen/a.rs"));
        assert!(rules.is_ignored("docs/private.md"));
        assert!(!rules.is_ignored("x/docs/private.md"));
        assert!(!rules.is_ignored("# comment"));
        assert!(!rules.is_ignored("readme.md"));
    }

    #[test]
    fn refuses_the_filesystem_root() {
        let store = MemSnapshotStore::new(Arc::new(MemFs::new()));
        let err = futures::executor::block_on(store.track(Path::new("/")))
            .expect_err("the root is refused");
        assert!(matches!(err, Error::InvalidInput(_)), "{err}");
    }
}
