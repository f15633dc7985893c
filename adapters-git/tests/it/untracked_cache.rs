//! The untracked cache (the stat cache's directory listings): a directory whose stat data is unchanged is
//! not read again, and its names are not matched again under unchanged rules. These tests change the
//! worktree in the ways that must still be seen — a new file, an edited `.gitignore`, `info/exclude` or
//! global excludes file, a directory replaced at once — with every directory backdated first (so the cache
//! really answers for the directories left alone), and check each snapshot against git's `write-tree`.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use rewind_core::testkit::contract::snapshot::WorktreeHarness;
use rewind_git::ExcludesFile;

use crate::git_oracle::{GitOracle, init_repo};
use crate::harness::{GitHarness, age_past_racy};

/// The mtime of a directory, in nanoseconds.
fn dir_mtime(path: &Path) -> i128 {
    let meta = fs::symlink_metadata(path).expect("stat a directory");
    i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec())
}

/// Tracks, checks the id against git's, and returns it.
async fn track_as_git(h: &GitHarness, oracle: &GitOracle) -> String {
    let ours = h.track().await;
    let theirs = oracle.write_tree(h.root());
    assert_eq!(ours.id.as_str(), theirs, "track equals git write-tree");
    ours.id.to_string()
}

/// A file created in a directory whose listing is cached changes the directory's mtime: it is seen, and
/// so is a file created in a directory below it.
#[tokio::test]
async fn a_new_file_in_a_cached_directory_is_seen() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    h.write("a/one.txt", b"one\n");
    h.write("a/b/two.txt", b"two\n");
    h.write("c/three.txt", b"three\n");
    age_past_racy(h.root());
    let first = track_as_git(&h, &oracle).await;
    // Answered from the caches: the same id, nothing read.
    let again = h.track().await;
    assert_eq!((again.id.as_str(), again.hashed), (first.as_str(), 0));

    let before = dir_mtime(&h.path("a/b"));
    h.write("a/b/new.txt", b"new\n");
    assert_ne!(
        dir_mtime(&h.path("a/b")),
        before,
        "creating a file sets the directory's mtime"
    );
    age_past_racy(h.root());
    let second = track_as_git(&h, &oracle).await;
    assert_ne!(second, first, "the new file is in the snapshot");

    // A new directory with a file, in the root: seen too.
    h.write("d/e/f.txt", b"f\n");
    age_past_racy(h.root());
    let third = track_as_git(&h, &oracle).await;
    assert_ne!(third, second);
    // And removing them again gives the earlier tree back.
    h.remove("d/e/f.txt");
    h.remove("a/b/new.txt");
    age_past_racy(h.root());
    assert_eq!(track_as_git(&h, &oracle).await, first);
}

/// Editing a `.gitignore` in place does not touch its directory's mtime, yet a file it no longer ignores is
/// tracked at once (the rules' hash differs, so names are matched again), and one it ignores now leaves.
#[tokio::test]
async fn a_gitignore_edit_that_unignores_a_file_is_seen() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    h.write("a/.gitignore", b"*.log\n");
    h.write("a/x.log", b"log\n");
    h.write("a/keep.txt", b"keep\n");
    h.write("a/sub/deep.log", b"deep\n");
    h.write("a/sub/deep.txt", b"deep\n");
    h.write(".gitignore", b"build/\n");
    h.write("build/out.o", b"object\n");
    age_past_racy(h.root());
    let first = track_as_git(&h, &oracle).await;

    let (a, sub) = (dir_mtime(&h.path("a")), dir_mtime(&h.path("a/sub")));
    h.write("a/.gitignore", b"*.txt\n");
    assert_eq!(
        (dir_mtime(&h.path("a")), dir_mtime(&h.path("a/sub"))),
        (a, sub),
        "an edit in place leaves the directories' mtimes alone"
    );
    let second = track_as_git(&h, &oracle).await;
    assert_ne!(
        second, first,
        "x.log and deep.log are in, keep.txt and deep.txt out"
    );

    // The root `.gitignore` stops ignoring an ignored directory: it is entered and tracked.
    let root = dir_mtime(h.root());
    h.write(".gitignore", b"\n");
    assert_eq!(dir_mtime(h.root()), root);
    let third = track_as_git(&h, &oracle).await;
    assert_ne!(third, second, "build/out.o is in");
    assert_eq!(h.track().await.id.as_str(), third, "and stays in");
}

/// `info/exclude` and the global excludes file lie outside the tree: editing them changes what is ignored
/// in every directory, cached or not.
#[tokio::test]
async fn outside_rule_edits_are_seen() {
    let h = GitHarness::with_config(|config, base| {
        config.excludes_file = ExcludesFile::Path(base.join("global-ignore"));
    });
    let global = h.base().join("global-ignore");
    fs::write(&global, "*.tmp\n").expect("write the global excludes");
    init_repo(h.root());
    let exclude = h.root().join(".git/info/exclude");
    fs::create_dir_all(exclude.parent().expect("info/ has a parent")).expect("mkdir info");
    fs::write(&exclude, "*.bak\n").expect("write info/exclude");
    let oracle = GitOracle::new(Some(&global));
    h.write("src/main.rs", b"fn main() {}\n");
    h.write("src/old.bak", b"old\n");
    h.write("src/scratch.tmp", b"scratch\n");
    age_past_racy(h.root());
    let first = track_as_git(&h, &oracle).await;

    fs::write(&exclude, "").expect("empty info/exclude");
    let second = track_as_git(&h, &oracle).await;
    assert_ne!(second, first, "src/old.bak is in");

    fs::write(&global, "*.rs\n").expect("edit the global excludes");
    let third = track_as_git(&h, &oracle).await;
    assert_ne!(third, second, "src/scratch.tmp is in, src/main.rs out");
}

