//! Another program changing the worktree while a revert or restore writes it (SPEC 2.5): a directory
//! turned into a symlink is never written through, and a file created or edited after rewind checked the
//! path is left as it is and named as kept. The change is made from the store's race hook
//! (`GitStoreConfig::change_hook`), called after every check and right before the write or delete, or from
//! its read hook, called while the revert compares its targets with the snapshot it started from.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use rewind_core::model::{KeptPath, RelPath, SnapshotId, SnapshotPatch};
use rewind_core::testkit::contract::snapshot::{Node, WorktreeHarness};

use crate::harness::{GitHarness, list_tree};

/// What a hook does once, the first time it is called with its path.
pub(crate) type Action = Box<dyn FnOnce(&Path) + Send>;

/// The action a hook runs, once armed.
pub(crate) type Armed = Arc<Mutex<Option<Action>>>;

/// A harness whose race hook runs the armed action (given the worktree) the first time rewind is about to
/// write or delete `at` after it is armed; with `on_read`, the first time rewind reads `at` (as the revert
/// does to compare it with its snapshot).
fn racing(at: &'static str, on_read: bool) -> (GitHarness, Armed) {
    racing_in(at, if on_read { Hook::Read } else { Hook::Change })
}

/// Which of the store's hooks runs the armed action.
pub(crate) enum Hook {
    /// The read hook: while the revert compares its targets with its snapshot, and right before a track
    /// reads a file's content.
    Read,
    /// The race hook: after every check, right before the write or delete.
    Change,
    /// The last moment: after the last look at the file to be replaced, right before the swap.
    Swap,
    /// Right after the write: the new content stands at the path, its stat data not yet taken.
    Written,
    /// The walk hook: right before a track's walk looks at a directory (`sub/`).
    Walk,
}

/// A harness whose `hook` runs the armed action (given the worktree) the first time it is called with
/// `at` after it is armed (`arm`).
pub(crate) fn racing_in(at: &'static str, hook: Hook) -> (GitHarness, Armed) {
    let armed: Armed = Arc::default();
    let pending = Arc::clone(&armed);
    let h = GitHarness::with_config(move |config, base| {
        let wt = base.join("wt");
        let run = move |path: &str| {
            if path == at {
                let action = pending
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                if let Some(action) = action {
                    action(&wt);
                }
            }
        };
        match hook {
            Hook::Read => {
                config.read_fault = Some(Arc::new(move |path: &str| {
                    run(path);
                    false
                }));
            }
            Hook::Change => config.change_hook = Some(Arc::new(run)),
            Hook::Swap => config.swap_hook = Some(Arc::new(run)),
            Hook::Written => config.written_hook = Some(Arc::new(run)),
            Hook::Walk => config.walk_hook = Some(Arc::new(run)),
        }
    });
    (h, armed)
}

/// No temporary or kept-aside file of rewind's stands in the worktree's top directory.
fn nothing_of_rewind_s_is_left(h: &GitHarness, how: &str) {
    let names = names_in(h.root());
    assert!(
        names.iter().all(|n| !n.contains(".rewind-")),
        "{how}: nothing of rewind's is left: {names:?}"
    );
}

pub(crate) fn arm(armed: &Armed, action: Action) {
    *armed.lock().unwrap_or_else(PoisonError::into_inner) = Some(action);
}

/// A file `name` of the worktree written with `content` (the edit another program makes).
fn writes(name: &'static str, content: &'static str) -> Action {
    Box::new(move |wt: &Path| fs::write(wt.join(name), content).expect("the other program's write"))
}

/// Tracks (the revert's `base`), arms `action`, and reverts `files` to snapshot `s`.
async fn revert_racing(
    h: &GitHarness,
    armed: &Armed,
    action: Action,
    s: &SnapshotId,
    files: &[&str],
) -> rewind_core::model::RevertOutcome {
    let base = h.id().await;
    arm(armed, action);
    h.port()
        .revert(h.root(), &patch(s, files), &base)
        .await
        .expect("revert")
}

fn patch(hash: &SnapshotId, files: &[&str]) -> Vec<SnapshotPatch> {
    vec![SnapshotPatch {
        hash: hash.clone(),
        files: files
            .iter()
            .map(|p| RelPath::new(*p).expect("a valid relative path"))
            .collect(),
    }]
}

fn kept<'a>(kept: &'a [KeptPath], path: &str) -> Option<&'a KeptPath> {
    kept.iter().find(|k| k.path.as_str() == path)
}

/// Writes `v1` to each of `files` and tracks (the snapshot returned: what the revert goes back to), then
/// writes `v2` to each (the step's edits).
async fn v1_then_v2(h: &GitHarness, files: &[&str]) -> SnapshotId {
    for file in files {
        h.write(file, b"v1\n");
    }
    let s = h.id().await;
    for file in files {
        h.write(file, b"v2\n");
    }
    s
}

/// The operation kept `path` with a reason that says `words`.
fn kept_saying(outcome_kept: &[KeptPath], path: &str, words: &str, how: &str) {
    let reason = kept(outcome_kept, path).map(|k| k.reason.as_str());
    assert!(
        reason.is_some_and(|r| r.contains(words)),
        "{how}: {path} kept saying {words:?}: {outcome_kept:?}"
    );
}

/// The operation wrote `path` alone.
fn wrote_only(written: &[RelPath], path: &str, how: &str) {
    assert_eq!(written, [RelPath::new(path).expect("a path")], "{how}");
}

fn text(content: &str) -> Option<Node> {
    Some(Node::file(content))
}

/// A directory outside the worktree, and its listing.
fn outside(h: &GitHarness) -> (PathBuf, std::collections::BTreeMap<String, Node>) {
    let dir = h.base().join("outside");
    fs::create_dir_all(&dir).expect("mkdir outside");
    fs::write(dir.join("x.txt"), "outside, do not touch\n").expect("write outside");
    let listing = list_tree(&dir);
    (dir, listing)
}

/// Moves `wt/b` aside to `wt/b-moved` and puts a symlink to the sibling `outside` directory in its place.
fn swap_b_for_a_symlink() -> Action {
    Box::new(|wt: &Path| {
        fs::rename(wt.join("b"), wt.join("b-moved")).expect("move b aside");
        let outside = wt.parent().expect("the base directory").join("outside");
        std::os::unix::fs::symlink(outside, wt.join("b")).expect("symlink b");
    })
}

/// Puts `wt/b` back as the directory it was, so the worktree can be compared with a snapshot.
fn unswap_b(h: &GitHarness) {
    fs::remove_file(h.path("b")).expect("remove the symlink");
    fs::rename(h.path("b-moved"), h.path("b")).expect("move b back");
}

#[tokio::test]
async fn a_directory_turned_into_a_symlink_while_a_revert_writes_is_not_written_through() {
    let (h, armed) = racing("b/x.txt", false);
    let (outside, outside_before) = outside(&h);
    h.write("a/1.txt", b"v1\n");
    h.write("b/x.txt", b"v1\n");
    let s = h.id().await;
    h.write("a/1.txt", b"v2\n");
    h.write("b/x.txt", b"v2 longer\n");
    let outcome = revert_racing(
        &h,
        &armed,
        swap_b_for_a_symlink(),
        &s,
        &["a/1.txt", "b/x.txt"],
    )
    .await;
    assert_eq!(
        list_tree(&outside),
        outside_before,
        "nothing written outside"
    );
    assert_eq!(h.read("a/1.txt"), text("v1\n"));
    assert_eq!(
        h.read("b-moved/x.txt"),
        text("v2 longer\n"),
        "left as it was"
    );
    assert!(
        kept(&outcome.kept, "b/x.txt").is_some(),
        "named as kept: {outcome:?}"
    );
    let written: Vec<&str> = outcome.written.iter().map(RelPath::as_str).collect();
    assert_eq!(written, ["a/1.txt"]);
    // `applied` is what the files are now: a/1.txt reverted, b/x.txt as it was.
    unswap_b(&h);
    assert_eq!(h.id().await, outcome.applied);
}

