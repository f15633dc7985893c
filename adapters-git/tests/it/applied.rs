//! What a revert or a restore writes, the stat cache learns (as git's checkout refreshes its index; the
//! cache's own consistency is a unit test in `stat_cache.rs`): the next track hashes again only the files
//! just written (they are racy) and still gives git's tree, also when a file is edited right after the write or a file and a directory trade places.
//! A restore of given paths looks only at those paths; a path that is a directory falls back to comparing
//! whole trees. Every snapshot is checked against git's `write-tree`.

use std::fs;
use std::path::Path;

use rewind_core::model::{RelPath, SnapshotId, SnapshotPatch};
use rewind_core::testkit::contract::snapshot::WorktreeHarness;

use crate::git_oracle::GitOracle;
use crate::harness::{Flagged, GitHarness, age_past_racy, backdate};
use crate::races::{Hook, arm, racing_in};

fn rels(paths: &[&str]) -> Vec<RelPath> {
    paths
        .iter()
        .map(|p| RelPath::new(*p).expect("a relative path"))
        .collect()
}

/// Tracks, checks the id against git's, and returns it.
async fn track_as_git(h: &GitHarness, oracle: &GitOracle) -> SnapshotId {
    let ours = h.track().await;
    assert_eq!(
        ours.id.as_str(),
        oracle.write_tree(h.root()),
        "track equals git write-tree"
    );
    ours.id
}

/// Twenty files in four directories, all backdated: the cache answers for every one.
async fn settled_tree(h: &GitHarness, oracle: &GitOracle) -> SnapshotId {
    for i in 0..20 {
        h.write(
            &format!("d{}/f{i:02}.txt", i % 4),
            format!("file {i}\n").as_bytes(),
        );
    }
    age_past_racy(h.root());
    let id = track_as_git(h, oracle).await;
    let again = h.track().await;
    assert_eq!((again.id.clone(), again.hashed), (id.clone(), 0));
    id
}

/// Files `f{i}` of `settled_tree` edited (as a step would).
fn edit_by_a_step(h: &GitHarness, indices: &[usize]) {
    for i in indices {
        h.write(&format!("d{}/f{i:02}.txt", i % 4), b"edited by the step\n");
    }
}

#[tokio::test]
async fn after_a_revert_the_next_track_hashes_only_the_files_it_wrote() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    let before = settled_tree(&h, &oracle).await;
    // A step: three edits, one deletion, one new file.
    edit_by_a_step(&h, &[1, 6, 11]);
    h.remove("d0/f04.txt");
    h.write("d1/new.txt", b"new\n");
    age_past_racy(h.root());
    let after = track_as_git(&h, &oracle).await;
    let files = rels(&[
        "d1/f01.txt",
        "d2/f06.txt",
        "d3/f11.txt",
        "d0/f04.txt",
        "d1/new.txt",
    ]);
    let outcome = h
        .port()
        .revert(
            h.root(),
            &[SnapshotPatch {
                hash: before.clone(),
                files,
            }],
            &after,
        )
        .await
        .expect("revert");
    assert_eq!((outcome.written.len(), outcome.deleted.len()), (4, 1));

    let next = h.track().await;
    assert_eq!(
        next.id, before,
        "the reverted worktree is the pre-step tree"
    );
    assert_eq!(next.id, outcome.applied);
    assert_eq!(next.id.as_str(), oracle.write_tree(h.root()));
    assert_eq!(
        next.hashed, 4,
        "only the four files the revert wrote are read again (racy), not the other sixteen"
    );

    // An edit right after the revert that keeps size and mode is seen (the written files stay racy).
    fs::write(h.path("d2/f06.txt"), b"file 7\n").expect("edit");
    let edited = track_as_git(&h, &oracle).await;
    assert_ne!(edited, before);
}

