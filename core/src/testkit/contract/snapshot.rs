//! The `SnapshotPort` contract suite: cases that every snapshot store passes, the in-memory one here and the
//! gitoxide one on a real directory.
//!
//! Each case is a public async function over a [`WorktreeHarness`], which gives the port under test and a
//! way to change the worktree's files. The cases need no async runtime of their own; the
//! [`snapshot_contract_tests!`](crate::snapshot_contract_tests) macro turns them into one `#[test]` each
//! with the caller's harness and `block_on`.
//!
//! The cases use only what real git and the fake agree on: the default 2 MiB size cap, and `.gitignore`
//! patterns of the forms `name`, `*.ext` and `dir/`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use crate::testkit::mem_snapshot::Node;

use crate::error::Error;
use crate::model::{
    FileActionKind, FileDiff, FileStatus, RelPath, RevertDiffs, SkipReason, SnapshotId,
    SnapshotPatch, TrackOutcome,
};
use crate::ports::SnapshotPort;

/// A worktree on which the contract cases run, with the port under test.
///
/// Paths are worktree-relative with forward slashes. The methods panic when the change cannot be made:
/// they are test fixtures.
pub trait WorktreeHarness: Send + Sync {
    /// The snapshot store under test.
    fn port(&self) -> &dyn SnapshotPort;
    /// The worktree.
    fn root(&self) -> &Path;
    /// Writes a file, creating its parent directories; an existing file keeps its mode.
    fn write(&self, path: &str, bytes: &[u8]);
    /// Removes the file, symlink or directory tree at `path`, and the parent directories this leaves empty.
    fn remove(&self, path: &str);
    /// Lets the changes made so far age past any window in which the store cannot tell them from a later
    /// change (a stat cache's racy margin), so it may answer for them without reading them again. A store
    /// without such a window does nothing.
    fn settle(&self) {}
    /// Sets or clears a regular file's executable bit.
    fn set_executable(&self, path: &str, executable: bool);
    /// Creates a symlink at `path` whose link text is `target`.
    fn symlink(&self, path: &str, target: &str);
    /// The file or symlink at `path`, if any.
    fn read(&self, path: &str) -> Option<Node>;
    /// Every file and symlink of the worktree, `.git` excluded.
    fn list(&self) -> BTreeMap<String, Node>;
    /// Fault injection: reading this file's content fails from now on.
    fn fail_reads(&self, path: &str);
    /// Fault injection: deletes a stored snapshot's tree object.
    fn remove_snapshot_object(&self, id: &SnapshotId);
}

impl<H: WorktreeHarness + ?Sized> WorktreeHarness for Box<H> {
    fn port(&self) -> &dyn SnapshotPort {
        (**self).port()
    }
    fn root(&self) -> &Path {
        (**self).root()
    }
    fn settle(&self) {
        (**self).settle()
    }
    fn write(&self, path: &str, bytes: &[u8]) {
        (**self).write(path, bytes)
    }
    fn remove(&self, path: &str) {
        (**self).remove(path)
    }
    fn set_executable(&self, path: &str, executable: bool) {
        (**self).set_executable(path, executable)
    }
    fn symlink(&self, path: &str, target: &str) {
        (**self).symlink(path, target)
    }
    fn read(&self, path: &str) -> Option<Node> {
        (**self).read(path)
    }
    fn list(&self) -> BTreeMap<String, Node> {
        (**self).list()
    }
    fn fail_reads(&self, path: &str) {
        (**self).fail_reads(path)
    }
    fn remove_snapshot_object(&self, id: &SnapshotId) {
        (**self).remove_snapshot_object(id)
    }
}

impl<H: WorktreeHarness + ?Sized> WorktreeHarness for Arc<H> {
    fn port(&self) -> &dyn SnapshotPort {
        (**self).port()
    }
    fn root(&self) -> &Path {
        (**self).root()
    }
    fn settle(&self) {
        (**self).settle()
    }
    fn write(&self, path: &str, bytes: &[u8]) {
        (**self).write(path, bytes)
    }
    fn remove(&self, path: &str) {
        (**self).remove(path)
    }
    fn set_executable(&self, path: &str, executable: bool) {
        (**self).set_executable(path, executable)
    }
    fn symlink(&self, path: &str, target: &str) {
        (**self).symlink(path, target)
    }
    fn read(&self, path: &str) -> Option<Node> {
        (**self).read(path)
    }
    fn list(&self) -> BTreeMap<String, Node> {
        (**self).list()
    }
    fn fail_reads(&self, path: &str) {
        (**self).fail_reads(path)
    }
    fn remove_snapshot_object(&self, id: &SnapshotId) {
        (**self).remove_snapshot_object(id)
    }
}

/// Runs every case of the snapshot contract as its own `#[test]`, in the module where it is invoked.
///
/// ```text
/// rewind_core::snapshot_contract_tests!(make = || my_harness(), block_on = futures::executor::block_on);
/// ```
/// `make` is called once per test and returns a fresh harness (any `WorktreeHarness`, a `Box<dyn …>`
/// included); `block_on` is anything callable as `block_on(future)`.
#[macro_export]
macro_rules! snapshot_contract_tests {
    (make = $make:expr, block_on = $block_on:expr $(,)?) => {
        $crate::snapshot_contract_tests!(@cases ($make) ($block_on)
            track_is_deterministic,
            track_fails_on_unreadable_file,
            track_refuses_the_filesystem_root,
            track_honours_gitignore,
            track_skips_untracked_files_over_the_cap,
            unchanged_retrack_hashes_nothing,
            changed_files_lists_added_modified_deleted_and_mode_changes,
            diff_counts_lines,
            diff_marks_binary_files,
            unified_diff_names_every_changed_file,
            unified_diff_quotes_names_that_would_break_a_header,
            revert_diffs_equal_the_text_diff_to_the_worktree_and_the_diff_back,
            revert_diffs_after_a_revert_are_those_of_its_two_snapshots,
            revert_when_touches_nothing_without_its_go_ahead,
            restore_of_given_paths_touches_nothing_else,
            outcomes_list_paths_in_path_order,
            restore_never_touches_ignored_files,
            restore_leaves_a_file_its_snapshot_did_not_track,
            restore_since_leaves_what_changed_since_alone,
            restore_brings_back_symlinks_and_modes,
            revert_applies_first_patch_wins,
            revert_deletes_only_what_did_not_exist,
            revert_with_missing_tree_touches_nothing,
            revert_file_directory_clash_in_patch_order,
            plan_lists_a_file_a_write_replaces_on_its_way,
            plan_lists_a_kept_file_a_write_replaces_as_deleted,
            revert_keeps_a_file_that_would_replace_untracked_files,
            gc_keeps_what_is_kept,
        );
    };
    (@cases ($make:expr) ($block_on:expr) $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                let harness = ($make)();
                ($block_on)($crate::testkit::contract::snapshot::$case(&harness));
            }
        )*
    };
}

fn rel(path: &str) -> RelPath {
    RelPath::new(path).expect("the cases use valid worktree-relative paths")
}