#[tokio::test]
async fn a_directory_turned_into_a_symlink_while_a_restore_writes_is_not_written_through() {
    let (h, armed) = racing("b/x.txt", false);
    let (outside, outside_before) = outside(&h);
    h.write("a/1.txt", b"v1\n");
    h.write("b/x.txt", b"v1\n");
    let s = h.id().await;
    h.write("a/1.txt", b"v2\n");
    h.write("b/x.txt", b"v2 longer\n");
    h.track().await;
    arm(&armed, swap_b_for_a_symlink());
    let outcome = h.port().restore(h.root(), &s, None).await.expect("restore");
    assert_eq!(
        list_tree(&outside),
        outside_before,
        "nothing written outside"
    );
    assert_eq!(h.read("a/1.txt"), text("v1\n"));
    assert_eq!(h.read("b-moved/x.txt"), text("v2 longer\n"));
    assert!(
        kept(&outcome.kept, "b/x.txt").is_some(),
        "named as kept: {outcome:?}"
    );
}

#[tokio::test]
async fn a_file_created_where_a_revert_creates_one_is_left_alone() {
    let (h, armed) = racing("c.txt", false);
    h.write("c.txt", b"v1\n");
    h.write("other.txt", b"v1\n");
    let s = h.id().await;
    h.remove("c.txt");
    h.write("other.txt", b"v2\n");
    let action = writes("c.txt", "the user's\n");
    let outcome = revert_racing(&h, &armed, action, &s, &["c.txt", "other.txt"]).await;
    assert_eq!(h.read("c.txt"), text("the user's\n"), "not overwritten");
    assert_eq!(h.read("other.txt"), text("v1\n"));
    assert!(kept(&outcome.kept, "c.txt").is_some(), "{outcome:?}");
    // `applied` holds no c.txt (as `base`): the user's file is untracked by this revert.
    fs::remove_file(h.path("c.txt")).expect("remove c.txt");
    assert_eq!(h.id().await, outcome.applied);
}

#[tokio::test]
async fn a_file_edited_right_before_a_revert_overwrites_it_is_left_alone() {
    let (h, armed) = racing("e.txt", false);
    h.write("e.txt", b"v1\n");
    let s = h.id().await;
    h.write("e.txt", b"v2\n");
    let base = h.id().await;
    let action = writes("e.txt", "edited meanwhile\n");
    let outcome = revert_racing(&h, &armed, action, &s, &["e.txt"]).await;
    assert_eq!(h.read("e.txt"), text("edited meanwhile\n"));
    assert!(kept(&outcome.kept, "e.txt").is_some(), "{outcome:?}");
    assert!(outcome.written.is_empty(), "{outcome:?}");
    assert_eq!(outcome.applied, base);
}

/// A file the user deletes after the revert checked it, right before the revert would overwrite it, stays
/// deleted: the path is kept with a reason and left out of `applied` (which holds `base`'s entry), and the
/// other file is reverted. The deletion is seen at the last look, or by the swap itself when it comes
/// after that look; both when the revert's write takes its check's look as its own (it has changed no
/// directory yet) and when it looked again (the revert deleted a file first).
#[tokio::test]
async fn a_file_deleted_right_before_a_revert_overwrites_it_stays_deleted() {
    for deletes_first in [false, true] {
        for (hook, at) in [
            (Hook::Change, "before the last look"),
            (Hook::Swap, "before the swap"),
        ] {
            let when = format!("{at}, deleting a file first: {deletes_first}");
            let (h, armed) = racing_in("d.txt", hook);
            let s = v1_then_v2(&h, &["d.txt", "other.txt"]).await;
            let mut files = vec!["d.txt", "other.txt"];
            if deletes_first {
                h.write("made.txt", b"made by the step\n");
                files.push("made.txt");
            }
            let base = h.id().await;
            let action: Action =
                Box::new(|wt: &Path| fs::remove_file(wt.join("d.txt")).expect("the user's delete"));
            let outcome = revert_racing(&h, &armed, action, &s, &files).await;
            assert_eq!(h.read("d.txt"), None, "{when}: not written back");
            assert_eq!(h.read("other.txt"), text("v1\n"), "{when}");
            assert_eq!(h.read("made.txt"), None, "{when}");
            kept_saying(
                &outcome.kept,
                "d.txt",
                "changed while rewind was writing",
                &when,
            );
            wrote_only(&outcome.written, "other.txt", &when);
            // `applied` is `base` with other.txt reverted (and made.txt deleted): d.txt as `base` has it.
            let mut changed = changed_in_applied(&h, &base, &outcome.applied).await;
            changed.sort_unstable();
            let expected: &[&str] = if deletes_first {
                &["made.txt", "other.txt"]
            } else {
                &["other.txt"]
            };
            assert_eq!(changed, expected, "{when}");
        }
    }
}

/// A directory another program removes whole right before the revert swaps a file into it (taking the
/// revert's temporary file with it) does not fail the revert: the file is left removed, named as kept,
/// and the other file is reverted. Black-box: `rm -rf` of a directory during an undo failed it, and the
/// rollback put back older versions of the files it had written.
#[tokio::test]
async fn a_directory_removed_right_before_the_swap_does_not_fail_the_revert() {
    let (h, armed) = racing_in("d/a.txt", Hook::Swap);
    let s = v1_then_v2(&h, &["d/a.txt", "other.txt"]).await;
    let action: Action = Box::new(|wt: &Path| fs::remove_dir_all(wt.join("d")).expect("rm -rf d"));
    let outcome = revert_racing(&h, &armed, action, &s, &["d/a.txt", "other.txt"]).await;
    assert!(!h.path("d").exists(), "left removed");
    assert_eq!(h.read("other.txt"), text("v1\n"));
    assert!(kept(&outcome.kept, "d/a.txt").is_some(), "{outcome:?}");
    wrote_only(&outcome.written, "other.txt", "");
}

/// A write that lands after the last look at a file and before the new content replaces it (the window
/// of a check then a rename) is not lost: the two are swapped in one step and what came out is looked at;
/// the user's file goes back, and the path is kept. Black-box: under a stress run, and widened on a slow
/// FUSE filesystem, a user's edit in that window was overwritten with no copy and no warning. Both ways
/// a program writes: in place (the same file) and by renaming a new file over it.
#[tokio::test]
async fn a_write_between_the_last_look_and_the_swap_is_not_lost() {
    type Write = fn(&Path);
    let in_place: Write = |wt| fs::write(wt.join("e.txt"), "edited in place\n").expect("write");
    let by_rename: Write = |wt| {
        fs::write(wt.join(".e.txt.swp"), "edited by rename\n").expect("write");
        fs::rename(wt.join(".e.txt.swp"), wt.join("e.txt")).expect("rename");
    };
    for (how, write, expected) in [
        ("in place", in_place, "edited in place\n"),
        ("by rename", by_rename, "edited by rename\n"),
    ] {
        let (h, armed) = racing_in("e.txt", Hook::Swap);
        h.write("e.txt", b"v1\n");
        h.write("other.txt", b"o1\n");
        let s = h.id().await;
        h.write("e.txt", b"v2\n");
        h.write("other.txt", b"o2\n");
        let outcome = revert_racing(
            &h,
            &armed,
            Box::new(move |wt: &Path| write(wt)),
            &s,
            &["e.txt", "other.txt"],
        )
        .await;
        assert_eq!(h.read("e.txt"), text(expected), "{how}");
        assert!(kept(&outcome.kept, "e.txt").is_some(), "{how}: {outcome:?}");
        // The other file, with no write in its window, is reverted.
        assert_eq!(h.read("other.txt"), text("o1\n"), "{how}");
        nothing_of_rewind_s_is_left(&h, how);
    }
}

/// The names in directory `dir`.
fn names_in(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The content of the one file kept beside `name` in `dir` (`<name>.rewind-kept-…`), which must be there.
fn kept_beside(dir: &Path, name: &str, how: &str) -> String {
    let names = names_in(dir);
    let aside: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with(&format!("{name}.rewind-kept-")))
        .collect();
    assert_eq!(aside.len(), 1, "{how}: {names:?}");
    fs::read_to_string(dir.join(aside[0])).expect("read")
}

/// The paths whose entry differs between `base` and an operation's `applied`.
async fn changed_in_applied(
    h: &GitHarness,
    base: &SnapshotId,
    applied: &SnapshotId,
) -> Vec<String> {
    let diffs = h.port().diff(h.root(), base, applied).await.expect("diff");
    diffs.iter().map(|d| d.file.as_str().to_owned()).collect()
}

