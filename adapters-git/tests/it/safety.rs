//! The safety rules of SPEC 2.2, 2.3 and 2.5 on the git store: no write through a symlink or outside the
//! worktree, ignored files never overwritten or deleted, files untracked at a step's start never deleted by
//! its revert, byte-exact content, fail-closed errors that leave the worktree as it was, a stat cache that
//! cannot be fooled or broken, nested repositories, refused worktrees and the file-count cap.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use rewind_core::Error;
use rewind_core::model::{FileActionKind, RelPath, SkipReason, SnapshotId, SnapshotPatch};
use rewind_core::testkit::contract::snapshot::{Node, WorktreeHarness};
use rewind_git::ExcludesFile;

use crate::git_oracle::{GitOracle, blob_id, commit_all, git, git_succeeds, init_repo};
use crate::harness::{Flagged, GitHarness, age_past_racy, list_tree};

fn rels(paths: &[&str]) -> Vec<RelPath> {
    paths
        .iter()
        .map(|p| RelPath::new(*p).expect("a valid relative path"))
        .collect()
}

fn text(content: &str) -> Option<Node> {
    Some(Node::file(content))
}

fn one_patch(hash: &SnapshotId, files: &[&str]) -> Vec<SnapshotPatch> {
    vec![SnapshotPatch {
        hash: hash.clone(),
        files: rels(files),
    }]
}

fn kept_paths(kept: &[rewind_core::model::KeptPath]) -> Vec<&str> {
    kept.iter().map(|k| k.path.as_str()).collect()
}

/// A directory outside the worktree, with content that must never change.
fn sentinel(h: &GitHarness) -> (PathBuf, BTreeMap<String, Node>) {
    let dir = h.base().join("outside");
    fs::create_dir_all(dir.join("deeper")).expect("create the sentinel directory");
    fs::write(dir.join("file.txt"), "outside, do not touch\n").expect("write the sentinel");
    fs::write(dir.join("deeper/other.txt"), "outside too\n").expect("write the sentinel");
    let listing = list_tree(&dir);
    (dir, listing)
}

fn is_real_dir(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

async fn revert_with_fresh_base(
    h: &GitHarness,
    patches: &[SnapshotPatch],
) -> rewind_core::model::RevertOutcome {
    let base = h.id().await;
    h.port()
        .revert(h.root(), patches, &base)
        .await
        .expect("revert")
}

// ---------------------------------------------------------------------------------------------------------
// (a) Symlinks where a directory is needed.

/// A tracked symlink standing where a directory is needed is replaced by a real directory, never written
/// through, whether it points outside the worktree or inside it.
#[tokio::test]
async fn tracked_symlink_where_a_directory_is_needed_is_replaced() {
    let h = GitHarness::new();
    let (outside, outside_before) = sentinel(&h);
    h.write("dir/file.txt", b"v1\n");
    h.write("inner/other.txt", b"inner\n");
    let s = h.id().await;
    let inner_before = list_tree(&h.path("inner"));

    // Pointing outside: revert of a patch naming only dir/file.txt.
    h.remove("dir");
    h.symlink("dir", outside.to_str().expect("a UTF-8 temp path"));
    let outcome = revert_with_fresh_base(&h, &one_patch(&s, &["dir/file.txt"])).await;
    assert!(
        is_real_dir(&h.path("dir")),
        "the symlink became a directory"
    );
    assert_eq!(h.read("dir/file.txt"), text("v1\n"));
    assert!(
        outcome.written.contains(&rels(&["dir/file.txt"])[0]),
        "{outcome:?}"
    );
    assert!(outcome.kept.is_empty(), "{outcome:?}");
    assert_eq!(outcome.applied, h.id().await);
    assert_eq!(list_tree(&outside), outside_before);

    // Pointing inside: revert again.
    h.remove("dir");
    h.symlink("dir", "inner");
    revert_with_fresh_base(&h, &one_patch(&s, &["dir/file.txt"])).await;
    assert!(is_real_dir(&h.path("dir")));
    assert_eq!(h.read("dir/file.txt"), text("v1\n"));
    assert_eq!(
        list_tree(&h.path("inner")),
        inner_before,
        "nothing written through the link"
    );

    // Restore naming the link and the file replaces the link.
    h.remove("dir");
    h.symlink("dir", outside.to_str().expect("a UTF-8 temp path"));
    h.track().await;
    h.port()
        .restore(h.root(), &s, Some(rels(&["dir", "dir/file.txt"])))
        .await
        .expect("restore");
    assert!(is_real_dir(&h.path("dir")));
    assert_eq!(h.read("dir/file.txt"), text("v1\n"));
    assert_eq!(list_tree(&outside), outside_before);

    // A whole restore deletes the tracked link and recreates the directory.
    h.remove("dir");
    h.symlink("dir", "inner");
    h.track().await;
    h.port().restore(h.root(), &s, None).await.expect("restore");
    assert!(is_real_dir(&h.path("dir")));
    assert_eq!(h.read("dir/file.txt"), text("v1\n"));
    assert_eq!(list_tree(&h.path("inner")), inner_before);
    assert_eq!(h.id().await, s);

    // Restore of only the file leaves the link (not named) alone and says so.
    h.remove("dir");
    h.symlink("dir", outside.to_str().expect("a UTF-8 temp path"));
    h.track().await;
    let outcome = h
        .port()
        .restore(h.root(), &s, Some(rels(&["dir/file.txt"])))
        .await
        .expect("restore");
    assert_eq!(kept_paths(&outcome.kept), ["dir/file.txt"], "{outcome:?}");
    assert!(
        outcome.written.is_empty() && outcome.deleted.is_empty(),
        "{outcome:?}"
    );
    assert_eq!(
        h.read("dir"),
        Some(Node::symlink(outside.to_str().expect("a UTF-8 temp path")))
    );
    assert_eq!(list_tree(&outside), outside_before);
}

/// An ignored symlink standing where a directory is needed is kept (reported), and nothing is written
/// through it, whether it points outside the worktree or inside it.
#[tokio::test]
async fn untracked_symlink_where_a_directory_is_needed_is_kept() {
    for inside in [false, true] {
        let h = GitHarness::new();
        let (outside, outside_before) = sentinel(&h);
        h.write("dir/file.txt", b"v1\n");
        h.write("inner/other.txt", b"inner\n");
        h.write("inner/file.txt", b"inner file, do not touch\n");
        let s = h.id().await;
        let inner_before = list_tree(&h.path("inner"));

        h.remove("dir");
        let target = if inside {
            "inner".to_owned()
        } else {
            outside.to_string_lossy().into_owned()
        };
        h.symlink("dir", &target);
        h.write(".gitignore", b"dir\n");
        let listing = h.list();

        let plan = h
            .port()
            .plan(h.root(), &one_patch(&s, &["dir/file.txt"]))
            .await
            .expect("plan");
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].action, FileActionKind::Keep, "{plan:?}");
        assert!(plan[0].reason.is_some());

        let outcome = revert_with_fresh_base(&h, &one_patch(&s, &["dir/file.txt"])).await;
        assert_eq!(kept_paths(&outcome.kept), ["dir/file.txt"], "{outcome:?}");
        assert!(outcome.written.is_empty() && outcome.deleted.is_empty());
        assert_eq!(h.list(), listing, "inside={inside}");

        for paths in [vec!["dir/file.txt"], vec!["dir", "dir/file.txt"]] {
            let outcome = h
                .port()
                .restore(h.root(), &s, Some(rels(&paths)))
                .await
                .expect("restore");
            assert!(
                outcome.written.is_empty() && outcome.deleted.is_empty(),
                "{outcome:?}"
            );
            assert!(!outcome.kept.is_empty(), "{outcome:?}");
            assert_eq!(h.list(), listing, "inside={inside} paths={paths:?}");
        }
        assert_eq!(h.read("dir"), Some(Node::symlink(target)));
        assert_eq!(list_tree(&outside), outside_before);
        assert_eq!(list_tree(&h.path("inner")), inner_before);
    }
}

/// A directory replaced by a symlink to a directory that has files of the same names: the tracked files
/// below the old directory are gone (the names the symlink shows are another directory's files), so
/// `changed_files` lists them, and the revert puts the directory and its files back, replacing the
/// symlink, while the directory it pointed to is untouched.
#[tokio::test]
async fn a_directory_replaced_by_a_symlink_to_a_look_alike_lists_and_gets_back_its_files() {
    let h = GitHarness::new();
    let (outside, outside_before) = sentinel(&h);
    h.write("real/f", b"f0\n");
    h.write("other/f", b"OTHER\n");
    let start = h.id().await;
    fs::remove_dir_all(h.path("real")).expect("remove real");
    std::os::unix::fs::symlink("other", h.path("real")).expect("symlink to other");
    let changed = h
        .port()
        .changed_files(h.root(), &start)
        .await
        .expect("changed_files");
    assert_eq!(changed, rels(&["real", "real/f"]));

    let outcome = revert_with_fresh_base(&h, &one_patch(&start, &["real", "real/f"])).await;
    assert!(outcome.kept.is_empty(), "{outcome:?}");
    assert_eq!(h.read("real/f"), text("f0\n"));
    assert!(
        !fs::symlink_metadata(h.path("real"))
            .expect("real")
            .file_type()
            .is_symlink()
    );
    assert_eq!(h.read("other/f"), text("OTHER\n"));

    // The same with the symlink leading out of the worktree, to a directory that has a `file.txt`.
    h.write("real/file.txt", b"mine\n");
    let start = h.id().await;
    fs::remove_dir_all(h.path("real")).expect("remove real");
    std::os::unix::fs::symlink(&outside, h.path("real")).expect("symlink outside");
    let changed = h
        .port()
        .changed_files(h.root(), &start)
        .await
        .expect("changed_files");
    assert!(
        changed.contains(&rels(&["real/file.txt"])[0]),
        "{changed:?}"
    );
    let outcome =
        revert_with_fresh_base(&h, &one_patch(&start, &["real", "real/f", "real/file.txt"])).await;
    assert!(outcome.kept.is_empty(), "{outcome:?}");
    assert_eq!(h.read("real/file.txt"), text("mine\n"));
    assert_eq!(
        list_tree(&outside),
        outside_before,
        "nothing outside was written"
    );
}

// ---------------------------------------------------------------------------------------------------------
// (b) Ignored files are never overwritten or deleted.

/// `.env` is ignored all along: a patch naming it (stale or hostile) and restores never touch it.
#[tokio::test]
async fn ignored_env_file_is_never_overwritten_or_deleted() {
    let h = GitHarness::new();
    h.write(".gitignore", b".env*\n");
    h.write(".env", b"SECRET=1\n");
    h.write("a.txt", b"a1\n");
    let s = h.id().await;
    h.write(".env", b"SECRET=2\n");
    h.write(".env.local", b"LOCAL=1\n");
    h.write("a.txt", b"a2\n");
    h.write("new.txt", b"new\n");

    let patches = one_patch(&s, &[".env", ".env.local", "a.txt", "new.txt"]);
    let plan = h.port().plan(h.root(), &patches).await.expect("plan");
    let actions: Vec<(&str, FileActionKind)> =
        plan.iter().map(|a| (a.path.as_str(), a.action)).collect();
    assert_eq!(
        actions,
        [
            (".env", FileActionKind::Keep),
            (".env.local", FileActionKind::Keep),
            ("a.txt", FileActionKind::Write),
            ("new.txt", FileActionKind::Delete),
        ]
    );
    let outcome = revert_with_fresh_base(&h, &patches).await;
    assert_eq!(kept_paths(&outcome.kept), [".env", ".env.local"]);
    assert_eq!(h.read(".env"), text("SECRET=2\n"));
    assert_eq!(h.read(".env.local"), text("LOCAL=1\n"));
    assert_eq!(h.read("a.txt"), text("a1\n"));
    assert_eq!(h.read("new.txt"), None);

    let whole = h.port().restore(h.root(), &s, None).await.expect("restore");
    assert!(whole.deleted.is_empty(), "{whole:?}");
    let named = h
        .port()
        .restore(h.root(), &s, Some(rels(&[".env", ".env.local"])))
        .await
        .expect("restore");
    assert!(
        named.written.is_empty() && named.deleted.is_empty(),
        "{named:?}"
    );
    assert_eq!(kept_paths(&named.kept), [".env", ".env.local"]);
    assert_eq!(h.read(".env"), text("SECRET=2\n"));
    assert_eq!(h.read(".env.local"), text("LOCAL=1\n"));
}

/// A patch's path below what is a file now (the user, or a later turn, put a file, a symlink to one, or a
/// symlink to itself where its directory was): the revert leaves what stands there and reverts the rest
/// (black-box: looking for a nested repository's `.git` below it failed the whole revert with "Not a
/// directory", or "Too many levels of symbolic links").
#[tokio::test]
async fn a_patch_path_below_a_file_now_is_left_and_the_rest_is_reverted() {
    for standing in ["file", "symlink", "loop"] {
        let h = GitHarness::new();
        h.write("x", b"x\n");
        let start = h.id().await;
        h.write("out/sub/log.txt", b"agent\n");
        h.write("x", b"x1\n");
        h.id().await;
        h.remove("out/sub/log.txt");
        match standing {
            "file" => h.write("out", b"user notes\n"),
            "symlink" => std::os::unix::fs::symlink("x", h.path("out")).expect("a symlink"),
            _ => std::os::unix::fs::symlink("out", h.path("out")).expect("a looping symlink"),
        }
        let before = h.read("out");
        let patches = one_patch(&start, &["out/sub/log.txt", "x"]);
        let plan = h.port().plan(h.root(), &patches).await.expect("plan");
        assert_eq!(plan.len(), 2, "{plan:?}");
        let outcome = revert_with_fresh_base(&h, &patches).await;
        assert_eq!(outcome.written, rels(&["x"]), "{outcome:?}");
        assert!(outcome.deleted.is_empty(), "{outcome:?}");
        assert_eq!(h.read("x"), text("x\n"));
        assert_eq!(h.read("out"), before, "{standing}");
    }
}

/// A snapshot's record (what it left untracked) that is missing or cannot be parsed is not read as "nothing
/// was left untracked": a file over the size cap when a step began, and tracked at its end, is kept by the
/// revert of that step and by a restore to its start, as when the record is intact (black-box: with the
/// record deleted or overwritten, `undo` deleted the file and said nothing).
#[tokio::test]
async fn a_missing_or_damaged_snapshot_record_deletes_nothing_it_would_keep() {
    for damage in [None, Some(&b"garbage{"[..])] {
        let h = GitHarness::with_config(|config, _| config.size_cap = 1_000);
        h.write("a.txt", b"a\n");
        h.write("big.bin", &[7; 3_000]);
        let start = h.track().await;
        assert_eq!(kept_paths_of_skipped(&start), ["big.bin"]);
        h.write("big.bin", &[7; 100]);
        let record = h.store_dir().join("rewind/records").join(start.id.as_str());
        match damage {
            None => fs::remove_file(&record),
            Some(bytes) => fs::write(&record, bytes),
        }
        .expect("the record of the step's start is damaged");

        let patches = one_patch(&start.id, &["big.bin"]);
        let plan = h.port().plan(h.root(), &patches).await.expect("plan");
        assert_eq!(plan.len(), 1);
        assert_eq!(plan[0].action, FileActionKind::Keep, "{damage:?}");
        let reason = plan[0].reason.clone().unwrap_or_default();
        assert!(reason.contains("record of snapshot"), "{reason}");
        let outcome = revert_with_fresh_base(&h, &patches).await;
        assert!(outcome.deleted.is_empty(), "{outcome:?}");
        assert_eq!(kept_paths(&outcome.kept), ["big.bin"]);
        assert_eq!(
            h.read("big.bin"),
            Some(Node::File {
                bytes: vec![7; 100],
                executable: false
            })
        );

        let restored = h
            .port()
            .restore(h.root(), &start.id, None)
            .await
            .expect("restore");
        assert!(restored.deleted.is_empty(), "{restored:?}");
        assert_eq!(kept_paths(&restored.kept), ["big.bin"]);
        assert!(restored.kept[0].reason.contains("record of snapshot"));
        assert_eq!(
            h.read("big.bin"),
            Some(Node::File {
                bytes: vec![7; 100],
                executable: false
            })
        );
    }
}

fn kept_paths_of_skipped(outcome: &rewind_core::model::TrackOutcome) -> Vec<&str> {
    outcome.skipped.iter().map(|s| s.path.as_str()).collect()
}

/// SPEC 2.3: a file already in the previous snapshot stays tracked when it grows past the size cap, also
/// when the stat cache that would say so is gone (damaged, or of an older format): the snapshot the store
/// returned last says so too (review: the file left the snapshot). A file over the cap that never was
/// tracked is still skipped.
#[tokio::test]
async fn a_file_grown_past_the_cap_stays_tracked_without_the_stat_cache() {
    let h = GitHarness::with_config(|config, _| config.size_cap = 1_000);
    h.write("grows.bin", &[1; 100]);
    h.write("never.bin", &[2; 3_000]);
    let first = h.track().await;
    assert_eq!(kept_paths_of_skipped(&first), ["never.bin"]);
    let cache = h.store_dir().join("rewind").join("stat-cache");
    for (round, size) in [(1u8, 3_000), (2, 4_000)] {
        h.write("grows.bin", &vec![round; size]);
        fs::write(&cache, b"not a stat cache").expect("damage the stat cache");
        let grown = h.track().await;
        assert_eq!(
            kept_paths_of_skipped(&grown),
            ["never.bin"],
            "round {round}"
        );
        // In the snapshot, with its new content: modified, not deleted.
        let diff = h
            .port()
            .diff(h.root(), &first.id, &grown.id)
            .await
            .expect("diff");
        let statuses: Vec<(&str, String)> = diff
            .iter()
            .map(|d| (d.file.as_str(), format!("{:?}", d.status)))
            .collect();
        assert_eq!(
            statuses,
            [("grows.bin", "Modified".to_owned())],
            "round {round}"
        );
        assert_eq!(h.id().await, grown.id, "round {round}: and again");
    }
}