#[tokio::test]
async fn after_a_restore_of_given_paths_the_next_track_hashes_only_those() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    let before = settled_tree(&h, &oracle).await;
    h.write("d0/f00.txt", b"changed\n");
    h.write("d1/f05.txt", b"changed too\n");
    h.write("d2/f02.txt", b"not restored\n");
    h.remove("d3/f03.txt");
    age_past_racy(h.root());
    let changed = track_as_git(&h, &oracle).await;

    let outcome = h
        .port()
        .restore(
            h.root(),
            &before,
            Some(rels(&[
                "d0/f00.txt",
                "d1/f05.txt",
                "d3/f03.txt",
                "d0/f08.txt",
            ])),
        )
        .await
        .expect("restore given paths");
    let written: Vec<&str> = outcome.written.iter().map(|p| p.as_str()).collect();
    assert_eq!(written, ["d0/f00.txt", "d1/f05.txt", "d3/f03.txt"]);
    assert!(outcome.deleted.is_empty() && outcome.kept.is_empty());
    assert_eq!(
        fs::read(h.path("d2/f02.txt")).expect("read"),
        b"not restored\n",
        "a path outside the scope is left as it is"
    );
    let next = h.track().await;
    assert_eq!(next.id.as_str(), oracle.write_tree(h.root()));
    assert_ne!(next.id, changed);
    assert_eq!(
        next.hashed, 3,
        "only the three files written are read again"
    );

    // Restoring the same paths again writes nothing: what is on disk already matches.
    let again = h
        .port()
        .restore(
            h.root(),
            &before,
            Some(rels(&["d0/f00.txt", "d1/f05.txt", "d3/f03.txt"])),
        )
        .await
        .expect("restore again");
    assert!(again.written.is_empty() && again.deleted.is_empty());
}

/// A step renamed the only file of a directory, and moved a deep file up, removing the directories it
/// left empty: the revert's deletes empty `lone` and `deep` and remove them, and its writes make them
/// again, to git's tree of the state gone back to. (The check for edits saw `lone` there before the
/// deletes: a write after a delete does not take that look as still standing.)
#[tokio::test]
async fn a_revert_remakes_the_directories_its_deletes_removed() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    settled_tree(&h, &oracle).await;
    h.write("lone/old-name.txt", b"lone\n");
    h.write("deep/a/b/file.txt", b"deep\n");
    age_past_racy(h.root());
    let before = track_as_git(&h, &oracle).await;
    fs::rename(h.path("lone/old-name.txt"), h.path("lone/new-name.txt")).expect("rename");
    fs::rename(h.path("deep/a/b/file.txt"), h.path("deep/moved.txt")).expect("rename");
    fs::remove_dir_all(h.path("deep/a")).expect("remove the emptied directories");
    age_past_racy(h.root());
    let after = track_as_git(&h, &oracle).await;
    let outcome = h
        .port()
        .revert(
            h.root(),
            &[SnapshotPatch {
                hash: before.clone(),
                files: rels(&[
                    "lone/new-name.txt",
                    "lone/old-name.txt",
                    "deep/moved.txt",
                    "deep/a/b/file.txt",
                ]),
            }],
            &after,
        )
        .await
        .expect("revert the renames");
    assert!(outcome.kept.is_empty(), "{outcome:?}");
    assert_eq!(
        outcome.written,
        rels(&["deep/a/b/file.txt", "lone/old-name.txt"])
    );
    assert_eq!(
        outcome.deleted,
        rels(&["deep/moved.txt", "lone/new-name.txt"])
    );
    assert_eq!(outcome.applied, before);
    assert_eq!(
        fs::read(h.path("lone/old-name.txt")).expect("read"),
        b"lone\n"
    );
    assert_eq!(track_as_git(&h, &oracle).await, before);
}