/// A harness whose race hooks play another program at `at`: it opens the file for writing right before
/// rewind swaps it out or moves it aside (`swap_hook`), and, when rewind looks at it again (`settle_hook`),
/// writes `written` through that handle (after truncating it, with `truncate`; else appending), then
/// saves `newer` at the name, when given.
fn writing_through_an_old_handle(
    at: &'static str,
    truncate: bool,
    written: &'static str,
    newer: Option<&'static str>,
) -> GitHarness {
    let handle: Arc<Mutex<Option<fs::File>>> = Arc::default();
    let (opening, writing) = (Arc::clone(&handle), Arc::clone(&handle));
    GitHarness::with_config(move |config, base| {
        let wt = base.join("wt");
        let wt_later = wt.clone();
        config.swap_hook = Some(Arc::new(move |path: &str| {
            if path == at {
                let file = fs::OpenOptions::new()
                    .write(true)
                    .append(!truncate)
                    .open(wt.join(path))
                    .expect("the other program opens the file");
                *opening.lock().unwrap_or_else(PoisonError::into_inner) = Some(file);
            }
        }));
        config.settle_hook = Some(Arc::new(move |path: &str| {
            if path != at {
                return;
            }
            let file = writing
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some(mut file) = file {
                use std::io::Write;
                if truncate {
                    file.set_len(0).expect("truncate");
                }
                file.write_all(written.as_bytes())
                    .expect("the other program writes");
                if let Some(newer) = newer {
                    fs::write(wt_later.join(path), newer).expect("the newer write");
                }
            }
        }));
    })
}

/// A program that opened a file before the revert swapped new content in, and writes through that handle
/// after the swap (a write already under way: an editor's save, or an open whose truncation came just
/// after the swap), still reaches the file swapped out, not the new one. That file is left at the
/// revert's temporary name until the revert's writes are done, and looked at again: written to, it goes
/// back to its name, the new content is removed, and the path is kept. When a newer write already stands
/// at the name (a second save, after the swap), that one stays, and the earlier one is kept beside it.
/// Black-box: in a race audit, such a write was lost, neither on disk nor in the store (the file swapped
/// out was removed right after the swap).
#[tokio::test]
async fn a_write_through_a_handle_opened_before_the_swap_is_not_lost() {
    for newer in [false, true] {
        let how = if newer {
            "with a newer write at the name"
        } else {
            "alone"
        };
        let h = writing_through_an_old_handle(
            "e.txt",
            true,
            "written through its old handle\n",
            newer.then_some("saved again\n"),
        );
        let s = v1_then_v2(&h, &["e.txt", "other.txt"]).await;
        let base = h.id().await;
        let outcome = h
            .port()
            .revert(h.root(), &patch(&s, &["e.txt", "other.txt"]), &base)
            .await
            .expect("revert");
        kept_saying(
            &outcome.kept,
            "e.txt",
            "changed while rewind was writing",
            how,
        );
        wrote_only(&outcome.written, "other.txt", how);
        assert_eq!(h.read("other.txt"), text("v1\n"), "{how}");
        if newer {
            assert_eq!(h.read("e.txt"), text("saved again\n"), "{how}");
            assert_eq!(
                kept_beside(h.root(), "e.txt", how),
                "written through its old handle\n"
            );
        } else {
            assert_eq!(
                h.read("e.txt"),
                text("written through its old handle\n"),
                "{how}"
            );
            nothing_of_rewind_s_is_left(&h, how);
        }
        // `applied` holds `base`'s entry for the path left as it is.
        assert_eq!(
            changed_in_applied(&h, &base, &outcome.applied).await,
            ["other.txt"],
            "{how}"
        );
    }
}

/// Tracks `dir/file.txt`, replaces the directory `dir` with a file (tracked), and reverts the file's
/// patch: the revert needs `dir` as a directory again.
async fn revert_where_a_file_took_a_directory_s_place(
    h: &GitHarness,
) -> rewind_core::model::RevertOutcome {
    h.write("dir/file.txt", b"v1\n");
    let s = h.id().await;
    h.remove("dir");
    h.write("dir", b"dir is a file\n");
    let base = h.id().await;
    h.port()
        .revert(h.root(), &patch(&s, &["dir/file.txt"]), &base)
        .await
        .expect("revert")
}

/// A tracked file standing where a revert needs a directory is moved aside and settled like a deleted
/// file: a write that lands through a handle opened before the move (an editor's save under way) is kept
/// beside the new directory as `<name>.rewind-kept-…`, and the path is named as kept, while the directory
/// and the file in it are written. Review: the file was unlinked right after its last look, and such a
/// write went with it.
#[tokio::test]
async fn a_write_to_a_file_replaced_by_a_directory_is_kept_beside_it() {
    let h = writing_through_an_old_handle("dir", false, "appended by an editor\n", None);
    let outcome = revert_where_a_file_took_a_directory_s_place(&h).await;
    assert_eq!(h.read("dir/file.txt"), text("v1\n"));
    wrote_only(&outcome.written, "dir/file.txt", "the directory's file");
    kept_saying(
        &outcome.kept,
        "dir",
        "written to while rewind replaced it",
        "dir",
    );
    assert_eq!(
        kept_beside(h.root(), "dir", "the editor's write"),
        "dir is a file\nappended by an editor\n"
    );
    // `applied` is the worktree as the revert left it, the kept file aside.
    let kept_name = names_in(h.root())
        .into_iter()
        .find(|n| n.starts_with("dir.rewind-kept-"))
        .expect("kept beside");
    let now = h.id().await;
    assert_eq!(
        changed_in_applied(&h, &outcome.applied, &now).await,
        [kept_name]
    );
}

/// The same with a name so long that `<name>.rewind-kept-<temporary name>` would be over the 255 bytes a
/// name may have: the earlier write is kept as `rewind-kept-<batch>-<n>` instead (black-box: the move
/// aside failed unseen, the path was reported kept, and the write stayed at the temporary name, hidden
/// from every snapshot).
#[tokio::test]
async fn a_write_kept_aside_under_a_long_name_is_kept_under_a_short_one() {
    let long: &'static str = Box::leak(format!("{}.txt", "e".repeat(236)).into_boxed_str());
    let h = writing_through_an_old_handle(
        long,
        true,
        "written through its old handle\n",
        Some("saved again\n"),
    );
    let s = v1_then_v2(&h, &[long, "other.txt"]).await;
    let base = h.id().await;
    let outcome = h
        .port()
        .revert(h.root(), &patch(&s, &[long, "other.txt"]), &base)
        .await
        .expect("revert");
    kept_saying(
        &outcome.kept,
        long,
        "changed while rewind was writing",
        "long",
    );
    assert_eq!(h.read(long), text("saved again\n"));
    let names = names_in(h.root());
    let kept: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("rewind-kept-"))
        .collect();
    assert_eq!(kept.len(), 1, "{names:?}");
    assert_eq!(
        fs::read_to_string(h.root().join(kept[0])).expect("read"),
        "written through its old handle\n"
    );
    assert!(
        names.iter().all(|n| !n.starts_with(".rewind-")),
        "no temporary file is left: {names:?}"
    );
}

/// The same for a file a revert deletes, alone in its directory: moved aside, it is looked at again at
/// the revert's end. A write through a handle another program opened before the move goes back to the
/// path (its directory stays), or beside a newer file made there meanwhile; the path is kept.
#[tokio::test]
async fn a_write_through_a_handle_opened_before_a_delete_is_not_lost() {
    for newer in [false, true] {
        let how = if newer {
            "with a newer file at the name"
        } else {
            "alone"
        };
        let h = writing_through_an_old_handle(
            "sub/made.txt",
            false,
            "appended through its old handle\n",
            newer.then_some("made again\n"),
        );
        h.write("keep.txt", b"k\n");
        let s = h.id().await;
        h.write("sub/made.txt", b"made by the step\n");
        h.write("gone/made.txt", b"made by the step too\n");
        let base = h.id().await;
        let outcome = h
            .port()
            .revert(
                h.root(),
                &patch(&s, &["sub/made.txt", "gone/made.txt"]),
                &base,
            )
            .await
            .expect("revert");
        kept_saying(
            &outcome.kept,
            "sub/made.txt",
            "changed while rewind was writing",
            how,
        );
        assert_eq!(
            outcome.deleted,
            [RelPath::new("gone/made.txt").expect("a path")],
            "{how}"
        );
        assert!(!h.root().join("gone").exists(), "{how}: emptied, removed");
        let both = "made by the step\nappended through its old handle\n";
        let sub = h.root().join("sub");
        if newer {
            assert_eq!(h.read("sub/made.txt"), text("made again\n"), "{how}");
            assert_eq!(kept_beside(&sub, "made.txt", how), both);
        } else {
            assert_eq!(h.read("sub/made.txt"), text(both), "{how}");
            assert_eq!(
                names_in(&sub),
                ["made.txt"],
                "{how}: nothing of rewind's is left"
            );
        }
        // `applied` holds `base`'s entry for the path left as it is.
        assert_eq!(
            changed_in_applied(&h, &base, &outcome.applied).await,
            ["gone/made.txt"],
            "{how}"
        );
    }
}

