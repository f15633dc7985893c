//! Bad arguments and unknown ids: a clear message on stderr, exit code 1, and nothing changed (files and
//! the recorded session alike).

use crate::support::{Env, assert_state};

/// `rewind --data-dir DATA -C WORKTREE snapshot track`, with nothing else of the environment's.
fn track_with_data_dir(env: &Env, data: &std::path::Path) -> std::process::Output {
    env.bare()
        .arg("--data-dir")
        .arg(data)
        .arg("-C")
        .arg(env.path())
        .args(["snapshot", "track"])
        .output()
        .expect("runs")
}

/// The commands that show or act on what was recorded, run with a data directory where nothing was (a
/// mistyped `--data-dir`): each says there is no database there and creates none (review: `log` and
/// `status` left an empty database behind); `status` shows the directory without a session, exit 0.
#[test]
fn commands_on_a_data_directory_without_a_database_say_so_and_create_nothing() {
    let env = Env::plain();
    let typo = env.data.path().join("typo");
    let run = |args: &[&str]| {
        env.bare()
            .arg("--data-dir")
            .arg(&typo)
            .arg("-C")
            .arg(env.path())
            .args(args)
            .output()
            .expect("runs")
    };
    let database = typo.join("rewind.db");
    let commands: [&[&str]; 9] = [
        &["log"],
        &["gc"],
        &["diff"],
        &["undo"],
        &["redo"],
        &["unrevert"],
        &["revert", &unknown("msg")],
        &[
            "snapshot",
            "diff",
            "0123456789abcdef0123456789abcdef01234567",
        ],
        &[
            "snapshot",
            "restore",
            "0123456789abcdef0123456789abcdef01234567",
        ],
    ];
    for args in commands {
        let output = run(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("no rewind database at {}", database.display()))
                && stderr.contains("nothing was created"),
            "{args:?}: {stderr}"
        );
        assert!(!typo.exists(), "{args:?} created {}", typo.display());
    }
    // A database file that is a symlink to nothing is not there either: nothing is made where it points.
    std::fs::create_dir_all(&typo).expect("mkdir");
    let target = env.data.path().join("nowhere.db");
    std::os::unix::fs::symlink(&target, &database).expect("symlink");
    for args in [&["gc"][..], &["log"][..]] {
        let output = run(args);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
        assert!(!target.exists(), "{args:?} created {}", target.display());
    }
    std::fs::remove_file(&database).expect("unlink");
    std::fs::remove_dir(&typo).expect("rmdir");
    let output = run(&["status"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!("no database yet at {}", database.display()))
            && stdout.contains("no session yet"),
        "{stdout}"
    );
    let output = run(&["status", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(report["sessions"], serde_json::json!([]));
    assert_eq!(report["store"]["bytes"], 0);
    assert!(report["store"].get("path").is_none(), "{report}");
    assert!(!typo.exists(), "status created {}", typo.display());
    // Recording there makes it, and `status` then shows the session.
    assert!(run(&["exec", "--", "true"]).status.success());
    assert!(database.exists());
    let report: serde_json::Value =
        serde_json::from_slice(&run(&["status", "--json"]).stdout).expect("json");
    assert_eq!(
        report["sessions"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
}

/// A well-formed id that names nothing (OpenCode's format: prefix, 12 hex digits, 14 base62 characters).
fn unknown(prefix: &str) -> String {
    format!("{prefix}_0123456789abABCDEFGHIJKLMN")
}

#[test]
fn undo_redo_log_and_diff_in_a_directory_without_a_session_say_so() {
    let env = Env::plain();
    // A session of another directory makes the database; this one has none.
    let other = tempfile::TempDir::new().expect("other worktree");
    env.rewind_in(other.path(), &["exec", "--", "true"])
        .assert()
        .success();
    for command in ["undo", "redo", "log", "diff", "unrevert"] {
        let stderr = env.fails(&[command]);
        assert!(
            stderr.contains("no rewind session in") && stderr.contains("rewind exec"),
            "`{command}` says there is no session and how to record one: {stderr}"
        );
        // And which database it looked in (a mistyped `--data-dir` is otherwise not seen).
        let database = env.data.path().join("rewind.db");
        assert!(
            stderr.contains(&format!("in the database sqlite://{}", database.display())),
            "{stderr}"
        );
    }
}

#[test]
fn bad_ids_paths_and_directories_are_refused_and_change_nothing() {
    let env = Env::plain();
    env.exec_sh("printf 'one\\n' > a.txt");
    env.exec_sh("printf 'two\\n' > a.txt");
    let snapshot = env.snapshot_id();
    std::fs::write(env.path().join("a.txt"), "edited\n").expect("write");
    let files = env.state();
    let log = env.json(&["log"]);

    let session = unknown("ses");
    let message = unknown("msg");
    let missing_snapshot = "0123456789abcdef0123456789abcdef01234567";
    let outside = env.path().join("..").join("elsewhere.txt");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["log", "--session", "ses_bad"], "malformed id"),
        (vec!["log", "--session", &session], "no session"),
        (vec!["diff", "--session", &session], "no session"),
        (vec!["revert", "msg_bad"], "malformed id"),
        (vec!["revert", &message], "not found"),
        (
            vec!["revert", "--session", &session, &message],
            "no session",
        ),
        (
            vec!["revert", &message, "--part", "prt_bad"],
            "malformed id",
        ),
        (vec!["unrevert"], "not reverted"),
        (vec!["redo"], "nothing to redo"),
        (vec!["snapshot", "diff", "abc"], "malformed snapshot id"),
        (vec!["snapshot", "restore", "xyz"], "malformed snapshot id"),
        (vec!["snapshot", "restore", missing_snapshot], "missing"),
        (
            vec!["snapshot", "restore", missing_snapshot, "a.txt"],
            "missing",
        ),
        (vec!["snapshot", "diff", missing_snapshot], "missing"),
        (
            vec!["snapshot", "restore", &snapshot, "../elsewhere.txt"],
            "outside the worktree",
        ),
        (
            vec![
                "snapshot",
                "restore",
                &snapshot,
                outside.to_str().expect("utf-8"),
            ],
            "outside the worktree",
        ),
    ];
    for (args, expected) in &cases {
        let stderr = env.fails(args);
        assert!(
            stderr.to_lowercase().contains(expected),
            "`rewind {}` should say {expected:?}: {stderr}",
            args.join(" ")
        );
        assert_state(&env, &files, &format!("after `rewind {}`", args.join(" ")));
        assert_eq!(env.json(&["log"]), log, "after `rewind {}`", args.join(" "));
    }
    // A directory that does not exist.
    let output = env
        .rewind_in(
            std::path::Path::new("/nonexistent/rewind-test"),
            &["status"],
        )
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("does not exist"), "{stderr}");
}

