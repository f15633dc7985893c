//! The server on PostgreSQL (SPEC's shared deployments): a fresh database per test on the server that
//! `REWIND_TEST_POSTGRES_URL` names (`.ci/run` starts one; without it the test is skipped, and under CI it
//! fails). An event written by another process reaches the stream through the outbox relay, and a
//! recorded turn reverts and unreverts with the files on disk checked.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use serde_json::json;

use crate::support::{AppConfig, id_of, spawn_app_with};

const POSTGRES_ENV: &str = "REWIND_TEST_POSTGRES_URL";

/// A database created for one test (with `psql`, as the role of the URL) and dropped at its end.
struct PgDatabase {
    admin_url: String,
    name: String,
    url: String,
}

impl PgDatabase {
    /// None when no PostgreSQL server is configured outside CI.
    fn create() -> Result<Option<PgDatabase>> {
        let Some(admin_url) = std::env::var(POSTGRES_ENV).ok().filter(|u| !u.is_empty()) else {
            if std::env::var_os("CI").is_some() {
                bail!("{POSTGRES_ENV} is not set under CI: .ci/run must start PostgreSQL");
            }
            eprintln!("{POSTGRES_ENV} is not set: the PostgreSQL run of this test is skipped");
            return Ok(None);
        };
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH)?.subsec_nanos();
        let name = format!("rewind_e2e_{}_{nanos}", std::process::id());
        let (server, _) = admin_url
            .rsplit_once('/')
            .context("a PostgreSQL URL ends with /DATABASE")?;
        let url = format!("{server}/{name}");
        psql(&admin_url, &format!("CREATE DATABASE {name}"))?;
        Ok(Some(PgDatabase {
            admin_url,
            name,
            url,
        }))
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(error) = psql(&self.admin_url, &drop) {
            eprintln!("cannot drop the test database {}: {error:#}", self.name);
        }
    }
}

fn psql(url: &str, sql: &str) -> Result<()> {
    let output = Command::new("psql")
        .args([url, "-q", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .context("cannot run psql")?;
    ensure!(
        output.status.success(),
        "psql {sql:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

#[tokio::test]
async fn on_postgres_the_relay_carries_another_process_events_and_a_turn_reverts() -> Result<()> {
    let Some(database) = PgDatabase::create()? else {
        return Ok(());
    };
    let app = spawn_app_with(AppConfig {
        database_url: Some(database.url.clone()),
        ..AppConfig::default()
    })
    .await?;
    let mut stream = app.connected_events().await?;

    // Another process writes the same database: its event reaches this server's stream.
    let written = app.create_session_elsewhere("written on postgres").await?;
    let events = stream.until("session.created").await?;
    let created = events.last().context("no event")?;
    assert_eq!(created["properties"]["sessionID"], json!(written));

    // A turn recorded through the API, reverted and put forward again.
    let session = app.new_session().await?;
    let (user, _) = app
        .turn(&session, "edit and create", |repo| {
            std::fs::write(repo.join("a.txt"), "a1\n")?;
            std::fs::write(repo.join("c.txt"), "c1\n")?;
            Ok(())
        })
        .await?;
    let reverted = app.revert_to(&session, &user).await?;
    assert_eq!(reverted["revert"]["messageID"], json!(user));
    assert_eq!(app.file("a.txt").as_deref(), Some("a0\n"));
    assert_eq!(app.file("c.txt"), None);
    // The turn's events, then the revert's session.diff (from the outbox, like every event).
    let relayed = stream.until("session.diff").await?;
    let diff = relayed.last().context("no event")?;
    assert_eq!(diff["properties"]["sessionID"], json!(session));
    let files: Vec<&str> = diff["properties"]["diff"]
        .as_array()
        .context("a diff")?
        .iter()
        .filter_map(|d| d["file"].as_str())
        .collect();
    assert_eq!(files, ["a.txt", "c.txt"]);
    let unreverted = app
        .ok(&format!("/session/{session}/unrevert"), json!({}))
        .await?;
    assert!(unreverted.get("revert").is_none(), "{unreverted}");
    assert_eq!(app.file("a.txt").as_deref(), Some("a1\n"));
    assert_eq!(app.file("c.txt").as_deref(), Some("c1\n"));
    assert_eq!(
        id_of(&app.read(&format!("/session/{written}")).await?)?,
        written
    );
    app.stop().await?;
    drop(database);
    Ok(())
}

/// The URL of `url`'s database spelled otherwise: the other scheme name, the other name of the loopback
/// host, and a query parameter.
fn respelled(url: &str) -> String {
    let url = match url.strip_prefix("postgres://") {
        Some(rest) => format!("postgresql://{rest}"),
        None => url.replacen("postgresql://", "postgres://", 1),
    };
    let url = if url.contains("@127.0.0.1") {
        url.replacen("@127.0.0.1", "@localhost", 1)
    } else {
        url.replacen("@localhost", "@127.0.0.1", 1)
    };
    format!("{url}?application_name=respelled")
}

/// A PostgreSQL database's snapshot stores are keyed on the identity it drew when it was first migrated,
/// so every spelling of its URL finds the same stores and snapshots (black-box: an `undo` through
/// `localhost` found none of the snapshots an `exec` through `127.0.0.1` had taken, and said they may
/// have been collected).
#[tokio::test]
async fn every_spelling_of_a_postgres_url_finds_the_same_snapshots() -> Result<()> {
    use rewind_app::{Services, Settings};
    use rewind_core::SnapshotPort;
    use rewind_core::model::HolderKind;
    let Some(database) = PgDatabase::create()? else {
        return Ok(());
    };
    let work = tempfile::tempdir()?;
    let repo = work.path().join("repo");
    std::fs::create_dir_all(&repo)?;
    std::fs::write(repo.join("a.txt"), "a0\n")?;
    let mut settings = Settings::new(work.path().join("data"), &repo);
    settings.database_url = database.url.clone();
    let first = Services::open(&settings, HolderKind::Process).await?;
    let tracked = first.snapshots.track(&repo).await?.id;
    let location = first.snapshots.store_location(&repo).await?;
    std::fs::write(repo.join("a.txt"), "a1\n")?;

    let other = respelled(&database.url);
    assert_ne!(other, database.url);
    settings.database_url = other.clone();
    let second = Services::open(&settings, HolderKind::Process).await?;
    assert_eq!(
        second.snapshots.store_location(&repo).await?,
        location,
        "{other} finds the store of {}",
        database.url
    );
    let changed = second.snapshots.changed_files(&repo, &tracked).await?;
    assert_eq!(
        changed.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        ["a.txt"]
    );
    second.snapshots.restore(&repo, &tracked, None).await?;
    assert_eq!(std::fs::read_to_string(repo.join("a.txt"))?, "a0\n");
    drop((first, second));
    drop(database);
    Ok(())
}
