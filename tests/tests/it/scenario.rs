//! Recording sessions over HTTP and reverting them: the files on disk and the JSON after revert,
//! re-revert, unrevert, commit and abort.

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};

use std::time::Duration;

use crate::support::{AppConfig, id_of, spawn_app, spawn_app_with};

fn message_ids(messages: &Value) -> Vec<String> {
    messages
        .as_array()
        .map(|list| {
            list.iter()
                .filter_map(|m| m["info"]["id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn diff_files(diff: &Value) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = diff
        .as_array()
        .map(|list| {
            list.iter()
                .map(|d| {
                    (
                        d["file"].as_str().unwrap_or("?").to_owned(),
                        d["status"].as_str().unwrap_or("?").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

#[tokio::test]
async fn revert_rerevert_unrevert_and_commit_move_files_and_conversation() -> Result<()> {
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    let created = app.read(&format!("/session/{session}")).await?;
    assert_eq!(created["directory"], json!(app.repo.to_str()));
    assert!(created.get("revert").is_none(), "{created}");

    let (user1, _) = app
        .turn(&session, "one", |repo| {
            std::fs::write(repo.join("a.txt"), "a1\n")?;
            std::fs::write(repo.join("c.txt"), "c1\n")?;
            Ok(())
        })
        .await?;
    let (user2, assistant2) = app
        .turn(&session, "two", |repo| {
            std::fs::write(repo.join("a.txt"), "a2\n")?;
            std::fs::write(repo.join("b.txt"), "b2\n")?;
            Ok(())
        })
        .await?;
    let (user3, _) = app
        .turn(&session, "three", |repo| {
            std::fs::remove_file(repo.join("c.txt"))?;
            std::fs::write(repo.join("d.txt"), "d3\n")?;
            Ok(())
        })
        .await?;
    let messages = app.read(&format!("/session/{session}/message")).await?;
    assert_eq!(message_ids(&messages).len(), 6);
    let newest = app
        .read(&format!("/session/{session}/message?limit=2"))
        .await?;
    assert_eq!(message_ids(&newest), message_ids(&messages)[4..]);
    pages_of_messages(&app, &session, &message_ids(&messages)).await?;
    // The second turn's assistant message: text, step-start, step-finish, patch naming both files.
    let turn2 = app
        .read(&format!("/session/{session}/message/{assistant2}"))
        .await?;
    let kinds: Vec<&str> = turn2["parts"]
        .as_array()
        .map(|p| p.iter().filter_map(|p| p["type"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(kinds, ["text", "step-start", "step-finish", "patch"]);
    let repo = app.repo.to_str().unwrap_or_default();
    assert_eq!(
        turn2["parts"][3]["files"],
        json!([format!("{repo}/a.txt"), format!("{repo}/b.txt")])
    );

    // Revert to turn 2: the files are as turn 1 left them; the messages stay listed until cleanup.
    let reverted = app.revert_to(&session, &user2).await?;
    assert_eq!(reverted["revert"]["messageID"], json!(user2));
    assert!(reverted["revert"]["snapshot"].is_string(), "{reverted}");
    assert_eq!(
        (
            app.file("a.txt"),
            app.file("b.txt"),
            app.file("c.txt"),
            app.file("d.txt")
        ),
        (
            Some("a1\n".into()),
            Some("b0\n".into()),
            Some("c1\n".into()),
            None
        )
    );
    assert_eq!(
        app.read(&format!("/session/{session}")).await?["revert"],
        reverted["revert"]
    );
    assert_eq!(
        message_ids(&app.read(&format!("/session/{session}/message")).await?).len(),
        6
    );
    let diff = app.read(&format!("/session/{session}/diff")).await?;
    assert_eq!(
        diff_files(&diff),
        [
            ("a.txt".into(), "modified".into()),
            ("b.txt".into(), "modified".into()),
            ("c.txt".into(), "deleted".into()),
            ("d.txt".into(), "added".into()),
        ]
    );
    assert_eq!(reverted["summary"]["files"], json!(4));

    // Re-revert to turn 1: starts from the un-reverted tree, ends at the initial commit's files.
    let rereverted = app.revert_to(&session, &user1).await?;
    assert_eq!(rereverted["revert"]["messageID"], json!(user1));
    assert_eq!(
        (
            app.file("a.txt"),
            app.file("b.txt"),
            app.file("c.txt"),
            app.file("d.txt")
        ),
        (Some("a0\n".into()), Some("b0\n".into()), None, None)
    );

    // Unrevert: exactly the files the revert changed go forward again.
    app.write("untracked-while-reverted.txt", "mine\n")?;
    let unreverted = app
        .ok(&format!("/session/{session}/unrevert"), json!({}))
        .await?;
    assert!(unreverted.get("revert").is_none(), "{unreverted}");
    assert_eq!(
        (
            app.file("a.txt"),
            app.file("b.txt"),
            app.file("c.txt"),
            app.file("d.txt")
        ),
        (
            Some("a2\n".into()),
            Some("b2\n".into()),
            None,
            Some("d3\n".into())
        )
    );
    assert_eq!(
        app.file("untracked-while-reverted.txt").as_deref(),
        Some("mine\n")
    );
    // Unrevert of a session that is not reverted returns it unchanged.
    let again = app
        .ok(&format!("/session/{session}/unrevert"), json!({}))
        .await?;
    assert_eq!(again["id"], json!(session));
    assert_eq!(app.file("a.txt").as_deref(), Some("a2\n"));

    // Revert turn 3 and commit: its messages are gone for good, the files stay as the revert left them.
    app.revert_to(&session, &user3).await?;
    assert_eq!(
        (app.file("c.txt"), app.file("d.txt")),
        (Some("c1\n".into()), None)
    );
    let committed = app
        .ok(&format!("/session/{session}/revert/commit"), json!({}))
        .await?;
    assert!(committed.get("revert").is_none(), "{committed}");
    let left = message_ids(&app.read(&format!("/session/{session}/message")).await?);
    assert_eq!(left.len(), 4, "{left:?}");
    assert!(!left.contains(&user3));
    assert_eq!(
        (app.file("a.txt"), app.file("c.txt"), app.file("d.txt")),
        (Some("a2\n".into()), Some("c1\n".into()), None)
    );
    let unknown = app
        .post(
            &format!("/session/{session}/revert"),
            json!({"messageID": user3}),
        )
        .await?;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    app.stop().await
}

/// A message whose parts name their session and message (its own id, given in the body), as the parts a
/// client stored and sends back do: accepted, the ids not kept twice.
#[tokio::test]
async fn a_message_whose_parts_name_it_is_recorded() -> Result<()> {
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    let own = "msg_ffffffff00000123456789abcd";
    let named = app
        .ok(
            &format!("/session/{session}/message"),
            json!({"id": own, "parts": [
                {"type": "text", "text": "named", "sessionID": session, "messageID": own}
            ]}),
        )
        .await?;
    assert_eq!(named["info"]["id"], json!(own), "{named}");
    assert_eq!(named["parts"][0]["messageID"], json!(own), "{named}");
    assert_eq!(named["parts"][0]["text"], json!("named"), "{named}");
    let stored = app
        .read(&format!("/session/{session}/message/{own}"))
        .await?;
    assert_eq!(stored["parts"], named["parts"]);
    app.stop().await
}

#[tokio::test]
async fn an_aborted_step_can_be_reverted_and_preview_changes_nothing() -> Result<()> {
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    // A body may name its own session, as OpenCode's message objects do; it is not kept twice.
    let user = app
        .ok(
            &format!("/session/{session}/message"),
            json!({"sessionID": session, "parts": [{"type": "text", "text": "go"}]}),
        )
        .await?;
    let user = id_of(&user["info"])?;
    let assistant = app
        .ok(
            &format!("/session/{session}/message"),
            json!({"role": "assistant", "sessionID": session}),
        )
        .await?;
    let assistant = id_of(&assistant["info"])?;
    let messages = app.read(&format!("/session/{session}/message")).await?;
    assert_eq!(messages.as_array().map(Vec::len), Some(2), "{messages}");
    assert_eq!(messages[0]["info"]["sessionID"], json!(session));
    app.ok(
        &format!("/session/{session}/message/{assistant}/step"),
        json!({}),
    )
    .await?;
    let busy = app.read(&format!("/session/{session}")).await?;
    assert!(busy["step"].is_object(), "an open step shows: {busy}");
    // A revert while the step is open is refused with OpenCode's busy error.
    let refused = app
        .post(
            &format!("/session/{session}/revert"),
            json!({"messageID": user}),
        )
        .await?;
    assert_eq!(refused.status, 409, "{}", refused.body);
    assert_eq!(refused.body["_tag"], "SessionBusyError");
    assert_eq!(refused.body["sessionID"], json!(session));
    app.write("a.txt", "half-done\n")?;
    app.write("new.txt", "new\n")?;
    // OpenCode's TUI calls abort before /undo.
    assert_eq!(
        app.ok(&format!("/session/{session}/abort"), json!({}))
            .await?,
        json!(true)
    );
    let idle = app.read(&format!("/session/{session}")).await?;
    assert!(idle.get("step").is_none(), "{idle}");
    ensure_aborted(&app, &session, &assistant).await?;

    let preview = app
        .read(&format!(
            "/session/{session}/revert/preview?messageID={user}"
        ))
        .await?;
    assert_eq!(preview["descriptor"]["messageID"], json!(user));
    let mut actions: Vec<(String, String)> = preview["files"]
        .as_array()
        .map(|f| {
            f.iter()
                .map(|f| {
                    (
                        f["file"]
                            .as_str()
                            .unwrap_or("?")
                            .rsplit('/')
                            .next()
                            .unwrap_or("?")
                            .to_owned(),
                        f["action"].as_str().unwrap_or("?").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    actions.sort();
    assert_eq!(
        actions,
        [
            ("a.txt".into(), "write".into()),
            ("new.txt".into(), "delete".into())
        ]
    );
    assert_eq!(app.file("a.txt").as_deref(), Some("half-done\n"));

    app.revert_to(&session, &user).await?;
    assert_eq!(
        (app.file("a.txt"), app.file("new.txt")),
        (Some("a0\n".into()), None)
    );
    assert_eq!(
        app.ok(&format!("/session/{session}/abort"), json!({}))
            .await?,
        json!(true),
        "abort without an open step is a no-op"
    );
    app.stop().await
}

/// OpenCode's filters of the session list: `limit` (the newest), `search` (the title, in any case),
/// `start` (updated since) and `roots` (all of rewind's sessions are roots). Black-box: `limit` was
/// ignored.
#[tokio::test]
async fn the_session_list_takes_opencode_s_filters() -> Result<()> {
    let app = spawn_app().await?;
    let mut ids = Vec::new();
    for title in ["Fix the parser", "Write docs", "parser tests"] {
        ids.push(id_of(
            &app.ok("/session", json!({ "title": title })).await?,
        )?);
    }
    let listed = async |query: &str| -> Result<Vec<(String, u64)>> {
        let list = app.read(&format!("/session{query}")).await?;
        list.as_array()
            .context("a list")?
            .iter()
            .map(|s| {
                let id = s["id"].as_str().context("id")?.to_owned();
                let updated = s["time"]["updated"].as_u64().context("updated")?;
                Ok((id, updated))
            })
            .collect()
    };
    let ids_of =
        |list: Vec<(String, u64)>| -> Vec<String> { list.into_iter().map(|(id, _)| id).collect() };
    assert_eq!(
        ids_of(listed("?limit=2").await?),
        [ids[2].clone(), ids[1].clone()]
    );
    assert_eq!(
        ids_of(listed("?search=PARSER").await?),
        [ids[2].clone(), ids[0].clone()]
    );
    assert_eq!(
        ids_of(listed("?search=parser&limit=1").await?),
        [ids[2].clone()]
    );
    assert_eq!(listed("?roots=true").await?.len(), 3);
    let all = listed("").await?;
    let start = all
        .iter()
        .find(|(id, _)| *id == ids[1])
        .context("listed")?
        .1;
    let since = listed(&format!("?start={start}")).await?;
    let expected: Vec<&(String, u64)> = all
        .iter()
        .filter(|(_, updated)| *updated >= start)
        .collect();
    assert_eq!(since.iter().collect::<Vec<_>>(), expected);
    assert!(since.iter().any(|(id, _)| *id == ids[1]));
    assert_eq!(listed("?start=99999999999999").await?, Vec::new());
    let bad = app.get("/session?limit=many").await?;
    assert_eq!(bad.status, 400, "{}", bad.body);
    app.stop().await
}

/// OpenCode's subagent sessions: a session created with `parentID` says so, is listed among its parent's
/// children (and not among the roots), and outlives its parent, as a root then; a `parentID` that is
/// malformed (400) or names no session (404) creates nothing.
#[tokio::test]
async fn a_session_created_under_another_is_its_child() -> Result<()> {
    let app = spawn_app().await?;
    let parent = app.new_session().await?;
    let other = app.new_session().await?;
    let child = app
        .ok("/session", json!({"title": "subagent", "parentID": parent}))
        .await?;
    assert_eq!(child["parentID"], json!(parent));
    let child_id = id_of(&child)?;
    assert_eq!(app.read(&format!("/session/{child_id}")).await?, child);
    let children = app.read(&format!("/session/{parent}/children")).await?;
    assert_eq!(children, json!([child.clone()]));
    assert_eq!(
        app.read(&format!("/session/{other}/children")).await?,
        json!([])
    );
    let ids = |listed: Value| -> Vec<String> {
        listed
            .as_array()
            .map(|l| {
                l.iter()
                    .filter_map(|s| s["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        ids(app.read("/session").await?),
        [child_id.clone(), other.clone(), parent.clone()]
    );
    assert_eq!(
        ids(app.read("/session?roots=true").await?),
        [other.clone(), parent.clone()]
    );
    for (body, status) in [
        (json!({"parentID": "not-a-session"}), 400),
        (json!({"parentID": "ses_00000000000000000000000000"}), 404),
        (json!({"parentID": 7}), 400),
    ] {
        let refused = app.post("/session", body.clone()).await?;
        assert_eq!(refused.status, status, "{body}: {}", refused.body);
    }
    assert_eq!(
        ids(app.read("/session").await?).len(),
        3,
        "a refused create made a session"
    );
    // Deleting the parent deletes its children with it, at any depth, as OpenCode does (SDK audit: they
    // stayed, naming a parent that was gone, and OpenCode's lists, which hide child sessions, never
    // showed them again); a step open in one of them (this server's) is aborted first, as OpenCode aborts
    // a session it deletes (a step a running `rewind exec` owns refuses it: `serve_log.rs`).
    let grandchild = id_of(
        &app.ok(
            "/session",
            json!({"title": "sub-subagent", "parentID": child_id}),
        )
        .await?,
    )?;
    app.open_step(&grandchild, "working").await?;
    let mut events = app.events().await?;
    let deleted = app.delete(&format!("/session/{parent}")).await?;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    for gone in [&parent, &child_id, &grandchild] {
        let read = app.get(&format!("/session/{gone}")).await?;
        assert_eq!(read.status, 404, "{gone}: {}", read.body);
    }
    assert_eq!(ids(app.read("/session").await?), [other]);
    let mut said = Vec::new();
    let mut finished_first = false;
    while said.len() < 3 {
        let event = events
            .next(std::time::Duration::from_secs(5))
            .await?
            .ok_or_else(|| anyhow::anyhow!("no session.deleted event after {said:?}"))?;
        let part = &event["properties"]["part"];
        if event["type"] == "message.part.updated"
            && part["type"] == "step-finish"
            && part["sessionID"] == json!(grandchild)
        {
            finished_first = said.is_empty();
        }
        if event["type"] == "session.deleted" {
            said.push(
                event["properties"]["sessionID"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            );
        }
    }
    assert!(
        finished_first,
        "the open step was aborted before any deletion"
    );
    assert_eq!(said, [grandchild, child_id, parent], "deepest first");

    // A child whose worktree lies outside the server's project roots (recorded by the command line on
    // the same database) is not touched: it stays, a root of its own (review).
    let outside = tempfile::tempdir()?;
    let parent = app.new_session().await?;
    let elsewhere = app
        .create_child_in(outside.path(), "elsewhere", Some(&parent))
        .await?;
    // Nor is it listed among the children: this server shows no session outside its roots.
    assert_eq!(
        app.read(&format!("/session/{parent}/children")).await?,
        json!([])
    );
    let deleted = app.delete(&format!("/session/{parent}")).await?;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    let elsewhere = rewind_core::model::SessionId::parse(&elsewhere)?;
    let kept = rewind_core::ports::MessageRepo::session(&*app.db, &elsewhere).await?;
    assert!(kept.is_some(), "the child outside the roots was deleted");
    app.stop().await
}

#[tokio::test]
async fn sessions_are_listed_newest_first_and_deleted_without_touching_files() -> Result<()> {
    let app = spawn_app().await?;
    let first = app.new_session().await?;
    let second = app.new_session().await?;
    let listed = app.read("/session").await?;
    let ids: Vec<&str> = listed
        .as_array()
        .map(|l| l.iter().filter_map(|s| s["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, [second.as_str(), first.as_str()]);
    // OpenCode's client asks for a session's children (its subagent sessions): one created without a
    // `parentID` has none.
    assert_eq!(
        app.read(&format!("/session/{first}/children")).await?,
        json!([])
    );
    // And for the statuses of the worktree's sessions: only a session with an open step is listed, busy
    // (black-box: `/session/status` was read as a malformed session id, 400).
    assert_eq!(app.read("/session/status").await?, json!({}));
    let (_, mid) = app.open_step(&first, "a step").await?;
    assert_eq!(
        app.read("/session/status").await?,
        json!({ first.as_str(): {"type": "busy"} })
    );
    app.ok(
        &format!("/session/{first}/message/{mid}/step/finish"),
        json!({}),
    )
    .await?;
    assert_eq!(app.read("/session/status").await?, json!({}));
    // A session of another worktree is listed under its own directory, not the server's.
    let sub = app.repo.join("sub");
    std::fs::create_dir(&sub)?;
    let other = app
        .ok("/session", json!({"directory": sub.to_str()}))
        .await?;
    assert_eq!(other["directory"], json!(sub.to_str()));
    let listed = app.read("/session").await?;
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");
    let encoded = sub.to_str().unwrap_or_default().replace('/', "%2F");
    let listed = app.read(&format!("/session?directory={encoded}")).await?;
    assert_eq!(listed[0]["id"], other["id"]);
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    app.turn_writing(&first, "edit", "a.txt", "edited\n")
        .await?;
    let deleted = app.delete(&format!("/session/{first}")).await?;
    assert_eq!((deleted.status, deleted.body.clone()), (200, json!(true)));
    assert_eq!(app.get(&format!("/session/{first}")).await?.status, 404);
    assert_eq!(
        app.get(&format!("/session/{first}/children")).await?.status,
        404
    );
    assert_eq!(app.file("a.txt").as_deref(), Some("edited\n"));
    // The directory can come from the header (percent-encoded, as OpenCode's client sends it).
    let encoded: String = app.repo.to_str().unwrap_or_default().replace('/', "%2F");
    let by_header = app
        .send(
            app.http
                .post(app.url("/session"))
                .header("x-opencode-directory", encoded)
                .json(&json!({})),
        )
        .await?;
    assert_eq!(by_header.status, 200, "{}", by_header.body);
    assert_eq!(by_header.body["directory"], json!(app.repo.to_str()));
    let doc = app.read("/doc").await?;
    // What the server serves is the document every answer of these tests is checked against.
    assert_eq!(doc, crate::documented::served());
    assert!(
        doc["paths"]["/session/{id}/revert"]["post"].is_object(),
        "{doc}"
    );
    // The statuses the routes answer with are documented, the step routes' refusals included.
    for (path, method, statuses) in [
        (
            "/session/{id}/message/{mid}/step",
            "post",
            &["200", "400", "404", "409"][..],
        ),
        (
            "/session/{id}/message/{mid}/step/finish",
            "post",
            &["200", "400", "404", "409"],
        ),
        (
            "/session/{id}/message/{mid}/step/abort",
            "post",
            &["200", "400", "404", "409"],
        ),
        (
            "/session/{id}/message/{mid}/part",
            "post",
            &["200", "400", "404", "409"],
        ),
        (
            "/session/{id}/message",
            "post",
            &["200", "400", "404", "409"],
        ),
        ("/session/{id}/unrevert", "post", &["200", "404", "409"]),
        (
            "/session/{id}/revert/commit",
            "post",
            &["200", "404", "409"],
        ),
        (
            "/session/{id}/revert/preview",
            "get",
            &["200", "400", "404"],
        ),
        // What the checks before any handler answer, on every route (black-box: none was documented).
        (
            "/session/{id}/diff",
            "get",
            &["200", "400", "401", "403", "404"],
        ),
        (
            "/session",
            "post",
            &["200", "400", "401", "403", "413", "415"],
        ),
        (
            "/session/{id}/abort",
            "post",
            &["200", "400", "404", "409", "415"],
        ),
        ("/session/{id}", "delete", &["200", "400", "404", "415"]),
        ("/session/status", "get", &["200", "400"]),
        ("/session/{id}", "patch", &["200", "400", "404"]),
    ] {
        let responses = &doc["paths"][path][method]["responses"];
        for status in statuses {
            assert!(
                responses[*status].is_object(),
                "{method} {path} documents {status}: {responses}"
            );
        }
    }
    // Basic auth is documented as a scheme a request may use (required beyond loopback), and a read
    // answers no 415.
    assert_eq!(
        doc["components"]["securitySchemes"]["basic"]["scheme"], "basic",
        "{doc}"
    );
    assert_eq!(doc["security"], json!([{}, {"basic": []}]));
    assert!(doc["paths"]["/session/{id}/diff"]["get"]["responses"]["415"].is_null());
    // A `true` answer is JSON, and so documented; every operation takes the directory header and has a
    // tag of its own path, not the code's module.
    assert!(
        doc["paths"]["/session/{id}"]["delete"]["responses"]["200"]["content"]["application/json"]
            .is_object(),
        "{doc}"
    );
    // The diff's `messageID`, which OpenCode's client sends, is documented (review: it was not).
    let diff = &doc["paths"]["/session/{id}/diff"]["get"];
    assert!(
        diff["parameters"].as_array().is_some_and(|p| p
            .iter()
            .any(|p| p["name"] == "messageID" && p["in"] == "query")),
        "{diff}"
    );
    let revert = &doc["paths"]["/session/{id}/revert"]["post"];
    assert_eq!(revert["tags"], json!(["session"]));
    assert!(
        revert["parameters"].as_array().is_some_and(|p| p
            .iter()
            .any(|p| p["name"] == "x-opencode-directory" && p["in"] == "header")),
        "{revert}"
    );
    app.stop().await
}

/// OpenCode's v2 `session.update` also sets `metadata` and `time.archived`: kept as given, announced, read
/// back, kept by the end of a step open while it landed (which writes the session it read before), by a
/// revert and an unrevert, and `null` clears them; fields left out stay (before: both were dropped, the
/// reply 200 all the same).
#[tokio::test]
async fn a_sessions_metadata_and_archive_time_are_set_and_kept() -> Result<()> {
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    let path = format!("/session/{session}");
    let (user, assistant) = app.open_step(&session, "a turn").await?;
    app.write("a.txt", "turned\n")?;
    let mut stream = app.events().await?;
    let set = app
        .patch(
            &path,
            json!({"metadata": {"ticket": 42, "tags": ["x"]}, "time": {"archived": 1_700_000_000_000u64}}),
        )
        .await?;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(set.body["metadata"], json!({"ticket": 42, "tags": ["x"]}));
    assert_eq!(set.body["time"]["archived"], 1_700_000_000_000u64);
    assert_eq!(set.body["title"], app.read(&path).await?["title"]);
    assert_eq!(app.read(&path).await?, set.body);
    let announced = stream.until("session.updated").await?;
    assert_eq!(
        announced.last().map(|e| e["properties"]["info"].clone()),
        Some(set.body.clone())
    );
    app.ok(
        &format!("{path}/message/{assistant}/step/finish"),
        json!({}),
    )
    .await?;
    let finished = app.read(&path).await?;
    assert_eq!(finished["metadata"], set.body["metadata"], "{finished}");
    assert_eq!(finished["time"]["archived"], 1_700_000_000_000u64);

    app.revert_to(&session, &user).await?;
    assert_eq!(app.file("a.txt").as_deref(), Some("a0\n"));
    let reverted = app.read(&path).await?;
    assert_eq!(reverted["metadata"], set.body["metadata"]);
    assert_eq!(reverted["time"]["archived"], 1_700_000_000_000u64);
    app.ok(&format!("{path}/unrevert"), json!({})).await?;
    let title = app.patch(&path, json!({"title": "archived work"})).await?;
    assert_eq!(
        title.body["metadata"], set.body["metadata"],
        "{}",
        title.body
    );
    assert_eq!(title.body["time"]["archived"], 1_700_000_000_000u64);

    let cleared = app
        .patch(&path, json!({"time": {"archived": null}}))
        .await?;
    assert_eq!(cleared.status, 200, "{}", cleared.body);
    assert!(
        cleared.body["time"].get("archived").is_none(),
        "{}",
        cleared.body
    );
    assert_eq!(cleared.body["metadata"], set.body["metadata"]);
    assert_eq!(cleared.body["title"], "archived work");
    let cleared = app.patch(&path, json!({"metadata": null})).await?;
    assert!(cleared.body.get("metadata").is_none(), "{}", cleared.body);
    assert_eq!(cleared.body["title"], "archived work");
    app.stop().await
}

/// OpenCode's `session.update` (`PATCH /session/:id`): a new title, announced by `session.updated` with the
/// session as stored and read back; an empty body changes nothing. As in OpenCode it lands while a step is
/// open too, and neither the step's end nor a later revert and unrevert (each writes the session it read
/// before) puts the old title back or announces it.
#[tokio::test]
async fn a_session_is_renamed_while_its_step_is_open_and_keeps_the_title() -> Result<()> {
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    let mut stream = app.events().await?;
    let path = format!("/session/{session}");
    let renamed = app.patch(&path, json!({"title": "fix the build"})).await?;
    assert_eq!(renamed.status, 200, "{}", renamed.body);
    assert_eq!(renamed.body["title"], "fix the build");
    assert_eq!(app.read(&path).await?["title"], "fix the build");
    let updated = stream.until("session.updated").await?;
    assert_eq!(
        updated
            .last()
            .map(|e| e["properties"]["info"]["title"].clone()),
        Some(json!("fix the build"))
    );
    let unchanged = app.patch(&path, json!({})).await?;
    assert_eq!(unchanged.status, 200);
    assert_eq!(unchanged.body, app.read(&path).await?);

    let (user, mid) = app.open_step(&session, "a step").await?;
    app.write("a.txt", "during the step\n")?;
    let during = app
        .patch(&path, json!({"title": "renamed mid-step"}))
        .await?;
    assert_eq!(during.status, 200, "{}", during.body);
    let stored = app.read(&path).await?;
    assert_eq!(stored["title"], "renamed mid-step");
    assert!(
        stored["step"].is_object(),
        "the step is still open: {stored}"
    );
    assert_eq!(during.body, stored);
    // (The step's prompt touched the session before: announced too, with the title it had then.)
    let announced = stream
        .until_matching("the rename's session.updated", |e| {
            e["type"] == "session.updated" && e["properties"]["info"]["title"] == "renamed mid-step"
        })
        .await?;
    let last = announced.last().map(|e| e["properties"]["info"].clone());
    assert_eq!(
        last,
        Some(stored),
        "the rename announces the session as stored"
    );

    app.ok(&format!("{path}/message/{mid}/step/finish"), json!({}))
        .await?;
    assert_eq!(app.read(&path).await?["title"], "renamed mid-step");
    app.revert_to(&session, &user).await?;
    assert_eq!(app.file("a.txt").as_deref(), Some("a0\n"));
    assert_eq!(app.read(&path).await?["title"], "renamed mid-step");
    app.ok(&format!("{path}/unrevert"), json!({})).await?;
    assert_eq!(app.file("a.txt").as_deref(), Some("during the step\n"));
    let after = app.read(&path).await?;
    assert_eq!(after["title"], "renamed mid-step");
    assert!(after["revert"].is_null(), "{after}");
    // Every announcement of the session since the rename carries the new title.
    let later = stream
        .until_matching("the unrevert's session.updated", |e| {
            e["type"] == "session.updated" && e["properties"]["info"] == after
        })
        .await?;
    let titles: Vec<_> = later
        .iter()
        .filter(|e| e["type"] == "session.updated")
        .map(|e| e["properties"]["info"]["title"].clone())
        .collect();
    assert!(titles.len() >= 3, "{titles:?}");
    assert!(titles.iter().all(|t| t == "renamed mid-step"), "{titles:?}");
    app.stop().await
}

/// Renames race the session's own writes (messages, parts, step ends, a revert and an unrevert), each of
/// which writes the session from what it read before: the title is always the last rename's, and the
/// announcements of the session, in commit order, never go back to an earlier title.
#[tokio::test]
async fn renames_racing_the_sessions_own_writes_never_bring_an_old_title_back() -> Result<()> {
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    let mut stream = app.events().await?;
    let path = format!("/session/{session}");
    let renames = async {
        for n in 0..40 {
            let title = format!("title {n:02}");
            let reply = app.patch(&path, json!({ "title": title })).await?;
            ensure!(reply.status == 200, "rename {n}: {}", reply.body);
            ensure!(reply.body["title"] == title, "rename {n}: {}", reply.body);
        }
        Ok::<_, anyhow::Error>(())
    };
    let writes = async {
        for turn in 0..4 {
            let (user, assistant) = app.open_step(&session, &format!("turn {turn}")).await?;
            app.write("a.txt", &format!("turn {turn}\n"))?;
            for k in 0..3 {
                app.ok(
                    &format!("{path}/message/{assistant}/part"),
                    json!({"type": "text", "text": format!("part {k}")}),
                )
                .await?;
            }
            app.ok(
                &format!("{path}/message/{assistant}/step/finish"),
                json!({"reason": "stop", "cost": 0.25}),
            )
            .await?;
            if turn % 2 == 1 {
                app.revert_to(&session, &user).await?;
                app.ok(&format!("{path}/unrevert"), json!({})).await?;
            }
        }
        Ok::<_, anyhow::Error>(())
    };
    let (renamed, written) = tokio::join!(renames, writes);
    renamed?;
    written?;
    let last = app.read(&path).await?;
    assert_eq!(last["title"], "title 39");
    assert_eq!(app.file("a.txt").as_deref(), Some("turn 3\n"));
    let events = stream
        .until_matching("the session as stored now", |e| {
            e["type"] == "session.updated" && e["properties"]["info"] == last
        })
        .await?;
    let titles: Vec<i64> = events
        .iter()
        .filter(|e| e["type"] == "session.updated")
        .map(|e| {
            let title = e["properties"]["info"]["title"].as_str().unwrap_or("?");
            title
                .strip_prefix("title ")
                .and_then(|n| n.parse().ok())
                .unwrap_or(-1)
        })
        .collect();
    assert!(titles.len() > 40, "{titles:?}");
    assert!(
        titles.windows(2).all(|pair| pair[0] <= pair[1]),
        "an announcement went back to an earlier title: {titles:?}"
    );
    app.stop().await
}

#[tokio::test]
async fn an_http_step_lives_while_its_client_talks_and_is_aborted_after_the_timeout() -> Result<()>
{
    let app = spawn_app_with(AppConfig {
        step_timeout: Some(Duration::from_millis(3000)),
        ..AppConfig::default()
    })
    .await?;
    let session = app.new_session().await?;
    let (user, assistant) = app.open_step(&session, "go").await?;
    app.write("a.txt", "during the step\n")?;
    // Writes on the session (the agent's parts), for longer than the timeout, keep the step open. (Every
    // 300 ms, with a timeout of 3 s: a stall of the loaded test machine between two of them must last
    // 2.7 s to abandon the step; with 1.5 s, 1.2 s did: review.)
    for n in 0..12 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.ok(
            &format!("/session/{session}/message/{assistant}/part"),
            json!({"type": "text", "text": format!("working {n}")}),
        )
        .await?;
    }
    let refused = app
        .post(
            &format!("/session/{session}/revert"),
            json!({"messageID": user}),
        )
        .await?;
    assert_eq!(
        refused.status, 409,
        "the step is still open: {}",
        refused.body
    );
    assert_eq!(app.file("a.txt").as_deref(), Some("during the step\n"));
    assert_eq!(
        app.read("/session/status").await?,
        json!({ session.as_str(): {"type": "busy"} })
    );
    // Reads alone past the timeout (a UI polling a dead agent's session) are silence: the next operation
    // aborts the step first, so the revert goes ahead.
    for _ in 0..12 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.read(&format!("/session/{session}/message")).await?;
        app.read(&format!("/session/{session}")).await?;
    }
    // Abandoned: not busy any more (black-box: `/session/status` said busy until the next operation), and
    // aborted by the server's look for abandoned steps (every 5 s) or by the next operation, whichever
    // comes first.
    assert_eq!(app.read("/session/status").await?, json!({}));
    let reverted = app.revert_to(&session, &user).await?;
    assert_eq!(reverted["revert"]["messageID"], json!(user));
    assert_eq!(app.file("a.txt").as_deref(), Some("a0\n"));
    ensure_aborted(&app, &session, &assistant).await?;
    app.stop().await
}

/// A step whose client falls silent past the step timeout is announced idle by the server itself, with no
/// other request: its clients see `session.status` idle on the stream (event stream review: the session
/// stayed busy to them until some later operation came). The step is left to the next operation, which
/// aborts it with what it changed until then (the client may still be at work; diff review).
#[tokio::test]
async fn a_silent_step_is_shown_idle_without_another_request() -> Result<()> {
    let app = spawn_app_with(AppConfig {
        step_timeout: Some(Duration::from_millis(1000)),
        recovery_interval: Some(Duration::from_millis(200)),
        ..AppConfig::default()
    })
    .await?;
    let session = app.new_session().await?;
    // Connected before the step opens: the idle announcement, a second after it, must not come before
    // the stream is there (a fresh stream starts with what comes next; review).
    let mut events = app.connected_events().await?;
    let (user, assistant) = app.open_step(&session, "go").await?;
    events
        .until_matching("the session shown busy", |event| {
            event["type"] == "session.status"
                && event["properties"]["sessionID"] == json!(session)
                && event["properties"]["status"]["type"] == "busy"
        })
        .await?;
    app.write("a.txt", "written by an agent that then fell silent\n")?;
    let seen = events
        .until_matching("the session shown idle", |event| {
            event["type"] == "session.status"
                && event["properties"]["sessionID"] == json!(session)
                && event["properties"]["status"]["type"] == "idle"
        })
        .await?;
    ensure!(
        !seen
            .iter()
            .any(|e| e["properties"]["part"]["type"] == "step-finish"),
        "announced, not aborted: {:?}",
        crate::support::types(&seen)
    );
    assert_eq!(app.read("/session/status").await?, json!({}));
    app.write("b.txt", "written later still\n")?;
    app.revert_to(&session, &user).await?;
    ensure_aborted(&app, &session, &assistant).await?;
    assert_eq!(app.file("a.txt").as_deref(), Some("a0\n"));
    assert_eq!(
        app.file("b.txt").as_deref(),
        Some("b0\n"),
        "the later write is the step's too"
    );
    app.stop().await
}

/// A server whose periodic recovery runs every `recovery_interval`, with a session of one turn that wrote
/// a.txt and b.txt: the server, the session and the turn's user message.
async fn app_with_a_turn(
    recovery_interval: Duration,
) -> Result<(crate::support::TestApp, String, String)> {
    let app = spawn_app_with(AppConfig {
        recovery_interval: Some(recovery_interval),
        ..AppConfig::default()
    })
    .await?;
    let session = app.new_session().await?;
    let (user, _) = app
        .turn(&session, "one", |repo| {
            std::fs::write(repo.join("a.txt"), "a1\n")?;
            std::fs::write(repo.join("b.txt"), "b1\n")?;
            Ok(())
        })
        .await?;
    Ok((app, session, user))
}

/// The snapshot at the end of the session's first step (the worktree as its first turn left it).
async fn first_step_end(app: &crate::support::TestApp, session: &str) -> Result<String> {
    let messages = app.read(&format!("/session/{session}/message")).await?;
    messages
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["parts"].as_array().cloned().unwrap_or_default())
        .find(|p| p["type"] == "step-finish")
        .and_then(|p| p["snapshot"].as_str().map(str::to_owned))
        .ok_or_else(|| anyhow::anyhow!("a step-finish with a snapshot: {messages}"))
}

/// The session's warnings once it has any (the running server's recovery raises them), or none after 10 s.
async fn first_warnings(app: &crate::support::TestApp, session: &str) -> Result<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let warnings = app.read(&format!("/session/{session}/warnings")).await?;
        if warnings.as_array().is_some_and(|w| !w.is_empty())
            || tokio::time::Instant::now() > deadline
        {
            return Ok(warnings);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Leaves in the database what a `rewind revert` of `session` leaves when it is killed after storing its
/// intent: the session's and the worktree's leases held by a process that is gone, and the intent, whose
/// pre-operation snapshot is `before` and whose files are `files`.
async fn interrupted_revert(
    app: &crate::support::TestApp,
    session: &str,
    before: &str,
    files: &[&str],
) -> Result<()> {
    use rewind_core::model::{
        Holder, HolderKind, IntentOperation, IntentRecord, Lease, LeaseKey, LeaseToken,
        ProcessIdentity, RelPath, SessionId, SnapshotId,
    };
    use rewind_core::{Change, MessageRepo, Transaction};
    // A pid no process has now: that of a child that has exited and been reaped.
    let mut child = std::process::Command::new("true").spawn()?;
    child.wait()?;
    let holder = Holder {
        kind: HolderKind::Process,
        process: ProcessIdentity {
            host: rewind_app::host::host_name(),
            pid: child.id(),
            start_time: 1,
            boot: None,
            machine: None,
        },
    };
    let session = SessionId::parse(session)?;
    let directory = app
        .repo
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("a UTF-8 worktree"))?
        .to_owned();
    let token = LeaseToken("tok_killed_revert".to_owned());
    for key in [
        LeaseKey::Session(session.clone()),
        LeaseKey::Worktree(directory.clone()),
    ] {
        let lease = Lease {
            key,
            token: token.clone(),
            holder: holder.clone(),
            expires_at: i64::MAX as u64,
        };
        app.db.take_lease(&lease, None).await?;
    }
    let intent = IntentRecord {
        token,
        session_id: session,
        directory,
        operation: IntentOperation::Revert,
        holder,
        before: SnapshotId::parse(before)?,
        files: files
            .iter()
            .map(|f| RelPath::new(*f))
            .collect::<Result<_, _>>()?,
        // Now: the operation began after everything the test made before.
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as u64,
        unreadable: None,
    };
    app.db
        .commit(Transaction {
            guards: Vec::new(),
            changes: vec![Change::PutIntent(Box::new(intent))],
            events: Vec::new(),
        })
        .await?;
    Ok(())
}

/// A revert whose process died mid-way (a `rewind revert` killed while the server runs) is recovered by
/// the running server within its recovery interval, not only by the next operation on the session: the
/// half-reverted files are captured and put back, a `session.warning` names them and the capture, and the
/// session's leases are free again (SPEC 8). Before, `GET /session/:id` said "not reverted", with no
/// warning, while the worktree was half reverted (black-box).
#[tokio::test]
async fn a_revert_whose_process_died_is_recovered_by_the_running_server() -> Result<()> {
    let (app, session, user) = app_with_a_turn(Duration::from_millis(100)).await?;
    // The worktree as the turn left it: the revert's pre-operation snapshot.
    let before = first_step_end(&app, &session).await?;
    let mut events = app.events().await?;
    // The revert was killed after writing a.txt back and before b.txt.
    app.write("a.txt", "a0\n")?;
    interrupted_revert(&app, &session, &before, &["a.txt", "b.txt"]).await?;
    let warnings = first_warnings(&app, &session).await?;
    let a_txt = app.repo.join("a.txt").to_string_lossy().into_owned();
    assert_eq!(warnings.as_array().map(Vec::len), Some(1), "{warnings}");
    assert_eq!(warnings[0]["files"], json!([a_txt]), "{warnings}");
    let capture = warnings[0]["snapshot"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("the warning names its capture: {warnings}"))?;
    assert_ne!(capture, before);
    // Wholly before the revert: a.txt as the turn left it, b.txt untouched.
    assert_eq!(app.file("a.txt").as_deref(), Some("a1\n"));
    assert_eq!(app.file("b.txt").as_deref(), Some("b1\n"));
    let current = app.read(&format!("/session/{session}")).await?;
    assert!(current.get("revert").is_none(), "{current}");
    // Its clients saw it as it happened.
    let mut seen = Vec::new();
    while let Some(event) = events.next(Duration::from_secs(5)).await? {
        let warned = event["type"] == "session.warning";
        seen.push(event);
        if warned {
            break;
        }
    }
    assert_eq!(
        seen.last().map(|e| e["properties"]["snapshot"].clone()),
        Some(json!(capture)),
        "{seen:?}"
    );
    // The leases were given back: a revert now runs.
    let reverted = app
        .post(
            &format!("/session/{session}/revert"),
            json!({"messageID": user}),
        )
        .await?;
    assert_eq!(reverted.status, 200, "{}", reverted.body);
    assert_eq!(app.file("a.txt").as_deref(), Some("a0\n"));
    app.stop().await
}

/// Whether the filesystem holding `path` records when a file was born (ext4 with 128-byte inodes, ext3
/// and NFS do not): recovery tells the directories an operation made from the user's by it.
fn records_birth(path: &std::path::Path) -> bool {
    std::process::Command::new("stat")
        .args(["-c", "%W"])
        .arg(path)
        .output()
        .is_ok_and(|out| {
            let text = String::from_utf8_lossy(&out.stdout);
            text.trim().parse::<i64>().is_ok_and(|born| born > 0)
        })
}

/// Recovery of an operation killed after it had made directories and emptied them again (a redo whose
/// restore made `n/a/b` and wrote files there, whose revert then deleted those files and was killed
/// before removing their directory) removes them with the files it puts back: the worktree is wholly as
/// before (SPEC 8). A directory the state before had (with content, or seen empty at its track) stays, and
/// so does one the user made before the operation began (review) (black-box: chains of empty directories
/// stayed after about one killed operation in two hundred). Where the filesystem records no birth time,
/// the directories stay (empty): none can be told from the user's.
#[tokio::test]
async fn recovery_removes_the_directories_an_interrupted_operation_made_and_emptied() -> Result<()>
{
    let app = spawn_app_with(AppConfig {
        recovery_interval: Some(Duration::from_millis(100)),
        ..AppConfig::default()
    })
    .await?;
    let session = app.new_session().await?;
    app.turn(&session, "one", |repo| {
        std::fs::write(repo.join("a.txt"), "a1\n")?;
        std::fs::create_dir_all(repo.join("d"))?;
        std::fs::write(repo.join("d/kept.txt"), "kept\n")?;
        std::fs::create_dir_all(repo.join("e"))?;
        Ok(())
    })
    .await?;
    let before = first_step_end(&app, &session).await?;
    // A directory the user made (empty) before the operation began.
    std::fs::create_dir_all(app.repo.join("u"))?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    // What the killed operation left: a file it wrote, and directories it made whose files it deleted.
    interrupted_revert(
        &app,
        &session,
        &before,
        &[
            "n/x.txt",
            "n/a/b/y.txt",
            "d/made/z.txt",
            "e/w.txt",
            "u/v.txt",
        ],
    )
    .await?;
    std::fs::create_dir_all(app.repo.join("n/a/b"))?;
    app.write("n/x.txt", "written by the operation\n")?;
    std::fs::create_dir_all(app.repo.join("d/made"))?;
    // The running server recovers it (its warning names the file put back).
    let warnings = first_warnings(&app, &session).await?;
    assert_eq!(warnings.as_array().map(Vec::len), Some(1), "{warnings}");
    if !records_birth(&app.repo) {
        // No directory can be told from one the user made since the operation began: all stay, emptied.
        assert!(
            !app.repo.join("n/x.txt").exists(),
            "the file written is gone"
        );
        assert!(app.repo.join("n/a/b").is_dir() && app.repo.join("d/made").is_dir());
        return app.stop().await;
    }
    assert!(!app.repo.join("n").exists(), "the made directories went");
    assert!(!app.repo.join("d/made").exists());
    // What the state before had: `d` with its file, and `e`, empty when the turn's step ended.
    assert_eq!(app.file("d/kept.txt").as_deref(), Some("kept\n"));
    assert!(
        app.repo.join("e").is_dir(),
        "seen empty at the track before"
    );
    assert!(
        app.repo.join("u").is_dir(),
        "the user's, made before the operation"
    );
    assert_eq!(app.file("a.txt").as_deref(), Some("a1\n"));
    app.stop().await
}

/// An interrupted operation that cannot be put back (here its snapshot is gone from the store) keeps its
/// worktree refused (SPEC 8): over HTTP that is a 409 naming the cause and what to do, not a 500
/// "internal error" (black-box: a file that could not be written).
#[tokio::test]
async fn an_operation_that_cannot_be_recovered_refuses_its_worktree_with_409() -> Result<()> {
    let (app, session, user) = app_with_a_turn(Duration::from_secs(3600)).await?;
    interrupted_revert(&app, &session, &"0".repeat(40), &["a.txt"]).await?;
    for (path, body) in [
        (
            format!("/session/{session}/revert"),
            json!({"messageID": user}),
        ),
        (format!("/session/{session}/unrevert"), json!({})),
    ] {
        let refused = app.post(&path, body).await?;
        assert_eq!(refused.status, 409, "{path}: {}", refused.body);
        assert_eq!(refused.body["_tag"], "SessionBusyError", "{}", refused.body);
        let message = refused.body["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("could not be put back") && message.contains("fix the cause"),
            "{message}"
        );
    }
    assert_eq!(app.file("a.txt").as_deref(), Some("a1\n"));
    app.stop().await
}

/// A client that goes away during a revert does not stop it: the revert runs to its end (files written,
/// result stored, leases given back), so the next request finds it done instead of a session that answers
/// 409 until the leases expire. hyper drops a handler's future when its connection closes; the server runs
/// each request as a task of its own.
#[tokio::test]
async fn a_revert_whose_client_goes_away_still_completes() -> Result<()> {
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    let (user, _) = app.turn_writing(&session, "one", "a.txt", "a1\n").await?;
    // The revert's next commit is its intent record: held open until the client has gone.
    let mut pause = app.db.pause_next_commit();
    let request = app
        .http
        .post(app.url(&format!("/session/{session}/revert")))
        .json(&json!({"messageID": user}));
    let client = tokio::spawn(request.send());
    ensure!(
        pause.reached().await,
        "the revert reached its intent's commit"
    );
    client.abort();
    ensure!(client.await.is_err(), "the client was stopped mid-request");
    // Time for the server to see the connection close (and, without the fix, drop the handler).
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(
        app.file("a.txt").as_deref() == Some("a1\n"),
        "no file touched before the intent"
    );
    pause.resume();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let reverted = loop {
        let current = app.read(&format!("/session/{session}")).await?;
        if current.get("revert").is_some() || tokio::time::Instant::now() > deadline {
            break current;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(reverted["revert"]["messageID"], json!(user), "{reverted}");
    assert_eq!(app.file("a.txt").as_deref(), Some("a0\n"));
    // The leases were given back: the next operation is not refused as busy.
    let unreverted = app
        .post(&format!("/session/{session}/unrevert"), json!({}))
        .await?;
    assert_eq!(unreverted.status, 200, "{}", unreverted.body);
    assert_eq!(app.file("a.txt").as_deref(), Some("a1\n"));
    app.stop().await
}

/// Messages sent at the same instant to a reverted session are all recorded: the first makes the revert
/// permanent (its cleanup and the message in one transaction, under the session's lease) and the others,
/// refused as busy meanwhile, are tried again within the 2 s wait and follow it (black-box: five of six
/// were refused with 409 at once).
#[tokio::test]
async fn messages_sent_at_once_to_a_reverted_session_are_all_recorded() -> Result<()> {
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    app.turn_writing(&session, "one", "a.txt", "one\n").await?;
    let (second, _) = app.turn_writing(&session, "two", "a.txt", "two\n").await?;
    app.revert_to(&session, &second).await?;
    let posts: Vec<_> = (0..6)
        .map(|i| {
            tokio::spawn(
                app.http
                    .post(app.url(&format!("/session/{session}/message")))
                    .json(&json!({"parts": [{"type": "text", "text": format!("at once {i}")}]}))
                    .send(),
            )
        })
        .collect();
    for post in posts {
        let reply = post.await??;
        ensure!(
            reply.status() == 200,
            "every message is recorded: {}",
            reply.status()
        );
    }
    let got = app.read(&format!("/session/{session}")).await?;
    ensure!(got["revert"].is_null(), "the revert is permanent: {got}");
    let messages = app.read(&format!("/session/{session}/message")).await?;
    let ids: Vec<&str> = messages
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["info"]["id"].as_str())
        .collect();
    ensure!(ids.len() == 8, "turn one's two and the six: {ids:?}");
    ensure!(ids.windows(2).all(|w| w[0] < w[1]), "ascending: {ids:?}");
    assert_eq!(app.file("a.txt").as_deref(), Some("one\n"));
    app.stop().await
}

/// A step that ends while another operation holds its worktree for a moment (here a live process's lease
/// on it, as another session's step takes it for its snapshot and commit) waits for it, within the 2 s
/// wait, and ends after it, instead of a 409 the agent must retry (review: a step's end now holds the
/// worktree from its snapshot to its commit, so two sessions' steps meet there more often).
#[tokio::test]
async fn a_step_that_ends_while_its_worktree_is_held_for_a_moment_waits_for_it() -> Result<()> {
    use rewind_core::MessageRepo;
    use rewind_core::model::{Holder, HolderKind, Lease, LeaseKey, LeaseToken, ProcessIdentity};
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    let (_, ending) = app.open_step(&session, "a step").await?;
    app.write("a.txt", "written by the step\n")?;
    let directory = app
        .repo
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("a UTF-8 worktree"))?
        .to_owned();
    let pid = std::process::id();
    let lease = Lease {
        key: LeaseKey::Worktree(directory),
        token: LeaseToken("tok_another_step".to_owned()),
        holder: Holder {
            kind: HolderKind::Process,
            process: ProcessIdentity {
                host: rewind_app::host::host_name(),
                pid,
                start_time: rewind_app::host::process_start_time(pid).unwrap_or_default(),
                boot: rewind_app::host::boot_id(),
                machine: rewind_app::host::machine(),
            },
        },
        expires_at: i64::MAX as u64,
    };
    app.db.take_lease(&lease, None).await?;
    let finish = tokio::spawn(
        app.http
            .post(app.url(&format!("/session/{session}/message/{ending}/step/finish")))
            .json(&json!({}))
            .send(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(!finish.is_finished(), "the step's end waits");
    app.db.release_lease(&lease.key, &lease.token).await?;
    let finished = finish.await??;
    ensure!(
        finished.status() == 200,
        "the step ended: {}",
        finished.status()
    );
    let parts: Value = finished.json().await?;
    let patched = parts
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| p["type"] == "patch");
    ensure!(patched, "with its patch: {parts}");
    app.stop().await
}

/// A message or part sent while a step ends (the session's lease held by the step's end, here paused at
/// its commit) waits for it and is recorded after it, as if sent a moment later, instead of a 409 the
/// client must retry (black-box: 15 of 15 user messages sent during a step's end were refused).
#[tokio::test]
async fn a_message_and_a_part_sent_while_a_step_ends_wait_and_are_recorded_after_it() -> Result<()>
{
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    let (_, assistant) = app.open_step(&session, "go").await?;
    app.write("a.txt", "written by the step\n")?;
    let mut pause = app.db.pause_next_commit();
    let finish = tokio::spawn(
        app.http
            .post(app.url(&format!(
                "/session/{session}/message/{assistant}/step/finish"
            )))
            .json(&json!({}))
            .send(),
    );
    ensure!(pause.reached().await, "the step's end reached its commit");
    let message = tokio::spawn(
        app.http
            .post(app.url(&format!("/session/{session}/message")))
            .json(&json!({"parts": [{"type": "text", "text": "sent as the step ended"}]}))
            .send(),
    );
    let part = tokio::spawn(
        app.http
            .post(app.url(&format!("/session/{session}/message/{assistant}/part")))
            .json(&json!({"type": "text", "text": "a tool's last words"}))
            .send(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(
        !message.is_finished() && !part.is_finished(),
        "both wait for the step's end"
    );
    pause.resume();
    ensure!(finish.await??.status() == 200, "the step ended");
    let message = message.await??;
    ensure!(message.status() == 200, "the message: {}", message.status());
    let message: Value = message.json().await?;
    let part = part.await??;
    ensure!(part.status() == 200, "the part: {}", part.status());
    let part: Value = part.json().await?;
    let parts = app
        .read(&format!("/session/{session}/message/{assistant}"))
        .await?["parts"]
        .clone();
    let kinds: Vec<&str> = parts
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["type"].as_str())
        .collect();
    assert_eq!(
        kinds,
        ["text", "step-start", "step-finish", "patch", "text"],
        "{parts}"
    );
    assert_eq!(parts[4]["id"], part["id"]);
    let messages = app.read(&format!("/session/{session}/message")).await?;
    let last = messages
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["info"]["id"].clone());
    assert_eq!(last, Some(message["info"]["id"].clone()));
    app.stop().await
}

/// A revert whose snapshot is missing from the server's store (collected, or recorded by a rewind with
/// another data directory) changes nothing: the 500 says so (or that the files were put back, when a
/// rollback ran), and what may have happened (black-box: it said only "snapshot object missing").
#[tokio::test]
async fn a_revert_whose_snapshot_is_missing_says_nothing_was_changed() -> Result<()> {
    let (app, session, user) = app_with_a_turn(Duration::from_secs(3600)).await?;
    // Every snapshot store of the server's data directory loses its objects.
    for store in std::fs::read_dir(app.data_dir.join("snapshot"))? {
        let objects = store?.path().join("objects");
        for entry in std::fs::read_dir(&objects)? {
            let path = entry?.path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path)?;
            }
        }
    }
    let refused = app
        .post(
            &format!("/session/{session}/revert"),
            json!({"messageID": user}),
        )
        .await?;
    assert_eq!(refused.status, 500, "{}", refused.body);
    let message = refused.body["data"]["message"].as_str().unwrap_or_default();
    // Refused before any file was touched: it says so once, and never that files were put back (review:
    // after a rollback it said both; then, after a rollback that had found no file written, that the
    // files it had changed were put back).
    let unchanged = message.matches("nothing was changed").count() == 1;
    let put_back = message.contains("put back to their state before the revert");
    assert!(
        message.contains("missing") && unchanged && !put_back,
        "{message}"
    );
    assert_eq!(app.file("a.txt").as_deref(), Some("a1\n"));
    let current = app.read(&format!("/session/{session}")).await?;
    assert!(current.get("revert").is_none(), "{current}");
    app.stop().await
}

/// A revert to the second step of a turn, committed, makes the turn's user message's `summary.diffs` that
/// of the first step alone; when that diff cannot be made (the worktree moved away meanwhile), the commit
/// still succeeds and leaves the summary as it was, since a cleanup touches no file (review: the commit,
/// and every new message, then failed with 400).
#[tokio::test]
async fn a_commit_that_cuts_a_step_makes_the_summary_again_and_never_fails_for_it() -> Result<()> {
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    let summary_files = |user: &Value| -> Vec<String> {
        user["info"]["summary"]["diffs"]
            .as_array()
            .map(|diffs| {
                diffs
                    .iter()
                    .filter_map(|d| d["file"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut summaries = Vec::new();
    for moved in [false, true] {
        let (user, assistant) = app
            .turn(&session, "two steps", |repo| {
                std::fs::write(repo.join(format!("first-{moved}.txt")), "1\n")?;
                Ok(())
            })
            .await?;
        app.ok(
            &format!("/session/{session}/message/{assistant}/step"),
            json!({}),
        )
        .await?;
        std::fs::write(app.repo.join(format!("second-{moved}.txt")), "2\n")?;
        app.ok(
            &format!("/session/{session}/message/{assistant}/step/finish"),
            json!({"reason": "stop"}),
        )
        .await?;
        let message = app
            .read(&format!("/session/{session}/message/{assistant}"))
            .await?;
        let second_start = message["parts"]
            .as_array()
            .context("parts")?
            .iter()
            .filter(|p| p["type"] == "step-start")
            .nth(1)
            .and_then(|p| p["id"].as_str())
            .context("the second step's start")?
            .to_owned();
        app.ok(
            &format!("/session/{session}/revert"),
            json!({"messageID": assistant, "partID": second_start}),
        )
        .await?;
        let away = app.repo.with_extension("moved");
        if moved {
            std::fs::rename(&app.repo, &away)?;
        }
        let committed = app
            .post(&format!("/session/{session}/revert/commit"), json!({}))
            .await?;
        if moved {
            std::fs::rename(&away, &app.repo)?;
        }
        ensure!(
            committed.status == 200,
            "commit: {} {}",
            committed.status,
            committed.body
        );
        let user = app
            .read(&format!("/session/{session}/message/{user}"))
            .await?;
        summaries.push(summary_files(&user));
    }
    assert_eq!(
        summaries,
        [
            vec!["first-false.txt".to_owned()],
            vec!["first-true.txt".to_owned(), "second-true.txt".to_owned()]
        ],
        "the first step's alone; left as it was when the worktree was away"
    );
    app.stop().await
}

/// Deleting a session keeps the snapshots its warnings name (here, the user's edit a revert overwrote) as
/// captures of the worktree, which gc keeps as long as any capture and `rewind snapshot restore` brings
/// back: deleting a session loses no file. Before, they went with the session, and the next gc past the
/// grace period collected the user's edit.
#[tokio::test]
async fn deleting_a_session_keeps_what_its_warnings_hold_as_captures() -> Result<()> {
    use rewind_core::ports::MessageRepo;
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    let (user, _) = app
        .turn(&session, "one", |repo| {
            Ok(std::fs::write(repo.join("a.txt"), "a1\n")?)
        })
        .await?;
    app.write("a.txt", "the user's own edit\n")?;
    app.revert_to(&session, &user).await?;
    let warnings = app.read(&format!("/session/{session}/warnings")).await?;
    let snapshot = warnings[0]["snapshot"]
        .as_str()
        .with_context(|| format!("a warning names the user's edit: {warnings}"))?
        .to_owned();
    let directory = app.repo.to_str().context("UTF-8")?.to_owned();
    let before = app.db.captures(Some(directory.clone())).await?;
    ensure!(
        before.iter().all(|c| c.snapshot.as_str() != snapshot),
        "no capture yet: {before:?}"
    );

    let deleted = app.delete(&format!("/session/{session}")).await?;
    ensure!(deleted.status == 200, "delete: {}", deleted.status);
    let captures = app.db.captures(Some(directory)).await?;
    let kept = captures
        .iter()
        .find(|c| c.snapshot.as_str() == snapshot)
        .with_context(|| format!("the warning's snapshot is a capture: {captures:?}"))?;
    assert!(
        kept.message.contains("kept from deleted session"),
        "{}",
        kept.message
    );
    assert_eq!(kept.paths, ["a.txt"]);
    app.stop().await
}

/// OpenCode's item 63 (#26574): a stored diff row without `patch` (as an older OpenCode wrote them) is read
/// as an empty patch, and `GET /session/:id/diff` answers 200; a binary file's row has `patch: ""` and no
/// counts, as git's `--numstat` gives none. A row without `status` (OpenCode's `FileDiff.status` is
/// optional) is served as `modified`, `FileStatus`'s default: the row names a file that changed, and
/// without the two snapshots nothing says it was added or deleted.
#[tokio::test]
async fn a_diff_row_without_a_patch_or_of_a_binary_file_is_served() -> Result<()> {
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    let (user, _) = app
        .turn(&session, "one", |repo| {
            std::fs::write(repo.join("x.bin"), b"\0\x01binary\0")?;
            Ok(std::fs::write(repo.join("a.txt"), "a1\n")?)
        })
        .await?;
    app.revert_to(&session, &user).await?;
    let diff = app.read(&format!("/session/{session}/diff")).await?;
    let binary = diff
        .as_array()
        .and_then(|rows| rows.iter().find(|row| row["file"] == "x.bin"))
        .with_context(|| format!("a row for x.bin: {diff}"))?;
    assert_eq!(binary["patch"], "", "{diff}");
    assert_eq!(
        (&binary["additions"], &binary["deletions"]),
        (&json!(0), &json!(0))
    );

    let db = app.data_dir.join("rewind.db");
    let status = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import sqlite3, sys\n\
             c = sqlite3.connect(sys.argv[1])\n\
             c.execute(\"UPDATE session_diff SET body = ?, body_ref = NULL\", \
             ('[{\"file\": \"x.bin\", \"additions\": 0, \"deletions\": 0}]',))\n\
             c.commit()\n",
        )
        .arg(&db)
        .status()?;
    ensure!(status.success(), "python3 rewrote the row");
    let reply = app
        .send(app.http.get(app.url(&format!("/session/{session}/diff"))))
        .await?;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.body,
        json!([{"file": "x.bin", "patch": "", "additions": 0, "deletions": 0, "status": "modified"}])
    );
    app.stop().await
}

/// The checklist review's repro of OpenCode's `snapshot-tool-race` (test 61): a client records a tool's
/// part, whose command wrote a file, before it begins the step. rewind cannot undo that file (the step's
/// start snapshot holds it), so it says why: a warning naming the tool part, once for the message, kept and
/// published; the revert leaves the file, and the step's own file goes.
#[tokio::test]
async fn a_tool_part_recorded_before_its_step_is_warned_of() -> Result<()> {
    let app = spawn_app().await?;
    let session = app.new_session().await?;
    let user = app
        .ok(
            &format!("/session/{session}/message"),
            json!({"parts": [{"type": "text", "text": "make two files"}]}),
        )
        .await?;
    let assistant = app
        .ok(
            &format!("/session/{session}/message"),
            json!({"role": "assistant"}),
        )
        .await?;
    let assistant_id = id_of(&assistant["info"])?;
    let tool = |call: &str| json!({"type": "tool", "callID": call, "tool": "bash", "state": {"status": "completed"}});
    app.write("early.txt", "written by a tool before the step\n")?;
    let part = app
        .ok(
            &format!("/session/{session}/message/{assistant_id}/part"),
            tool("c1"),
        )
        .await?;
    let part_id = id_of(&part)?;
    app.ok(
        &format!("/session/{session}/message/{assistant_id}/step"),
        json!({}),
    )
    .await?;
    app.write("late.txt", "written inside the step\n")?;
    app.ok(
        &format!("/session/{session}/message/{assistant_id}/part"),
        tool("c2"),
    )
    .await?;
    app.ok(
        &format!("/session/{session}/message/{assistant_id}/step/finish"),
        json!({"reason": "stop"}),
    )
    .await?;

    let warnings = app.read(&format!("/session/{session}/warnings")).await?;
    let said: Vec<&str> = warnings
        .as_array()
        .context("a list")?
        .iter()
        .filter_map(|w| w["message"].as_str())
        .filter(|m| m.contains("while no step of that message was open"))
        .collect();
    assert_eq!(said.len(), 1, "{warnings:#}");
    assert!(
        said[0].contains(&part_id) && said[0].contains(&assistant_id),
        "{said:?}"
    );
    app.revert_to(&session, &id_of(&user["info"])?).await?;
    assert_eq!(app.file("late.txt"), None, "the step's file is undone");
    assert_eq!(
        app.file("early.txt").as_deref(),
        Some("written by a tool before the step\n"),
        "the tool's file before the step is not the step's"
    );
    app.stop().await
}

/// Fails unless the assistant message holds a `step-finish` with reason `aborted`.
async fn ensure_aborted(
    app: &crate::support::TestApp,
    session: &str,
    assistant: &str,
) -> Result<()> {
    let parts = app
        .read(&format!("/session/{session}/message/{assistant}"))
        .await?["parts"]
        .clone();
    ensure!(
        parts.as_array().is_some_and(|p| p
            .iter()
            .any(|p| p["type"] == "step-finish" && p["reason"] == "aborted")),
        "no aborted step-finish: {parts}"
    );
    Ok(())
}

/// OpenCode's paging of `GET /session/:id/message`: `limit` gives the newest messages and, while older ones
/// are left, their cursor in `X-Next-Cursor` (and `Link`); `before` set to it gives the page before, in
/// ascending order, until the oldest, whose page names no cursor. `limit=0` is every message; `before`
/// without `limit`, or one that is no cursor, is 400. `all` is every message id, ascending.
async fn pages_of_messages(
    app: &crate::support::TestApp,
    session: &str,
    all: &[String],
) -> Result<()> {
    let base = format!("/session/{session}/message");
    let directory = app.repo.to_str().unwrap_or_default().to_owned();
    let mut pages = Vec::new();
    let mut path = format!("{base}?directory={directory}&limit=4");
    loop {
        let reply = app.get(&path).await?;
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        let ids = message_ids(&reply.body);
        let header = |name: &str| {
            reply
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        pages.push(ids.clone());
        let Some(cursor) = header("x-next-cursor") else {
            assert_eq!(header("link"), None);
            break;
        };
        // The cursor is the page's oldest message; the link is the next page's request, the worktree kept.
        assert_eq!(Some(&cursor), ids.first());
        let link = header("link").unwrap_or_default();
        let next = format!("{base}?directory={directory}&limit=4&before={cursor}");
        assert_eq!(link, format!("<{next}>; rel=\"next\""));
        assert_eq!(
            header("access-control-expose-headers").as_deref(),
            Some("Link, X-Next-Cursor")
        );
        path = next;
        assert!(pages.len() < 10, "the pages never end: {pages:?}");
    }
    // Newest page first, each ascending: 6 messages in pages of 4 and 2.
    assert_eq!(pages, [all[2..].to_vec(), all[..2].to_vec()]);
    // A page that ends exactly at the oldest message names no cursor.
    let exact = app
        .get(&format!("{base}?limit=2&before={}", all[2]))
        .await?;
    assert_eq!(message_ids(&exact.body), all[..2]);
    assert!(exact.headers.get("x-next-cursor").is_none());
    let everything = app.read(&format!("{base}?limit=0")).await?;
    assert_eq!(message_ids(&everything), all);
    for (query, said) in [
        (format!("before={}", all[3]), "requires `limit`"),
        ("limit=2&before=abc".to_owned(), "invalid cursor"),
        ("limit=-1".to_owned(), ""),
    ] {
        let reply = app.get(&format!("{base}?{query}")).await?;
        assert_eq!(reply.status, 400, "{query}: {}", reply.body);
        assert_eq!(reply.body["name"], "BadRequest", "{query}");
        let message = reply.body["data"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(said), "{query}: {message}");
    }
    Ok(())
}
