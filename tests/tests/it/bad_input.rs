//! Bad input over HTTP: each request gets the documented status and OpenCode's error body, and neither
//! the database nor the worktree changes (both re-read after each request).

use std::collections::BTreeMap;

use anyhow::{Result, ensure};
use serde_json::{Value, json};

use crate::support::{TestApp, id_of, spawn_app};

/// Everything a bad request must leave as it was: the sessions, the session's messages, the files.
async fn observed(
    app: &TestApp,
    session: &str,
) -> Result<(Value, Value, BTreeMap<String, String>)> {
    let sessions = app.read("/session").await?;
    let messages = app.read(&format!("/session/{session}/message")).await?;
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&app.repo)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type()?.is_file() {
            files.insert(name, std::fs::read_to_string(entry.path())?);
        } else {
            files.insert(name, String::new());
        }
    }
    Ok((sessions, messages, files))
}

fn is_named(body: &Value, name: &str) -> bool {
    body["name"] == name
        && body["data"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
}

#[tokio::test]
async fn bad_requests_get_opencode_errors_and_change_nothing() -> Result<()> {
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    let (user, assistant) = app.turn_writing(&session, "one", "a.txt", "a1\n").await?;
    // A symlink under the root that leads outside it: canonicalised, it is outside.
    std::os::unix::fs::symlink(&app.data_dir, app.repo.join("escape"))?;
    let before = observed(&app, &session).await?;
    let unknown_message = "msg_000000000001abcdefghijklmn";
    let unknown_session = "ses_000000000001abcdefghijklmn";
    let old_part = "prt_000000000001abcdefghijklmn";
    let escape = app.repo.join("escape");
    let messages = format!("/session/{session}/message");
    let revert = format!("/session/{session}/revert");
    let part = format!("/session/{session}/message/{assistant}/part");

    let cases: Vec<(&str, reqwest::RequestBuilder, u16, &str)> = vec![
        (
            "malformed JSON",
            raw(&app, &messages, "{bad"),
            400,
            "BadRequest",
        ),
        (
            "an empty message body",
            raw(&app, &messages, ""),
            400,
            "BadRequest",
        ),
        (
            "a message body whose only role is null",
            json_post(&app, &messages, json!({"role": null})),
            400,
            "BadRequest",
        ),
        (
            "a message body with neither parts nor a role (a misspelt `part`)",
            json_post(
                &app,
                &messages,
                json!({"part": [{"type": "text", "text": "x"}]}),
            ),
            400,
            "BadRequest",
        ),
        (
            "parts of the wrong type",
            json_post(&app, &messages, json!({"parts": 5})),
            400,
            "BadRequest",
        ),
        (
            "role of the wrong type",
            json_post(&app, &messages, json!({"role": 7})),
            400,
            "BadRequest",
        ),
        (
            "an unknown role",
            json_post(&app, &messages, json!({"role": "robot"})),
            400,
            "BadRequest",
        ),
        (
            "a part without a type",
            json_post(&app, &messages, json!({"parts": [{"text": "x"}]})),
            400,
            "BadRequest",
        ),
        (
            "a message id that does not sort last",
            json_post(
                &app,
                &messages,
                json!({"id": unknown_message, "parts": [{"type": "text", "text": "x"}]}),
            ),
            400,
            "BadRequest",
        ),
        (
            "OpenCode's messageID that does not sort last",
            json_post(
                &app,
                &messages,
                json!({"messageID": user, "parts": [{"type": "text", "text": "x"}]}),
            ),
            400,
            "BadRequest",
        ),
        (
            "a message id at the top of the id clock, which nothing could follow",
            json_post(
                &app,
                &messages,
                json!({"id": "msg_ffffffffffffzzzzzzzzzzzzzz", "parts": [{"type": "text", "text": "x"}]}),
            ),
            400,
            "BadRequest",
        ),
        (
            "a malformed client message id",
            json_post(&app, &messages, json!({"id": "msg_x", "parts": []})),
            400,
            "BadRequest",
        ),
        (
            "a tool part whose fields are of the wrong type",
            json_post(
                &app,
                &part,
                json!({"type": "tool", "callID": 5, "tool": "bash", "state": {"status": "completed"}}),
            ),
            400,
            "BadRequest",
        ),
        (
            "a tool part whose state is not an object",
            json_post(
                &app,
                &part,
                json!({"type": "tool", "callID": "c1", "tool": "bash", "state": "x"}),
            ),
            400,
            "BadRequest",
        ),
        (
            "a tool part of an unknown status, in a new message",
            json_post(
                &app,
                &messages,
                json!({"parts": [{"type": "tool", "callID": "c1", "tool": "bash", "state": {"status": "done"}}]}),
            ),
            400,
            "BadRequest",
        ),
        (
            "a part id that does not sort last",
            json_post(
                &app,
                &part,
                json!({"id": old_part, "type": "text", "text": "x"}),
            ),
            400,
            "BadRequest",
        ),
        (
            // Kept among the message's other fields, it was stored twice and made the session unreadable.
            "a message naming another session",
            json_post(
                &app,
                &messages,
                json!({"sessionID": unknown_session, "parts": [{"type": "text", "text": "x"}]}),
            ),
            400,
            "BadRequest",
        ),
        (
            "a message whose part names another message",
            json_post(
                &app,
                &messages,
                json!({"id": "msg_ffffffff00000123456789abcd", "parts": [
                    {"type": "text", "text": "x", "messageID": "msg_ffffffff00010123456789abcd"}
                ]}),
            ),
            400,
            "BadRequest",
        ),
        (
            "a message with its own time",
            json_post(
                &app,
                &messages,
                json!({"time": {"created": 1}, "parts": [{"type": "text", "text": "x"}]}),
            ),
            400,
            "BadRequest",
        ),
        (
            "a part naming another session",
            json_post(
                &app,
                &part,
                json!({"sessionID": unknown_session, "type": "text", "text": "x"}),
            ),
            400,
            "BadRequest",
        ),
        (
            "a client-sent patch part",
            json_post(
                &app,
                &part,
                json!({"type": "patch", "hash": "0".repeat(40), "files": []}),
            ),
            400,
            "BadRequest",
        ),
        (
            "an oversize body",
            json_post(
                &app,
                &part,
                json!({"type": "text", "text": "x".repeat(100 * 1024)}),
            ),
            413,
            "PayloadTooLarge",
        ),
        (
            "a revert messageID of the wrong type",
            json_post(&app, &revert, json!({"messageID": 5})),
            400,
            "BadRequest",
        ),
        (
            // serde would take the struct's two fields as an array: OpenCode's bodies are objects.
            "a revert body that is an array",
            json_post(&app, &revert, json!([user, null])),
            400,
            "BadRequest",
        ),
        (
            "a session body that is an array",
            json_post(&app, "/session", json!(["an array's title", null, null])),
            400,
            "BadRequest",
        ),
        (
            "a revert without messageID",
            json_post(&app, &revert, json!({})),
            400,
            "BadRequest",
        ),
        (
            "a malformed revert messageID",
            json_post(&app, &revert, json!({"messageID": "msg_bad"})),
            400,
            "BadRequest",
        ),
        (
            "a partID that is not a part id",
            json_post(
                &app,
                &revert,
                json!({"messageID": user, "partID": "msg_000000000001abcdefghijklmn"}),
            ),
            400,
            "BadRequest",
        ),
        // SPEC 12.6: an unknown message or part is a 404, where OpenCode answers 200 and changes nothing
        // (its test 64).
        (
            "an unknown revert message",
            json_post(&app, &revert, json!({"messageID": unknown_message})),
            404,
            "NotFoundError",
        ),
        (
            "an unknown revert part",
            json_post(
                &app,
                &revert,
                json!({"messageID": user, "partID": old_part}),
            ),
            404,
            "NotFoundError",
        ),
        (
            "a malformed session id",
            app.http.get(app.url("/session/ses_bad")),
            400,
            "BadRequest",
        ),
        (
            "a message id in the session's place",
            app.http.get(app.url(&format!("/session/{user}"))),
            400,
            "BadRequest",
        ),
        (
            "an unknown session",
            app.http
                .get(app.url(&format!("/session/{unknown_session}"))),
            404,
            "NotFoundError",
        ),
        (
            "the children of an unknown session",
            app.http
                .get(app.url(&format!("/session/{unknown_session}/children"))),
            404,
            "NotFoundError",
        ),
        (
            "a revert of an unknown session",
            json_post(
                &app,
                &format!("/session/{unknown_session}/revert"),
                json!({"messageID": user}),
            ),
            404,
            "NotFoundError",
        ),
        (
            "an unknown message",
            app.http
                .get(app.url(&format!("/session/{session}/message/{unknown_message}"))),
            404,
            "NotFoundError",
        ),
        (
            "a malformed message id",
            app.http
                .get(app.url(&format!("/session/{session}/message/nope"))),
            400,
            "BadRequest",
        ),
        (
            "an unknown route",
            app.http.get(app.url("/nope")),
            404,
            "NotFoundError",
        ),
        (
            "an unknown sub-route",
            json_post(&app, &format!("/session/{session}/nope"), json!({})),
            404,
            "NotFoundError",
        ),
        (
            "a wrong method",
            app.http.put(app.url("/session")),
            405,
            "MethodNotAllowed",
        ),
        (
            "a preview without messageID",
            app.http
                .get(app.url(&format!("/session/{session}/revert/preview"))),
            400,
            "BadRequest",
        ),
        (
            "a title of the wrong type",
            json_post(&app, "/session", json!({"title": 5})),
            400,
            "BadRequest",
        ),
        (
            "a new title of the wrong type",
            app.http
                .patch(app.url(&format!("/session/{session}")))
                .json(&json!({"title": ["x"]})),
            400,
            "BadRequest",
        ),
        (
            "metadata that is no object",
            app.http
                .patch(app.url(&format!("/session/{session}")))
                .json(&json!({"metadata": "x"})),
            400,
            "BadRequest",
        ),
        (
            "an archive time that is no number",
            app.http
                .patch(app.url(&format!("/session/{session}")))
                .json(&json!({"time": {"archived": "yesterday"}})),
            400,
            "BadRequest",
        ),
        (
            "a new title for an unknown session",
            app.http
                .patch(app.url(&format!("/session/{unknown_session}")))
                .json(&json!({"title": "x"})),
            404,
            "NotFoundError",
        ),
        (
            "a worktree outside the roots",
            json_post(&app, "/session", json!({"directory": "/"})),
            400,
            "BadRequest",
        ),
        (
            "a worktree escaping through a symlink",
            json_post(&app, "/session", json!({"directory": escape})),
            400,
            "BadRequest",
        ),
        (
            // Snapshotted, its refs, index and objects would be rewritten by a revert.
            "the repository's .git as the worktree",
            json_post(
                &app,
                "/session",
                json!({"directory": app.repo.join(".git")}),
            ),
            400,
            "BadRequest",
        ),
        (
            "a relative worktree",
            json_post(&app, "/session", json!({"directory": "repo"})),
            400,
            "BadRequest",
        ),
        (
            "a query worktree outside the roots",
            json_post(
                &app,
                &format!("{revert}?directory=%2Ftmp"),
                json!({"messageID": user}),
            ),
            400,
            "BadRequest",
        ),
        (
            // Two directories: the query cannot be read, and the request must not fall back to the
            // server's directory.
            "an unreadable query worktree",
            json_post(
                &app,
                &format!("{revert}?directory=%2Ftmp&directory=%2Fsrv"),
                json!({"messageID": user}),
            ),
            400,
            "BadRequest",
        ),
        (
            "a header worktree outside the roots",
            app.http
                .get(app.url(&format!("/session/{session}/message")))
                .header("x-opencode-directory", "%2F"),
            400,
            "BadRequest",
        ),
        (
            "a message for an unknown session",
            json_post(
                &app,
                &format!("/session/{unknown_session}/message"),
                json!({"parts": []}),
            ),
            404,
            "NotFoundError",
        ),
        (
            "a step on a user message",
            json_post(
                &app,
                &format!("/session/{session}/message/{user}/step"),
                json!({}),
            ),
            400,
            "BadRequest",
        ),
        (
            "finishing a step that is not open",
            json_post(
                &app,
                &format!("/session/{session}/message/{assistant}/step/finish"),
                json!({}),
            ),
            400,
            "BadRequest",
        ),
        // The routes that read no body refuse one that is not JSON before they act (multi-server fuzz:
        // a `DELETE` with the body `{` deleted the session, and a step began).
        (
            "a session's delete with a body that is not JSON",
            app.http
                .delete(app.url(&format!("/session/{session}")))
                .header("content-type", "application/json")
                .body("{"),
            400,
            "BadRequest",
        ),
        (
            "a step's begin with a body that is not JSON",
            raw(
                &app,
                &format!("/session/{session}/message/{assistant}/step"),
                "{",
            ),
            400,
            "BadRequest",
        ),
        (
            "a step's abort with a body that is not JSON",
            raw(
                &app,
                &format!("/session/{session}/message/{assistant}/step/abort"),
                "not json",
            ),
            400,
            "BadRequest",
        ),
        (
            "a session's abort with a body that is not JSON",
            raw(&app, &format!("/session/{session}/abort"), "{"),
            400,
            "BadRequest",
        ),
        (
            "an unrevert with a body that is not JSON",
            raw(&app, &format!("/session/{session}/unrevert"), "{"),
            400,
            "BadRequest",
        ),
        (
            "a revert's commit with a body that is not JSON",
            raw(&app, &format!("/session/{session}/revert/commit"), "]"),
            400,
            "BadRequest",
        ),
    ];
    for (what, request, status, name) in cases {
        let reply = app.send(request).await?;
        ensure!(
            reply.status == status && is_named(&reply.body, name),
            "{what}: expected {status} {name}, got {} {}",
            reply.status,
            reply.body
        );
        let after = observed(&app, &session).await?;
        ensure!(
            after == before,
            "{what} changed the state:\n{:?}\n{:?}",
            before,
            after
        );
    }
    let fine = app.read(&format!("/session/{session}")).await?;
    assert_eq!(id_of(&fine)?, session);
    app.stop().await
}

fn json_post(app: &TestApp, path: &str, body: Value) -> reqwest::RequestBuilder {
    app.http.post(app.url(path)).json(&body)
}

fn raw(app: &TestApp, path: &str, body: &'static str) -> reqwest::RequestBuilder {
    app.http
        .post(app.url(path))
        .header("content-type", "application/json")
        .body(body)
}

/// A SQLite database file deleted or replaced under a running server: a write is refused with a 500 whose
/// message says what happened and what to do (restart the server), not only "internal error" (review: the
/// cause was in the server's log alone). Nothing is stored.
#[tokio::test]
async fn a_database_replaced_under_the_server_is_said_so_to_the_client() -> Result<()> {
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    let file = app.data_dir.join("rewind.db");
    ensure!(file.is_file(), "the database is {}", file.display());
    std::fs::rename(&file, app.data_dir.join("moved.db"))?;
    let reply = app
        .post(
            &format!("/session/{session}/message"),
            json!({"parts": [{"type": "text", "text": "lost?"}]}),
        )
        .await?;
    assert_eq!(reply.status, 500, "{}", reply.body);
    assert_eq!(reply.body["name"], "UnknownError", "{}", reply.body);
    let message = reply.body["data"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("deleted or replaced") && message.contains("restart the server"),
        "{message}"
    );
    std::fs::rename(app.data_dir.join("moved.db"), &file)?;
    let messages = app.read(&format!("/session/{session}/message")).await?;
    assert_eq!(messages, json!([]), "nothing was stored");
    app.stop().await
}

/// A SQLite database made read-only under a running server (its files immutable, as a read-only mount
/// makes them; SQLite then says only "disk I/O error"): a write is refused with a 500 whose message says
/// the database can only be read, not "internal error" (review: the log alone had a cause, and it asked
/// whether the disk was full). Nothing is stored; once writable again the server goes on.
#[tokio::test]
async fn a_database_made_read_only_under_the_server_is_said_so_to_the_client() -> Result<()> {
    let app = spawn_app().await?;
    // ext4 refuses a write to an immutable file through a handle opened before; xfs, btrfs and tmpfs let
    // it through (the database is then simply written), so there is nothing to see elsewhere.
    if !on_ext4(&app.data_dir) {
        // Under CI the tests run on ext4: a skip there would hide the test (as PostgreSQL's do not).
        assert!(
            std::env::var_os("CI").is_none(),
            "under CI the data directory is on ext4"
        );
        eprintln!("not run: the data directory is not on ext4");
        return app.stop().await;
    }
    let session = app.new_session().await?;
    let files: Vec<std::path::PathBuf> = ["rewind.db", "rewind.db-wal"]
        .iter()
        .map(|name| app.data_dir.join(name))
        .collect();
    for file in &files {
        ensure!(
            chattr("+i", file),
            "chattr +i {} (an ext4 the tests run on)",
            file.display()
        );
    }
    let reply = app
        .post(
            &format!("/session/{session}/message"),
            json!({"parts": [{"type": "text", "text": "stored?"}]}),
        )
        .await;
    for file in &files {
        ensure!(chattr("-i", file), "chattr -i {}", file.display());
    }
    let reply = reply?;
    assert_eq!(reply.status, 500, "{}", reply.body);
    assert_eq!(reply.body["name"], "UnknownError", "{}", reply.body);
    let message = reply.body["data"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("can only be read"), "{message}");
    let messages = app.read(&format!("/session/{session}/message")).await?;
    assert_eq!(messages, json!([]), "nothing was stored");
    // Once the files are writable the next write is stored. A connection the pool opened inside the spell
    // (SQLite opens it read-only without a word) is not kept: before, it was, and about one CI run in
    // four had this write refused "can only be read" (stop 59's note).
    let reply = app
        .post(
            &format!("/session/{session}/message"),
            json!({"parts": [{"type": "text", "text": "writable again"}]}),
        )
        .await?;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let messages = app.read(&format!("/session/{session}/message")).await?;
    assert_eq!(
        messages.as_array().map(Vec::len),
        Some(1),
        "one message stored: {messages}"
    );
    app.stop().await
}

/// Whether `path` is on an ext4 (or ext2/3) file system, as `stat -f` names its type.
fn on_ext4(path: &std::path::Path) -> bool {
    std::process::Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(path)
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "ext2/ext3")
}

/// `chattr FLAG PATH`; whether it succeeded.
fn chattr(flag: &str, path: &std::path::Path) -> bool {
    std::process::Command::new("chattr")
        .arg(flag)
        .arg(path)
        .status()
        .is_ok_and(|status| status.success())
}