/// The same for a file a revert deletes: it is moved aside in one step and looked at; a write that
/// landed between the last look and the move puts it back, kept.
#[tokio::test]
async fn a_write_between_the_last_look_and_a_delete_is_not_lost() {
    let (h, armed) = racing_in("d.txt", Hook::Swap);
    h.write("keep.txt", b"k\n");
    let s = h.id().await;
    h.write("d.txt", b"made later\n");
    h.write("gone.txt", b"made later too\n");
    let outcome = revert_racing(
        &h,
        &armed,
        writes("d.txt", "edited in the window\n"),
        &s,
        &["d.txt", "gone.txt"],
    )
    .await;
    assert_eq!(h.read("d.txt"), text("edited in the window\n"));
    assert!(kept(&outcome.kept, "d.txt").is_some(), "{outcome:?}");
    assert_eq!(h.read("gone.txt"), None, "the other one is deleted");
    nothing_of_rewind_s_is_left(&h, "delete");
}

#[tokio::test]
async fn a_file_edited_right_before_a_revert_deletes_it_is_left_alone() {
    let (h, armed) = racing("d.txt", false);
    h.write("keep.txt", b"k\n");
    let s = h.id().await;
    h.write("d.txt", b"made by the step\n");
    let base = h.id().await;
    let action = writes("d.txt", "edited meanwhile\n");
    let outcome = revert_racing(&h, &armed, action, &s, &["d.txt"]).await;
    assert_eq!(h.read("d.txt"), text("edited meanwhile\n"), "not deleted");
    assert!(kept(&outcome.kept, "d.txt").is_some(), "{outcome:?}");
    assert!(outcome.deleted.is_empty(), "{outcome:?}");
    assert_eq!(outcome.applied, base);
}

/// A file made after the revert looked at an absent target (while it compared another target with its
/// snapshot) is not overwritten, though it would count as tracked content by then.
#[tokio::test]
async fn a_file_made_after_the_revert_looked_is_left_alone() {
    let (h, armed) = racing("changed.txt", true);
    h.write("new.txt", b"v1\n");
    h.write("changed.txt", b"v1\n");
    let s = h.id().await;
    h.remove("new.txt");
    let base = h.id().await;
    // Edited after `base`, so the revert reads it to compare (and the hook runs then).
    h.write("changed.txt", b"v2, after the track\n");
    arm(&armed, writes("new.txt", "made meanwhile\n"));
    let outcome = h
        .port()
        .revert(h.root(), &patch(&s, &["new.txt", "changed.txt"]), &base)
        .await
        .expect("revert");
    assert_eq!(
        h.read("new.txt"),
        text("made meanwhile\n"),
        "not overwritten"
    );
    assert_eq!(h.read("changed.txt"), text("v2, after the track\n"));
    assert!(kept(&outcome.kept, "new.txt").is_some(), "{outcome:?}");
    assert!(kept(&outcome.kept, "changed.txt").is_some(), "{outcome:?}");
    assert!(outcome.written.is_empty(), "{outcome:?}");
}

/// A target deleted, or replaced by a directory, while the revert reads it to compare it with its snapshot
/// was edited meanwhile: it is left as the other program left it and named as kept, and the revert goes on
/// with the other target. Black-box: such a deletion failed the revert, and the service's rollback then
/// put back older versions of files the other program had written.
#[tokio::test]
async fn a_file_deleted_or_replaced_while_the_revert_reads_it_is_left_alone() {
    type Change = fn(&Path);
    let deleted: Change = |wt| fs::remove_file(wt.join("changed.txt")).expect("delete");
    let replaced: Change = |wt| {
        fs::remove_file(wt.join("changed.txt")).expect("delete");
        fs::create_dir(wt.join("changed.txt")).expect("mkdir");
    };
    for (change, how, a_dir) in [
        (deleted, "deleted", false),
        (replaced, "replaced by a directory", true),
    ] {
        let (h, armed) = racing("changed.txt", true);
        h.write("other.txt", b"v1\n");
        h.write("changed.txt", b"v1\n");
        let s = h.id().await;
        h.write("other.txt", b"v2\n");
        let base = h.id().await;
        // Edited after `base`, so the revert reads it to compare (and the hook runs then).
        h.write("changed.txt", b"v2, after the track\n");
        arm(&armed, Box::new(move |wt: &Path| change(wt)));
        let outcome = h
            .port()
            .revert(h.root(), &patch(&s, &["other.txt", "changed.txt"]), &base)
            .await
            .unwrap_or_else(|e| panic!("{how}: the revert goes on: {e}"));
        assert_eq!(h.read("changed.txt"), None, "{how}: not written back");
        assert_eq!(
            h.path("changed.txt").is_dir(),
            a_dir,
            "{how}: left as it is"
        );
        assert_eq!(h.read("other.txt"), text("v1\n"), "{how}");
        assert!(
            kept(&outcome.kept, "changed.txt").is_some(),
            "{how}: {outcome:?}"
        );
        wrote_only(&outcome.written, "other.txt", how);
    }
}

/// A file deleted after the track a revert starts from (while the revert planned or stored its intent),
/// alone or with its directory, stays deleted and is named as kept: the deletion is in no snapshot, and
/// the revert would otherwise undo it unannounced (black-box, under a program deleting files during an
/// undo).
#[tokio::test]
async fn a_file_deleted_after_the_revert_s_track_stays_deleted() {
    for (file, removed) in [("d.txt", "d.txt"), ("d1/d.txt", "d1")] {
        let h = GitHarness::new();
        let s = v1_then_v2(&h, &[file, "other.txt"]).await;
        let base = h.id().await;
        let gone = h.path(removed);
        if gone.is_dir() {
            fs::remove_dir_all(gone).expect("rm -rf");
        } else {
            fs::remove_file(gone).expect("rm");
        }
        let outcome = h
            .port()
            .revert(h.root(), &patch(&s, &[file, "other.txt"]), &base)
            .await
            .expect("revert");
        assert_eq!(h.read(file), None, "{removed}: stays deleted");
        assert_eq!(h.read("other.txt"), text("v1\n"), "{removed}");
        kept_saying(
            &outcome.kept,
            file,
            "was deleted or replaced after",
            removed,
        );
        wrote_only(&outcome.written, "other.txt", removed);
    }
}

/// A file that another program turns into a directory after the track a revert starts from stays as it is,
/// also when that directory is gone by the time the revert would write there: the file was deleted after
/// the track, and a deletion made meanwhile stays (black-box: `rm -rf` of such a directory made an undo
/// write the file back). Here the directory is empty, so the plan still writes the file there.
#[tokio::test]
async fn a_file_replaced_by_a_directory_after_the_revert_s_track_stays_deleted() {
    let (h, armed) = racing("f.txt", false);
    let s = v1_then_v2(&h, &["f.txt", "other.txt"]).await;
    let base = h.id().await;
    fs::remove_file(h.path("f.txt")).expect("rm f.txt");
    fs::create_dir(h.path("f.txt")).expect("mkdir f.txt");
    // Removed right before the revert would write there.
    arm(
        &armed,
        Box::new(|wt: &Path| fs::remove_dir(wt.join("f.txt")).expect("rmdir f.txt")),
    );
    let outcome = h
        .port()
        .revert(h.root(), &patch(&s, &["f.txt", "other.txt"]), &base)
        .await
        .expect("revert");
    assert!(!h.path("f.txt").is_file(), "not written back: {outcome:?}");
    assert_eq!(h.read("other.txt"), text("v1\n"));
    kept_saying(&outcome.kept, "f.txt", "was deleted or replaced after", "");
    wrote_only(&outcome.written, "other.txt", "");
}