#[tokio::test]
async fn a_file_and_a_directory_trading_places_keep_the_cache_exact() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    settled_tree(&h, &oracle).await;
    h.write("swap", b"a file\n");
    h.write("dir/inner/deep.txt", b"deep\n");
    h.write("dir/top.txt", b"top\n");
    age_past_racy(h.root());
    let files_first = track_as_git(&h, &oracle).await;
    // The step makes `swap` a directory and `dir` a file.
    h.remove("swap");
    h.write("swap/inside.txt", b"inside\n");
    h.remove("dir/inner/deep.txt");
    h.remove("dir/top.txt");
    if h.path("dir").exists() {
        fs::remove_dir_all(h.path("dir")).expect("remove dir");
    }
    h.write("dir", b"now a file\n");
    age_past_racy(h.root());
    let swapped = track_as_git(&h, &oracle).await;

    let outcome = h
        .port()
        .revert(
            h.root(),
            &[SnapshotPatch {
                hash: files_first.clone(),
                files: rels(&[
                    "swap",
                    "swap/inside.txt",
                    "dir",
                    "dir/inner/deep.txt",
                    "dir/top.txt",
                ]),
            }],
            &swapped,
        )
        .await
        .expect("revert the swap");
    assert_eq!(outcome.applied, files_first);
    assert_eq!(track_as_git(&h, &oracle).await, files_first);

    // And forward again, by a restore of the same paths (directories among them: whole trees compared).
    h.port()
        .restore(h.root(), &swapped, Some(rels(&["swap", "dir"])))
        .await
        .expect("restore the swap");
    assert_eq!(track_as_git(&h, &oracle).await, swapped);
    h.port()
        .restore(h.root(), &files_first, Some(rels(&["swap", "dir"])))
        .await
        .expect("restore back");
    assert_eq!(track_as_git(&h, &oracle).await, files_first);
}

/// A restore of given paths compares each with what is tracked now: an ignored file in the scope is left
/// alone, as is one behind a symlinked parent, and an unreadable one fails the restore before anything
/// is written.
#[tokio::test]
async fn a_restore_of_given_paths_reads_each_path_as_a_track_would() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    h.write("a.txt", b"a\n");
    h.write("b.txt", b"b\n");
    h.write("secret.env", b"v1\n");
    age_past_racy(h.root());
    let first = track_as_git(&h, &oracle).await;
    h.write("a.txt", b"a changed\n");
    h.write("b.txt", b"b changed\n");
    h.write(".gitignore", b"*.env\n");
    h.write("secret.env", b"v2\n");
    age_past_racy(h.root());
    track_as_git(&h, &oracle).await;

    let outcome = h
        .port()
        .restore(h.root(), &first, Some(rels(&["a.txt", "secret.env"])))
        .await
        .expect("restore");
    let written: Vec<&str> = outcome.written.iter().map(|p| p.as_str()).collect();
    assert_eq!(written, ["a.txt"]);
    let kept: Vec<&str> = outcome.kept.iter().map(|k| k.path.as_str()).collect();
    assert_eq!(kept, ["secret.env"], "an ignored file is not overwritten");
    assert_eq!(fs::read(h.path("secret.env")).expect("read"), b"v2\n");
    assert_eq!(fs::read(h.path("a.txt")).expect("read"), b"a\n");

    h.fail_reads("b.txt");
    let error = h
        .port()
        .restore(h.root(), &first, Some(rels(&["b.txt"])))
        .await
        .expect_err("an unreadable file fails the restore");
    assert!(error.to_string().contains("b.txt"), "{error}");
    assert_eq!(fs::read(h.path("b.txt")).expect("read"), b"b changed\n");
}

/// A restore of given paths changes only those: `d/f` cannot be put back while `d` is a tracked file now
/// and not among the paths, so it is kept, and the reason says that `d` is tracked content outside the
/// paths (not that it is untracked); restoring `d` with it puts both back.
#[tokio::test]
async fn a_restore_of_given_paths_keeps_one_below_a_tracked_file_outside_them_and_says_why() {
    let h = GitHarness::new();
    h.write("d/f", b"f\n");
    let first = h.id().await;
    fs::remove_dir_all(h.path("d")).expect("remove d");
    h.write("d", b"d is a file now\n");
    h.id().await;

    let outcome = h
        .port()
        .restore(h.root(), &first, Some(rels(&["d/f"])))
        .await
        .expect("restore");
    assert!(outcome.written.is_empty(), "{outcome:?}");
    let kept: Vec<(&str, &str)> = outcome
        .kept
        .iter()
        .map(|k| (k.path.as_str(), k.reason.as_str()))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].0, "d/f");
    assert!(
        kept[0].1.contains("tracked content outside the paths"),
        "{kept:?}"
    );
    assert_eq!(fs::read(h.path("d")).expect("read"), b"d is a file now\n");

    let both = h
        .port()
        .restore(h.root(), &first, Some(rels(&["d", "d/f"])))
        .await
        .expect("restore both");
    assert!(both.kept.is_empty(), "{both:?}");
    assert_eq!(fs::read(h.path("d/f")).expect("read"), b"f\n");
}

