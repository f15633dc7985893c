//! Seeding a first snapshot from the user's index and objects (SPEC 2.1): no committed file is read, the
//! id is git's, the store owns every object before the id is returned (so the user's `.git` can go), and
//! nothing is seeded when the index may differ from the disk (`core.autocrlf`).

use std::fs;
use std::time::Duration;

use rewind_core::testkit::contract::snapshot::WorktreeHarness;

use crate::git_oracle::{GitOracle, blob_id, git};
use crate::harness::GitHarness;

const FILES: usize = 40;

/// Makes the worktree a git repository with `settings` and everything committed, the files' changes aged
/// past the racy second first: an index entry whose file changed (modification or status) in the second
/// the index was written is racy, and seeding hashes its file to confirm it.
pub(crate) fn commit_all(h: &GitHarness, settings: &[(&str, &str)]) {
    let root = h.root();
    git(root, &["init", "-q"]);
    for (key, value) in settings {
        git(root, &["config", key, value]);
    }
    crate::harness::age_past_racy(root);
    git(root, &["add", "-A"]);
    commit(h, "all");
}

/// Commits what is staged.
fn commit(h: &GitHarness, message: &str) {
    git(
        h.root(),
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            message,
        ],
    );
}

fn write_tree(h: &GitHarness) {
    for i in 0..FILES {
        h.write(
            &format!("dir{}/file{i}.txt", i % 4),
            format!("line of file {i}\r\nsecond\r\n").as_bytes(),
        );
    }
}

/// Tracks `h`, checks that `hashed` files were read from disk (`why`) and that the snapshot is the tree
/// real git writes for the worktree.
async fn track_as_git(h: &GitHarness, hashed: u64, why: &str) -> rewind_core::model::TrackOutcome {
    let outcome = h.track().await;
    assert_eq!(outcome.hashed, hashed, "{why}");
    assert_eq!(
        outcome.id.as_str(),
        GitOracle::new(None).write_tree(h.root()),
        "git's tree ({why})"
    );
    outcome
}

#[tokio::test]
async fn first_track_of_a_committed_packed_repository_reads_no_file_and_owns_its_objects() {
    let h = GitHarness::new();
    write_tree(&h);
    commit_all(&h, &[("core.autocrlf", "false")]);
    git(h.root(), &["gc", "-q"]);
    let outcome = track_as_git(
        &h,
        0,
        "every committed file was taken from the user's index",
    )
    .await;
    let packs: Vec<_> = fs::read_dir(h.store_dir().join("objects").join("pack"))
        .expect("the store has a pack directory")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
        .collect();
    assert_eq!(packs.len(), 1, "the user's pack was adopted whole");

    // The user's repository disappears; the snapshot still restores.
    fs::remove_dir_all(h.path(".git")).expect("remove .git");
    h.write("dir1/file1.txt", b"changed\n");
    h.remove("dir2/file2.txt");
    h.port()
        .restore(h.root(), &outcome.id, None)
        .await
        .expect("restore from the store's own objects");
    assert_eq!(
        fs::read(h.path("dir1/file1.txt")).expect("restored"),
        b"line of file 1\r\nsecond\r\n"
    );
    assert!(h.path("dir2/file2.txt").is_file());
}

#[tokio::test]
async fn loose_objects_are_adopted_too() {
    let h = GitHarness::new();
    write_tree(&h);
    commit_all(&h, &[("core.autocrlf", "false")]);
    let outcome = h.track().await;
    assert_eq!(outcome.hashed, 0);
    fs::remove_dir_all(h.path(".git")).expect("remove .git");
    h.remove("dir3/file3.txt");
    h.port()
        .restore(h.root(), &outcome.id, None)
        .await
        .expect("restore");
    assert!(h.path("dir3/file3.txt").is_file());
}

