//! Another program changing the worktree while a track walks and reads it: a file or directory removed or
//! replaced after the walk listed it is gone from that track (as a deleted file always was), never a
//! failure, and what stands there now is the next track's to see. Nothing is read through a symlink put in
//! a file's place, and a FIFO put there is never waited on. The change is made from the store's read hook
//! (called right before a file's content is read) or its walk hook (right before the walk looks at a
//! directory). The oracle is real git: the track equals `git add -A && git write-tree` of the worktree
//! with the changed path moved aside, and the next track equals it of the whole worktree.

use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use rewind_core::model::{SkipReason, TrackOutcome};
use rewind_core::testkit::contract::snapshot::WorktreeHarness;

use crate::git_oracle::{GitOracle, blob_id};
use crate::harness::{GitHarness, age_past_racy, write_file};
use crate::races::{Action, Hook, arm, racing_in};

/// A harness whose `hook` runs `action` (given the worktree) the first time it is called with `at`.
fn racing(at: &'static str, hook: Hook, action: Action) -> GitHarness {
    let (h, armed) = racing_in(at, hook);
    arm(&armed, action);
    h
}

/// `track` of `h`, which must end within 30 s: a track that waits on the FIFO `fifo` is freed (a writer
/// opens it) and the test fails, rather than hang.
async fn tracked_without_waiting_on(h: &GitHarness, fifo: &Path) -> TrackOutcome {
    match tokio::time::timeout(Duration::from_secs(30), h.port().track(h.root())).await {
        Ok(tracked) => tracked.expect("track"),
        Err(_) => {
            let _ = fs::OpenOptions::new()
                .write(true)
                .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
                .open(fifo);
            panic!("the track waited on the FIFO {}", fifo.display());
        }
    }
}

/// `a.txt`, `b.txt`, `sub/c.txt` and `sub/deep/d.txt`.
fn lay_out(h: &GitHarness) {
    write_file(&h.path("a.txt"), b"aaaa\n");
    write_file(&h.path("b.txt"), b"bbbb\n");
    write_file(&h.path("sub/c.txt"), b"cccc\n");
    write_file(&h.path("sub/deep/d.txt"), b"dddd\n");
}

/// git's tree of the worktree with `path` moved aside (what a track that found it gone records).
fn git_tree_without(h: &GitHarness, oracle: &GitOracle, path: &str) -> String {
    let aside = h.base().join("aside");
    fs::rename(h.path(path), &aside).expect("move the changed path aside");
    let tree = oracle.write_tree(h.root());
    fs::rename(&aside, h.path(path)).expect("move it back");
    tree
}

/// The track that met the change succeeded and left `path` out; the next one (no hook left) sees what
/// stands there now. Both against git.
async fn left_out_then_seen(h: &GitHarness, path: &str) {
    let oracle = GitOracle::new(None);
    let raced = h.port().track(h.root()).await;
    let raced = raced.unwrap_or_else(|e| panic!("the track that met the change of {path}: {e}"));
    assert_eq!(
        raced.id.as_str(),
        git_tree_without(h, &oracle, path),
        "the track that met the change of {path} is git's tree without it"
    );
    assert_eq!(
        h.id().await.as_str(),
        oracle.write_tree(h.root()),
        "the next track sees what stands at {path} now"
    );
}

/// `rm path; mkdir path; echo > path/inner`.
fn file_to_dir(path: &'static str) -> Action {
    Box::new(move |wt: &Path| {
        fs::remove_file(wt.join(path)).expect("remove the file");
        write_file(&wt.join(path).join("inner"), b"made by another program\n");
    })
}

/// `rm -rf path; echo > path`.
fn dir_to_file(path: &'static str) -> Action {
    Box::new(move |wt: &Path| {
        fs::remove_dir_all(wt.join(path)).expect("remove the directory");
        write_file(&wt.join(path), b"made by another program\n");
    })
}

#[tokio::test]
async fn a_file_turned_into_a_directory_while_a_track_reads_it_is_left_out() {
    let h = racing("a.txt", Hook::Read, file_to_dir("a.txt"));
    lay_out(&h);
    left_out_then_seen(&h, "a.txt").await;
}

