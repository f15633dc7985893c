//! Opening stores: a SQLite file keeps everything across handles being dropped and reopened, migrations
//! run once, and a database that is locked, read-only, corrupt or at a newer schema version is refused with
//! an error that names the file or URL (never the password), with nothing written.

use std::time::Duration;

use rewind_core::Error;
use rewind_core::error::StorageFault;
use rewind_core::model::{
    FileDiff, FileStatus, LeaseKey, LeaseTake, PartBody, RevertDescriptor, RevertHistoryEntry,
    Role, Session,
};
use rewind_core::ports::{Change, MessageRepo};
use rewind_sql::{SqlConfig, SqlRepo};
use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
use serde_json::json;

use crate::support::{
    Ids, PgDatabase, PgSchema, SqliteFile, admin, dump, heartbeat, intent, lease, message, part,
    put_session, run, run_pg, session, snapshot, transaction, updated, warning,
};

/// The message of a failed open or read, with its sources.
fn described<T: std::fmt::Debug>(result: Result<T, Error>) -> String {
    let error = result.expect_err("the call must fail");
    assert!(
        matches!(error, Error::Backend(_) | Error::Storage { .. }),
        "{error:?}"
    );
    let mut text = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Writes one of every kind of row.
async fn fill(
    repo: &dyn MessageRepo,
    ids: &Ids,
) -> (Vec<rewind_core::model::SessionId>, Vec<LeaseKey>) {
    let mut s = session(ids, "/work/reopen");
    let other = session(ids, "/work/reopen-other");
    let user = message(ids, &s, Role::User);
    let assistant = message(ids, &s, Role::Assistant);
    let unknown = part(
        ids,
        &assistant,
        PartBody::Other {
            kind: "x-future".to_owned(),
            fields: match json!({"zeta": 1, "alpha": [1, 2.5, null], "mid": "ü"}) {
                serde_json::Value::Object(fields) => fields,
                _ => serde_json::Map::new(),
            },
        },
    );
    let text = part(ids, &user, PartBody::text("hello"));
    s.revert = Some(RevertDescriptor {
        message_id: assistant.id.clone(),
        part_id: None,
        snapshot: Some(snapshot(1)),
        diff: None,
    });
    s.cost = 0.1 + 0.2;
    let key = LeaseKey::Session(s.id.clone());
    let worktree = LeaseKey::Worktree("/work/reopen".to_owned());
    repo.commit(transaction(
        vec![
            Change::PutSession(Box::new(s.clone())),
            Change::PutSession(Box::new(other.clone())),
            Change::PutMessage(Box::new(user.clone())),
            Change::PutMessage(Box::new(assistant.clone())),
            Change::PutPart(Box::new(text)),
            Change::PutPart(Box::new(unknown)),
            Change::SetSessionDiff {
                session: s.id.clone(),
                diff: vec![FileDiff {
                    file: "a.txt".to_owned(),
                    patch: "@@ -1 +1 @@\n-a\n+b\n".to_owned(),
                    additions: 1,
                    deletions: 1,
                    status: FileStatus::Modified,
                }],
            },
            Change::AddWarning {
                session: s.id.clone(),
                warning: warning(ids, Some(snapshot(2)), "/work/reopen/a.txt"),
            },
            Change::AddRevertHistory {
                session: s.id.clone(),
                entry: Box::new(RevertHistoryEntry {
                    time: ids.tick(),
                    descriptor: RevertDescriptor {
                        message_id: user.id.clone(),
                        part_id: None,
                        snapshot: Some(snapshot(3)),
                        diff: None,
                    },
                    applied: Some(snapshot(4)),
                    summary: None,
                    warnings: Vec::new(),
                }),
            },
            Change::PutIntent(Box::new(intent(ids, &s, "intent-1", snapshot(5)))),
        ],
        vec![updated(ids, &s), heartbeat(ids)],
    ))
    .await
    .expect("commits");
    for (k, token) in [(&key, "token-a"), (&worktree, "token-b")] {
        let taken = repo
            .take_lease(&lease(k, token, 1, 1_700_000_100_000), None)
            .await
            .expect("takes");
        assert_eq!(taken, LeaseTake::Taken);
    }
    (vec![s.id, other.id], vec![key, worktree])
}

#[test]
fn sqlite_file_keeps_everything_after_every_handle_is_dropped() {
    run(async {
        let file = SqliteFile::new();
        let ids = Ids::default();
        let first = file.open().await;
        let second = file.open().await;
        let (sessions, keys) = fill(&first, &ids).await;
        let before = dump(&first, &sessions, &keys).await;
        assert_eq!(before.events.len(), 2);
        assert_eq!(
            dump(&second, &sessions, &keys).await,
            before,
            "a second handle sees it all"
        );
        first.close().await.expect("closes");
        drop(second);

        let reopened = file.open().await;
        assert_eq!(
            dump(&reopened, &sessions, &keys).await,
            before,
            "nothing is lost when every handle is dropped and the file is opened again"
        );
        // Positions go on after the stored ones.
        reopened
            .commit(transaction(Vec::new(), vec![heartbeat(&ids)]))
            .await
            .expect("commits");
        let events = reopened.events_after(0, 10).await.expect("reads");
        assert_eq!(
            events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
    });
}

#[test]
fn sqlite_migrations_run_once_and_reopening_applies_none() {
    run(async {
        let file = SqliteFile::new();
        for _ in 0..3 {
            file.open().await.close().await.expect("closes");
        }
        let raw = Database::connect(file.config().url.as_str())
            .await
            .expect("connects");
        let row = raw
            .query_one_raw(Statement::from_string(
                DbBackend::Sqlite,
                "SELECT count(*) AS applied FROM seaql_migrations",
            ))
            .await
            .expect("reads")
            .expect("a row");
        // One row per migration (the initial schema, the captures, the shared texts, the identity), each
        // applied once.
        assert_eq!(row.try_get::<i64>("", "applied").expect("a count"), 4);
        let mode = raw
            .query_one_raw(Statement::from_string(
                DbBackend::Sqlite,
                "PRAGMA journal_mode",
            ))
            .await
            .expect("reads")
            .expect("a row");
        assert_eq!(
            mode.try_get::<String>("", "journal_mode").expect("a mode"),
            "wal"
        );
    });
}

/// A database made before the captures migration (its table and its migration row removed, as an older
/// rewind left it) is upgraded when opened: the table comes back, every existing row is kept, and
/// captures then work.
#[test]
fn sqlite_database_from_before_the_captures_migration_is_upgraded_and_keeps_its_rows() {
    run(async {
        let file = SqliteFile::new();
        let ids = Ids::default();
        let first = file.open().await;
        let (sessions, keys) = fill(&first, &ids).await;
        let before = dump(&first, &sessions, &keys).await;
        first.close().await.expect("closes");

        let raw = Database::connect(file.config().url.as_str())
            .await
            .expect("connects");
        for sql in [
            "DROP TABLE capture",
            "DELETE FROM seaql_migrations WHERE version = 'm20261202_000001_captures'",
        ] {
            raw.execute_raw(Statement::from_string(DbBackend::Sqlite, sql))
                .await
                .expect("downgrades");
        }
        raw.close().await.expect("closes");

        let upgraded = file.open().await;
        assert_eq!(
            dump(&upgraded, &sessions, &keys).await,
            before,
            "the upgrade keeps every row"
        );
        let capture = rewind_core::model::Capture {
            directory: "/work/reopen".to_owned(),
            snapshot: snapshot(9),
            time: 1_700_000_000_000,
            message: "captured".to_owned(),
            paths: Vec::new(),
            intent: None,
        };
        upgraded
            .commit(transaction(
                vec![Change::AddCapture(Box::new(capture.clone()))],
                Vec::new(),
            ))
            .await
            .expect("a capture commits after the upgrade");
        assert_eq!(upgraded.captures(None).await.expect("reads"), vec![capture]);
        assert!(
            upgraded
                .referenced_snapshots(Some("/work/reopen".to_owned()))
                .await
                .expect("reads")
                .contains(&snapshot(9))
        );
    });
}

#[test]
fn sqlite_handles_opened_at_once_all_migrate_one_fresh_file() {
    run(async {
        let file = SqliteFile::new();
        open_at_once((0..4).map(|_| file.config())).await;
    });
}

/// Opens a store with each of `configs` at the same time; every open must succeed.
async fn open_at_once(configs: impl Iterator<Item = SqlConfig>) {
    let opening: Vec<_> = configs
        .map(|config| tokio::spawn(async move { SqlRepo::open(config).await }))
        .collect();
    for handle in opening {
        handle
            .await
            .expect("finishes")
            .expect("every concurrent open succeeds");
    }
}

#[test]
fn a_corrupt_sqlite_file_is_refused_untouched() {
    run(async {
        let file = SqliteFile::new();
        let garbage = b"this is not a SQLite database, it only has its name\n".repeat(200);
        std::fs::write(&file.path, &garbage).expect("writes");
        let opened = SqlRepo::open(file.config()).await;
        let fault = opened.as_ref().err().and_then(Error::storage_fault);
        assert_eq!(fault, Some(StorageFault::Corrupt));
        let message = described(opened);
        assert!(
            message.contains(&file.path.display().to_string()),
            "{message}"
        );
        assert!(message.contains("corrupt"), "{message}");
        assert_eq!(
            std::fs::read(&file.path).expect("reads"),
            garbage,
            "nothing is written"
        );
    });
}

/// Another program's SQLite database (tables, no rewind schema; a slip of `--database-url`) is refused
/// as not rewind's, byte for byte untouched and with no WAL file made (review: it was switched to WAL for
/// good, and rewind's tables were created in it).
#[test]
fn another_program_s_sqlite_database_is_refused_untouched() {
    run(async {
        let file = SqliteFile::new();
        let url = format!("sqlite://{}?mode=rwc", file.path.display());
        let other = Database::connect(url).await.expect("connects");
        other
            .execute_raw(Statement::from_string(
                DbBackend::Sqlite,
                "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)",
            ))
            .await
            .expect("creates");
        other
            .execute_raw(Statement::from_string(
                DbBackend::Sqlite,
                "INSERT INTO users (name) VALUES ('ada')",
            ))
            .await
            .expect("inserts");
        other.close().await.expect("closes");
        let before = std::fs::read(&file.path).expect("reads");
        let message = described(SqlRepo::open(file.config()).await);
        assert!(message.contains("is not rewind's"), "{message}");
        assert!(message.contains("users"), "{message}");
        assert!(
            message.contains(&file.path.display().to_string()),
            "{message}"
        );
        assert_eq!(
            std::fs::read(&file.path).expect("reads"),
            before,
            "nothing is written"
        );
        let wal = file.path.with_file_name(format!(
            "{}-wal",
            file.path.file_name().expect("a name").to_string_lossy()
        ));
        assert!(!wal.exists(), "no WAL file");
    });
}

#[test]
fn a_read_only_sqlite_file_is_refused_untouched() {
    run(async {
        let file = SqliteFile::new();
        file.open().await.close().await.expect("closes");
        let bytes = std::fs::read(&file.path).expect("reads");
        // The tests run as root, which file permissions do not stop: open the file read-only instead.
        let url = format!("sqlite://{}?mode=ro", file.path.display());
        let message = described(SqlRepo::connect(&url).await);
        assert!(
            message.contains(&file.path.display().to_string()),
            "{message}"
        );
        assert!(message.contains("read-only"), "{message}");
        assert_eq!(
            std::fs::read(&file.path).expect("reads"),
            bytes,
            "nothing is written"
        );
    });
}

/// Opened only to read (`SqlConfig::read_only`), a database that cannot be written is read, every write
/// is refused as read-only, and the file is untouched.
#[test]
fn a_read_only_opening_reads_and_writes_nothing() {
    run(async {
        let file = SqliteFile::new();
        let ids = Ids::default();
        let s = session(&ids, "/work/read-only");
        let writer = file.open().await;
        put_session(&writer, &s).await.expect("commits");
        writer.close().await.expect("closes");
        let bytes = std::fs::read(&file.path).expect("reads");

        let mut config = SqlConfig::new(format!("sqlite://{}?mode=ro", file.path.display()));
        config.read_only = true;
        let reader = SqlRepo::open(config).await.expect("opens to read");
        assert_eq!(
            reader.session(&s.id).await.expect("reads").map(|r| r.id),
            Some(s.id.clone())
        );
        let other = session(&ids, "/work/read-only-2");
        let refused = put_session(&reader, &other)
            .await
            .expect_err("a write is refused");
        assert!(refused.to_string().contains("read-only"), "{refused}");
        reader.close().await.expect("closes");
        assert_eq!(
            std::fs::read(&file.path).expect("reads"),
            bytes,
            "nothing is written"
        );
    });
}

/// A database whose schema is older than this binary's cannot be migrated by a read-only opening: refused,
/// saying how to update it, and untouched.
#[test]
fn a_read_only_opening_of_an_older_schema_is_refused_untouched() {
    run(async {
        let file = SqliteFile::new();
        let plain = Database::connect(format!("sqlite://{}?mode=rwc", file.path.display()))
            .await
            .expect("connects");
        plain
            .execute_unprepared("CREATE TABLE unrelated (x INTEGER)")
            .await
            .expect("creates");
        plain.close().await.expect("closes");
        let bytes = std::fs::read(&file.path).expect("reads");
        let mut config = SqlConfig::new(format!("sqlite://{}?mode=ro", file.path.display()));
        config.read_only = true;
        let message = described(SqlRepo::open(config).await);
        assert!(message.contains("older rewind"), "{message}");
        assert!(
            message.contains(&file.path.display().to_string()),
            "{message}"
        );
        assert_eq!(
            std::fs::read(&file.path).expect("reads"),
            bytes,
            "nothing is written"
        );
    });
}

/// An intent record whose stored body cannot be read is listed as unreadable, named by its token, session
/// and worktree (its own columns), beside the records that can be read: recovery then refuses that worktree
/// alone. The whole list used to fail, and every command with it.
#[test]
fn an_intent_record_that_cannot_be_read_is_listed_as_unreadable() {
    run(async {
        let file = SqliteFile::new();
        let repo = file.open().await;
        let ids = Ids::default();
        let s = session(&ids, "/work/damaged");
        let good = intent(&ids, &s, "intent-good", snapshot(1));
        repo.commit(transaction(
            vec![
                Change::PutSession(Box::new(s.clone())),
                Change::PutIntent(Box::new(good.clone())),
                Change::PutIntent(Box::new(intent(&ids, &s, "intent-bad", snapshot(2)))),
            ],
            Vec::new(),
        ))
        .await
        .expect("commits");
        let raw = Database::connect(format!("sqlite://{}", file.path.display()))
            .await
            .expect("connects");
        raw.execute_unprepared(
            "UPDATE intent SET body = '{\"token\": 5' WHERE token = 'intent-bad'",
        )
        .await
        .expect("damages the row");
        raw.close().await.expect("closes");

        let intents = repo.intents().await.expect("the list is read");
        assert_eq!(intents.len(), 2, "{intents:?}");
        let bad = intents
            .iter()
            .find(|i| i.token.0 == "intent-bad")
            .expect("listed");
        assert_eq!(bad.session_id, s.id);
        assert_eq!(bad.directory, "/work/damaged");
        let reason = bad.unreadable.as_deref().expect("marked unreadable");
        assert!(reason.contains("intent record"), "{reason}");
        let read = intents
            .iter()
            .find(|i| i.token.0 == "intent-good")
            .expect("listed");
        assert_eq!(read, &good, "the readable one is read whole");
    });
}

/// A stored part or warning that cannot be read is named in the error by its row (the part's id; the
/// warning's position and session), so that it can be found and mended (review: only its kind was named).
#[test]
fn a_row_that_cannot_be_read_is_named_by_its_id() {
    run(async {
        let file = SqliteFile::new();
        let repo = file.open().await;
        let ids = Ids::default();
        let s = session(&ids, "/work/damaged-part");
        let user = message(&ids, &s, Role::User);
        let text = part(&ids, &user, PartBody::text("hello"));
        repo.commit(transaction(
            vec![
                Change::PutSession(Box::new(s.clone())),
                Change::PutMessage(Box::new(user.clone())),
                Change::PutPart(Box::new(text.clone())),
                Change::AddWarning {
                    session: s.id.clone(),
                    warning: warning(&ids, None, "a.txt"),
                },
            ],
            Vec::new(),
        ))
        .await
        .expect("commits");
        let raw = Database::connect(format!("sqlite://{}", file.path.display()))
            .await
            .expect("connects");
        raw.execute_unprepared("UPDATE part SET body = '{\"type\": 5'")
            .await
            .expect("damages the part");
        raw.execute_unprepared("UPDATE warning SET body = '[' ")
            .await
            .expect("damages the warning");
        raw.close().await.expect("closes");
        let error = repo
            .messages(&s.id)
            .await
            .expect_err("the part cannot be read")
            .to_string();
        assert!(
            error.contains(&format!("a stored part ({}) in the database", text.id)),
            "{error}"
        );
        let error = repo
            .warnings(&s.id)
            .await
            .expect_err("the warning cannot be read")
            .to_string();
        assert!(
            error.contains(&format!(
                "a stored warning (position 1 of session {})",
                s.id
            )),
            "{error}"
        );
    });
}

/// A SQLite file whose every connection stays in use past the pool's wait answers busy (`Busy`), naming
/// the database, not an internal fault, and the same read works once a connection is free. One
/// connection, held by a commit paused inside its transaction; a read of the same handle waits for it.
#[test]
fn a_sqlite_pool_with_no_connection_free_is_a_busy_database() {
    run(async {
        let file = SqliteFile::new();
        a_full_pool_is_a_busy_database(file.config(), &file.path.display().to_string()).await;
    });
}

/// The same of PostgreSQL: its pool waits as long for a server that is down, and a full pool was said to
/// be a database that cannot be reached (`Unreachable`, stop 58's review). A server that is down is still
/// said so (`an_unreachable_postgres_server_is_refused_with_the_cause`, and the HTTP tests' stopped
/// server).
#[test]
fn a_postgres_pool_with_no_connection_free_is_a_busy_database() {
    run_pg(async {
        let schema = PgSchema::create().await;
        let named = SqlRepo::open(schema.config())
            .await
            .expect("opens")
            .target()
            .to_owned();
        a_full_pool_is_a_busy_database(schema.config(), &named).await;
    });
}

/// A PostgreSQL server gone from under an open handle is said to be unreachable, not busy, though the
/// pool's wait for a connection runs out as it does for a full pool: the handle reaches the server through
/// a proxy of the test's, stopped after a first write.
#[test]
fn a_postgres_server_gone_under_an_open_handle_is_unreachable() {
    run_pg(async {
        let (_schema, proxy, repo, s) = through_a_proxy(Duration::from_millis(500)).await;
        proxy.stop().await;
        // Each read waits out the pool: its connections fail their test, new ones are refused.
        for _ in 0..2 {
            let read = repo.session(&s.id).await;
            let fault = read.as_ref().err().and_then(Error::storage_fault);
            assert_eq!(fault, Some(StorageFault::Unreachable), "{read:?}");
        }
    });
}

/// A connection the PostgreSQL server ends in the middle of a commit (`pg_terminate_backend`, as an
/// administrator or a failover does) fails that commit as `ConnectionLost`: its outcome is not known to
/// the caller, unlike a server that cannot be reached at all (stop 66's outage fuzz: it was a backend
/// fault, "internal error" over HTTP). Here the commit is held open by the pause hook, so the server
/// rolled it back: nothing of it is stored, and the handle's next commit gets a new connection.
#[test]
fn a_postgres_connection_ended_during_a_commit_is_a_lost_connection() {
    run_pg(async {
        let schema = PgSchema::create().await;
        let repo = std::sync::Arc::new(schema.open().await);
        let ids = Ids::default();
        let first = session(&ids, "/work/ended");
        let mut pause = repo.pause_next_commit();
        let task = tokio::spawn({
            let (repo, first) = (repo.clone(), first.clone());
            async move {
                repo.commit(transaction(
                    vec![Change::PutSession(Box::new(first))],
                    vec![heartbeat(&Ids::default())],
                ))
                .await
            }
        });
        assert!(
            pause.reached().await,
            "the commit holds its transaction open"
        );
        // The backend of that transaction: the one holding a write's lock on this schema's session table
        // (autovacuum takes another kind).
        let admin = admin(&schema.url).await;
        let ended = admin
            .query_one_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT count(pg_terminate_backend(pid)) AS ended FROM (SELECT DISTINCT l.pid \
                 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 WHERE l.granted AND l.mode = 'RowExclusiveLock' AND c.relname = 'session' \
                 AND n.nspname = $1 AND l.pid <> pg_backend_pid()) AS held",
                [schema.name.clone().into()],
            ))
            .await
            .expect("pg_terminate_backend runs")
            .and_then(|row| row.try_get::<i64>("", "ended").ok());
        let _ = admin.close().await;
        assert_eq!(ended, Some(1), "one backend held the commit's transaction");
        pause.resume();
        let result = task.await.expect("the commit finishes");
        let fault = result.as_ref().err().and_then(Error::storage_fault);
        assert_eq!(fault, Some(StorageFault::ConnectionLost), "{result:?}");
        assert_eq!(
            repo.session(&first.id)
                .await
                .expect("reads on a new connection"),
            None,
            "the server rolled the ended transaction back"
        );
        put_session(repo.as_ref(), &first)
            .await
            .expect("the next commit gets a new connection");
        assert!(repo.session(&first.id).await.expect("reads").is_some());
    });
}