/// An id of the wrong form, or a restore path outside the worktree, is refused before anything is opened:
/// on a fresh account, nothing is made in the data directory (no database) for a command that was going to
/// fail (review), and `snapshot diff` of an
/// unknown snapshot reads it before it snapshots the worktree (no store is made either).
#[test]
fn a_malformed_id_is_refused_before_anything_is_made() {
    let env = Env::plain();
    std::fs::write(env.path().join("a.txt"), "a\n").expect("write");
    let message = unknown("msg");
    let missing_snapshot = "0123456789abcdef0123456789abcdef01234567";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["undo", "--session", "ses_bad"], "ses_"),
        (vec!["redo", "--session", "nope"], "ses_"),
        (vec!["unrevert", "--session", "nope"], "ses_"),
        (vec!["log", "--session", "nope"], "ses_"),
        (vec!["diff", "--session", "nope"], "ses_"),
        (vec!["revert", "garbage"], "msg_"),
        (vec!["revert", "--part", "prt_bad", &message], "prt_"),
        (vec!["snapshot", "diff", "zz"], "snapshot"),
        (vec!["snapshot", "diff", missing_snapshot, "zz"], "snapshot"),
        (vec!["snapshot", "restore", "zz"], "snapshot"),
        // A path outside the worktree: refused as early (review: the database was made first).
        (
            vec!["snapshot", "restore", missing_snapshot, "/etc/passwd"],
            "outside the worktree",
        ),
    ];
    for (args, expected) in &cases {
        let output = env.rewind(args).output().expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(1),
            "`rewind {}`: {stderr}",
            args.join(" ")
        );
        assert!(
            stderr.contains(expected),
            "`rewind {}`: {stderr}",
            args.join(" ")
        );
        let made: Vec<_> = std::fs::read_dir(env.data.path())
            .expect("list the data directory")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(made.is_empty(), "`rewind {}` made {made:?}", args.join(" "));
    }
    // A well-formed snapshot id that names nothing: with no database yet, there is nothing to diff
    // against; with one (made by a recording in another directory), it is refused before the worktree is
    // snapshotted: no object is stored.
    let stderr = env.fails(&["snapshot", "diff", missing_snapshot]);
    assert!(stderr.contains("no rewind database at"), "{stderr}");
    let elsewhere = tempfile::TempDir::new().expect("another directory");
    let recorded = env
        .rewind_in(elsewhere.path(), &["exec", "--", "true"])
        .output()
        .expect("runs");
    assert!(recorded.status.success(), "{recorded:?}");
    let objects = || -> Vec<std::path::PathBuf> {
        walk_files(&env.data.path().join("snapshot"))
            .into_iter()
            .filter(|path| path.components().any(|c| c.as_os_str() == "objects"))
            .collect()
    };
    let stored = objects();
    let files = env.state();
    let stderr = env.fails(&["snapshot", "diff", missing_snapshot]);
    assert!(stderr.contains("missing"), "{stderr}");
    assert_state(
        &env,
        &files,
        "after `rewind snapshot diff` of a missing snapshot",
    );
    assert_eq!(objects(), stored, "the worktree was snapshotted");
    let tracked = env.json(&["snapshot", "track"]);
    assert!(tracked["id"].is_string(), "{tracked}");
    let stderr = env.fails(&["snapshot", "diff", missing_snapshot]);
    assert!(stderr.contains("missing"), "{stderr}");
}