fn rels(paths: &[&str]) -> Vec<RelPath> {
    paths.iter().map(|path| rel(path)).collect()
}

fn text(content: &str) -> Option<Node> {
    Some(Node::file(content))
}

async fn track(h: &dyn WorktreeHarness) -> TrackOutcome {
    h.port()
        .track(h.root())
        .await
        .expect("track succeeds on a readable worktree")
}

fn patch(hash: &SnapshotId, files: &[&str]) -> SnapshotPatch {
    SnapshotPatch {
        hash: hash.clone(),
        files: rels(files),
    }
}

/// The revert diffs from `before` to `applied`, checked against their two oracles while the worktree holds
/// `applied`'s content: the text equals `unified_diff(before)`, the files equal `diff(applied, before)`.
async fn revert_diffs_by_their_oracles(
    h: &dyn WorktreeHarness,
    before: &SnapshotId,
    applied: &SnapshotId,
) -> RevertDiffs {
    let port = h.port();
    let diffs = port
        .revert_diffs(h.root(), before, applied)
        .await
        .expect("revert_diffs");
    let to_worktree = port
        .unified_diff(h.root(), before)
        .await
        .expect("unified_diff");
    assert_eq!(diffs.text, to_worktree);
    let back = port.diff(h.root(), applied, before).await.expect("diff");
    assert_eq!(diffs.files, back);
    diffs
}

/// The files of the session diff, in its order.
fn changed_names(diffs: &RevertDiffs) -> Vec<&str> {
    diffs.files.iter().map(|f| f.file.as_str()).collect()
}

fn row<'d>(diffs: &'d [FileDiff], file: &str) -> &'d FileDiff {
    diffs
        .iter()
        .find(|d| d.file == file)
        .unwrap_or_else(|| panic!("no diff row for {file} in {diffs:#?}"))
}

/// A file one byte over the default 2 MiB cap.
fn over_cap() -> Vec<u8> {
    vec![b'x'; 2 * 1024 * 1024 + 1]
}

/// Same content gives the same id; any change of content or mode gives another.
pub async fn track_is_deterministic(h: &dyn WorktreeHarness) {
    h.write("a.txt", b"a\n");
    h.write("dir/b.txt", b"b\n");
    let first = track(h).await;
    let second = track(h).await;
    assert_eq!(first.id, second.id, "re-tracking the same content");
    assert!(first.skipped.is_empty(), "{:?}", first.skipped);

    h.write("a.txt", b"changed\n");
    let changed = track(h).await;
    assert_ne!(changed.id, first.id, "a content change gives a new id");
    h.write("a.txt", b"a\n");
    assert_eq!(
        track(h).await.id,
        first.id,
        "the same content again gives the first id"
    );

    h.set_executable("a.txt", true);
    let executable = track(h).await;
    assert_ne!(executable.id, first.id, "a mode change gives a new id");
    h.set_executable("a.txt", false);
    assert_eq!(track(h).await.id, first.id);
}

/// A file that cannot be read fails `track` with an error naming it; no id is returned.
pub async fn track_fails_on_unreadable_file(h: &dyn WorktreeHarness) {
    h.write("a.txt", b"a\n");
    h.write("secret.txt", b"s\n");
    track(h).await;
    h.fail_reads("secret.txt");
    match h.port().track(h.root()).await {
        Ok(outcome) => panic!(
            "track returned {:?} although secret.txt cannot be read",
            outcome.id
        ),
        Err(Error::Unreadable { path, .. }) => assert_eq!(path, "secret.txt"),
        Err(other) => panic!("expected Error::Unreadable naming secret.txt, got {other:?}"),
    }
}

/// The filesystem root is refused.
pub async fn track_refuses_the_filesystem_root(h: &dyn WorktreeHarness) {
    let result = h.port().track(Path::new("/")).await;
    assert!(
        matches!(result, Err(Error::InvalidInput(_))),
        "tracking / must be refused with InvalidInput, got {result:?}"
    );
}

/// Ignored files are not tracked content: adding or changing one keeps the id.
pub async fn track_honours_gitignore(h: &dyn WorktreeHarness) {
    h.write(".gitignore", b"*.log\nbuild/\nsecret.txt\n");
    h.write("a.txt", b"a\n");
    let before = track(h).await;
    h.write("app.log", b"noise\n");
    h.write("build/out.o", b"object\n");
    h.write("sub/build/deep.o", b"object\n");
    h.write("secret.txt", b"password\n");
    h.write("sub/secret.txt", b"password\n");
    let after = track(h).await;
    assert_eq!(after.id, before.id, "ignored files leave the id unchanged");
    assert!(after.skipped.is_empty(), "ignored files are not 'skipped'");
    assert!(
        h.port()
            .changed_files(h.root(), &before.id)
            .await
            .expect("changed_files")
            .is_empty()
    );
}

/// An untracked file over the cap is skipped and reported; one already tracked stays tracked when it
/// grows past the cap.
pub async fn track_skips_untracked_files_over_the_cap(h: &dyn WorktreeHarness) {
    h.write("small.txt", b"small\n");
    let before = track(h).await;
    h.write("big.bin", &over_cap());
    let with_big = track(h).await;
    assert_eq!(
        with_big.id, before.id,
        "a new file over the cap is not tracked"
    );
    assert_eq!(with_big.skipped.len(), 1, "{:?}", with_big.skipped);
    assert_eq!(with_big.skipped[0].path, "big.bin");
    assert_eq!(
        with_big.skipped[0].reason,
        SkipReason::TooLarge {
            size: 2 * 1024 * 1024 + 1
        }
    );
    assert!(
        h.port()
            .changed_files(h.root(), &before.id)
            .await
            .expect("changed_files")
            .is_empty(),
        "a skipped file is not a change"
    );

    h.write("small.txt", &over_cap());
    let grown = track(h).await;
    assert_ne!(
        grown.id, before.id,
        "a tracked file that grows past the cap stays tracked"
    );
    assert!(
        grown.skipped.iter().all(|s| s.path != "small.txt"),
        "{:?}",
        grown.skipped
    );
}

/// Re-tracking an unchanged tree reads no file; a changed file is read again.
pub async fn unchanged_retrack_hashes_nothing(h: &dyn WorktreeHarness) {
    h.write("a.txt", b"a\n");
    h.write("b.txt", b"b\n");
    h.write("dir/c.txt", b"c\n");
    h.settle();
    let first = track(h).await;
    assert_eq!(first.hashed, 3, "the first track reads every file");
    let again = track(h).await;
    assert_eq!(again.hashed, 0, "an unchanged tree reads no file content");
    assert_eq!(again.id, first.id);
    h.write("b.txt", b"b changed\n");
    let changed = track(h).await;
    assert!(changed.hashed >= 1, "the changed file is read");
    assert_ne!(changed.id, first.id);
}

