//! `snapshot restore ID PATH` brings back one file and touches no other, records a capture that undoes it;
//! `gc` frees what nothing refers to and keeps what the sessions and captures need.

use crate::support::{Env, assert_state};

#[test]
fn restore_of_one_path_touches_no_other_file_and_can_be_undone() {
    let env = Env::git_checkout();
    std::fs::write(env.path().join("b.txt"), "b1\n").expect("write");
    let id = env.snapshot_id();
    let at_snapshot = env.state();
    std::fs::write(env.path().join("a.txt"), "changed\n").expect("write");
    std::fs::write(env.path().join("b.txt"), "b2\n").expect("write");
    std::fs::write(env.path().join("c.txt"), "new\n").expect("write");
    let before = env.state();

    let restore = env.json(&["snapshot", "restore", &id, "a.txt"]);
    let mut expected = before.clone();
    expected.insert("a.txt".to_owned(), at_snapshot["a.txt"].clone());
    assert_state(&env, &expected, "after restoring a.txt");

    // The capture holds what the restore overwrote: restoring it undoes the restore.
    let capture = restore["capture"].as_str().expect("capture").to_owned();
    env.ok(&["snapshot", "restore", &capture, "a.txt"]);
    assert_state(&env, &before, "after restoring the capture");

    // A whole restore puts back the snapshot's tracked content (c.txt did not exist then).
    env.ok(&["snapshot", "restore", &id]);
    assert_state(&env, &at_snapshot, "after restoring everything");
}

/// An absolute path that reaches the worktree through a symlink (`$PWD` in a directory entered through a
/// link) names the file inside it, as a relative one does; a symlink inside the worktree is not followed
/// for that, and a path elsewhere is still refused (review: the first was refused as outside).
#[test]
fn an_absolute_path_through_a_link_to_the_worktree_is_inside_it() {
    let env = Env::git_checkout();
    std::fs::write(env.path().join("b.txt"), "b1\n").expect("write");
    let id = env.snapshot_id();
    std::fs::write(env.path().join("a.txt"), "changed\n").expect("write");
    std::fs::write(env.path().join("b.txt"), "b2\n").expect("write");
    let links = tempfile::TempDir::new().expect("a directory for the link");
    let link = links.path().join("to-project");
    std::os::unix::fs::symlink(env.path(), &link).expect("a link to the worktree");
    let through = link.join("b.txt");
    let restore = env.json(&["snapshot", "restore", &id, through.to_str().expect("UTF-8")]);
    assert_eq!(
        restore["written"],
        serde_json::json!(["b.txt"]),
        "{restore}"
    );
    assert_eq!(
        std::fs::read_to_string(env.path().join("b.txt")).expect("read"),
        "b1\n"
    );
    assert_eq!(
        std::fs::read_to_string(env.path().join("a.txt")).expect("read"),
        "changed\n",
        "no other file"
    );
    let elsewhere = links.path().join("b.txt");
    let stderr = env.fails(&[
        "snapshot",
        "restore",
        &id,
        elsewhere.to_str().expect("UTF-8"),
    ]);
    assert!(stderr.contains("outside the worktree"), "{stderr}");
}

/// The command a restore of given paths names to undo it restores the capture at those same paths (a
/// whole restore of the capture would also put back files changed since, elsewhere), quoted for the shell.
#[test]
fn a_restore_of_paths_names_the_undo_for_those_paths() {
    let env = Env::git_checkout();
    let names = ["my file.txt", "it's.txt", "-dash.txt"];
    for name in names {
        std::fs::write(env.path().join(name), "one\n").expect("write");
    }
    let id = env.snapshot_id();
    for name in names.iter().chain(&["a.txt"]) {
        std::fs::write(env.path().join(name), "two\n").expect("write");
    }
    let before = env.state();
    // A name starting with `-` is given, and named back, as `./-…`, so it is not read as an option.
    let given = ["my file.txt", "it's.txt", "./-dash.txt"];
    let stdout = env.ok(&["snapshot", "restore", &id, given[0], given[1], given[2]]);
    let line = stdout
        .lines()
        .find(|line| line.contains("undoes this"))
        .unwrap_or_else(|| panic!("no undo hint: {stdout}"));
    let command = line
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("no command in {line}"));
    let rest = command
        .strip_prefix("rewind snapshot restore ")
        .unwrap_or_else(|| panic!("not a restore: {command}"));
    // The shell splits the named command into the capture and the two paths, as given.
    let split = std::process::Command::new("sh")
        .args(["-c", &format!("printf '%s\\n' {rest}")])
        .output()
        .expect("sh runs");
    let words = String::from_utf8(split.stdout).expect("utf-8");
    let words: Vec<&str> = words.lines().collect();
    assert_eq!(words.len(), 4, "{command}");
    assert_eq!(&words[1..], &given[..], "{command}");
    // `status` names the same command for its last capture.
    let status = env.ok(&["status"]);
    assert!(
        status.contains(&format!("`{command}` puts that state back")),
        "{status}"
    );

    let mut undo = vec!["snapshot", "restore"];
    undo.extend(&words);
    env.ok(&undo);
    assert_state(&env, &before, "after the named undo");
}

/// A grace period too long to count in milliseconds keeps everything (review: 2^63 seconds wrapped to a
/// grace of 0, and gc collected a snapshot `snapshot track` had just returned).
#[test]
fn a_grace_period_past_counting_keeps_every_snapshot() {
    let env = Env::plain();
    std::fs::write(env.path().join("stray.txt"), "keep me\n").expect("write");
    let id = env.snapshot_id();
    std::fs::remove_file(env.path().join("stray.txt")).expect("remove");
    env.ok(&["snapshot", "track"]);
    for grace in [
        "9223372036854775808",
        "18446744073709552",
        "18446744073709551615",
    ] {
        let gc = env.json(&["gc", "--grace-seconds", grace]);
        assert_eq!(gc["objectsRemoved"], 0, "--grace-seconds {grace}: {gc:#}");
    }
    env.ok(&["snapshot", "restore", &id, "stray.txt"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join("stray.txt")).expect("read"),
        "keep me\n"
    );
}

