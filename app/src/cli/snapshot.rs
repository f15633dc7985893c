//! `rewind snapshot track | diff | restore`: the snapshot store of this directory, for scripts and for
//! getting single files back (a restore first records a capture, so it can itself be undone).

use std::path::{Component, Path, PathBuf};

use anyhow::{Result, anyhow, bail};
use rewind_core::MessageRepo as _;
use rewind_core::SnapshotPort;
use rewind_core::model::{FileDiff, RelPath, RestoreOutcome, SnapshotId};
use serde::Serialize;

use super::context::{Context, explain};
use super::output::{colour, print_diffs, print_json, restore_command, shown, with_progress};

/// `snapshot diff --json`.
#[derive(Serialize)]
struct DiffReport {
    from: SnapshotId,
    to: SnapshotId,
    files: Vec<FileDiff>,
}

/// `snapshot restore --json`.
#[derive(Serialize)]
struct RestoreReport {
    /// The snapshot restored from.
    restored: SnapshotId,
    /// The state before the restore (`rewind snapshot restore CAPTURE` undoes it).
    capture: SnapshotId,
    written: Vec<RelPath>,
    deleted: Vec<RelPath>,
    kept: Vec<rewind_core::model::KeptPath>,
    /// Given paths found nowhere: in neither the snapshot nor the worktree (a typo, most likely).
    #[serde(rename = "notFound")]
    not_found: Vec<RelPath>,
}

/// `rewind snapshot track`.
pub async fn track(ctx: &Context) -> Result<()> {
    let outcome = with_progress("snapshotting", ctx.services.snapshots.track(&ctx.path))
        .await
        .map_err(|error| explain(error, "snapshotting"))?;
    if ctx.json {
        return print_json(&outcome);
    }
    println!("{}", outcome.id);
    for skipped in &outcome.skipped {
        let why = match &skipped.reason {
            rewind_core::model::SkipReason::TooLarge { size } => {
                // "Untracked" as SPEC 2.3 means it: in no earlier snapshot of this store, whatever the
                // user's own git index holds (review: a committed file read as untracked).
                format!(
                    "over the size cap ({size} bytes) and in no earlier snapshot (a file a snapshot \
                     holds stays tracked when it grows past the cap; `--size-cap` raises it)"
                )
            }
            rewind_core::model::SkipReason::NotUtf8 => "name is not UTF-8".to_owned(),
            rewind_core::model::SkipReason::Special => {
                "not a regular file, directory or symlink".to_owned()
            }
            rewind_core::model::SkipReason::GitDir => {
                "a git directory (HEAD, objects/, refs/: a bare repository, or a repository's own \
                 directory under another name): never snapshotted nor written, as a .git is not"
                    .to_owned()
            }
            rewind_core::model::SkipReason::RemovedGitDir => {
                "a nested repository's .git, removed since the snapshot compared with: never \
                 snapshotted, so not brought back"
                    .to_owned()
            }
            rewind_core::model::SkipReason::IgnoredWorktree => {
                "the worktree lies in a directory that its enclosing git repository ignores: nothing \
                 in it is snapshotted"
                    .to_owned()
            }
        };
        eprintln!("skipped {}: {why}", shown(skipped.path.as_str()));
    }
    Ok(())
}

/// `rewind snapshot diff FROM [TO]`.
pub async fn diff(ctx: &Context, from: &str, to: Option<&str>) -> Result<()> {
    let from = parse_snapshot(from)?;
    // FROM is read first: an unknown snapshot is refused before the worktree is snapshotted.
    refuse_not_a_snapshot(ctx, &from).await?;
    let to = match to {
        Some(to) => {
            let to = parse_snapshot(to)?;
            refuse_not_a_snapshot(ctx, &to).await?;
            to
        }
        None => {
            with_progress("snapshotting", ctx.services.snapshots.track(&ctx.path))
                .await
                .map_err(|error| explain(error, "snapshotting"))?
                .id
        }
    };
    let files = ctx
        .services
        .snapshots
        .diff(&ctx.path, &from, &to)
        .await
        .map_err(|error| explain(error, "diffing"))?;
    if ctx.json {
        return print_json(&DiffReport { from, to, files });
    }
    print_diffs(&files, colour());
    Ok(())
}

