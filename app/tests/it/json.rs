//! `--json` output parses and carries the fields the README documents, with values that match what
//! happened (ids that other commands accept, files that changed).

use serde_json::Value;

use crate::support::Env;

fn has(value: &Value, fields: &[&str], what: &str) {
    for field in fields {
        assert!(
            value.get(*field).is_some(),
            "{what} lacks the documented field {field:?}: {value:#}"
        );
    }
}

#[test]
fn every_command_s_json_has_the_documented_fields() {
    let env = Env::plain();
    let exec = env.json(&["exec", "--", "sh", "-c", "printf 'one\\n' > a.txt"]);
    has(
        &exec,
        &[
            "sessionID",
            "userMessageID",
            "assistantMessageID",
            "command",
            "exitCode",
            "reason",
            "files",
        ],
        "exec",
    );
    assert_eq!(exec["exitCode"], 0);
    assert_eq!(exec["reason"], "stop");
    assert_eq!(exec["command"], "sh -c 'printf '\\''one\\n'\\'' > a.txt'");
    let file = env.path().canonicalize().expect("canonical").join("a.txt");
    assert_eq!(
        exec["files"],
        serde_json::json!([file.to_str().expect("utf-8")])
    );
    let session = exec["sessionID"].as_str().expect("id").to_owned();
    env.exec_sh("printf 'two\\n' >> a.txt");

    let log = env.json(&["log"]);
    has(
        &log,
        &["sessionID", "directory", "title", "messages", "warnings"],
        "log",
    );
    assert_eq!(log["sessionID"], session.as_str());
    let messages = log["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 4);
    for message in messages {
        has(
            message,
            &[
                "id",
                "role",
                "created",
                "text",
                "hidden",
                "revertPoint",
                "steps",
            ],
            "a log message",
        );
    }
    assert_eq!(messages[0]["id"], exec["userMessageID"]);
    assert_eq!(messages[0]["role"], "user");
    let step = &messages[3]["steps"][0];
    has(step, &["start", "end", "reason", "files"], "a log step");
    assert_eq!(
        step["files"],
        serde_json::json!([{"file": "a.txt", "status": "modified", "additions": 1, "deletions": 0, "binary": false}])
    );

    let undo = env.json(&["undo"]);
    has(
        &undo,
        &[
            "sessionID",
            "action",
            "revert",
            "prompt",
            "hiddenMessages",
            "summary",
            "files",
            "warnings",
        ],
        "undo",
    );
    assert_eq!(undo["action"], "revert");
    assert_eq!(undo["revert"]["messageID"], messages[2]["id"]);
    assert_eq!(undo["hiddenMessages"], 2);
    assert_eq!(undo["summary"]["files"], 1);
    let log = env.json(&["log"]);
    let hidden: Vec<bool> = log["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["hidden"].as_bool().expect("bool"))
        .collect();
    assert_eq!(hidden, [false, false, true, true]);
    assert_eq!(log["revert"]["messageID"], messages[2]["id"]);

    let diff = env.json(&["diff"]);
    let rows = diff.as_array().expect("a FileDiff array");
    assert_eq!(rows.len(), 1);
    has(
        &rows[0],
        &["file", "patch", "additions", "deletions", "status"],
        "diff",
    );
    assert!(rows[0]["patch"].as_str().expect("patch").contains("+two"));

    let redo = env.json(&["redo"]);
    assert_eq!(redo["action"], "unrevert");
    assert!(redo.get("revert").is_none());
    // The files the redo put back: the undo's (black-box: always empty).
    assert_eq!(redo["files"], undo["files"], "{redo:#}");
    // Not reverted now: `diff --json` prints the last revert's diff, and says so on stderr (review).
    let output = env.rewind(&["--json", "diff"]).output().expect("runs");
    assert!(output.status.success(), "{output:?}");
    let last: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(last, diff, "the last revert's diff");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("is not reverted; this is the diff of its last revert"),
        "{stderr}"
    );

    let status = env.json(&["status"]);
    has(
        &status,
        &["directory", "dataDir", "store", "sessions"],
        "status",
    );
    has(&status["store"], &["path", "bytes"], "status.store");
    assert!(status["store"]["bytes"].as_u64().expect("bytes") > 0);
    has(
        &status["sessions"][0],
        &["id", "title", "created", "updated", "busy"],
        "a status session",
    );
    assert!(status.get("lastGc").is_none(), "no gc has run yet");

    let track = env.json(&["snapshot", "track"]);
    has(&track, &["id", "skipped", "hashed"], "snapshot track");
    let id = track["id"].as_str().expect("id").to_owned();
    std::fs::write(env.path().join("a.txt"), "three\n").expect("write");
    let diff = env.json(&["snapshot", "diff", &id]);
    has(&diff, &["from", "to", "files"], "snapshot diff");
    assert_eq!(diff["files"][0]["file"], "a.txt");
    let restore = env.json(&["snapshot", "restore", &id]);
    has(
        &restore,
        &[
            "restored", "capture", "written", "deleted", "kept", "notFound",
        ],
        "snapshot restore",
    );
    assert_eq!(restore["written"], serde_json::json!(["a.txt"]));
    assert_eq!(restore["notFound"], serde_json::json!([]));
    let at_id = std::fs::read_to_string(env.path().join("a.txt")).expect("restored");
    let status = env.json(&["status"]);
    assert_eq!(
        status["lastCapture"]["snapshot"], restore["capture"],
        "status names the capture that undoes the restore: {status}"
    );
    // A path in neither the snapshot nor the worktree is refused before anything is captured or touched
    // (black-box: it was captured and the rest restored, exit 0, with a warning).
    std::fs::write(env.path().join("a.txt"), "four\n").expect("write");
    let before = env.state();
    for json in [true, false] {
        let mut args = vec!["snapshot", "restore", &id, "no/such/path", "a.txt"];
        if json {
            args.insert(0, "--json");
        }
        let output = env.rewind(&args).output().expect("runs");
        assert_eq!(output.status.code(), Some(1), "{output:?}");
        let said = if json {
            let error: serde_json::Value =
                serde_json::from_slice(&output.stdout).expect("JSON error");
            error["error"]["message"]
                .as_str()
                .expect("message")
                .to_owned()
        } else {
            String::from_utf8_lossy(&output.stderr).into_owned()
        };
        assert!(
            said.contains("no/such/path is in neither snapshot") && !said.contains("a.txt"),
            "{said}"
        );
        assert!(!said.contains("captured"), "{said}");
    }
    assert_eq!(env.state(), before, "nothing restored");
    assert_eq!(
        env.json(&["status"])["lastCapture"],
        status["lastCapture"],
        "nothing captured"
    );
    // A path only in the snapshot is no typo: it is restored.
    std::fs::remove_file(env.path().join("a.txt")).expect("remove");
    let output = env
        .rewind(&["snapshot", "restore", &id, "a.txt"])
        .output()
        .expect("runs");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        std::fs::read_to_string(env.path().join("a.txt")).expect("restored"),
        at_id
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The capture is said before any file is touched (a restore killed halfway is put back with it).
    let capture_line = stderr
        .lines()
        .find(|line| line.contains("the current state is captured as"))
        .unwrap_or_else(|| panic!("{stderr}"));
    let status = env.json(&["status"]);
    let newest = status["lastCapture"]["snapshot"].as_str().expect("capture");
    assert!(
        capture_line.contains(newest),
        "{capture_line} names {newest}"
    );
    // With --json too, on stderr (black-box: it was said only at the end, on stdout).
    let output = env
        .rewind(&["--json", "snapshot", "restore", &id, "a.txt"])
        .output()
        .expect("runs");
    assert!(output.status.success());
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let capture = report["capture"].as_str().expect("capture");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("the current state is captured as {capture}")),
        "{stderr}"
    );

    let gc = env.json(&["gc"]);
    has(
        &gc,
        &[
            "sessionsDeleted",
            "sessionsSkipped",
            "capturesDeleted",
            "eventsDeleted",
            "databaseBytesFreed",
            "worktrees",
            "objectsRemoved",
            "bytesFreed",
        ],
        "gc",
    );
    has(
        &gc["worktrees"][0],
        &["directory", "keptSnapshots", "report"],
        "gc.worktrees",
    );
    let status = env.json(&["status"]);
    has(
        &status["lastGc"],
        &["time", "objectsRemoved", "bytesFreed", "sessionsDeleted"],
        "status.lastGc",
    );
}