/// `.env` was tracked when the snapshot was taken and is ignored now: it is not tracked content any more,
/// so neither revert nor restore writes the snapshot's version over it.
#[tokio::test]
async fn env_file_ignored_since_the_snapshot_is_left_alone() {
    let h = GitHarness::new();
    h.write(".env", b"SECRET=old\n");
    h.write("a.txt", b"a1\n");
    let s = h.id().await;
    h.write(".gitignore", b".env\n");
    h.write(".env", b"SECRET=new\n");

    let outcome = revert_with_fresh_base(&h, &one_patch(&s, &[".env"])).await;
    assert_eq!(kept_paths(&outcome.kept), [".env"]);
    assert_eq!(h.read(".env"), text("SECRET=new\n"));

    let whole = h.port().restore(h.root(), &s, None).await.expect("restore");
    assert_eq!(kept_paths(&whole.kept), [".env"], "{whole:?}");
    assert_eq!(whole.deleted, rels(&[".gitignore"]));
    assert_eq!(h.read(".env"), text("SECRET=new\n"));
}

// ---------------------------------------------------------------------------------------------------------
// (c) Ignored when the step began, tracked at its end: the revert keeps it.

async fn check_untracked_at_start_survives(h: &GitHarness, unignore: impl FnOnce()) {
    check_untracked_at_start_survives_at(h, "gen.txt", unignore).await;
}

async fn check_untracked_at_start_survives_at(
    h: &GitHarness,
    generated: &str,
    unignore: impl FnOnce(),
) {
    h.write("a.txt", b"a\n");
    h.write(generated, b"generated before the step\n");
    let start = h.id().await;
    unignore();
    h.write(generated, b"generated during the step\n");
    let changed = h
        .port()
        .changed_files(h.root(), &start)
        .await
        .expect("changed_files");
    assert!(
        changed.contains(&rels(&[generated])[0]),
        "{generated} is tracked now: {changed:?}"
    );
    let patches = vec![SnapshotPatch {
        hash: start,
        files: changed,
    }];
    let plan = h.port().plan(h.root(), &patches).await.expect("plan");
    let gen_action = plan
        .iter()
        .find(|a| a.path.as_str() == generated)
        .expect("the file is planned");
    assert_eq!(gen_action.action, FileActionKind::Keep, "{plan:?}");
    let outcome = revert_with_fresh_base(h, &patches).await;
    assert!(
        kept_paths(&outcome.kept).contains(&generated),
        "{outcome:?}"
    );
    assert!(!outcome.deleted.contains(&rels(&[generated])[0]));
    assert_eq!(h.read(generated), text("generated during the step\n"));
}

/// Ignored by the tree's `.gitignore` at the start.
#[tokio::test]
async fn file_ignored_by_gitignore_at_step_start_survives_revert() {
    let h = GitHarness::new();
    h.write(".gitignore", b"gen.txt\n");
    let writer = h.clone();
    check_untracked_at_start_survives(&h, move || writer.write(".gitignore", b"*.tmp\n")).await;
    assert_eq!(
        h.read(".gitignore"),
        text("gen.txt\n"),
        "the revert restored the rule"
    );
}

/// Ignored at the start by a root `.gitignore` that ignores itself too, so no snapshot holds its text
/// (black-box: the revert judged the path without those rules, and deleted the file and the `.gitignore`,
/// though both existed when the step began). Both are kept; the record holds the rules (`hidden_rules`).
#[tokio::test]
async fn file_ignored_by_a_gitignore_that_ignores_itself_survives_revert() {
    let h = GitHarness::new();
    h.write(".gitignore", b"gen.txt\n.gitignore\n");
    let writer = h.clone();
    check_untracked_at_start_survives(&h, move || writer.write(".gitignore", b"*.tmp\n")).await;
    assert_eq!(
        h.read(".gitignore"),
        text("*.tmp\n"),
        "untracked when the step began: kept as it is"
    );
}

/// The same in a sub-directory whose `.gitignore` is `*` (as a `.venv` or a tool's cache holds): the
/// step rewrote it to un-ignore what it held.
#[tokio::test]
async fn file_under_a_self_ignoring_directory_gitignore_survives_revert() {
    let h = GitHarness::new();
    h.write(".venv/.gitignore", b"*\n");
    let writer = h.clone();
    check_untracked_at_start_survives_at(&h, ".venv/notes.txt", move || {
        writer.write(".venv/.gitignore", b"*.log\n");
    })
    .await;
    assert_eq!(h.read(".venv/.gitignore"), text("*.log\n"));
}

/// A snapshot recorded before `hidden_rules` existed keeps the verdict it gave then as well as the one the
/// `.gitignore` files on disk now give: a file its tree's rules ignored is kept though the step's own
/// `.gitignore` below (on disk now) re-includes it (review: the disk's rules alone took the keep away).
#[tokio::test]
async fn a_snapshot_recorded_before_hidden_rules_keeps_its_old_verdict() {
    let h = GitHarness::new();
    h.write(".gitignore", b"*.log\n");
    h.write("a.txt", b"a\n");
    h.write("sub/keep.log", b"mine, ignored\n");
    let start = h.id().await;
    // As the previous version wrote it: without the field.
    let record = h.store_dir().join("rewind/records").join(start.as_str());
    let mut json: serde_json::Value =
        serde_json::from_slice(&fs::read(&record).expect("the record")).expect("JSON");
    let fields = json.as_object_mut().expect("an object");
    fields.remove("hidden_rules");
    fields.remove("hidden_rules_all");
    fs::write(&record, serde_json::to_vec(&json).expect("JSON")).expect("write");
    h.write("sub/.gitignore", b"!keep.log\n");
    let changed = h
        .port()
        .changed_files(h.root(), &start)
        .await
        .expect("changed_files");
    assert!(changed.contains(&rels(&["sub/keep.log"])[0]), "{changed:?}");
    let patches = vec![SnapshotPatch {
        hash: start,
        files: changed,
    }];
    let outcome = revert_with_fresh_base(&h, &patches).await;
    assert!(
        kept_paths(&outcome.kept).contains(&"sub/keep.log"),
        "{outcome:?}"
    );
    assert_eq!(h.read("sub/keep.log"), text("mine, ignored\n"));
}

/// Ignored by the repository's `info/exclude` at the start (a rule from outside the tree, recorded with
/// the snapshot).
#[tokio::test]
async fn file_ignored_by_info_exclude_at_step_start_survives_revert() {
    let h = GitHarness::git_repo();
    let exclude = h.root().join(".git/info/exclude");
    fs::write(&exclude, "gen.txt\n").expect("write info/exclude");
    check_untracked_at_start_survives(&h, || {
        fs::write(&exclude, "# nothing\n").expect("rewrite info/exclude");
    })
    .await;
}

/// Ignored by the global excludes file at the start.
#[tokio::test]
async fn file_ignored_by_global_excludes_at_step_start_survives_revert() {
    let h = GitHarness::with_config(|config, base| {
        config.excludes_file = ExcludesFile::Path(base.join("global-ignore"));
    });
    let global = h.base().join("global-ignore");
    fs::write(&global, "gen.txt\n").expect("write the global excludes");
    check_untracked_at_start_survives(&h, || {
        fs::write(&global, "*.nothing\n").expect("rewrite the global excludes");
    })
    .await;
}

/// A revert's plan learns from the last track's listings which directories hold no `.gitignore` (and no
/// nested repository), when it finds a directory with the stat data it was listed with; a directory
/// changed since is looked at again. A `.gitignore` made after the track that `base` came from, in a
/// directory listed without one, ignores the file the revert would overwrite: the file is kept, as it is.
/// The directory listed without one and unchanged since is not asked for it (a read there would fail the
/// revert).
#[tokio::test]
async fn a_gitignore_made_after_the_track_is_obeyed_and_none_looked_for_where_none_listed() {
    let h = GitHarness::new();
    h.write("d/secret.txt", b"v1\n");
    h.write("e/plain.txt", b"p1\n");
    let start = h.id().await;
    h.write("d/secret.txt", b"v2\n");
    h.write("e/plain.txt", b"p2\n");
    // Listed more than a second after their last change, the directories' listings are not racy.
    age_past_racy(h.root());
    let base = h.id().await;
    h.write("d/.gitignore", b"secret.txt\n");
    h.fail_reads_of("e/.gitignore");

    let patches = one_patch(&start, &["d/secret.txt", "e/plain.txt"]);
    let outcome = h
        .port()
        .revert(h.root(), &patches, &base)
        .await
        .expect("revert");
    assert_eq!(kept_paths(&outcome.kept), ["d/secret.txt"]);
    assert_eq!(h.read("d/secret.txt"), text("v2\n"));
    assert_eq!(h.read("e/plain.txt"), text("p1\n"));
}

/// A socket named `.gitignore` is never opened, and holds no rules, as for git (which warns and goes on):
/// the track is git's tree, and a revert in that directory is done (review: the open failed with
/// `ENXIO`, failing both).
#[tokio::test]
async fn a_socket_named_gitignore_holds_no_rules_and_fails_nothing() {
    let h = GitHarness::new();
    h.write("d/x.log", b"one\n");
    let _listener = std::os::unix::net::UnixListener::bind(h.path("d/.gitignore"))
        .expect("bind a socket named .gitignore");
    let start = h.id().await;
    let oracle = GitOracle::new(None);
    assert_eq!(start.as_str(), oracle.write_tree(h.root()), "git's tree");
    h.write("d/x.log", b"two\n");
    let base = h.id().await;
    let outcome = h
        .port()
        .revert(h.root(), &one_patch(&start, &["d/x.log"]), &base)
        .await
        .expect("revert");
    assert!(outcome.kept.is_empty(), "{:?}", outcome.kept);
    assert_eq!(h.read("d/x.log"), text("one\n"));
}

/// A directory whose path is a few bytes short of `PATH_MAX` (4,096 with its NUL): its files can be named
/// by path, but not its `.gitignore` or the `.git` looked for there. Its rules are read, as git reads them
/// (`track` gives git's tree, the ignored file left out), and a revert of a file in it is done (fuzz: the
/// rules were taken as none and the ignored file snapshotted, and the revert failed with "File name too
/// long" looking for the `.git`).
#[tokio::test]
async fn a_directory_a_few_bytes_short_of_path_max_has_its_rules_read_and_its_files_reverted() {
    let h = GitHarness::new();
    // The deepest directory's absolute path is 4,092 bytes: `f` and `x` in it take 4,094, `.git` 4,097.
    let root = fs::canonicalize(h.root()).expect("canonical root");
    let mut rel = String::new();
    let mut length = root.as_os_str().len();
    while length < 4_092 {
        // A component of up to 200 bytes, leaving never exactly 1 byte (an empty last name) for the next.
        let left = 4_092 - length - 1;
        let mut size = left.min(200);
        if left - size == 1 {
            size -= 1;
        }
        let name = "d".repeat(size);
        if !rel.is_empty() {
            rel.push('/');
        }
        rel.push_str(&name);
        length += name.len() + 1;
    }
    assert_eq!(length, 4_092, "the names fill the path exactly");
    let deep = root.join(&rel);
    fs::create_dir_all(&deep).expect("create the deep directory");
    // `.gitignore` cannot be named from here: written from inside the directory.
    let written = Command::new("sh")
        .current_dir(&deep)
        .args(["-c", "printf 'x\\n' > .gitignore"])
        .status()
        .expect("run sh");
    assert!(written.success());
    fs::write(deep.join("x"), "ignored\n").expect("write x");
    fs::write(deep.join("f"), "v1\n").expect("write f");

    let start = h.id().await;
    let oracle = GitOracle::new(None);
    assert_eq!(start.as_str(), oracle.write_tree(h.root()), "git's tree");
    fs::write(deep.join("f"), "v2\n").expect("write f");
    fs::write(deep.join("x"), "ignored, changed\n").expect("write x");
    let base = h.id().await;
    assert_eq!(base.as_str(), oracle.write_tree(h.root()), "git's tree");

    let file = format!("{rel}/f");
    let patches = one_patch(&start, &[file.as_str()]);
    let outcome = h
        .port()
        .revert(h.root(), &patches, &base)
        .await
        .expect("revert");
    assert!(outcome.kept.is_empty(), "{:?}", outcome.kept);
    assert_eq!(fs::read(deep.join("f")).expect("read f"), b"v1\n");
    assert_eq!(
        fs::read(deep.join("x")).expect("read x"),
        b"ignored, changed\n"
    );
}

// ---------------------------------------------------------------------------------------------------------
// (d) Byte-exact content.

/// With `* text=auto`, a CRLF file still round-trips byte for byte through track, change, restore and
/// revert: no filter is applied in either direction.
#[tokio::test]
async fn crlf_file_round_trips_byte_for_byte_under_text_auto() {
    let h = GitHarness::git_repo();
    let crlf: &[u8] = b"line one\r\nline two\r\nmixed\nend\r\n";
    h.write(".gitattributes", b"* text=auto\n");
    h.write("crlf.txt", crlf);
    commit_all(h.root(), "crlf");
    let s = h.id().await;

    h.write("crlf.txt", b"changed\n");
    h.port().restore(h.root(), &s, None).await.expect("restore");
    assert_eq!(fs::read(h.path("crlf.txt")).expect("read"), crlf);
    assert_eq!(h.id().await, s);

    h.write("crlf.txt", b"changed again\r\n");
    let patches = one_patch(&s, &["crlf.txt"]);
    revert_with_fresh_base(&h, &patches).await;
    assert_eq!(fs::read(h.path("crlf.txt")).expect("read"), crlf);

    // The blob holds the CRLF bytes: its diff against an LF version changes every CRLF line.
    h.write("crlf.txt", b"line one\nline two\nmixed\nend\n");
    let lf = h.id().await;
    let diffs = h.port().diff(h.root(), &s, &lf).await.expect("diff");
    assert_eq!(diffs.len(), 1, "{diffs:?}");
    assert_eq!((diffs[0].additions, diffs[0].deletions), (3, 3));
}

/// The process's umask, from `/proc/self/status`.
fn umask() -> u32 {
    let status = fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("Umask:"))
        .expect("a Umask line");
    u32::from_str_radix(line.trim(), 8).expect("an octal umask")
}

fn permissions(h: &GitHarness, path: &str) -> u32 {
    fs::symlink_metadata(h.path(path))
        .expect("stat")
        .permissions()
        .mode()
        & 0o777
}

fn chmod(h: &GitHarness, path: &str, bits: u32) {
    fs::set_permissions(h.path(path), fs::Permissions::from_mode(bits)).expect("chmod");
}

/// A file a revert or restore writes over keeps its permission bits (a private key stays private), with the
/// execute bits its snapshot says; a file it creates that had a new file's bits gets `0666` or `0777` less
/// the umask, as git's checkout gives it (one that had others gets them back: the test below). Each written
/// file's content and mode equal the snapshot's.
#[tokio::test]
async fn written_files_keep_their_permissions_and_new_ones_follow_the_umask() {
    let h = GitHarness::new();
    h.write("key.pem", b"k1\n");
    h.write("run.sh", b"#!/bin/sh\n");
    h.write("notes.txt", b"n1\n");
    h.write("gone.txt", b"g1\n");
    h.write("tool", b"#!/bin/sh\n");
    chmod(&h, "key.pem", 0o600);
    chmod(&h, "run.sh", 0o750);
    chmod(&h, "notes.txt", 0o640);
    chmod(&h, "tool", 0o755);
    let start = h.id().await;

    h.write("key.pem", b"k2\n");
    h.write("run.sh", b"#!/bin/sh\necho changed\n");
    chmod(&h, "run.sh", 0o640);
    h.write("notes.txt", b"n2\n");
    chmod(&h, "notes.txt", 0o750);
    h.remove("gone.txt");
    h.remove("tool");
    let patches = one_patch(
        &start,
        &["key.pem", "run.sh", "notes.txt", "gone.txt", "tool"],
    );
    let outcome = revert_with_fresh_base(&h, &patches).await;
    assert_eq!(outcome.written.len(), 5, "{outcome:?}");
    assert_eq!(h.id().await, start, "content and modes are the snapshot's");
    let umask = umask();
    assert_eq!(
        [
            permissions(&h, "key.pem"),
            permissions(&h, "run.sh"),
            permissions(&h, "notes.txt"),
            permissions(&h, "gone.txt"),
            permissions(&h, "tool"),
        ],
        [
            0o600,
            0o750,
            0o640,
            0o666 & !umask,
            (0o777 & !umask) | 0o100
        ]
    );

    // A restore keeps them the same way.
    h.write("key.pem", b"k3\n");
    h.port()
        .restore(h.root(), &start, None)
        .await
        .expect("restore");
    assert_eq!(fs::read(h.path("key.pem")).expect("read"), b"k1\n");
    assert_eq!(permissions(&h, "key.pem"), 0o600);
}

/// A file brought back where no file stands gets the permission bits it had when its snapshot was taken,
/// when it was private beyond git's modes, less what the umask takes from a new file (a private key a step
/// deleted comes back private, not readable by all, and `ssh` still takes it): by a revert, by a restore,
/// by a restore of given paths (an unrevert's), and over a symlink. A `chmod` alone leaves the snapshot id
/// as it is; the narrowest bits any track of it saw are the ones a file gets back.
#[tokio::test]
async fn a_file_brought_back_after_its_deletion_gets_its_own_permissions() {
    let h = GitHarness::new();
    let files = ["key.pem", "bin/tool", "group.txt", "plain.txt"];
    h.write("key.pem", b"k1\n");
    h.write("bin/tool", b"#!/bin/sh\n");
    h.write("group.txt", b"g1\n");
    h.write("plain.txt", b"p1\n");
    chmod(&h, "key.pem", 0o600);
    chmod(&h, "bin/tool", 0o700);
    chmod(&h, "group.txt", 0o660);
    let start = h.id().await;
    // The bits a file comes back with: its own when it lacks a bit of git's modes (0644, 0755), less what
    // the umask takes from a new file; else a new file's (under the usual umask 022: 0600, 0700, 0640).
    let umask = umask();
    let new_file = |executable: bool| {
        let bits = if executable { 0o777 } else { 0o666 } & !umask;
        if executable { bits | 0o100 } else { bits }
    };
    let back = |bits: u32, executable: bool| {
        let git = if executable { 0o755 } else { 0o644 };
        if git & !bits != 0 {
            bits & new_file(executable)
        } else {
            new_file(executable)
        }
    };
    let expected = [
        back(0o600, false),
        back(0o700, true),
        back(0o660, false),
        new_file(false),
    ];
    let now = |h: &GitHarness| files.map(|f| permissions(h, f));

    for file in files {
        h.remove(file);
    }
    let outcome = revert_with_fresh_base(&h, &one_patch(&start, &files)).await;
    assert_eq!(outcome.written.len(), 4, "{outcome:?}");
    assert_eq!(h.id().await, start, "content and modes are the snapshot's");
    assert_eq!(now(&h), expected, "after the revert");

    for file in files {
        h.remove(file);
    }
    h.port()
        .restore(h.root(), &start, None)
        .await
        .expect("restore");
    assert_eq!(now(&h), expected, "after the restore");

    h.remove("key.pem");
    let only = vec![RelPath::new("key.pem").expect("a path")];
    h.port()
        .restore(h.root(), &start, Some(only))
        .await
        .expect("restore of a path");
    assert_eq!(
        permissions(&h, "key.pem"),
        expected[0],
        "after the restore of the path"
    );

    // A file a step replaced by a symlink comes back with its bits too.
    h.remove("key.pem");
    std::os::unix::fs::symlink("plain.txt", h.path("key.pem")).expect("symlink");
    let outcome = revert_with_fresh_base(&h, &one_patch(&start, &["key.pem"])).await;
    assert_eq!(outcome.written.len(), 1, "{outcome:?}");
    assert_eq!(permissions(&h, "key.pem"), expected[0], "over a symlink");

    // The narrowest bits any track of the id saw: 0600, then 0640 after a `chmod` alone.
    chmod(&h, "key.pem", 0o640);
    assert_eq!(
        h.id().await,
        start,
        "a chmod of a file's read bits is no new snapshot"
    );
    h.remove("key.pem");
    h.port()
        .restore(h.root(), &start, None)
        .await
        .expect("restore");
    assert_eq!(
        permissions(&h, "key.pem"),
        expected[0],
        "the narrowest bits seen"
    );
}