/// Once a statement found the PostgreSQL server away, the next requests wait for it a short while
/// (`OUTAGE_WAIT`, 2 s), not the pool's whole acquire timeout each: an operation that met an outage, then
/// its rollback and lease releases, answered after 90 – 100 s (stop 66's outage fuzz). Once the server
/// answers again, requests go through as before, also when it takes longer than that short while to
/// accept a connection (review: a probe cut short at 2 s would never have found it again).
#[test]
fn after_a_postgres_server_is_found_unreachable_requests_fail_fast_until_it_answers() {
    run_pg(async {
        let (_schema, proxy, repo, s) = through_a_proxy(Duration::from_secs(8)).await;
        proxy.hold();
        let first = std::time::Instant::now();
        let read = repo.session(&s.id).await;
        let first = first.elapsed();
        let fault = read.as_ref().err().and_then(Error::storage_fault);
        assert_eq!(fault, Some(StorageFault::Unreachable), "{read:?}");
        for _ in 0..2 {
            let next = std::time::Instant::now();
            let read = repo.session(&s.id).await;
            let next = next.elapsed();
            let fault = read.as_ref().err().and_then(Error::storage_fault);
            assert_eq!(fault, Some(StorageFault::Unreachable), "{read:?}");
            assert!(
                next < Duration::from_secs(5),
                "a request after the outage was found waited {next:?} (the first {first:?})"
            );
        }
        // Back, slow to accept: each connection waits 3 s before it reaches the server.
        proxy.pass(Duration::from_secs(3));
        let mut refused = 0;
        let found = loop {
            match repo.session(&s.id).await {
                Ok(found) => break found,
                Err(error) => {
                    assert_eq!(error.storage_fault(), Some(StorageFault::Unreachable));
                    refused += 1;
                    assert!(refused < 10, "the server was not found again: {error}");
                }
            }
        };
        assert!(
            found.is_some(),
            "the session is read once the server answers"
        );
        put_session(&repo, &session(&Ids::default(), "/work/outage"))
            .await
            .expect("commits as before");
        proxy.stop().await;
    });
}