/// `changed_files` lists added, modified, deleted and mode-changed paths, sorted, and never a path that is
/// ignored now (a file replaced by an ignored directory included); `changed_between` compares two trees.
pub async fn changed_files_lists_added_modified_deleted_and_mode_changes(h: &dyn WorktreeHarness) {
    h.write(".gitignore", b"*.log\n");
    h.write("out", b"a file at first\n");
    h.write("keep.txt", b"same\n");
    h.write("mod.txt", b"old\n");
    h.write("del.txt", b"bye\n");
    h.write("exe.sh", b"echo hi\n");
    h.write("later.txt", b"tracked at first\n");
    let from = track(h).await.id;
    assert!(
        h.port()
            .changed_files(h.root(), &from)
            .await
            .expect("changed_files")
            .is_empty()
    );

    h.write("mod.txt", b"new\n");
    h.remove("del.txt");
    h.write("new/added.txt", b"hello\n");
    h.set_executable("exe.sh", true);
    h.write("debug.log", b"ignored\n");
    // A file of the snapshot that is modified and then ignored is never listed (OpenCode tests 25-26).
    h.write("later.txt", b"modified\n");
    // A file of the snapshot whose path is now a directory ignored as one (`out/`) is not listed either:
    // git's check-ignore calls the path ignored.
    h.remove("out");
    h.write("out/build.bin", b"generated\n");
    h.write(".gitignore", b"*.log\nlater.txt\nout/\n");

    let changed = h
        .port()
        .changed_files(h.root(), &from)
        .await
        .expect("changed_files");
    assert_eq!(
        changed,
        rels(&[
            ".gitignore",
            "del.txt",
            "exe.sh",
            "mod.txt",
            "new/added.txt"
        ])
    );

    // `track_changes` lists the same from one look, beside the snapshot `track` returns.
    let (tracked, listed) = h
        .port()
        .track_changes(h.root(), &from)
        .await
        .expect("track_changes");
    assert_eq!(listed.expect("listed"), changed);

    let to = track(h).await.id;
    assert_eq!(tracked.id, to);
    let between = h
        .port()
        .changed_between(h.root(), &from, &to)
        .await
        .expect("changed_between");
    assert_eq!(
        between,
        rels(&[
            ".gitignore",
            "del.txt",
            "exe.sh",
            "later.txt",
            "mod.txt",
            "new/added.txt",
            "out"
        ]),
        "between two trees, a file that left the tree is a change"
    );

    // A start gone from the store fails the list, not the snapshot.
    h.remove_snapshot_object(&from);
    let (tracked, listed) = h
        .port()
        .track_changes(h.root(), &from)
        .await
        .expect("the track stands");
    assert_eq!(tracked.id, to);
    assert!(matches!(listed, Err(Error::MissingObject(_))), "{listed:?}");
}

/// Line counts equal `git diff --numstat`, rows come in path order with their status, and patches are
/// unified diffs.
pub async fn diff_counts_lines(h: &dyn WorktreeHarness) {
    h.write("grow.txt", b"a\nb\nc\n");
    h.write("shrink.txt", b"1\n2\n3\n4\n");
    h.write("mixed.txt", b"one\ntwo\nthree\nfour\nfive\n");
    h.write("deleted.txt", b"gone\n");
    h.write("noeol.txt", b"a\nb");
    h.write("ws.txt", b"a\n");
    h.write("same.txt", b"same\n");
    let from = track(h).await.id;
    h.write("grow.txt", b"a\nb\nc\nd\ne\n");
    h.write("shrink.txt", b"1\n4\n");
    h.write("mixed.txt", b"one\n2\nthree\nfour\nfive\nsix\n");
    h.remove("deleted.txt");
    h.write("noeol.txt", b"a\nb\n");
    h.write("ws.txt", b"a\n\n");
    h.write("added.txt", b"x\ny\nz\n");
    let to = track(h).await.id;

    let diffs = h.port().diff(h.root(), &from, &to).await.expect("diff");
    let files: Vec<&str> = diffs.iter().map(|d| d.file.as_str()).collect();
    assert_eq!(
        files,
        [
            "added.txt",
            "deleted.txt",
            "grow.txt",
            "mixed.txt",
            "noeol.txt",
            "shrink.txt",
            "ws.txt"
        ]
    );
    // Expected counts produced by `git diff --numstat --no-renames` on the same contents.
    let expect = [
        ("added.txt", 3, 0, FileStatus::Added),
        ("deleted.txt", 0, 1, FileStatus::Deleted),
        ("grow.txt", 2, 0, FileStatus::Modified),
        ("mixed.txt", 2, 1, FileStatus::Modified),
        ("noeol.txt", 1, 1, FileStatus::Modified),
        ("shrink.txt", 0, 2, FileStatus::Modified),
        ("ws.txt", 1, 0, FileStatus::Modified),
    ];
    for (file, additions, deletions, status) in expect {
        let d = row(&diffs, file);
        assert_eq!(
            (d.additions, d.deletions, d.status),
            (additions, deletions, status),
            "{file}: {d:#?}"
        );
    }
    let mixed = &row(&diffs, "mixed.txt").patch;
    assert!(
        mixed.contains("--- a/mixed.txt\n") && mixed.contains("+++ b/mixed.txt\n"),
        "{mixed}"
    );
    assert!(mixed.contains("\n-two\n") && mixed.contains("\n+2\n") && mixed.contains("\n+six\n"));
    assert!(row(&diffs, "added.txt").patch.contains("\n+x\n"));
    assert!(row(&diffs, "deleted.txt").patch.contains("\n-gone\n"));

    assert!(
        h.port()
            .diff(h.root(), &to, &to)
            .await
            .expect("diff")
            .is_empty(),
        "no change, no rows"
    );
}

/// Binary files (a NUL byte in their first 8000 bytes) get an empty patch and 0/0.
pub async fn diff_marks_binary_files(h: &dyn WorktreeHarness) {
    h.write("image.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR");
    h.write("text.txt", b"old\n");
    let from = track(h).await.id;
    h.write("image.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR changed\n");
    h.write("new.bin", b"a\0b\nc\n");
    h.write("text.txt", b"new\n");
    let to = track(h).await.id;
    let diffs = h.port().diff(h.root(), &from, &to).await.expect("diff");
    assert_eq!(diffs.len(), 3, "{diffs:#?}");
    let image = row(&diffs, "image.png");
    assert_eq!(
        (
            image.patch.as_str(),
            image.additions,
            image.deletions,
            image.status
        ),
        ("", 0, 0, FileStatus::Modified)
    );
    let added = row(&diffs, "new.bin");
    assert_eq!(
        (
            added.patch.as_str(),
            added.additions,
            added.deletions,
            added.status
        ),
        ("", 0, 0, FileStatus::Added)
    );
    let text = row(&diffs, "text.txt");
    assert_eq!((text.additions, text.deletions), (1, 1));
}

