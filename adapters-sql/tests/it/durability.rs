//! What waits for the disk on a SQLite file, seen from outside the process: the test runs itself again as
//! a child under `strace`, which records the `fsync` and `fdatasync` calls on the database's files between
//! marks the child makes (a `stat` of a path that does not exist). A commit (an intent record, a revert's
//! result) returns only once its write-ahead log is synced (SPEC 2.5); a lease write does not wait,
//! because every process that could rely on it is gone after a power loss, and the next commit syncs the
//! log with the lease in it.
//!
//! Skipped, saying so, where `strace` is missing or cannot trace; `.ci/run` installs it and sets
//! `REWIND_TEST_REQUIRE_STRACE`, under which that is a failure instead.

use std::path::{Path, PathBuf};
use std::process::Command;

use rewind_core::model::{LeaseKey, LeaseTake};
use rewind_core::ports::{Change, MessageRepo};
use rewind_sql::{SqlConfig, SqlRepo};

use crate::support::{Ids, lease, run, session, transaction};

const FAR: u64 = 4_000_000_000_000;

/// Set for the child: the directory it works in.
const CHILD_DIR: &str = "REWIND_TEST_TRACED_DIR";

/// Set by `.ci/run`: a machine where `strace` cannot trace fails this test instead of skipping it.
const REQUIRE: &str = "REWIND_TEST_REQUIRE_STRACE";

/// This test's name as the test binary filters it.
const NAME: &str = "durability::a_sqlite_lease_write_does_not_wait_for_the_disk_and_a_commit_does";

#[test]
fn a_sqlite_lease_write_does_not_wait_for_the_disk_and_a_commit_does() {
    if let Some(dir) = std::env::var_os(CHILD_DIR) {
        traced_child(Path::new(&dir));
        return;
    }
    let required = std::env::var_os(REQUIRE).is_some();
    let skip = |why: &str| {
        assert!(!required, "{REQUIRE} is set, and {why}");
        eprintln!("{why}: the durability trace is not checked here");
    };
    if Command::new("strace").arg("-V").output().is_err() {
        return skip("strace is not installed");
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let dir = dir.path().canonicalize().expect("the directory's path");
    let trace = dir.join("trace");
    let output = Command::new("strace")
        .args(["-f", "-y", "-qq", "-o"])
        .arg(&trace)
        .args(["-e", "trace=fsync,fdatasync,statx,newfstatat,stat,lstat"])
        .arg("--")
        .arg(std::env::current_exe().expect("the test binary"))
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, &dir)
        .output()
        .expect("strace runs");
    if !dir.join("child-done").exists() {
        let said = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() && said.contains("ptrace") {
            return skip(&format!("strace cannot trace here ({})", said.trim()));
        }
        panic!(
            "the traced child did not finish ({}): {said}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout)
        );
    }
    let lines: Vec<String> = std::fs::read_to_string(&trace)
        .expect("the trace")
        .lines()
        .map(str::to_owned)
        .collect();
    let syncs_between = |from: &str, to: &str| -> Vec<&String> {
        let at = |name: &str| {
            let mark = mark(&dir, name).display().to_string();
            lines
                .iter()
                .position(|l| l.contains(&mark))
                .unwrap_or_else(|| panic!("the mark {name} is in the trace: {lines:#?}"))
        };
        lines[at(from)..at(to)]
            .iter()
            .filter(|l| l.contains("fsync(") || l.contains("fdatasync("))
            .filter(|l| l.contains(&*dir.to_string_lossy()))
            .collect()
    };
    let leases = syncs_between("lease", "commit");
    assert!(
        leases.is_empty(),
        "taking leases (one, then two at once) and renewing one synced nothing: {leases:#?}"
    );
    let released = syncs_between("release", "end");
    assert!(
        released.is_empty(),
        "releasing a lease synced nothing: {released:#?}"
    );
    let committed = syncs_between("commit", "release");
    assert!(
        committed.iter().any(|l| l.contains("rewind.db-wal")),
        "a commit returns once its write-ahead log is synced: {committed:#?} in {lines:#?}"
    );
}

/// A path the child `stat`s to mark a point in the trace (it never exists).
fn mark(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("mark-{name}"))
}

/// The child's half, run under `strace`: lease writes and a commit on a SQLite file in `dir`, between marks.
fn traced_child(dir: &Path) {
    run(async {
        let config = SqlConfig::sqlite_file(&dir.join("rewind.db")).expect("a UTF-8 path");
        let repo = SqlRepo::open(config).await.expect("the file opens");
        let ids = Ids::default();
        let commit = |directory: &str| {
            repo.commit(transaction(
                vec![Change::PutSession(Box::new(session(&ids, directory)))],
                Vec::new(),
            ))
        };
        // Both pools have connected before the first mark.
        let warm = lease(&LeaseKey::Session(ids.session()), "warm", 1, FAR);
        assert_eq!(
            repo.take_lease(&warm, None).await.expect("takes"),
            LeaseTake::Taken
        );
        commit("/w0").await.expect("commits");

        let _ = std::fs::metadata(mark(dir, "lease"));
        let key = LeaseKey::Session(ids.session());
        let held = lease(&key, "token", 1, FAR);
        assert_eq!(
            repo.take_lease(&held, None).await.expect("takes"),
            LeaseTake::Taken
        );
        let both = [
            lease(&LeaseKey::Session(ids.session()), "both", 1, FAR),
            lease(&LeaseKey::Worktree("/w1".to_owned()), "both", 1, FAR),
        ];
        assert_eq!(
            repo.take_leases(&both).await.expect("takes"),
            [LeaseTake::Taken, LeaseTake::Taken]
        );
        assert!(
            repo.renew_lease(&key, &held.token, FAR + 1)
                .await
                .expect("renews")
        );
        let _ = std::fs::metadata(mark(dir, "commit"));
        commit("/w1").await.expect("commits");
        let _ = std::fs::metadata(mark(dir, "release"));
        repo.release_lease(&key, &held.token)
            .await
            .expect("releases");
        let _ = std::fs::metadata(mark(dir, "end"));
        std::fs::write(dir.join("child-done"), "").expect("the child says it finished");
    });
}
