//! The event stream of SPEC section 10 read over SSE: its first event, the order of a revert's,
//! unrevert's and cleanup's events, heartbeats, events of another process (the outbox relay), and the
//! end of open streams when the server stops.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use serde_json::json;

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
    let kinds = types(&recorded);
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