/// A loose object of the user's that a power loss left empty (git does not sync loose objects) while the
/// index names it: the file is hashed instead, and the store holds its real content, not the damaged
/// link (black-box: the hashed blob was skipped as already held, and the snapshot could not be restored).
#[tokio::test]
async fn a_damaged_loose_object_of_the_user_s_is_replaced_by_the_file_s_content() {
    let h = GitHarness::new();
    write_tree(&h);
    commit_all(&h, &[("core.autocrlf", "false")]);
    let path = "dir1/file1.txt";
    let blob = blob_id(&fs::read(h.path(path)).expect("read"));
    let loose = h.path(&format!(".git/objects/{}/{}", &blob[..2], &blob[2..]));
    fs::set_permissions(&loose, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("writable");
    fs::write(&loose, b"").expect("emptied");
    let outcome = track_as_git(&h, 1, "the damaged object's file is hashed").await;
    let store = h.store_dir();
    let shown = git(&store, &["--git-dir", ".", "cat-file", "-p", &blob]);
    assert_eq!(shown.as_bytes(), fs::read(h.path(path)).expect("read"));
    fs::remove_dir_all(h.path(".git")).expect("remove .git");
    h.remove(path);
    h.port()
        .restore(h.root(), &outcome.id, None)
        .await
        .expect("restore");
    assert_eq!(
        fs::read(h.path(path)).expect("restored"),
        b"line of file 1\r\nsecond\r\n"
    );
}

/// Files whose stat data no longer matches the index (touched since the commit, their content unchanged)
/// are read and hashed to confirm their recorded blob, which is then adopted: they count as hashed, as
/// `hashed` is documented (seed review F3: they were read, and the count said 0).
#[tokio::test]
async fn files_read_to_confirm_their_recorded_blob_count_as_hashed() {
    let h = GitHarness::new();
    write_tree(&h);
    commit_all(&h, &[("core.autocrlf", "false")]);
    let earlier = std::time::SystemTime::now() - Duration::from_secs(100);
    for i in 0..FILES {
        fs::File::options()
            .write(true)
            .open(h.path(&format!("dir{}/file{i}.txt", i % 4)))
            .and_then(|file| file.set_modified(earlier))
            .expect("touched");
    }
    track_as_git(&h, FILES as u64, "every file read to confirm its blob").await;
}

#[tokio::test]
async fn nothing_is_seeded_when_autocrlf_makes_the_index_differ_from_the_disk() {
    let h = GitHarness::new();
    write_tree(&h);
    // With autocrlf the user's blobs hold LF line ends while the files on disk hold CRLF.
    commit_all(&h, &[("core.autocrlf", "true")]);
    track_as_git(
        &h,
        FILES as u64,
        "every file was hashed from its bytes on disk",
    )
    .await;
}

/// A FIFO where the user's index should be is not opened (it would wait for a writer for good): nothing
/// is seeded, every file is hashed, and the snapshot is git's tree (fuzz: every first track hung).
#[tokio::test]
async fn a_fifo_in_place_of_the_user_s_index_is_not_opened() {
    let h = GitHarness::new();
    write_tree(&h);
    commit_all(&h, &[]);
    let index = h.root().join(".git/index");
    std::fs::remove_file(&index).expect("remove the index");
    let made = std::process::Command::new("mkfifo")
        .arg(&index)
        .status()
        .expect("run mkfifo");
    assert!(made.success());
    let tracked = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        track_as_git(&h, FILES as u64, "no index to seed from"),
    )
    .await;
    if tracked.is_err() {
        // A writer comes and goes, so the waiting open returns and the test ends.
        drop(std::fs::OpenOptions::new().write(true).open(&index));
        panic!("the track waited on the FIFO");
    }
}

/// A repository whose clean filter changes the bytes: the user's blobs hold them uppercased, the disk
/// lowercase, and the stat data matches. `sub/.gitattributes` holds `attributes` (the root's is read
/// whatever the ignore rules say; a nested one is found by the walk).
fn commit_with_upper_filter(h: &GitHarness, attributes: &[u8], ignore_attributes: bool) {
    for i in 0..4 {
        h.write(&format!("sub/f{i}.txt"), format!("hello {i}\n").as_bytes());
    }
    h.write("sub/.gitattributes", attributes);
    if ignore_attributes {
        h.write(".gitignore", b".gitattributes\n");
    }
    commit_all(
        h,
        &[
            ("core.autocrlf", "false"),
            ("filter.up.clean", "tr a-z A-Z"),
            ("filter.up.smudge", "cat"),
        ],
    );
}

/// git applies an ignored `.gitattributes` too, so its filter turns seeding off; the id is the disk's
/// bytes (SPEC 2.1: no filter in either direction), as the oracle's separate git dir sees them.
#[tokio::test]
async fn an_ignored_gitattributes_naming_a_filter_turns_seeding_off() {
    let h = GitHarness::new();
    commit_with_upper_filter(&h, b"*.txt filter=up\n", true);
    track_as_git(&h, 5, "every file hashed (the .gitignore too)").await;
}