/// A directory a revert or restore makes again gets the group's and others' bits it had (a private
/// directory a step deleted, with its files, comes back private: review, it came back `0755`), less what
/// the umask takes from a new directory; the owner's bits are all (the operation writes in it: a read-only
/// directory comes back writable); one with a new directory's bits gets a new directory's.
#[tokio::test]
async fn a_directory_brought_back_after_its_deletion_gets_its_own_permissions() {
    let h = GitHarness::new();
    let files = ["secrets/deep/key", "shared/readme", "ro/file"];
    for file in files {
        h.write(file, b"content\n");
    }
    let dirs = [
        ("secrets", 0o700),
        ("secrets/deep", 0o750),
        ("shared", 0o755),
        ("ro", 0o555),
    ];
    for (dir, bits) in dirs {
        chmod(&h, dir, bits);
    }
    let start = h.id().await;
    let umask = umask();
    let expected = [0o700, 0o750, 0o777, 0o755].map(|bits| bits & !umask);
    let now = |h: &GitHarness| dirs.map(|(dir, _)| permissions(h, dir));
    let remove_all = |h: &GitHarness| {
        chmod(h, "ro", 0o755);
        for dir in ["secrets", "shared", "ro"] {
            fs::remove_dir_all(h.path(dir)).expect("remove the directory");
        }
    };

    remove_all(&h);
    let outcome = revert_with_fresh_base(&h, &one_patch(&start, &files)).await;
    assert_eq!(outcome.written.len(), 3, "{outcome:?}");
    assert_eq!(now(&h), expected, "after the revert");

    remove_all(&h);
    h.port()
        .restore(h.root(), &start, None)
        .await
        .expect("restore");
    assert_eq!(now(&h), expected, "after the restore");
    for file in files {
        assert_eq!(
            fs::read(h.path(file)).expect("read"),
            b"content\n",
            "{file}"
        );
    }
}

/// Whether this process is root (the harness's directory is its own), which alone may give a file to
/// another user; says so when not, as the owner tests then have nothing to check.
fn run_as_root(h: &GitHarness) -> bool {
    use std::os::unix::fs::MetadataExt;
    let root = fs::metadata(h.root()).expect("stat").uid() == 0;
    if !root {
        eprintln!("not root: no file can be given to another user here");
    }
    root
}

/// A file a revert or restore writes over keeps its owner and group (review: run as root, as agents in
/// containers are, every file an undo wrote became root's, and the user who owned it could no longer
/// write it). Only root may give a file to another user: elsewhere the test has nothing to check.
#[tokio::test]
async fn a_file_written_over_keeps_its_owner_and_group() {
    use std::os::unix::fs::MetadataExt;
    let h = GitHarness::new();
    if !run_as_root(&h) {
        return;
    }
    h.write("theirs.txt", b"one\n");
    h.write("mine.txt", b"one\n");
    std::os::unix::fs::chown(h.path("theirs.txt"), Some(65534), Some(65533)).expect("chown");
    let start = h.id().await;
    let owner = |path: &str| {
        let meta = fs::symlink_metadata(h.path(path)).expect("stat");
        (meta.uid(), meta.gid())
    };
    for file in ["theirs.txt", "mine.txt"] {
        h.write(file, b"two\n");
    }
    assert_eq!(
        owner("theirs.txt"),
        (65534, 65533),
        "an edit in place keeps it"
    );
    let outcome = revert_with_fresh_base(&h, &one_patch(&start, &["theirs.txt", "mine.txt"])).await;
    assert_eq!(outcome.written.len(), 2, "{outcome:?}");
    assert_eq!(fs::read(h.path("theirs.txt")).expect("read"), b"one\n");
    assert_eq!(owner("theirs.txt"), (65534, 65533), "after the revert");
    assert_eq!(owner("mine.txt"), (0, 0), "after the revert");

    h.write("theirs.txt", b"three\n");
    h.port()
        .restore(h.root(), &start, None)
        .await
        .expect("restore");
    assert_eq!(fs::read(h.path("theirs.txt")).expect("read"), b"one\n");
    assert_eq!(owner("theirs.txt"), (65534, 65533), "after the restore");
}

/// Run as root, a file or directory a revert or restore makes where none stood gets the owner and group
/// of the directory it is made in (review: an agent run as root in a container, on the user's project,
/// had every file and directory an undo brought back made root's). Elsewhere the test has nothing to
/// check: only root may give a file to another user.
#[tokio::test]
async fn as_root_what_is_brought_back_gets_its_directorys_owner() {
    use std::os::unix::fs::MetadataExt;
    let h = GitHarness::new();
    if !run_as_root(&h) {
        return;
    }
    h.write("theirs/deep/file.txt", b"one\n");
    h.write("mine/file.txt", b"one\n");
    for path in ["theirs", "theirs/deep", "theirs/deep/file.txt"] {
        std::os::unix::fs::chown(h.path(path), Some(65534), Some(65533)).expect("chown");
    }
    let start = h.id().await;
    let owner = |h: &GitHarness, path: &str| {
        let meta = fs::symlink_metadata(h.path(path)).expect("stat");
        (meta.uid(), meta.gid())
    };
    let files = ["theirs/deep/file.txt", "mine/file.txt"];
    let remove = |h: &GitHarness| {
        fs::remove_dir_all(h.path("theirs/deep")).expect("remove");
        fs::remove_dir_all(h.path("mine")).expect("remove");
    };
    remove(&h);
    let outcome = revert_with_fresh_base(&h, &one_patch(&start, &files)).await;
    assert_eq!(outcome.written.len(), 2, "{outcome:?}");
    for path in ["theirs/deep", "theirs/deep/file.txt"] {
        assert_eq!(owner(&h, path), (65534, 65533), "{path} after the revert");
    }
    for path in ["mine", "mine/file.txt"] {
        assert_eq!(owner(&h, path), (0, 0), "{path} after the revert");
    }

    remove(&h);
    h.port()
        .restore(h.root(), &start, None)
        .await
        .expect("restore");
    for path in ["theirs/deep", "theirs/deep/file.txt"] {
        assert_eq!(owner(&h, path), (65534, 65533), "{path} after the restore");
    }
}

// ---------------------------------------------------------------------------------------------------------
// (e) Fail closed.

/// A file that cannot be read fails `track` with an error naming it, and nothing changes.
#[tokio::test]
async fn unreadable_file_fails_track_naming_it() {
    let h = GitHarness::new();
    h.write("a.txt", b"a\n");
    h.write("sub/secret.txt", b"s\n");
    h.fail_reads("sub/secret.txt");
    let listing = h.list();
    match h.port().track(h.root()).await {
        Ok(outcome) => panic!(
            "track returned {:?} although a file cannot be read",
            outcome.id
        ),
        Err(Error::Unreadable { path, .. }) => assert_eq!(path, "sub/secret.txt"),
        Err(other) => panic!("expected Unreadable naming sub/secret.txt, got {other:?}"),
    }
    assert_eq!(h.list(), listing);
}

/// Runs `f` on a thread of its own and waits at most 20 s; when it does not finish, a writer opens the FIFO
/// (non-blocking) so that a reader stuck on it wakes up, and the test fails.
fn within_deadline<T: Send + 'static>(
    what: &str,
    fifo: &Path,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    /// `O_NONBLOCK` on Linux (x86, ARM, RISC-V).
    const O_NONBLOCK: i32 = 0o4000;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(value) => value,
        Err(_) => {
            let _ = fs::OpenOptions::new()
                .write(true)
                .custom_flags(O_NONBLOCK)
                .open(fifo);
            panic!("{what} blocked: it opened the FIFO");
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A FIFO is skipped and reported, never opened (opening it would block `track` forever), and never
/// deleted by a restore.
#[test]
fn fifo_is_skipped_and_never_opened() {
    let h = GitHarness::new();
    h.write("a.txt", b"a\n");
    let s = runtime().block_on(h.id());
    let fifo = h.path("pipe");
    let status = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo failed");

    let worker = h.clone();
    let outcome = within_deadline("track", &fifo, move || {
        runtime().block_on(worker.port().track(worker.root()))
    })
    .expect("track");
    assert_eq!(outcome.id, s, "the FIFO is not tracked content");
    let skipped: Vec<(&str, &SkipReason)> = outcome
        .skipped
        .iter()
        .map(|s| (s.path.as_str(), &s.reason))
        .collect();
    assert_eq!(skipped, [("pipe", &SkipReason::Special)]);

    h.write("a.txt", b"changed\n");
    let worker = h.clone();
    let to = s.clone();
    let restored = within_deadline("restore", &fifo, move || {
        runtime().block_on(worker.port().restore(worker.root(), &to, None))
    })
    .expect("restore");
    assert_eq!(restored.written, rels(&["a.txt"]));
    assert!(restored.deleted.is_empty(), "{restored:?}");
    let meta = fs::symlink_metadata(&fifo).expect("the FIFO is still there");
    assert!(meta.file_type().is_fifo());
}

/// A tracked file that a step replaced by a FIFO (never tracked content) left the tracked content as a
/// deleted file does: it is in the step's changes. Undoing the step leaves the FIFO as it is (never opened)
/// and names the snapshot holding the file; once the FIFO is gone, the next undo puts the file back.
#[test]
fn a_tracked_file_a_step_replaced_by_a_fifo_is_in_its_changes_and_comes_back_once_the_fifo_is_gone()
{
    let h = GitHarness::new();
    h.write("a.txt", b"precious\n");
    h.write("b.txt", b"b1\n");
    let start = runtime().block_on(h.id());
    fs::remove_file(h.path("a.txt")).expect("remove a.txt");
    let fifo = h.path("a.txt");
    let status = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("run mkfifo");
    assert!(status.success(), "mkfifo failed");
    h.write("b.txt", b"b2\n");

    let (worker, from) = (h.clone(), start.clone());
    let (outcome, changed) = within_deadline("track_changes", &fifo, move || {
        runtime().block_on(worker.port().track_changes(worker.root(), &from))
    })
    .expect("track_changes");
    assert_eq!(changed.expect("the changes"), rels(&["a.txt", "b.txt"]));
    let skipped: Vec<(&str, &SkipReason)> = outcome
        .skipped
        .iter()
        .map(|s| (s.path.as_str(), &s.reason))
        .collect();
    assert_eq!(skipped, [("a.txt", &SkipReason::Special)]);

    let patches = one_patch(&start, &["a.txt", "b.txt"]);
    let (worker, undo, base) = (h.clone(), patches.clone(), outcome.id.clone());
    let undone = within_deadline("revert", &fifo, move || {
        runtime().block_on(worker.port().revert(worker.root(), &undo, &base))
    })
    .expect("revert");
    assert_eq!(undone.written, rels(&["b.txt"]), "{undone:?}");
    assert_eq!(kept_paths(&undone.kept), ["a.txt"]);
    assert_eq!(undone.kept[0].from.as_ref(), Some(&start));
    assert!(
        fs::symlink_metadata(&fifo)
            .expect("the FIFO is still there")
            .file_type()
            .is_fifo()
    );
    assert_eq!(h.read("b.txt"), text("b1\n"));

    fs::remove_file(&fifo).expect("the user removes the FIFO");
    let base = runtime().block_on(h.id());
    let again = runtime()
        .block_on(h.port().revert(h.root(), &patches, &base))
        .expect("revert");
    assert_eq!(again.written, rels(&["a.txt", "b.txt"]), "{again:?}");
    assert!(again.kept.is_empty(), "{again:?}");
    assert_eq!(h.read("a.txt"), text("precious\n"));
}

/// A step that modified `a.txt` and `b.txt` and created `new.txt`: the snapshot at its start, its patch, and
/// the pre-revert snapshot.
async fn step_with_patch(h: &GitHarness) -> (SnapshotId, Vec<SnapshotPatch>, SnapshotId) {
    h.write("a.txt", b"a unique content 8e1f\n");
    h.write("b.txt", b"b1\n");
    let start = h.id().await;
    h.write("a.txt", b"a2\n");
    h.write("b.txt", b"b2\n");
    h.write("new.txt", b"new\n");
    let patches = one_patch(&start, &["a.txt", "b.txt", "new.txt"]);
    let base = h.id().await;
    (start, patches, base)
}

fn assert_missing<T: std::fmt::Debug>(what: &str, result: rewind_core::Result<T>) {
    assert!(
        matches!(result, Err(Error::MissingObject(_))),
        "{what}: expected MissingObject, got {result:?}"
    );
}

/// A missing blob of the patch's snapshot: the plan, revert and restore fail with `MissingObject`, the last
/// two before touching any file (not even `b.txt`, whose blob exists).
#[tokio::test]
async fn missing_blob_fails_before_anything_is_touched() {
    let h = GitHarness::new();
    let (start, patches, base) = step_with_patch(&h).await;
    let listing = h.list();
    let blob = SnapshotId::parse(&blob_id(b"a unique content 8e1f\n")).expect("a blob id");
    h.remove_snapshot_object(&blob);
    // The preview says what the revert does: it fails as the revert does, rather than promise a write
    // (black-box).
    assert_missing("plan", h.port().plan(h.root(), &patches).await);
    assert_missing("revert", h.port().revert(h.root(), &patches, &base).await);
    assert_eq!(h.list(), listing);
    assert_missing("restore", h.port().restore(h.root(), &start, None).await);
    assert_eq!(h.list(), listing);
}

/// A missing base tree: the revert cannot compute `applied`, so it fails before touching any file.
#[tokio::test]
async fn missing_base_tree_fails_before_anything_is_touched() {
    let h = GitHarness::new();
    let (_, patches, base) = step_with_patch(&h).await;
    let listing = h.list();
    h.remove_snapshot_object(&base);
    assert_missing("revert", h.port().revert(h.root(), &patches, &base).await);
    assert_eq!(h.list(), listing);
}

/// A missing sub-tree of the base, on a path the revert changes: `applied` cannot be built from it, and the
/// revert fails before touching any file, and before it asks for the go-ahead (the caller would store its
/// intent then): the base's trees along the patches' paths are read while the revert plans, for a few
/// files as for many (more than the revert works out diffs for while it writes). The go-ahead is never
/// given here, so a revert that asked for it would wait until the timeout.
#[tokio::test]
async fn missing_base_sub_tree_fails_before_anything_is_touched() {
    for count in [1, 200] {
        missing_base_sub_tree_with(count).await;
    }
}

async fn missing_base_sub_tree_with(count: usize) {
    let h = GitHarness::new();
    h.write("top.txt", b"top\n");
    h.write("dir/x.txt", b"x1\n");
    let start = h.id().await;
    h.write("dir/x.txt", b"x2 unique 5c1d\n");
    let mut files = vec!["dir/x.txt".to_owned()];
    for i in 0..count {
        let name = format!("dir/y{i}.txt");
        h.write(&name, b"y\n");
        files.push(name);
    }
    let base = h.id().await;
    let listing = h.list();
    let store = h.store_dir();
    let sub = git(
        h.base(),
        &[
            &format!("--git-dir={}", store.display()),
            "rev-parse",
            &format!("{base}:dir"),
        ],
    );
    let sub = SnapshotId::parse(sub.trim()).expect("a tree id");
    h.remove_snapshot_object(&sub);
    let names: Vec<&str> = files.iter().map(String::as_str).collect();
    let patches = one_patch(&start, &names);
    let (_go, ready) = futures::channel::oneshot::channel();
    let reverting = h.port().revert_when(h.root(), &patches, &base, ready);
    let reverted = tokio::time::timeout(Duration::from_secs(30), reverting)
        .await
        .unwrap_or_else(|_| panic!("{count} files: the revert asked for the go-ahead"));
    assert_missing("revert", reverted);
    assert_eq!(h.list(), listing, "{count} files");
}

/// A missing sub-tree of the patch's snapshot, on the patch's paths: the plan and the revert fail with
/// `MissingObject` and touch no file, for a few files as for many (a revert of many reads the patch
/// snapshots' trees ahead of its plan on another thread, which stops at the missing one: the plan still
/// finds it missing, even after the trees before it were read ahead into the process's cache).
#[tokio::test]
async fn missing_patch_sub_tree_fails_before_anything_is_touched() {
    for count in [1, 150] {
        let h = GitHarness::new();
        let mut files = vec!["top.txt".to_owned()];
        for i in 0..count {
            files.push(format!("before/b{i}.txt"));
            files.push(format!("dir/y{i}.txt"));
        }
        for file in &files {
            h.write(file, format!("{file} at the start\n").as_bytes());
        }
        let start = h.id().await;
        for file in &files {
            h.write(file, format!("{file} after the step\n").as_bytes());
        }
        let base = h.id().await;
        let listing = h.list();
        let sub = git(
            h.base(),
            &[
                &format!("--git-dir={}", h.store_dir().display()),
                "rev-parse",
                &format!("{start}:dir"),
            ],
        );
        h.remove_snapshot_object(&SnapshotId::parse(sub.trim()).expect("a tree id"));
        let names: Vec<&str> = files.iter().map(String::as_str).collect();
        let patches = one_patch(&start, &names);
        assert_missing("plan", h.port().plan(h.root(), &patches).await);
        assert_missing("revert", h.port().revert(h.root(), &patches, &base).await);
        assert_eq!(h.list(), listing, "{count} files");
    }
}

/// A worktree replaced by a symlink while a revert waits for its go-ahead (its intent being stored), as
/// `mv proj old && ln -s elsewhere proj` does: nothing is written where the symlink leads. The store holds
/// the root directory it checked, and the revert goes on there (black-box: each step opened the root by
/// its path again, and the revert wrote its files into the symlink's target). Should the swap come
/// before the store is opened, the revert is refused: nothing is written there either.
#[tokio::test]
async fn a_worktree_replaced_by_a_symlink_mid_revert_is_not_written_through() {
    let h = GitHarness::new();
    h.write("a.txt", b"v1\n");
    h.write("c.txt", b"deleted by the step\n");
    let start = h.id().await;
    h.write("a.txt", b"v2\n");
    h.write("b.txt", b"made by the step\n");
    h.remove("c.txt");
    let base = h.id().await;
    let patches = one_patch(&start, &["a.txt", "b.txt", "c.txt"]);
    let (go, ready) = futures::channel::oneshot::channel();
    let reverting = h.port().revert_when(h.root(), &patches, &base, ready);
    let old = h.base().join("old");
    let elsewhere = h.base().join("elsewhere");
    let swapping = async {
        // The revert plans, then waits for `go`.
        tokio::time::sleep(Duration::from_millis(500)).await;
        fs::create_dir(&elsewhere).expect("mkdir");
        fs::rename(h.root(), &old).expect("the worktree moves");
        std::os::unix::fs::symlink(&elsewhere, h.root()).expect("a symlink in its place");
        go.send(true).expect("go");
    };
    let (reverted, ()) = tokio::join!(reverting, swapping);
    assert!(
        fs::read_dir(&elsewhere).expect("list").next().is_none(),
        "nothing is written where the symlink leads"
    );
    // Gone on, in the directory it checked: what it looks at by path (through the symlink now) it may
    // find changed, and keep, as reported.
    if let Ok(outcome) = &reverted {
        assert_eq!(fs::read(old.join("a.txt")).expect("read"), b"v1\n");
        assert_eq!(
            fs::read(old.join("c.txt")).expect("read"),
            b"deleted by the step\n"
        );
        let kept = kept_paths(&outcome.kept);
        assert!(
            !old.join("b.txt").exists() || kept.contains(&"b.txt"),
            "{outcome:?}"
        );
    }
}

/// A restore leaves a file its snapshot did not track (ignored by that snapshot's `.gitignore`), as a
/// revert's plan does: the snapshot cannot say the file was absent. So restoring the capture taken before
/// a restore gives back exactly what that restore left: here `k`, which the restore had kept because it
/// was ignored then, is not deleted when the capture's `.gitignore` comes back. Found by a black-box run.
#[tokio::test]
async fn restoring_a_capture_keeps_a_file_the_capture_ignored() {
    let h = GitHarness::new();
    h.write("k", b"keep\n");
    let s = h.id().await;
    h.write(".gitignore", b"k\n");
    h.write("k", b"mine\n");
    let capture = h.id().await;
    let restored = h.port().restore(h.root(), &s, None).await.expect("restore");
    assert_eq!(restored.deleted, rels(&[".gitignore"]), "{restored:?}");
    assert_eq!(kept_paths(&restored.kept), ["k"], "{restored:?}");
    assert_eq!(h.read("k"), text("mine\n"));

    let back = h
        .port()
        .restore(h.root(), &capture, None)
        .await
        .expect("restore the capture");
    assert_eq!(back.written, rels(&[".gitignore"]), "{back:?}");
    assert!(back.deleted.is_empty(), "{back:?}");
    assert_eq!(kept_paths(&back.kept), ["k"], "{back:?}");
    assert_eq!(h.read("k"), text("mine\n"), "nothing is lost");
    assert_eq!(h.id().await, capture);

    // A file the snapshot tracked nowhere and did not ignore is deleted as before.
    h.write("new.txt", b"new\n");
    let again = h
        .port()
        .restore(h.root(), &capture, None)
        .await
        .expect("restore");
    assert_eq!(again.deleted, rels(&["new.txt"]), "{again:?}");
}

/// A file's (blob's) id given as a snapshot is bad input, said as such, and nothing is touched: it was
/// reported as a corrupt snapshot store (found by a black-box run).
#[tokio::test]
async fn a_blob_id_given_as_a_snapshot_is_refused_as_not_a_snapshot() {
    let h = GitHarness::new();
    let (start, _, _) = step_with_patch(&h).await;
    let listing = h.list();
    let blob = SnapshotId::parse(&blob_id(b"a2\n")).expect("a blob id");
    assert!(h.stored(blob.as_str()), "the store holds the blob");
    let refused = |what: &str, result: rewind_core::Result<()>| match result {
        Err(Error::InvalidInput(message)) => {
            assert!(message.contains("is not a snapshot"), "{what}: {message}")
        }
        other => panic!("{what}: expected InvalidInput, got {other:?}"),
    };
    let port = h.port();
    refused(
        "restore",
        port.restore(h.root(), &blob, None).await.map(drop),
    );
    refused("diff", port.diff(h.root(), &blob, &start).await.map(drop));
    refused(
        "diff to",
        port.diff(h.root(), &start, &blob).await.map(drop),
    );
    refused(
        "changed_files",
        port.changed_files(h.root(), &blob).await.map(drop),
    );
    refused(
        "unified_diff",
        port.unified_diff(h.root(), &blob).await.map(drop),
    );
    assert_eq!(h.list(), listing);
}

/// A missing patch tree: every operation that needs it fails with `MissingObject`, and nothing is touched.
#[tokio::test]
async fn missing_patch_tree_fails_every_operation() {
    let h = GitHarness::new();
    let (start, patches, base) = step_with_patch(&h).await;
    let listing = h.list();
    h.remove_snapshot_object(&start);
    assert_missing("revert", h.port().revert(h.root(), &patches, &base).await);
    assert_missing("plan", h.port().plan(h.root(), &patches).await);
    assert_missing("restore", h.port().restore(h.root(), &start, None).await);
    assert_missing(
        "changed_files",
        h.port().changed_files(h.root(), &start).await,
    );
    assert_missing("diff", h.port().diff(h.root(), &start, &base).await);
    assert_missing(
        "unified_diff",
        h.port().unified_diff(h.root(), &start).await,
    );
    assert_eq!(h.list(), listing);
}

/// Forty files in four directories (`dirN/file-NN.txt`), each with its own content.
fn write_forty_files(h: &GitHarness) {
    for i in 0..40 {
        h.write(
            &format!("dir{}/file-{i:02}.txt", i % 4),
            format!("content {i:02}\n").as_bytes(),
        );
    }
}

/// A stat cache overwritten with garbage, truncated (a torn write) or with bytes flipped in the middle
/// does not change what `track` returns: git's tree id.
#[tokio::test]
async fn corrupted_stat_cache_still_gives_git_tree_ids() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    write_forty_files(&h);
    h.id().await;
    let cache = h.store_dir().join("rewind").join("stat-cache");
    assert!(cache.is_file(), "no stat cache at {}", cache.display());

    type Corruption = fn(Vec<u8>) -> Vec<u8>;
    let corruptions: [(&str, Corruption); 4] = [
        ("garbage", |_| {
            b"garbage\0\xff\xfe not a stat cache ".repeat(64)
        }),
        ("empty", |_| Vec::new()),
        ("truncated", |mut bytes| {
            bytes.truncate(bytes.len() / 2);
            bytes
        }),
        ("flipped", |mut bytes| {
            let len = bytes.len();
            for b in &mut bytes[len / 3..len / 3 + (len / 3).min(64)] {
                *b ^= 0x5a;
            }
            bytes
        }),
    ];
    for (round, (name, corrupt)) in corruptions.into_iter().enumerate() {
        // Same-size edits, so only content hashing can tell.
        h.write(
            &format!("dir{}/file-{:02}.txt", round % 4, round),
            format!("CHANGED {round:02}\n").as_bytes(),
        );
        h.write(&format!("added-{round}.txt"), b"added\n");
        let bytes = fs::read(&cache).expect("read the stat cache");
        fs::write(&cache, corrupt(bytes)).expect("corrupt the stat cache");
        let ours = h.track().await;
        assert_eq!(ours.id.as_str(), oracle.write_tree(h.root()), "{name}");
        assert_eq!(h.id().await, ours.id, "{name}: and again");
    }
}