/// A data directory whose name holds URL characters gets its database inside it (review: the default
/// URL was not escaped, so `?` failed as a URL parameter and `%41` opened `A`'s database).
#[test]
fn a_data_directory_with_url_characters_holds_its_database() {
    let env = Env::plain();
    for name in ["a?b", "r%41"] {
        let data = env.data.path().join(name);
        let output = track_with_data_dir(&env, &data);
        assert!(output.status.success(), "{name}: {output:?}");
        assert!(data.join("rewind.db").is_file(), "{name}");
    }
    assert!(!env.data.path().join("rA").exists());
}

/// A `REWIND_*` variable set but empty, or `REWIND_PROJECT_ROOTS` with an empty entry, is refused by
/// its own name (exit 2) before anything is opened; clap named the flag it stands for, which the user
/// never typed (review).
#[test]
fn an_empty_rewind_variable_is_refused_by_its_name() {
    let env = Env::plain();
    for (name, value, says) in [
        ("REWIND_DATA_DIR", "", "REWIND_DATA_DIR is set but empty"),
        ("REWIND_SIZE_CAP", "", "REWIND_SIZE_CAP is set but empty"),
        // A `serve` flag's variable too.
        ("REWIND_HOSTNAME", "", "REWIND_HOSTNAME is set but empty"),
        (
            "REWIND_PROJECT_ROOTS",
            "/src:",
            "REWIND_PROJECT_ROOTS has an empty entry",
        ),
        (
            "REWIND_PROJECT_ROOTS",
            "::",
            "REWIND_PROJECT_ROOTS has an empty entry",
        ),
    ] {
        let output = env
            .rewind(&["log"])
            .env(name, value)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}={value:?}: {stderr}");
        assert!(
            stderr.contains(says) && !stderr.contains("--"),
            "{name}={value:?}: {stderr}"
        );
        let made: Vec<_> = std::fs::read_dir(env.data.path())
            .expect("list the data directory")
            .flatten()
            .collect();
        assert!(made.is_empty(), "{name}={value:?}: {made:?}");
    }
    // A well-formed list still works.
    let output = env
        .rewind(&["status"])
        .env("REWIND_PROJECT_ROOTS", "/src:/tmp")
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
}

/// Every file below `dir` (none when it does not exist).
fn walk_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(at) = pending.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

#[test]
fn a_usage_error_exits_non_zero_with_clap_s_message() {
    let env = Env::plain();
    let output = env.rewind(&["exec"]).output().expect("runs");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("Usage"));
    let output = env
        .rewind(&["gc", "--older-than", "soon"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn exec_in_the_home_directory_is_refused_before_anything_runs_or_is_recorded() {
    let env = Env::plain();
    let home = env.config_home.path();
    let output = env
        .rewind_in(home, &["exec", "--", "sh", "-c", "printf 'x\\n' > ran.txt"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("home directory"), "{stderr}");
    assert!(!home.join("ran.txt").exists(), "the command did not run");
    let output = env
        .rewind_in(home, &["--json", "status"])
        .output()
        .expect("runs");
    assert!(output.status.success(), "status works anywhere");
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(
        status["sessions"],
        serde_json::json!([]),
        "no session was recorded"
    );
    assert!(status["store"]["error"].as_str().is_some(), "{status}");
}

/// A reader that has gone (`rewind log | head -1`): stdout is a pipe with no reader from the start, so the
/// first line written fails with EPIPE. The command ends quietly with 141 (as `SIGPIPE` would end it),
/// never with a panic (101) or an error (`--json` said "cannot write to stdout" and exited 1), and what it
/// read is unchanged.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let env = Env::plain();
    env.exec_sh("printf 'one\\n' > a.txt");
    let log = env.json(&["log"]);
    for args in [
        vec!["log"],
        vec!["--json", "log"],
        vec!["status"],
        vec!["--json", "status"],
    ] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let output = env
            .process_in(env.path(), &args)
            .stdout(std::process::Stdio::from(writer))
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !stderr.contains("panicked"),
            "`rewind {}` panicked: {stderr}",
            args.join(" ")
        );
        assert_eq!(
            output.status.code(),
            Some(141),
            "`rewind {}`: {stderr}",
            args.join(" ")
        );
        assert!(stderr.is_empty(), "`rewind {}`: {stderr}", args.join(" "));
    }
    assert_eq!(env.json(&["log"]), log);
}