/// A directory another program removes whole after the revert's check, holding files the revert would
/// write, is not made again for them: the files stay deleted and the directory gone. Here an earlier
/// delete of the revert removed a directory it emptied, so the writes look at each parent themselves.
#[tokio::test]
async fn a_directory_removed_after_the_check_is_not_made_again_for_its_deleted_files() {
    let (h, armed) = racing("x/only.txt", false);
    let s = v1_then_v2(&h, &["d/e/a.txt", "other.txt"]).await;
    h.write("x/only.txt", b"made by the step\n");
    let action: Action = Box::new(|wt: &Path| fs::remove_dir_all(wt.join("d")).expect("rm -rf d"));
    let files = ["d/e/a.txt", "other.txt", "x/only.txt"];
    let outcome = revert_racing(&h, &armed, action, &s, &files).await;
    assert!(!h.path("d").exists(), "not made again: {outcome:?}");
    assert!(
        !h.path("x").exists(),
        "the step's file and its directory are gone"
    );
    assert_eq!(h.read("other.txt"), text("v1\n"));
    assert!(kept(&outcome.kept, "d/e/a.txt").is_some(), "{outcome:?}");
    wrote_only(&outcome.written, "other.txt", "");
}

/// The same for a restore of given paths (unrevert's) and a whole restore (redo's).
#[tokio::test]
async fn a_directory_removed_while_a_restore_runs_is_not_made_again_for_its_deleted_files() {
    for whole in [false, true] {
        let (h, armed) = racing("x/only.txt", false);
        let s = v1_then_v2(&h, &["d/e/a.txt", "other.txt"]).await;
        h.write("x/only.txt", b"made since\n");
        h.id().await;
        arm(
            &armed,
            Box::new(|wt: &Path| fs::remove_dir_all(wt.join("d")).expect("rm -rf d")),
        );
        let paths = ["d/e/a.txt", "other.txt", "x/only.txt"]
            .map(|p| RelPath::new(p).expect("a path"))
            .to_vec();
        let outcome = h
            .port()
            .restore(h.root(), &s, (!whole).then_some(paths))
            .await
            .expect("restore");
        assert!(
            !h.path("d").exists(),
            "whole={whole}: not made again: {outcome:?}"
        );
        assert!(!h.path("x").exists(), "whole={whole}");
        assert_eq!(h.read("other.txt"), text("v1\n"), "whole={whole}");
        assert!(
            kept(&outcome.kept, "d/e/a.txt").is_some(),
            "whole={whole}: {outcome:?}"
        );
        wrote_only(&outcome.written, "other.txt", "");
    }
}

/// A file another program puts where a revert needs a directory, after the track the revert starts from,
/// is left as it is, and so is the file the revert would have written below it: its content is in no
/// snapshot. Both when `base` has nothing there (the step removed the directory) and when `base` has a
/// file there that the other program then edits (the revert would replace it by the directory).
#[tokio::test]
async fn a_file_made_where_a_revert_needs_a_directory_is_left_alone() {
    for base_has_a_file in [false, true] {
        let how = if base_has_a_file {
            "a file in base, edited"
        } else {
            "nothing in base"
        };
        let h = GitHarness::new();
        h.write("d1/f.txt", b"f\n");
        h.write("other.txt", b"v1\n");
        let s = h.id().await;
        fs::remove_dir_all(h.path("d1")).expect("the step's rm -rf d1");
        if base_has_a_file {
            h.write("d1", b"the step's\n");
        }
        h.write("other.txt", b"v2\n");
        let base = h.id().await;
        h.write("d1", b"the other program's\n");
        let outcome = h
            .port()
            .revert(h.root(), &patch(&s, &["d1/f.txt", "other.txt"]), &base)
            .await
            .expect("revert");
        assert_eq!(
            h.read("d1"),
            text("the other program's\n"),
            "{how}: not replaced"
        );
        assert_eq!(h.read("other.txt"), text("v1\n"), "{how}");
        kept_saying(
            &outcome.kept,
            "d1/f.txt",
            "changed after rewind's snapshot",
            how,
        );
        wrote_only(&outcome.written, "other.txt", how);
    }
}

/// A file another program puts on the way to a file the revert writes, after the revert's check (here
/// while it deletes another file), is left as it is, and so is the file below it: the revert never removes
/// it to make the directory back. Where the check found a directory that is now a file, and where it found
/// a directory missing, at the top or further down. Black-box: an undo during `rm -rf d1; echo > d1`
/// deleted that new file d1 to make the directory again.
#[tokio::test]
async fn a_file_put_on_the_way_after_the_check_is_left_alone() {
    type Race = fn(&Path);
    let dir_to_file: Race = |wt| {
        fs::remove_dir_all(wt.join("d1")).expect("rm -rf d1");
        fs::write(wt.join("d1"), "the other program's\n").expect("write d1");
    };
    let where_missing: Race = |wt| fs::write(wt.join("d1"), "the other program's\n").expect("d1");
    let deeper: Race = |wt| {
        fs::create_dir(wt.join("d1")).expect("mkdir d1");
        fs::write(wt.join("d1/e"), "the other program's\n").expect("write d1/e");
    };
    for (race, how, at, base_has_d1) in [
        (dir_to_file, "a directory turned into a file", "d1", true),
        (
            where_missing,
            "a file where a directory was missing",
            "d1",
            false,
        ),
        (
            deeper,
            "a file below a directory that was missing",
            "d1/e",
            false,
        ),
    ] {
        let (h, armed) = racing("z.txt", false);
        h.write("d1/e/f.txt", b"v1\n");
        let s = h.id().await;
        if base_has_d1 {
            h.write("d1/e/f.txt", b"v2\n");
        } else {
            fs::remove_dir_all(h.path("d1")).expect("the step's rm -rf d1");
        }
        h.write("z.txt", b"made by the step\n");
        let outcome = revert_racing(
            &h,
            &armed,
            Box::new(move |wt: &Path| race(wt)),
            &s,
            &["d1/e/f.txt", "z.txt"],
        )
        .await;
        assert_eq!(
            h.read(at),
            text("the other program's\n"),
            "{how}: not removed"
        );
        assert_eq!(h.read("z.txt"), None, "{how}");
        assert!(
            kept(&outcome.kept, "d1/e/f.txt").is_some(),
            "{how}: {outcome:?}"
        );
        assert!(outcome.written.is_empty(), "{how}: {outcome:?}");
    }
}

/// A file another program puts where a revert's check found a directory (which the revert then removed,
/// deleting the file in it, to write a file there) is left as it is: it is in no snapshot.
#[tokio::test]
async fn a_file_made_where_the_revert_saw_a_directory_is_left_alone() {
    // The hook runs when the revert makes directory a: after its deletes, before it looks at p.
    let (h, armed) = racing("a", false);
    h.write("p", b"p, a file\n");
    h.write("a/x.txt", b"x\n");
    let s = h.id().await;
    fs::remove_file(h.path("p")).expect("rm p");
    h.write("p/y.txt", b"y\n");
    fs::remove_dir_all(h.path("a")).expect("rm -rf a");
    let action = writes("p", "the other program's\n");
    let outcome = revert_racing(&h, &armed, action, &s, &["a/x.txt", "p", "p/y.txt"]).await;
    assert_eq!(h.read("p"), text("the other program's\n"), "not replaced");
    assert_eq!(h.read("a/x.txt"), text("x\n"));
    assert!(kept(&outcome.kept, "p").is_some(), "{outcome:?}");
    wrote_only(&outcome.written, "a/x.txt", "");
}

/// A file the revert must read to compare with its snapshot and cannot (here an injected fault), though it
/// is still what the revert looked at, fails the revert before anything is touched.
#[tokio::test]
async fn an_unreadable_file_fails_the_revert_before_anything_is_touched() {
    let h = GitHarness::new();
    let s = v1_then_v2(&h, &["a.txt", "b.txt"]).await;
    let base = h.id().await;
    // Edited after `base`, so the revert reads it to compare.
    h.write("b.txt", b"v3, after the track\n");
    h.fail_reads("b.txt");
    let listing = h.list();
    let reverted = h
        .port()
        .revert(h.root(), &patch(&s, &["a.txt", "b.txt"]), &base)
        .await;
    assert!(
        matches!(reverted, Err(rewind_core::Error::Unreadable { .. })),
        "{reverted:?}"
    );
    assert_eq!(h.list(), listing, "nothing touched");
}

/// A file deleted while a restore of given paths reads it does not fail the restore: it is taken as
/// absent, and the restore puts it back as asked, with the other path.
#[tokio::test]
async fn a_file_deleted_while_a_restore_of_paths_reads_it_does_not_fail_it() {
    let (h, armed) = racing("a.txt", true);
    let s = v1_then_v2(&h, &["a.txt", "b.txt"]).await;
    h.id().await;
    arm(
        &armed,
        Box::new(|wt: &Path| {
            fs::remove_file(wt.join("a.txt")).expect("the other program's delete")
        }),
    );
    let paths = ["a.txt", "b.txt"].map(|p| RelPath::new(p).expect("a path"));
    h.port()
        .restore(h.root(), &s, Some(paths.to_vec()))
        .await
        .expect("the restore goes on");
    assert_eq!(h.read("a.txt"), text("v1\n"));
    assert_eq!(h.read("b.txt"), text("v1\n"));
}