#[test]
fn gc_frees_unreferenced_snapshots_and_undo_still_works() {
    let env = Env::plain();
    env.exec_sh("printf 'one\\n' > a.txt");
    let after_one = env.state();
    env.exec_sh("printf 'two\\n' > a.txt");
    std::fs::write(env.path().join("stray.txt"), "nobody refers to this\n").expect("write");
    env.ok(&["snapshot", "track"]);
    std::fs::remove_file(env.path().join("stray.txt")).expect("remove");
    env.ok(&["snapshot", "track"]);

    let gc = env.json(&["gc", "--grace-seconds", "0"]);
    assert!(
        gc["objectsRemoved"].as_u64().expect("count") >= 1,
        "the stray snapshot's objects are freed: {gc:#}"
    );
    assert_eq!(gc["sessionsDeleted"], serde_json::json!([]));
    env.ok(&["undo"]);
    assert_state(&env, &after_one, "undo after gc");
    env.ok(&["redo"]);

    // Everything older than 0 days: the session goes, and with it its snapshots.
    let gc = env.json(&["gc", "--older-than", "0", "--grace-seconds", "0"]);
    assert_eq!(gc["sessionsDeleted"].as_array().expect("ids").len(), 1);
    assert!(gc["objectsRemoved"].as_u64().expect("count") >= 1, "{gc:#}");
    let stderr = env.fails(&["undo"]);
    assert!(stderr.contains("no rewind session"), "{stderr}");
    let status = env.json(&["status"]);
    assert_eq!(status["lastGc"]["sessionsDeleted"], 1);

    // The last gc is the database's: one of another database (`--database-url`) is not shown as this
    // one's, nor this one's as the other's (black-box: the data directory had one record for all).
    let other = format!(
        "sqlite://{}?mode=rwc",
        env.data.path().join("other.db").display()
    );
    env.json(&["--database-url", &other, "snapshot", "track"]);
    let status = env.json(&["--database-url", &other, "status"]);
    assert!(status.get("lastGc").is_none(), "{status:#}");
    env.json(&["--database-url", &other, "gc", "--older-than", "0"]);
    let status = env.json(&["--database-url", &other, "status"]);
    assert_eq!(status["lastGc"]["sessionsDeleted"], 0, "{status:#}");
    let status = env.json(&["status"]);
    assert_eq!(status["lastGc"]["sessionsDeleted"], 1, "{status:#}");
}

/// `gc` run from another directory collects the store of a worktree whose sessions are all gone (deleted
/// within the grace period by an earlier gc): it finds the worktree from its store's record, since no
/// session or capture names it any more (black-box: its objects were never collected unless gc ran
/// from that directory).
#[test]
fn gc_from_elsewhere_collects_the_store_of_a_worktree_no_session_names_any_more() {
    let env = Env::plain();
    for n in 1..=3 {
        env.exec_sh(&format!("printf '{n}\\n' > f; printf '{n}\\n' > g{n}"));
    }
    let elsewhere = tempfile::TempDir::new().expect("another directory");
    let gc_elsewhere = |args: &[&str]| {
        let output = env
            .rewind_in(elsewhere.path(), &[&["--json", "gc"][..], args].concat())
            .output()
            .expect("gc");
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice::<serde_json::Value>(&output.stdout).expect("JSON")
    };
    // The sessions go; their objects stay within the grace period.
    let first = gc_elsewhere(&["--older-than", "0"]);
    assert_eq!(
        first["sessionsDeleted"].as_array().map(Vec::len),
        Some(1),
        "{first:#}"
    );
    let second = gc_elsewhere(&["--grace-seconds", "0"]);
    let worktree = std::fs::canonicalize(env.path()).expect("canonical");
    let entry = second["worktrees"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|w| w["directory"] == worktree.to_str().expect("UTF-8"))
        .unwrap_or_else(|| panic!("the worktree's store is visited: {second:#}"));
    assert!(
        entry["report"]["objectsRemoved"].as_u64().unwrap_or(0) >= 1,
        "its objects are collected: {second:#}"
    );
}

/// The store of a directory that was deleted is removed whole by gc once no session names the directory
/// and nothing was returned from it within the grace period: gc cannot open a store without its worktree,
/// so its objects stayed for good. While a session names it, it stays; a gc that deletes that session
/// removes it in the same run (black-box: it took a second run). The grace period is checked by rewind-git's
/// `the_store_of_a_gone_worktree_is_removed_once_unnamed_and_past_the_grace_period`.
#[test]
fn gc_removes_the_store_of_a_deleted_directory_no_session_names() {
    let env = Env::plain();
    env.exec_sh("printf 'here\\n' > a.txt");
    let gone = tempfile::TempDir::new().expect("another directory");
    let gone_path = std::fs::canonicalize(gone.path()).expect("canonical");
    env.rewind_in(
        &gone_path,
        &["exec", "--", "sh", "-c", "printf 'x\\n' > x.txt"],
    )
    .assert()
    .success();
    let store = env
        .data
        .path()
        .join("snapshot")
        .read_dir()
        .expect("stores")
        .flatten()
        .map(|e| e.path())
        .find(|dir| {
            std::fs::read(dir.join("rewind").join("worktree"))
                .ok()
                .as_deref()
                == Some(gone_path.as_os_str().as_encoded_bytes())
        })
        .expect("the directory's store");
    drop(gone);
    let gc = |args: &[&str]| {
        let output = env
            .rewind(&[&["--json", "gc"][..], args].concat())
            .output()
            .expect("gc");
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice::<serde_json::Value>(&output.stdout).expect("JSON")
    };
    let removed = |summary: &serde_json::Value| {
        summary["worktrees"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|w| w["storeRemoved"] == true)
            .cloned()
            .collect::<Vec<_>>()
    };
    // Its session still names it: the store stays, left for a later gc, which the text does not call a
    // failure (CLI review L8: `! …: not collected: …`).
    let first = gc(&["--grace-seconds", "0"]);
    assert!(removed(&first).is_empty(), "{first:#}");
    assert!(store.join("HEAD").is_file());
    let text = env.ok(&["gc", "--grace-seconds", "0"]);
    let line = text
        .lines()
        .find(|l| l.contains(gone_path.to_str().expect("UTF-8")))
        .expect("a line for the deleted directory");
    assert!(
        line.starts_with("  ") && line.contains("left for a later gc"),
        "{text}"
    );
    // Its session goes (with this directory's), and so does its store, in the same run.
    let second = gc(&["--older-than", "0", "--grace-seconds", "0"]);
    let gone_entries = removed(&second);
    assert_eq!(gone_entries.len(), 1, "{second:#}");
    assert_eq!(
        gone_entries[0]["directory"],
        gone_path.to_str().expect("UTF-8")
    );
    assert!(
        gone_entries[0]["report"]["objectsRemoved"]
            .as_u64()
            .unwrap_or(0)
            >= 1,
        "{second:#}"
    );
    assert!(!store.exists(), "the store was removed");
    // This directory, which exists, keeps its files and its store.
    assert_eq!(
        std::fs::read_to_string(env.path().join("a.txt")).expect("read"),
        "here\n"
    );
    let text = env.ok(&["gc", "--grace-seconds", "0"]);
    assert!(!text.contains("removed its store"), "once: {text}");
}