#[tokio::test]
async fn a_directory_replaced_by_a_file_while_a_track_reads_below_it_is_left_out() {
    let h = racing("sub/c.txt", Hook::Read, dir_to_file("sub"));
    lay_out(&h);
    left_out_then_seen(&h, "sub").await;
}

#[tokio::test]
async fn a_directory_replaced_by_a_file_before_the_walk_reaches_it_is_left_out() {
    let h = racing("sub/", Hook::Walk, dir_to_file("sub"));
    lay_out(&h);
    left_out_then_seen(&h, "sub").await;
}

#[tokio::test]
async fn a_directory_removed_before_the_walk_reaches_it_is_left_out() {
    let h = racing(
        "sub/deep/",
        Hook::Walk,
        Box::new(|wt: &Path| fs::remove_dir_all(wt.join("sub")).expect("rm -rf sub")),
    );
    lay_out(&h);
    let oracle = GitOracle::new(None);
    let raced = h.port().track(h.root()).await.expect("the raced track");
    // What the walk had read of `sub` before it went (`sub/c.txt`, listed) is gone too: its file is
    // looked at after the walk.
    assert_eq!(raced.id.as_str(), oracle.write_tree(h.root()));
    write_file(&h.path("sub/deep/d.txt"), b"back\n");
    assert_eq!(h.id().await.as_str(), oracle.write_tree(h.root()));
}

#[tokio::test]
async fn a_directory_swapped_for_a_symlink_before_the_walk_reaches_it_is_not_walked_through() {
    let h = racing(
        "sub/",
        Hook::Walk,
        Box::new(|wt: &Path| {
            let outside = wt.parent().expect("the base directory").join("outside");
            fs::rename(wt.join("sub"), &outside).expect("move sub outside");
            std::os::unix::fs::symlink(&outside, wt.join("sub")).expect("symlink sub");
        }),
    );
    lay_out(&h);
    let raced = h.track().await;
    let oracle = GitOracle::new(None);
    assert_eq!(raced.id.as_str(), git_tree_without(&h, &oracle, "sub"));
    assert!(
        !h.stored(&blob_id(b"cccc\n")),
        "nothing outside the worktree was read as a file of it"
    );
    assert_eq!(
        h.id().await.as_str(),
        oracle.write_tree(h.root()),
        "the next track records the symlink"
    );
}

#[tokio::test]
async fn a_file_swapped_for_a_symlink_while_a_track_reads_it_is_not_read_through() {
    let h = racing(
        "a.txt",
        Hook::Read,
        Box::new(|wt: &Path| {
            // A file outside the worktree, of the same size as `a.txt`.
            let outside = wt.parent().expect("the base directory").join("secret");
            fs::write(&outside, b"SECR\n").expect("write outside");
            fs::remove_file(wt.join("a.txt")).expect("remove a.txt");
            std::os::unix::fs::symlink(&outside, wt.join("a.txt")).expect("symlink a.txt");
        }),
    );
    lay_out(&h);
    let raced = h.track().await;
    assert_eq!(
        raced.id.as_str(),
        GitOracle::new(None).write_tree(h.root()),
        "a.txt is tracked as the symlink it is now"
    );
    assert!(
        !h.stored(&blob_id(b"SECR\n")),
        "the content of the file outside was not read and stored"
    );
}

#[tokio::test]
async fn a_fifo_put_in_a_file_s_place_while_a_track_reads_it_is_skipped_never_waited_on() {
    let h = racing(
        "a.txt",
        Hook::Read,
        Box::new(|wt: &Path| {
            fs::remove_file(wt.join("a.txt")).expect("remove a.txt");
            let made = std::process::Command::new("mkfifo")
                .arg(wt.join("a.txt"))
                .status()
                .expect("run mkfifo");
            assert!(made.success(), "mkfifo a.txt");
        }),
    );
    lay_out(&h);
    let raced = tracked_without_waiting_on(&h, &h.path("a.txt")).await;
    assert!(
        raced
            .skipped
            .iter()
            .any(|s| s.path == "a.txt" && s.reason == SkipReason::Special),
        "a.txt is skipped as a special file: {:?}",
        raced.skipped
    );
    fs::remove_file(h.path("a.txt")).expect("remove the FIFO");
    assert_eq!(
        raced.id.as_str(),
        GitOracle::new(None).write_tree(h.root()),
        "the rest is tracked as git does"
    );
}