/// The whole-tree track a restore of given paths falls back to (unrevert's, here because a path turned
/// from a directory into a file) meets a file another program turns into a directory: the track leaves it
/// out instead of failing, and the restore goes on (black-box: an unrevert failed there, and its rollback's
/// capture failed the same way).
#[tokio::test]
async fn a_restore_whose_track_meets_a_file_turned_into_a_directory_goes_on() {
    let (h, armed) = racing("c.txt", true);
    h.write("a.txt", b"v1\n");
    h.write("c.txt", b"v1\n");
    h.write("d/x.txt", b"v1\n");
    let s = h.id().await;
    h.write("a.txt", b"v2\n");
    fs::remove_dir_all(h.path("d")).expect("rm -rf d");
    h.write("d", b"d, a file now\n");
    let since = h.id().await;
    // Changed after `since`: the restore's track reads it, and the hook turns it into a directory.
    h.write("c.txt", b"v2, another program's\n");
    arm(
        &armed,
        Box::new(|wt: &Path| {
            fs::remove_file(wt.join("c.txt")).expect("rm c.txt");
            fs::create_dir(wt.join("c.txt")).expect("mkdir c.txt");
            fs::write(wt.join("c.txt/inner"), "another program's\n").expect("write c.txt/inner");
        }),
    );
    let paths = ["a.txt", "d", "d/x.txt"].map(|p| RelPath::new(p).expect("a path"));
    let outcome = h
        .port()
        .restore_since(h.root(), &s, paths.to_vec(), &since)
        .await
        .expect("the restore goes on");
    assert_eq!(h.read("a.txt"), text("v1\n"), "{outcome:?}");
    assert_eq!(h.read("d/x.txt"), text("v1\n"), "{outcome:?}");
    assert_eq!(h.read("c.txt/inner"), text("another program's\n"));
}

/// A file another program writes into a directory a revert has just made again (the undo of a step that
/// ran `rm -rf d1`) is left alone and named as kept: the revert found that directory missing, so anything
/// in it is new, and in no snapshot. So do a restore of given paths and a whole restore (a redo).
/// Black-box: the undo overwrote such files with no warning.
#[tokio::test]
async fn a_file_written_into_a_directory_the_revert_made_again_is_left_alone() {
    for how in ["revert", "restore of paths", "whole restore"] {
        // The hook runs when d1/a is made, after d1 was made and before d1/b.txt is looked at.
        let (h, armed) = racing("d1/a", false);
        h.write("d1/a/x.txt", b"x\n");
        h.write("d1/b.txt", b"b\n");
        h.write("keep.txt", b"k\n");
        let s = h.id().await;
        fs::remove_dir_all(h.path("d1")).expect("the step's rm -rf d1");
        let action = writes("d1/b.txt", "the other program's\n");
        let files = ["d1/a/x.txt", "d1/b.txt"];
        let (written, kept_paths) = if how == "revert" {
            let outcome = revert_racing(&h, &armed, action, &s, &files).await;
            (outcome.written, outcome.kept)
        } else {
            h.id().await;
            arm(&armed, action);
            let paths = (how == "restore of paths").then(|| {
                files
                    .iter()
                    .map(|p| RelPath::new(*p).expect("a path"))
                    .collect()
            });
            let outcome = h
                .port()
                .restore(h.root(), &s, paths)
                .await
                .expect("restore");
            (outcome.written, outcome.kept)
        };
        assert_eq!(
            h.read("d1/b.txt"),
            text("the other program's\n"),
            "{how}: not overwritten"
        );
        assert_eq!(h.read("d1/a/x.txt"), text("x\n"), "{how}");
        assert!(
            kept(&kept_paths, "d1/b.txt").is_some(),
            "{how}: {kept_paths:?}"
        );
        wrote_only(&written, "d1/a/x.txt", how);
    }
}

/// A file edited after the revert's snapshot is kept, and so is what depends on it: a write below it, which
/// would need it replaced by a directory, is kept too (the edit is in no snapshot).
#[tokio::test]
async fn a_file_edited_where_a_revert_needs_a_directory_is_not_replaced() {
    let (h, _armed) = racing("unused", false);
    h.write("a/b.txt", b"v1\n");
    let s = h.id().await;
    h.remove("a");
    h.write("a", b"a file now\n");
    let base = h.id().await;
    h.write("a", b"a file, edited after the track\n");
    let outcome = h
        .port()
        .revert(h.root(), &patch(&s, &["a", "a/b.txt"]), &base)
        .await
        .expect("revert");
    assert_eq!(h.read("a"), text("a file, edited after the track\n"));
    assert!(kept(&outcome.kept, "a").is_some(), "{outcome:?}");
    assert!(kept(&outcome.kept, "a/b.txt").is_some(), "{outcome:?}");
    assert!(
        outcome.written.is_empty() && outcome.deleted.is_empty(),
        "{outcome:?}"
    );
    assert_eq!(outcome.applied, base);
}

/// A whole restore tracks the worktree first; a file edited after that track looked at it (here while the
/// track reads another file) is left as it is.
#[tokio::test]
async fn a_file_edited_after_a_whole_restore_tracked_it_is_left_alone() {
    let (h, armed) = racing("y.txt", true);
    h.write("x.txt", b"x1\n");
    h.write("y.txt", b"y1\n");
    let s = h.id().await;
    h.write("x.txt", b"x2\n");
    h.write("y.txt", b"y2\n");
    h.track().await;
    // Changed again: the restore's track reads it (after it has looked at x.txt, as cached).
    h.write("y.txt", b"y3, longer\n");
    arm(
        &armed,
        Box::new(|wt: &Path| {
            fs::write(wt.join("x.txt"), "x, edited during the track\n").expect("edit x.txt");
        }),
    );
    let outcome = h.port().restore(h.root(), &s, None).await.expect("restore");
    assert_eq!(h.read("x.txt"), text("x, edited during the track\n"));
    assert_eq!(h.read("y.txt"), text("y1\n"));
    assert!(kept(&outcome.kept, "x.txt").is_some(), "{outcome:?}");
    let written: Vec<&str> = outcome.written.iter().map(RelPath::as_str).collect();
    assert_eq!(written, ["y.txt"]);
}

/// A hard-linked file whose other name the revert already wrote over (which sets its status change time,
/// `Relinked`) is still not written over when a user edits it in place meanwhile: the edit sets its
/// modification time. The edit stays and is named as kept.
#[tokio::test]
async fn an_edit_of_a_hard_linked_file_during_the_revert_is_kept() {
    let (h, armed) = racing_in("b.txt", Hook::Change);
    h.write("a.txt", b"old\n");
    fs::hard_link(h.path("a.txt"), h.path("b.txt")).expect("link");
    let s = h.id().await;
    fs::write(h.path("a.txt"), b"the step's\n").expect("the step writes in place");
    let outcome = revert_racing(
        &h,
        &armed,
        writes("b.txt", "the user's, in place\n"),
        &s,
        &["a.txt", "b.txt"],
    )
    .await;
    assert!(kept(&outcome.kept, "b.txt").is_some(), "{outcome:?}");
    assert_eq!(h.read("b.txt"), text("the user's, in place\n"));
    // The edit went to both names when it landed before `a.txt` was written over: then both are kept.
    match kept(&outcome.kept, "a.txt") {
        Some(_) => assert_eq!(h.read("a.txt"), text("the user's, in place\n")),
        None => assert_eq!(h.read("a.txt"), text("old\n")),
    }
    nothing_of_rewind_s_is_left(&h, "after the revert");
}

