//! Differences between snapshots (the changed paths come from `tree::diff_trees`): per-file diffs with line counts (as
//! `git diff --numstat --no-renames` counts them) and 3 lines of context, and git-style text diffs.

use std::io::Read;

use gix::ObjectId;
use gix::diff::blob::{Algorithm, Diff, InternedInput, sources::byte_lines};
use rewind_core::model::{FileDiff, FileStatus};

use crate::error::{GitError, GitResult};
use crate::odb::{Kind, Odb};
use crate::tree::{Change, Entry};

const CONTEXT: u32 = 3;
/// Git looks for a NUL byte in this many leading bytes to call a file binary.
const BINARY_PROBE: usize = 8000;

/// One side of a file's change, loaded for diffing.
enum Content {
    Absent,
    /// Over the size cap or binary: no line diff.
    Opaque,
    Text(Vec<u8>),
}

fn load(odb: &Odb, entry: Option<&Entry>, size_cap: u64) -> GitResult<Content> {
    let Some((_, id)) = entry else {
        return Ok(Content::Absent);
    };
    let (kind, size, mut reader) = odb.open(id)?;
    if kind != Kind::Blob {
        return Err(GitError::Corrupt(format!("object {id} is not a blob")));
    }
    if size > size_cap {
        return Ok(Content::Opaque);
    }
    let mut data = Vec::with_capacity(size as usize);
    reader
        .read_to_end(&mut data)
        .map_err(|e| GitError::Corrupt(format!("object {id}: {e}")))?;
    if data[..data.len().min(BINARY_PROBE)].contains(&0) {
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

    fn headers(&self) -> String {
        let old = if self.old.is_some() {
            format!("a/{}", self.path)
        } else {
            "/dev/null".to_owned()
        };
        let new = if self.new.is_some() {
            format!("b/{}", self.path)
        } else {
            "/dev/null".to_owned()
        };
        format!("--- {old}\n+++ {new}\n")
    }
}

fn compute(
    odb: &Odb,
    path: &str,
    old: Option<&Entry>,
    new: Option<&Entry>,
    size_cap: u64,
) -> GitResult<FileChange> {
    let before = load(odb, old, size_cap)?;
    let after = load(odb, new, size_cap)?;
    let mut change = FileChange {
        path: path.to_owned(),
        old: old.copied(),
        new: new.copied(),
        binary: false,
        additions: 0,
        deletions: 0,
        hunks: String::new(),
    };
    let (a, b): (&[u8], &[u8]) = match (&before, &after) {
        (Content::Opaque, _) | (_, Content::Opaque) => {
            change.binary = true;
            return Ok(change);
        }
        (Content::Text(a), Content::Text(b)) => (a, b),
        (Content::Text(a), Content::Absent) => (a, &[]),
        (Content::Absent, Content::Text(b)) => (&[], b),
        (Content::Absent, Content::Absent) => return Ok(change),
    };
    let input = InternedInput::new(byte_lines(a), byte_lines(b));
    let mut diff = Diff::compute(Algorithm::Myers, &input);
    diff.postprocess_lines(&input);
    change.additions = u64::from(diff.count_additions());
    change.deletions = u64::from(diff.count_removals());
    change.hunks = render_hunks(&diff, &input);
    Ok(change)
}

fn render_hunks(diff: &Diff, input: &InternedInput<&[u8]>) -> String {
    let hunks: Vec<_> = diff.hunks().collect();
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
            "@@ -{} +{} @@\n",
            range_header(start_before, end_before - start_before),
            range_header(start_after, end_after - start_after)
        ));
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
pub fn file_diffs(odb: &Odb, changes: &[Change], size_cap: u64) -> GitResult<Vec<FileDiff>> {
    changes
        .iter()
        .map(|(path, old, new)| {
            let change = compute(odb, path, old.as_ref(), new.as_ref(), size_cap)?;
            let patch = if change.binary {
                String::new()
            } else {
                format!("{}{}", change.headers(), change.hunks)
            };
            Ok(FileDiff {
                status: change.status(),
                additions: change.additions,
                deletions: change.deletions,
                patch,
                file: change.path,
            })
        })
        .collect()
}

/// The git-style text diff of `changes` (OpenCode's `revert.diff`).
pub fn unified(odb: &Odb, changes: &[Change], size_cap: u64) -> GitResult<String> {
    let mut out = String::new();
    for (path, old, new) in changes {
        let change = compute(odb, path, old.as_ref(), new.as_ref(), size_cap)?;
        out.push_str(&format!("diff --git a/{path} b/{path}\n"));
        let short = |id: &ObjectId| id.to_string()[..7].to_owned();
        let zero = "0000000".to_owned();
        match (&change.old, &change.new) {
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
        if change.binary {
            let old = if change.old.is_some() {
                format!("a/{path}")
            } else {
                "/dev/null".to_owned()
            };
            let new = if change.new.is_some() {
                format!("b/{path}")
            } else {
                "/dev/null".to_owned()
            };
            out.push_str(&format!("Binary files {old} and {new} differ\n"));
        } else if !change.hunks.is_empty() {
            out.push_str(&change.headers());
            out.push_str(&change.hunks);
        }
    }
    Ok(out)
}
