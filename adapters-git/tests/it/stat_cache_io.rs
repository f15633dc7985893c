//! The stat cache measured from outside the store: a child process (this test binary, re-invoked on one
//! test with an environment variable naming the worktree and data dir) re-tracks a 10 MB tree, and the
//! parent reads the bytes it read (`rchar` of `/proc/<pid>/io`) just before it exits. This checks that an
//! unchanged tree is not read again, independently of the `hashed` count the store reports itself.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rewind_core::SnapshotPort;
use rewind_core::testkit::contract::snapshot::WorktreeHarness;
use rewind_git::{ExcludesFile, GitSnapshotStore, GitStoreConfig};

use crate::harness::{DATABASE, GitHarness};

const CHILD_WORKTREE: &str = "REWIND_IO_CHILD_WORKTREE";
const CHILD_DATA_DIR: &str = "REWIND_IO_CHILD_DATA_DIR";
const MARKER: &str = "REWIND_IO_CHILD tracked";

const FILES: usize = 1000;
const FILE_SIZE: usize = 10 * 1024;
const MIB: u64 = 1024 * 1024;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// In the child: one track with the same store configuration as the parent's harness, its result on
/// stdout, then a wait for the parent's go-ahead on stdin (so the parent can read `/proc/<pid>/io` while
/// the process still exists). Answers whether this process is the child.
fn run_as_child() -> bool {
    let (Some(worktree), Some(data_dir)) = (
        std::env::var_os(CHILD_WORKTREE),
        std::env::var_os(CHILD_DATA_DIR),
    ) else {
        return false;
    };
    let mut config = GitStoreConfig::new(PathBuf::from(data_dir), DATABASE);
    config.excludes_file = ExcludesFile::None;
    let store = GitSnapshotStore::new(config);
    let outcome = runtime()
        .block_on(store.track(Path::new(&worktree)))
        .expect("the child's track");
    let mut stdout = std::io::stdout().lock();
    // libtest has printed `test <name> ... ` without a newline: the marker goes on a line of its own.
    writeln!(stdout, "\n{MARKER} {} {}", outcome.id, outcome.hashed).expect("write to the parent");
    stdout.flush().expect("flush to the parent");
    drop(stdout);
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .expect("read the parent's go-ahead");
    true
}

/// What one child track returned and read.
#[derive(Debug)]
struct Measured {
    id: String,
    hashed: u64,
    rchar: u64,
}