/// `rewind snapshot restore ID [PATH…]`.
pub async fn restore(ctx: &Context, id: &str, paths: &[PathBuf]) -> Result<()> {
    let id = parse_snapshot(id)?;
    let paths = if paths.is_empty() {
        None
    } else {
        Some(
            paths
                .iter()
                .map(|path| worktree_relative(&ctx.path, path))
                .collect::<Result<Vec<_>>>()?,
        )
    };
    let given = paths.clone();
    refuse_not_a_snapshot(ctx, &id).await?;
    refuse_found_nowhere(ctx, &id, given.as_deref().unwrap_or_default()).await?;
    // The command that undoes this restore: the capture, restored at the same paths when paths were given
    // (a whole restore of it would also put back files changed since, outside those paths).
    let undo_paths: Vec<String> = given
        .iter()
        .flatten()
        .map(|path| path.as_str().to_owned())
        .collect();
    let undo = move |capture: &SnapshotId| {
        restore_command(capture.as_str(), undo_paths.iter().map(String::as_str))
    };
    // Said before any file is touched, on stderr also with `--json` (stdout has only the report, printed at
    // the end): a restore killed halfway is put back with this capture.
    let undo_early = undo.clone();
    let done = with_progress(
        "restoring",
        ctx.services.rewind.restore_snapshot_reporting(
            &ctx.directory,
            &id,
            paths,
            move |capture| {
                eprintln!(
                    "rewind: the current state is captured as {capture}; `{}` puts it back, also if \
                     this restore is interrupted",
                    undo_early(capture)
                );
            },
        ),
    )
    .await
    .map_err(|error| explain(error, "restoring"))?;
    let not_found = found_nowhere(ctx, given.as_deref().unwrap_or_default(), &done.outcome);
    if ctx.json {
        return print_json(&RestoreReport {
            restored: id,
            capture: done.capture,
            written: done.outcome.written,
            deleted: done.outcome.deleted,
            kept: done.outcome.kept,
            not_found,
        });
    }
    for path in &not_found {
        eprintln!(
            "rewind: warning: {} is in neither snapshot {id} nor the worktree: nothing to restore there",
            shown(path.as_str())
        );
    }
    println!(
        "restored from {id}: {} written, {} deleted",
        done.outcome.written.len(),
        done.outcome.deleted.len()
    );
    for path in &done.outcome.written {
        println!("  written  {}", shown(path.as_str()));
    }
    for path in &done.outcome.deleted {
        println!("  deleted  {}", shown(path.as_str()));
    }
    for kept in &done.outcome.kept {
        println!("! kept     {} ({})", shown(kept.path.as_str()), kept.reason);
    }
    println!(
        "the state before is captured as {}; `{}` undoes this",
        done.capture,
        undo(&done.capture)
    );
    Ok(())
}

/// Why snapshot `id` is missing from this directory's store: the store lost it when this directory's
/// sessions or captures name it; it is another worktree's when theirs do (each command works on the store
/// of the directory it runs in, or of `-C DIR`: a warning's command run elsewhere); else it names nothing
/// this database knows of (mistyped, or of a directory whose sessions were deleted).
async fn not_in_this_store(ctx: &Context, id: &SnapshotId) -> anyhow::Error {
    let here = format!(
        "snapshot {id} is missing from the snapshot store of {} (the directory this command works on: \
         the current one, or -C DIR); nothing was changed",
        ctx.directory
    );
    let names = |directory: String| async move {
        ctx.services
            .repo
            .referenced_snapshots(Some(directory))
            .await
            .is_ok_and(|named| named.contains(id))
    };
    if names(ctx.directory.clone()).await {
        return anyhow!(
            "{here}. This directory's sessions or captures name it: the store has lost it (objects deleted or \
             damaged on disk), and what it held cannot be put back"
        );
    }
    // The directories of the sessions, and of the captures (`snapshot restore`'s are of no session).
    let mut directories: Vec<String> = match ctx.services.rewind.sessions(None).await {
        Ok(sessions) => sessions.into_iter().map(|s| s.directory).collect(),
        Err(_) => Vec::new(),
    };
    if let Ok(captures) = ctx.services.repo.captures(None).await {
        directories.extend(captures.into_iter().map(|c| c.directory));
    }
    directories.sort();
    directories.dedup();
    let mut naming = Vec::new();
    for directory in directories {
        if directory != ctx.directory && names(directory.clone()).await {
            naming.push(directory);
        }
    }
    match naming.first() {
        Some(directory) => anyhow!(
            "{here}. It is a snapshot of {}: run the command there, or as `rewind -C {} snapshot …`",
            naming.join(", "),
            super::output::shell_word(directory)
        ),
        None => anyhow!(
            "{here}. No session of this database names it: it is mistyped, or of a directory whose \
             sessions were deleted (and `rewind gc` then collects it)"
        ),
    }
}