/// A schema, a proxy to its server, a handle on it through the proxy (a pool of two connections, waiting
/// `acquire_timeout` for one), and a session it stored.
async fn through_a_proxy(acquire_timeout: Duration) -> (PgSchema, Proxy, SqlRepo, Session) {
    let schema = PgSchema::create().await;
    let proxy = Proxy::to(&schema.url).await;
    let mut config = schema.config();
    config.url = proxy.url.clone();
    config.max_connections = Some(2);
    config.acquire_timeout = acquire_timeout;
    let repo = SqlRepo::open(config)
        .await
        .expect("opens through the proxy");
    let s = session(&Ids::default(), "/work/proxied");
    put_session(&repo, &s).await.expect("commits");
    (schema, proxy, repo, s)
}

/// A TCP proxy to a PostgreSQL URL's server; `url` is the same URL through it. It can hold every
/// connection (`hold`: those open are broken off, new ones are accepted and left unanswered, as by a server
/// that is away) and pass them again (`pass`), after a delay each.
struct Proxy {
    url: String,
    mode: tokio::sync::watch::Sender<Mode>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// What a `Proxy` does with its connections.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Each reaches the server after this delay.
    Pass(Duration),
    Hold,
}

impl Proxy {
    async fn to(url: &str) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port for the proxy");
        let port = listener.local_addr().expect("its address").port();
        let server = url
            .split_once('@')
            .and_then(|(_, rest)| rest.split('/').next())
            .expect("a URL with a host")
            .to_owned();
        let through = url.replacen(&format!("@{server}"), &format!("@127.0.0.1:{port}"), 1);
        let mode = tokio::sync::watch::Sender::new(Mode::Pass(Duration::ZERO));
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let modes = mode.clone();
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    accepted = listener.accept() => {
                        let Ok((mut client, _)) = accepted else { break };
                        let server = server.clone();
                        let mut mode = modes.subscribe();
                        connections.spawn(async move {
                            let Ok(Mode::Pass(delay)) = mode
                                .wait_for(|m| *m != Mode::Hold)
                                .await
                                .map(|m| *m)
                            else {
                                return;
                            };
                            tokio::time::sleep(delay).await;
                            let Ok(mut upstream) = tokio::net::TcpStream::connect(&server).await
                            else {
                                return;
                            };
                            tokio::select! {
                                _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                                _ = mode.wait_for(|m| *m == Mode::Hold) => {}
                            }
                        });
                    }
                }
            }
            // Every connection through it is closed, and no new one is accepted.
            connections.shutdown().await;
        });
        Proxy {
            url: through,
            mode,
            stop,
            task,
        }
    }

    /// Breaks off every connection and leaves new ones unanswered.
    fn hold(&self) {
        self.mode.send_replace(Mode::Hold);
    }

    /// Lets connections through again, each after `delay`.
    fn pass(&self, delay: Duration) {
        self.mode.send_replace(Mode::Pass(delay));
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

/// One connection held by a commit paused inside its transaction: a read of the same handle waits 200 ms
/// and fails as `Busy`, naming the database (`named`) and saying it was too busy, then works once the
/// commit ends.
async fn a_full_pool_is_a_busy_database(mut config: SqlConfig, named: &str) {
    config.max_connections = Some(1);
    config.acquire_timeout = Duration::from_millis(200);
    let repo = std::sync::Arc::new(SqlRepo::open(config).await.expect("opens"));
    let ids = Ids::default();
    let s = session(&ids, "/work/busy");
    let mut pause = repo.pause_next_commit();
    let committing = tokio::spawn({
        let (repo, s) = (repo.clone(), s.clone());
        async move { put_session(repo.as_ref(), &s).await }
    });
    assert!(pause.reached().await);

    let read = repo.session(&s.id).await;
    let fault = read.as_ref().err().and_then(Error::storage_fault);
    assert_eq!(fault, Some(StorageFault::Busy), "{read:?}");
    let message = described(read);
    assert!(
        message.contains(named) && message.contains("too busy"),
        "{message}"
    );

    pause.resume();
    committing
        .await
        .expect("finishes")
        .expect("the paused commit commits");
    assert!(
        repo.session(&s.id).await.expect("reads").is_some(),
        "once a connection is free the read works"
    );
}

#[test]
fn a_locked_sqlite_file_is_refused_after_the_busy_timeout() {
    run(async {
        let file = SqliteFile::new();
        let writer = file.open().await;
        let ids = Ids::default();
        let s = session(&ids, "/work/locked");
        // The writer holds the write lock: its commit is paused inside its transaction.
        let mut pause = writer.pause_next_commit();
        let writer = std::sync::Arc::new(writer);
        let committing = tokio::spawn({
            let (writer, s) = (writer.clone(), s.clone());
            async move { put_session(writer.as_ref(), &s).await }
        });
        assert!(pause.reached().await);

        let mut config = file.config();
        config.busy_timeout = Duration::from_millis(200);
        let opened = SqlRepo::open(config).await;
        let fault = opened.as_ref().err().and_then(Error::storage_fault);
        assert_eq!(fault, Some(StorageFault::Locked));
        let message = described(opened);
        assert!(
            message.contains(&file.path.display().to_string()),
            "{message}"
        );
        assert!(message.contains("locked"), "{message}");

        pause.resume();
        committing
            .await
            .expect("finishes")
            .expect("the writer commits");
        let reopened = file.open().await;
        assert!(
            reopened.session(&s.id).await.expect("reads").is_some(),
            "the refused open disturbed nothing"
        );
    });
}

#[test]
fn a_sqlite_file_of_a_newer_schema_is_refused_untouched() {
    run(async {
        let file = SqliteFile::new();
        let ids = Ids::default();
        let repo = file.open().await;
        let s = session(&ids, "/work/newer");
        put_session(&repo, &s).await.expect("commits");
        repo.close().await.expect("closes");
        let raw = Database::connect(file.config().url.as_str())
            .await
            .expect("connects");
        raw.execute_unprepared(
            "INSERT INTO seaql_migrations (version, applied_at) VALUES ('m29990101_000000_future', 0)",
        )
        .await
        .expect("a newer rewind's migration is recorded");
        raw.close().await.expect("closes");
        let bytes = std::fs::read(&file.path).expect("reads");

        let message = described(SqlRepo::open(file.config()).await);
        assert!(
            message.contains(&file.path.display().to_string()),
            "{message}"
        );
        assert!(message.contains("newer rewind"), "{message}");
        assert!(message.contains("m29990101_000000_future"), "{message}");
        assert_eq!(
            std::fs::read(&file.path).expect("reads"),
            bytes,
            "nothing is written"
        );
    });
}

#[test]
fn a_url_that_is_not_a_database_is_refused() {
    run(async {
        let message = described(SqlRepo::connect("mysql://somewhere/db").await);
        assert!(message.contains("mysql://somewhere/db"), "{message}");
        let mut config = SqlConfig::sqlite_memory();
        config.schema = Some("x".to_owned());
        let message = described(SqlRepo::open(config).await);
        assert!(message.contains("schema"), "{message}");
    });
}

/// A PostgreSQL server that cannot be reached is refused with the cause (the pool alone retried it until
/// its acquire timeout, 30 s, and then said only "pool timed out"; found by a black-box run). No server is
/// needed: nothing listens on port 1.
#[test]
fn an_unreachable_postgres_server_is_refused_with_the_cause() {
    run(async {
        let message =
            described(SqlRepo::connect("postgres://nobody:secret-9f2@127.0.0.1:1/db").await);
        assert!(message.contains("refused"), "{message}");
        assert!(!message.contains("pool timed out"), "{message}");
        assert!(!message.contains("secret-9f2"), "{message}");
    });
}

#[test]
fn sqlite_file_paths_with_url_characters_work() {
    run(async {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("odd ?#% name.db");
        let repo = SqlRepo::open(SqlConfig::sqlite_file(&path).expect("UTF-8"))
            .await
            .expect("opens");
        assert_eq!(repo.target(), path.display().to_string());
        repo.close().await.expect("closes");
        assert!(path.is_file(), "the file is created at exactly that path");
    });
}

#[test]
fn postgres_refuses_a_newer_schema_and_hides_the_password() {
    run_pg(async {
        let schema = PgSchema::create().await;
        schema.open().await.close().await.expect("closes");
        let admin = admin(&schema.url).await;
        admin
            .execute_unprepared(&format!(
                "INSERT INTO \"{}\".seaql_migrations (version, applied_at) \
                 VALUES ('m29990101_000000_future', 0)",
                schema.name
            ))
            .await
            .expect("a newer rewind's migration is recorded");
        let message = described(SqlRepo::open(schema.config()).await);
        assert!(message.contains("newer rewind"), "{message}");
        assert!(message.contains("m29990101_000000_future"), "{message}");
        assert!(
            message.contains("***"),
            "the URL is named without its password: {message}"
        );
        let _ = admin.close().await;

        let wrong = schema
            .url
            .replacen("rewind:rewind@", "rewind:wrong-secret@", 1);
        let message = described(SqlRepo::connect(&wrong).await);
        assert!(
            !message.contains("wrong-secret"),
            "the password never shows: {message}"
        );
        assert!(message.contains("rewind:***@"), "{message}");
    });
}

/// A URL the driver cannot parse: its refusal never shows the password, as written or percent-decoded,
/// whichever of the reachability probe and the pool fails first (review: the driver's text repeated the
/// URL whole in about half the runs). No server is needed: nothing is reached.
#[test]
fn a_url_the_driver_cannot_parse_never_shows_its_password() {
    run(async {
        for (url, secrets) in [
            (
                "postgres://rewind:PLAIN32x@[::1/rewind_review",
                &["PLAIN32x"][..],
            ),
            (
                "postgres://rewind:P%40SS24x@:5432/rewind_review",
                &["P%40SS24x", "P@SS24x"][..],
            ),
            (
                "postgres://rewind:SEC%2FRET17x@/rewind_review",
                &["SEC%2FRET17x", "SEC/RET17x"][..],
            ),
            // A password with an unencoded `/` or `?` (diff review: shown whole, as the URL's name).
            ("postgres://rewind:ab/cdSECRETx@h/db", &["cdSECRETx"][..]),
            ("postgres://rewind:ab?cdSECRETx@h/db", &["cdSECRETx"][..]),
        ] {
            for _ in 0..10 {
                let message = described(SqlRepo::connect(url).await);
                for secret in secrets {
                    assert!(!message.contains(secret), "{url}: {message}");
                }
            }
        }
    });
}

/// A PostgreSQL database whose drawn identity cannot be read once migrated is refused, saying so: its
/// snapshot stores are keyed on that identity, and without it this process keyed them on the URL as
/// spelled, using other stores than every other process of the database (review).
#[test]
fn a_postgres_database_whose_identity_cannot_be_read_is_refused() {
    run_pg(async {
        let schema = PgSchema::create().await;
        let repo = schema.open().await;
        assert!(
            repo.database_identity().is_some(),
            "a migrated database has one"
        );
        repo.close().await.expect("closes");
        let admin = admin(&schema.url).await;
        admin
            .execute_unprepared(&format!(
                "ALTER TABLE \"{}\".rewind_identity RENAME TO rewind_identity_gone",
                schema.name
            ))
            .await
            .expect("the identity's table is made unreadable");
        // The table is missing: refused as such when opened (the identity's read would refuse it too).
        let message = described(SqlRepo::open(schema.config()).await);
        assert!(
            message.contains("damaged") && message.contains("rewind_identity"),
            "{message}"
        );
        let _ = admin.close().await;
    });
}

/// A PostgreSQL server's refusal reads as the server's words with its SQLSTATE: sqlx's text of it ended with
/// the line of PostgreSQL's own C source (`… for user "rewind" at line 334`, black-box), which read like a
/// line of the user's configuration.
#[test]
fn a_postgres_refusal_is_the_servers_message_without_its_source_line() {
    run_pg(async {
        let schema = PgSchema::create().await;
        let wrong = schema
            .url
            .replacen("rewind:rewind@", "rewind:wrong-secret@", 1);
        let message = described(SqlRepo::connect(&wrong).await);
        assert!(
            message.contains("password authentication failed for user \"rewind\" (SQLSTATE 28P01)"),
            "{message}"
        );
        assert!(!message.contains(" at line "), "{message}");
        let (base, _) = schema.url.rsplit_once('/').expect("a database name");
        let message = described(SqlRepo::connect(&format!("{base}/no_such_db_7c1")).await);
        assert!(
            message.contains("\"no_such_db_7c1\" does not exist (SQLSTATE 3D000)"),
            "{message}"
        );
        assert!(!message.contains(" at line "), "{message}");
    });
}

/// Opens that race on a fresh schema used to fail now and then on a duplicate key of PostgreSQL's catalogue
/// (two of them creating the same table, the loser's retries running out while the winner was still
/// migrating): CI met it once in about thirty runs. Several rounds of eight give the race more chances.
/// PostgreSQL's error codes are read as PostgreSQL's, not as SQLite result codes: an all-digit SQLSTATE
/// parsed as a number took SQLite's meaning of its low byte (kill fuzz: `22021`, a NUL byte refused, was
/// said to be a lock held by another process; `25006` read-only and `53100` disk full were never
/// recognised). A NUL byte in a column (a directory, which no path can hold) is a failed statement.
#[test]
fn postgres_error_codes_are_not_read_as_sqlite_result_codes() {
    run_pg(async {
        let schema = PgSchema::create().await;
        let repo = schema.open().await;
        let ids = Ids::default();
        let refused = put_session(&repo, &session(&ids, "/work/a\0b")).await;
        let Err(error) = refused else {
            panic!("a NUL byte in a text column is refused")
        };
        assert!(
            error.storage_fault().is_none() && format!("{error:?}").contains("22021"),
            "{error:?}"
        );
    });
}

/// A PostgreSQL database that takes no writes (a standby, or one set `default_transaction_read_only` as
/// here) is said to be read-only: refused when opened, and a write on a connection made after the change
/// (`25006`, under a repo opened before it) is refused alike, storing nothing, while reads still read.
/// Once the setting is reset, writes are stored again. Before the SQLSTATE was matched first, `25006`
/// was read as a SQLite code, none of whose it is, and was a backend fault ("internal error").
#[test]
fn postgres_that_takes_no_writes_is_said_to_be_read_only() {
    run_pg(async {
        let database = PgDatabase::create().await;
        let repo = SqlRepo::open(SqlConfig::new(database.url.clone()))
            .await
            .expect("opens");
        let ids = Ids::default();
        let kept = session(&ids, "/work/kept");
        put_session(&repo, &kept).await.expect("commits");
        let name = &database.name;
        // The pool's connections are ended, so that its next ones take the database's new setting.
        let renew_connections = format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
        );
        database
            .admin(&format!(
                "ALTER DATABASE \"{name}\" SET default_transaction_read_only = on"
            ))
            .await;
        database.admin(&renew_connections).await;

        let message = described(SqlRepo::open(SqlConfig::new(database.url.clone())).await);
        assert!(
            message.contains("is read-only; rewind needs to write to it"),
            "{message}"
        );
        let refused = put_on_new_connections(&repo, &session(&ids, "/work/refused")).await;
        let fault = refused.as_ref().err().and_then(Error::storage_fault);
        assert_eq!(fault, Some(StorageFault::ReadOnly), "{refused:?}");
        assert!(
            format!("{:?}", refused).contains("25006"),
            "the server's code is kept: {refused:?}"
        );
        let sessions = repo.sessions(None).await.expect("reads still read");
        assert_eq!(
            sessions.iter().map(|s| &s.id).collect::<Vec<_>>(),
            [&kept.id],
            "nothing was stored"
        );

        database
            .admin(&format!(
                "ALTER DATABASE \"{name}\" RESET default_transaction_read_only"
            ))
            .await;
        database.admin(&renew_connections).await;
        put_on_new_connections(&repo, &session(&ids, "/work/writable-again"))
            .await
            .expect("a write once the setting is reset is stored");
        let _ = repo.close().await;
    });
}

