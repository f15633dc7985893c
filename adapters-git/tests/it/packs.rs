//! The store's own packs: a track's new objects are written as one pack (two files, not one per object),
//! many small packs are merged, gc prunes a pack to what is still reachable. Real `git` reads the store
//! as the oracle: `fsck`, `cat-file`, `ls-tree` against the ids of `git write-tree`.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rewind_core::model::SnapshotId;
use rewind_core::testkit::contract::snapshot::WorktreeHarness;

use crate::git_oracle::{GitOracle, blob_id, git};
use crate::harness::GitHarness;

/// The files of `dir` whose names satisfy `pick`.
fn files_in(dir: &Path, pick: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| pick(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

fn own_packs(h: &GitHarness) -> Vec<PathBuf> {
    files_in(&h.store_dir().join("objects").join("pack"), |name| {
        name.starts_with("pack-rewind-") && name.ends_with(".pack")
    })
}

/// The loose objects of the store (files in its two-hex-digit fan-out directories).
fn loose_objects(h: &GitHarness) -> usize {
    files_in(&h.store_dir().join("objects"), |name| {
        name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit())
    })
    .iter()
    .map(|dir| files_in(dir, |_| true).len())
    .sum()
}

/// `git fsck` of the whole store: every object, loose or packed, and every pack and index, checked.
pub(crate) fn fsck(h: &GitHarness) {
    git(
        &h.store_dir(),
        &[
            "--git-dir",
            ".",
            "fsck",
            "--full",
            "--strict",
            "--no-dangling",
        ],
    );
}

/// The snapshot's tree, as git lists it from the store, is the tree git writes for the worktree.
fn same_as_git(h: &GitHarness, id: &SnapshotId) {
    let oracle = GitOracle::new(None);
    assert_eq!(
        id.as_str(),
        oracle.write_tree(h.root()),
        "the tree id is git's"
    );
    let objects = h.store_dir().join("objects");
    assert_eq!(
        oracle.ls_tree(Some(&objects), id.as_str()),
        oracle.ls_tree(None, id.as_str()),
        "git reads the whole snapshot from the store"
    );
}

#[tokio::test]
async fn a_tracks_new_objects_are_one_pack_that_git_reads() {
    let h = GitHarness::new();
    for i in 0..30 {
        h.write(
            &format!("d{}/f{i}.txt", i % 4),
            format!("file {i} 7c2e\n").as_bytes(),
        );
    }
    let first = h.id().await;
    assert_eq!(own_packs(&h).len(), 1, "one pack");
    assert_eq!(loose_objects(&h), 0, "no loose object");
    same_as_git(&h, &first);
    fsck(&h);
    // Ten files changed in two directories: 10 blobs and 3 trees, one more pack.
    for i in 0..10 {
        h.write(
            &format!("d{}/f{i}.txt", i % 2),
            format!("changed {i} 7c2e\n").as_bytes(),
        );
    }
    let second = h.id().await;
    assert_eq!(own_packs(&h).len(), 2);
    assert_eq!(loose_objects(&h), 0);
    same_as_git(&h, &second);
    fsck(&h);
    // Both snapshots restore from the packs.
    h.port()
        .restore(h.root(), &first, None)
        .await
        .expect("restore the first");
    assert_eq!(h.id().await, first);
    assert_eq!(
        fs::read(h.path("d0/f0.txt")).expect("read"),
        b"file 0 7c2e\n"
    );
}

/// One or two new objects are not worth a pack's two files: they are written loose.
#[tokio::test]
async fn a_track_that_adds_one_blob_and_its_tree_writes_them_loose() {
    let h = GitHarness::new();
    h.write("a.txt", b"a 19be\n");
    h.write("b.txt", b"b 19be\n");
    h.id().await;
    let packs = own_packs(&h);
    let loose = loose_objects(&h);
    h.write("a.txt", b"a changed 19be\n");
    let id = h.id().await;
    assert_eq!(own_packs(&h), packs);
    assert_eq!(loose_objects(&h), loose + 2);
    assert!(h.stored(&blob_id(b"a changed 19be\n")));
    same_as_git(&h, &id);
}

/// Many tracks: their small packs are merged, so lookups never search more than a few indexes, and every
/// snapshot stays whole.
#[tokio::test]
async fn many_small_packs_are_merged_and_every_snapshot_stays_whole() {
    let h = GitHarness::new();
    let mut ids = Vec::new();
    for round in 0..24 {
        for i in 0..4 {
            h.write(
                &format!("f{i}.txt"),
                format!("round {round} file {i} 3d0a\n").as_bytes(),
            );
        }
        ids.push(h.id().await);
        assert!(
            own_packs(&h).len() <= 17,
            "round {round}: {:?}",
            own_packs(&h)
        );
    }
    assert!(own_packs(&h).len() < 24, "packs were merged");
    fsck(&h);
    for (round, id) in ids.iter().enumerate() {
        for i in 0..4 {
            let blob = blob_id(format!("round {round} file {i} 3d0a\n").as_bytes());
            assert!(h.stored(&blob), "round {round} file {i}");
        }
        h.port().restore(h.root(), id, None).await.expect("restore");
        assert_eq!(&h.id().await, id);
    }
}

/// gc rewrites a pack of rewind's own that holds unreachable objects without them, and deletes one that
/// holds nothing reachable; what a kept snapshot reaches stays.
#[tokio::test]
async fn gc_prunes_the_stores_own_packs_to_what_is_reachable() {
    let h = GitHarness::new();
    for i in 0..6 {
        h.write(
            &format!("keep{i}.txt"),
            format!("kept {i} a81f\n").as_bytes(),
        );
    }
    let kept = h.id().await;
    // Not kept by anything once gc runs without a grace period.
    for i in 0..6 {
        h.write(
            &format!("drop{i}.txt"),
            format!("dropped {i} a81f\n").as_bytes(),
        );
    }
    h.id().await;
    for i in 0..6 {
        h.remove(&format!("drop{i}.txt"));
    }
    assert_eq!(h.id().await, kept);
    assert_eq!(own_packs(&h).len(), 2);
    let report = h
        .port()
        .gc(h.root(), std::slice::from_ref(&kept), Duration::ZERO)
        .await
        .expect("gc");
    assert!(
        report.objects_removed >= 7,
        "6 blobs and a tree: {report:?}"
    );
    for i in 0..6 {
        assert!(h.stored(&blob_id(format!("kept {i} a81f\n").as_bytes())));
        assert!(!h.stored(&blob_id(format!("dropped {i} a81f\n").as_bytes())));
    }
    assert_eq!(
        own_packs(&h).len(),
        1,
        "the dropped snapshot's pack is gone"
    );
    same_as_git(&h, &kept);
    fsck(&h);
}

/// The bytes gc says it freed are what the store's objects take less on disk: a pack rewritten without its
/// unreachable objects frees its old size less the new pack's (black-box: the whole old pack was counted).
#[tokio::test]
async fn gc_reports_what_a_rewritten_pack_really_freed() {
    let h = GitHarness::new();
    for i in 0..6 {
        h.write(
            &format!("keep{i}.txt"),
            format!("kept {i} 3c9e\n").as_bytes(),
        );
        h.write(
            &format!("drop{i}.txt"),
            format!("dropped {i} 3c9e\n").repeat(50).as_bytes(),
        );
    }
    h.id().await;
    for i in 0..6 {
        h.remove(&format!("drop{i}.txt"));
    }
    let kept = h.id().await;
    // Lengths, and what the files take on disk (allocated blocks, as `du` counts; gc reports those).
    let size = |on_disk: bool| -> u64 {
        use std::os::unix::fs::MetadataExt as _;
        fs::read_dir(h.store_dir().join("objects").join("pack"))
            .expect("the pack directory")
            .flatten()
            .map(|e| {
                e.metadata()
                    .map_or(0, |m| if on_disk { m.blocks() * 512 } else { m.len() })
            })
            .sum()
    };
    let (before, before_on_disk) = (size(false), size(true));
    let report = h
        .port()
        .gc(h.root(), std::slice::from_ref(&kept), Duration::ZERO)
        .await
        .expect("gc");
    let after = size(false);
    assert!(after < before && after > 0, "{before} -> {after}");
    assert_eq!(
        report.bytes_freed,
        before_on_disk - size(true),
        "{report:?}"
    );
    same_as_git(&h, &kept);
}

/// A pack index that cannot be read stops gc before it deletes anything: the trees in that pack would
/// look missing, and everything they reach unreachable.
#[tokio::test]
async fn gc_with_an_unreadable_pack_index_deletes_nothing() {
    let h = GitHarness::new();
    for i in 0..6 {
        h.write(&format!("k{i}.txt"), format!("kept {i} 5e07\n").as_bytes());
    }
    let kept = h.id().await;
    // A loose object no snapshot keeps: gc would delete it.
    h.write("k0.txt", b"stray 5e07\n");
    h.id().await;
    h.write("k0.txt", b"kept 0 5e07\n");
    assert_eq!(h.id().await, kept);
    let objects = h.store_dir().join("objects");
    let idx = own_packs(&h)[0].with_extension("idx");
    fs::write(&idx, b"not an index").expect("damage the index");
    let before = crate::harness::list_tree(&objects);
    let result = h
        .port()
        .gc(h.root(), std::slice::from_ref(&kept), Duration::ZERO)
        .await;
    assert!(result.is_err(), "gc went on: {result:?}");
    assert_eq!(
        crate::harness::list_tree(&objects),
        before,
        "gc deleted something"
    );
    assert!(h.stored(&blob_id(b"stray 5e07\n")));
}

/// A damaged pack does not stop later tracks: merging small packs leaves it out, and the new objects are
/// written all the same.
#[tokio::test]
async fn a_damaged_pack_does_not_stop_merging_or_tracking() {
    let h = GitHarness::new();
    for round in 0..16 {
        for i in 0..3 {
            h.write(
                &format!("f{i}.txt"),
                format!("round {round} file {i} 0b9d\n").as_bytes(),
            );
        }
        h.id().await;
    }
    let damaged = own_packs(&h)[0].with_extension("idx");
    fs::write(&damaged, b"not an index").expect("damage an index");
    for round in 16..20 {
        for i in 0..3 {
            h.write(
                &format!("f{i}.txt"),
                format!("round {round} file {i} 0b9d\n").as_bytes(),
            );
        }
        let id = h.id().await;
        same_as_git_ignoring_damage(&h, &id);
    }
    assert!(damaged.is_file(), "the damaged pack is left as it is");
}

/// `same_as_git` for a snapshot whose objects are all outside the damaged pack.
fn same_as_git_ignoring_damage(h: &GitHarness, id: &SnapshotId) {
    let oracle = GitOracle::new(None);
    assert_eq!(id.as_str(), oracle.write_tree(h.root()));
    for i in 0..3 {
        let content = fs::read(h.path(&format!("f{i}.txt"))).expect("read");
        assert!(h.stored(&blob_id(&content)));
    }
}

/// A temporary index a crash left behind is not taken for a user's pack by gc: it stays until it is older
/// than the grace period, then goes as a leftover.
#[tokio::test]
async fn gc_leaves_a_recent_temporary_index_alone() {
    let h = GitHarness::new();
    h.write("a.txt", b"a 77c1\n");
    let kept = h.id().await;
    // An index of objects this store does not hold (another store's pack): nothing in it is reachable.
    let other = GitHarness::new();
    for i in 0..4 {
        other.write(&format!("t{i}.txt"), format!("temp {i} 77c1\n").as_bytes());
    }
    other.id().await;
    let pack_dir = h.store_dir().join("objects").join("pack");
    fs::create_dir_all(&pack_dir).expect("pack dir");
    let tmp = pack_dir.join(".tmp-1-0123456789abcdef.idx");
    fs::copy(own_packs(&other)[0].with_extension("idx"), &tmp).expect("a temporary index");
    h.port()
        .gc(
            h.root(),
            std::slice::from_ref(&kept),
            Duration::from_secs(3600),
        )
        .await
        .expect("gc");
    assert!(tmp.is_file(), "a recent temporary index stays");
    h.port()
        .gc(h.root(), std::slice::from_ref(&kept), Duration::ZERO)
        .await
        .expect("gc");
    assert!(!tmp.exists(), "an old one goes");
}

/// gc counts an object it deletes once, also when a loose copy of it stands beside its pack's.
#[tokio::test]
async fn gc_counts_an_object_with_a_loose_copy_once() {
    let h = GitHarness::new();
    for i in 0..4 {
        h.write(
            &format!("c{i}.txt"),
            format!("counted {i} 4d2e\n").as_bytes(),
        );
    }
    h.id().await;
    // A loose copy of a packed blob, written by git into another repository and copied in (git writes no
    // loose copy of an object its repository holds already).
    let other = tempfile::tempdir().expect("tempdir");
    git(other.path(), &["init", "-q", "--bare", "."]);
    let file = h.path("c0.txt");
    let hex = git(
        other.path(),
        &[
            "--git-dir",
            ".",
            "hash-object",
            "-w",
            &file.to_string_lossy(),
        ],
    );
    let hex = hex.trim();
    assert_eq!(hex, blob_id(b"counted 0 4d2e\n"));
    let fanout = h.store_dir().join("objects").join(&hex[..2]);
    fs::create_dir_all(&fanout).expect("fan-out dir");
    fs::copy(
        other.path().join("objects").join(&hex[..2]).join(&hex[2..]),
        fanout.join(&hex[2..]),
    )
    .expect("copy the loose object");
    assert_eq!(loose_objects(&h), 1);
    for i in 0..4 {
        h.write(
            &format!("c{i}.txt"),
            format!("replaced {i} 4d2e\n").as_bytes(),
        );
    }
    let now = h.id().await;
    let report = h
        .port()
        .gc(h.root(), std::slice::from_ref(&now), Duration::ZERO)
        .await
        .expect("gc");
    assert_eq!(report.objects_removed, 5, "4 blobs and a tree: {report:?}");
}

/// The same objects in two packs of the store's own (a merge that stopped between writing its pack and
/// removing its sources leaves that) are counted once by gc.
#[tokio::test]
async fn gc_counts_an_object_in_two_packs_once() {
    let h = GitHarness::new();
    for i in 0..30 {
        h.write(
            &format!("d{}/f{i}.txt", i % 4),
            format!("twice {i} 51c0\n").as_bytes(),
        );
    }
    let first = h.id().await;
    let packs = own_packs(&h);
    assert_eq!(packs.len(), 1);
    let copy = packs[0].with_file_name(format!("pack-rewind-{}.pack", "0".repeat(40)));
    fs::copy(&packs[0], &copy).expect("copy the pack");
    fs::copy(packs[0].with_extension("idx"), copy.with_extension("idx")).expect("copy the index");
    let report = h
        .port()
        .gc(h.root(), std::slice::from_ref(&first), Duration::ZERO)
        .await
        .expect("gc");
    // 30 blobs, 4 directories and the root.
    assert_eq!(report.objects_kept, 35, "{report:?}");
    assert_eq!(report.objects_removed, 0, "{report:?}");
    same_as_git(&h, &first);
}
