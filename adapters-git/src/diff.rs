//! Differences between snapshots (the changed paths come from `tree::diff_trees`): per-file diffs with line counts (as
//! `git diff --numstat --no-renames` counts them) and 3 lines of context, and git-style text diffs.

use std::io::Read;
use std::sync::{Mutex, PoisonError};

use gix::ObjectId;
use gix::diff::blob::{Algorithm, Diff, InternedInput, sources::byte_lines};
use rewind_core::model::{
    FileDiff, FileStatus, RevertDiffs, diff_file_headers, diff_git_line, diff_side,
};

use crate::attributes::{DiffAttribute, DiffAttributes};
use crate::error::{GitError, GitResult};
use crate::odb::{Kind, Odb};
use crate::tree::{Change, Entry};

const CONTEXT: u32 = 3;
/// Git looks for a NUL byte in this many leading bytes to call a file binary.
const BINARY_PROBE: usize = 8000;
/// From how many changed files the diffs are computed on several threads.
const PARALLEL_FROM: usize = 8;

/// One side of a file's change, loaded for diffing.
enum Content {
    Absent,
    /// Over the size cap or binary (by its bytes or by its `diff` attribute): no line diff.
    Opaque,
    Text(Vec<u8>),
}

fn load(
    odb: &Odb,
    entry: Option<&Entry>,
    size_cap: u64,
    attribute: DiffAttribute,
) -> GitResult<Content> {
    let Some((_, id)) = entry else {
        return Ok(Content::Absent);
    };
    let (kind, size, mut reader) = odb.open(id)?;
    if kind != Kind::Blob {
        return Err(GitError::Corrupt(format!("object {id} is not a blob")));
    }
    if size > size_cap || attribute == DiffAttribute::Binary {
        return Ok(Content::Opaque);
    }
    let mut data = Vec::with_capacity(size as usize);
    reader
        .read_to_end(&mut data)
        .map_err(|e| GitError::Corrupt(format!("object {id}: {e}")))?;
    if attribute == DiffAttribute::Auto && data[..data.len().min(BINARY_PROBE)].contains(&0) {
        return Ok(Content::Opaque);
    }
    Ok(Content::Text(data))
}

/// A computed change of one file.
struct FileChange {
    path: String,
    old: Option<Entry>,
    new: Option<Entry>,
    binary: bool,
    additions: u64,
    deletions: u64,
    hunks: String,
}

impl FileChange {
    fn status(&self) -> FileStatus {
        match (&self.old, &self.new) {
            (None, _) => FileStatus::Added,
            (_, None) => FileStatus::Deleted,
            _ => FileStatus::Modified,
        }
    }

    /// This change as a `FileDiff` row (no patch for a binary file).
    fn into_file_diff(self) -> FileDiff {
        let patch = if self.binary {
            String::new()
        } else {
            format!("{}{}", self.headers(), self.hunks)
        };
        FileDiff {
            status: self.status(),
            additions: self.additions,
            deletions: self.deletions,
            patch,
            file: self.path,
        }
    }

    /// Appends this change to a git-style text diff.
    fn push_unified(&self, out: &mut String) {
        out.push_str(&diff_git_line(&self.path));
        let short = |id: &ObjectId| id.to_string()[..7].to_owned();
        let zero = "0000000".to_owned();
        match (&self.old, &self.new) {
            (None, Some((mode, id))) => out.push_str(&format!(
                "new file mode {}\nindex {zero}..{}\n",
                mode.header(),
                short(id)
            )),
            (Some((mode, id)), None) => out.push_str(&format!(
                "deleted file mode {}\nindex {}..{zero}\n",
                mode.header(),
                short(id)
            )),
            (Some((old_mode, old_id)), Some((new_mode, new_id))) => {
                if old_mode != new_mode {
                    out.push_str(&format!(
                        "old mode {}\nnew mode {}\n",
                        old_mode.header(),
                        new_mode.header()
                    ));
                }
                if old_id != new_id {
                    let mode = if old_mode == new_mode {
                        format!(" {}", new_mode.header())
                    } else {
                        String::new()
                    };
                    out.push_str(&format!(
                        "index {}..{}{mode}\n",
                        short(old_id),
                        short(new_id)
                    ));
                }
            }
            (None, None) => {}
        }
        if self.binary {
            let (old, new) = self.sides();
            out.push_str(&format!("Binary files {old} and {new} differ\n"));
        } else if !self.hunks.is_empty() {
            out.push_str(&self.headers());
            out.push_str(&self.hunks);
        }
    }