/// The text diff from a snapshot to the worktree now names every changed file (OpenCode test 35).
pub async fn unified_diff_names_every_changed_file(h: &dyn WorktreeHarness) {
    h.write("a.txt", b"alpha\n");
    h.write("b.txt", b"old\n");
    let from = track(h).await.id;
    h.remove("a.txt");
    h.write("b.txt", b"modified content\n");
    h.write("new.txt", b"new content\n");
    let text = h
        .port()
        .unified_diff(h.root(), &from)
        .await
        .expect("unified_diff");
    for needle in [
        "diff --git a/a.txt b/a.txt\n",
        "-alpha\n",
        "diff --git a/b.txt b/b.txt\n",
        "-old\n",
        "+modified content\n",
        "diff --git a/new.txt b/new.txt\n",
        "+new content\n",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    let a = text.find("a/a.txt").expect("a.txt is named");
    let n = text.find("a/new.txt").expect("new.txt is named");
    assert!(a < n, "files come in path order");
}

/// A name with a newline (or a tab, a double quote, a backslash) is quoted in the diff headers as git
/// quotes it, so it cannot break a header line in two (SPEC 12.10); `FileDiff.patch` headers too. A name
/// with a space ends its `---`/`+++` line with a tab, as git's does.
pub async fn unified_diff_quotes_names_that_would_break_a_header(h: &dyn WorktreeHarness) {
    h.write("keep.txt", b"k\n");
    let from = track(h).await.id;
    h.write("evil\nmsg_fake user.txt", b"x\n");
    let to = track(h).await.id;
    let text = h
        .port()
        .unified_diff(h.root(), &from)
        .await
        .expect("unified_diff");
    assert!(
        text.starts_with(
            "diff --git \"a/evil\\nmsg_fake user.txt\" \"b/evil\\nmsg_fake user.txt\"\n"
        ) && text.contains("--- /dev/null\n+++ \"b/evil\\nmsg_fake user.txt\"\t\n"),
        "{text}"
    );
    let diffs = h.port().diff(h.root(), &from, &to).await.expect("diff");
    assert!(
        diffs[0]
            .patch
            .starts_with("--- /dev/null\n+++ \"b/evil\\nmsg_fake user.txt\"\t\n@@"),
        "{diffs:#?}"
    );
}

/// A revert's diffs between two snapshots are the text diff from the first to a worktree holding the
/// second and the per-file diffs from the second back to the first; a snapshot the store lacks is an error.
pub async fn revert_diffs_equal_the_text_diff_to_the_worktree_and_the_diff_back(
    h: &dyn WorktreeHarness,
) {
    h.write("a.txt", b"alpha\n");
    h.write("b.txt", b"old\nkept\n");
    h.write("bin.dat", b"\0\x01binary");
    h.write("mode.sh", b"echo\n");
    let from = track(h).await.id;
    h.remove("a.txt");
    h.write("b.txt", b"new\nkept\n");
    h.write("dir/new.txt", b"new content\n");
    h.write("bin.dat", b"\0\x02binary");
    h.set_executable("mode.sh", true);
    let to = track(h).await.id;
    let port = h.port();
    let diffs = revert_diffs_by_their_oracles(h, &from, &to).await;
    assert!(diffs.text.contains("+new content\n"), "{}", diffs.text);
    assert!(
        diffs
            .text
            .contains("Binary files a/bin.dat and b/bin.dat differ\n"),
        "git's line for a binary file: {}",
        diffs.text
    );
    assert_eq!(
        changed_names(&diffs),
        ["a.txt", "b.txt", "bin.dat", "dir/new.txt", "mode.sh"],
        "every changed file, in path order"
    );
    let same = port
        .revert_diffs(h.root(), &to, &to)
        .await
        .expect("revert_diffs");
    assert_eq!(same, RevertDiffs::default());
    let missing =
        SnapshotId::parse("0123456789abcdef0123456789abcdef01234567").expect("a valid id");
    assert!(
        port.revert_diffs(h.root(), &from, &missing).await.is_err(),
        "a snapshot the store lacks is an error"
    );
}

/// Right after a revert (what the service does: `revert`, then `revert_diffs` from the snapshot it reverted
/// from to the `applied` it returned), the diffs are those of the two snapshots: the text diff equals
/// `unified_diff` from the pre-revert snapshot to the worktree the revert left, and the per-file diffs equal
/// `diff(applied, pre-revert)`; asked again, the same. (A store may work them out while it writes.)
pub async fn revert_diffs_after_a_revert_are_those_of_its_two_snapshots(h: &dyn WorktreeHarness) {
    h.write("kept.txt", b"kept\n");
    h.write("edited.txt", b"one\ntwo\nthree\n");
    h.write("gone.txt", b"was there\n");
    let start = track(h).await.id;
    h.write("edited.txt", b"one\n2\nthree\nfour\n");
    h.remove("gone.txt");
    h.write("dir/added.txt", b"added by the step\n");
    let end = track(h).await.id;
    let patches = [patch(&start, &["edited.txt", "gone.txt", "dir/added.txt"])];
    let port = h.port();
    let outcome = port.revert(h.root(), &patches, &end).await.expect("revert");
    let diffs = revert_diffs_by_their_oracles(h, &end, &outcome.applied).await;
    assert_eq!(
        outcome.applied, start,
        "the revert put the step's files back"
    );
    assert!(diffs.text.contains("-four\n"), "{}", diffs.text);
    assert_eq!(
        changed_names(&diffs),
        ["dir/added.txt", "edited.txt", "gone.txt"]
    );
    let again = port
        .revert_diffs(h.root(), &end, &outcome.applied)
        .await
        .expect("revert_diffs again");
    assert_eq!(again, diffs);
    // Once the snapshot the revert went back to is gone from the store, its diffs are an error, as for any
    // snapshot the store lacks: nothing worked out during the revert answers for it.
    port.restore(h.root(), &end, None).await.expect("restore");
    let outcome = port
        .revert(h.root(), &patches, &end)
        .await
        .expect("revert again");
    h.remove_snapshot_object(&outcome.applied);
    assert!(
        port.revert_diffs(h.root(), &end, &outcome.applied)
            .await
            .is_err(),
        "the diffs to a snapshot the store lost are an error"
    );
}

/// `revert_when` touches nothing until its go-ahead: refused or dropped, the call fails and the worktree is
/// as it was; given, it reverts as `revert` does.
pub async fn revert_when_touches_nothing_without_its_go_ahead(h: &dyn WorktreeHarness) {
    h.write("edited.txt", b"one\n");
    h.write("gone.txt", b"was there\n");
    let start = track(h).await.id;
    h.write("edited.txt", b"two\n");
    h.remove("gone.txt");
    h.write("dir/added.txt", b"added by the step\n");
    let end = track(h).await.id;
    let before = h.list();
    let patches = [patch(&start, &["edited.txt", "gone.txt", "dir/added.txt"])];
    let port = h.port();
    for answer in [Some(false), None] {
        let (ready, gate) = futures::channel::oneshot::channel();
        match answer {
            Some(go) => ready.send(go).expect("the receiver is there"),
            None => drop(ready),
        }
        let result = port.revert_when(h.root(), &patches, &end, gate).await;
        assert!(
            matches!(&result, Err(e) if e.to_string().contains("called off")),
            "go-ahead {answer:?}: {result:?}"
        );
        assert_eq!(h.list(), before, "go-ahead {answer:?}: nothing was touched");
        assert_eq!(track(h).await.id, end);
    }
    let (ready, gate) = futures::channel::oneshot::channel();
    ready.send(true).expect("the receiver is there");
    let outcome = port
        .revert_when(h.root(), &patches, &end, gate)
        .await
        .expect("revert with the go-ahead");
    assert_eq!(outcome.applied, start);
    assert_eq!(track(h).await.id, start);
    assert_eq!(h.read("edited.txt"), text("one\n"));
    assert_eq!(h.read("dir/added.txt"), None);
}

/// Restoring given paths writes exactly those and touches nothing else; restoring again writes nothing.
pub async fn restore_of_given_paths_touches_nothing_else(h: &dyn WorktreeHarness) {
    h.write("a.txt", b"a1\n");
    h.write("b.txt", b"b1\n");
    h.write("dir/c.txt", b"c1\n");
    let snapshot = track(h).await.id;
    h.write("a.txt", b"a2\n");
    h.write("b.txt", b"b2\n");
    h.write("dir/c.txt", b"c2\n");
    h.write("d.txt", b"d\n");

    let outcome = h
        .port()
        .restore(h.root(), &snapshot, Some(rels(&["dir/c.txt", "a.txt"])))
        .await
        .expect("restore");
    assert_eq!(outcome.written, rels(&["a.txt", "dir/c.txt"]));
    assert!(
        outcome.deleted.is_empty() && outcome.kept.is_empty(),
        "{outcome:?}"
    );
    assert_eq!(h.read("a.txt"), text("a1\n"));
    assert_eq!(h.read("dir/c.txt"), text("c1\n"));
    assert_eq!(h.read("b.txt"), text("b2\n"), "b.txt was not asked for");
    assert_eq!(h.read("d.txt"), text("d\n"), "d.txt was not asked for");

    let again = h
        .port()
        .restore(h.root(), &snapshot, Some(rels(&["a.txt", "dir/c.txt"])))
        .await
        .expect("restore");
    assert!(
        again.written.is_empty() && again.deleted.is_empty(),
        "an equal file is not touched: {again:?}"
    );

    let removed = h
        .port()
        .restore(h.root(), &snapshot, Some(rels(&["d.txt"])))
        .await
        .expect("restore");
    assert_eq!(removed.deleted, rels(&["d.txt"]));
    assert!(removed.written.is_empty());
    assert_eq!(h.read("d.txt"), None);
    assert_eq!(h.read("b.txt"), text("b2\n"));

    let whole = h
        .port()
        .restore(h.root(), &snapshot, None)
        .await
        .expect("restore");
    assert_eq!(whole.written, rels(&["b.txt"]));
    assert!(whole.deleted.is_empty());
    assert_eq!(track(h).await.id, snapshot);
}

/// A restore's and a revert's written, deleted and kept lists are in path order, whatever order the files
/// were touched in (deletions go deepest first, so that their directories can go too).
pub async fn outcomes_list_paths_in_path_order(h: &dyn WorktreeHarness) {
    h.write(".gitignore", b"*.log\n");
    h.write("a.txt", b"a1\n");
    h.write("z/z.txt", b"z1\n");
    let start = track(h).await.id;
    for path in ["b/deep/x.txt", "b/y.txt", "c.txt", "d/e.txt", "z/z.txt"] {
        h.write(path, b"new\n");
    }
    h.write("a.txt", b"a2\n");
    let end = track(h).await.id;
    let deleted = rels(&["b/deep/x.txt", "b/y.txt", "c.txt", "d/e.txt"]);
    let sorted = |paths: &[RelPath]| paths.windows(2).all(|pair| pair[0] < pair[1]);

    let restored = h
        .port()
        .restore(h.root(), &start, None)
        .await
        .expect("restore");
    assert_eq!(restored.deleted, deleted);
    assert_eq!(restored.written, rels(&["a.txt", "z/z.txt"]));
    assert!(restored.created.is_empty(), "{restored:?}");

    // Back: the four files are created, in path order; the two overwritten are not.
    let back = h
        .port()
        .restore(h.root(), &end, None)
        .await
        .expect("restore");
    assert_eq!(back.created, deleted);
    let mut written = deleted.clone();
    written.extend(rels(&["a.txt", "z/z.txt"]));
    written.sort_unstable();
    assert_eq!(back.written, written);
    let files = [
        "z/z.txt",
        "d/e.txt",
        "c.txt",
        "b/y.txt",
        "b/deep/x.txt",
        "a.txt",
    ];
    let reverted = h
        .port()
        .revert(h.root(), &[patch(&start, &files)], &end)
        .await
        .expect("revert");
    assert_eq!(reverted.deleted, deleted);
    assert_eq!(reverted.written, rels(&["a.txt", "z/z.txt"]));
    assert!(sorted(&reverted.written) && sorted(&reverted.deleted));

    // Files the snapshot holds that are ignored now are kept, in path order too.
    h.port()
        .restore(h.root(), &end, None)
        .await
        .expect("restore");
    h.write("z/z.txt", b"edited\n");
    h.write("b/y.txt", b"edited\n");
    h.write(".gitignore", b"*.log\ny.txt\nz.txt\n");
    let outcome = h
        .port()
        .restore(h.root(), &end, Some(rels(&["z/z.txt", "b/y.txt"])))
        .await
        .expect("restore");
    let kept: Vec<RelPath> = outcome.kept.into_iter().map(|k| k.path).collect();
    assert_eq!(kept, rels(&["b/y.txt", "z/z.txt"]));
    assert_eq!(h.read("z/z.txt"), text("edited\n"));
}

/// `restore_since` puts back only the paths still as `since` holds them: a file edited, made or deleted
/// after `since` is left as it is and reported as kept, the others are restored as `restore` would. A named
/// directory holding a changed file keeps that file and restores the rest.
pub async fn restore_since_leaves_what_changed_since_alone(h: &dyn WorktreeHarness) {
    h.write("a.txt", b"a1\n");
    h.write("b.txt", b"b1\n");
    h.write("dir/c.txt", b"c1\n");
    h.write("dir/d.txt", b"d1\n");
    let to = track(h).await.id;
    h.write("a.txt", b"a2\n");
    h.write("b.txt", b"b2\n");
    h.write("dir/c.txt", b"c2\n");
    h.write("dir/d.txt", b"d2\n");
    h.write("e.txt", b"e2\n");
    let since = track(h).await.id;
    h.write("b.txt", b"b3, edited after\n");
    h.write("dir/d.txt", b"d3, edited after\n");
    h.write("new.txt", b"made after\n");
    h.remove("e.txt");

    let outcome = h
        .port()
        .restore_since(
            h.root(),
            &to,
            rels(&["a.txt", "b.txt", "dir", "e.txt", "new.txt"]),
            &since,
        )
        .await
        .expect("restore_since");
    assert_eq!(h.read("a.txt"), text("a1\n"));
    assert_eq!(h.read("dir/c.txt"), text("c1\n"));
    assert_eq!(h.read("b.txt"), text("b3, edited after\n"));
    assert_eq!(h.read("dir/d.txt"), text("d3, edited after\n"));
    assert_eq!(h.read("new.txt"), text("made after\n"));
    assert_eq!(h.read("e.txt"), None);
    let mut kept: Vec<&str> = outcome.kept.iter().map(|k| k.path.as_str()).collect();
    kept.sort_unstable();
    assert_eq!(
        kept,
        ["b.txt", "dir/d.txt", "e.txt", "new.txt"],
        "{outcome:?}"
    );
    assert_eq!(outcome.written, rels(&["a.txt", "dir/c.txt"]));
    assert!(outcome.deleted.is_empty(), "{outcome:?}");

    // Nothing changed since `since`: as `restore` of the paths. A file deleted before `since` is created
    // again, and said to be.
    h.remove("a.txt");
    let since = track(h).await.id;
    let outcome = h
        .port()
        .restore_since(h.root(), &to, rels(&["a.txt", "b.txt", "new.txt"]), &since)
        .await
        .expect("restore_since");
    assert!(outcome.kept.is_empty(), "{outcome:?}");
    assert_eq!(outcome.written, rels(&["a.txt", "b.txt"]));
    assert_eq!(outcome.created, rels(&["a.txt"]));
    assert_eq!(h.read("a.txt"), text("a1\n"));
    assert_eq!(outcome.deleted, rels(&["new.txt"]));
    assert_eq!(h.read("b.txt"), text("b1\n"));
    assert_eq!(h.read("new.txt"), None);
}

/// Restore never overwrites or deletes a file that is not tracked content now, and reports it as kept.
pub async fn restore_never_touches_ignored_files(h: &dyn WorktreeHarness) {
    h.write(".gitignore", b"*.log\nsecret/\n");
    h.write("a.txt", b"a1\n");
    h.write("app.log", b"log 1\n");
    h.write("notes.txt", b"notes 1\n");
    let snapshot = track(h).await.id;

    h.write("a.txt", b"a2\n");
    h.write("app.log", b"log 2\n");
    h.write("secret/key", b"k\n");
    h.write("new.txt", b"new\n");
    // notes.txt is in the snapshot but becomes ignored: it is no longer tracked content.
    h.write("notes.txt", b"notes 2\n");
    h.write(".gitignore", b"*.log\nsecret/\nnotes.txt\n");

    let outcome = h
        .port()
        .restore(h.root(), &snapshot, None)
        .await
        .expect("restore");
    assert_eq!(outcome.written, rels(&[".gitignore", "a.txt"]));
    assert_eq!(outcome.deleted, rels(&["new.txt"]));
    let kept: Vec<&str> = outcome.kept.iter().map(|k| k.path.as_str()).collect();
    assert_eq!(kept, ["notes.txt"], "{outcome:?}");
    assert_eq!(h.read("app.log"), text("log 2\n"));
    assert_eq!(h.read("secret/key"), text("k\n"));
    assert_eq!(h.read("notes.txt"), text("notes 2\n"));

    // Named explicitly, an ignored file is still left alone.
    let named = h
        .port()
        .restore(h.root(), &snapshot, Some(rels(&["app.log", "secret/key"])))
        .await
        .expect("restore");
    assert!(
        named.written.is_empty() && named.deleted.is_empty(),
        "{named:?}"
    );
    assert_eq!(h.read("app.log"), text("log 2\n"));
    assert_eq!(h.read("secret/key"), text("k\n"));
}

/// A restore to a snapshot deletes no file that the snapshot did not track (ignored by its rules then): it
/// may have existed then, so it is left as it is and reported as kept, as a revert's plan leaves it.
/// `restore_since` has no such exception: it puts back exactly the state it captured, so the file goes.
pub async fn restore_leaves_a_file_its_snapshot_did_not_track(h: &dyn WorktreeHarness) {
    h.write(".gitignore", b"*.env\n");
    h.write("a.txt", b"a1\n");
    h.write("local.env", b"SECRET=1\n");
    let first = track(h).await.id;
    h.write(".gitignore", b"");
    h.write("b.txt", b"b\n");
    let now = track(h).await.id;

    let outcome = h
        .port()
        .restore(h.root(), &first, None)
        .await
        .expect("restore");
    assert_eq!(outcome.written, rels(&[".gitignore"]), "{outcome:?}");
    assert_eq!(outcome.deleted, rels(&["b.txt"]), "{outcome:?}");
    let kept: Vec<&str> = outcome.kept.iter().map(|k| k.path.as_str()).collect();
    assert_eq!(kept, ["local.env"], "{outcome:?}");
    assert_eq!(h.read("local.env"), text("SECRET=1\n"));

    // The state `now` captured, put back, then undone by `restore_since`: the file it held goes.
    h.write(".gitignore", b"");
    h.write("b.txt", b"b\n");
    assert_eq!(track(h).await.id, now);
    let outcome = h
        .port()
        .restore_since(h.root(), &first, rels(&["local.env", "b.txt"]), &now)
        .await
        .expect("restore_since");
    assert!(outcome.kept.is_empty(), "{outcome:?}");
    assert_eq!(
        outcome.deleted,
        rels(&["b.txt", "local.env"]),
        "{outcome:?}"
    );
    assert_eq!(h.read("local.env"), None);
}

/// Restore brings back symlinks as links and executable bits.
pub async fn restore_brings_back_symlinks_and_modes(h: &dyn WorktreeHarness) {
    h.write("a.txt", b"a\n");
    h.write("run.sh", b"#!/bin/sh\n");
    h.set_executable("run.sh", true);
    h.symlink("link", "a.txt");
    let snapshot = track(h).await.id;
    h.remove("link");
    h.set_executable("run.sh", false);
    let outcome = h
        .port()
        .restore(h.root(), &snapshot, None)
        .await
        .expect("restore");
    assert_eq!(outcome.written, rels(&["link", "run.sh"]));
    assert_eq!(h.read("link"), Some(Node::symlink("a.txt")));
    assert_eq!(h.read("run.sh"), Some(Node::executable("#!/bin/sh\n")));
    assert_eq!(h.read("a.txt"), text("a\n"));
    assert_eq!(track(h).await.id, snapshot);
}

/// The first patch naming a file wins (OpenCode test 51); `plan` changes nothing; `applied` is the state
/// the revert left.
pub async fn revert_applies_first_patch_wins(h: &dyn WorktreeHarness) {
    h.write("shared.txt", b"v1\n");
    let s1 = track(h).await.id;
    h.write("shared.txt", b"v2\n");
    let s2 = track(h).await.id;
    h.write("shared.txt", b"v3\n");
    h.write("other.txt", b"made in step 2\n");
    let base = track(h).await.id;
    let patches = [
        patch(&s1, &["shared.txt"]),
        patch(&s2, &["shared.txt", "other.txt"]),
    ];

    let before = h.list();
    let plan = h.port().plan(h.root(), &patches).await.expect("plan");
    assert_eq!(h.list(), before, "plan changes nothing");
    let summary: Vec<(&str, FileActionKind, &SnapshotId)> = plan
        .iter()
        .map(|a| (a.path.as_str(), a.action, &a.from))
        .collect();
    assert_eq!(
        summary,
        [
            ("shared.txt", FileActionKind::Write, &s1),
            ("other.txt", FileActionKind::Delete, &s2)
        ]
    );

    let outcome = h
        .port()
        .revert(h.root(), &patches, &base)
        .await
        .expect("revert");
    assert_eq!(h.read("shared.txt"), text("v1\n"));
    assert_eq!(h.read("other.txt"), None);
    assert_eq!(outcome.written, rels(&["shared.txt"]));
    assert_eq!(outcome.deleted, rels(&["other.txt"]));
    assert!(outcome.kept.is_empty(), "{:?}", outcome.kept);
    assert_eq!(
        outcome.applied,
        track(h).await.id,
        "applied is the tracked content the revert left"
    );
    assert_eq!(outcome.applied, s1);
}

/// A file that existed but was untracked at the patch's snapshot (ignored then, or over the cap) is kept,
/// not deleted; a file that did not exist is deleted.
pub async fn revert_deletes_only_what_did_not_exist(h: &dyn WorktreeHarness) {
    h.write(".gitignore", b"build/\n");
    h.write("build/out.txt", b"built before the step\n");
    h.write("big.bin", &over_cap());
    h.write("a.txt", b"a\n");
    let start = track(h).await;
    assert!(
        start.skipped.iter().any(|s| s.path == "big.bin"),
        "{:?}",
        start.skipped
    );

    // The step un-ignores build/, shrinks big.bin under the cap and creates new.txt.
    h.write(".gitignore", b"*.tmp\n");
    h.write("big.bin", b"small now\n");
    h.write("new.txt", b"new\n");
    let changed = h
        .port()
        .changed_files(h.root(), &start.id)
        .await
        .expect("changed_files");
    assert_eq!(
        changed,
        rels(&[".gitignore", "big.bin", "build/out.txt", "new.txt"])
    );
    let base = track(h).await.id;
    let patches = [SnapshotPatch {
        hash: start.id.clone(),
        files: changed,
    }];

    let plan = h.port().plan(h.root(), &patches).await.expect("plan");
    let actions: Vec<(&str, FileActionKind)> =
        plan.iter().map(|a| (a.path.as_str(), a.action)).collect();
    assert_eq!(
        actions,
        [
            (".gitignore", FileActionKind::Write),
            ("big.bin", FileActionKind::Keep),
            ("build/out.txt", FileActionKind::Keep),
            ("new.txt", FileActionKind::Delete)
        ]
    );
    assert!(
        plan.iter()
            .all(|a| (a.action == FileActionKind::Keep) == a.reason.is_some())
    );

    let outcome = h
        .port()
        .revert(h.root(), &patches, &base)
        .await
        .expect("revert");
    assert_eq!(outcome.written, rels(&[".gitignore"]));
    assert_eq!(outcome.deleted, rels(&["new.txt"]));
    let kept: Vec<&str> = outcome.kept.iter().map(|k| k.path.as_str()).collect();
    assert_eq!(kept, ["big.bin", "build/out.txt"]);
    assert_eq!(h.read("build/out.txt"), text("built before the step\n"));
    assert_eq!(h.read("big.bin"), text("small now\n"));
    assert_eq!(h.read(".gitignore"), text("build/\n"));
}

/// A missing tree is `Error::MissingObject`, and nothing is touched, not even the files of the patches
/// whose trees exist.
pub async fn revert_with_missing_tree_touches_nothing(h: &dyn WorktreeHarness) {
    h.write("a.txt", b"v1\n");
    let s1 = track(h).await.id;
    h.write("a.txt", b"v2\n");
    let s2 = track(h).await.id;
    h.write("c.txt", b"made in step 2\n");
    let base = track(h).await.id;
    let patches = [patch(&s2, &["c.txt"]), patch(&s1, &["a.txt"])];
    h.remove_snapshot_object(&s1);

    let before = h.list();
    let reverted = h.port().revert(h.root(), &patches, &base).await;
    assert!(
        matches!(reverted, Err(Error::MissingObject(_))),
        "expected MissingObject, got {reverted:?}"
    );
    assert_eq!(h.list(), before, "a failed revert touches no file");

    let planned = h.port().plan(h.root(), &patches).await;
    assert!(
        matches!(planned, Err(Error::MissingObject(_))),
        "{planned:?}"
    );
    let restored = h.port().restore(h.root(), &s1, None).await;
    assert!(
        matches!(restored, Err(Error::MissingObject(_))),
        "{restored:?}"
    );
    assert_eq!(h.list(), before, "a failed restore touches no file");
}

/// A path that is a file in one patch and a directory in another is handled in patch order (OpenCode test
/// 52).
pub async fn revert_file_directory_clash_in_patch_order(h: &dyn WorktreeHarness) {
    h.write("a.txt", b"v1\n");
    h.write("foo/bar", b"bar v1\n");
    let s1 = track(h).await.id;
    h.write("a.txt", b"v2\n");
    h.remove("foo/bar");
    h.write("foo", b"foo is a file\n");
    let s2 = track(h).await.id;
    h.remove("foo");
    let base = track(h).await.id;

    let patches = [
        patch(&s1, &["a.txt"]),
        patch(&s2, &["foo"]),
        patch(&s1, &["foo/bar"]),
    ];
    let outcome = h
        .port()
        .revert(h.root(), &patches, &base)
        .await
        .expect("revert");
    assert_eq!(h.read("a.txt"), text("v1\n"));
    assert_eq!(h.read("foo"), None, "foo ends up a directory");
    assert_eq!(h.read("foo/bar"), text("bar v1\n"));
    assert_eq!(outcome.written, rels(&["a.txt", "foo/bar"]));
    assert!(outcome.deleted.is_empty(), "{outcome:?}");
    assert_eq!(outcome.applied, track(h).await.id);
    assert_eq!(outcome.applied, s1);
}

/// A tracked file standing where a directory must come back, for a file the revert writes beneath it, is
/// replaced (SPEC 2.4: tracked content is in the snapshot the caller took just before; only files that are
/// not tracked content block a write), and the plan lists it as deleted, with the reason, so a preview
/// names every file the revert removes (HTTP fuzz: it named only the file written beneath). The outcome
/// lists it as deleted too.
pub async fn plan_lists_a_file_a_write_replaces_on_its_way(h: &dyn WorktreeHarness) {
    h.write("src/main.rs", b"fn main() {}\n");
    h.write("other.txt", b"other\n");
    let start = track(h).await.id;
    h.write("src/main.rs", b"edited by the step\n");
    // After the step, the directory `src` is replaced by a file (the user's, or another session's).
    h.remove("src");
    h.write("src", b"a file now\n");
    let base = track(h).await.id;
    let patches = [patch(&start, &["src/main.rs"])];

    let before = h.list();
    let plan = h.port().plan(h.root(), &patches).await.expect("plan");
    assert_eq!(h.list(), before, "plan changes nothing");
    let summary: Vec<(&str, FileActionKind, &SnapshotId, bool)> = plan
        .iter()
        .map(|a| (a.path.as_str(), a.action, &a.from, a.reason.is_some()))
        .collect();
    assert_eq!(
        summary,
        [
            ("src/main.rs", FileActionKind::Write, &start, false),
            ("src", FileActionKind::Delete, &start, true),
        ]
    );

    let outcome = h
        .port()
        .revert(h.root(), &patches, &base)
        .await
        .expect("revert");
    assert_eq!(h.read("src/main.rs"), text("fn main() {}\n"));
    assert_eq!(h.read("other.txt"), text("other\n"));
    assert_eq!(outcome.written, rels(&["src/main.rs"]));
    assert_eq!(outcome.deleted, rels(&["src"]));
    assert!(outcome.kept.is_empty(), "{:?}", outcome.kept);
    assert_eq!(outcome.applied, track(h).await.id);
}

/// A file one patch keeps (ignored when its step began, tracked at its end: SPEC 2.4) where an earlier
/// patch's file needs its directory back is replaced all the same, as tracked content now, held by the
/// snapshot taken just before the revert; the plan says so, as it says what else the revert deletes
/// (diff review: it said `keep` for the file the revert then removed).
pub async fn plan_lists_a_kept_file_a_write_replaces_as_deleted(h: &dyn WorktreeHarness) {
    h.write("p/x", b"x\n");
    let first = track(h).await.id;
    // The first step edits `p/x`; then `p` becomes a file, ignored when the second step begins.
    h.write("p/x", b"edited\n");
    h.remove("p");
    h.write(".gitignore", b"p\n");
    h.write("p", b"the user's file\n");
    let second = track(h).await.id;
    // The second step stops ignoring it: `p` is tracked at its end.
    h.write(".gitignore", b"# nothing ignored\n");
    let base = track(h).await.id;
    let patches = [
        patch(&first, &["p/x"]),
        patch(&second, &[".gitignore", "p"]),
    ];

    let before = h.list();
    let plan = h.port().plan(h.root(), &patches).await.expect("plan");
    assert_eq!(h.list(), before, "plan changes nothing");
    let mut summary: Vec<(&str, FileActionKind)> =
        plan.iter().map(|a| (a.path.as_str(), a.action)).collect();
    summary.sort_by(|a, b| a.0.cmp(b.0));
    assert_eq!(
        summary,
        [
            (".gitignore", FileActionKind::Write),
            ("p", FileActionKind::Delete),
            ("p/x", FileActionKind::Write),
        ]
    );

    let outcome = h
        .port()
        .revert(h.root(), &patches, &base)
        .await
        .expect("revert");
    assert_eq!(h.read("p/x"), text("x\n"));
    assert_eq!(h.read(".gitignore"), text("p\n"));
    assert_eq!(outcome.written, rels(&[".gitignore", "p/x"]));
    assert_eq!(outcome.deleted, rels(&["p"]));
    assert!(outcome.kept.is_empty(), "{:?}", outcome.kept);
}

/// A file that would replace a directory still holding files that are not tracked content is kept, with a
/// reason and the snapshot holding its content (`KeptPath::from`: it can be put back from there once the
/// directory is moved away), and those files survive. A file the revert was to delete, where a directory
/// holding the user's file stands now, is kept too, naming no snapshot (there is no content to put back).
pub async fn revert_keeps_a_file_that_would_replace_untracked_files(h: &dyn WorktreeHarness) {
    h.write(".gitignore", b"*.log\n");
    h.write("x", b"x was a file\n");
    let start = track(h).await.id;
    h.remove("x");
    h.write("x/new.txt", b"new\n");
    h.write("x/run.log", b"ignored\n");
    h.write("y", b"made by the step\n");
    let changed = h
        .port()
        .changed_files(h.root(), &start)
        .await
        .expect("changed_files");
    assert_eq!(changed, rels(&["x", "x/new.txt", "y"]));
    // After the step, the user puts a directory with a file of theirs where the step made `y`.
    h.remove("y");
    h.write("y/mine.txt", b"the user's\n");
    let base = track(h).await.id;
    let patches = [SnapshotPatch {
        hash: start.clone(),
        files: changed,
    }];

    // The plan says what the revert does (SPEC 2.4 `plan`).
    let plan = h.port().plan(h.root(), &patches).await.expect("plan");
    let mut planned: Vec<(&str, FileActionKind, bool)> = plan
        .iter()
        .map(|a| (a.path.as_str(), a.action, a.reason.is_some()))
        .collect();
    planned.sort_by(|a, b| a.0.cmp(b.0));
    assert_eq!(
        planned,
        [
            ("x", FileActionKind::Keep, true),
            ("x/new.txt", FileActionKind::Delete, false),
            ("y", FileActionKind::Keep, true)
        ],
        "{plan:?}"
    );
    let outcome = h
        .port()
        .revert(h.root(), &patches, &base)
        .await
        .expect("revert");
    let kept: Vec<(&str, Option<&SnapshotId>)> = outcome
        .kept
        .iter()
        .map(|k| (k.path.as_str(), k.from.as_ref()))
        .collect();
    assert_eq!(kept, [("x", Some(&start)), ("y", None)], "{outcome:?}");
    assert!(outcome.kept.iter().all(|k| !k.reason.is_empty()));
    assert_eq!(outcome.deleted, rels(&["x/new.txt"]));
    assert_eq!(h.read("x/run.log"), text("ignored\n"));
    assert_eq!(h.read("x"), None);
    assert_eq!(h.read("y/mine.txt"), text("the user's\n"));
}

/// gc removes only snapshots that nothing keeps: not those in `keep`, not the last tracked one, not those
/// returned within the grace period.
pub async fn gc_keeps_what_is_kept(h: &dyn WorktreeHarness) {
    h.write("a.txt", b"content A\n");
    let s1 = track(h).await.id;
    h.write("a.txt", b"content B\n");
    let s2 = track(h).await.id;
    h.write("a.txt", b"content C\n");
    let s3 = track(h).await.id;

    let exists = |id: SnapshotId| {
        let port = h.port();
        let last = s3.clone();
        async move {
            match port.changed_between(h.root(), &id, &last).await {
                Ok(_) => true,
                Err(Error::MissingObject(_)) => false,
                Err(error) => panic!("changed_between: unexpected error {error:?}"),
            }
        }
    };

    let graced = h
        .port()
        .gc(h.root(), &[], Duration::from_secs(3600))
        .await
        .expect("gc");
    assert_eq!(
        graced.objects_removed, 0,
        "everything is within the grace period"
    );
    assert!(exists(s1.clone()).await && exists(s2.clone()).await);

    let report = h
        .port()
        .gc(h.root(), std::slice::from_ref(&s1), Duration::ZERO)
        .await
        .expect("gc");
    assert!(report.objects_removed >= 1, "{report:?}");
    assert!(exists(s1.clone()).await, "a kept snapshot survives");
    assert!(
        exists(s3.clone()).await,
        "the last tracked snapshot survives"
    );
    assert!(!exists(s2.clone()).await, "an unkept snapshot is collected");

    h.port()
        .restore(h.root(), &s1, None)
        .await
        .expect("a kept snapshot restores whole");
    assert_eq!(h.read("a.txt"), text("content A\n"));
}