/// A directory removed and made again at once (the same second, as a racy cache entry could not tell
/// apart on a filesystem with coarse timestamps), holding other files and given the old mtime back: read
/// again, never answered from the cache.
#[tokio::test]
async fn a_directory_replaced_within_the_same_second_is_read_again() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    h.write("keep/k.txt", b"k\n");
    h.write("d/one.txt", b"one\n");
    h.write("d/inner/two.txt", b"two\n");
    // No backdating: `d` is racy for the track that caches it.
    let first = track_as_git(&h, &oracle).await;
    let old = fs::symlink_metadata(h.path("d"))
        .and_then(|m| m.modified())
        .expect("the mtime of d");
    fs::remove_dir_all(h.path("d")).expect("remove d");
    h.write("d/three.txt", b"three\n");
    h.write("d/inner/four.txt", b"four\n");
    for dir in ["d/inner", "d"] {
        fs::File::open(h.path(dir))
            .and_then(|handle| handle.set_modified(old))
            .expect("give the old mtime back");
    }
    let second = track_as_git(&h, &oracle).await;
    assert_ne!(second, first);
    // A directory replaced by a file of the same name, and back.
    fs::remove_dir_all(h.path("d")).expect("remove d");
    h.write("d", b"now a file\n");
    track_as_git(&h, &oracle).await;
    h.remove("d");
    h.write("d/five.txt", b"five\n");
    track_as_git(&h, &oracle).await;
}

/// Files written within the last second are racy: each re-track hashes them again. While nothing about
/// them changed and they would still be racy, the stat cache is not rewritten (a new one would answer no
/// better); an edit that keeps size and mode is still seen, and once the files are a second old the cache
/// is written again and answers for them.
#[tokio::test]
async fn racy_files_are_hashed_again_without_rewriting_the_cache() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    // Written now, not backdated as the harness's writes are: these files are racy.
    let write_now = |rel: &str, bytes: &[u8]| {
        let path = h.path(rel);
        fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        fs::write(&path, bytes).expect("write");
    };
    write_now("a/one.txt", b"one\n");
    write_now("b/two.txt", b"two\n");
    let first = track_as_git(&h, &oracle).await;
    let cache = h.store_dir().join("rewind").join("stat-cache");
    let written = fs::symlink_metadata(&cache).expect("the stat cache exists");

    let again = h.track().await;
    assert_eq!(again.id.as_str(), first);
    assert!(again.hashed > 0, "fresh files are racy and hashed again");
    let after = fs::symlink_metadata(&cache).expect("the stat cache exists");
    assert_eq!(
        (after.ino(), after.mtime(), after.mtime_nsec()),
        (written.ino(), written.mtime(), written.mtime_nsec()),
        "a re-track that learned nothing leaves the cache as it was"
    );

    // Same size, same mode, same second: still seen.
    write_now("a/one.txt", b"ONE\n");
    let edited = track_as_git(&h, &oracle).await;
    assert_ne!(edited, first);

    std::thread::sleep(std::time::Duration::from_millis(1100));
    let settled = h.track().await;
    assert_eq!(settled.id.as_str(), edited);
    let settled_again = h.track().await;
    assert_eq!(
        (settled_again.id.as_str(), settled_again.hashed),
        (edited.as_str(), 0),
        "a second later the cache answers for every file"
    );
}

/// A directory laid out as a git directory (`HEAD`, `objects/`, `refs/`) is a bare repository, never
/// tracked content, when its `HEAD` holds a ref or an id, and ordinary files otherwise. That verdict
/// depends on `HEAD`'s content, which an edit in place changes without its directory's stat data, so such
/// a listing is read again at every track (review: a cached listing kept the first verdict).
#[tokio::test]
async fn a_git_directory_s_verdict_follows_its_head_edited_in_place() {
    let h = GitHarness::new();
    h.write("a.txt", b"a\n");
    age_past_racy(h.root());
    let without = h.track().await.id;
    h.write("fx/HEAD", b"placeholder\n");
    h.write("fx/objects/x/f", b"data\n");
    fs::create_dir_all(h.path("fx/refs")).expect("mkdir refs");
    age_past_racy(h.root());
    let with = h.track().await.id;
    assert_ne!(with, without, "not a git directory: its files are tracked");
    // Cached, past the racy margin.
    age_past_racy(h.root());
    assert_eq!(h.track().await.id, with);
    let before = dir_mtime(&h.path("fx"));
    for (head, expected, what) in [
        ("ref: refs/heads/main\n", &without, "a bare repository now"),
        ("placeholder\n", &with, "ordinary files again"),
    ] {
        // In place: the directory's stat data stays as it was.
        fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(h.path("fx/HEAD"))
            .and_then(|mut file| std::io::Write::write_all(&mut file, head.as_bytes()))
            .expect("edit HEAD in place");
        assert_eq!(dir_mtime(&h.path("fx")), before);
        assert_eq!(&h.track().await.id, expected, "{what}");
    }
}