/// A first `exec` the store refuses (the worktree is over the file-count cap) runs nothing and leaves no
/// empty session behind: the session it created for the turn is taken away again.
#[test]
fn a_refused_first_exec_runs_nothing_and_leaves_no_session() {
    let env = Env::plain();
    for name in ["a", "b", "c", "d", "e"] {
        std::fs::write(env.path().join(name), name).expect("write");
    }
    let files = env.state();
    let output = env
        .rewind(&["--file-cap", "3", "exec", "--", "sh", "-c", "touch ran"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cap"), "{stderr}");
    assert_state(&env, &files, "after the refused exec");
    let status = env.json(&["status"]);
    assert_eq!(status["sessions"], serde_json::json!([]), "{status}");
}

/// A database file that is not SQLite: the message says so once, with the driver's cause once (errors
/// that repeat their cause in their own text are printed without the repeat), and the file is untouched.
#[test]
fn a_corrupt_database_is_named_once_with_its_cause_once() {
    let env = Env::plain();
    let db = env.data.path().join("other.db");
    let mut bytes = b"this is not a database, only some text ".repeat(200);
    bytes.truncate(4096);
    std::fs::write(&db, &bytes).expect("write");
    let url = format!("sqlite://{}", db.display());
    let output = env
        .rewind(&["--database-url", &url, "status"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.matches("is corrupt").count(), 1, "{stderr}");
    assert_eq!(
        stderr.matches("file is not a database").count(),
        1,
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&db).expect("read"),
        bytes,
        "the file is untouched"
    );
}

/// A SQLite URL naming a file that does not exist, without `mode=rwc`: the error says so and how to ask for
/// the file to be created, and nothing is created; with `mode=rwc` the database is made.
#[test]
fn a_missing_sqlite_file_without_mode_rwc_is_named_with_the_fix() {
    let env = Env::plain();
    let db = env.data.path().join("new.db");
    let url = format!("sqlite://{}", db.display());
    let stderr = env.fails(&["--database-url", &url, "status"]);
    assert!(
        stderr.contains("does not exist") && stderr.contains("add ?mode=rwc to create it"),
        "{stderr}"
    );
    assert!(!db.exists());
    // With `mode=rwc`, `status` shows there is none yet and creates nothing; a recording command makes it.
    let stdout = env.ok(&["--database-url", &format!("{url}?mode=rwc"), "status"]);
    assert!(stdout.contains("no database yet"), "{stdout}");
    assert!(!db.exists());
    env.ok(&[
        "--database-url",
        &format!("{url}?mode=rwc"),
        "snapshot",
        "track",
    ]);
    assert!(db.exists());
}

/// A worktree that is the data directory (or inside it) is refused before the database is opened: the
/// refusal used to come from the snapshot store, after the database files had been created in the user's
/// directory (found by a black-box run).
#[test]
fn a_worktree_that_is_the_data_directory_is_refused_before_anything_is_written() {
    let env = Env::plain();
    std::fs::write(env.path().join("a.txt"), "a\n").expect("write");
    let before = env.state();
    let worktree = env.path().to_str().expect("utf-8").to_owned();
    for args in [
        vec!["snapshot", "track"],
        vec!["exec", "--", "touch", "ran"],
        vec!["log"],
    ] {
        let output = env
            .bare()
            .args(["--data-dir", worktree.as_str(), "-C", worktree.as_str()])
            .args(&args)
            .output()
            .expect("runs");
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("is rewind's data directory") && stderr.contains("--data-dir"),
            "{stderr}"
        );
        assert_eq!(
            env.state(),
            before,
            "`rewind {}` wrote nothing",
            args.join(" ")
        );
    }
}

/// Text output that cannot be written (a full disk: `> /dev/full`) is an error as any other, `error: …`
/// on stderr and exit 1, not a panic with exit 101 (black-box). Output comes after the work, so an undo
/// whose report could not be written has still undone the turn, and says so.
#[test]
fn text_output_that_cannot_be_written_is_an_error_not_a_panic() {
    let env = Env::plain();
    std::fs::write(env.path().join("a.txt"), "a0\n").expect("write");
    env.exec_sh("printf 'a1\\n' > a.txt");
    // `args` run with stdout or stderr (`to_stderr`) on a full disk.
    let full = |args: &[&str], to_stderr: bool| {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .expect("open /dev/full");
        let mut command = env.process_in(env.path(), args);
        if to_stderr {
            command.stderr(full);
        } else {
            command.stdout(full);
        }
        command.output().expect("runs")
    };
    // clap's own help and version too (black-box: `--help > /dev/full` exited 0).
    for args in [
        &["status"][..],
        &["log"],
        &["undo"],
        &["--help"],
        &["--version"],
    ] {
        let output = full(args, false);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: cannot write to stdout: No space left on device")
                && !stderr.contains("panicked"),
            "{args:?}: {stderr}"
        );
        // A command's report lost says its work stands, so the undo is not run again (CLI review L4).
        if args == ["undo"] {
            assert!(
                stderr.contains("anything the command changed stays changed"),
                "{stderr}"
            );
        }
    }
    assert_eq!(
        std::fs::read_to_string(env.path().join("a.txt")).expect("read"),
        "a0\n",
        "the undo was done"
    );
    // Nor is stderr that cannot be written (black-box: 101): an error is exit 1, the status alone saying
    // it, and `exec` passes its command's code on, also when it warns (a FIFO is skipped).
    let made = std::process::Command::new("mkfifo")
        .arg(env.path().join("pipe"))
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let cases: [(&[&str], i32); 3] = [
        (&["undo"], 1),
        (&["exec", "--", "sh", "-c", "exit 3"], 3),
        (&["log", "--no-such-option"], 1),
    ];
    for (args, code) in cases {
        assert_eq!(full(args, true).status.code(), Some(code), "{args:?}");
    }
}