#[tokio::test]
async fn a_directory_swapped_for_a_symlink_after_the_walk_listed_it_is_not_read_through() {
    // Once `sub` is listed (its files are to be read after the walk), it is moved away and a symlink to
    // another directory outside, holding files of the same names and sizes, put in its place.
    let h = racing(
        "sub/deep/",
        Hook::Walk,
        Box::new(|wt: &Path| {
            let base = wt.parent().expect("the base directory");
            fs::rename(wt.join("sub"), base.join("moved")).expect("move sub away");
            write_file(&base.join("other/c.txt"), b"SECR\n");
            write_file(&base.join("other/deep/d.txt"), b"SECD\n");
            std::os::unix::fs::symlink(base.join("other"), wt.join("sub")).expect("symlink sub");
        }),
    );
    lay_out(&h);
    let raced = h.track().await;
    let oracle = GitOracle::new(None);
    assert_eq!(raced.id.as_str(), git_tree_without(&h, &oracle, "sub"));
    for secret in [&b"SECR\n"[..], b"SECD\n"] {
        assert!(
            !h.stored(&blob_id(secret)),
            "nothing outside the worktree was read as a file of it"
        );
    }
    assert_eq!(h.id().await.as_str(), oracle.write_tree(h.root()));
}

/// With the untracked cache warm (directories old enough to be trusted): a directory replaced by a file
/// before the walk reaches it is left out, its cached listing dropped, and the next track sees the file.
#[tokio::test]
async fn a_cached_directory_replaced_by_a_file_is_left_out_and_its_listing_dropped() {
    let (h, armed) = racing_in("sub/", Hook::Walk);
    lay_out(&h);
    age_past_racy(h.root());
    let oracle = GitOracle::new(None);
    assert_eq!(
        h.id().await.as_str(),
        oracle.write_tree(h.root()),
        "the first track"
    );
    arm(&armed, dir_to_file("sub"));
    left_out_then_seen(&h, "sub").await;
}

/// The worktree's directory swapped for another (`mv wt wt.old; mv staged wt`) while a track walks it:
/// the listing of a directory is read only from the directory whose stat data is cached with it, so the
/// next track, which trusts that stat data (the staged tree is old), does not reuse the old tree's names.
#[tokio::test]
async fn a_worktree_swapped_for_another_while_a_track_walks_it_leaves_no_stale_listing() {
    let h = racing(
        "sub/",
        Hook::Walk,
        Box::new(|wt: &Path| {
            let base = wt.parent().expect("the base directory");
            fs::rename(wt, base.join("wt.old")).expect("move the worktree away");
            fs::rename(base.join("staged"), wt).expect("move the staged tree in");
        }),
    );
    lay_out(&h);
    let staged = h.base().join("staged");
    write_file(&staged.join("a.txt"), b"staged a\n");
    write_file(&staged.join("sub/c.txt"), b"staged c\n");
    write_file(&staged.join("sub/x.txt"), b"only in the staged tree\n");
    age_past_racy(&staged);
    h.port().track(h.root()).await.expect("the raced track");
    assert_eq!(
        h.id().await.as_str(),
        GitOracle::new(None).write_tree(h.root()),
        "the next track is git's tree of the worktree now"
    );
}

/// A directory laid out as a git directory whose `HEAD` is a symlink to a FIFO: the track reads `HEAD`
/// to tell, and never waits on the FIFO (it was left out of that check's reads before: the track hung).
#[tokio::test]
async fn a_head_that_leads_to_a_fifo_does_not_hang_a_track() {
    let h = GitHarness::new();
    write_file(&h.path("repo/objects/keep"), b"x\n");
    write_file(&h.path("repo/refs/keep"), b"x\n");
    let fifo = h.base().join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(made.success(), "mkfifo");
    std::os::unix::fs::symlink(&fifo, h.path("repo/HEAD")).expect("symlink HEAD");
    let tracked = tracked_without_waiting_on(&h, &fifo).await;
    // Not a git directory (its HEAD is not a file): tracked as any directory, as git does.
    assert_eq!(
        tracked.id.as_str(),
        GitOracle::new(None).write_tree(h.root())
    );
}