    /// The names git gives the two sides: `a/PATH` and `b/PATH`, `/dev/null` for a side that is absent.
    fn sides(&self) -> (String, String) {
        (
            diff_side("a/", &self.path, self.old.is_some()),
            diff_side("b/", &self.path, self.new.is_some()),
        )
    }

    /// The `---` and `+++` lines.
    fn headers(&self) -> String {
        diff_file_headers(&self.path, self.old.is_some(), self.new.is_some())
    }
}

/// The change from `before` to `after` (the loaded contents of entries `old` and `new`) of one file, its
/// hunk headers as a `FileDiff`'s patch has them (OpenCode makes those with jsdiff: no function line).
fn change_of(
    path: &str,
    old: Option<&Entry>,
    new: Option<&Entry>,
    before: &Content,
    after: &Content,
) -> FileChange {
    change_shown(path, (old, new), (before, after), Headers::Plain)
}

/// How hunk headers are written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Headers {
    /// `@@ -1,3 +1,3 @@`.
    Plain,
    /// Followed, as `git diff` writes them, by the nearest line above the hunk that starts with a letter,
    /// `_` or `$` (git's default function line, for a file with no diff driver).
    WithFunction,
}

/// `change_of`, its hunk headers written as `headers` says.
fn change_shown(
    path: &str,
    (old, new): (Option<&Entry>, Option<&Entry>),
    (before, after): (&Content, &Content),
    headers: Headers,
) -> FileChange {
    let mut change = FileChange {
        path: path.to_owned(),
        old: old.copied(),
        new: new.copied(),
        binary: false,
        additions: 0,
        deletions: 0,
        hunks: String::new(),
    };
    let (a, b): (&[u8], &[u8]) = match (before, after) {
        (Content::Opaque, _) | (_, Content::Opaque) => {
            change.binary = true;
            return change;
        }
        (Content::Text(a), Content::Text(b)) => (a, b),
        (Content::Text(a), Content::Absent) => (a, &[]),
        (Content::Absent, Content::Text(b)) => (&[], b),
        (Content::Absent, Content::Absent) => return change,
    };
    let input = InternedInput::new(byte_lines(a), byte_lines(b));
    let mut diff = Diff::compute(Algorithm::Myers, &input);
    diff.postprocess_lines(&input);
    change.additions = u64::from(diff.count_additions());
    change.deletions = u64::from(diff.count_removals());
    change.hunks = render_hunks(&diff, &input, headers);
    change
}

/// How a diff is made: the store, the size cap, and the `diff` attributes of the changed paths.
#[derive(Clone, Copy)]
pub struct Made<'a> {
    pub odb: &'a Odb,
    pub size_cap: u64,
    pub attributes: &'a DiffAttributes,
}

/// Each of `changes` read from the store (its two blobs once) and diffed by `diff`, on several threads
/// when there are enough of them, in order.
fn each_change<R: Send>(
    made: Made<'_>,
    changes: &[Change],
    diff: impl Fn(&str, Option<&Entry>, Option<&Entry>, &Content, &Content) -> R + Sync,
) -> GitResult<Vec<R>> {
    each_change_on(made, changes, crate::track::worker_threads(), diff)
}

/// `each_change` on at most `threads` threads.
fn each_change_on<R: Send>(
    made: Made<'_>,
    changes: &[Change],
    threads: usize,
    diff: impl Fn(&str, Option<&Entry>, Option<&Entry>, &Content, &Content) -> R + Sync,
) -> GitResult<Vec<R>> {
    crate::track::parallel_map_on(
        changes,
        threads,
        PARALLEL_FROM,
        || (),
        |_, (path, old, new)| {
            let attribute = made.attributes.of(path);
            let before = load(made.odb, old.as_ref(), made.size_cap, attribute)?;
            let after = load(made.odb, new.as_ref(), made.size_cap, attribute)?;
            Ok(diff(path, old.as_ref(), new.as_ref(), &before, &after))
        },
    )
}