/// SPEC 2.5: one operation at a time on a store, across processes too. While another holder has the
/// store's lock (here the test, as another process would), a comparison of snapshots and a track both wait,
/// and go on once it is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_operation_waits_for_the_store_lock() {
    use std::time::Duration;

    let h = GitHarness::new();
    h.write("a.txt", b"a\n");
    let first = h.id().await;
    h.write("a.txt", b"b\n");
    let second = h.id().await;
    let lock = fs::File::options()
        .write(true)
        .open(h.store_dir().join("rewind").join("lock"))
        .expect("open the store's lock file");

    lock.lock().expect("take the store's lock");
    let comparing = {
        let h = h.clone();
        let (first, second) = (first.clone(), second.clone());
        tokio::spawn(async move {
            h.port()
                .changed_between(h.root(), &first, &second)
                .await
                .expect("compare")
        })
    };
    let tracking = {
        let h = h.clone();
        tokio::spawn(async move { h.id().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!comparing.is_finished(), "a comparison waits for the lock");
    assert!(!tracking.is_finished(), "a track waits for the lock");
    lock.unlock().expect("unlock");
    let changed = tokio::time::timeout(Duration::from_secs(20), comparing)
        .await
        .expect("the comparison goes on once the lock is free")
        .expect("join");
    assert_eq!(changed, rels(&["a.txt"]));
    let tracked = tokio::time::timeout(Duration::from_secs(20), tracking)
        .await
        .expect("the track goes on once the lock is free")
        .expect("join");
    assert_eq!(tracked, second);
}

/// What a crash in the middle of a revert's writes leaves (temporary files next to their targets, and the
/// journal naming their batch and their directories) is removed the next time the store is opened, and
/// nothing else is: not a file of the user's whose name merely starts like a temporary file's, even in a
/// directory the journal names (it is tracked content, as git would have it); not another batch's
/// temporary file (another store's operation in a nested worktree); not a directory outside the worktree
/// that a (corrupt) journal names. A journal from before batches were recorded removes the temporary
/// files of any batch. A finished operation leaves no temporary file and no journal.
#[tokio::test]
async fn temporary_files_a_crash_left_are_removed_when_the_store_is_opened() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    h.write("src/a.txt", b"a\n");
    h.write("other/b.txt", b"b\n");
    let first = track_as_git(&h, &oracle).await;
    h.write("src/a.txt", b"changed\n");
    let second = track_as_git(&h, &oracle).await;
    h.port()
        .revert(
            h.root(),
            &[SnapshotPatch {
                hash: first.clone(),
                files: rels(&["src/a.txt"]),
            }],
            &second,
        )
        .await
        .expect("revert");
    let journal = h.store_dir().join("rewind").join("journal");
    assert_eq!(
        fs::read_to_string(&journal).unwrap_or_default(),
        "",
        "a finished operation leaves an empty journal"
    );
    let leftovers = |dir: &str| -> Vec<String> {
        fs::read_dir(h.path(dir))
            .expect("list")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(".rewind-tmp-"))
            .collect()
    };
    assert!(leftovers("src").is_empty(), "no temporary file is left");

    // The state a crash during the writes leaves, beside files that are not the crash's.
    let crashed = "0123456789abcdef";
    let other_batch = ".rewind-tmp-fedcba9876543210-1";
    fs::write(
        h.path(&format!("src/.rewind-tmp-{crashed}-1")),
        b"half written",
    )
    .expect("a stray file");
    fs::write(h.path(&format!("src/.rewind-tmp-{crashed}-2")), b"").expect("a stray file");
    fs::write(h.path(&format!("src/{other_batch}")), b"another's").expect("another batch's file");
    let users = [
        ".rewind-tmp-notes",
        ".rewind-tmp-0123456789abcdef-x",
        ".rewind-tmp-0123456789ABCDEF-1",
    ];
    for name in users {
        fs::write(h.path(&format!("src/{name}")), b"mine").expect("a user's file");
    }
    let outside = h.base().join("outside");
    fs::create_dir_all(&outside).expect("mkdir outside");
    let outside_temp = outside.join(format!(".rewind-tmp-{crashed}-3"));
    fs::write(&outside_temp, b"not ours").expect("a file outside");
    fs::write(
        &journal,
        format!(
            "batch {crashed}\n{}\n{}\n",
            h.path("src").display(),
            outside.display()
        ),
    )
    .expect("write the journal");

    // (git would track the other batch's file; rewind never tracks a temporary file's name.)
    let tracked = h.id().await;
    assert_ne!(tracked, first, "the user's files are tracked");
    let mut left = leftovers("src");
    left.sort();
    let mut expected: Vec<String> = users
        .iter()
        .copied()
        .chain([other_batch])
        .map(str::to_owned)
        .collect();
    expected.sort();
    assert_eq!(left, expected, "only the crash's temporary files are gone");
    for name in users {
        assert_eq!(
            fs::read(h.path(&format!("src/{name}"))).expect("the user's file stays"),
            b"mine"
        );
    }
    assert!(
        outside_temp.exists(),
        "nothing outside the worktree is touched"
    );
    assert_eq!(fs::read_to_string(&journal).unwrap_or_default(), "");

    // A journal without a batch line (written before batches were recorded) removes any batch's.
    fs::write(&journal, format!("{}\n", h.path("src").display())).expect("an old journal");
    let retracked = track_as_git(&h, &oracle).await;
    assert_eq!(
        retracked, tracked,
        "the user's files are tracked as git tracks them; the other batch's file never was"
    );
    let mut left = leftovers("src");
    left.sort();
    let mut users_only: Vec<String> = users.iter().map(|n| (*n).to_owned()).collect();
    users_only.sort();
    assert_eq!(left, users_only);
}

