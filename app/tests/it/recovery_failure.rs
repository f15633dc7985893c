//! An interrupted operation that recovery cannot finish (its directory is gone) is a warning on stderr
//! at every command, and commands on other directories go on (SPEC 8: only that worktree is refused).

use rewind_core::model::{
    Holder, HolderKind, IntentOperation, IntentRecord, Lease, LeaseKey, LeaseToken,
    ProcessIdentity, RelPath, SessionId, SnapshotId,
};
use rewind_core::{Change, MessageRepo, Transaction};

use crate::support::{Env, Server};

/// Runs `work` on the data dir's database, from a runtime of its own.
fn with_database(env: &Env, work: impl AsyncFnOnce(&rewind_sql::SqlRepo)) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let url = rewind_app::config::default_database_url(env.data.path());
        let repo = rewind_sql::SqlRepo::connect(&url).await.expect("database");
        work(&repo).await;
    });
}

/// A pid no process has now: that of a child that has exited and been reaped.
fn gone_pid() -> u32 {
    let mut child = std::process::Command::new("true")
        .spawn()
        .expect("spawn true");
    child.wait().expect("wait");
    child.id()
}

/// Leaves in the data dir what a revert of `session` in `directory` leaves when its process dies after
/// storing its intent: both leases held by that gone process, and the intent.
fn interrupted_revert(env: &Env, session: &SessionId, directory: &str) {
    with_database(env, async |repo| {
        let holder = Holder {
            kind: HolderKind::Process,
            process: ProcessIdentity {
                host: rewind_app::host::host_name(),
                pid: gone_pid(),
                start_time: 1,
                boot: None,
                machine: None,
            },
        };
        let token = LeaseToken("tok_interrupted".to_owned());
        for key in [
            LeaseKey::Session(session.clone()),
            LeaseKey::Worktree(directory.to_owned()),
        ] {
            let lease = Lease {
                key,
                token: token.clone(),
                holder: holder.clone(),
                expires_at: i64::MAX as u64,
            };
            repo.take_lease(&lease, None).await.expect("lease");
        }
        let intent = IntentRecord {
            token,
            session_id: session.clone(),
            directory: directory.to_owned(),
            operation: IntentOperation::Revert,
            holder,
            before: SnapshotId::parse(&"0".repeat(40)).expect("id"),
            files: vec![RelPath::new("x.txt").expect("path")],
            created: 0,
            unreadable: None,
        };
        repo.commit(Transaction {
            guards: Vec::new(),
            changes: vec![Change::PutIntent(Box::new(intent))],
            events: Vec::new(),
        })
        .await
        .expect("intent");
    });
}

/// Another (temporary) directory with a session of one turn whose revert was interrupted: the directory,
/// its session and its path.
fn interrupted_elsewhere(env: &Env) -> (tempfile::TempDir, SessionId, String) {
    let elsewhere = tempfile::TempDir::new().expect("another worktree");
    env.rewind_in(
        elsewhere.path(),
        &["exec", "--", "sh", "-c", "printf 'x\\n' > x.txt"],
    )
    .assert()
    .success();
    let output = env
        .rewind_in(elsewhere.path(), &["--json", "status"])
        .output()
        .expect("status");
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let session = SessionId::parse(status["sessions"][0]["id"].as_str().expect("id")).expect("id");
    let directory = status["directory"].as_str().expect("directory").to_owned();
    interrupted_revert(env, &session, &directory);
    (elsewhere, session, directory)
}

/// A session in another (temporary) directory whose revert was interrupted, that directory then removed:
/// the directory's path.
fn unrecoverable(env: &Env) -> String {
    let (elsewhere, _, directory) = interrupted_elsewhere(env);
    // The directory goes away: its intent can no longer be finished.
    drop(elsewhere);
    directory
}

#[test]
fn an_operation_that_cannot_be_recovered_is_a_warning_and_other_directories_go_on() {
    let env = Env::plain();
    env.exec_sh("printf 'one\\n' > a.txt");
    let directory = unrecoverable(&env);
    let warning =
        format!("warning: an interrupted operation in {directory} could not be recovered");
    // Every command warns (the intent stays), and goes on with this directory.
    for (command, a_txt) in [("undo", false), ("redo", true)] {
        let output = env.rewind(&[command]).output().expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{command} here goes on: {stderr}");
        assert!(stderr.contains(&warning), "{stderr}");
        assert_eq!(
            env.path().join("a.txt").exists(),
            a_txt,
            "{command} was done"
        );
    }
}

