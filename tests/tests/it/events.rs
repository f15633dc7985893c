//! The event stream of SPEC section 10 read over SSE: its first event, the order of a revert's,
//! unrevert's and cleanup's events, heartbeats, events of another process (the outbox relay), and the
//! end of open streams when the server stops.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};

use crate::support::{AppConfig, id_of, spawn_app, spawn_app_with, types};

#[tokio::test]
async fn revert_unrevert_and_cleanup_publish_their_events_in_order() -> Result<()> {
    let app = spawn_app().await?;
    let mut stream = app.events().await?;
    let first = stream
        .next(Duration::from_secs(5))
        .await?
        .context("no first event")?;
    assert_eq!(first["type"], "server.connected");
    assert!(
        first["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("evt_")),
        "{first}"
    );

    let session = app.new_session().await?;
    let created = stream.until("session.created").await?;
    assert_eq!(
        created.last().map(|e| e["properties"]["sessionID"].clone()),
        Some(json!(session))
    );

    let (user1, _) = app
        .turn(&session, "one", |repo| {
            std::fs::write(repo.join("a.txt"), "a1\n")?;
            Ok(())
        })
        .await?;
    let (user2, assistant2) = app
        .turn(&session, "two", |repo| {
            std::fs::write(repo.join("b.txt"), "b2\n")?;
            Ok(())
        })
        .await?;
    // Recording: each step makes the session busy, then idle again, with its parts in between.
    // Two steps: busy, idle, busy, idle; closing a step ends with its session.updated.
    let mut recorded = Vec::new();
    for _ in 0..4 {
        recorded.extend(stream.until("session.status").await?);
    }
    recorded.extend(stream.until("session.updated").await?);
    let statuses: Vec<_> = recorded
        .iter()
        .filter(|e| e["type"] == "session.status")
        .map(|e| e["properties"]["status"]["type"].clone())
        .collect();
    assert_eq!(
        statuses,
        [json!("busy"), json!("idle"), json!("busy"), json!("idle")]
    );
    // Busy comes before the step's parts, as OpenCode marks a session busy before its step begins.
    let status_or_start: Vec<String> = recorded
        .iter()
        .filter_map(|e| match (&e["type"], &e["properties"]["part"]["type"]) {
            (kind, _) if kind == "session.status" => e["properties"]["status"]["type"]
                .as_str()
                .map(str::to_owned),
            (kind, part) if kind == "message.part.updated" && part == "step-start" => {
                Some("step-start".to_owned())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        status_or_start,
        ["busy", "step-start", "idle", "busy", "step-start", "idle"]
    );
    // OpenCode's `session.idle` follows each idle status.
    let kinds = types(&recorded);
    let idle_at: Vec<usize> = recorded
        .iter()
        .enumerate()
        .filter(|(_, e)| e["properties"]["status"]["type"] == "idle")
        .map(|(at, _)| at)
        .collect();
    assert_eq!(idle_at.len(), 2, "{kinds:?}");
    for at in idle_at {
        assert_eq!(
            kinds.get(at + 1).map(String::as_str),
            Some("session.idle"),
            "{kinds:?}"
        );
        assert_eq!(recorded[at + 1]["properties"]["sessionID"], json!(session));
    }
    for kind in ["message.updated", "message.part.updated", "session.updated"] {
        assert!(
            kinds.iter().any(|k| k == kind),
            "{kind} missing from {kinds:?}"
        );
    }

    app.revert_to(&session, &user2).await?;
    let revert_events = stream.until("session.updated").await?;
    assert_eq!(types(&revert_events), ["session.diff", "session.updated"]);
    let diff = &revert_events[0]["properties"];
    assert_eq!(diff["sessionID"], json!(session));
    assert_eq!(diff["diff"][0]["file"], "b.txt");
    assert_eq!(
        revert_events[1]["properties"]["info"]["revert"]["messageID"],
        json!(user2)
    );

    // A revert that overwrites a file the user edited since the last step warns first.
    app.write("a.txt", "user edit\n")?;
    app.revert_to(&session, &user1).await?;
    let rerevert = stream.until("session.updated").await?;
    let kinds = types(&rerevert);
    assert_eq!(kinds.last().map(String::as_str), Some("session.updated"));
    assert_eq!(kinds[kinds.len() - 2], "session.diff");
    assert!(
        kinds[..kinds.len() - 2]
            .iter()
            .all(|k| k == "session.warning")
            && kinds.len() > 2,
        "warnings come first: {kinds:?}"
    );

    // The warning is kept with the session, naming the file and the snapshot that holds the user's edit.
    let warnings = app.read(&format!("/session/{session}/warnings")).await?;
    let repo = app.repo.to_str().unwrap_or_default();
    let edited = warnings
        .as_array()
        .and_then(|list| {
            list.iter()
                .find(|w| w["files"] == json!([format!("{repo}/a.txt")]))
        })
        .with_context(|| format!("no warning names a.txt: {warnings}"))?;
    assert!(edited["snapshot"].is_string(), "{edited}");
    assert!(edited["time"].is_u64(), "{edited}");

    app.ok(&format!("/session/{session}/unrevert"), json!({}))
        .await?;
    let unrevert = stream.until("session.updated").await?;
    let kinds = types(&unrevert);
    assert!(
        kinds[..kinds.len() - 1]
            .iter()
            .all(|k| k == "session.warning"),
        "{kinds:?}"
    );
    assert!(
        unrevert
            .last()
            .is_some_and(|e| e["properties"]["info"].get("revert").is_none())
    );

    app.revert_to(&session, &user2).await?;
    stream.until("session.updated").await?;
    app.ok(&format!("/session/{session}/revert/commit"), json!({}))
        .await?;
    let cleanup = stream.until("session.updated").await?;
    assert_eq!(
        types(&cleanup),
        ["message.removed", "message.removed", "session.updated"]
    );
    let removed: Vec<_> = cleanup[..2]
        .iter()
        .map(|e| e["properties"]["messageID"].clone())
        .collect();
    assert_eq!(removed, [json!(user2), json!(assistant2)], "ascending");
    app.stop().await
}

#[tokio::test]
async fn a_second_process_writing_the_database_reaches_the_stream() -> Result<()> {
    let app = spawn_app().await?;
    let mut stream = app.connected_events().await?;
    let written = app.create_session_elsewhere("from another process").await?;
    let events = stream.until("session.created").await?;
    let created = events.last().context("no event")?;
    assert_eq!(created["properties"]["sessionID"], json!(written));
    assert_eq!(
        created["properties"]["info"]["title"],
        "from another process"
    );
    // And the server reads it like its own.
    let session = app.read(&format!("/session/{written}")).await?;
    assert_eq!(id_of(&session)?, written);
    app.stop().await
}

/// A stream opened for one worktree (`?directory=`, as OpenCode's client opens its instance's) gets the
/// server's events and those of that worktree's sessions only: those that carry the session, those that
/// name it only by id, and those another process writes. A stream that names no worktree gets them all
/// (black-box: a client of one project saw every project's sessions).
#[tokio::test]
async fn a_stream_opened_for_a_worktree_gets_only_its_sessions_events() -> Result<()> {
    let app = spawn_app().await?;
    let sub = app.repo.join("sub");
    std::fs::create_dir(&sub)?;
    let mut all = app.connected_events().await?;
    let mut mine = app.connected_events_for(&sub).await?;
    // Sessions of the repository and of `sub` (a worktree of its own), each with a message.
    let here = app.new_session().await?;
    app.turn(&here, "in the repository", |repo| {
        Ok(std::fs::write(repo.join("a.txt"), "a1\n")?)
    })
    .await?;
    let there = id_of(
        &app.ok(
            "/session",
            json!({"title": "in sub", "directory": sub.display().to_string()}),
        )
        .await?,
    )?;
    app.ok(
        &format!("/session/{there}/message"),
        json!({"parts": [{"type": "text", "text": "hello from sub"}]}),
    )
    .await?;
    let other = app.create_session_in(&sub, "last").await?;
    let is_last = |event: &Value| {
        event["type"] == "session.created" && event["properties"]["info"]["title"] == "last"
    };
    let mut seen = Vec::new();
    for stream in [&mut mine, &mut all] {
        let mut events = Vec::new();
        loop {
            let event = stream
                .next(Duration::from_secs(5))
                .await?
                .context("the stream ended before the last session")?;
            let last = is_last(&event);
            events.push(event);
            if last {
                break;
            }
        }
        seen.push(events);
    }
    let sessions_of = |events: &[Value]| -> Vec<String> {
        events
            .iter()
            .filter_map(|e| e["properties"]["sessionID"].as_str().map(str::to_owned))
            .collect()
    };
    let mine_sessions = sessions_of(&seen[0]);
    assert!(
        mine_sessions.iter().all(|id| *id == there || *id == other),
        "{:?}",
        types(&seen[0])
    );
    // `there`'s user message names the session by id only.
    assert!(
        seen[0].iter().any(|e| e["type"] == "message.updated"
            && e["properties"]["sessionID"] == json!(there)),
        "{:?}",
        types(&seen[0])
    );
    let all_sessions = sessions_of(&seen[1]);
    for id in [&here, &there, &other] {
        assert!(all_sessions.contains(id), "{id}: {:?}", types(&seen[1]));
    }
    app.stop().await
}

#[tokio::test]
async fn heartbeats_arrive_and_stopping_the_server_ends_open_streams() -> Result<()> {
    let app = spawn_app_with(AppConfig {
        heartbeat: Some(Duration::from_millis(200)),
        ..AppConfig::default()
    })
    .await?;
    let mut stream = app.events().await?;
    let mut other = app.events().await?;
    let events = stream.until("server.heartbeat").await?;
    assert_eq!(types(&events), ["server.connected", "server.heartbeat"]);
    app.stop().await?;
    // Both streams end (after any heartbeat already sent) rather than holding the shutdown.
    for open in [&mut stream, &mut other] {
        loop {
            match open.next(Duration::from_secs(5)).await? {
                None => break,
                Some(event) => ensure!(
                    event["type"] == "server.heartbeat" || event["type"] == "server.connected",
                    "unexpected {event}"
                ),
            }
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_stream_that_falls_behind_is_told_how_many_events_it_missed() -> Result<()> {
    // Two events of room: the relay publishes a transaction's events without yielding, and the test
    // runtime has one thread, so a message with ten parts (eleven events) overflows the stream.
    let app = spawn_app_with(AppConfig {
        bus_capacity: Some(2),
        ..AppConfig::default()
    })
    .await?;
    let mut stream = app.events().await?;
    stream.until("server.connected").await?;
    let session = app.new_session().await?;
    stream.until("session.created").await?;
    let parts: Vec<_> = (0..10)
        .map(|i| json!({"type": "text", "text": format!("part {i}")}))
        .collect();
    let message = app
        .ok(
            &format!("/session/{session}/message"),
            json!({"parts": parts}),
        )
        .await?;
    let last_part = message["parts"][9]["id"].clone();
    let mut events = Vec::new();
    loop {
        let event = stream
            .next(Duration::from_secs(10))
            .await?
            .context("the stream ended")?;
        let done = event["type"] == "message.part.updated"
            && event["properties"]["part"]["id"] == last_part;
        events.push(event);
        if done {
            break;
        }
    }
    let kinds = types(&events);
    let lagged = events
        .iter()
        .find(|e| e["type"] == "server.lagged")
        .with_context(|| format!("no server.lagged in {kinds:?}"))?;
    let missed = lagged["properties"]["missed"].as_u64().context("missed")?;
    let delivered = events
        .iter()
        .filter(|e| e["type"] != "server.lagged")
        .count() as u64;
    assert_eq!(missed + delivered, 11, "{kinds:?}");
    // The newest events still arrive after the notice: the last part of the message.
    let last = events.last().context("no event")?;
    assert_eq!(last["type"], "message.part.updated");
    assert_eq!(last["properties"]["part"]["id"], last_part);
    app.stop().await
}