/// A crash between a swap (or a deletion's move aside) and its second look leaves a user's file at a
/// temporary name. Its content is in the store (the operation tracked it first), unless a program wrote
/// to it since through a handle opened before the move: such a file, born before the operation began
/// and holding content no snapshot has, is kept as `rewind-kept-<batch>-<n>` when the store is next
/// opened. The operation's own files (born since) and a moved-out file whose content the store has are
/// removed, as before. Where the filesystem records no birth time the two cannot be told apart, and
/// every temporary file is removed (SPEC 8).
#[tokio::test]
async fn a_file_a_crash_left_moved_out_with_content_in_no_snapshot_is_kept() {
    // Also when its kept name is taken (by the user, or an earlier clean-up cut short): a name of its own.
    for taken in [false, true] {
        let h = GitHarness::new();
        h.write("src/a.txt", b"a\n");
        h.id().await;
        let crashed = "00112233445566ff";
        let kept = format!("rewind-kept-{crashed}-1");
        if taken {
            h.write(&format!("src/{kept}"), b"already here\n");
        }
        let tmp = |n: u32| h.path(&format!("src/.rewind-tmp-{crashed}-{n}"));
        // Moved out of their names by the crashed operation: one written to since, one as tracked.
        fs::write(tmp(1), b"written through an old handle\n").expect("a moved-out file");
        fs::write(tmp(2), b"a\n").expect("a moved-out file, unchanged");
        std::thread::sleep(std::time::Duration::from_millis(120));
        let started = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("a clock after 1970")
            .as_millis();
        std::thread::sleep(std::time::Duration::from_millis(10));
        // Written by the operation itself, cut short by the crash.
        fs::write(tmp(3), b"half writ").expect("the operation's own file");
        let journal = h.store_dir().join("rewind").join("journal");
        fs::write(
            &journal,
            format!(
                "batch {crashed}\nstarted {started}\n{}\n",
                h.path("src").display()
            ),
        )
        .expect("write the journal");
        h.id().await;
        let mut names: Vec<String> = fs::read_dir(h.path("src"))
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let content =
            |name: &str| fs::read_to_string(h.path(&format!("src/{name}"))).expect("read");
        if !crate::harness::records_birth(h.root()) {
            // Nothing tells the operation's own file from a user's: every temporary file goes (SPEC 8).
            let mut expected = vec!["a.txt".to_owned()];
            if taken {
                expected.push(kept.clone());
                assert_eq!(content(&kept), "already here\n");
            }
            assert_eq!(names, expected);
            assert_eq!(fs::read_to_string(&journal).unwrap_or_default(), "");
            continue;
        }
        if taken {
            assert_eq!(names.len(), 3, "{names:?}");
            assert_eq!(names[..2], ["a.txt", kept.as_str()]);
            assert!(names[2].starts_with(&format!("{kept}-")), "{names:?}");
            assert_eq!(content(&kept), "already here\n");
            assert_eq!(content(&names[2]), "written through an old handle\n");
        } else {
            assert_eq!(names, ["a.txt", kept.as_str()]);
            assert_eq!(content(&kept), "written through an old handle\n");
        }
        assert_eq!(fs::read_to_string(&journal).unwrap_or_default(), "");
    }
}