/// `put_session` after the repo's connections were ended: the first request may meet one of them (said
/// as the connection lost, nothing stored), so it is made once more, on a new connection.
async fn put_on_new_connections(repo: &SqlRepo, session: &Session) -> rewind_core::Result<()> {
    let first = put_session(repo, session).await;
    if first.as_ref().err().and_then(Error::storage_fault) == Some(StorageFault::ConnectionLost) {
        return put_session(repo, session).await;
    }
    first
}

#[test]
fn postgres_opens_at_once_from_many_handles_migrate_one_fresh_schema() {
    run_pg(async {
        for round in 0..3 {
            let schema = PgSchema::create().await;
            if round > 0 {
                // A schema that does not exist yet: the opens create it too (under the same lock).
                let admin = admin(&schema.url).await;
                admin
                    .execute_unprepared(&format!("DROP SCHEMA \"{}\"", schema.name))
                    .await
                    .expect("the schema is dropped");
                let _ = admin.close().await;
            }
            open_at_once((0..8).map(|_| schema.config())).await;
        }
    });
}

/// A process that finds another one migrating the same fresh schema waits for it, for no longer than the busy
/// timeout: here the other one (holding the lock rewind's migrations take) never finishes, so the open is
/// refused as locked, leaves the schema empty, and opens once the other one is gone.
#[test]
fn postgres_open_waits_for_another_migration_no_longer_than_the_busy_timeout() {
    run_pg(async {
        let schema = PgSchema::create().await;
        let other = admin(&schema.url).await;
        let migrating = sea_orm::TransactionTrait::begin(&other)
            .await
            .expect("begins");
        migrating
            .execute_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT pg_advisory_xact_lock(hashtext($1))",
                [format!("rewind schema migrations: {}", schema.name).into()],
            ))
            .await
            .expect("the other process takes the migration lock");

        let mut config = schema.config();
        config.busy_timeout = Duration::from_millis(300);
        let started = std::time::Instant::now();
        let message = described(SqlRepo::open(config).await);
        assert!(message.contains("locked"), "{message}");
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "it waited for the other process first"
        );
        let tables = other
            .query_all_raw(Statement::from_sql_and_values(
                DbBackend::Postgres,
                "SELECT table_name FROM information_schema.tables WHERE table_schema = $1",
                [schema.name.clone().into()],
            ))
            .await
            .expect("lists the tables");
        assert!(tables.is_empty(), "the refused open created nothing");

        migrating.rollback().await.expect("the other process stops");
        let repo = schema.open().await;
        let s = session(&Ids::default(), "/work/after-the-wait");
        put_session(&repo, &s)
            .await
            .expect("the migrated schema takes a session");
        assert!(repo.session(&s.id).await.expect("reads").is_some());
        let _ = other.close().await;
    });
}