/// A revert deletes a file by renaming it aside under a temporary name first: the directory it does that in
/// is in the operation's journal by then, so a crash that leaves the file there has it removed the next
/// time the store is opened (black-box: after a `kill -9` mid-revert one stayed in `s/x/y` for good, and
/// kept later reverts from putting back the file `s` that directory had replaced). The journal is read at
/// the last moment before the first delete.
#[tokio::test]
async fn a_revert_journals_the_directories_it_deletes_in() {
    let (h, armed) = racing_in("s/x/y/n0", Hook::Swap);
    h.write("s", b"the user's file\n");
    let start = h.id().await;
    h.remove("s");
    for n in 0..3 {
        h.write(&format!("s/x/y/n{n}"), b"made by the step\n");
    }
    let base = h.id().await;
    let seen = journal_at_hook(&h, &armed);
    let patches = [SnapshotPatch {
        hash: start,
        files: ["s", "s/x/y/n0", "s/x/y/n1", "s/x/y/n2"]
            .iter()
            .map(|p| RelPath::new(*p).expect("a path"))
            .collect(),
    }];
    h.port()
        .revert(h.root(), &patches, &base)
        .await
        .expect("revert");
    let journal = taken(&seen, "the journal, as the first delete began");
    let listed: Vec<PathBuf> = journal.lines().skip(1).map(PathBuf::from).collect();
    assert!(listed.contains(&h.path("s/x/y")), "{journal}");
    assert_eq!(h.read("s"), Some(Node::file("the user's file\n")));
    nothing_of_rewind_s_is_left(&h, "after the revert");
}

/// The same, with the new directory removed by another program before rewind looks at the file again: the
/// written file goes back to its name, and the revert says so as for any file it met written to (the
/// path kept, its content in `applied`), not that it was kept beside a directory that is gone (review).
#[tokio::test]
async fn a_made_way_file_written_to_goes_back_when_its_directory_is_gone() {
    let handle: Arc<Mutex<Option<fs::File>>> = Arc::default();
    let (opening, writing) = (Arc::clone(&handle), Arc::clone(&handle));
    let h = GitHarness::with_config(move |config, base| {
        let wt = base.join("wt");
        let wt_later = wt.clone();
        config.swap_hook = Some(Arc::new(move |path: &str| {
            if path == "dir" {
                let file = fs::OpenOptions::new()
                    .append(true)
                    .open(wt.join(path))
                    .expect("the editor opens the file");
                *opening.lock().unwrap_or_else(PoisonError::into_inner) = Some(file);
            }
        }));
        config.settle_hook = Some(Arc::new(move |path: &str| {
            if path != "dir" {
                return;
            }
            let file = writing
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some(mut file) = file {
                use std::io::Write;
                file.write_all(b"appended by an editor\n")
                    .expect("the editor writes");
                fs::remove_dir_all(wt_later.join("dir")).expect("another program's rm -rf");
            }
        }));
    });
    let outcome = revert_where_a_file_took_a_directory_s_place(&h).await;
    assert_eq!(
        h.read("dir"),
        text("dir is a file\nappended by an editor\n"),
        "back at its name"
    );
    kept_saying(
        &outcome.kept,
        "dir",
        "changed while rewind was writing",
        "dir",
    );
    nothing_of_rewind_s_is_left(&h, "the file is at its name");
    // `applied` is what the revert wrote (the directory and its file: another program's `rm -rf` after
    // it is not the revert's), a tree git reads, with one entry at `dir`.
    let listing = std::process::Command::new("git")
        .arg(format!("--git-dir={}", h.store_dir().display()))
        .args(["ls-tree", "-r", outcome.applied.as_str()])
        .output()
        .expect("git ls-tree");
    let names = String::from_utf8_lossy(&listing.stdout).into_owned();
    let paths: Vec<&str> = names
        .lines()
        .filter_map(|line| line.split('\t').nth(1))
        .collect();
    assert_eq!(paths, ["dir/file.txt"], "{names}");
    let fsck = std::process::Command::new("git")
        .arg(format!("--git-dir={}", h.store_dir().display()))
        .args(["fsck", "--no-dangling"])
        .output()
        .expect("git fsck");
    assert!(fsck.status.success(), "{fsck:?}");
}

/// A file moved aside to make room for a directory adds its directory to the journal without dropping the
/// directories named at the start (review: the journal was rewritten, so a crash after it left the other
/// writes' temporary files, a late editor's save among them, where the next opening never looked).
#[tokio::test]
async fn making_way_for_a_directory_keeps_the_journal_s_other_directories() {
    let (h, armed) = racing_in("src/main.rs", Hook::Change);
    h.write("dir/file.txt", b"v1\n");
    h.write("src/main.rs", b"v1\n");
    let s = h.id().await;
    h.remove("dir");
    h.write("dir", b"dir is a file\n");
    h.write("src/main.rs", b"v2\n");
    let base = h.id().await;
    let seen = journal_at_hook(&h, &armed);
    h.port()
        .revert(
            h.root(),
            &patch(&s, &["dir/file.txt", "src/main.rs"]),
            &base,
        )
        .await
        .expect("revert");
    let journal = taken(&seen, "the journal, as src/main.rs was written");
    let lines: Vec<&str> = journal.lines().collect();
    let src = h.path("src");
    assert!(
        lines.contains(&src.to_str().expect("utf-8")),
        "the start's directory stays: {journal}"
    );
    let root = h.root().to_str().expect("utf-8");
    assert!(
        lines.contains(&root),
        "the made-way file's directory: {journal}"
    );
    assert!(lines[0].starts_with("batch "), "{journal}");
    assert_eq!(h.read("dir/file.txt"), text("v1\n"));
    assert_eq!(h.read("src/main.rs"), text("v1\n"));
}

/// The journal's text as it stands when the armed hook runs.
fn journal_at_hook(h: &GitHarness, armed: &Armed) -> Arc<Mutex<Option<String>>> {
    let journal = h.store_dir().join("rewind").join("journal");
    let seen: Arc<Mutex<Option<String>>> = Arc::default();
    let noted = Arc::clone(&seen);
    arm(
        armed,
        Box::new(move |_: &Path| {
            *noted.lock().unwrap_or_else(PoisonError::into_inner) =
                fs::read_to_string(&journal).ok();
        }),
    );
    seen
}

/// What `journal_at_hook` saw, which must be something (`what`).
fn taken(seen: &Mutex<Option<String>>, what: &str) -> String {
    seen.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
        .unwrap_or_else(|| panic!("{what}"))
}

/// A revert notes in its journal the directories it makes, before it makes them; the store's next opening
/// after a crash removes those left empty (black-box: a revert killed before its first rename left them,
/// empty, after the rollback; and one in about thirty killed between making a directory and noting it).
/// A directory it found made by someone else is withdrawn from the note, and stays.
#[tokio::test]
async fn a_revert_journals_the_directories_it_makes_and_a_crash_leaves_none() {
    let (h, armed) = racing_in("newdir/sub", Hook::Change);
    h.write("keep", b"kept\n");
    h.write("newdir/sub/x", b"made by the turn\n");
    let with = h.id().await;
    h.remove("newdir/sub/x");
    let without = h.id().await;
    assert!(!h.path("newdir").exists());
    let journal = h.store_dir().join("rewind").join("journal");
    let seen: Arc<Mutex<Option<(String, bool)>>> = Arc::default();
    let noted = Arc::clone(&seen);
    arm(
        &armed,
        Box::new(move |wt: &Path| {
            let text = fs::read_to_string(&journal).unwrap_or_default();
            *noted.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((text, wt.join("newdir/sub").exists()));
        }),
    );
    let patches = [SnapshotPatch {
        hash: with,
        files: vec![RelPath::new("newdir/sub/x").expect("a path")],
    }];
    h.port()
        .revert(h.root(), &patches, &without)
        .await
        .expect("revert");
    let (text, existed) = seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
        .expect("the journal, as the directory was about to be made");
    assert!(!existed, "the hook runs before the directory is made");
    for dir in ["newdir", "newdir/sub"] {
        assert!(
            text.lines()
                .any(|line| line == format!("made {}", h.path(dir).display())),
            "{dir}: {text}"
        );
    }
    assert_eq!(
        fs::read(h.path("newdir/sub/x")).expect("read"),
        b"made by the turn\n"
    );

    // The crash, as the journal then stood: the made directories are empty (the file was not renamed in
    // yet); one the user has put a file into meanwhile stays, and so does one the operation found made by
    // someone else.
    h.remove("newdir/sub/x");
    fs::create_dir_all(h.path("other/deep")).expect("mkdir");
    h.write("other/user.txt", b"the user's\n");
    fs::create_dir_all(h.path("theirs")).expect("mkdir");
    // A made directory's parent turned into a symlink since: nothing is removed through it (review).
    let outside = h.base().join("outside-made");
    fs::create_dir_all(outside.join("inner")).expect("mkdir");
    std::os::unix::fs::symlink(&outside, h.path("lnk")).expect("symlink");
    let crashed = format!(
        "{text}made {}\nmade {}\nmade {}\nnot made {}\nmade {}\n",
        h.path("other").display(),
        h.path("other/deep").display(),
        h.path("theirs").display(),
        h.path("theirs").display(),
        h.path("lnk/inner").display(),
    );
    fs::write(h.store_dir().join("rewind").join("journal"), crashed).expect("the journal");
    // A journal kept from an earlier crash (some of its files could not be removed then): its made
    // directories were seen to at its first cleaning, and one the user makes at such a name since stays.
    fs::create_dir_all(h.path("later")).expect("mkdir");
    fs::write(
        h.store_dir().join("rewind").join("journal-left-test"),
        format!("made {}\n", h.path("later").display()),
    )
    .expect("a kept journal");
    h.id().await;
    assert!(outside.join("inner").is_dir(), "not through the symlink");
    assert!(h.path("later").is_dir(), "the user's, made since");
    assert!(!h.path("newdir").exists(), "the made directories went");
    assert!(!h.path("other/deep").exists());
    assert!(h.path("theirs").is_dir(), "not made by the operation");
    assert_eq!(
        fs::read(h.path("other/user.txt")).expect("read"),
        b"the user's\n"
    );
    assert!(h.path("keep").is_file());
}