/// A journal naming a directory that is a file now (a later turn made a file of it) has nothing left to
/// clean there: it goes at the next opening, instead of being kept as `journal-left-*` for good
/// (black-box: one stayed per interrupted operation).
#[tokio::test]
async fn a_journal_naming_a_directory_that_is_a_file_now_is_removed() {
    let h = GitHarness::new();
    h.write("src", b"a file where a directory was\n");
    h.id().await;
    let rewind_dir = h.store_dir().join("rewind");
    fs::write(
        rewind_dir.join("journal"),
        format!("batch 0123456789abcdef\n{}\n", h.path("src").display()),
    )
    .expect("write the journal");
    h.id().await;
    let journals: Vec<String> = fs::read_dir(&rewind_dir)
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("journal"))
        .collect();
    assert!(journals.is_empty(), "{journals:?}");
}

/// A temporary file that cannot be removed when the store is opened (its directory append-only, `chattr
/// +a`) keeps its journal, beside (the next
/// operation's own journal does not replace it), and is removed at an opening once it can be (black-box:
/// the journal was dropped, and the file stayed in the worktree for good).
#[tokio::test]
async fn a_temporary_file_that_cannot_be_removed_yet_is_removed_later() {
    let h = GitHarness::new();
    h.write("src/a.txt", b"a\n");
    h.write("top.txt", b"one\n");
    let first = h.id().await;
    let stray = h.path("src/.rewind-tmp-0123456789abcdef-1");
    fs::write(&stray, b"half written").expect("a stray file");
    let rewind_dir = h.store_dir().join("rewind");
    fs::write(
        rewind_dir.join("journal"),
        format!("batch 0123456789abcdef\n{}\n", h.path("src").display()),
    )
    .expect("write the journal");
    let append_only = Flagged::set(&h.path("src"), 'a');
    let left = || -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(&rewind_dir)
            .expect("list")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("journal"))
            .collect();
        names.sort();
        names
    };

    h.id().await;
    assert!(stray.exists(), "it cannot be removed yet");
    let kept = left();
    assert!(
        kept.len() == 1 && kept[0].starts_with("journal-left-"),
        "{kept:?}"
    );
    // Another operation writes and clears its own journal meanwhile.
    h.write("top.txt", b"two\n");
    let second = h.id().await;
    h.port()
        .revert(
            h.root(),
            &[SnapshotPatch {
                hash: first,
                files: rels(&["top.txt"]),
            }],
            &second,
        )
        .await
        .expect("revert");
    assert_eq!(fs::read(h.path("top.txt")).expect("read"), b"one\n");
    assert_eq!(left(), kept, "the kept journal stays");

    drop(append_only);
    h.id().await;
    assert!(!stray.exists(), "removed once it can be");
    assert!(left().is_empty(), "{:?}", left());
}