/// Runs test `name` of this binary as the child on `h`'s worktree and store.
fn measure(h: &GitHarness, name: &str) -> Measured {
    let module = module_path!();
    let module = module.split_once("::").map_or(module, |(_, rest)| rest);
    let test = format!("{module}::{name}");
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new(exe)
        .args(["--exact", &test, "--nocapture", "--test-threads=1"])
        .env(CHILD_WORKTREE, h.root())
        .env(CHILD_DATA_DIR, h.data_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child");
    // A watchdog: a child that never reports is killed, so the test fails instead of hanging.
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = Arc::clone(&done);
        let pid = child.id().to_string();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(300);
            while !done.load(Ordering::Relaxed) {
                if Instant::now() > deadline {
                    let _ = Command::new("kill").args(["-9", &pid]).status();
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut result = None;
    let mut line = String::new();
    while stdout.read_line(&mut line).expect("read the child") > 0 {
        if let Some(at) = line.find(MARKER) {
            let rest = &line[at + MARKER.len()..];
            let mut fields = rest.split_whitespace();
            let id = fields.next().expect("an id").to_owned();
            let hashed = fields
                .next()
                .and_then(|n| n.parse().ok())
                .expect("a hashed count");
            result = Some((id, hashed));
            break;
        }
        line.clear();
    }
    let Some((id, hashed)) = result else {
        let status = child.wait().expect("wait for the child");
        done.store(true, Ordering::Relaxed);
        panic!("the child ended ({status}) without tracking");
    };
    let io = fs::read_to_string(format!("/proc/{}/io", child.id())).expect("read /proc/<pid>/io");
    let rchar = io
        .lines()
        .find_map(|l| l.strip_prefix("rchar:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("an rchar line");
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin.write_all(b"go\n").expect("let the child finish");
    drop(stdin);
    std::io::copy(&mut stdout, &mut std::io::sink()).expect("drain the child's output");
    let status = child.wait().expect("wait for the child");
    done.store(true, Ordering::Relaxed);
    watchdog.join().expect("the watchdog");
    assert!(status.success(), "the child failed: {status}");
    Measured { id, hashed, rchar }
}

fn content(i: usize, version: u32) -> Vec<u8> {
    let mut bytes = format!("file {i} version {version}\n").into_bytes();
    bytes.resize(FILE_SIZE, b'a' + (i % 26) as u8);
    bytes
}

fn path(i: usize) -> String {
    format!("d{:02}/f{i:04}.txt", i / 100)
}

/// 1000 files of 10 KB with backdated mtimes, past the racy margin, tracked once by the parent.
fn tracked_tree() -> (GitHarness, String) {
    let h = GitHarness::new();
    for i in 0..FILES {
        crate::harness::write_file(&h.path(&path(i)), &content(i, 1));
    }
    crate::harness::age_past_racy(h.root());
    let first = runtime().block_on(h.track());
    assert_eq!(
        first.hashed, FILES as u64,
        "the first track reads every file"
    );
    (h, first.id.to_string())
}

/// Re-tracking an unchanged 10 MB tree in another process reads less than 1 MB.
#[test]
fn unchanged_10mb_tree_retracks_reading_under_1mb() {
    if run_as_child() {
        return;
    }
    let (h, id) = tracked_tree();
    let m = measure(&h, "unchanged_10mb_tree_retracks_reading_under_1mb");
    assert_eq!(m.id, id, "the same tree");
    assert_eq!(m.hashed, 0, "{m:?}");
    assert!(
        m.rchar < MIB,
        "an unchanged re-track read {} bytes",
        m.rchar
    );
}

/// With 5 files of 10 KB changed, the child reads about their size more than for the unchanged tree.
#[test]
fn five_changed_files_are_read_and_little_else() {
    if run_as_child() {
        return;
    }
    let name = "five_changed_files_are_read_and_little_else";
    let (h, id) = tracked_tree();
    let unchanged = measure(&h, name);
    assert_eq!(unchanged.id, id);
    assert_eq!(unchanged.hashed, 0, "{unchanged:?}");

    for i in [3, 250, 251, 777, 999] {
        crate::harness::write_file(&h.path(&path(i)), &content(i, 2));
    }
    // Past the racy margin, so the child's cache answers for the 5 files next time.
    crate::harness::age_past_racy(h.root());
    let changed = measure(&h, name);
    assert_ne!(changed.id, id);
    assert_eq!(changed.hashed, 5, "{changed:?}");
    let changed_bytes = 5 * FILE_SIZE as u64;
    let slack = 256 * 1024;
    assert!(
        changed.rchar >= unchanged.rchar + changed_bytes * 3 / 4,
        "the 5 changed files were not read: {unchanged:?} then {changed:?}"
    );
    assert!(
        changed.rchar <= unchanged.rchar + changed_bytes + slack
            && changed.rchar < MIB + changed_bytes + slack,
        "reading 5 changed files cost {changed:?} after {unchanged:?}"
    );

    // The child's cache was kept: the parent's re-track agrees and reads nothing (the child read the 5
    // files more than the racy margin after they were written).
    let again = runtime().block_on(h.track());
    assert_eq!(again.id.as_str(), changed.id);
    assert_eq!(again.hashed, 0);
}

/// A first track of a committed 10 MB tree takes every file from the user's index (SPEC 2.1, seeding): in
/// another process it reads less than 1 MB (the index, the pack's entry headers), not the files. The
/// files are looked at by the walk's helper threads while it goes on; a look given to the wrong file
/// would not match the index and send the file to be hashed.
#[test]
fn seeded_first_track_of_a_10mb_committed_tree_reads_under_1mb() {
    if run_as_child() {
        return;
    }
    let h = GitHarness::new();
    for i in 0..FILES {
        crate::harness::write_file(&h.path(&path(i)), &content(i, 1));
    }
    let root = h.root();
    crate::seeding::commit_all(&h, &[("core.autocrlf", "false")]);
    crate::git_oracle::git(root, &["gc", "-q"]);
    let m = measure(
        &h,
        "seeded_first_track_of_a_10mb_committed_tree_reads_under_1mb",
    );
    assert_eq!(
        m.id,
        crate::git_oracle::GitOracle::new(None).write_tree(root),
        "git's tree"
    );
    assert_eq!(m.hashed, 0, "{m:?}");
    assert!(m.rchar < MIB, "a seeded first track read {} bytes", m.rchar);
}