/// The server's start-up recovery logs the same warning, and the server starts.
#[test]
fn a_server_logs_an_operation_it_cannot_recover_and_starts() {
    let env = Env::plain();
    let directory = unrecoverable(&env);
    // It starts (its first line says where it listens), then stops on SIGTERM with success.
    let log = Server::start(&env, "rewind_app=warn").stop();
    assert!(
        log.iter()
            .any(|line| line.contains("could not be recovered") && line.contains(&directory)),
        "{}",
        log.join("\n")
    );
}

/// `redo` (and `unrevert`) while an undo of the session is running (its lease held by a live process,
/// before it stored its revert) says the session is busy, naming the holder, rather than "nothing to
/// redo" (black-box).
#[test]
fn redo_while_an_undo_is_running_is_busy_not_nothing_to_redo() {
    use rewind_core::HostPort;
    let env = Env::plain();
    env.exec_sh("printf 'x\\n' > x.txt");
    let status = env.json(&["status"]);
    let session = SessionId::parse(status["sessions"][0]["id"].as_str().expect("id")).expect("id");
    with_database(&env, async |repo| {
        let lease = Lease {
            key: LeaseKey::Session(session.clone()),
            token: LeaseToken("tok_running_undo".to_owned()),
            // This test's own process: alive, so not taken over.
            holder: Holder {
                kind: HolderKind::Process,
                process: rewind_app::host::SystemHost::new().this_process(),
            },
            expires_at: i64::MAX as u64,
        };
        repo.take_lease(&lease, None).await.expect("lease");
    });
    let stderr = env.fails(&["redo"]);
    assert!(
        stderr.contains("Session is busy") && !stderr.contains("nothing to redo"),
        "{stderr}"
    );
    // So does `unrevert` (review: it said "not reverted").
    let stderr = env.fails(&["unrevert"]);
    assert!(
        stderr.contains("Session is busy") && !stderr.contains("not reverted"),
        "{stderr}"
    );
}

/// An intent record whose stored body cannot be read (a damaged or hand-edited row) refuses only its own
/// directory, saying why and what to do, and leaves its files as they are; every other directory goes on.
/// One such row used to make every command of every directory fail (black-box).
#[test]
fn an_unreadable_intent_refuses_its_directory_only() {
    let env = Env::plain();
    env.exec_sh("printf 'one\\n' > a.txt");
    let (elsewhere, _, directory) = interrupted_elsewhere(&env);
    let damaged = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys\n\
             db = sqlite3.connect(sys.argv[1])\n\
             db.execute(\"UPDATE intent SET body = '{damaged' WHERE token = 'tok_interrupted'\")\n\
             db.commit()\n",
        )
        .arg(env.data.path().join("rewind.db"))
        .status()
        .expect("python3 runs");
    assert!(damaged.success());
    let elsewhere_before = crate::support::state(elsewhere.path());

    let output = env.rewind(&["undo"]).output().expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "undo here goes on: {stderr}");
    assert!(
        stderr.contains(&format!(
            "an interrupted operation in {directory} could not be recovered"
        )) && stderr.contains("intent record tok_interrupted cannot be read"),
        "{stderr}"
    );
    assert!(!env.path().join("a.txt").exists(), "undo was done");

    let refused = env
        .rewind_in(elsewhere.path(), &["undo"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: Worktree is busy")
            && stderr.contains("repair or delete that row of the database's `intent` table"),
        "{stderr}"
    );
    assert_eq!(
        crate::support::state(elsewhere.path()),
        elsewhere_before,
        "the refused directory is left as it is"
    );

    // gc leaves that directory's store, and collects the others (it stopped at the first damaged row);
    // it fails (exit 1) after its report, so a script sees the store it could not collect.
    let output = env
        .rewind(&["--json", "gc", "--grace-seconds", "0"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("1 snapshot store could not be collected"),
        "{stderr}"
    );
    let gc: serde_json::Value = serde_json::from_slice(&output.stdout).expect("the report");
    let worktrees = gc["worktrees"].as_array().expect("worktrees");
    let entry = |dir: &str| {
        worktrees
            .iter()
            .find(|w| w["directory"] == dir)
            .unwrap_or_else(|| panic!("{dir} in {gc:#}"))
    };
    assert!(
        entry(&directory)["error"]
            .as_str()
            .is_some_and(|e| e.contains("cannot be read")),
        "{gc:#}"
    );
    let here = env.json(&["status"])["directory"]
        .as_str()
        .expect("directory")
        .to_owned();
    assert!(entry(&here).get("error").is_none(), "{gc:#}");
}