/// A SQLite file deleted, or replaced by another, while a handle has it open: the handle's next write
/// (a commit, a lease take) is refused with an error that says so, and nothing reaches either file.
/// Black-box: a server went on answering 200 into the deleted file, and every session was gone at its
/// restart, with a worktree left reverted.
#[test]
fn a_sqlite_file_deleted_or_replaced_under_an_open_handle_refuses_writes() {
    run(async {
        let ids = Ids::default();
        for replaced in [false, true] {
            let file = SqliteFile::new();
            let repo = file.open().await;
            let s = session(&ids, "/work/deleted-db");
            put_session(&repo, &s)
                .await
                .expect("a write while the file is there");
            for suffix in ["", "-wal", "-shm"] {
                let path = format!("{}{suffix}", file.path.display());
                let _ = std::fs::remove_file(&path);
            }
            if replaced {
                let other = file.open().await;
                other.close().await.expect("closes");
            }
            let refused = |result: Result<(), Error>| {
                let text = match result {
                    Err(
                        error @ Error::Storage {
                            fault: StorageFault::Replaced,
                            ..
                        },
                    ) => error.to_string(),
                    other => panic!("a write must be refused: {other:?}"),
                };
                assert!(
                    text.contains("was deleted or replaced while rewind had it open")
                        && text.contains(file.path.to_str().expect("UTF-8")),
                    "{text}"
                );
            };
            let other = session(&ids, "/work/deleted-db-2");
            refused(put_session(&repo, &other).await);
            refused(
                repo.take_lease(
                    &lease(
                        &LeaseKey::Session(s.id.clone()),
                        "tok",
                        std::process::id(),
                        u64::MAX,
                    ),
                    None,
                )
                .await
                .map(|_| ()),
            );
            let key = LeaseKey::Session(s.id.clone());
            let token = rewind_core::model::LeaseToken("tok".to_owned());
            refused(repo.renew_lease(&key, &token, 1).await.map(|_| ()));
            refused(repo.release_lease(&key, &token).await);
            if replaced {
                let fresh = file.open().await;
                assert_eq!(
                    fresh.session(&other.id).await.expect("reads"),
                    None,
                    "nothing stored"
                );
            }
        }
    });
}

