//! What waits for the disk on a SQLite file, seen from outside the process: `strace` attached to this
//! test process counts the `fsync` and `fdatasync` calls on the database's files. A commit (an intent
//! record, a revert's result) returns only once its write-ahead log is synced (SPEC 2.5); a lease write
//! does not wait, because every process that could rely on it is gone after a power loss, and the next
//! commit syncs the log with the lease in it.
//!
//! Skipped, saying so, where `strace` is missing or cannot attach; `.ci/run` installs it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rewind_core::model::{LeaseKey, LeaseTake};
use rewind_core::ports::{Change, MessageRepo};

use crate::support::{Ids, SqliteFile, lease, run, session, transaction};

const FAR: u64 = 4_000_000_000_000;

/// `strace` following every thread of this process, its lines arriving on `lines`.
struct Tracer {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Tracer {
    /// Attaches, then waits until a `stat` of `ready` is seen in the trace (so every thread is followed).
    fn attach(ready: &Path) -> Option<Tracer> {
        let mut child = Command::new("strace")
            .args([
                "-f",
                "-y",
                "-e",
                "trace=fsync,fdatasync,statx,newfstatat,stat",
            ])
            .arg("-p")
            .arg(std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        let stderr = child.stderr.take()?;
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let mut tracer = Tracer {
            child,
            lines,
            seen: Vec::new(),
        };
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            let _ = std::fs::metadata(ready);
            if tracer.wait_for(ready, Duration::from_millis(100)) {
                return Some(tracer);
            }
            if let Ok(Some(_)) = tracer.child.try_wait() {
                break;
            }
        }
        eprintln!("strace did not attach: {}", tracer.seen.join("\n"));
        let _ = tracer.child.kill();
        None
    }

    /// Whether a line naming `path` arrived within `patience` (every line is kept).
    fn wait_for(&mut self, path: &Path, patience: Duration) -> bool {
        let needle = path.to_string_lossy().into_owned();
        let until = Instant::now() + patience;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(&needle);
                    self.seen.push(line);
                    if found {
                        return true;
                    }
                }
                Err(_) => return false,
            }
        }
        false
    }

    /// A mark in the trace: a `stat` of `path`, waited for.
    fn mark(&mut self, path: &Path) {
        let _ = std::fs::metadata(path);
        assert!(
            self.wait_for(path, Duration::from_secs(10)),
            "the mark {} reached the trace",
            path.display()
        );
    }

    /// The syncs of files under `dir` between the marks `from` and `to`.
    fn syncs_between(&self, dir: &Path, from: &Path, to: &Path) -> Vec<String> {
        let (dir, from, to) = (
            dir.to_string_lossy().into_owned(),
            from.to_string_lossy().into_owned(),
            to.to_string_lossy().into_owned(),
        );
        let start = self.seen.iter().position(|l| l.contains(&from));
        let end = self.seen.iter().position(|l| l.contains(&to));
        let (Some(start), Some(end)) = (start, end) else {
            panic!("both marks are in the trace: {:#?}", self.seen);
        };
        self.seen[start..end]
            .iter()
            .filter(|l| l.contains("fsync(") || l.contains("fdatasync("))
            .filter(|l| l.contains(&dir))
            .cloned()
            .collect()
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_sqlite_lease_write_does_not_wait_for_the_disk_and_a_commit_does() {
    if Command::new("strace").arg("-V").output().is_err() {
        eprintln!("strace is not installed: the durability trace is not checked here");
        return;
    }
    run(async {
        let file = SqliteFile::new();
        let repo = file.open().await;
        let ids = Ids::default();
        let key = LeaseKey::Session(ids.session());
        // Both pools have connected before the trace starts.
        let warm = lease(&LeaseKey::Session(ids.session()), "warm", 1, FAR);
        assert_eq!(
            repo.take_lease(&warm, None).await.expect("takes"),
            LeaseTake::Taken
        );
        repo.commit(transaction(
            vec![Change::PutSession(Box::new(session(&ids, "/w0")))],
            Vec::new(),
        ))
        .await
        .expect("commits");

        let dir = file.path.parent().expect("the file's directory").to_owned();
        let mark = |name: &str| dir.join(format!("mark-{name}"));
        let Some(mut tracer) = Tracer::attach(&mark("ready")) else {
            eprintln!(
                "strace cannot attach to this process: the durability trace is not checked here"
            );
            return;
        };
        tracer.mark(&mark("lease"));
        let held = lease(&key, "token", 1, FAR);
        assert_eq!(
            repo.take_lease(&held, None).await.expect("takes"),
            LeaseTake::Taken
        );
        assert!(
            repo.renew_lease(&key, &held.token, FAR + 1)
                .await
                .expect("renews")
        );
        tracer.mark(&mark("commit"));
        repo.commit(transaction(
            vec![Change::PutSession(Box::new(session(&ids, "/w1")))],
            Vec::new(),
        ))
        .await
        .expect("commits");
        tracer.mark(&mark("release"));
        repo.release_lease(&key, &held.token)
            .await
            .expect("releases");
        tracer.mark(&mark("end"));

        let lease_syncs = tracer.syncs_between(&dir, &mark("lease"), &mark("commit"));
        assert!(
            lease_syncs.is_empty(),
            "taking and renewing a lease synced nothing: {lease_syncs:#?}"
        );
        let release_syncs = tracer.syncs_between(&dir, &mark("release"), &mark("end"));
        assert!(
            release_syncs.is_empty(),
            "releasing a lease synced nothing: {release_syncs:#?}"
        );
        let commit_syncs = tracer.syncs_between(&dir, &mark("commit"), &mark("release"));
        assert!(
            commit_syncs.iter().any(|l| l.contains("rewind.db-wal")),
            "a commit returns once its write-ahead log is synced: {commit_syncs:#?} in {:#?}",
            tracer.seen
        );
    });
}