/// With `--json`, a command that fails (exit 1) prints `{"error": {"message"}}` on stdout, the message
/// stderr shows; a usage error (exit 2) prints nothing on stdout.
#[test]
fn a_failure_with_json_prints_an_error_document() {
    let env = Env::plain();
    for args in [
        vec!["--json", "undo"],
        vec!["--json", "revert", "msg_unknown"],
        vec!["--json", "snapshot", "restore", "0123"],
    ] {
        let output = env.rewind(&args).output().expect("runs");
        assert_eq!(output.status.code(), Some(1), "{args:?}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let document: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|error| panic!("{args:?}: not JSON ({error}): {output:?}"));
        let message = document["error"]["message"].as_str().expect("a message");
        assert_eq!(stderr.trim_end(), format!("error: {message}"), "{args:?}");
    }
    let usage = env.rewind(&["--json", "revert"]).output().expect("runs");
    assert_eq!(usage.status.code(), Some(2));
    assert!(usage.stdout.is_empty(), "{usage:?}");
}

/// A redo that ends the revert names the files it put back, in JSON and in text, as the undo named the
/// turn's changes it undid (black-box: neither named any file).
#[test]
fn a_redo_names_the_files_it_put_back() {
    let env = Env::plain();
    env.exec_sh("printf 'g\\n' > g.txt");
    let undo = env.json(&["undo"]);
    assert_eq!(
        undo["files"],
        serde_json::json!([{"file": "g.txt", "status": "added", "additions": 1, "deletions": 0, "binary": false}])
    );
    let redo = env.json(&["redo"]);
    assert_eq!(
        redo["files"],
        serde_json::json!([{"file": "g.txt", "status": "added", "additions": 1, "deletions": 0, "binary": false}])
    );
    env.ok(&["undo"]);
    let text = env.ok(&["redo"]);
    assert!(
        text.contains("put back:") && text.contains("g.txt"),
        "{text}"
    );
}

/// A row without line counts says why, in text and JSON: a binary file is `binary` (`binary: true`, as
/// `git diff --numstat` shows `-`), a file whose mode alone changed is `mode changed`, and an empty file
/// added is `+0 -0` (review: all three were `+0 -0`).
#[test]
fn rows_without_line_counts_say_why() {
    let env = Env::git_checkout();
    std::fs::write(env.path().join("run.sh"), "echo hi\n").expect("write");
    crate::support::commit_all(env.path(), "script");
    env.exec_sh("printf 'a\\0b' > blob.bin; chmod +x run.sh; : > empty; printf 'more\\n' >> a.txt");
    // The oracle: git's own numstat of the same change.
    crate::support::git(env.path(), &["add", "-A"]);
    let numstat = crate::support::git(env.path(), &["diff", "--cached", "--numstat"]);
    let git_binary: Vec<&str> = numstat
        .lines()
        .filter(|line| line.starts_with("-\t-\t"))
        .map(|line| &line[4..])
        .collect();
    assert_eq!(git_binary, ["blob.bin"], "{numstat}");
    crate::support::git(env.path(), &["reset", "-q"]);
    let log = env.json(&["log"]);
    let files = &log["messages"][1]["steps"][0]["files"];
    let rows = files.as_array().expect("rows");
    assert_eq!(rows.len(), 4, "{files}");
    for row in rows {
        let file = row["file"].as_str().expect("file");
        assert_eq!(row["binary"], git_binary.contains(&file), "{row}");
    }
    let text = env.ok(&["log"]);
    for shown in [
        "blob.bin binary",
        "run.sh mode changed",
        "empty +0 -0",
        "a.txt +1 -0",
    ] {
        assert!(text.contains(shown), "{shown:?} in {text}");
    }
    let undo = env.ok(&["undo"]);
    for shown in [
        "added    blob.bin binary",
        "modified run.sh mode changed",
        "added    empty +0 -0",
    ] {
        assert!(undo.contains(shown), "{shown:?} in {undo}");
    }
    let diff = env.ok(&["diff"]);
    for shown in [
        "added    blob.bin (binary or over the size cap: no line diff)",
        "(no line changed, only its mode changed: modified run.sh)",
        "(no line changed, an empty file: added empty)",
    ] {
        assert!(diff.contains(shown), "{shown:?} in {diff}");
    }
}