/// A `.gitattributes` naming a filter that is deleted from the disk but not from the index still applies
/// (git reads the index's copy when the file is missing), so it turns seeding off: the user's blobs are
/// the filtered bytes, the disk's are not (black-box: `undo` wrote `HELLO` over `hello`). Likewise
/// attributes read from a tree with `attr.tree`, which need no file on disk at all.
#[tokio::test]
async fn a_gitattributes_only_the_index_holds_or_attr_tree_turns_seeding_off() {
    for attr_tree in [false, true] {
        let h = GitHarness::new();
        commit_with_upper_filter(&h, b"*.txt filter=up\n", false);
        if attr_tree {
            git(h.root(), &["config", "attr.tree", "HEAD"]);
        }
        std::fs::remove_file(h.path("sub/.gitattributes")).expect("rm");
        if attr_tree {
            // Only HEAD's tree has it now.
            git(h.root(), &["rm", "-q", "--cached", "sub/.gitattributes"]);
        }
        track_as_git(
            &h,
            4,
            &format!("every file hashed (attr.tree: {attr_tree})"),
        )
        .await;
    }
}

/// An attributes file that is not UTF-8 is still read (as bytes) for the words that turn seeding off.
#[tokio::test]
async fn a_gitattributes_that_is_not_utf8_still_turns_seeding_off() {
    let h = GitHarness::new();
    commit_with_upper_filter(&h, b"# caf\xe9\n*.txt filter=up\n", false);
    track_as_git(&h, 5, "every file hashed").await;
}

/// A committed file over the size cap is skipped as it would be if hashed: seeding does not track what
/// a plain copy of the same tree would skip.
#[tokio::test]
async fn a_committed_file_over_the_size_cap_is_skipped_as_when_hashed() {
    let h = GitHarness::with_config(|config, _| config.size_cap = 1_000);
    h.write("small.txt", b"small\n");
    h.write("big.bin", &[7u8; 2_000]);
    commit_all(&h, &[("core.autocrlf", "false")]);
    let outcome = h.track().await;
    assert_eq!(
        outcome
            .skipped
            .iter()
            .map(|s| s.path.as_str())
            .collect::<Vec<_>>(),
        ["big.bin"],
        "the big file is skipped, seeded or not"
    );
    let copy = GitHarness::with_config(|config, _| config.size_cap = 1_000);
    copy.write("small.txt", b"small\n");
    copy.write("big.bin", &[7u8; 2_000]);
    assert_eq!(
        copy.track().await.id,
        outcome.id,
        "the same tree as a plain copy's"
    );
}

/// The user's blobs were made under `core.autocrlf=true` (LF) and the setting is off now, so nothing in the
/// settings forbids seeding; the stat data matches, but each blob's size is not the file's (CRLF on disk):
/// those files are hashed, and the snapshot is the disk's bytes.
#[tokio::test]
async fn blobs_made_under_other_settings_are_not_seeded() {
    blobs_made_under_other_settings(false).await;
}

/// The same with the blobs in a pack: their sizes are read from the pack's entries (`pack_header`).
#[tokio::test]
async fn packed_blobs_made_under_other_settings_are_not_seeded() {
    blobs_made_under_other_settings(true).await;
}

async fn blobs_made_under_other_settings(packed: bool) {
    let h = GitHarness::new();
    write_tree(&h);
    let root = h.root();
    git(root, &["init", "-q"]);
    // Added with autocrlf on (the blobs hold LF), then the setting is off (the repository says false).
    git(root, &["-c", "core.autocrlf=true", "add", "-A"]);
    git(root, &["commit", "-q", "-m", "all"]);
    git(root, &["config", "core.autocrlf", "false"]);
    if packed {
        git(root, &["gc", "-q"]);
        assert!(
            git(root, &["count-objects", "-v"]).contains("\ncount: 0\n")
                || git(root, &["count-objects", "-v"]).starts_with("count: 0\n"),
            "every object is packed"
        );
    }
    let blob = git(root, &["ls-files", "-s", "dir1/file1.txt"]);
    let blob = blob.split_whitespace().nth(1).expect("an index entry");
    assert_eq!(
        git(root, &["cat-file", "-s", blob]).trim(),
        "22",
        "the blob holds LF line ends (the file, CRLF, is 24 bytes)"
    );
    track_as_git(
        &h,
        FILES as u64,
        "every file whose blob differs in size was hashed",
    )
    .await;
}

