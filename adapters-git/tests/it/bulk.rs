//! Reverts and restores of many files at once: files are written several at a time, yet a revert ends as
//! the same revert done one file at a time would (files replaced by directories and back, in patch order),
//! and `applied` is the tree of what is on disk.

use rewind_core::model::{RelPath, SnapshotPatch};
use rewind_core::testkit::contract::snapshot::{Node, WorktreeHarness};

use crate::git_oracle::GitOracle;
use crate::harness::{GitHarness, age_past_racy};

fn content(i: usize, version: u32) -> Vec<u8> {
    format!("file {i}, version {version}\n").into_bytes()
}

fn path(i: usize) -> String {
    format!("d{}/e{}/f{i}.txt", i % 7, i % 3)
}

/// 300 files changed and `x` turned from a file into a directory, `y` from a directory into a file:
/// reverting every path gives the first snapshot back, file for file, and `applied` equals it.
#[tokio::test]
async fn reverting_hundreds_of_files_with_kind_changes() {
    let h = GitHarness::new();
    for i in 0..300 {
        h.write(&path(i), &content(i, 1));
    }
    h.write("x", b"x was a file\n");
    h.write("y/inner.txt", b"y was a directory\n");
    h.set_executable(&path(5), true);
    let start = h.id().await;
    let listing = h.list();

    for i in 0..300 {
        h.write(&path(i), &content(i, 2));
    }
    h.remove("x");
    h.write("x/now.txt", b"x is a directory\n");
    h.remove("y/inner.txt");
    h.write("y", b"y is a file\n");
    h.write("new/added.txt", b"added\n");
    age_past_racy(h.root());
    let base = h.id().await;

    let mut files: Vec<RelPath> = (0..300)
        .map(|i| RelPath::new(path(i)).expect("a path"))
        .collect();
    for p in ["x/now.txt", "x", "y", "y/inner.txt", "new/added.txt"] {
        files.push(RelPath::new(p).expect("a path"));
    }
    let patches = vec![SnapshotPatch {
        hash: start.clone(),
        files,
    }];
    let outcome = h
        .port()
        .revert(h.root(), &patches, &base)
        .await
        .expect("revert");
    assert!(outcome.kept.is_empty(), "{:?}", outcome.kept);
    assert_eq!(h.list(), listing, "every file as it was");
    assert_eq!(outcome.applied, start, "applied is the tree on disk");
    assert_eq!(h.id().await, start);
    assert_eq!(
        h.read(&path(5)),
        Some(Node::File {
            bytes: content(5, 1),
            executable: true
        })
    );
    let oracle = GitOracle::new(None);
    assert_eq!(oracle.write_tree(h.root()), start.as_str());

    // And a restore of the changed state, then back: many files again.
    h.port()
        .restore(h.root(), &base, None)
        .await
        .expect("restore the changed state");
    assert_eq!(h.id().await, base);
    h.port()
        .restore(h.root(), &start, None)
        .await
        .expect("restore the start");
    assert_eq!(h.list(), listing);
}

/// A file written from one patch and, from a later patch, a file below the same path: the second needs a
/// directory where the first was just written, so it waits for that write and replaces it (patch order),
/// though both are written in the same batch otherwise.
#[tokio::test]
async fn a_later_patch_writing_below_a_file_just_written() {
    let h = GitHarness::new();
    h.write("keep.txt", b"keep\n");
    h.write("z", b"z is a file\n");
    let with_file = h.id().await;
    h.remove("z");
    h.write("z/w.txt", b"below z\n");
    let with_dir = h.id().await;
    h.remove("z/w.txt");
    let base = h.id().await;

    let patches = vec![
        SnapshotPatch {
            hash: with_file,
            files: vec![RelPath::new("z").expect("a path")],
        },
        SnapshotPatch {
            hash: with_dir.clone(),
            files: vec![RelPath::new("z/w.txt").expect("a path")],
        },
    ];
    let outcome = h
        .port()
        .revert(h.root(), &patches, &base)
        .await
        .expect("revert");
    assert!(outcome.kept.is_empty(), "{:?}", outcome.kept);
    assert_eq!(h.read("z/w.txt"), Some(Node::file("below z\n")));
    assert_eq!(outcome.applied, with_dir);
    assert_eq!(h.id().await, with_dir);
}