/// A database that cannot be written (opened here through `mode=ro`, as the tests run as root, for whom
/// file permissions do not stop a write; a read-only mount behaves the same): the commands that only show
/// (`log`, `diff`, `status`) show it as it is, with a warning, and the others are refused; nothing is
/// written to the database or the worktree. Every command used to be refused (black-box).
#[test]
fn a_read_only_database_is_shown_and_refuses_changes() {
    let env = Env::git_checkout();
    env.exec_sh("echo edited > a.txt; echo new > b.txt");
    env.exec_sh("rm README.md");
    let log = env.ok(&["log"]);
    let status = env.ok(&["status"]);
    let files = env.state();
    let store = store_of(&env);
    let db = env.data.path().join("rewind.db");
    let bytes = std::fs::read(&db).expect("read");
    let url = format!("sqlite://{}?mode=ro", db.display());

    for (command, writable) in [("log", &log), ("status", &status)] {
        let output = env
            .rewind(&["--database-url", &url, command])
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{command}: {stderr}");
        assert_eq!(
            &String::from_utf8_lossy(&output.stdout),
            writable,
            "{command} shows what it shows on a writable database"
        );
        assert!(
            stderr.contains("is read-only: shown as it is"),
            "{command}: {stderr}"
        );
    }
    let diff = env
        .rewind(&["--database-url", &url, "diff"])
        .output()
        .expect("runs");
    assert!(diff.status.success());
    assert!(String::from_utf8_lossy(&diff.stderr).contains("is not reverted"));

    let refused = env.fails(&["--database-url", &url, "undo"]);
    assert!(refused.contains("read-only"), "{refused}");
    assert_state(&env, &files, "after the refused undo");

    // A dry run only reads the database, so it answers; it snapshots the directory, so with the store
    // not writable either (its lock file immutable, as on a read-only mount) it is refused, naming the
    // store and what to do (dry-run check D5: it named the lock file and the OS error alone).
    let planned = env.json(&["--database-url", &url, "undo", "--dry-run"]);
    assert_eq!(planned["action"], "revert", "{planned}");
    let lock = store.join("rewind").join("lock");
    assert!(
        crate::support::chattr("+i", &lock),
        "chattr +i (an ext4 the tests run on)"
    );
    let output = env
        .rewind(&["--database-url", &url, "undo", "--dry-run"])
        .output()
        .expect("runs");
    assert!(crate::support::chattr("-i", &lock));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: failed while planning the revert: cannot write to the snapshot store {} (in \
             rewind's data directory): ",
            store.display()
        )) && stderr.contains("make it writable for this user"),
        "{stderr}"
    );
    assert_state(&env, &files, "after the refused dry run");
    assert_eq!(
        std::fs::read(&db).expect("read"),
        bytes,
        "the database is unchanged"
    );
    assert!(
        env.ok(&["log"]).contains("README.md"),
        "and still readable with writing"
    );
}

/// A database whose write lock another process holds past the busy timeout: the commands that only show
/// show it as it is (readers are not stopped by a writer under WAL), with a warning, and the others are
/// refused as locked; nothing is written. `log` used to be refused too (review).
#[test]
fn a_database_locked_by_another_process_is_shown_and_refuses_changes() {
    let env = Env::plain();
    std::fs::write(env.path().join("a.txt"), "v1\n").expect("write");
    env.exec_sh("echo v2 > a.txt");
    let log = env.ok(&["log"]);
    let files = env.state();
    let db = env.data.path().join("rewind.db");
    let mut holder = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys, time\n\
             c = sqlite3.connect(sys.argv[1], isolation_level=None)\n\
             c.execute('BEGIN IMMEDIATE')\n\
             print('locked', flush=True)\n\
             time.sleep(60)\n",
        )
        .arg(&db)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("reads");
    assert_eq!(line.trim(), "locked");

    let output = env.rewind(&["log"]).output().expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), log);
    assert!(
        stderr.contains("is locked by another process: shown as it is"),
        "{stderr}"
    );
    let refused = env.fails(&["undo"]);
    assert!(refused.contains("locked"), "{refused}");
    assert_state(&env, &files, "after the refused undo");
    let _ = holder.kill();
    let _ = holder.wait();
    env.ok(&["undo"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join("a.txt")).expect("read"),
        "v1\n"
    );
}

/// A secret given as a flag (`serve --password`, a password in `--database-url`) gets a warning that it
/// shows in the process list; the same from its variable gets none (review).
#[test]
fn a_secret_given_as_a_flag_is_warned_of() {
    let env = Env::plain();
    let url = "postgres://u:pw@127.0.0.1:1/db";
    let flag = env
        .rewind(&["--database-url", url, "status"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&flag.stderr);
    assert!(
        stderr.contains("password in --database-url shows in the process list"),
        "{stderr}"
    );
    assert!(!stderr.contains("pw@"), "{stderr}");
    let variable = env
        .rewind(&["status"])
        .env("REWIND_DATABASE_URL", url)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&variable.stderr);
    assert!(!stderr.contains("process list"), "{stderr}");
    // `serve` refuses a project root that does not exist before it listens; the warning comes first.
    let missing = env.data.path().join("no-such-root");
    let serve = env
        .rewind(&["serve", "--password", "s3cret", "--port", "0"])
        .arg("--project-root")
        .arg(&missing)
        .timeout(std::time::Duration::from_secs(30))
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&serve.stderr);
    assert!(!serve.status.success(), "{stderr}");
    assert!(
        stderr.contains("--password shows in the process list"),
        "{stderr}"
    );
}