/// A write transaction that SQLite itself rolls back (a full disk does; the trigger's `RAISE(ROLLBACK)`
/// here does it on demand) leaves no pooled connection whose later commits land in appearance only: the
/// next commit is there for another connection to read, and the write lock is free. Before, the pool kept
/// the connection with the transaction depth SQLite had ended; the next transaction on it began with a
/// savepoint, a second failure left that savepoint's transaction open, and every later commit released a
/// savepoint inside it: answered as committed, never stored, the write lock held until the process ended
/// (review: `rewind serve` with the disk full answered 200 for a message it never stored).
#[test]
fn a_transaction_sqlite_rolled_back_leaves_no_connection_that_commits_in_appearance_only() {
    run(async {
        let file = SqliteFile::new();
        let mut config = file.config();
        config.max_connections = Some(1);
        config.busy_timeout = Duration::from_millis(200);
        let repo = SqlRepo::open(config.clone()).await.expect("opens");
        let raw = Database::connect(format!("sqlite://{}", file.path.display()))
            .await
            .expect("connects");
        // One trigger ends the whole transaction, as a full disk may; the other fails its statement only,
        // as most errors do.
        raw.execute_unprepared(
            "CREATE TRIGGER refuse BEFORE INSERT ON session WHEN NEW.directory = '/work/refused' \
             BEGIN SELECT RAISE(ROLLBACK, 'refused by the test'); END; \
             CREATE TRIGGER abort BEFORE INSERT ON session WHEN NEW.directory = '/work/aborted' \
             BEGIN SELECT RAISE(ABORT, 'aborted by the test'); END",
        )
        .await
        .expect("creates the triggers");
        raw.close().await.expect("closes");
        let ids = Ids::default();
        for refused in ["/work/refused", "/work/aborted", "/work/aborted"] {
            // A first row written, then the refused one.
            repo.commit(transaction(
                vec![
                    Change::PutSession(Box::new(session(&ids, "/work/first"))),
                    Change::PutSession(Box::new(session(&ids, refused))),
                ],
                Vec::new(),
            ))
            .await
            .expect_err("the trigger fails the transaction");
        }
        let kept = session(&ids, "/work/kept");
        put_session(&repo, &kept).await.expect("commits");
        let other = SqlRepo::open(config).await.expect("opens again");
        assert!(
            other.session(&kept.id).await.expect("reads").is_some(),
            "the commit is there for another connection"
        );
        let next = session(&ids, "/work/next");
        put_session(&other, &next)
            .await
            .expect("the write lock is free");
        assert!(repo.session(&next.id).await.expect("reads").is_some());
    });
}