/// A stat cache whose checksum holds but whose listings do not parse (a file another version could have
/// written) is not trusted at all, as one whose entries do not parse: the next track hashes every file
/// again and gives git's tree id. The listings are parsed while another thread already parses the
/// entries (and may look at their files): a guard that the entries, and what was found by them, are
/// dropped with the listings.
#[tokio::test]
async fn a_stat_cache_whose_listings_do_not_parse_is_not_trusted() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    write_forty_files(&h);
    age_past_racy(h.root());
    h.id().await;
    assert_eq!(
        h.track().await.hashed,
        0,
        "the cache answers for every file"
    );
    let cache = h.store_dir().join("rewind").join("stat-cache");
    let mut bytes = fs::read(&cache).expect("read the stat cache");
    let body = bytes.len() - 4;
    // The listings come last, before the checksum, and each ends with its last name's kind byte (every
    // directory here holds something): 3 is no kind.
    bytes[body - 1] = 3 | (bytes[body - 1] & 0x80);
    // Another generation (it follows the 8-byte magic), as another process's save would write: the
    // copy this process keeps in memory is not used.
    bytes[8..16].copy_from_slice(&0x5eed_u64.to_le_bytes());
    let sum = crc32fast::hash(&bytes[..body]);
    bytes[body..].copy_from_slice(&sum.to_le_bytes());
    fs::write(&cache, &bytes).expect("write the stat cache");
    let again = h.track().await;
    assert_eq!(again.id.as_str(), oracle.write_tree(h.root()));
    assert_eq!(again.hashed, 40, "every file hashed again");
}

/// A stat cache that cannot be written (a full disk; here a directory stands at its path, so the rename
/// onto it fails) does not fail the track: the cache only saves work, and the snapshot's objects are
/// written. Black-box: on a full data disk, this failed the rollback of a revert whose files needed
/// nothing new stored.
#[tokio::test]
async fn a_stat_cache_that_cannot_be_written_does_not_fail_the_track() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    h.write("a.txt", b"one 7c1e\n");
    h.id().await;
    let cache = h.store_dir().join("rewind").join("stat-cache");
    fs::remove_file(&cache).expect("the store has a stat cache");
    fs::create_dir_all(cache.join("in-the-way")).expect("a directory in its place");
    for round in 0..2 {
        h.write("a.txt", format!("changed {round} 7c1e\n").as_bytes());
        h.write(&format!("new-{round}.txt"), b"new 7c1e\n");
        let ours = h.track().await;
        assert_eq!(
            ours.id.as_str(),
            oracle.write_tree(h.root()),
            "round {round}"
        );
        assert!(cache.is_dir(), "nothing was written in its place");
    }
}

/// Nor does it fail a revert or a restore, which teach the cache what they wrote (review: on a full disk a
/// revert failed there after writing its files, and so did its rollback, after putting them back).
#[tokio::test]
async fn a_stat_cache_that_cannot_be_written_does_not_fail_a_revert_or_a_restore() {
    let h = GitHarness::new();
    h.write("a.txt", b"one 3e5d\n");
    let first = h.id().await;
    h.write("a.txt", b"two 3e5d\n");
    h.write("b.txt", b"new 3e5d\n");
    let second = h.id().await;
    // The cache can be read but not replaced: immutable. A directory in its place, as above, would not be
    // read either, and then nothing is taught.
    let cache = h.store_dir().join("rewind").join("stat-cache");
    let _immutable = Flagged::set(&cache, 'i');
    let patches = one_patch(&first, &["a.txt", "b.txt"]);
    let reverted = h
        .port()
        .revert(h.root(), &patches, &second)
        .await
        .expect("revert");
    assert_eq!(reverted.written, rels(&["a.txt"]));
    assert_eq!(reverted.deleted, rels(&["b.txt"]));
    assert_eq!(h.read("a.txt"), text("one 3e5d\n"));
    let restored = h
        .port()
        .restore(h.root(), &second, None)
        .await
        .expect("restore");
    let unchanged = fs::read(&cache);
    assert_eq!(restored.written, rels(&["a.txt", "b.txt"]));
    assert_eq!(h.read("b.txt"), text("new 3e5d\n"));
    assert!(unchanged.is_ok(), "the cache was still there to read");
}

/// A patch path that leaves the worktree cannot be built, in code or from JSON.
#[test]
fn paths_leaving_the_worktree_cannot_be_built() {
    for bad in [
        "../x",
        "../outside",
        "a/../../x",
        "/etc/passwd",
        "a/./b",
        "a//b",
        "",
    ] {
        assert!(
            matches!(RelPath::new(bad), Err(Error::InvalidInput(_))),
            "{bad:?} was accepted"
        );
    }
    // A backslash separates nothing on the filesystems rewind runs on: `..\x` is one name inside the
    // worktree (SPEC 12.10), not a way out of it.
    for name in ["a\\b", "..\\x"] {
        let path = RelPath::new(name).expect("a name with a backslash");
        assert_eq!(path.components().count(), 1, "{name:?}");
    }
    let json = r#"{"hash":"0123456789abcdef0123456789abcdef01234567","files":["../outside"]}"#;
    assert!(serde_json::from_str::<SnapshotPatch>(json).is_err());
    assert!(RelPath::from_absolute("/elsewhere/x", "/work/wt").is_err());
}

/// Snapshots do not depend on the user's repository: after `git gc --prune=now`, and even after its
/// `.git` is deleted, a snapshot taken of committed files still restores.
#[tokio::test]
async fn restore_survives_the_users_gc_and_deleted_git_dir() {
    let h = GitHarness::git_repo();
    let big: String = (0..2000).map(|i| format!("committed line {i}\n")).collect();
    h.write("committed.txt", big.as_bytes());
    h.write("src/lib.rs", b"pub fn f() {}\n");
    h.write("run.sh", b"#!/bin/sh\n");
    h.set_executable("run.sh", true);
    commit_all(h.root(), "user's work");
    let s = h.id().await;
    let listing = h.list();

    // Rewrite the user's history so the committed blobs become unreachable, then prune them.
    git(h.root(), &["checkout", "-q", "--orphan", "other"]);
    git(h.root(), &["rm", "-rq", "--cached", "."]);
    git(h.root(), &["commit", "-q", "--allow-empty", "-m", "orphan"]);
    git(h.root(), &["branch", "-D", "main"]);
    git(h.root(), &["reflog", "expire", "--expire=now", "--all"]);
    git(h.root(), &["gc", "-q", "--prune=now"]);
    let lib_blob = blob_id(b"pub fn f() {}\n");
    assert!(
        !git_succeeds(h.root(), &["cat-file", "-e", &lib_blob]),
        "the user's gc pruned the committed blob"
    );
    h.write("committed.txt", b"overwritten\n");
    h.remove("src/lib.rs");
    h.port()
        .restore(h.root(), &s, None)
        .await
        .expect("restore after the user's gc");
    assert_eq!(h.list(), listing);

    fs::remove_dir_all(h.root().join(".git")).expect("delete the user's .git");
    h.write("committed.txt", b"overwritten again\n");
    h.set_executable("run.sh", false);
    h.port()
        .restore(h.root(), &s, None)
        .await
        .expect("restore after .git is gone");
    assert_eq!(h.list(), listing);
    assert_eq!(h.id().await, s);
}

// ---------------------------------------------------------------------------------------------------------
// (f) Nested repositories.

/// A nested repository (with a commit, or without) is snapshotted as plain files under its own ignore
/// rules, without its `.git`, and a restore leaves that `.git` alone.
#[tokio::test]
async fn nested_repository_is_snapshotted_as_plain_files() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    h.write("top.txt", b"top\n");
    init_repo(&h.path("nested"));
    h.write("nested/inner.txt", b"inner\n");
    h.write("nested/.gitignore", b"*.o\n");
    h.write("nested/build.o", b"ignored by the nested rules\n");
    commit_all(&h.path("nested"), "nested");
    fs::create_dir_all(h.path("fresh")).expect("mkdir");
    git(&h.path("fresh"), &["init", "-q"]);
    h.write("fresh/file.txt", b"in a repository without commits\n");

    let s = h.track().await;
    let entries = oracle.ls_tree(Some(&h.store_dir().join("objects")), s.id.as_str());
    let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "fresh/file.txt",
            "nested/.gitignore",
            "nested/inner.txt",
            "top.txt"
        ]
    );
    assert!(entries.iter().all(|e| e.mode == "100644"), "{entries:?}");

    let nested_git = list_tree(&h.path("nested/.git"));
    assert!(!nested_git.is_empty());
    h.remove("nested/inner.txt");
    h.write("fresh/file.txt", b"changed\n");
    h.port()
        .restore(h.root(), &s.id, None)
        .await
        .expect("restore");
    assert_eq!(h.read("nested/inner.txt"), text("inner\n"));
    assert_eq!(
        h.read("fresh/file.txt"),
        text("in a repository without commits\n")
    );
    assert_eq!(list_tree(&h.path("nested/.git")), nested_git);

    // Without the nested `.git` directories git sees the same plain files.
    fs::remove_dir_all(h.path("nested/.git")).expect("rm nested/.git");
    fs::remove_dir_all(h.path("fresh/.git")).expect("rm fresh/.git");
    assert_eq!(oracle.write_tree(h.root()), s.id.as_str());
}