/// A `--project-root` whose path holds a `:` is that one directory; only the variable is a `:`-separated
/// list (review: the flag was split too, into two roots, one the user never named).
#[test]
fn a_project_root_flag_with_a_colon_is_one_directory() {
    let env = Env::plain();
    let base = env.data.path().join("roots");
    for dir in ["a", "b", "c"] {
        std::fs::create_dir_all(base.join(dir)).expect("mkdir");
    }
    // Split, the flag named `a` and `b`, both there, and the server started (to be stopped by the
    // timeout).
    let mut serve = env.bare();
    serve
        .args(["--data-dir"])
        .arg(env.data.path())
        .arg("-C")
        .arg(&base)
        .args(["serve", "--port", "0", "--project-root"])
        .arg(base.join("a:b"));
    let output = assert_cmd::Command::from_std(serve)
        .timeout(std::time::Duration::from_secs(20))
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("a:b"), "{stderr}");
    // The variable is a list: both roots are taken, and `status` runs.
    let listed = format!("{}:{}", base.join("a").display(), base.join("c").display());
    let output = env
        .rewind(&["status"])
        .env("REWIND_PROJECT_ROOTS", listed)
        .output()
        .expect("runs");
    assert!(output.status.success(), "{output:?}");
}

/// `--hostname` with a port in it cannot be listened on: the error says what the flag takes, not that
/// another server may be running (review: that hint came for every failure to listen). An IPv6 address
/// in brackets, as a URL writes it, is that address (review: it failed with the same hint).
#[test]
fn a_hostname_that_cannot_be_listened_on_says_what_the_flag_takes() {
    let env = Env::plain();
    // `serve --hostname HOSTNAME`, which must fail: its stderr.
    let refused = |hostname: &str| {
        let output = env
            .rewind(&["serve", "--port", "0", "--hostname", hostname])
            .env("REWIND_PASSWORD", "s3cret")
            .timeout(std::time::Duration::from_secs(30))
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(!output.status.success(), "{stderr}");
        stderr
    };
    let stderr = refused("localhost:8080");
    assert!(stderr.contains("without a port or a scheme"), "{stderr}");
    assert!(!stderr.contains("another server"), "{stderr}");
    // An address of another machine (TEST-NET-1) is named as such.
    let stderr = refused("192.0.2.1");
    assert!(
        stderr.contains("is not an address of this machine"),
        "{stderr}"
    );
    // `[::1]` is loopback, and is listened on (when this host has IPv6 at all).
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        let server = crate::support::Server::start_with(&env, "warn", &["--hostname", "[::1]"]);
        assert!(
            server.first_line.contains("http://[::1]:"),
            "{}",
            server.first_line
        );
        server.stop();
    }
}

/// A variable's value that is not valid is refused naming the variable, which the user set, not only the
/// flag behind it, which they never typed (review); a flag given on the command line is named as before.
#[test]
fn an_invalid_variable_is_refused_by_its_name() {
    let env = Env::plain();
    let output = env
        .rewind(&["status"])
        .env("REWIND_STEP_TIMEOUT", "ten")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid value 'ten' in REWIND_STEP_TIMEOUT"),
        "{stderr}"
    );
    let output = env
        .rewind(&["status", "--step-timeout", "ten"])
        .env("REWIND_STEP_TIMEOUT", "ten")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("'--step-timeout <"), "{stderr}");
    assert!(!stderr.contains("REWIND_STEP_TIMEOUT"), "{stderr}");
    // A number out of range is a usage error too, flag or variable (CLI review L1: exit 1 where a value
    // that is no number gave 2).
    for (flag, value, variable) in [
        ("--size-cap", "0", "REWIND_SIZE_CAP"),
        ("--file-cap", "0", "REWIND_FILE_CAP"),
        ("--step-timeout", "0", "REWIND_STEP_TIMEOUT"),
        ("--step-timeout", "99999999999", "REWIND_STEP_TIMEOUT"),
    ] {
        let output = env.rewind(&["status", flag, value]).output().expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(stderr.contains(&format!("'{flag} <")), "{stderr}");
        let output = env
            .rewind(&["status"])
            .env(variable, value)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{variable}={value}: {stderr}"
        );
        assert!(stderr.contains(variable), "{stderr}");
    }
}

/// The store of `env`'s worktree, as `status --json` names it.
fn store_of(env: &Env) -> std::path::PathBuf {
    let status = env.json(&["status"]);
    std::path::PathBuf::from(status["store"]["path"].as_str().expect("the store's path"))
}