/// Paths made immutable (`chattr +i`, on the ext4 the tests run on: as root, permissions stop nothing),
/// mutable again when dropped.
struct Immutable(Vec<std::path::PathBuf>);

impl Immutable {
    fn made(paths: &[std::path::PathBuf]) -> Immutable {
        // Each path is in the value before the next one is tried: a failure leaves none immutable.
        let mut made = Immutable(Vec::new());
        for path in paths {
            assert!(
                Immutable::chattr(path, "+i"),
                "chattr +i {} (the test needs a filesystem that has the flag, such as ext4)",
                path.display()
            );
            made.0.push(path.clone());
        }
        made
    }

    fn chattr(path: &std::path::Path, flag: &str) -> bool {
        std::process::Command::new("chattr")
            .arg(flag)
            .arg(path)
            .status()
            .is_ok_and(|status| status.success())
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        for path in &self.0 {
            Immutable::chattr(path, "-i");
        }
    }
}

/// A connection the pool opens while the database cannot be written (its files immutable, as a read-only
/// mount makes them) serves that request and is not kept: once the files are writable every write is
/// stored. SQLite opens such a connection read-only without a word, and `BEGIN IMMEDIATE` on it begins a
/// read transaction, so stop 58's probe kept it, and every write it was given failed "attempt to write a
/// readonly database" (CI, `bad_input::a_database_made_read_only_under_the_server_is_said_so_to_the_client`);
/// a connection that probe did refuse made the request wait for the pool's acquire timeout. The pools'
/// connections are closed first, so the requests inside the read-only spell open new ones there.
#[test]
fn a_connection_opened_while_the_file_is_read_only_is_not_kept() {
    run(async {
        let file = SqliteFile::new();
        let mut config = file.config();
        config.acquire_timeout = Duration::from_secs(5);
        let repo = SqlRepo::open(config).await.expect("opens");
        let ids = Ids::default();
        let kept = session(&ids, "/work/kept");
        put_session(&repo, &kept).await.expect("commits");
        assert!(
            repo.close_idle_connections().await,
            "the pools' connections are closed"
        );

        // (The last connection closed took the write-ahead log away with it.)
        let files: Vec<std::path::PathBuf> = ["", "-wal"]
            .iter()
            .map(|side| std::path::PathBuf::from(format!("{}{side}", file.path.display())))
            .filter(|path| path.exists())
            .collect();
        let immutable = Immutable::made(&files);
        let read = repo.session(&kept.id).await;
        assert!(
            matches!(&read, Ok(Some(s)) if s.id == kept.id),
            "a read inside the spell reads: {read:?}"
        );
        let refused = put_session(&repo, &session(&ids, "/work/refused")).await;
        let fault = refused.as_ref().err().and_then(Error::storage_fault);
        assert_eq!(fault, Some(StorageFault::ReadOnly), "{refused:?}");
        drop(immutable);

        for n in 0..6 {
            let next = session(&ids, &format!("/work/writable-again/{n}"));
            put_session(&repo, &next)
                .await
                .expect("every write once the files are writable is stored");
        }
        assert_eq!(repo.sessions(None).await.expect("reads").len(), 7);
    });
}