/// A directory the revert was about to make, made by someone else first, is not rewind's: its note is
/// withdrawn in the journal, so no crash recovery would remove it, and the file meant for it is kept.
#[tokio::test]
async fn a_directory_someone_else_made_first_is_withdrawn_from_the_journal() {
    // The journal's path, once known; the journal as the revert's last write began.
    let journal: Arc<Mutex<Option<PathBuf>>> = Arc::default();
    let seen: Arc<Mutex<Option<String>>> = Arc::default();
    let (at, noted) = (Arc::clone(&journal), Arc::clone(&seen));
    let h = GitHarness::with_config(move |config, base| {
        let wt = base.join("wt");
        config.change_hook = Some(Arc::new(move |path: &str| match path {
            "newdir" => fs::create_dir(wt.join("newdir")).expect("their mkdir"),
            "z.txt" => {
                let at = at.lock().unwrap_or_else(PoisonError::into_inner).clone();
                *noted.lock().unwrap_or_else(PoisonError::into_inner) =
                    at.and_then(|at| fs::read_to_string(at).ok());
            }
            _ => {}
        }));
    });
    h.write("newdir/x", b"made by the turn\n");
    h.write("z.txt", b"one\n");
    let with = h.id().await;
    h.remove("newdir/x");
    assert!(!h.path("newdir").exists());
    h.write("z.txt", b"two\n");
    let without = h.id().await;
    *journal.lock().unwrap_or_else(PoisonError::into_inner) =
        Some(h.store_dir().join("rewind").join("journal"));
    let outcome = h
        .port()
        .revert(h.root(), &patch(&with, &["newdir/x", "z.txt"]), &without)
        .await
        .expect("revert");
    let text = seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
        .expect("the journal, as z.txt was written");
    let dir = h.path("newdir").display().to_string();
    let lines: Vec<&str> = text.lines().collect();
    let made = lines.iter().position(|line| *line == format!("made {dir}"));
    let withdrawn = lines
        .iter()
        .position(|line| *line == format!("not made {dir}"));
    assert!(
        matches!((made, withdrawn), (Some(m), Some(w)) if m < w),
        "{text}"
    );
    assert!(h.path("newdir").is_dir());
    assert!(!h.path("newdir/x").exists());
    assert_eq!(fs::read(h.path("z.txt")).expect("read"), b"one\n");
    assert!(
        outcome
            .kept
            .iter()
            .any(|k: &KeptPath| k.path.as_str() == "newdir/x"),
        "{:?}",
        outcome.kept
    );
}

/// A directory another program moves (`mv d d2`) after the revert wrote its files and before it looks at
/// the files it swapped out (the old contents, at temporary names in that directory): those are removed
/// where the directory now is, through the handle the writes used, and nothing of rewind's is left in it.
/// Before, the directory was opened again by its path, not found, and the files taken for removed with
/// it: they stayed in `d2` for good (black-box: 24 to 224 `.rewind-tmp-` files after an `mv` during undo).
#[tokio::test]
async fn a_directory_moved_before_the_swapped_out_files_are_removed_keeps_none_of_them() {
    let moved = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let once = Arc::clone(&moved);
    let h = GitHarness::with_config(move |config, base| {
        let wt = base.join("wt");
        config.settle_hook = Some(Arc::new(move |path: &str| {
            if path.starts_with("d/") && !once.swap(true, std::sync::atomic::Ordering::SeqCst) {
                fs::rename(wt.join("d"), wt.join("d2")).expect("another program's mv");
            }
        }));
    });
    for n in 0..20 {
        h.write(&format!("d/f{n}"), format!("v0 {n}\n").as_bytes());
    }
    let s = h.id().await;
    for n in 0..20 {
        h.write(&format!("d/f{n}"), format!("v1 {n}, longer\n").as_bytes());
    }
    let base = h.id().await;
    let files: Vec<RelPath> = (0..20)
        .map(|n| RelPath::new(format!("d/f{n}")).expect("a path"))
        .collect();
    h.port()
        .revert(h.root(), &[SnapshotPatch { hash: s, files }], &base)
        .await
        .expect("revert");
    assert!(
        moved.load(std::sync::atomic::Ordering::SeqCst),
        "the files were swapped out and looked at again (this filesystem swaps)"
    );
    nothing_of_rewind_s_is_left(&h, "after the move");
    let names = names_in(&h.path("d2"));
    assert!(
        names.iter().all(|n| !n.contains(".rewind-")),
        "nothing of rewind's is left where the directory went: {names:?}"
    );
    assert_eq!(names.len(), 20);
    // The reverted content is where the directory went.
    for n in 0..20 {
        assert_eq!(
            h.read(&format!("d2/f{n}")),
            Some(Node::file(format!("v0 {n}\n").as_str()))
        );
    }
}

/// A file another program deletes and makes again while a track walks the worktree (gone when the walk
/// lists its directory, back before the track is over) is missing from the snapshot, and `track_changes`
/// lists it as changed, as the two snapshots have it: a step's end then names it, and its undo puts the
/// content from before the step back. It was left out as "still on disk", so the step's end said it had
/// become ignored (with no ignore rule anywhere) and no undo brought its content back (gc fuzz, with a
/// second writer deleting and re-creating a file while `exec` ended its step).
#[tokio::test]
async fn a_file_made_again_behind_the_walk_is_listed_as_changed() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let armed = Arc::new(AtomicBool::new(false));
    let hook_armed = Arc::clone(&armed);
    let h = GitHarness::with_config(move |config, base| {
        let wt = base.join("wt");
        config.walk_hook = Some(Arc::new(move |dir: &str| {
            if !hook_armed.load(Ordering::SeqCst) {
                return;
            }
            match dir {
                "" => fs::remove_file(wt.join("churn.txt")).expect("deleted before the listing"),
                "z/" => {
                    fs::write(wt.join("churn.txt"), "another program's\n").expect("made again");
                    hook_armed.store(false, Ordering::SeqCst);
                }
                _ => {}
            }
        }));
    });
    h.write("churn.txt", b"before the step\n");
    h.write("z/keep.txt", b"kept\n");
    let start = h.id().await;
    h.write("churn.txt", b"the step's\n");
    armed.store(true, Ordering::SeqCst);
    let (tracked, listed) = h
        .port()
        .track_changes(h.root(), &start)
        .await
        .expect("tracks");
    assert!(!armed.load(Ordering::SeqCst), "the walk went through both");
    let between = h
        .port()
        .changed_between(h.root(), &start, &tracked.id)
        .await
        .expect("diffs");
    assert_eq!(
        between.iter().map(RelPath::as_str).collect::<Vec<_>>(),
        ["churn.txt"],
        "the snapshot missed it"
    );
    assert!(tracked.skipped.is_empty(), "{:?}", tracked.skipped);
    let listed = listed.expect("lists");
    assert_eq!(
        listed.iter().map(RelPath::as_str).collect::<Vec<_>>(),
        ["churn.txt"]
    );

    // The step's undo puts the content from before it back (the other program's is in the undo's own
    // snapshot of the worktree, `base`, as every revert takes first).
    let base = h.id().await;
    let outcome = h
        .port()
        .revert(h.root(), &patch(&start, &["churn.txt"]), &base)
        .await
        .expect("revert");
    assert_eq!(
        fs::read(h.root().join("churn.txt")).expect("read"),
        b"before the step\n",
        "{outcome:?}"
    );
}