/// An id the store holds as a tree but that no snapshot of the directory is (a subdirectory's tree, git's
/// empty tree) is refused by `snapshot restore` and `snapshot diff`, and nothing is touched (review: a
/// subdirectory's tree was restored over the root's files, and the empty tree "restored" from a store that
/// never held it).
#[test]
fn a_tree_that_is_no_snapshot_is_refused() {
    let env = Env::plain();
    std::fs::write(env.path().join("a.txt"), "root\n").expect("write");
    env.exec_sh("mkdir docs; echo 'docs version' > docs/a.txt");
    let snapshot = env.snapshot_id();
    let git_dir = format!("--git-dir={}", store_of(&env).display());
    let output = std::process::Command::new("git")
        .args([&git_dir, "rev-parse", &format!("{snapshot}:docs")])
        .output()
        .expect("git rev-parse");
    let subtree = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    assert_eq!(subtree.len(), 40, "{output:?}");
    let files = env.state();
    for args in [
        vec!["snapshot", "restore", &subtree, "a.txt"],
        vec!["snapshot", "restore", &subtree],
        vec!["snapshot", "diff", &subtree],
        vec!["snapshot", "diff", &snapshot, &subtree],
        vec![
            "snapshot",
            "restore",
            "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
        ],
    ] {
        let stderr = env.fails(&args);
        assert!(stderr.contains("is not a snapshot of"), "{stderr}");
        assert_state(&env, &files, &args.join(" "));
    }
    // A snapshot of this directory is still restored and compared, also once the store lost its record
    // of it (known from the store's log of returned ids), and, with that log lost too, a capture the
    // database names (review: the capture that undoes a restore was refused).
    env.ok(&["snapshot", "diff", &snapshot]);
    let store = store_of(&env);
    let restored = env.json(&["snapshot", "restore", &snapshot, "a.txt"]);
    let capture = restored["capture"].as_str().expect("a capture").to_owned();
    std::fs::remove_file(store.join("rewind/records").join(&capture)).expect("lose the record");
    std::fs::remove_file(store.join("rewind/returned")).expect("lose the log");
    env.ok(&["snapshot", "restore", &capture, "a.txt"]);
    std::fs::write(env.path().join("only-tracked.txt"), "x\n").expect("write");
    let tracked = env.snapshot_id();
    std::fs::remove_file(store.join("rewind/records").join(&tracked)).expect("lose the record");
    // Two ids: nothing is tracked (which would write the record again).
    env.ok(&["snapshot", "diff", &snapshot, &tracked]);
    // Known to neither the store nor the database any more: refused.
    std::fs::remove_file(store.join("rewind/returned")).expect("lose the log");
    let stderr = env.fails(&["snapshot", "diff", &snapshot, &tracked]);
    assert!(stderr.contains("is not a snapshot of"), "{stderr}");
}

/// A path through a file (`d/x/..` with `d/x` a file, `a.txt/`) names nothing, as the system says: it is
/// refused, not read as `d` or `a.txt` (review: `d/x/..` restored all of `d`).
#[test]
fn a_restore_path_through_a_file_is_refused() {
    let env = Env::plain();
    std::fs::create_dir(env.path().join("d")).expect("mkdir");
    for name in ["d/x", "d/y", "a.txt"] {
        std::fs::write(env.path().join(name), "orig\n").expect("write");
    }
    let snapshot = env.snapshot_id();
    for name in ["d/x", "d/y", "a.txt"] {
        std::fs::write(env.path().join(name), "new\n").expect("write");
    }
    std::os::unix::fs::symlink("a.txt", env.path().join("link")).expect("symlink");
    let files = env.state();
    for path in ["d/x/..", "a.txt/", "a.txt/.", "link/"] {
        let stderr = env.fails(&["snapshot", "restore", &snapshot, path]);
        assert!(stderr.contains("is a file, not a directory"), "{stderr}");
        assert_state(&env, &files, path);
    }
    env.ok(&["snapshot", "restore", &snapshot, "d/x"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join("d/y")).expect("read"),
        "new\n"
    );
}

/// A damaged snapshot store does not leave a step open for good: the step of an `exec` whose start
/// cannot be read is closed as not undoable (exit 1, its warning says why), no step stays open, and an
/// `undo` that needs the damaged snapshots refuses with the damage named (review: every later command
/// failed "while aborting the open step").
#[test]
fn a_damaged_store_leaves_no_step_open() {
    let env = Env::plain();
    std::fs::write(env.path().join("a.txt"), "a\n").expect("write");
    env.exec_sh("echo one >> a.txt; echo new > b.txt");
    let store = store_of(&env);
    let mut damaged = 0;
    for file in walk_files(&store.join("objects")) {
        let name = file.to_string_lossy();
        if name.ends_with(".pack") || file.parent().is_some_and(|d| d.ends_with_two_hex()) {
            let mut permissions = std::fs::metadata(&file).expect("stat").permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o644);
            std::fs::set_permissions(&file, permissions).expect("chmod");
            std::fs::write(&file, "junk").expect("damage");
            damaged += 1;
        }
    }
    assert!(damaged > 0, "objects were damaged");
    let output = env
        .rewind(&["exec", "--", "touch", "z"])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    let status = env.json(&["status"]);
    let sessions = status["sessions"].as_array().expect("sessions");
    assert!(
        sessions.iter().all(|s| s["busy"] == false),
        "no step stays open: {status}"
    );
    // The turn whose changes cannot be worked out is undone as a turn (its files stay); the one before,
    // whose snapshots are damaged, is refused, the damage named.
    env.ok(&["undo"]);
    assert!(env.path().join("z").exists(), "the step's changes stay");
    let before = env.state();
    let stderr = env.fails(&["undo"]);
    assert!(stderr.contains("damaged"), "{stderr}");
    assert!(!stderr.contains("aborting the open step"), "{stderr}");
    // A damaged object may be met after files were touched: the rollback says what it found, that no
    // file had been written or that the files were put back, never both, and the files are as before.
    let unchanged = stderr.contains("nothing was changed");
    let put_back = stderr.contains("were put back");
    assert!(unchanged != put_back, "{stderr}");
    assert_state(&env, &before, "after the refused undo");
}