/// A SQLite file in a directory that cannot be written (a read-only mount): SQLite cannot make the `-shm`
/// file it reads a WAL database with, and fails with `SQLITE_CANTOPEN`. Opened to write it is refused as
/// read-only (so the commands that only show open it to read); opened to read, with no write-ahead log
/// beside it, the file alone is the database and is read. Nothing is written. The tests run as root, which
/// a directory's permissions do not stop: the directory is made immutable (`chattr +i`, on the ext4 the
/// tests run on) for the test; a read-only bind mount was checked by hand. Before, both openings failed
/// with "unable to open database file" (review).
#[test]
fn a_sqlite_file_in_a_directory_that_cannot_be_written_is_read() {
    run(async {
        let file = SqliteFile::new();
        let ids = Ids::default();
        let s = session(&ids, "/work/read-only-directory");
        let writer = file.open().await;
        put_session(&writer, &s).await.expect("commits");
        writer.close().await.expect("closes");
        for side in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{side}", file.path.display()));
        }
        let bytes = std::fs::read(&file.path).expect("reads");
        let dir = file
            .path
            .parent()
            .expect("the file's directory")
            .to_path_buf();
        let _mutable_again = Immutable::made(std::slice::from_ref(&dir));

        let message = described(SqlRepo::open(file.config()).await);
        assert!(message.contains("read-only"), "{message}");
        assert!(
            message.contains(&file.path.display().to_string()),
            "{message}"
        );

        let mut config = file.config();
        config.read_only = true;
        let reader = SqlRepo::open(config).await.expect("opens to read");
        assert_eq!(
            reader.session(&s.id).await.expect("reads").map(|r| r.id),
            Some(s.id.clone())
        );
        reader.close().await.expect("closes");
        assert_eq!(
            std::fs::read(&file.path).expect("reads"),
            bytes,
            "nothing is written"
        );
        let entries = std::fs::read_dir(&dir).expect("lists").count();
        assert_eq!(entries, 1, "no -wal or -shm file was made");
    });
}

/// A database whose schema is applied but one of whose tables is gone (dropped by hand, a damaged file) is
/// refused when opened, naming the table, before any operation could write an intent and touch files it
/// then could not record (review: without `event_outbox`, an undo reverted the files, failed to store, and
/// left an intent every later operation was refused for). Nothing is written.
#[test]
fn a_database_missing_one_of_its_tables_is_refused_naming_it() {
    run(async {
        let file = SqliteFile::new();
        file.open().await.close().await.expect("closes");
        let raw = Database::connect(format!("sqlite://{}", file.path.display()))
            .await
            .expect("connects");
        raw.execute_unprepared("DROP TABLE event_outbox")
            .await
            .expect("drops a table");
        raw.close().await.expect("closes");
        let bytes = std::fs::read(&file.path).expect("reads");
        let message = described(SqlRepo::open(file.config()).await);
        assert!(message.contains("damaged"), "{message}");
        assert!(message.contains("event_outbox"), "{message}");
        assert!(
            message.contains(&file.path.display().to_string()),
            "{message}"
        );
        let mut config = file.config();
        config.read_only = true;
        let message = described(SqlRepo::open(config).await);
        assert!(message.contains("event_outbox"), "{message}");
        assert_eq!(
            std::fs::read(&file.path).expect("reads"),
            bytes,
            "nothing is written"
        );
    });
}

/// A database path that names a directory is refused as such, not as read-only (review: the read-only
/// directory's handling took it for a file, and `log` then asked whether the disk was full).
#[test]
fn a_database_path_that_is_a_directory_is_not_called_read_only() {
    run(async {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let url = format!("sqlite://{}?mode=rwc", dir.path().display());
        let message = described(SqlRepo::connect(&url).await);
        assert!(!message.contains("read-only"), "{message}");
        assert!(message.contains("is a directory"), "{message}");
        let mut config = SqlConfig::new(&url);
        config.read_only = true;
        let message = described(SqlRepo::open(config).await);
        assert!(!message.contains("disk"), "{message}");
        assert!(message.contains("is a directory"), "{message}");
    });
}

/// A SQLite file moved away under an open handle: reads that need connections the pool did not hold open
/// yet fail saying the file was deleted or replaced, and no connection makes a fresh, empty database at its
/// path. Before, the pool's new connections created one (`mode=rwc`), and the failure read "no such
/// table" (review: a server answered "internal error" when its first query after the move came on a new
/// connection).
#[test]
fn a_new_connection_after_the_file_moved_away_makes_no_fresh_database() {
    run(async {
        let ids = Ids::default();
        let file = SqliteFile::new();
        let repo = std::sync::Arc::new(file.open().await);
        let s = session(&ids, "/work/moved-db");
        put_session(repo.as_ref(), &s)
            .await
            .expect("a write while the file is there");
        let moved = file.path.with_file_name("moved.db");
        std::fs::rename(&file.path, &moved).expect("moved away");
        // Several reads at once: the pool opens connections beyond the one it held.
        let reads: Vec<_> = (0..8)
            .map(|_| {
                let (repo, id) = (std::sync::Arc::clone(&repo), s.id.clone());
                tokio::spawn(async move { repo.messages(&id).await.map(|_| ()) })
            })
            .collect();
        for read in reads {
            if let Err(error) = read.await.expect("the read ran") {
                assert!(
                    error.to_string().contains("was deleted or replaced"),
                    "{error}"
                );
            }
        }
        assert!(!file.path.exists(), "no fresh database at the path");
    });
}