/// Inside a nested repository only its own rules hold (SPEC 2.2), as git reads them there: the user's
/// global excludes, the nested repository's `info/exclude` (found through a `.git` file too, as a
/// submodule has) and its `.gitignore` files; none of the enclosing tree's. Black-box: a superproject's
/// `*.p` hid a submodule's committed `config.p`, and a turn's edits of it could not be undone. What git
/// itself lists inside each nested repository is the oracle. A turn's changes there are listed and undone,
/// a file it made that the enclosing rules would ignore included; and the untracked cache, reused by the
/// next track, keeps to the same rules.
#[tokio::test]
async fn a_nested_repository_follows_its_own_ignore_rules_only() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    h.write(".gitignore", b"*.p\nnested/build/\n");
    h.write("top.p", b"ignored by the enclosing rules\n");
    init_repo(&h.path("nested"));
    // With git's template comments, which a snapshot's record leaves out.
    fs::write(
        h.path("nested/.git/info/exclude"),
        "# git ls-files --others --exclude-from=.git/info/exclude\n# Lines that start with '#' are comments.\n\n*.ex\n",
    )
    .expect("nested exclude");
    h.write("nested/settings.p", b"tracked in the nested repository\n");
    h.write("nested/build/b.txt", b"committed there\n");
    h.write("nested/z.ex", b"excluded by the nested repository\n");
    h.write("nested/deeper/.gitignore", b"*.tmp\n");
    h.write("nested/deeper/x.tmp", b"ignored by the nested .gitignore\n");
    // As `git submodule add` leaves it: a `.git` file naming a git directory elsewhere.
    let modules = h.base().join("modules").join("sub");
    fs::create_dir_all(h.path("sub")).expect("mkdir sub");
    fs::create_dir_all(h.base().join("modules")).expect("mkdir modules");
    git(
        &h.path("sub"),
        &[
            "init",
            "-q",
            "--separate-git-dir",
            &modules.display().to_string(),
        ],
    );
    fs::write(modules.join("info").join("exclude"), "*.sx\n").expect("sub exclude");
    h.write("sub/config.p", b"the submodule's config\n");
    h.write("sub/y.sx", b"excluded by the submodule\n");

    let s = h.track().await;
    let listed = |id: &str| -> Vec<String> {
        oracle
            .ls_tree(Some(&h.store_dir().join("objects")), id)
            .into_iter()
            .map(|e| e.path)
            .collect()
    };
    let paths = listed(s.id.as_str());
    assert_eq!(
        paths,
        [
            ".gitignore",
            "nested/build/b.txt",
            "nested/deeper/.gitignore",
            "nested/settings.p",
            "sub/config.p"
        ]
    );
    for dir in ["nested", "sub"] {
        let mut by_git: Vec<String> = git(
            &h.path(dir),
            &["ls-files", "--cached", "--others", "--exclude-standard"],
        )
        .lines()
        .map(|line| format!("{dir}/{line}"))
        .collect();
        by_git.sort();
        let ours: Vec<&String> = paths
            .iter()
            .filter(|p| p.starts_with(&format!("{dir}/")))
            .collect();
        assert_eq!(
            ours,
            by_git.iter().collect::<Vec<_>>(),
            "as git lists {dir}"
        );
    }

    // A turn edits both repositories' files and makes one the enclosing rules would ignore.
    h.write("nested/settings.p", b"the agent's\n");
    h.write("sub/config.p", b"the agent's\n");
    h.write("nested/new.p", b"made by the turn\n");
    let after = h.id().await;
    let changed = h
        .port()
        .changed_files(h.root(), &s.id)
        .await
        .expect("changed files");
    assert_eq!(
        changed,
        rels(&["nested/new.p", "nested/settings.p", "sub/config.p"])
    );
    let outcome = h
        .port()
        .revert(
            h.root(),
            &one_patch(
                &s.id,
                &["nested/new.p", "nested/settings.p", "sub/config.p"],
            ),
            &after,
        )
        .await
        .expect("revert");
    assert!(outcome.kept.is_empty(), "{:?}", outcome.kept);
    assert_eq!(
        h.read("nested/settings.p"),
        text("tracked in the nested repository\n")
    );
    assert_eq!(h.read("sub/config.p"), text("the submodule's config\n"));
    assert_eq!(h.read("nested/new.p"), None);
    assert_eq!(
        h.id().await,
        s.id,
        "the untracked cache keeps to the same rules"
    );
    assert_eq!(
        h.read("nested/z.ex"),
        text("excluded by the nested repository\n")
    );
}

/// The paths a revert kept, with why.
fn kept_with_reasons(outcome: &rewind_core::model::RevertOutcome) -> Vec<(&str, &str)> {
    outcome
        .kept
        .iter()
        .map(|k| (k.path.as_str(), k.reason.as_str()))
        .collect()
}

/// Why a revert keeps a file that was untracked when its step began.
const IGNORED_THEN: &str = "it was not tracked content when the step began (ignored or skipped), so it may have existed then";

/// A step that makes a directory a repository of its own (`git init` there) moves its files from the
/// enclosing rules to that repository's: a file the enclosing `.gitignore` ignored when the step began is
/// tracked content at its end, and listed as added. Its revert keeps it: the snapshot's record says which
/// nested repositories there were then (none), so it was ignored then and may have existed. Before, the
/// rules were judged by the repositories on disk now, and the undo deleted the file (git-layout audit).
#[tokio::test]
async fn a_step_that_makes_a_directory_a_repository_keeps_what_was_ignored_when_it_began() {
    let h = GitHarness::new();
    h.write(".gitignore", b"*.secret\n");
    h.write("d/code.c", b"int main;\n");
    h.write("d/keys.secret", b"the user's keys\n");
    let s = h.track().await;
    init_repo(&h.path("d"));
    h.write("d/code.c", b"int main; // the agent's\n");
    let after = h.id().await;
    let changed = h
        .port()
        .changed_files(h.root(), &s.id)
        .await
        .expect("changed files");
    assert_eq!(changed, rels(&["d/code.c", "d/keys.secret"]));
    let outcome = h
        .port()
        .revert(
            h.root(),
            &one_patch(&s.id, &["d/code.c", "d/keys.secret"]),
            &after,
        )
        .await
        .expect("revert");
    assert_eq!(
        kept_with_reasons(&outcome),
        [("d/keys.secret", IGNORED_THEN)]
    );
    assert_eq!(h.read("d/keys.secret"), text("the user's keys\n"));
    assert_eq!(h.read("d/code.c"), text("int main;\n"));
}

/// With `core.ignoreCase` set, `*.LOG` ignores `debug.log`; a step that drops the rule makes it tracked
/// content, listed as added. Its revert keeps it: the snapshot's record says the rules then matched
/// regardless of case (kept also when no rule came from outside the tree, as here, without an
/// `info/exclude`), so it was ignored then and may have existed.
#[tokio::test]
async fn a_file_ignored_by_a_pattern_of_another_case_when_the_step_began_survives_its_revert() {
    let h = GitHarness::new();
    init_repo(h.root());
    git(h.root(), &["config", "core.ignoreCase", "true"]);
    fs::remove_file(h.path(".git/info/exclude")).expect("no info/exclude");
    h.write(".gitignore", b"*.LOG\n");
    h.write("debug.log", b"the user's log\n");
    h.write("code.c", b"int main;\n");
    let s = h.track().await;
    h.write(".gitignore", b"# none\n");
    h.write("code.c", b"int main; // the agent's\n");
    let after = h.id().await;
    let changed = h
        .port()
        .changed_files(h.root(), &s.id)
        .await
        .expect("changed files");
    assert_eq!(changed, rels(&[".gitignore", "code.c", "debug.log"]));
    let outcome = h
        .port()
        .revert(
            h.root(),
            &one_patch(&s.id, &[".gitignore", "code.c", "debug.log"]),
            &after,
        )
        .await
        .expect("revert");
    assert_eq!(kept_with_reasons(&outcome), [("debug.log", IGNORED_THEN)]);
    assert_eq!(h.read("debug.log"), text("the user's log\n"));
    assert_eq!(h.read("code.c"), text("int main;\n"));
    assert_eq!(h.read(".gitignore"), text("*.LOG\n"));
}

/// The other way round, deeper: a nested repository whose `info/exclude` ignored a file is unmade by the
/// step (`rm -rf lib/d/.git`), so the file is tracked content at its end. The record holds that
/// repository and its exclude as the step's start found them, and the revert keeps the file (git-layout
/// audit: deleted).
#[tokio::test]
async fn a_step_that_unmakes_a_nested_repository_keeps_what_its_exclude_ignored() {
    let h = GitHarness::new();
    init_repo(&h.path("lib/d"));
    fs::write(h.path("lib/d/.git/info/exclude"), "*.secret\n").expect("nested exclude");
    h.write("lib/d/code.c", b"int main;\n");
    h.write("lib/d/keys.secret", b"the user's keys\n");
    let s = h.track().await;
    fs::remove_dir_all(h.path("lib/d/.git")).expect("unmake the repository");
    let after = h.id().await;
    let changed = h
        .port()
        .changed_files(h.root(), &s.id)
        .await
        .expect("changed files");
    assert_eq!(changed, rels(&["lib/d/keys.secret"]));
    let outcome = h
        .port()
        .revert(h.root(), &one_patch(&s.id, &["lib/d/keys.secret"]), &after)
        .await
        .expect("revert");
    assert_eq!(
        kept_with_reasons(&outcome),
        [("lib/d/keys.secret", IGNORED_THEN)]
    );
    assert_eq!(h.read("lib/d/keys.secret"), text("the user's keys\n"));
}

/// A record written since nested repositories are recorded holds them for every track of its id, so the
/// disk now is not asked too: a file a step made inside a nested repository is deleted by that step's
/// revert although a later step unmade the repository and dropped the enclosing rule that would have
/// ignored it there (review: judged by the disk now as well, it was kept).
#[tokio::test]
async fn a_revert_judges_by_the_recorded_nested_repositories_once_one_is_unmade() {
    let h = GitHarness::new();
    h.write(".gitignore", b"*.p\n");
    init_repo(&h.path("d"));
    h.write("d/code.c", b"int main;\n");
    let s = h.track().await;
    h.write("d/new.p", b"made by the step\n");
    fs::remove_dir_all(h.path("d/.git")).expect("unmake the repository");
    h.write(".gitignore", b"");
    let after = h.id().await;
    let outcome = h
        .port()
        .revert(h.root(), &one_patch(&s.id, &["d/new.p"]), &after)
        .await
        .expect("revert");
    assert!(outcome.kept.is_empty(), "{:?}", outcome.kept);
    assert_eq!(h.read("d/new.p"), None);
}

// ---------------------------------------------------------------------------------------------------------
// (g) The stat cache is not fooled.

/// A file rewritten with other content of the same size right after a track (same second, no sleep, no
/// backdating) is seen by the next track.
#[tokio::test]
async fn same_size_rewrite_in_the_same_second_is_seen() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    fs::write(h.path("other.txt"), "other\n").expect("write");
    let path = h.path("racy.txt");
    for round in 0..20 {
        fs::write(&path, format!("round {round:03} A\n")).expect("write");
        let first = h.id().await;
        assert_eq!(
            first.as_str(),
            oracle.write_tree(h.root()),
            "round {round} A"
        );
        fs::write(&path, format!("round {round:03} B\n")).expect("write");
        let second = h.id().await;
        assert_ne!(second, first, "round {round}: the rewrite was missed");
        assert_eq!(
            second.as_str(),
            oracle.write_tree(h.root()),
            "round {round} B"
        );
    }
}

/// The store works on the canonical path a session records: a worktree replaced by a symlink after its
/// snapshots were taken (here to a directory outside it) is refused by every operation, so nothing is read
/// or written where the symlink leads; and so is a worktree named through a symlink.
#[tokio::test]
async fn a_worktree_replaced_by_a_symlink_is_refused() {
    let h = GitHarness::new();
    h.write("f.txt", b"v1\n");
    let start = h.id().await;
    h.write("f.txt", b"v2\n");
    let (outside, outside_before) = sentinel(&h);
    fs::rename(h.root(), h.base().join("moved")).expect("move the worktree away");
    std::os::unix::fs::symlink(&outside, h.root()).expect("symlink in its place");

    let refused = |what: &str, result: Result<(), Error>| match result {
        Err(Error::InvalidInput(message)) => {
            assert!(message.contains("is a symlink"), "{what}: {message}")
        }
        other => panic!("{what}: {other:?}"),
    };
    refused("track", h.port().track(h.root()).await.map(|_| ()));
    refused(
        "restore",
        h.port().restore(h.root(), &start, None).await.map(|_| ()),
    );
    let patches = one_patch(&start, &["file.txt", "f.txt"]);
    refused(
        "revert",
        h.port()
            .revert(h.root(), &patches, &start)
            .await
            .map(|_| ()),
    );
    refused(
        "diff",
        h.port().unified_diff(h.root(), &start).await.map(|_| ()),
    );
    assert_eq!(
        list_tree(&outside),
        outside_before,
        "nothing outside changed"
    );
    assert_eq!(
        fs::read(h.base().join("moved/f.txt")).expect("read"),
        b"v2\n"
    );
}

/// A worktree named by a relative path, or through `..`, is refused with an error that says so (not that it
/// is a symlink, as a path that differs from its canonical form otherwise is), and nothing is written.
#[tokio::test]
async fn a_worktree_named_relatively_or_through_dot_dot_is_refused_as_such() {
    let h = GitHarness::new();
    h.write("f.txt", b"v1\n");
    let data_before = list_tree(h.data_dir());
    let name = h.root().file_name().expect("a name").to_owned();
    let through_dot_dot = h.root().join("..").join(&name);
    for (worktree, says) in [
        (PathBuf::from(&name), "relative path"),
        (through_dot_dot, "names `..`"),
    ] {
        match h.port().track(&worktree).await {
            Err(Error::InvalidInput(message)) => assert!(
                message.contains(says) && !message.contains("symlink"),
                "{}: {message}",
                worktree.display()
            ),
            other => panic!("{}: {other:?}", worktree.display()),
        }
    }
    assert_eq!(list_tree(h.data_dir()), data_before, "nothing written");
}

// ---------------------------------------------------------------------------------------------------------
// (h) Refused worktrees, (i) the file-count cap, and names that are not UTF-8.

/// `/` and the configured home directory are refused, and nothing is written, neither in the data dir nor
/// in the home directory.
#[tokio::test]
async fn filesystem_root_and_home_are_refused() {
    let h = GitHarness::with_config(|config, base| config.home_dir = Some(base.join("home")));
    let home = h.base().join("home");
    fs::create_dir_all(home.join("project")).expect("mkdir home");
    fs::write(home.join("notes.txt"), "notes\n").expect("write");
    fs::write(home.join("project/x.txt"), "x\n").expect("write");
    h.write("a.txt", b"a\n");
    let some_id = h.id().await;
    let data_before = list_tree(h.data_dir());
    let home_before = list_tree(&home);

    let tracked = h.port().track(Path::new("/")).await;
    assert!(
        matches!(tracked, Err(Error::InvalidInput(_))),
        "track / must be refused with InvalidInput: {tracked:?}"
    );
    // Only the (temporary) home is also given to restore and revert: were `/` not refused, they could
    // delete real files.
    for refused in [home.clone(), home.join("project").join("..")] {
        let tracked = h.port().track(&refused).await;
        assert!(
            matches!(tracked, Err(Error::InvalidInput(_))),
            "track {} must be refused with InvalidInput: {tracked:?}",
            refused.display()
        );
        let restored = h.port().restore(&refused, &some_id, None).await;
        assert!(
            restored.is_err(),
            "restore {}: {restored:?}",
            refused.display()
        );
        let reverted = h
            .port()
            .revert(&refused, &one_patch(&some_id, &["notes.txt"]), &some_id)
            .await;
        assert!(
            reverted.is_err(),
            "revert {}: {reverted:?}",
            refused.display()
        );
    }
    assert_eq!(
        list_tree(h.data_dir()),
        data_before,
        "nothing written to the data dir"
    );
    assert_eq!(
        list_tree(&home),
        home_before,
        "nothing written in the home directory"
    );
}

/// rewind's data directory, and a directory inside it, are refused as worktrees, and nothing is written:
/// snapshotted, the database and the store would be rewritten by the operations that use them.
#[tokio::test]
async fn the_data_directory_and_what_is_inside_it_are_refused_as_worktrees() {
    let h = GitHarness::new();
    h.write("a.txt", b"a\n");
    let some_id = h.id().await;
    let inside = h.data_dir().join("project");
    fs::create_dir_all(&inside).expect("mkdir");
    fs::write(inside.join("x.txt"), "x\n").expect("write");
    let data_before = list_tree(h.data_dir());
    for refused in [
        h.data_dir().to_path_buf(),
        inside.clone(),
        inside.join(".."),
    ] {
        let tracked = h.port().track(&refused).await;
        assert!(
            matches!(&tracked, Err(Error::InvalidInput(m)) if m.contains("data directory")),
            "track {} must be refused with InvalidInput: {tracked:?}",
            refused.display()
        );
        let restored = h.port().restore(&refused, &some_id, None).await;
        assert!(
            restored.is_err(),
            "restore {}: {restored:?}",
            refused.display()
        );
    }
    assert_eq!(list_tree(h.data_dir()), data_before, "nothing written");
}