fn render_hunks(diff: &Diff, input: &InternedInput<&[u8]>, headers: Headers) -> String {
    let hunks: Vec<_> = diff.hunks().collect();
    // git's function line: looked for from the line above each hunk up to where the previous hunk's look
    // began, and kept from that hunk when none is found between (xdiff's `get_func_line`).
    let mut function: Vec<u8> = Vec::new();
    let mut looked_from: Option<u32> = None;
    let before_len = input.before.len() as u32;
    let after_len = input.after.len() as u32;
    let line = |token: gix::diff::blob::Token| input.interner[token];
    let mut out = String::new();
    let mut i = 0;
    while i < hunks.len() {
        // Group hunks whose gap is small enough that their contexts touch, as git does.
        let mut j = i;
        while j + 1 < hunks.len() && hunks[j + 1].before.start - hunks[j].before.end <= 2 * CONTEXT
        {
            j += 1;
        }
        let first = &hunks[i];
        let last = &hunks[j];
        let lead = first.before.start.min(CONTEXT);
        let start_before = first.before.start - lead;
        let start_after = first.after.start - lead;
        let end_before = (last.before.end + CONTEXT).min(before_len);
        let trail = end_before - last.before.end;
        let end_after = last.after.end + trail;
        debug_assert!(end_after <= after_len);
        out.push_str(&format!(
            "@@ -{} +{} @@",
            range_header(start_before, end_before - start_before),
            range_header(start_after, end_after - start_after)
        ));
        if headers == Headers::WithFunction {
            for at in (looked_from.map_or(0, |l| l + 1)..start_before).rev() {
                if let Some(found) = function_line(line(input.before[at as usize])) {
                    function = found;
                    break;
                }
            }
            looked_from = start_before.checked_sub(1).or(looked_from);
            if !function.is_empty() {
                out.push(' ');
                out.push_str(&String::from_utf8_lossy(&function));
            }
        }
        out.push('\n');
        let mut pos = start_before;
        for hunk in &hunks[i..=j] {
            for k in pos..hunk.before.start {
                push_line(&mut out, ' ', line(input.before[k as usize]));
            }
            for k in hunk.before.clone() {
                push_line(&mut out, '-', line(input.before[k as usize]));
            }
            for k in hunk.after.clone() {
                push_line(&mut out, '+', line(input.after[k as usize]));
            }
            pos = hunk.before.end;
        }
        for k in pos..end_before {
            push_line(&mut out, ' ', line(input.before[k as usize]));
        }
        i = j + 1;
    }
    out
}

/// A line as git's default function line takes it: one that starts with an ASCII letter, `_` or `$`, cut
/// to 80 bytes and without the white space it then ends with (xdiff's `def_ff`; git's own `isspace`, which
/// leaves out `\v` and `\f`).
fn function_line(line: &[u8]) -> Option<Vec<u8>> {
    let first = *line.first()?;
    if !(first.is_ascii_alphabetic() || first == b'_' || first == b'$') {
        return None;
    }
    let mut kept = &line[..line.len().min(80)];
    while let Some((last, rest)) = kept.split_last()
        && matches!(last, b' ' | b'\t' | b'\n' | b'\r')
    {
        kept = rest;
    }
    Some(kept.to_vec())
}

fn range_header(start: u32, count: u32) -> String {
    match count {
        0 => format!("{start},0"),
        1 => format!("{}", start + 1),
        n => format!("{},{n}", start + 1),
    }
}

fn push_line(out: &mut String, sign: char, bytes: &[u8]) {
    out.push(sign);
    out.push_str(&String::from_utf8_lossy(bytes));
    if !bytes.ends_with(b"\n") {
        out.push_str("\n\\ No newline at end of file\n");
    }
}

/// Per-file diffs of `changes` (as `tree::diff_trees` gives them, in path order).
pub fn file_diffs(made: Made<'_>, changes: &[Change]) -> GitResult<Vec<FileDiff>> {
    each_change(made, changes, change_of).map(|computed| {
        computed
            .into_iter()
            .map(FileChange::into_file_diff)
            .collect()
    })
}

/// The git-style text diff of `changes` (OpenCode's `revert.diff`).
pub fn unified(made: Made<'_>, changes: &[Change]) -> GitResult<String> {
    let computed = each_change(made, changes, unified_text)?;
    Ok(computed.concat())
}