/// Entries git cannot vouch for (racy: the index is no newer than the files) are confirmed by hashing the
/// files, without storing them: a file that is its recorded blob adopts that blob (nothing compressed or
/// written, and the store owns it, so the user's `.git` can go); one edited since, with the same size, is
/// stored from its own bytes. The id is git's for the disk as it is.
#[tokio::test]
async fn racy_entries_are_confirmed_by_their_hash_and_adopted() {
    let h = GitHarness::new();
    write_tree(&h);
    commit_all(&h, &[("core.autocrlf", "false")]);
    // Same size, other bytes: only its hash tells it from the recorded blob.
    h.write("dir0/file0.txt", b"LINE OF FILE 0\r\nsecond\r\n");
    // Every entry racy: the index seems written before the files (the harness dates them in the past).
    fs::File::options()
        .write(true)
        .open(h.path(".git/index"))
        .expect("the index")
        .set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000))
        .expect("set its mtime");
    // Every file was read and hashed to confirm it (counted since seed review F3); the others adopted the
    // user's blobs, which the restore below reads with the user's `.git` gone.
    let outcome = track_as_git(&h, FILES as u64, "every racy file read and hashed").await;
    restored_without_the_user_s_git(
        &h,
        &outcome.id,
        &[
            ("dir3/file3.txt", b"line of file 3\r\nsecond\r\n"),
            ("dir0/file0.txt", b"LINE OF FILE 0\r\nsecond\r\n"),
        ],
    )
    .await;
}

/// Removes the user's `.git` and each of `files`, restores `snapshot` from the store's own objects, and
/// checks that every file is back with its content.
async fn restored_without_the_user_s_git(
    h: &GitHarness,
    snapshot: &rewind_core::model::SnapshotId,
    files: &[(&str, &[u8])],
) {
    fs::remove_dir_all(h.path(".git")).expect("remove .git");
    for (path, _) in files {
        h.remove(path);
    }
    h.port()
        .restore(h.root(), snapshot, None)
        .await
        .expect("restore from the store's own objects");
    for (path, content) in files {
        assert_eq!(
            fs::read(h.path(path)).expect("restored"),
            *content,
            "{path}"
        );
    }
}

/// A repository whose `core.worktree` is a subdirectory of the directory holding `.git`: git's worktree
/// is that subdirectory, and the `.gitignore` above it is not git's (black-box: rewind applied it, so a
/// committed `a.txt` was left out of every snapshot and lost by `undo` after a step deleted it). The
/// snapshot is git's tree; `info/exclude` still applies.
#[tokio::test]
async fn core_worktree_makes_that_directory_the_checkout_root() {
    let h = GitHarness::new();
    let wt = h.root().join("wt");
    std::fs::create_dir_all(&wt).expect("mkdir");
    git(h.root(), &["init", "-q"]);
    git(h.root(), &["config", "core.worktree", "../wt"]);
    h.write(".gitignore", b"*.txt\n");
    h.write("wt/a.txt", b"important\n");
    h.write("wt/b.md", b"b\n");
    h.write("wt/c.secret", b"c\n");
    std::fs::write(h.root().join(".git/info/exclude"), "*.secret\n").expect("exclude");
    git(&wt, &["add", "-A"]);
    git(
        &wt,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-q",
            "-m",
            "i",
        ],
    );
    let view = h.view(&wt);
    let outcome = view.track().await;
    let excludes = tempfile::NamedTempFile::new().expect("temp");
    std::fs::write(excludes.path(), "*.secret\n").expect("write");
    assert_eq!(
        outcome.id.as_str(),
        GitOracle::new(Some(excludes.path())).write_tree(&wt),
        "a.txt is tracked, c.secret is not"
    );
}