/// A repository's own directory is refused as a worktree, and nothing in it is written: its `.git`, a
/// directory inside that, and a bare repository. Snapshotted, a revert would rewrite the user's refs and
/// index and delete commit objects (black-box, over HTTP). The project directory itself is fine.
#[tokio::test]
async fn a_repository_s_own_directory_is_refused_as_a_worktree() {
    let h = GitHarness::new();
    init_repo(h.root());
    h.write("a.txt", b"a\n");
    commit_all(h.root(), "a");
    let some_id = h.id().await;
    let bare = h.root().parent().expect("a parent").join("bare.git");
    git(
        h.root(),
        &["clone", "-q", "--bare", ".", bare.to_str().expect("UTF-8")],
    );
    let dot_git = h.root().join(".git");
    let git_before = list_tree(&dot_git);
    let bare_before = list_tree(&bare);
    for refused in [
        dot_git.clone(),
        dot_git.join("refs"),
        bare.clone(),
        bare.join("objects"),
    ] {
        let tracked = h.port().track(&refused).await;
        assert!(
            matches!(&tracked, Err(Error::InvalidInput(m)) if m.contains("git repository's own directory")),
            "track {} must be refused with InvalidInput: {tracked:?}",
            refused.display()
        );
        let restored = h.port().restore(&refused, &some_id, None).await;
        assert!(
            restored.is_err(),
            "restore {}: {restored:?}",
            refused.display()
        );
    }
    assert_eq!(list_tree(&dot_git), git_before, "nothing written in .git");
    assert_eq!(
        list_tree(&bare),
        bare_before,
        "nothing written in the bare repository"
    );
    assert_eq!(
        h.id().await,
        some_id,
        "the project directory itself is a worktree"
    );

    // Not refused: a project that merely has `HEAD`, `objects/` and `refs/` (HEAD is no ref nor id), and a
    // linked worktree git made inside the `.git` (its own `.git` file makes it a worktree's root).
    let lookalike = h.root().parent().expect("a parent").join("lookalike");
    fs::create_dir_all(lookalike.join("objects")).expect("mkdir");
    fs::create_dir_all(lookalike.join("refs")).expect("mkdir");
    fs::write(lookalike.join("HEAD"), "the head of the project\n").expect("write");
    let linked = dot_git.join("wt").join("feature");
    git(
        h.root(),
        &["worktree", "add", "-q", linked.to_str().expect("UTF-8")],
    );
    for accepted in [&lookalike, &linked] {
        let tracked = h.port().track(accepted).await;
        assert!(tracked.is_ok(), "track {}: {tracked:?}", accepted.display());
    }
}

/// A worktree with more files than the cap is refused; one at the cap is not.
#[tokio::test]
async fn worktree_over_the_file_cap_is_refused() {
    let h = GitHarness::with_config(|config, _| config.file_cap = 10);
    for i in 0..10 {
        h.write(&format!("f{i:02}.txt"), format!("{i}\n").as_bytes());
    }
    h.track().await;
    h.write("f10.txt", b"one too many\n");
    let listing = h.list();
    let result = h.port().track(h.root()).await;
    match result {
        Ok(outcome) => panic!("11 files with a cap of 10 gave {:?}", outcome.id),
        Err(error) => assert!(!error.to_string().is_empty()),
    }
    assert_eq!(h.list(), listing);
}

/// A name that is not UTF-8 is skipped and reported, never mangled, and a restore leaves it alone.
#[tokio::test]
async fn non_utf8_name_is_skipped_and_left_alone() {
    let h = GitHarness::new();
    h.write("a.txt", b"a\n");
    let s = h.id().await;
    let bad = h.root().join(OsStr::from_bytes(b"bad-\xff-name.txt"));
    fs::write(&bad, "not utf-8 name\n").expect("write");
    // Reported with its bytes that are not UTF-8 written as `\xHH`, so two such names stay two (black-box:
    // both were `bad-\u{fffd}-name.txt`); the valid UTF-8 around them is kept as it is.
    fs::create_dir(h.root().join("dir")).expect("mkdir");
    fs::write(
        h.root()
            .join(OsStr::from_bytes(b"dir/\xc3\xa9-\xfe\xc3.txt")),
        "x\n",
    )
    .expect("write");
    // A backslash of such a name is doubled: this one does not show as the first.
    let backslashed = h.root().join(OsStr::from_bytes(b"bad-\\xff-\xff-name.txt"));
    fs::write(&backslashed, "y\n").expect("write");
    // And so is one of the directories above it (black-box audit: `a\xffb/` read back as a byte).
    fs::create_dir(h.root().join("a\\xffb")).expect("mkdir");
    fs::write(h.root().join(OsStr::from_bytes(b"a\\xffb/\xff.txt")), "z\n").expect("write");
    let outcome = h.track().await;
    assert_eq!(outcome.id, h.id().await);
    assert!(
        outcome
            .skipped
            .iter()
            .all(|s| s.reason == SkipReason::NotUtf8),
        "{:?}",
        outcome.skipped
    );
    let mut reported: Vec<&str> = outcome.skipped.iter().map(|s| s.path.as_str()).collect();
    reported.sort();
    assert_eq!(
        reported,
        [
            "a\\\\xffb/\\xff.txt",
            "bad-\\\\xff-\\xff-name.txt",
            "bad-\\xff-name.txt",
            "dir/é-\\xfe\\xc3.txt"
        ]
    );
    fs::remove_dir_all(h.root().join("dir")).expect("rm");
    fs::remove_dir_all(h.root().join("a\\xffb")).expect("rm");
    fs::remove_file(&backslashed).expect("rm");
    let outcome = h.track().await;
    assert_eq!(outcome.id, s);
    h.write("a.txt", b"changed\n");
    h.port().restore(h.root(), &s, None).await.expect("restore");
    assert_eq!(fs::read(&bad).expect("still there"), b"not utf-8 name\n");
}

/// The id of a tree holding one regular file `name` with `content` (git's object format, computed here).
fn one_file_tree_id(name: &str, content: &[u8]) -> String {
    let blob = blob_id(content);
    let raw: Vec<u8> = (0..blob.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&blob[i..i + 2], 16).expect("a hex byte"))
        .collect();
    let mut body = format!("100644 {name}\0").into_bytes();
    body.extend_from_slice(&raw);
    let mut hasher = <sha1::Sha1 as sha1::Digest>::new();
    sha1::Digest::update(&mut hasher, format!("tree {}\0", body.len()).as_bytes());
    sha1::Digest::update(&mut hasher, &body);
    gix::ObjectId::Sha1(sha1::Digest::finalize(hasher).into()).to_string()
}

fn loose_object(h: &GitHarness, hex: &str) -> PathBuf {
    h.store_dir()
        .join("objects")
        .join(&hex[..2])
        .join(&hex[2..])
}

/// A kept snapshot with one sub-tree missing from the store (SPEC 2.4): gc still keeps everything else it
/// reaches. (It used to give up on the whole snapshot and delete the blobs of its other directories.)
#[tokio::test]
async fn gc_keeps_the_rest_of_a_kept_snapshot_whose_sub_tree_is_missing() {
    let h = GitHarness::new();
    h.write("a/x.txt", b"in a 51c0\n");
    h.write("b/y.txt", b"in b 51c0\n");
    let kept = h.id().await;
    // The kept snapshot is then the only one that holds b/y.txt's blob.
    h.write("b/y.txt", b"changed\n");
    h.id().await;
    let sub_tree = one_file_tree_id("x.txt", b"in a 51c0\n");
    h.remove_snapshot_object(&SnapshotId::parse(&sub_tree).expect("a tree id"));
    assert!(!h.stored(&sub_tree));
    h.port()
        .gc(h.root(), std::slice::from_ref(&kept), Duration::ZERO)
        .await
        .expect("gc");
    for (what, hex) in [
        ("the kept root", kept.as_str().to_owned()),
        ("b/y.txt's blob", blob_id(b"in b 51c0\n")),
    ] {
        assert!(h.stored(&hex), "gc deleted {what}");
    }
    h.port()
        .restore(h.root(), &kept, Some(rels(&["b/y.txt"])))
        .await
        .expect("b/y.txt restores from the kept snapshot");
    assert_eq!(
        fs::read(h.path("b/y.txt")).expect("read b/y.txt"),
        b"in b 51c0\n"
    );
}

/// A kept snapshot with a tree that cannot be read (corrupt): gc fails and deletes nothing, since what that
/// tree reaches is unknown (SPEC 2.4 keeps everything a kept snapshot reaches).
#[tokio::test]
async fn gc_that_cannot_read_a_kept_tree_deletes_nothing() {
    let h = GitHarness::new();
    h.write("a/x.txt", b"in a 9d41\n");
    h.write("b/y.txt", b"in b 9d41\n");
    let kept = h.id().await;
    h.write("b/y.txt", b"changed\n");
    h.id().await;
    // Not kept by anything: gc would delete it.
    h.write("c.txt", b"unkept 9d41\n");
    h.id().await;
    h.remove("c.txt");
    h.id().await;
    // Corrupt: its entry goes from the pack, and a loose file that is not a zlib stream takes its place.
    let sub_tree = one_file_tree_id("x.txt", b"in a 9d41\n");
    h.remove_snapshot_object(&SnapshotId::parse(&sub_tree).expect("a tree id"));
    let object = loose_object(&h, &sub_tree);
    fs::create_dir_all(object.parent().expect("fan-out dir")).expect("fan-out dir");
    fs::write(&object, b"not a zlib stream").expect("corrupt the sub-tree of a/");
    assert!(h.stored(&blob_id(b"unkept 9d41\n")));
    let before = list_tree(&h.store_dir().join("objects"));
    let result = h
        .port()
        .gc(h.root(), std::slice::from_ref(&kept), Duration::ZERO)
        .await;
    assert!(result.is_err(), "gc went on: {result:?}");
    assert_eq!(
        list_tree(&h.store_dir().join("objects")),
        before,
        "gc deleted objects"
    );
    assert!(h.stored(&blob_id(b"unkept 9d41\n")));
}

/// Sets a file's modification time to `when` (older than a gc's grace period, in these tests).
fn age(path: &Path, when: SystemTime) {
    fs::File::options()
        .write(true)
        .open(path)
        .and_then(|f| f.set_modified(when))
        .expect("age it");
}

/// The temporary files a process that died mid-write leaves beside the store's own files (its stat cache,
/// its records) are removed by gc once older than the grace period; a recent one (a write under way) and
/// the files themselves stay.
#[tokio::test]
async fn gc_removes_the_stores_stray_temporary_files() {
    let h = GitHarness::new();
    h.write("a.txt", b"a\n");
    h.id().await;
    let rewind = h.store_dir().join("rewind");
    let old = SystemTime::now() - Duration::from_secs(7200);
    let stray = [
        h.store_dir().join(".config.tmp-1-abcdef"),
        rewind.join(".stat-cache.tmp-1-abcdef"),
        rewind.join("records").join(".0123.tmp-1-abcdef"),
    ];
    for path in &stray {
        fs::create_dir_all(path.parent().expect("a parent")).expect("create its directory");
        fs::write(path, b"torn").expect("write a stray file");
        age(path, old);
    }
    let recent = rewind.join(".stat-cache.tmp-2-fedcba");
    fs::write(&recent, b"being written").expect("write a recent one");
    h.port()
        .gc(h.root(), &[], Duration::from_secs(3600))
        .await
        .expect("gc");
    for path in &stray {
        assert!(!path.exists(), "{} stayed", path.display());
    }
    assert!(recent.exists(), "a recent temporary file was removed");
    assert!(rewind.join("stat-cache").is_file(), "the stat cache went");
    assert!(h.store_dir().join("config").is_file(), "the config went");
}

/// Whether a file absent from a step's start snapshot was there, ignored, is read from that snapshot's
/// `.gitignore` files (SPEC 2.4 `revert`): one missing from the store is an error and nothing is touched
/// (read as no rules, the file would have counted as tracked then, and been deleted).
#[tokio::test]
async fn a_missing_gitignore_blob_of_the_start_snapshot_deletes_nothing() {
    let h = GitHarness::new();
    h.write(".gitignore", b"*.log\n# 7f3a\n");
    h.write("sub/x.log", b"precious, ignored at the start\n");
    h.write("a.txt", b"a\n");
    let start = h.id().await;
    // During the step a deeper rule makes the file tracked.
    h.write("sub/.gitignore", b"!x.log\n");
    let base = h.id().await;
    let changed = h
        .port()
        .changed_files(h.root(), &start)
        .await
        .expect("changed_files");
    assert_eq!(changed, rels(&["sub/.gitignore", "sub/x.log"]));
    let patches = [SnapshotPatch {
        hash: start,
        files: changed,
    }];
    let plan = h.port().plan(h.root(), &patches).await.expect("plan");
    let x = plan
        .iter()
        .find(|a| a.path.as_str() == "sub/x.log")
        .expect("planned");
    assert_eq!(x.action, FileActionKind::Keep, "{plan:?}");
    let listing = h.list();
    h.remove_snapshot_object(&SnapshotId::parse(&blob_id(b"*.log\n# 7f3a\n")).expect("a blob id"));
    assert_missing("plan", h.port().plan(h.root(), &patches).await);
    assert_missing("revert", h.port().revert(h.root(), &patches, &base).await);
    assert_eq!(h.list(), listing);
}

/// What is tracked content now decides whether a revert may touch a file: a `.gitignore` that cannot be
/// read while the revert plans is an error and nothing is touched (read as no rules, the `.env` it ignores
/// would count as tracked, and the revert of the step that created it would delete it).
#[tokio::test]
async fn an_unreadable_gitignore_while_planning_touches_nothing() {
    let h = GitHarness::new();
    h.write("a.txt", b"a\n");
    let start = h.id().await;
    // The step creates .env; the user then ignores it.
    h.write(".env", b"SECRET=1\n");
    let changed = h
        .port()
        .changed_files(h.root(), &start)
        .await
        .expect("changed_files");
    assert_eq!(changed, rels(&[".env"]));
    h.write(".gitignore", b"*.env\n.env\n");
    let base = h.id().await;
    let patches = [SnapshotPatch {
        hash: start,
        files: changed,
    }];
    let plan = h.port().plan(h.root(), &patches).await.expect("plan");
    assert_eq!(plan[0].action, FileActionKind::Keep, "{plan:?}");
    let listing = h.list();
    h.fail_reads(".gitignore");
    let planned = h.port().plan(h.root(), &patches).await;
    assert!(
        matches!(planned, Err(Error::Unreadable { .. })),
        "{planned:?}"
    );
    let reverted = h.port().revert(h.root(), &patches, &base).await;
    assert!(
        matches!(reverted, Err(Error::Unreadable { .. })),
        "{reverted:?}"
    );
    assert_eq!(h.list(), listing);
}

/// One id can stand for several disk states (SPEC 2.3): when a later track returns the same id under other
/// outside rules, the rules of the first still count. Here a file ignored by the global excludes when the
/// id was first returned, and absent from it, is kept by the revert of a step that started from that id
/// and made it tracked (it may have existed then), not deleted.
#[tokio::test]
async fn every_rule_set_an_id_was_returned_under_counts() {
    let h = GitHarness::with_config(|config, base| {
        config.excludes_file = ExcludesFile::Path(base.join("global-ignore"));
    });
    let global = h.base().join("global-ignore");
    fs::write(&global, "*.secret\n").expect("write the global excludes");
    h.write("a.txt", b"a\n");
    h.write("keys.secret", b"ignored at the first track\n");
    let first = h.id().await;
    // The rule goes; the tree (without the ignored file) is the same id again.
    fs::write(&global, "*.nothing\n").expect("rewrite the global excludes");
    h.remove("keys.secret");
    assert_eq!(h.id().await, first);
    // A step from that id: the file appears, now tracked.
    h.write("keys.secret", b"written during the step\n");
    let changed = h
        .port()
        .changed_files(h.root(), &first)
        .await
        .expect("changed_files");
    assert_eq!(changed, rels(&["keys.secret"]));
    let base = h.id().await;
    let patches = [SnapshotPatch {
        hash: first,
        files: changed,
    }];
    let outcome = h
        .port()
        .revert(h.root(), &patches, &base)
        .await
        .expect("revert");
    assert_eq!(kept_paths(&outcome.kept), ["keys.secret"], "{outcome:?}");
    assert_eq!(
        fs::read(h.path("keys.secret")).expect("still there"),
        b"written during the step\n"
    );
}

/// SPEC 2.5: everything a revert overwrites or deletes is in a snapshot first. A file edited after the
/// revert's snapshot was taken (here while the revert waits for its go-ahead, as it does while its intent
/// is stored) is not in one: the revert keeps it, with a reason, and still reverts the others. A file made
/// meanwhile where the revert would delete one is kept too.
#[tokio::test]
async fn an_edit_made_while_the_revert_waits_is_kept() {
    let h = GitHarness::new();
    h.write("a.txt", b"a0\n");
    h.write("b.txt", b"b0\n");
    let start = h.id().await;
    h.write("a.txt", b"a1\n");
    h.write("b.txt", b"b1\n");
    h.write("new.txt", b"new\n");
    let patches = one_patch(&start, &["a.txt", "b.txt", "new.txt"]);
    let base = h.id().await;
    let (go, ready) = futures::channel::oneshot::channel();
    let root = h.root().to_path_buf();
    let reverting = h.port().revert_when(h.root(), &patches, &base, ready);
    let editing = async move {
        fs::write(root.join("a.txt"), b"the user's edit\n").expect("edit a.txt");
        fs::write(root.join("new.txt"), b"the user's version\n").expect("edit new.txt");
        go.send(true).expect("the go-ahead");
    };
    let (outcome, ()) = futures::future::join(reverting, editing).await;
    let outcome = outcome.expect("revert");
    assert_eq!(
        kept_paths(&outcome.kept),
        ["a.txt", "new.txt"],
        "{outcome:?}"
    );
    assert!(
        outcome
            .kept
            .iter()
            .all(|k| k.reason.contains("changed after"))
    );
    assert_eq!(outcome.written, rels(&["b.txt"]));
    assert!(outcome.deleted.is_empty());
    assert_eq!(
        fs::read(h.path("a.txt")).expect("a.txt"),
        b"the user's edit\n"
    );
    assert_eq!(fs::read(h.path("b.txt")).expect("b.txt"), b"b0\n");
    assert_eq!(
        fs::read(h.path("new.txt")).expect("new.txt"),
        b"the user's version\n"
    );
}

/// gc keeps what the stat cache and the ids returned within the grace period reach: when either file
/// exists but cannot be read, gc fails and deletes nothing (read as empty, it would collect a tree the
/// next track, reading the cache again, still returns).
#[tokio::test]
async fn gc_that_cannot_read_the_stat_cache_or_the_returned_log_deletes_nothing() {
    for unreadable in ["stat-cache", "returned"] {
        let h = GitHarness::new();
        h.write("a.txt", b"kept 51d7\n");
        h.id().await;
        h.write("c.txt", b"unkept 51d7\n");
        h.id().await;
        h.remove("c.txt");
        h.id().await;
        // A directory where the file is: it exists and cannot be read.
        let file = h.store_dir().join("rewind").join(unreadable);
        fs::remove_file(&file).expect("the store has the file");
        fs::create_dir(&file).expect("a directory in its place");
        let before = list_tree(&h.store_dir().join("objects"));
        let result = h.port().gc(h.root(), &[], Duration::ZERO).await;
        assert!(
            result.is_err(),
            "gc went on without {unreadable}: {result:?}"
        );
        assert_eq!(
            list_tree(&h.store_dir().join("objects")),
            before,
            "gc deleted objects without {unreadable}"
        );
    }
}