/// The git-style text of one file's change. A file that became a symlink, or a symlink that became a
/// file, is shown as git shows it: its deletion, then its addition (one diff of both would have
/// `git apply` refuse it: "wrong type"). Its line counts (`change_of`) stay one row, as `--numstat`'s.
fn unified_text(
    path: &str,
    old: Option<&Entry>,
    new: Option<&Entry>,
    before: &Content,
    after: &Content,
) -> String {
    let mut out = String::new();
    let is_link = |entry: &Entry| entry.0 == crate::tree::Mode::Link;
    match (old, new) {
        (Some(old_entry), Some(new_entry)) if is_link(old_entry) != is_link(new_entry) => {
            change_shown(
                path,
                (old, None),
                (before, &Content::Absent),
                Headers::WithFunction,
            )
            .push_unified(&mut out);
            change_shown(
                path,
                (None, new),
                (&Content::Absent, after),
                Headers::WithFunction,
            )
            .push_unified(&mut out);
        }
        _ => change_shown(path, (old, new), (before, after), Headers::WithFunction)
            .push_unified(&mut out),
    }
    out
}

/// A revert's diffs computed while its files were being written (see `apply::revert`), kept for the
/// `revert_diffs` call that follows the revert. One at a time in the process, keyed by the store (one per
/// worktree: the `diff` attributes are the worktree's), the two ids and the size cap.
static KEPT: Mutex<Option<KeptDiffs>> = Mutex::new(None);

struct KeptDiffs {
    store: std::path::PathBuf,
    before: ObjectId,
    applied: ObjectId,
    size_cap: u64,
    diffs: RevertDiffs,
}

/// Keeps `diffs`, the revert diffs from `before` to `applied` in the store at `store`, in place of any kept
/// before.
pub fn keep_revert_diffs(
    store: &std::path::Path,
    (before, applied): (ObjectId, ObjectId),
    size_cap: u64,
    diffs: RevertDiffs,
) {
    *KEPT.lock().unwrap_or_else(PoisonError::into_inner) = Some(KeptDiffs {
        store: store.to_path_buf(),
        before,
        applied,
        size_cap,
        diffs,
    });
}

/// The kept revert diffs from `before` to `applied` in the store at `store` (taken: a later call computes
/// them again), when both trees are still in `odb`.
pub fn kept_revert_diffs(
    (store, odb): (&std::path::Path, &Odb),
    before: &ObjectId,
    applied: &ObjectId,
    size_cap: u64,
) -> Option<RevertDiffs> {
    let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    let matches = kept.as_ref().is_some_and(|k| {
        k.store == store && k.before == *before && k.applied == *applied && k.size_cap == size_cap
    });
    if !matches {
        return None;
    }
    let diffs = kept.take().map(|k| k.diffs);
    drop(kept);
    (odb.contains(before) && odb.contains(applied))
        .then_some(diffs)
        .flatten()
}

/// A revert's two diffs from `changes` (from its pre-revert snapshot to `applied`): the text diff in that
/// direction and the per-file diffs in the other, each file's blobs read once.
pub fn revert_diffs(made: Made<'_>, changes: &[Change]) -> GitResult<RevertDiffs> {
    revert_diffs_on(made, changes, crate::track::worker_threads())
}

/// `revert_diffs` on at most `threads` threads (one beside a revert's writes, which have the others).
pub fn revert_diffs_on(
    made: Made<'_>,
    changes: &[Change],
    threads: usize,
) -> GitResult<RevertDiffs> {
    let computed = each_change_on(made, changes, threads, |path, old, new, before, after| {
        (
            unified_text(path, old, new, before, after),
            change_of(path, new, old, after, before).into_file_diff(),
        )
    })?;
    let (texts, files): (Vec<String>, Vec<FileDiff>) = computed.into_iter().unzip();
    Ok(RevertDiffs {
        text: texts.concat(),
        files,
    })
}

/// The `diff` attributes of the paths of `changes` in `store`'s worktree.
pub fn attributes_of(
    store: &crate::store::Store,
    config: &crate::config::GitStoreConfig,
    changes: &[Change],
) -> DiffAttributes {
    DiffAttributes::read(
        &store.worktree,
        (&config.attributes_file, config.home_dir.as_deref()),
        changes.iter().map(|(path, _, _)| path.as_str()),
    )
}