/// Refuses an id that names no snapshot of this directory, before anything is snapshotted or touched:
/// one missing from its store (said as missing), or a tree the store holds that no snapshot of this
/// directory is (a directory inside a snapshot, git's empty tree), whose files a restore would put at the
/// worktree's root (review: a subdirectory's tree was restored over the root's files).
async fn refuse_not_a_snapshot(ctx: &Context, id: &SnapshotId) -> Result<()> {
    let known = match ctx.services.snapshots.is_snapshot(&ctx.path, id).await {
        Ok(known) => known,
        // Not in this directory's store: most often a snapshot of another worktree, whose warning was
        // read elsewhere (review: "snapshot object missing" read as a lost snapshot).
        Err(rewind_core::Error::MissingObject(_)) => {
            return Err(not_in_this_store(ctx, id).await);
        }
        Err(error) => return Err(explain(error, "reading the snapshot")),
    };
    if known {
        return Ok(());
    }
    // The store lost its record of it (a damaged store), but the database names it for this directory:
    // a snapshot all the same (review: the capture that undoes a restore was refused).
    let named = ctx
        .services
        .repo
        .referenced_snapshots(Some(ctx.directory.clone()))
        .await
        .map_err(|error| explain(error, "reading the snapshots the sessions name"))?;
    if named.contains(id) {
        return Ok(());
    }
    bail!(
        "{id} is not a snapshot of {}: the snapshot store holds it as a tree, but neither the store nor \
         the database knows it as a snapshot of this directory (it is a directory inside a snapshot, the \
         empty tree, or a snapshot whose record the store lost); `rewind snapshot track`, `rewind log \
         --json` and warnings show snapshot ids",
        ctx.directory
    )
}

/// Refuses, before anything is captured or touched, given paths that are neither in the worktree nor in
/// snapshot `id` (at that path or below it): a typo, most likely, which a restore would only capture the
/// worktree for. As `git checkout TREE -- PATH` refuses a path that matches nothing.
async fn refuse_found_nowhere(ctx: &Context, id: &SnapshotId, given: &[RelPath]) -> Result<()> {
    let absent: Vec<&RelPath> = given
        .iter()
        .filter(|path| std::fs::symlink_metadata(ctx.path.join(path.as_str())).is_err())
        .collect();
    if absent.is_empty() {
        return Ok(());
    }
    let empty = SnapshotId::parse(EMPTY_TREE).map_err(|error| anyhow!("{error}"))?;
    let in_snapshot = ctx
        .services
        .snapshots
        .changed_between(&ctx.path, &empty, id)
        .await
        .map_err(|error| explain(error, "reading the snapshot"))?;
    let nowhere: Vec<String> = absent
        .into_iter()
        .filter(|path| {
            let below = format!("{path}/");
            !in_snapshot
                .iter()
                .any(|file| file == *path || file.as_str().starts_with(&below))
        })
        .map(|path| shown(path.as_str()).into_owned())
        .collect();
    if nowhere.is_empty() {
        return Ok(());
    }
    bail!(
        "{} in neither snapshot {id} nor the worktree; nothing was restored (check the path{})",
        if nowhere.len() == 1 {
            format!("{} is", nowhere[0])
        } else {
            format!("{} are", nowhere.join(", "))
        },
        if nowhere.len() == 1 { "" } else { "s" }
    )
}