/// Two gcs: one that read the database's references before a turn was stored (its `keep` misses that turn's
/// snapshot, which only the log of returned ids protects), and one with no grace period that ran first. The
/// second cut the log only of lines older than an hour, so the first keeps the turn's snapshot (black-box:
/// it collected it, and the turn could never be undone).
#[tokio::test]
async fn a_gc_without_grace_leaves_the_returned_ids_another_gc_needs() {
    let h = GitHarness::new();
    h.write("a.txt", b"one 7f31\n");
    let first = h.id().await;
    h.write("a.txt", b"two 7f31\n");
    h.write("precious.txt", b"only here 7f31\n");
    let turn = h.id().await;
    // A later snapshot (the stat cache's, which gc keeps) no longer holds the turn's file.
    h.remove("precious.txt");
    h.write("a.txt", b"three 7f31\n");
    let later = h.id().await;
    // The gc without grace knows the turn (stored by then).
    h.port()
        .gc(
            h.root(),
            &[first.clone(), turn.clone(), later.clone()],
            Duration::ZERO,
        )
        .await
        .expect("gc without grace");
    // The other, with the default grace, read the references before the turn was stored.
    h.port()
        .gc(
            h.root(),
            std::slice::from_ref(&first),
            Duration::from_secs(3600),
        )
        .await
        .expect("gc with the grace period");
    assert!(h.stored(turn.as_str()), "the turn's snapshot was collected");
    h.port()
        .restore(h.root(), &turn, None)
        .await
        .expect("the turn restores");
    assert_eq!(
        fs::read(h.path("precious.txt")).expect("read"),
        b"only here 7f31\n"
    );
}

/// A gc whose grace period reaches back before a cut another gc made of the returned log, while it waited
/// for the store, is refused and deletes nothing: what was cut could be a snapshot stored since it read the
/// database's references.
#[tokio::test]
async fn a_gc_that_needs_lines_another_gc_cut_is_refused_and_deletes_nothing() {
    let h = GitHarness::new();
    h.write("a.txt", b"kept 4e02\n");
    let first = h.id().await;
    // A snapshot only the returned log names (the stat cache's tree is `first` again): a gc that went on
    // would collect it.
    h.write("b.txt", b"unkept 4e02\n");
    let only_logged = h.id().await;
    h.remove("b.txt");
    assert_eq!(h.id().await, first);
    let log = h.store_dir().join("rewind").join("returned");
    let mut text = fs::read_to_string(&log).expect("the returned log");
    let later = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("time")
        .as_millis()
        + 60_000;
    text.insert_str(0, &format!("cut {later}\n"));
    fs::write(&log, text).expect("write the log");
    let before = list_tree(&h.store_dir().join("objects"));
    let refused = h
        .port()
        .gc(h.root(), std::slice::from_ref(&first), Duration::ZERO)
        .await
        .expect_err("refused");
    assert!(
        matches!(refused, Error::Busy { .. }) && refused.to_string().contains("run gc again"),
        "{refused:?}"
    );
    assert_eq!(list_tree(&h.store_dir().join("objects")), before);
    assert!(h.stored(only_logged.as_str()));
}

/// A gc with a grace period longer than the log's hour, after a gc without one: nothing the second needs
/// was cut (every line is recent), so it is not refused (review: a cut was noted even when no line was
/// dropped, and every gc whose grace reached back before it was refused).
#[tokio::test]
async fn a_gc_with_a_long_grace_after_another_gc_is_not_refused() {
    let h = GitHarness::new();
    h.write("a.txt", b"one 90b1\n");
    let first = h.id().await;
    h.write("a.txt", b"two 90b1\n");
    let second = h.id().await;
    h.port()
        .gc(h.root(), std::slice::from_ref(&second), Duration::ZERO)
        .await
        .expect("gc without grace");
    h.port()
        .gc(
            h.root(),
            std::slice::from_ref(&second),
            Duration::from_secs(7200),
        )
        .await
        .expect("a gc with two hours' grace is not refused");
    assert!(!h.stored(first.as_str()), "the first gc collected it");
}

/// What a crash leaves while seeding copies a user's objects or packs (a half-made copy, a pack without
/// its index) is removed by gc once older than the grace period; recent ones and whole packs stay.
#[tokio::test]
async fn gc_removes_half_made_copies_and_packs_without_an_index() {
    let h = GitHarness::new();
    for name in ["a.txt", "b.txt", "c.txt"] {
        h.write(name, format!("{name} 2f4b\n").as_bytes());
    }
    h.id().await;
    let objects = h.store_dir().join("objects");
    let pack_dir = objects.join("pack");
    let own = fs::read_dir(&pack_dir)
        .expect("the track's pack")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "pack"))
        .expect("a pack of the store's own");
    let old = SystemTime::now() - Duration::from_secs(7200);
    let leftovers = [
        objects
            .join("ab")
            .join("cdef0123456789abcdef0123456789abcdef01.tmp-xyz"),
        pack_dir.join("pack-0123.tmp-xyz"),
        pack_dir.join("pack-orphan.pack"),
    ];
    for path in &leftovers {
        fs::create_dir_all(path.parent().expect("a parent")).expect("its directory");
        fs::write(path, b"left by a crash").expect("write");
        age(path, old);
    }
    let recent = pack_dir.join("pack-1234.tmp-abc");
    fs::write(&recent, b"being copied").expect("write a recent one");
    let whole = [
        pack_dir.join("pack-whole.pack"),
        pack_dir.join("pack-whole.idx"),
    ];
    // A whole pack (a copy of the store's own under a seeded pack's name: its objects are reachable).
    for (path, ext) in whole.iter().zip(["pack", "idx"]) {
        fs::copy(own.with_extension(ext), path).expect("copy");
        age(path, old);
    }
    h.port()
        .gc(h.root(), &[], Duration::from_secs(3600))
        .await
        .expect("gc");
    for path in &leftovers {
        assert!(!path.exists(), "{} stayed", path.display());
    }
    assert!(recent.exists(), "a recent copy was removed");
    assert!(
        whole.iter().all(|p| p.exists()),
        "a pack with its index is not a leftover"
    );
}