/// `status` writes out the command that restores the last capture with its paths when they are few, and
/// otherwise says where they are listed: a recovery's capture can name thousands (black-box audit: 87 KB
/// of `status` for 8,000 files).
#[test]
fn status_names_a_captures_paths_only_when_they_are_few() {
    let env = Env::git_checkout();
    let names: Vec<String> = (0..12).map(|n| format!("f{n:02}.txt")).collect();
    for name in &names {
        std::fs::write(env.path().join(name), "one\n").expect("write");
    }
    let id = env.snapshot_id();
    for (count, expect_all) in [(3, true), (12, false)] {
        for name in &names {
            std::fs::write(env.path().join(name), "two\n").expect("write");
        }
        let mut args = vec!["snapshot", "restore", id.as_str()];
        args.extend(names[..count].iter().map(String::as_str));
        let capture = env.json(&args)["capture"]
            .as_str()
            .expect("capture")
            .to_owned();
        let status = env.ok(&["status"]);
        let line = status
            .lines()
            .find(|line| line.starts_with("capture"))
            .unwrap_or_else(|| panic!("no capture line: {status}"));
        let named = names
            .iter()
            .filter(|name| line.contains(name.as_str()))
            .count();
        if expect_all {
            assert_eq!(named, count, "{line}");
            assert!(
                line.contains(&format!("`rewind snapshot restore {capture} f00.txt")),
                "{line}"
            );
        } else {
            assert_eq!(named, 0, "{line}");
            assert!(
                line.contains(&format!("`rewind snapshot restore {capture} PATH…`")),
                "{line}"
            );
            assert!(line.contains("lists its 12 paths"), "{line}");
            let listed = env.json(&["status"])["lastCapture"]["paths"]
                .as_array()
                .expect("paths")
                .len();
            assert_eq!(listed, 12);
        }
    }
}

/// A snapshot named in one worktree and restored from another directory (a warning's command run
/// elsewhere) is refused with the worktree it belongs to and how to run the command there, not as a
/// missing object that reads as lost (review); an id no session or capture names says so.
#[test]
fn a_snapshot_of_another_worktree_is_refused_naming_that_worktree() {
    let env = Env::git_checkout();
    std::fs::write(env.path().join("b.txt"), "b1\n").expect("write");
    let id = env.snapshot_id();
    std::fs::write(env.path().join("b.txt"), "b2\n").expect("write");
    let capture = env.json(&["snapshot", "restore", &id, "b.txt"])["capture"]
        .as_str()
        .expect("capture")
        .to_owned();
    let elsewhere = tempfile::TempDir::new().expect("another directory");
    std::fs::write(elsewhere.path().join("b.txt"), "mine\n").expect("write");
    let output = env
        .rewind_in(
            elsewhere.path(),
            &["snapshot", "restore", &capture, "b.txt"],
        )
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let worktree = std::fs::canonicalize(env.path()).expect("canonical");
    assert!(
        stderr.contains(&format!("It is a snapshot of {}", worktree.display()))
            && stderr.contains("missing from the snapshot store of")
            && stderr.contains("rewind -C ")
            && stderr.contains("nothing was changed"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(elsewhere.path().join("b.txt")).expect("read"),
        "mine\n"
    );
    // A snapshot this worktree's own captures name, lost from its store: said as lost, not as unknown.
    let store = env.json(&["status"])["store"]["path"]
        .as_str()
        .expect("the store's path")
        .to_owned();
    let objects = std::path::Path::new(&store).join("objects");
    std::fs::remove_dir_all(&objects).expect("remove the objects");
    std::fs::create_dir_all(&objects).expect("an empty objects directory");
    let stderr = env.fails(&["snapshot", "restore", &capture, "b.txt"]);
    assert!(
        stderr.contains("This directory's sessions or captures name it: the store has lost it"),
        "{stderr}"
    );
    let unknown = "0123456789abcdef0123456789abcdef01234567";
    let output = env
        .rewind_in(elsewhere.path(), &["snapshot", "restore", unknown])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("No session of this database names it"),
        "{stderr}"
    );
}

/// The SQLite database's files in `data` (the file, its log and shared memory), moved into `to`.
fn move_database(data: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for name in ["rewind.db", "rewind.db-wal", "rewind.db-shm"] {
        if data.join(name).exists() {
            std::fs::rename(data.join(name), to.join(name)).expect("move the database");
        }
    }
}

/// A database moved aside (as the message about a corrupt one says to do) and a fresh one made in its
/// place: the fresh one's stores are its own, so its `gc` never weighs the first one's snapshots, and the
/// first, put back, still undoes its turn. Before, stores were keyed on the file's path: both databases
/// shared them, the fresh one's gc collected the first one's snapshots, and its undo failed with "snapshot
/// object missing" (review).
#[test]
fn a_fresh_database_in_another_s_place_never_collects_its_snapshots() {
    let env = Env::plain();
    std::fs::write(env.path().join("a.txt"), "v1\n").expect("write");
    env.exec_sh("echo v2 > a.txt");
    let data = env.data.path().to_path_buf();
    let aside = tempfile::TempDir::new().expect("a place aside");
    move_database(&data, aside.path());

    env.exec_sh("echo v3 > a.txt");
    env.ok(&["gc", "--grace-seconds", "0"]);
    let stores = std::fs::read_dir(data.join("snapshot"))
        .expect("stores")
        .count();
    assert_eq!(stores, 2, "one store for each database");

    let fresh = tempfile::TempDir::new().expect("a place for the fresh one");
    move_database(&data, fresh.path());
    move_database(aside.path(), &data);
    env.ok(&["undo"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join("a.txt")).expect("read"),
        "v1\n"
    );
}