/// The empty tree's id: a snapshot of nothing, which every store holds.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// The given paths a restore found nowhere: absent from the worktree after it, and neither written,
/// deleted nor kept, at that path or below it (a path in the snapshot is written, one only on disk is
/// deleted or kept, so these were in neither).
fn found_nowhere(ctx: &Context, given: &[RelPath], outcome: &RestoreOutcome) -> Vec<RelPath> {
    let touched = |path: &RelPath| {
        let below = format!("{path}/");
        outcome
            .written
            .iter()
            .chain(&outcome.deleted)
            .chain(outcome.kept.iter().map(|kept| &kept.path))
            .any(|done| done == path || done.as_str().starts_with(&below))
    };
    given
        .iter()
        .filter(|path| std::fs::symlink_metadata(ctx.path.join(path.as_str())).is_err())
        .filter(|path| !touched(path))
        .cloned()
        .collect()
}

pub fn parse_snapshot(text: &str) -> Result<SnapshotId> {
    SnapshotId::parse(text).map_err(|error| {
        anyhow!(
            "{error}; `rewind snapshot track`, `rewind log --json` and warnings show snapshot ids"
        )
    })
}

/// A path given on the command line (relative to the worktree, or absolute inside it) as a
/// worktree-relative path; `.` and `..` are resolved by name, and a path that leaves the worktree is
/// refused.
pub(super) fn worktree_relative(worktree: &Path, path: &Path) -> Result<RelPath> {
    let relative = if path.is_absolute() {
        let lexical = normalise(path)?;
        match lexical.strip_prefix(worktree) {
            Ok(rest) => rest.to_path_buf(),
            Err(_) => match below_worktree_reached_otherwise(&lexical, worktree) {
                Some(rest) => rest,
                None => bail!(
                    "{} is outside the worktree {}; give paths inside it",
                    path.display(),
                    worktree.display()
                ),
            },
        }
    } else {
        normalise(&worktree.join(path))?
            .strip_prefix(worktree)
            .map(Path::to_path_buf)
            .map_err(|_| {
                anyhow!(
                    "{} is outside the worktree {}; give paths inside it",
                    path.display(),
                    worktree.display()
                )
            })?
    };
    let text = relative
        .to_str()
        .ok_or_else(|| anyhow!("{} is not valid UTF-8", path.display()))?;
    if text.is_empty() {
        bail!(
            "{} is the worktree itself; leave the paths out to restore everything",
            path.display()
        );
    }
    // A trailing `/` (or `/.`) names a directory: a file there, or a symlink to one, is refused, as the
    // system refuses it (review: the file was restored).
    let raw = path.as_os_str().as_encoded_bytes();
    if (raw.ends_with(b"/") || raw.ends_with(b"/."))
        && std::fs::metadata(worktree.join(text)).is_ok_and(|meta| meta.is_file())
    {
        bail!(
            "{}: {text} is a file, not a directory; leave out the trailing `/`",
            path.display()
        );
    }
    RelPath::new(text).map_err(|error| anyhow!("{error}"))
}

/// The rest of `path` below an ancestor of it that is the worktree reached another way (through a symlink
/// to it or to a directory above it: `$PWD` in a directory entered through a link; review: such a path was
/// refused as outside), taken by name below that ancestor: a symlink inside the worktree is not followed,
/// so the path names what it names there.
fn below_worktree_reached_otherwise(path: &Path, worktree: &Path) -> Option<PathBuf> {
    path.ancestors().find_map(|ancestor| {
        let reached = std::fs::canonicalize(ancestor).ok()?;
        if reached != worktree {
            return None;
        }
        path.strip_prefix(ancestor).ok().map(Path::to_path_buf)
    })
}

/// Resolves `.` and `..` by name (the path need not exist); a `..` after a regular file is refused, as the
/// system refuses it (review: `d/x/..` with `d/x` a file widened a restore of it to all of `d`).
fn normalise(path: &Path) -> Result<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                if std::fs::metadata(&out).is_ok_and(|meta| meta.is_file()) {
                    bail!(
                        "{}: {} is a file, not a directory, so the path names nothing",
                        path.display(),
                        out.display()
                    );
                }
                if !out.pop() {
                    bail!("{} leaves the root directory", path.display());
                }
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    Ok(out)
}