/// `/proc/PID/stat`'s state letter and start time.
fn proc_state(pid: u32) -> (char, u64) {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process runs");
    let rest = &text[text.rfind(')').expect("a command name") + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields[0].chars().next().expect("a state");
    (state, fields[22 - 3].parse().expect("a start time"))
}

/// Locks the store's lock file as another holder would (a lock of its own open file), until dropped.
fn hold_the_store(lock_path: &Path) -> fs::File {
    let holder = fs::File::options()
        .read(true)
        .write(true)
        .open(lock_path)
        .expect("open the lock");
    holder.lock().expect("lock");
    holder
}

/// A process that holds the store and is stopped (Ctrl-Z, SIGSTOP) would make every operation wait without
/// a word, for ever (black-box): the wait is refused as busy, naming the process and what to do, and
/// nothing is touched. A holder that runs is waited for, as before.
#[tokio::test]
async fn a_stopped_holder_of_the_store_is_named_instead_of_waited_for() {
    let h = GitHarness::new();
    h.write("a.txt", b"a\n");
    let id = h.id().await;
    let lock_path = h.store_dir().join("rewind").join("lock");
    let mut sleeper = Command::new("sleep").arg("60").spawn().expect("sleep runs");
    let pid = sleeper.id();
    let signal = |name: &str| {
        let status = Command::new("kill")
            .args([name, &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    };
    signal("-STOP");
    while proc_state(pid).0 != 'T' {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The stopped process holds the store, as its lock file says.
    let holder = hold_the_store(&lock_path);
    fs::write(&lock_path, format!("{pid} {}\n", proc_state(pid).1)).expect("name the holder");
    let listing = h.list();
    let tracked = tokio::time::timeout(Duration::from_secs(20), h.port().track(h.root()))
        .await
        .expect("refused, not waited for");
    assert!(
        matches!(&tracked, Err(Error::Busy { message, .. })
            if message.contains(&format!("process {pid}")) && message.contains("kill -CONT")),
        "{tracked:?}"
    );
    let restored = tokio::time::timeout(
        Duration::from_secs(20),
        h.port().restore(h.root(), &id, None),
    )
    .await
    .expect("refused, not waited for");
    assert!(matches!(&restored, Err(Error::Busy { .. })), "{restored:?}");
    assert_eq!(h.list(), listing, "nothing touched");

    // Resumed, it runs: the operation waits until the store is let go, then goes on.
    signal("-CONT");
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(holder);
    });
    let tracked = h.port().track(h.root()).await.expect("track once released");
    assert_eq!(tracked.id, id);
    release.join().expect("released");
    let _ = sleeper.kill();
    let _ = sleeper.wait();
}

/// A holder of the store that runs and never lets go (a hung rewind process, another program locking the
/// file) made every operation wait without a word, for ever (black-box): past the lock wait, the operation
/// is refused as busy, naming the store and the last rewind process that took it, and nothing is touched.
#[tokio::test]
async fn a_holder_of_the_store_that_never_lets_go_is_refused_after_the_lock_wait() {
    let h = GitHarness::with_config(|config, _| config.lock_wait = Duration::from_millis(400));
    h.write("a.txt", b"a\n");
    let id = h.id().await;
    let lock_path = h.store_dir().join("rewind").join("lock");
    let holder = hold_the_store(&lock_path);
    let named = fs::read_to_string(&lock_path).expect("the lock names its last holder");
    let pid = named.split_whitespace().next().expect("a pid").to_owned();
    h.write("a.txt", b"a2\n");
    let listing = h.list();
    let started = std::time::Instant::now();
    let restored = tokio::time::timeout(
        Duration::from_secs(20),
        h.port().restore(h.root(), &id, None),
    )
    .await
    .expect("refused, not waited for");
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert!(
        matches!(&restored, Err(Error::Busy { message, .. })
            if message.contains("has been locked by another process")
                && message.contains(&format!("rewind process that took it is {pid}"))),
        "{restored:?}"
    );
    assert_eq!(h.list(), listing, "nothing touched");
    drop(holder);
    h.port()
        .restore(h.root(), &id, None)
        .await
        .expect("restore once let go");
    assert_eq!(h.read("a.txt"), text("a\n"));
}

/// rewind's own files inside a worktree (a SQLite database given in the project directory, with its
/// journal, WAL and shared-memory files: `GitStoreConfig::own_files`) are left out of its snapshots, as
/// git leaves out the files its excludes name (the oracle), and no restore or revert writes or deletes
/// them, also when the snapshot holds them (taken by a store configured without them, as stores were
/// before this rule). Black-box: with `--database-url sqlite://rewind.db`, each undo wrote an old copy of
/// the WAL over the live one, and the session lost its history.
#[tokio::test]
async fn rewind_s_own_files_in_a_worktree_are_never_snapshotted_nor_written() {
    let own = ["rewind.db", "rewind.db-wal", "sub/other.db"];
    let h = GitHarness::with_config(|config, base| {
        config.own_files = own.iter().map(|f| base.join("wt").join(f)).collect();
        // One whose directory does not exist is no file of the worktree.
        config.own_files.push(base.join("missing/dir/rewind.db"));
    });
    let mut plain_config = rewind_git::GitStoreConfig::new(h.data_dir(), crate::harness::DATABASE);
    plain_config.excludes_file = ExcludesFile::None;
    let plain = rewind_git::GitSnapshotStore::new(plain_config);
    h.write("a.txt", b"a1\n");
    h.write("sub/b.txt", b"b1\n");
    for file in own {
        h.write(file, b"old database pages\n");
    }
    let holding = rewind_core::SnapshotPort::track(&plain, h.root())
        .await
        .expect("a track that does not know the database");
    let excludes = h.base().join("excludes");
    fs::write(&excludes, own.map(|f| format!("/{f}\n")).concat()).expect("write excludes");
    let oracle = GitOracle::new(Some(&excludes));
    let first = h.id().await;
    assert_eq!(
        first.as_str(),
        oracle.write_tree(h.root()),
        "left out, as git's excludes leave them"
    );
    assert_ne!(first, holding.id, "the plain store's snapshot holds them");

    h.write("a.txt", b"a2\n");
    h.write("rewind.db", b"live database pages\n");
    h.remove("rewind.db-wal");
    let second = h.id().await;
    assert_eq!(second.as_str(), oracle.write_tree(h.root()));
    let live = |h: &GitHarness| {
        (
            h.read("rewind.db"),
            h.read("rewind.db-wal"),
            h.read("sub/other.db"),
        )
    };
    let before = live(&h);
    let planned = h
        .port()
        .plan(
            h.root(),
            &one_patch(
                &holding.id,
                &["a.txt", "rewind.db", "rewind.db-wal", "sub/other.db"],
            ),
        )
        .await
        .expect("plan");
    assert!(
        planned
            .iter()
            .all(|a| !own.contains(&a.path.as_str()) || a.action == FileActionKind::Keep),
        "the database is only ever kept: {planned:?}"
    );
    h.port()
        .revert(
            h.root(),
            &one_patch(
                &holding.id,
                &["a.txt", "rewind.db", "rewind.db-wal", "sub/other.db"],
            ),
            &second,
        )
        .await
        .expect("revert");
    assert_eq!(h.read("a.txt"), text("a1\n"));
    assert_eq!(live(&h), before, "the revert wrote none of them");
    h.write("a.txt", b"a3\n");
    h.port()
        .restore(h.root(), &holding.id, None)
        .await
        .expect("restore");
    assert_eq!(h.read("a.txt"), text("a1\n"));
    assert_eq!(live(&h), before, "the restore wrote none of them");
    h.port()
        .restore(h.root(), &second, None)
        .await
        .expect("restore");
    assert_eq!(h.read("a.txt"), text("a2\n"));
    assert_eq!(
        live(&h),
        before,
        "nor did the restore of a snapshot without them delete them"
    );
}

/// `stored_worktrees` lists the worktrees whose stores this database has in the data dir, from each
/// store's record: not another database's, and not one whose worktree is gone (gc visits them, so a
/// store no session names any more is still collected).
#[tokio::test]
async fn stored_worktrees_are_this_database_s_existing_worktrees() {
    let h = GitHarness::new();
    h.write("a.txt", b"a\n");
    h.id().await;
    let second = h.base().join("second");
    let gone = h.base().join("gone");
    for dir in [&second, &gone] {
        fs::create_dir_all(dir).expect("mkdir");
        fs::write(dir.join("b.txt"), "b\n").expect("write");
        rewind_core::SnapshotPort::track(h.port(), dir)
            .await
            .expect("track");
    }
    fs::remove_dir_all(&gone).expect("rm");
    // One replaced by a symlink since cannot be opened as itself (`Store::open` refuses it): not listed.
    let moved = h.base().join("moved");
    fs::create_dir_all(&moved).expect("mkdir");
    rewind_core::SnapshotPort::track(h.port(), &moved)
        .await
        .expect("track");
    fs::rename(&moved, h.base().join("moved-away")).expect("rename");
    std::os::unix::fs::symlink(h.base().join("moved-away"), &moved).expect("symlink");
    let mut other_config =
        rewind_git::GitStoreConfig::new(h.data_dir(), "sqlite:///another-database.db");
    other_config.excludes_file = ExcludesFile::None;
    let other = rewind_git::GitSnapshotStore::new(other_config);
    let theirs = h.base().join("theirs");
    fs::create_dir_all(&theirs).expect("mkdir");
    rewind_core::SnapshotPort::track(&other, &theirs)
        .await
        .expect("track");
    let listed = h.port().stored_worktrees().await.expect("list");
    assert_eq!(
        listed,
        vec![second.clone(), h.root().to_path_buf()],
        "sorted"
    );
    assert_eq!(
        rewind_core::SnapshotPort::stored_worktrees(&other)
            .await
            .expect("list"),
        vec![theirs]
    );
}

/// `remove_gone_stores` removes whole the store of a worktree that is gone, once no one named it and it
/// returned no id within the grace period; the stores of existing worktrees, of named ones and of another
/// database stay. A worktree made again at that path gets a new, empty store that works.
#[tokio::test]
async fn the_store_of_a_gone_worktree_is_removed_once_unnamed_and_past_the_grace_period() {
    let h = GitHarness::new();
    h.write("a.txt", b"a\n");
    h.id().await;
    let gone = h.base().join("gone");
    let named = h.base().join("named");
    for dir in [&gone, &named] {
        fs::create_dir_all(dir).expect("mkdir");
        fs::write(dir.join("b.txt"), "b\n").expect("write");
        rewind_core::SnapshotPort::track(h.port(), dir)
            .await
            .expect("track");
    }
    let store_of = |worktree: &Path| h.view(worktree).store_dir();
    let (gone_store, named_store) = (store_of(&gone), store_of(&named));
    let mut other_config =
        rewind_git::GitStoreConfig::new(h.data_dir(), "sqlite:///another-database.db");
    other_config.excludes_file = ExcludesFile::None;
    let other = rewind_git::GitSnapshotStore::new(other_config);
    let theirs = h.base().join("theirs");
    fs::create_dir_all(&theirs).expect("mkdir");
    rewind_core::SnapshotPort::track(&other, &theirs)
        .await
        .expect("track");
    let theirs_store = other.store_dir(&theirs).expect("store dir");
    for dir in [&gone, &named, &theirs] {
        fs::remove_dir_all(dir).expect("rm");
    }
    let named_list = vec![named.clone()];
    let remove = async |grace: u64| {
        h.port()
            .remove_gone_stores(&named_list, Duration::from_secs(grace))
            .await
            .expect("remove")
    };
    // Within the grace period of its last returned id, it stays.
    assert!(remove(3600).await.is_empty());
    assert!(gone_store.join("HEAD").is_file());
    let removed = remove(0).await;
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(removed[0].0, gone);
    let report = removed[0].1.as_ref().expect("removed");
    assert!(report.objects_removed >= 2, "{report:?}");
    assert!(report.bytes_freed > 0, "{report:?}");
    assert!(!gone_store.exists(), "the store is gone");
    assert!(named_store.join("HEAD").is_file(), "a named one stays");
    assert!(
        theirs_store.join("HEAD").is_file(),
        "another database's stays"
    );
    assert!(
        h.root().join("a.txt").is_file() && store_of(h.root()).join("HEAD").is_file(),
        "an existing worktree's store stays"
    );
    assert!(remove(0).await.is_empty(), "once");
    // The path made again is a new worktree with a new store.
    fs::create_dir_all(&gone).expect("mkdir");
    fs::write(gone.join("c.txt"), "c\n").expect("write");
    let id = rewind_core::SnapshotPort::track(h.port(), &gone)
        .await
        .expect("track again");
    assert_eq!(
        id.id.to_string(),
        GitOracle::new(None).write_tree(&gone),
        "the new store's snapshot is git's tree"
    );
}

/// A git directory under another name in the worktree (a bare repository: a `GIT_DIR=.cfg` "dotfiles"
/// repository, a fixture `repo.git`) is like `.git`: never snapshotted, and no revert or restore writes or
/// deletes anything in it, also when an older snapshot, taken before it was a git directory, holds files
/// there (black-box: `undo` rewound the user's refs and index and deleted a commit's objects). The
/// oracle is real git with those directories excluded.
#[tokio::test]
async fn a_git_dir_under_another_name_is_never_snapshotted_nor_written() {
    let h = GitHarness::new();
    h.write("a.txt", b"a1\n");
    h.write(".cfg/HEAD", b"not yet a git dir\n");
    h.write(".cfg/config", b"old\n");
    let before = h.id().await;
    git(h.root(), &["init", "-q", "--bare", ".cfg"]);
    git(h.root(), &["init", "-q", "--bare", "fixtures/repo.git"]);
    h.write(".cfg/HEAD", b"ref: refs/heads/other\n");
    h.write("a.txt", b"a2\n");
    let excludes = h.base().join("excludes");
    fs::write(&excludes, "/.cfg/\n/fixtures/repo.git/\n").expect("write excludes");
    let oracle = GitOracle::new(Some(&excludes));
    let tracked = h.track().await;
    let now = tracked.id.clone();
    assert_eq!(now.as_str(), oracle.write_tree(h.root()), "left out");
    // And said so, each time (review: left out without a word).
    for outcome in [tracked, h.track().await] {
        let skipped: Vec<(&str, &SkipReason)> = outcome
            .skipped
            .iter()
            .map(|s| (s.path.as_str(), &s.reason))
            .collect();
        assert_eq!(
            skipped,
            [
                (".cfg", &SkipReason::GitDir),
                ("fixtures/repo.git", &SkipReason::GitDir)
            ]
        );
    }
    let git_dirs = || {
        (
            list_tree(&h.root().join(".cfg")),
            list_tree(&h.root().join("fixtures")),
        )
    };
    let untouched = git_dirs();
    let files = ["a.txt", ".cfg/HEAD", ".cfg/config"];
    let planned = h
        .port()
        .plan(h.root(), &one_patch(&before, &files))
        .await
        .expect("plan");
    assert!(
        planned
            .iter()
            .all(|a| !a.path.as_str().starts_with(".cfg/") || a.action == FileActionKind::Keep),
        "the git dir is only ever kept: {planned:?}"
    );
    h.port()
        .revert(h.root(), &one_patch(&before, &files), &now)
        .await
        .expect("revert");
    assert_eq!(h.read("a.txt"), text("a1\n"));
    assert_eq!(git_dirs(), untouched, "the revert wrote nothing in them");
    h.write("a.txt", b"a3\n");
    h.port()
        .restore(h.root(), &before, None)
        .await
        .expect("restore");
    assert_eq!(h.read("a.txt"), text("a1\n"));
    assert_eq!(git_dirs(), untouched, "nor did the restore");
}

/// A store keyed on a former identity of the database (`GitStoreConfig::former_identities`: its path as
/// given, before identities were canonical) is moved to the store's place now when first opened, with
/// every snapshot in it; one keyed on another database's identity is not.
#[tokio::test]
async fn a_store_under_a_former_identity_is_adopted_whole() {
    let h = GitHarness::new();
    h.write("a.txt", b"a1\n");
    let store_with = |identity: &str, former: &[&str]| {
        let mut config = rewind_git::GitStoreConfig::new(h.data_dir(), identity);
        config.excludes_file = ExcludesFile::None;
        config.former_identities = former.iter().map(|f| (*f).to_owned()).collect();
        rewind_git::GitSnapshotStore::new(config)
    };
    let spelled = store_with("/data/../data/rewind.db", &[]);
    let first = rewind_core::SnapshotPort::track(&spelled, h.root())
        .await
        .expect("track")
        .id;
    let former_dir = spelled.store_dir(h.root()).expect("dir");
    let other = store_with("/other/rewind.db", &["/elsewhere/rewind.db"]);
    rewind_core::SnapshotPort::track(&other, h.root())
        .await
        .expect("track");
    assert!(
        former_dir.join("HEAD").is_file(),
        "another database's: left"
    );
    let canonical = store_with("/data/rewind.db", &["/data/../data/rewind.db"]);
    h.write("a.txt", b"a2\n");
    rewind_core::SnapshotPort::track(&canonical, h.root())
        .await
        .expect("track");
    assert!(!former_dir.exists(), "moved");
    rewind_core::SnapshotPort::restore(&canonical, h.root(), &first, None)
        .await
        .expect("the former store's snapshot is there");
    assert_eq!(h.read("a.txt"), text("a1\n"));
}

/// `plan` (the preview) says what `revert` then does for the files a step made, when the user has since
/// put a directory in place of one, or a symlink to a directory outside in place of the other's directory:
/// keep, not delete (black-box: the preview said `delete`, and the revert kept them). Nothing is written
/// or deleted, in the worktree or outside it.
#[tokio::test]
async fn the_plan_keeps_a_file_to_delete_that_a_directory_or_a_symlinked_parent_replaced() {
    let h = GitHarness::new();
    h.write("a.txt", b"a\n");
    let start = h.track().await.id;
    h.write("x", b"made by the step\n");
    h.write("d/f.txt", b"made by the step\n");
    h.track().await;
    // The user, after the step.
    fs::remove_file(h.root().join("x")).expect("remove x");
    h.write("x/user.txt", b"the user's\n");
    fs::remove_dir_all(h.root().join("d")).expect("remove d");
    let outside = tempfile::tempdir().expect("outside");
    fs::write(outside.path().join("f.txt"), b"outside\n").expect("write outside");
    std::os::unix::fs::symlink(outside.path(), h.root().join("d")).expect("symlink");
    let base = h.track().await.id;
    let patches = [SnapshotPatch {
        hash: start,
        files: rels(&["d/f.txt", "x"]),
    }];
    let plan = h.port().plan(h.root(), &patches).await.expect("plan");
    let planned: Vec<(&str, FileActionKind, bool)> = plan
        .iter()
        .map(|a| (a.path.as_str(), a.action, a.reason.is_some()))
        .collect();
    assert_eq!(
        planned,
        [
            ("d/f.txt", FileActionKind::Keep, true),
            ("x", FileActionKind::Keep, true)
        ]
    );
    let outcome = h
        .port()
        .revert(h.root(), &patches, &base)
        .await
        .expect("revert");
    assert!(outcome.written.is_empty(), "{:?}", outcome.written);
    assert!(outcome.deleted.is_empty(), "{:?}", outcome.deleted);
    let kept: Vec<&str> = outcome.kept.iter().map(|k| k.path.as_str()).collect();
    assert_eq!(kept, ["d/f.txt", "x"]);
    assert_eq!(h.read("x/user.txt"), text("the user's\n"));
    assert_eq!(
        fs::read(outside.path().join("f.txt")).expect("outside"),
        b"outside\n"
    );
}

/// The other side of the test above: where the directory standing at a file to delete holds only files
/// the same revert deletes (a step made file `x`, the next replaced it with `x/y`, both undone), the plan
/// deletes both, and the revert reports nothing kept (review: the first fix kept `x`, a directory the
/// revert itself removes).
#[tokio::test]
async fn the_plan_deletes_a_file_whose_directory_the_same_revert_empties() {
    let h = GitHarness::new();
    h.write("a.txt", b"a\n");
    let start = h.track().await.id;
    h.write("x", b"made by step 1\n");
    let middle = h.track().await.id;
    fs::remove_file(h.root().join("x")).expect("remove x");
    h.write("x/y", b"made by step 2\n");
    let base = h.track().await.id;
    let patches = [
        SnapshotPatch {
            hash: start,
            files: rels(&["x"]),
        },
        SnapshotPatch {
            hash: middle,
            files: rels(&["x", "x/y"]),
        },
    ];
    let plan = h.port().plan(h.root(), &patches).await.expect("plan");
    let planned: Vec<(&str, FileActionKind)> =
        plan.iter().map(|a| (a.path.as_str(), a.action)).collect();
    assert_eq!(
        planned,
        [
            ("x", FileActionKind::Delete),
            ("x/y", FileActionKind::Delete)
        ]
    );
    let outcome = h
        .port()
        .revert(h.root(), &patches, &base)
        .await
        .expect("revert");
    assert!(outcome.kept.is_empty(), "{:?}", outcome.kept);
    assert_eq!(outcome.deleted, rels(&["x/y"]));
    assert!(!h.root().join("x").exists());
    assert_eq!(h.read("a.txt"), text("a\n"));
}

// ---------------------------------------------------------------------------------------------------------
// Hard links.

/// Two names of one file (a hard link), both changed by a step that wrote the file in place: the revert
/// puts both back. Writing over the first drops one of the file's links, which sets its status change
/// time, and the second used to be kept as "changed while rewind was writing" on that alone (black-box).
/// The two names are separate files afterwards, as after git's checkout. The redo is exact as well.
#[tokio::test]
async fn both_names_of_a_hard_linked_file_are_reverted() {
    let h = GitHarness::new();
    h.write("a.txt", b"old\n");
    fs::hard_link(h.path("a.txt"), h.path("b.txt")).expect("link");
    h.write("other.txt", b"unchanged\n");
    let s = h.id().await;
    // The step writes the file in place: both names show the new content.
    fs::write(h.path("a.txt"), b"new, longer\n").expect("write in place");
    assert_eq!(h.read("b.txt"), text("new, longer\n"));
    let after = h.id().await;

    let outcome = revert_with_fresh_base(&h, &one_patch(&s, &["a.txt", "b.txt"])).await;
    assert!(outcome.kept.is_empty(), "{:?}", outcome.kept);
    assert_eq!(outcome.written, rels(&["a.txt", "b.txt"]));
    assert_eq!(h.read("a.txt"), text("old\n"));
    assert_eq!(h.read("b.txt"), text("old\n"));
    assert_eq!(h.id().await, s);

    let back = h
        .port()
        .restore(h.root(), &after, None)
        .await
        .expect("redo");
    assert!(back.kept.is_empty(), "{:?}", back.kept);
    assert_eq!(h.read("a.txt"), text("new, longer\n"));
    assert_eq!(h.read("b.txt"), text("new, longer\n"));
    assert_eq!(h.id().await, after);
}

/// Two steps: the first replaced directory `d` (holding `d/f`) by a file `d`, the second put a directory
/// back with another `d/f`. Undoing both puts `d/f` back, and says nothing of `d`: the first patch's
/// "delete the file `d`" is done by the directory standing there, which the state gone back to needs
/// (black-box: `d` was named as left as it is).
#[tokio::test]
async fn undoing_a_directory_turned_file_and_back_keeps_nothing() {
    let h = GitHarness::new();
    h.write("d/f", b"first\n");
    let a = h.id().await;
    fs::remove_dir_all(h.path("d")).expect("rm d");
    h.write("d", b"a file now\n");
    let b = h.id().await;
    fs::remove_file(h.path("d")).expect("rm d");
    h.write("d/f", b"second\n");
    let c = h.id().await;
    let patches = vec![
        SnapshotPatch {
            hash: a.clone(),
            files: rels(&["d", "d/f"]),
        },
        SnapshotPatch {
            hash: b,
            files: rels(&["d", "d/f"]),
        },
    ];
    let outcome = h
        .port()
        .revert(h.root(), &patches, &c)
        .await
        .expect("revert");
    assert!(outcome.kept.is_empty(), "{:?}", outcome.kept);
    assert_eq!(h.read("d/f"), text("first\n"));
    assert_eq!(h.id().await, a);
}

/// A store whose data directory cannot be written (here its lock file is immutable; a read-only mount or
/// another user's data directory refuses opening it for writing the same way) still diffs two snapshots,
/// read without its lock; a track, which writes, is refused with an error that names the store and what
/// to do (black-box: it named only the lock file and the OS error), and the store is unchanged (black-box:
/// `rewind log` on a read-only data directory could show no step's files).
#[tokio::test]
async fn a_store_that_cannot_be_written_is_still_diffed() {
    let h = GitHarness::new();
    h.write("a.txt", b"one\n");
    let first = h.id().await;
    h.write("a.txt", b"one\ntwo\n");
    h.write("b.txt", b"b\n");
    let second = h.id().await;
    let expected = h
        .port()
        .diff(h.root(), &first, &second)
        .await
        .expect("diffs");
    assert_eq!(expected.len(), 2);
    let before = list_tree(&h.store_dir());
    let immutable = Flagged::set(&h.store_dir().join("rewind").join("lock"), 'i');
    let diffs = h
        .port()
        .diff(h.root(), &first, &second)
        .await
        .expect("diffs without its lock");
    assert_eq!(diffs, expected);
    h.write("c.txt", b"c\n");
    let refused = h
        .port()
        .track(h.root())
        .await
        .expect_err("a track needs the lock")
        .to_string();
    let store = h.store_dir().display().to_string();
    assert!(
        refused.starts_with(&format!(
            "cannot write to the snapshot store {store} (in rewind's data directory): "
        )) && refused
            .contains("make it writable for this user, or give rewind another data directory"),
        "{refused}"
    );
    drop(immutable);
    assert_eq!(list_tree(&h.store_dir()), before);
}

/// `remove_emptied_dirs` (what a recovery runs after putting an interrupted operation's files back) removes
/// the empty directories at and above the given paths, made since the operation began, that the snapshot
/// had neither with content nor seen empty, deepest first, and nothing else: not one the snapshot holds
/// files in, not one its track saw empty, not one the user made before the operation began (review), not
/// one that holds anything, not the worktree, and never anything through a symlink (the sentinel's empty
/// directory stays). Where the filesystem records no birth time, none is removed.
#[tokio::test]
async fn emptied_directories_the_snapshot_did_not_have_are_removed_and_nothing_else() {
    let h = GitHarness::new();
    let (outside, listing) = sentinel(&h);
    fs::create_dir_all(outside.join("empty/inner")).expect("mkdir");
    h.write("d/kept.txt", b"kept\n");
    fs::create_dir_all(h.path("seen-empty")).expect("mkdir");
    let before = h.id().await;
    // The user's, made after the snapshot and before the operation began.
    fs::create_dir_all(h.path("users/own")).expect("mkdir");
    std::thread::sleep(Duration::from_millis(200));
    let began = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_millis() as u64;

    for dir in ["made/a/b", "d/made", "seen-empty/x", "full"] {
        fs::create_dir_all(h.path(dir)).expect("mkdir");
    }
    h.write("full/user.txt", b"the user's\n");
    std::os::unix::fs::symlink(&outside, h.path("link")).expect("symlink");
    let removed = h
        .port()
        .remove_emptied_dirs(
            h.root(),
            &before,
            rels(&[
                "made/a/b/f.txt",
                "d/made/g.txt",
                "seen-empty/x/h.txt",
                "full/i.txt",
                "link/empty/inner/j.txt",
                "d/kept.txt",
                "users/own/k.txt",
            ]),
            began,
        )
        .await
        .expect("remove");
    let removed: Vec<&str> = removed.iter().map(RelPath::as_str).collect();
    if !crate::harness::records_birth(h.root()) {
        // No directory can be told from one the user made since the operation began: none is removed.
        assert!(removed.is_empty(), "{removed:?}");
        assert!(is_real_dir(&h.path("made/a/b")));
        assert_eq!(list_tree(&outside), listing, "the sentinel is untouched");
        return;
    }
    assert_eq!(
        removed,
        ["made/a/b", "seen-empty/x", "made/a", "d/made", "made"]
    );
    assert!(!h.path("made").exists());
    assert!(
        is_real_dir(&h.path("seen-empty")),
        "seen empty at the track"
    );
    assert!(
        is_real_dir(&h.path("users/own")),
        "made before the operation"
    );
    assert_eq!(fs::read(h.path("d/kept.txt")).expect("read"), b"kept\n");
    assert_eq!(
        fs::read(h.path("full/user.txt")).expect("read"),
        b"the user's\n"
    );
    assert!(h.path("link").is_symlink());
    assert!(
        outside.join("empty/inner").is_dir(),
        "nothing through the symlink"
    );
    assert_eq!(list_tree(&outside), listing);
}

/// A loose object whose zlib stream ends, validly, before the size its header gives (a store file replaced
/// by hand, or cut short and closed) fails a restore that needs it as damage, naming the object, and the
/// file or symlink is left as it is (diff review: the copy ended silently, and a short file, or a symlink
/// to a cut target, would have been written).
#[tokio::test]
async fn a_blob_shorter_than_its_header_says_is_damage_and_writes_nothing() {
    use std::io::Write as _;
    for symlink in [false, true] {
        let h = GitHarness::new();
        if symlink {
            h.symlink("a.txt", "hello world\n");
        } else {
            h.write("a.txt", b"hello world\n");
        }
        let first = h.id().await;
        let id = blob_id(b"hello world\n");
        let object = h.store_dir().join("objects").join(&id[..2]).join(&id[2..]);
        assert!(object.is_file(), "a loose object: {}", object.display());
        let mut short = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        short.write_all(b"blob 12\0hello").expect("compress");
        fs::set_permissions(&object, fs::Permissions::from_mode(0o644)).expect("writable");
        fs::write(&object, short.finish().expect("compress")).expect("replaced");
        h.remove("a.txt");
        h.write("a.txt", b"changed\n");
        let refused = h
            .port()
            .restore(h.root(), &first, None)
            .await
            .expect_err("a short object is damage");
        assert!(
            matches!(refused, Error::Damaged(ref why) if why.contains(&id) && why.contains("5 bytes where its header says 12")),
            "symlink {symlink}: {refused:?}"
        );
        assert_eq!(h.read("a.txt"), text("changed\n"), "symlink {symlink}");
    }
}