/// The SHA-1 of `bytes` in hex, by `sha1sum`.
fn sha1_hex(bytes: &[u8]) -> String {
    let mut sha1sum = std::process::Command::new("sha1sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("runs sha1sum");
    std::io::Write::write_all(&mut sha1sum.stdin.take().expect("stdin"), bytes).expect("writes");
    let out = sha1sum.wait_with_output().expect("sha1sum");
    String::from_utf8_lossy(&out.stdout)
        .split(' ')
        .next()
        .expect("a digest")
        .to_owned()
}

/// A store made before stores were keyed on the database's drawn identity (keyed on its canonical file
/// alone) is adopted when first opened: an upgrade keeps every snapshot.
#[test]
fn a_store_keyed_on_the_database_file_alone_is_adopted() {
    let env = Env::plain();
    std::fs::write(env.path().join("a.txt"), "v1\n").expect("write");
    env.exec_sh("echo v2 > a.txt");
    let root = env.data.path().join("snapshot");
    let stores: Vec<_> = std::fs::read_dir(&root)
        .expect("stores")
        .map(|entry| entry.expect("an entry").path())
        .collect();
    assert_eq!(stores.len(), 1);
    // Its key as before: sha1 of the canonical database file, NUL, the canonical worktree.
    let file = std::fs::canonicalize(env.data.path().join("rewind.db")).expect("canonical");
    let worktree = std::fs::canonicalize(env.path()).expect("canonical");
    let mut key = file.to_str().expect("UTF-8").as_bytes().to_vec();
    key.push(0);
    key.extend_from_slice(worktree.to_str().expect("UTF-8").as_bytes());
    let legacy = root.join(sha1_hex(&key));
    // And the record of its last gc, kept under the same identity's key.
    env.ok(&["gc"]);
    let record = std::fs::read_dir(env.data.path())
        .expect("the data dir")
        .map(|entry| entry.expect("an entry").path())
        .find(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("last-gc-"))
        })
        .expect("gc's record");
    let legacy_key = &sha1_hex(file.to_str().expect("UTF-8").as_bytes())[..16];
    std::fs::rename(
        &record,
        env.data.path().join(format!("last-gc-{legacy_key}.json")),
    )
    .expect("as an older rewind left it");
    assert_ne!(legacy, stores[0], "keyed otherwise now");
    std::fs::rename(&stores[0], &legacy).expect("as an older rewind left it");

    // Before any command that writes moves it: `status` names it, and `log` reads it where the store
    // directory cannot be written (`chattr +i`, as on a read-only mount; review: an upgraded data
    // directory's steps showed no files there, and `status` an empty store).
    let status = env.json(&["status"]);
    assert_eq!(
        status["store"]["path"].as_str(),
        legacy.to_str(),
        "{status:#}"
    );
    assert!(status["lastGc"]["time"].is_u64(), "{status:#}");
    assert!(
        crate::support::chattr("+i", &root),
        "chattr +i (an ext4 the tests run on)"
    );
    let log = env.rewind(&["log"]).output().expect("runs");
    assert!(crate::support::chattr("-i", &root));
    let shown = String::from_utf8_lossy(&log.stdout);
    assert!(log.status.success(), "{log:?}");
    assert!(shown.contains("a.txt +1 -1"), "{shown}");
    assert!(legacy.join("HEAD").is_file(), "not moved by a read");

    env.ok(&["undo"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join("a.txt")).expect("read"),
        "v1\n"
    );
    assert!(stores[0].join("HEAD").is_file(), "moved back into place");
    assert!(!legacy.exists());
}

/// The `git` a directory of `PATH` holds, as a shell finds it.
fn git_on_path() -> std::path::PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("git"))
        .find(|git| git.is_file())
        .expect("git on PATH")
}

/// A directory of the test's own laid out as a git installation's prefix: `bin/` and `etc/`, empty.
fn git_prefix() -> tempfile::TempDir {
    let prefix = tempfile::TempDir::new().expect("prefix");
    for dir in ["bin", "etc"] {
        std::fs::create_dir_all(prefix.path().join(dir)).expect("mkdir");
    }
    prefix
}

/// The test's `PATH` with `dirs` before it.
fn path_led_by(dirs: impl IntoIterator<Item = std::path::PathBuf>) -> std::ffi::OsString {
    std::env::join_paths(dirs.into_iter().chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("a PATH")
}

/// git reads its system files under its own prefix (a git built into `/usr/local` reads
/// `/usr/local/etc/gitattributes` and `/usr/local/etc/gitconfig`, Homebrew's `/opt/homebrew/etc/…`), not
/// only `/etc`'s: a filter declared there, or in the attributes file its system `gitconfig` names, or
/// `core.autocrlf` set there (or, unseen, in a file it includes or an attributes file named in a way
/// rewind cannot resolve), turns seeding off as in the repository, so the first snapshot holds the
/// bytes on disk, not the index's filtered blobs (seed review F1: a same-size clean filter declared in
/// git's own system file, and the snapshot held `HELLO` for a file reading `hello`, which a restore would
/// have written). The `git` on `PATH` is here a link at `PREFIX/bin/git` in a directory of the test's own;
/// the oracle is git's tree of the disk's bytes in a separate git directory, which no filter applies to.
#[test]
fn a_filter_in_the_system_files_of_the_git_on_path_turns_seeding_off() {
    for declared_in in [
        "gitattributes",
        "gitconfig",
        "gitconfig's autocrlf",
        "a file gitconfig includes",
        "an attributes file gitconfig names as rewind cannot resolve",
        // Not a system file: what `git -c` hands to the programs it runs (an alias, a hook).
        "GIT_CONFIG_PARAMETERS",
    ] {
        let env = Env::plain();
        let root = env.path();
        let prefix = git_prefix();
        let bin = prefix.path().join("bin");
        std::os::unix::fs::symlink(git_on_path(), bin.join("git")).expect("link");

        // Committed through a clean filter the repository declares in `info/attributes`, which is then
        // removed: the index holds the uppercased blobs, the disk the lowercase bytes, and their stat
        // data matches (written well before the index, so no entry is racy).
        let long_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        for i in 0..4 {
            let path = root.join(format!("sub/f{i}.txt"));
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(&path, format!("hello {i}\n")).expect("write");
            std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|file| file.set_modified(long_ago))
                .expect("backdated");
        }
        crate::support::git(root, &["init", "-q"]);
        for (key, value) in [
            ("filter.up.clean", "tr a-z A-Z"),
            ("filter.up.smudge", "cat"),
            ("core.autocrlf", "false"),
        ] {
            crate::support::git(root, &["config", key, value]);
        }
        let info = root.join(".git/info/attributes");
        std::fs::create_dir_all(info.parent().expect("parent")).expect("mkdir");
        std::fs::write(&info, "*.txt filter=up\n").expect("write");
        crate::support::commit_all(root, "filtered");
        std::fs::remove_file(&info).expect("rm");
        assert_eq!(
            crate::support::git(root, &["cat-file", "-p", ":sub/f0.txt"]),
            "HELLO 0\n"
        );

        match declared_in {
            "gitattributes" => {
                std::fs::write(prefix.path().join("etc/gitattributes"), "*.txt filter=up\n")
            }
            // The index may differ from the disk wherever the setting applies: nothing is seeded.
            "gitconfig's autocrlf" => std::fs::write(
                prefix.path().join("etc/gitconfig"),
                "[core]\n\tautocrlf = true\n",
            ),
            // Settings in a file it includes are not read: an include stops seeding (diff review).
            "a file gitconfig includes" => {
                let included = prefix.path().join("more");
                std::fs::write(&included, "[core]\n\tautocrlf = true\n").expect("write");
                std::fs::write(
                    prefix.path().join("etc/gitconfig"),
                    format!("[include]\n\tpath = {}\n", included.display()),
                )
            }
            // git's own install prefix, which rewind does not know: the file may name anything.
            "an attributes file gitconfig names as rewind cannot resolve" => std::fs::write(
                prefix.path().join("etc/gitconfig"),
                "[core]\n\tattributesFile = %(prefix)/attributes\n",
            ),
            "GIT_CONFIG_PARAMETERS" => {
                std::fs::write(prefix.path().join("attributes"), "*.txt filter=up\n")
            }
            _ => {
                let named = prefix.path().join("attributes");
                std::fs::write(&named, "*.txt filter=up\n").expect("write");
                std::fs::write(
                    prefix.path().join("etc/gitconfig"),
                    format!("[core]\n\tattributesFile = {}\n", named.display()),
                )
            }
        }
        .expect("the system file");

        let path = path_led_by([bin.clone()]);
        let mut rewind = env.rewind(&["snapshot", "track", "--json"]);
        rewind.env("PATH", path);
        if declared_in == "GIT_CONFIG_PARAMETERS" {
            rewind.env(
                "GIT_CONFIG_PARAMETERS",
                format!(
                    "'core.attributesfile'='{}'",
                    prefix.path().join("attributes").display()
                ),
            );
        }
        let output = rewind.output().expect("runs");
        assert!(output.status.success(), "{output:?}");
        let tracked: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");

        let separate = tempfile::TempDir::new().expect("a git dir");
        crate::support::git(separate.path(), &["init", "-q", "--bare"]);
        let oracle = |args: &[&str]| {
            let mut all = vec![
                "--git-dir".to_owned(),
                separate.path().display().to_string(),
                "--work-tree".to_owned(),
                root.display().to_string(),
            ];
            all.extend(args.iter().map(|arg| (*arg).to_owned()));
            crate::support::git(root, &all.iter().map(String::as_str).collect::<Vec<_>>())
        };
        oracle(&["add", "-A"]);
        let expected = oracle(&["write-tree"]);
        assert_eq!(
            tracked["id"].as_str(),
            Some(expected.trim()),
            "the disk's bytes (declared in {declared_in}): {tracked}"
        );
        assert_eq!(
            tracked["hashed"], 4,
            "every file read from disk ({declared_in})"
        );
    }
}