/// `clean_leftovers` (what every command runs, `status` and `log` included, which do not open the store
/// otherwise) removes a crash's temporary files as opening the store does, but never waits: while
/// another process holds the store it leaves them to it (black-box: a killed `snapshot restore` left them
/// through `status`).
#[tokio::test]
async fn clean_leftovers_removes_a_crash_s_temporary_files_without_waiting() {
    let h = GitHarness::new();
    h.write("src/a.txt", b"a\n");
    h.id().await;
    let stray = h.path("src/.rewind-tmp-0123456789abcdef-1");
    fs::write(&stray, b"half written").expect("a stray file");
    let journal = h.store_dir().join("rewind").join("journal");
    fs::write(
        &journal,
        format!("batch 0123456789abcdef\n{}\n", h.path("src").display()),
    )
    .expect("write the journal");
    let held = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(h.store_dir().join("rewind").join("lock"))
        .expect("the lock file");
    // Tried a few times, for the reason below (a forked child's copy of the store's own descriptor).
    let mut locked = held.try_lock();
    for _ in 0..50 {
        if locked.is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        locked = held.try_lock();
    }
    locked.expect("held by this test, as by another process");
    let cleaned = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        h.adapter().clean_leftovers(h.root()),
    )
    .await
    .expect("no wait")
    .expect("clean");
    assert!(!cleaned, "left to the holder");
    assert!(stray.exists());
    drop(held);
    // Free now; tried a few times, as a fork by another test of this process (a `git` it spawns) holds a
    // copy of the lock's descriptor until the child execs.
    let mut cleaned = false;
    for _ in 0..50 {
        cleaned = h.adapter().clean_leftovers(h.root()).await.expect("clean");
        if cleaned {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(cleaned, "cleaned once the lock is free");
    assert!(!stray.exists(), "removed");
    assert!(!journal.exists(), "and the journal with it");
    assert!(
        !h.adapter().clean_leftovers(h.root()).await.expect("clean"),
        "nothing more to do: the store is not locked again"
    );
    assert_eq!(
        h.read("src/a.txt"),
        Some(rewind_core::testkit::contract::snapshot::Node::file("a\n"))
    );
}

/// A revert that only rewrites files the cache holds takes its new trees from `applied` (not built a
/// second time): the directories it touched keep the right ids for later tracks, which rebuild only the
/// directories that change after it (here a directory the revert did not touch, whose parent holds the
/// touched ones).
#[tokio::test]
async fn a_revert_that_rewrites_files_leaves_the_cache_with_the_trees_of_applied() {
    let h = GitHarness::new();
    let oracle = GitOracle::new(None);
    let before = settled_tree(&h, &oracle).await;
    edit_by_a_step(&h, &[1, 5, 6]);
    age_past_racy(h.root());
    let after = track_as_git(&h, &oracle).await;
    let outcome = h
        .port()
        .revert(
            h.root(),
            &[SnapshotPatch {
                hash: before.clone(),
                files: rels(&["d1/f01.txt", "d1/f05.txt", "d2/f06.txt"]),
            }],
            &after,
        )
        .await
        .expect("revert");
    assert_eq!(outcome.applied, before);
    let next = h.track().await;
    assert_eq!((next.id.clone(), next.hashed), (before.clone(), 3));
    // d3 was not touched by the revert: the root is rebuilt with the cached ids of d1 and d2.
    h.write("d3/f03.txt", b"edited after the revert\n");
    let later = track_as_git(&h, &oracle).await;
    assert_ne!(later, before);
    h.write("d3/f03.txt", b"file 3\n");
    assert_eq!(track_as_git(&h, &oracle).await, before);
}

/// What another program does to a file right after rewind wrote it, in the tests below.
#[derive(Clone, Copy, Debug)]
enum Rewrite {
    /// Writes it again in place (the same inode), the same size.
    InPlace,
    /// Puts a new file there by rename (another inode), as `tar` or `rsync` do.
    RenamedOver,
}

/// How the file is written back: which port method.
#[derive(Clone, Copy, Debug)]
enum Writer {
    Restore,
    Revert,
    RestoreSince,
}

/// Another program's write right after rewind's, before rewind takes the new file's stat data (an old
/// time set back, as `cp -p`, `tar` or `rsync -t` leave a file), is seen by the next tracks: the stat
/// cache learns only the file rewind wrote, and here nothing (its files are left as they were, checked
/// where the operation runs no track of its own), so the next track reads that one file again. Black-box (the stat-cache fuzz): after such a race in a restore or an undo,
/// every later track took the file for the blob rewind had written.
#[tokio::test]
async fn a_write_right_after_a_revert_or_restore_wrote_the_file_is_seen_by_the_next_track() {
    for writer in [Writer::Restore, Writer::Revert, Writer::RestoreSince] {
        for rewrite in [Rewrite::InPlace, Rewrite::RenamedOver] {
            let how = format!("{writer:?}, {rewrite:?}");
            let (h, armed) = racing_in("d1/f01.txt", Hook::Written);
            let oracle = GitOracle::new(None);
            let before = settled_tree(&h, &oracle).await;
            edit_by_a_step(&h, &[1]);
            age_past_racy(h.root());
            let after = track_as_git(&h, &oracle).await;
            arm(
                &armed,
                Box::new(move |wt: &Path| {
                    // "file 1\n", the content written, rewritten to another of its size.
                    let path = wt.join("d1/f01.txt");
                    match rewrite {
                        Rewrite::InPlace => {
                            let file = fs::OpenOptions::new()
                                .write(true)
                                .open(&path)
                                .expect("the other program opens the file rewind wrote");
                            std::os::unix::fs::FileExt::write_all_at(&file, b"FILE 1\n", 0)
                                .expect("the other program's write");
                        }
                        Rewrite::RenamedOver => {
                            let new = wt.join("d1/.other-program");
                            fs::write(&new, b"FILE 1\n").expect("the other program's file");
                            fs::rename(&new, &path).expect("the other program's rename");
                        }
                    }
                    backdate(&path);
                }),
            );
            let files = rels(&["d1/f01.txt"]);
            // The stat cache's files, and its side file, before the operation.
            let cache_files = || {
                let dir = h.store_dir().join("rewind");
                ["stat-cache", "stat-cache.applied"].map(|name| fs::read(dir.join(name)).ok())
            };
            let cache_before = cache_files();
            let written = match writer {
                Writer::Restore => h
                    .port()
                    .restore(h.root(), &before, None)
                    .await
                    .map(|outcome| outcome.written),
                Writer::Revert => h
                    .port()
                    .revert(
                        h.root(),
                        &[SnapshotPatch {
                            hash: before.clone(),
                            files: files.clone(),
                        }],
                        &after,
                    )
                    .await
                    .map(|outcome| outcome.written),
                Writer::RestoreSince => h
                    .port()
                    .restore_since(h.root(), &before, files.clone(), &after)
                    .await
                    .map(|outcome| outcome.written),
            }
            .unwrap_or_else(|e| panic!("{how}: {e}"));
            assert_eq!(written, files, "{how}");
            assert_eq!(
                fs::read(h.path("d1/f01.txt")).expect("read"),
                b"FILE 1\n",
                "{how}: the other program's write stands"
            );
            if !matches!(writer, Writer::Restore) {
                // Nothing was learnt (a whole restore tracks first, which writes the cache itself): the
                // other program's file, with the times it set, is no file this wrote. The status change
                // time would make it racy too; this checks the first of the two defences alone.
                assert!(
                    cache_files() == cache_before,
                    "{how}: the cache learnt the other program's file"
                );
            }
            let next = h.track().await;
            assert_eq!(
                next.id.as_str(),
                oracle.write_tree(h.root()),
                "{how}: the track sees the other program's write"
            );
            assert_ne!(next.id, before, "{how}");
            assert_eq!(next.hashed, 1, "{how}: only that file is read again");
            assert_eq!(
                track_as_git(&h, &oracle).await,
                next.id,
                "{how}: and the track after"
            );
        }
    }
}