/// A seeded pack holds the user's whole history. While the user's repository has the pack too (a hard
/// link, which takes no room), gc keeps it whole; once the user's copy is gone (history rewritten and
/// collected, or the repository deleted), gc keeps only what the snapshots reach, copied into packs of the
/// store's own: a blob the user purged is gone from the store too, and the snapshot still restores
/// (black-box: it stayed for good).
#[tokio::test]
async fn a_seeded_pack_the_user_no_longer_has_keeps_only_what_snapshots_reach() {
    let h = GitHarness::new();
    // Incompressible, so that collecting it frees more than the copies take.
    let mut state = 0x5b7e_u32;
    let secret: Vec<u8> = (0..200_000)
        .map(|_| {
            state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (state >> 16) as u8
        })
        .collect();
    h.write("secret.bin", &secret);
    // Over the size own packs take: copied out as a loose object.
    let big: Vec<u8> = (0..400_000u32).map(|i| (i % 251) as u8).collect();
    h.write("big.bin", &big);
    write_tree(&h);
    commit_all(&h, &[("core.autocrlf", "false")]);
    git(h.root(), &["rm", "-q", "secret.bin"]);
    commit(&h, "purge");
    git(h.root(), &["gc", "-q"]);
    let first = track_as_git(&h, 0, "seeded from the user's pack").await.id;
    let secret_id = blob_id(&secret);
    assert!(h.stored(&secret_id), "the seeded pack holds the history");

    h.port()
        .gc(h.root(), std::slice::from_ref(&first), Duration::ZERO)
        .await
        .expect("gc");
    assert!(
        h.stored(&secret_id),
        "kept whole while the user's repository has the pack"
    );

    // A third name of the pack (a `git clone` of the repository hardlinks its objects; so does a backup
    // made with links) keeps nothing once the user's own is gone (review: more than one name was taken
    // for the user's repository still having it).
    let other = h.base().join("linked-elsewhere");
    fs::create_dir_all(&other).expect("mkdir");
    for entry in fs::read_dir(h.path(".git/objects/pack"))
        .expect("the user's packs")
        .flatten()
    {
        fs::hard_link(entry.path(), other.join(entry.file_name())).expect("another link");
    }
    fs::remove_dir_all(h.path(".git")).expect("the user's repository goes");
    let report = h
        .port()
        .gc(h.root(), std::slice::from_ref(&first), Duration::ZERO)
        .await
        .expect("gc");
    assert!(!h.stored(&secret_id), "the purged blob is collected");
    assert!(report.bytes_freed > 0, "{report:?}");
    let seeded: Vec<String> = fs::read_dir(h.store_dir().join("objects").join("pack"))
        .expect("the pack directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !name.starts_with("pack-rewind-"))
        .collect();
    assert!(seeded.is_empty(), "{seeded:?}");
    crate::packs::fsck(&h);
    let big_id = blob_id(&big);
    assert!(
        h.store_dir()
            .join("objects")
            .join(&big_id[..2])
            .join(&big_id[2..])
            .is_file(),
        "the big blob is loose"
    );
    h.write("dir1/file1.txt", b"changed\n");
    h.remove("dir2/file2.txt");
    h.remove("big.bin");
    h.port()
        .restore(h.root(), &first, None)
        .await
        .expect("restore");
    assert_eq!(
        fs::read(h.path("dir1/file1.txt")).expect("restored"),
        b"line of file 1\r\nsecond\r\n"
    );
    assert!(h.path("dir2/file2.txt").is_file());
    assert_eq!(fs::read(h.path("big.bin")).expect("restored"), big);
}

/// A panic during the walk of a first track that may be seeded (here a test's hook) fails the track: the
/// threads that look at the walk's files meanwhile stop with it. Review: they waited for the walk's
/// files for ever, so the track hung with the store locked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_seeded_walk_fails_the_track_instead_of_hanging() {
    let h = GitHarness::with_config(|config, _| {
        config.walk_hook = Some(std::sync::Arc::new(|dir: &str| {
            if dir == "dir2/" {
                panic!("a walk that breaks half-way");
            }
        }));
    });
    write_tree(&h);
    commit_all(&h, &[("core.autocrlf", "false")]);
    let tracked = tokio::time::timeout(Duration::from_secs(30), h.port().track(h.root())).await;
    let outcome = tracked.expect("the track ends instead of hanging");
    assert!(
        outcome.is_err(),
        "the walk's panic fails the track: {outcome:?}"
    );
}

/// A split index (`core.splitIndex`, `git update-index --split-index`): `.git/index` holds only the
/// entries changed since the shared index was written, and names `sharedindex.<id>` for the rest. Seeding
/// reads both, so no committed file is read, also after one file was staged again into the split part.
#[tokio::test]
async fn a_split_index_is_read_with_its_shared_index() {
    let h = GitHarness::new();
    write_tree(&h);
    commit_all(
        &h,
        &[("core.autocrlf", "false"), ("core.splitIndex", "true")],
    );
    git(h.root(), &["update-index", "--split-index"]);
    let shared = fs::read_dir(h.path(".git"))
        .expect("read .git")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("sharedindex."))
        .count();
    assert!(shared > 0, "git wrote a shared index");
    // One file changed and staged again: its entry lives in the split part, which replaces the shared
    // index's entry for it.
    h.write("dir1/file1.txt", b"staged again, another size\n");
    crate::harness::age_past_racy(h.root());
    git(h.root(), &["add", "dir1/file1.txt"]);
    let outcome = track_as_git(&h, 0, "every file taken from the split index").await;
    restored_without_the_user_s_git(
        &h,
        &outcome.id,
        &[
            ("dir1/file1.txt", b"staged again, another size\n"),
            ("dir2/file2.txt", b"line of file 2\r\nsecond\r\n"),
        ],
    )
    .await;
}