/// The ignore rules follow the system `gitconfig` of the git the user runs as rewind finds it without
/// running git (`git_config::user_system_file`: `PREFIX/etc/gitconfig` of the first executable `git` on
/// `PATH` at `PREFIX/bin/git` when it exists; here a script of the test's own), not `/etc/gitconfig` alone,
/// which gix reads: a `core.excludesFile` or `core.ignoreCase` set there applies as git's `git add -A`
/// applies that file (diff review: neither was applied, and the files it ignores were snapshotted, and a
/// revert could delete them), as do its conditional includes; a file named `git` before it on `PATH` that
/// cannot be run is passed over, as a shell passes it over. No git here was built for that prefix (git
/// reads its build's own file alone), so the oracle is git told that file (`GIT_CONFIG_SYSTEM`), in a
/// separate git directory. In a repository and in a plain directory, where rewind also ran the `git` on
/// `PATH` (`git config -l`, through gix's reading of the global files) at every track: the script notes
/// each run, and none may come from rewind.
#[test]
fn the_system_gitconfig_of_the_git_on_path_sets_the_ignore_rules() {
    for (case, in_repo) in [
        ("excludesFile", true),
        ("excludesFile", false),
        ("ignoreCase", true),
        ("ignoreCase", false),
        // `includeIf "gitdir:…"` in the system file, judged by the repository's git dir (review).
        ("a conditional include", true),
        ("a conditional include for another repository", true),
        // A file named `git` that cannot be run, before it on `PATH`, is not the git the user runs.
        ("excludesFile behind a git that cannot run", true),
        ("excludesFile behind a git that cannot run", false),
        // The first git on `PATH` a link at `OTHER/bin/git` to this one: this one's prefix is taken
        // first, where the git it runs lies, though `OTHER/etc/gitconfig` exists too.
        ("excludesFile through a link from another prefix", true),
    ] {
        let env = Env::plain();
        let root = env.path();
        let prefix = git_prefix();
        let bin = prefix.path().join("bin");
        let ran = prefix.path().join("ran");
        let script = bin.join("git");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho \"$@\" >> '{}'\nexec '{}' \"$@\"\n",
                ran.display(),
                git_on_path().display()
            ),
        )
        .expect("write");
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let system = prefix.path().join("etc/gitconfig");
        let separate = tempfile::TempDir::new().expect("a git dir");
        let excludes = prefix.path().join("ignore");
        std::fs::write(&excludes, "secret.txt\n").expect("write");
        let set_excludes = format!("[core]\n\texcludesFile = {}\n", excludes.display());
        let not_run = prefix.path().join("not-run");
        std::fs::create_dir_all(&not_run).expect("mkdir");
        std::fs::write(not_run.join("git"), "not a program\n").expect("write");
        match case {
            "ignoreCase" => {
                std::fs::write(root.join(".gitignore"), "SECRET.TXT\n").expect("write");
                std::fs::write(&system, "[core]\n\tignoreCase = true\n")
            }
            // The oracle's git dir is the separate one: the condition names it too.
            "a conditional include" | "a conditional include for another repository" => {
                let included = prefix.path().join("included");
                std::fs::write(&included, &set_excludes).expect("write");
                // `DIR/` matches the git dirs below DIR (a worktree's `.git`), `DIR` that one.
                let canonical = |dir: &std::path::Path| {
                    std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())
                };
                let patterns = if case == "a conditional include" {
                    [
                        format!("{}/", canonical(root).display()),
                        canonical(separate.path()).display().to_string(),
                    ]
                } else {
                    [
                        format!("{}/", prefix.path().join("elsewhere").display()),
                        prefix.path().join("other").display().to_string(),
                    ]
                };
                let conditions: String = patterns
                    .iter()
                    .map(|pattern| {
                        format!(
                            "[includeIf \"gitdir:{pattern}\"]\n\tpath = {}\n",
                            included.display()
                        )
                    })
                    .collect();
                std::fs::write(&system, conditions)
            }
            _ => std::fs::write(&system, &set_excludes),
        }
        .expect("the system file");
        std::fs::write(root.join("a.txt"), "kept\n").expect("write");
        std::fs::create_dir_all(root.join("sub")).expect("mkdir");
        std::fs::write(root.join("secret.txt"), "ignored\n").expect("write");
        std::fs::write(root.join("sub/secret.txt"), "ignored\n").expect("write");
        if in_repo {
            crate::support::git(root, &["init", "-q"]);
        }

        let other_prefix = git_prefix();
        let other = other_prefix.path();
        std::os::unix::fs::symlink(&script, other.join("bin/git")).expect("link");
        let ignores_all = prefix.path().join("ignores-all");
        std::fs::write(&ignores_all, "*.txt\n").expect("write");
        std::fs::write(
            other.join("etc/gitconfig"),
            format!("[core]\n\texcludesFile = {}\n", ignores_all.display()),
        )
        .expect("write");
        let first = if case.ends_with("cannot run") {
            Some(not_run.clone())
        } else if case.ends_with("another prefix") {
            Some(other.join("bin"))
        } else {
            None
        }
        .into_iter();
        let path = path_led_by(first.chain([bin.clone()]));
        let output = env
            .rewind(&["snapshot", "track", "--json"])
            .env("PATH", &path)
            .output()
            .expect("runs");
        assert!(output.status.success(), "{output:?}");
        let tracked: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
        assert!(
            !ran.exists(),
            "rewind ran git ({case}, in a repository: {in_repo}): {:?}",
            std::fs::read_to_string(&ran)
        );

        let system_env = [("GIT_CONFIG_SYSTEM", system.as_os_str())];
        let oracle = |args: &[&str]| git_in_separate_dir(&env, separate.path(), &system_env, args);
        crate::support::git(separate.path(), &["init", "-q", "--bare"]);
        oracle(&["add", "-A"]);
        assert_eq!(
            oracle(&["ls-files"]).contains("secret"),
            case.ends_with("another repository"),
            "the case: git ignores the secrets ({case})"
        );
        let expected = oracle(&["write-tree"]);
        assert_eq!(
            tracked["id"].as_str(),
            Some(expected.as_str()),
            "git's tree ({case}, in a repository: {in_repo}): {tracked}"
        );
    }
}