/// An undo whose snapshot's objects are gone from the store is refused, the files as they were, saying
/// "nothing was changed" once (CLI review L9: the rollback's words and the command line's hint said it
/// twice).
#[test]
fn an_undo_whose_snapshot_objects_are_gone_says_nothing_was_changed_once() {
    let env = Env::plain();
    std::fs::write(env.path().join("a.txt"), "a0\n").expect("write");
    env.exec_sh("printf 'a1\\n' > a.txt");
    let objects = store_of(&env).join("objects");
    for entry in std::fs::read_dir(&objects).expect("objects").flatten() {
        let path = entry.path();
        if path.ends_with_two_hex() {
            std::fs::remove_dir_all(&path).expect("remove loose objects");
        } else if path.ends_with("pack") {
            for pack in std::fs::read_dir(&path).expect("packs").flatten() {
                std::fs::remove_file(pack.path()).expect("remove a pack file");
            }
        }
    }
    let before = env.state();
    let stderr = env.fails(&["undo"]);
    assert!(stderr.contains("snapshot object missing"), "{stderr}");
    assert_eq!(stderr.matches("nothing was changed").count(), 1, "{stderr}");
    assert_state(&env, &before, "after the refused undo");
}

/// A directory named by two hex digits (a loose object's).
trait TwoHex {
    fn ends_with_two_hex(&self) -> bool;
}

impl TwoHex for std::path::Path {
    fn ends_with_two_hex(&self) -> bool {
        self.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit()))
    }
}

/// A command refused because its database cannot be opened (a URL naming none), and a server refused
/// because its address cannot be had (taken by another program) or a project root is a file, leave no
/// data directory or database behind: the data directory is made for the database, and the server binds before opening it (review:
/// both were left, the server's with a migrated database in it).
#[test]
fn a_refused_database_or_address_leaves_no_data_directory() {
    let env = Env::plain();
    let data = env.data.path().join("new/data");
    let data_arg = data.to_str().expect("a UTF-8 path");
    for url in ["garbage", "mysql://x/y"] {
        let output = env
            .bare()
            .args(["--data-dir", data_arg, "--database-url", url, "-C"])
            .arg(env.path())
            .args(["exec", "--", "true"])
            .output()
            .expect("runs");
        assert_eq!(output.status.code(), Some(1), "{url}: {output:?}");
        assert!(
            !env.data.path().join("new").exists(),
            "{url}: a data directory was left"
        );
    }
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = taken.local_addr().expect("its address").port().to_string();
    let output = env
        .bare()
        .args(["--data-dir", data_arg, "-C"])
        .arg(env.path())
        .args(["serve", "--port", &port])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("cannot listen"),
        "{output:?}"
    );
    assert!(
        !env.data.path().join("new").exists(),
        "the refused server left a data directory"
    );
    // A project root that is a file would refuse every session once the server runs: refused at start.
    let file = env.path().join("a-file");
    std::fs::write(&file, "x").expect("write");
    let output = env
        .bare()
        .args(["--data-dir", data_arg, "-C"])
        .arg(env.path())
        .args(["serve", "--port", "0", "--project-root"])
        .arg(&file)
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1), "{output:?}");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("is not a directory"),
        "{output:?}"
    );
    assert!(!env.data.path().join("new").exists());
}

/// The default config file (`$XDG_CONFIG_HOME/rewind/config.toml`) present but not a file (a directory) is
/// an error naming it, as an explicit `--config` would be, not skipped for the defaults (which would put
/// the turn in another data directory or database; review); nothing is recorded.
#[test]
fn a_default_config_file_that_cannot_be_read_is_an_error() {
    let env = Env::plain();
    let config = env.config_home.path().join("rewind/config.toml");
    std::fs::create_dir_all(&config).expect("a directory in its place");
    let stderr = env.fails(&["exec", "--", "sh", "-c", "printf 'x\\n' > ran.txt"]);
    assert!(
        stderr.contains("cannot read the config file") && stderr.contains("config.toml"),
        "{stderr}"
    );
    assert!(
        !env.path().join("ran.txt").exists(),
        "the command did not run"
    );
    std::fs::remove_dir(&config).expect("remove it");
    // A symlink to nothing is there too.
    std::os::unix::fs::symlink("nowhere.toml", &config).expect("symlink");
    let stderr = env.fails(&["status"]);
    assert!(stderr.contains("cannot read the config file"), "{stderr}");
    std::fs::remove_file(&config).expect("remove it");
    env.ok(&["status"]);
}

/// A data directory rewind makes is private (0700): its snapshot stores hold copies of the worktree's
/// files, a 0600 key's content included, and other local users must not read them there (review: it was
/// made 0755).
#[test]
fn a_new_data_directory_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::plain();
    let data = env.data.path().join("made/here");
    let output = track_with_data_dir(&env, &data);
    assert!(output.status.success(), "{output:?}");
    for dir in [data.parent().expect("a parent"), data.as_path()] {
        let mode = std::fs::metadata(dir).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", dir.display());
    }
}