/// `git --git-dir SEPARATE --work-tree WORKTREE ARGS…` run from the worktree with the environment's empty
/// home and, besides `PATH`, the variables `vars` alone: a track's oracle. Its output, trimmed.
fn git_in_separate_dir(
    env: &Env,
    separate: &std::path::Path,
    vars: &[(&str, &std::ffi::OsStr)],
    args: &[&str],
) -> String {
    let output = std::process::Command::new(git_on_path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.config_home.path())
        .env("XDG_CONFIG_HOME", env.config_home.path())
        .envs(vars.iter().copied())
        .arg("--git-dir")
        .arg(separate)
        .arg("--work-tree")
        .arg(env.path())
        .args(args)
        .current_dir(env.path())
        .output()
        .expect("git runs");
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// In a repository gix cannot open (one of SHA-256 objects), whose configuration rewind assembles, the
/// settings of `GIT_CONFIG_COUNT` win over the repository's own, as in git (review of this change: its own
/// files were added after them). The oracle is git with the same variables in a separate git directory,
/// which does not read the repository's own `core.excludesFile`.
#[test]
fn the_environment_s_settings_win_over_a_sha256_repository_s_own() {
    let env = Env::plain();
    let root = env.path();
    crate::support::git(root, &["init", "-q", "--object-format=sha256"]);
    let rules = tempfile::TempDir::new().expect("rules");
    let (own, from_env) = (rules.path().join("own"), rules.path().join("env"));
    std::fs::write(&own, "a.txt\n").expect("write");
    std::fs::write(&from_env, "b.txt\n").expect("write");
    crate::support::git(
        root,
        &["config", "core.excludesFile", &own.display().to_string()],
    );
    for name in ["a.txt", "b.txt", "c.txt"] {
        std::fs::write(root.join(name), name).expect("write");
    }
    let from_env = from_env.into_os_string();
    let variables = [
        ("GIT_CONFIG_COUNT", std::ffi::OsStr::new("1")),
        (
            "GIT_CONFIG_KEY_0",
            std::ffi::OsStr::new("core.excludesFile"),
        ),
        ("GIT_CONFIG_VALUE_0", from_env.as_os_str()),
    ];
    let (tracked, git) = tracked_and_git(&env, &variables);
    assert_eq!(git.files, "a.txt\nc.txt", "the case");
    assert_eq!(tracked, git.tree);
}

/// What git makes of a worktree (`add -A` in a separate git directory).
struct GitView {
    /// `ls-files`.
    files: String,
    /// `write-tree`.
    tree: String,
}

/// `snapshot track` of the environment's worktree with the variables `vars` set for rewind, and git's view
/// of it with the same variables (`git_in_separate_dir`): rewind's id and git's view.
fn tracked_and_git(env: &Env, vars: &[(&str, &std::ffi::OsStr)]) -> (String, GitView) {
    let output = env
        .rewind(&["snapshot", "track", "--json"])
        .envs(vars.iter().copied())
        .output()
        .expect("runs");
    assert!(output.status.success(), "{output:?}");
    let tracked: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let separate = tempfile::TempDir::new().expect("a git dir");
    crate::support::git(separate.path(), &["init", "-q", "--bare"]);
    let oracle = |args: &[&str]| git_in_separate_dir(env, separate.path(), vars, args);
    oracle(&["add", "-A"]);
    let git = GitView {
        files: oracle(&["ls-files"]),
        tree: oracle(&["write-tree"]),
    };
    let id = tracked["id"].as_str().expect("an id").to_owned();
    (id, git)
}

/// An empty `XDG_CONFIG_HOME` is taken as unset, as git takes it: `~/.config/git/config` is read, and no
/// `git/config` under the current directory (config review: gix read the latter, in the worktree). In a
/// repository and in a plain directory; the oracle is git with the same variables.
#[test]
fn an_empty_xdg_config_home_is_unset_as_for_git() {
    for in_repo in [true, false] {
        let env = Env::plain();
        let root = env.path();
        let rules = tempfile::TempDir::new().expect("rules");
        let configured = |ignored: &str, name: &str| {
            let file = rules.path().join(name);
            std::fs::write(&file, format!("{ignored}\n")).expect("write");
            format!("[core]\n\texcludesFile = {}\n", file.display())
        };
        let home_config = env.config_home.path().join(".config/git/config");
        std::fs::create_dir_all(home_config.parent().expect("parent")).expect("mkdir");
        std::fs::write(&home_config, configured("secret.txt", "home")).expect("write");
        std::fs::create_dir_all(root.join("git")).expect("mkdir");
        std::fs::write(root.join("git/config"), configured("a.txt", "here")).expect("write");
        for name in ["a.txt", "secret.txt", "c.txt"] {
            std::fs::write(root.join(name), name).expect("write");
        }
        if in_repo {
            crate::support::git(root, &["init", "-q"]);
        }
        let (tracked, git) =
            tracked_and_git(&env, &[("XDG_CONFIG_HOME", std::ffi::OsStr::new(""))]);
        assert_eq!(
            git.files, "a.txt\nc.txt\ngit/config",
            "the case: git reads the home's file"
        );
        assert_eq!(tracked, git.tree, "in a repository: {in_repo}");
    }
}

/// The settings `git -c` hands to the programs it runs (`GIT_CONFIG_PARAMETERS`, for rewind run from a
/// git alias or hook) set the ignore rules as for git (config review: gix does not read them, and the
/// files they ignore were snapshotted). In a repository and in a plain directory; the oracle is git with
/// the same variable.
#[test]
fn git_c_settings_handed_down_set_the_ignore_rules() {
    for in_repo in [true, false] {
        let env = Env::plain();
        let root = env.path();
        let rules = tempfile::TempDir::new().expect("rules");
        let excludes = rules.path().join("it's ignored");
        std::fs::write(&excludes, "secret.txt\n").expect("write");
        for name in ["a.txt", "secret.txt"] {
            std::fs::write(root.join(name), name).expect("write");
        }
        if in_repo {
            crate::support::git(root, &["init", "-q"]);
        }
        // As git writes it: each word shell-quoted, a quote inside as `'\''`.
        let parameters = format!(
            "'core.excludesFile'='{}'",
            excludes.display().to_string().replace('\'', "'\\''")
        );
        let (tracked, git) = tracked_and_git(
            &env,
            &[("GIT_CONFIG_PARAMETERS", std::ffi::OsStr::new(&parameters))],
        );
        assert_eq!(git.files, "a.txt", "the case: git ignores it");
        assert_eq!(tracked, git.tree, "in a repository: {in_repo}");
    }
}

/// The `diff` attributes come from one system `gitattributes`, the one rewind takes for the git the user
/// runs (the first `git` on `PATH`, here a link at `PREFIX/bin/git`, whose `PREFIX/etc/gitattributes`
/// exists: `git_config::user_system_file`), as git reads one alone: a `-diff` in the file of a second
/// `git` further on `PATH` does not mark a file binary (diff review: every candidate file was read, as
/// seeding must read them). A binary file's row has no line diff (an empty patch).
#[test]
fn diffs_read_the_system_attributes_of_the_git_on_path_alone() {
    let env = Env::plain();
    let root = env.path();
    let (first, second) = (git_prefix(), git_prefix());
    for (prefix, attributes) in [(&first, "*.dat -diff\n"), (&second, "*.txt -diff\n")] {
        std::os::unix::fs::symlink(git_on_path(), prefix.path().join("bin/git")).expect("link");
        std::fs::write(prefix.path().join("etc/gitattributes"), attributes).expect("write");
    }
    let path = path_led_by([first.path().join("bin"), second.path().join("bin")]);
    std::fs::write(root.join("a.txt"), "one\n").expect("write");
    std::fs::write(root.join("b.dat"), "one\n").expect("write");
    let rewind = |args: &[&str]| {
        let output = env.rewind(args).env("PATH", &path).output().expect("runs");
        assert!(output.status.success(), "{output:?}");
        serde_json::from_slice::<serde_json::Value>(&output.stdout).expect("JSON")
    };
    let tracked = rewind(&["snapshot", "track", "--json"]);
    let id = tracked["id"].as_str().expect("an id").to_owned();
    std::fs::write(root.join("a.txt"), "two\n").expect("write");
    std::fs::write(root.join("b.dat"), "two\n").expect("write");
    let diff = rewind(&["snapshot", "diff", &id, "--json"]);
    // A binary file has no line diff: an empty patch, 0/0.
    let text: Vec<(&str, bool)> = diff["files"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| {
            (
                row["file"].as_str().expect("a file"),
                !row["patch"].as_str().expect("a patch").is_empty(),
            )
        })
        .collect();
    assert_eq!(text, [("a.txt", true), ("b.dat", false)], "{diff}");
}

/// A blob the first snapshot took over from the repository's own `.git` (seeding, SPEC 2.1) that was
/// damaged there (a loose object cut short past its header) is adopted as it is: adopting without reading
/// is what seeding saves, and a step's end checks the copies an undo of it needs. A `snapshot restore`
/// that needs it fails, writes nothing, and its message says the object may come from the repository,
/// which `git fsck` checks (seed review F2: it named rewind's store alone).
#[test]
fn a_restore_that_meets_a_damaged_seeded_object_says_where_it_may_come_from() {
    let env = Env::plain();
    let root = env.path();
    let text: String = (0..2_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(root.join("big.txt"), &text).expect("write");
    // Changed more than a second before the index is written, so its entry is not racy (seeding would
    // hash the file to confirm a racy one).
    std::thread::sleep(std::time::Duration::from_millis(1100));
    crate::support::git(root, &["init", "-q"]);
    crate::support::commit_all(root, "big");
    let blob = crate::support::git(root, &["rev-parse", ":big.txt"]);
    let object = root
        .join(".git/objects")
        .join(&blob.trim()[..2])
        .join(&blob.trim()[2..]);
    let bytes = std::fs::read(&object).expect("the loose object");
    std::fs::set_permissions(&object, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("writable");
    std::fs::write(&object, &bytes[..bytes.len() / 2]).expect("cut short");

    let tracked = env.json(&["snapshot", "track"]);
    let id = tracked["id"].as_str().expect("an id").to_owned();
    assert_eq!(tracked["hashed"], 0, "seeded: {tracked}");
    std::fs::write(root.join("big.txt"), "changed since\n").expect("write");
    let output = env
        .rewind(&["snapshot", "restore", &id])
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(1));
    let refused = String::from_utf8_lossy(&output.stderr);
    assert!(
        refused.contains("the snapshot store is damaged")
            && refused.contains("took over from the repository's own `.git`")
            && refused.contains("`git fsck`"),
        "{refused}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("big.txt")).expect("read"),
        "changed since\n",
        "nothing written"
    );
}

/// `exec` racing `gc --older-than 0`, which deletes the session `exec` chose as this directory's latest:
/// the turn goes to the next latest, or to a new session, as it would had the command started a moment
/// later; never "Session not found" for a session the user did not name (gc fuzz: 26 of 60 such execs
/// failed, most with it). A refusal while gc holds the session's lease (409, SPEC 8) runs nothing. Every
/// other race starts with no session left, so `exec` creates one, which the racing gc can delete the
/// moment it exists (the next test makes that moment certain).
#[test]
fn exec_racing_a_gc_that_deletes_its_session_records_the_turn_in_another() {
    let env = Env::plain();
    env.exec_sh("echo 0 > n.txt");
    let mut not_found = Vec::new();
    for i in 1..=40 {
        if i % 2 == 0 {
            env.ok(&["gc", "--older-than", "0", "--grace-seconds", "0"]);
        }
        let before = std::fs::read_to_string(env.path().join("n.txt")).expect("n.txt");
        let mut gc = env
            .process_in(
                env.path(),
                &["gc", "--older-than", "0", "--grace-seconds", "0"],
            )
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start gc");
        let exec = env
            .process_in(
                env.path(),
                &["exec", "--", "sh", "-c", &format!("echo {i} > n.txt")],
            )
            .output()
            .expect("run exec");
        gc.wait().expect("gc ends");
        let after = std::fs::read_to_string(env.path().join("n.txt")).expect("n.txt");
        if exec.status.success() {
            assert_eq!(after, format!("{i}\n"), "exec {i} ran its command");
            continue;
        }
        let stderr = String::from_utf8_lossy(&exec.stderr).into_owned();
        assert_eq!(after, before, "exec {i} failed and ran nothing: {stderr}");
        if stderr.contains("not found") {
            not_found.push(stderr);
        } else {
            assert!(stderr.contains("busy"), "exec {i}: {stderr}");
        }
    }
    assert!(not_found.is_empty(), "{not_found:#?}");
}

/// The session `exec` created, deleted before its turn began (a `gc --older-than 0` that listed it the
/// moment it existed, as the race above can): the turn goes to another session `exec` creates, and the
/// command runs once. CI saw exec fail with a bare "Session not found" there, the retry being only for a
/// session it had chosen. The deletion is made certain by a trigger that deletes every session when the
/// first lease is taken (the turn's, which exec takes only after creating the session).
#[test]
fn exec_whose_new_session_is_deleted_before_its_turn_begins_records_it_in_another() {
    let env = Env::plain();
    env.exec_sh("echo 0 > n.txt");
    env.ok(&["gc", "--older-than", "0", "--grace-seconds", "0"]);
    let trigger = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys\n\
             db = sqlite3.connect(sys.argv[1])\n\
             db.executescript(\"CREATE TABLE deleted_once (n INTEGER); \
             CREATE TRIGGER delete_sessions_once AFTER INSERT ON lease \
             WHEN NOT EXISTS (SELECT 1 FROM deleted_once) \
             BEGIN DELETE FROM session; INSERT INTO deleted_once VALUES (1); END;\")\n",
        )
        .arg(env.data.path().join("rewind.db"))
        .status()
        .expect("python3 runs");
    assert!(trigger.success());

    let output = env
        .rewind(&["--json", "exec", "--", "sh", "-c", "echo 1 >> n.txt"])
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(env.path().join("n.txt")).expect("n.txt"),
        "0\n1\n",
        "the command ran once"
    );
    let turn: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
    let status = env.json(&["status"]);
    let sessions = status["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 1, "{status}");
    assert_eq!(sessions[0]["id"], turn["sessionID"], "{turn}");
    env.ok(&["undo"]);
    assert_eq!(
        std::fs::read_to_string(env.path().join("n.txt")).expect("n.txt"),
        "0\n",
        "the turn is undone"
    );
}

/// `redo` racing `gc --older-than 0`, which deletes the session while the redo runs: the refusal says the
/// session was deleted, not that its turn was made permanent by a new turn (none was recorded; gc fuzz:
/// 18 of 60 such redos said so), nor the bare "Session not found" of whichever read met the deletion first
/// (the unrevert of the last undo said it).
#[test]
fn redo_racing_a_gc_that_deletes_its_session_says_so() {
    racing_a_gc_that_deletes_its_session("redo");
}

/// The same of `undo`.
#[test]
fn undo_racing_a_gc_that_deletes_its_session_says_so() {
    racing_a_gc_that_deletes_its_session("undo");
}

/// Twelve races of `verb` (after one or two turns of three undone, so that `undo` and both ways of
/// `redo` have work) against `gc --older-than 0`. Each either succeeds, or fails saying the session was deleted while it
/// ran, or finds no session left to choose (gc deleted it first).
fn racing_a_gc_that_deletes_its_session(verb: &str) {
    let env = Env::plain();
    let mut odd = Vec::new();
    for i in 1..=12 {
        env.exec_sh_in_a_new_session(&format!("echo a{i} > a.txt"));
        env.exec_sh(&format!("echo b{i} > a.txt"));
        env.exec_sh(&format!("echo c{i} > a.txt"));
        // One undo or two: a `redo` then unreverts or reverts to the next turn.
        for _ in 0..1 + i % 2 {
            env.ok(&["undo"]);
        }
        let mut gc = env
            .process_in(env.path(), &["gc", "--older-than", "0"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start gc");
        std::thread::sleep(std::time::Duration::from_millis(i % 8));
        let raced = env
            .process_in(env.path(), &[verb])
            .output()
            .expect("run the command");
        gc.wait().expect("gc ends");
        let stderr = String::from_utf8_lossy(&raced.stderr).into_owned();
        let said_so = stderr.contains(&format!("was deleted while this {verb} ran"))
            || stderr.contains("no rewind session in");
        if !raced.status.success() && !said_so {
            odd.push(stderr);
        }
        // A session the command used while gc ran stays (SPEC 8); gone before the next race, or that race's
        // command, finding its own session deleted, takes this one, the directory's newest left, and may
        // rightly find nothing to do there (2 runs in about 100 said "every turn is already undone").
        env.ok(&["gc", "--older-than", "0"]);
    }
    assert!(odd.is_empty(), "{odd:#?}");
}
