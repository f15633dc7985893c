//! A revert's large texts are stored once (see `shared.rs` in the adapter): the text diff is in one
//! `shared_text` row that the session and its `session.updated` event reference, the session diff in one
//! that the session diff and its `session.diff` event reference. Checked in the database itself, on SQLite
//! and PostgreSQL: the texts are not in the bodies, a text is deleted once nothing references it, and a
//! reference that leads nowhere is an error, not an empty diff. (The contract suite's
//! `large_revert_texts_read_back_whole_from_every_row` checks every read gives the texts back whole.)

use rewind_core::model::{
    Event, EventPayload, FileDiff, FileStatus, RevertDescriptor, Session, SessionFields, SnapshotId,
};
use rewind_core::ports::{Change, MessageRepo};
use rewind_sql::SqlRepo;
use sea_orm::{ConnectionTrait, Database, DatabaseConnection, Statement};

use crate::support::{
    Ids, PgSchema, SqliteFile, admin, run, run_pg, session, transaction, updated,
};

/// One number from a query of the database itself.
async fn number(raw: &DatabaseConnection, sql: String) -> i64 {
    let row = raw
        .query_one_raw(Statement::from_string(
            raw.get_database_backend(),
            sql.clone(),
        ))
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .unwrap_or_else(|| panic!("{sql}: no row"));
    row.try_get::<Option<i64>>("", "n")
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .unwrap_or(0)
}

/// `session` reverted with a text diff and a session diff of `files` files, each line changed, and the
/// transaction a revert's result commits: the session diff, the session, and their two events.
fn revert_result(
    ids: &Ids,
    plain: &Session,
    files: usize,
) -> (Session, rewind_core::ports::Transaction) {
    let patch = |file: usize| -> String {
        (0..50)
            .map(|line| format!("-old {file} {line}\n+new {file} {line}\n"))
            .collect()
    };
    let diff: Vec<FileDiff> = (0..files)
        .map(|file| FileDiff {
            file: format!("src/{file}.rs"),
            patch: patch(file),
            additions: 50,
            deletions: 50,
            status: FileStatus::Modified,
        })
        .collect();
    let mut session = plain.clone();
    session.revert = Some(RevertDescriptor {
        message_id: ids.message(),
        part_id: None,
        snapshot: Some(SnapshotId::parse(&"ab".repeat(20)).expect("40 hex digits")),
        diff: Some((0..files).map(patch).collect()),
    });
    let diff_event = Event {
        id: ids.event(),
        payload: EventPayload::SessionDiff {
            session_id: session.id.clone(),
            diff: diff.clone(),
        },
    };
    let updated_event = updated(ids, &session);
    let transaction = transaction(
        vec![
            Change::SetSessionDiff {
                session: session.id.clone(),
                diff,
            },
            Change::PutSession(Box::new(session.clone())),
        ],
        vec![diff_event, updated_event],
    );
    (session, transaction)
}

/// A new session, stored.
async fn stored_session(repo: &SqlRepo, ids: &Ids) -> Session {
    let stored = session(ids, "/work/shared");
    repo.commit(transaction(
        vec![Change::PutSession(Box::new(stored.clone()))],
        vec![],
    ))
    .await
    .expect("the session is stored");
    stored
}

/// `table` names a table of rewind's schema (`prefix` is the PostgreSQL schema, quoted, and a dot).
async fn texts_are_stored_once_and_deleted_when_unreferenced(
    repo: &SqlRepo,
    raw: &DatabaseConnection,
    prefix: &str,
) {
    let table = |name: &str| format!("{prefix}{name}");
    let shared_rows = || {
        number(
            raw,
            format!("SELECT count(*) AS n FROM {}", table("shared_text")),
        )
    };
    let ids = Ids::default();
    let plain = stored_session(repo, &ids).await;
    let (reverted, result) = revert_result(&ids, &plain, 20);
    let text_len = reverted
        .revert
        .as_ref()
        .and_then(|r| r.diff.as_ref())
        .map_or(0, String::len);
    repo.commit(result)
        .await
        .expect("the revert's result commits");

    assert_eq!(
        shared_rows().await,
        2,
        "one shared row for the text diff, one for the session diff"
    );
    let shared_bytes = number(
        raw,
        format!(
            "SELECT sum(length(body)) AS n FROM {}",
            table("shared_text")
        ),
    )
    .await;
    assert!(
        shared_bytes > 2 * text_len as i64,
        "the shared rows hold both texts ({shared_bytes} bytes)"
    );
    let elsewhere = number(
        raw,
        format!(
            "SELECT (SELECT sum(length(body)) FROM {}) + (SELECT sum(length(body)) FROM {}) \
             + (SELECT sum(length(body)) FROM {}) AS n",
            table("session"),
            table("session_diff"),
            table("event_outbox")
        ),
    )
    .await;
    assert!(
        elsewhere < 4_000,
        "the session, the session diff and the events hold no copy of the texts ({elsewhere} bytes)"
    );
    assert_eq!(
        repo.session(&plain.id).await.expect("reads"),
        Some(reverted.clone()),
        "the session reads back with its text diff"
    );
    // The same texts stored again (a revert with the same diffs: an undo and redo loop writes them over
    // and over) reference the rows already there (black-box: each revert added copies).
    let other = stored_session(repo, &ids).await;
    let (other_reverted, same) = revert_result(&ids, &other, 20);
    repo.commit(same).await.expect("the same revert commits");
    assert_eq!(shared_rows().await, 2, "no copy of the same texts");
    assert_eq!(
        repo.session(&other.id).await.expect("reads"),
        Some(other_reverted.clone()),
        "and it reads back whole"
    );
    // A rename of the reverted session announces it whole (from a stale copy: the event is the session
    // as stored), referencing the text the session row references: no copy in the outbox either.
    let outbox_bytes = || {
        number(
            raw,
            format!(
                "SELECT sum(length(body)) AS n FROM {}",
                table("event_outbox")
            ),
        )
    };
    let before_rename = outbox_bytes().await;
    let when = ids.tick();
    repo.commit(transaction(
        vec![Change::UpdateSession {
            session: other.id.clone(),
            fields: SessionFields::title("renamed while reverted".to_owned()),
            updated: when,
        }],
        vec![updated(&ids, &other)],
    ))
    .await
    .expect("the rename commits");
    let mut renamed = other_reverted;
    renamed.title = "renamed while reverted".to_owned();
    renamed.time.updated = when;
    let added = outbox_bytes().await - before_rename;
    assert!(
        added < 2_000,
        "the rename's event holds no copy of the text ({added} bytes)"
    );
    assert_eq!(shared_rows().await, 2, "nor a new shared row");
    let newest = repo.events_after(0, 100).await.expect("the outbox reads");
    assert_eq!(
        newest.last().map(|e| e.event.payload.clone()),
        Some(EventPayload::SessionUpdated {
            session_id: other.id.clone(),
            info: Box::new(renamed),
        }),
        "the rename's event reads back as the session stored, text and all"
    );
    repo.commit(transaction(
        vec![Change::DeleteSession(other.id.clone())],
        vec![],
    ))
    .await
    .expect("the other session goes");

    // Unrevert: the session no longer references its text, but the outbox's events still do.
    repo.commit(transaction(
        vec![Change::PutSession(Box::new(plain.clone()))],
        vec![updated(&ids, &plain)],
    ))
    .await
    .expect("the unrevert commits");
    assert_eq!(shared_rows().await, 2, "texts the outbox references stay");
    // The old events go: the text diff is referenced by nothing now; the session diff still is.
    repo.commit(transaction(
        vec![Change::DeleteEventsThrough { seq: u64::MAX }],
        vec![],
    ))
    .await
    .expect("the old events are deleted");
    assert_eq!(
        shared_rows().await,
        1,
        "the unreferenced text is deleted, the session diff's stays"
    );
    let diff = repo
        .session_diff(&plain.id)
        .await
        .expect("the session diff reads");
    assert_eq!(diff.len(), 20, "the session diff reads back whole");

    // A reference that leads nowhere (the database changed behind rewind's back) is an error.
    raw.execute_unprepared(&format!("DELETE FROM {}", table("shared_text")))
        .await
        .expect("the shared text is deleted by hand");
    let error = repo
        .session_diff(&plain.id)
        .await
        .expect_err("a session diff whose text is missing is an error, not an empty diff");
    assert!(
        error.to_string().contains("missing"),
        "the error says the text is missing: {error}"
    );

    // Deleting the session deletes what only it referenced.
    let (_, second) = revert_result(&ids, &plain, 10);
    repo.commit(second).await.expect("a second revert commits");
    repo.commit(transaction(
        vec![
            Change::DeleteSession(plain.id.clone()),
            Change::DeleteEventsThrough { seq: u64::MAX },
        ],
        vec![],
    ))
    .await
    .expect("the session and the old events are deleted");
    assert_eq!(
        shared_rows().await,
        1,
        "only the text the newest event references is left"
    );

    // A text that only this transaction's own event references survives the sweep the transaction runs.
    let again = stored_session(repo, &ids).await;
    let (last, mut result) = revert_result(&ids, &again, 10);
    result.changes.push(Change::DeleteSession(again.id.clone()));
    repo.commit(result)
        .await
        .expect("a revert and a delete commit together");
    let newest = repo.events_after(0, 100).await.expect("the outbox reads");
    let Some(EventPayload::SessionUpdated { info, .. }) = newest.last().map(|e| &e.event.payload)
    else {
        panic!("the transaction's session.updated event is the newest");
    };
    assert!(
        **info == last,
        "the event reads back with its whole text diff after the transaction's sweep"
    );

    // A process that predates shared texts, still running after the migration, writes bodies inline and
    // leaves the reference columns as they were: what it wrote is what reads back.
    let older = stored_session(repo, &ids).await;
    let (_, result) = revert_result(&ids, &older, 10);
    repo.commit(result)
        .await
        .expect("its revert commits, sharing its texts");
    let body = serde_json::to_string(&older).expect("a session encodes");
    for sql in [
        format!(
            "UPDATE {} SET body = '{}' WHERE id = '{}'",
            table("session"),
            body.replace('\'', "''"),
            older.id
        ),
        format!(
            "UPDATE {} SET body = '[]' WHERE session_id = '{}'",
            table("session_diff"),
            older.id
        ),
    ] {
        raw.execute_unprepared(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    assert_eq!(
        repo.session(&older.id).await.expect("the session reads"),
        Some(older.clone()),
        "the unreverted body an older process wrote is what reads back"
    );
    assert_eq!(
        repo.session_diff(&older.id)
            .await
            .expect("the session diff reads"),
        Vec::<FileDiff>::new(),
        "the session diff an older process wrote is what reads back"
    );
}

/// `outbox_over` counts a shared text once, however many events name it, at the newest event that names
/// it: the same revert stored twice (as an undo, redo and undo again store it) has four events naming two
/// shared rows, and the database's own sums are the oracle. Counting each event's text in full would put
/// the outbox at twice its stored size and cut events that fit; counting a text at the oldest event naming
/// it would let the second revert's events pass for smaller than they are.
async fn the_outbox_counts_a_shared_text_once(
    repo: &SqlRepo,
    raw: &DatabaseConnection,
    prefix: &str,
) {
    let table = |name: &str| format!("{prefix}{name}");
    let ids = Ids::default();
    let plain = stored_session(repo, &ids).await;
    for _ in 0..2 {
        let (_, result) = revert_result(&ids, &plain, 20);
        repo.commit(result)
            .await
            .expect("the revert's result commits");
    }
    let (outbox, shared) = (table("event_outbox"), table("shared_text"));
    let events = number(raw, format!("SELECT count(*) AS n FROM {outbox}")).await;
    let rows = number(raw, format!("SELECT count(*) AS n FROM {shared}")).await;
    let referenced = number(
        raw,
        format!("SELECT count(DISTINCT body_ref) AS n FROM {outbox} WHERE body_ref IS NOT NULL"),
    )
    .await;
    assert_eq!(
        (events, rows, referenced),
        (4, 2, 2),
        "four events name the two shared texts"
    );
    let own = number(
        raw,
        format!("SELECT CAST(sum(octet_length(body)) AS BIGINT) AS n FROM {outbox}"),
    )
    .await;
    let texts = number(
        raw,
        format!("SELECT CAST(sum(octet_length(body)) AS BIGINT) AS n FROM {shared}"),
    )
    .await;
    assert!(
        texts > 4 * own,
        "the texts are most of it: {texts} and {own}"
    );
    let stored = u64::try_from(own + texts).expect("a size");
    let oldest = number(raw, format!("SELECT min(seq) AS n FROM {outbox}")).await;
    let oldest = u64::try_from(oldest).expect("a position");
    assert_eq!(
        repo.outbox_over(stored).await.expect("measured"),
        None,
        "the outbox is its stored size, each text once"
    );
    assert_eq!(
        repo.outbox_over(stored - 1).await.expect("measured"),
        Some(oldest),
        "a byte less and the oldest event passes it"
    );
    // The second revert's two events with both texts, and nothing more: the first revert's newer event
    // (its `session.updated`, whose text is counted already) passes it by its own bytes.
    let own_of = |seq: u64| {
        let sql = "SELECT CAST(octet_length(body) AS BIGINT) AS n FROM";
        number(raw, format!("{sql} {outbox} WHERE seq = {seq}"))
    };
    let newest_two = own_of(oldest + 3).await + own_of(oldest + 2).await + texts;
    let newest_two = u64::try_from(newest_two).expect("a size");
    assert_eq!(
        repo.outbox_over(newest_two).await.expect("measured"),
        Some(oldest + 1),
        "the texts count at the newest events naming them"
    );
}

/// Runs `check` on a new SQLite file: the repository, a connection of its own, and no table prefix.
fn on_sqlite(check: impl AsyncFnOnce(&SqlRepo, &DatabaseConnection, &str)) {
    run(async {
        let file = SqliteFile::new();
        let repo = file.open().await;
        let raw = Database::connect(file.config().url.as_str())
            .await
            .expect("connects");
        check(&repo, &raw, "").await;
    });
}

/// Runs `check` in a new PostgreSQL schema: the repository, an administrator's connection, and the
/// schema's name as the table prefix.
fn on_postgres(check: impl AsyncFnOnce(&SqlRepo, &DatabaseConnection, &str)) {
    run_pg(async {
        let schema = PgSchema::create().await;
        let repo = schema.open().await;
        let raw = admin(&schema.url).await;
        check(&repo, &raw, &format!("\"{}\".", schema.name)).await;
    });
}

#[test]
fn sqlite_stores_a_reverts_texts_once() {
    on_sqlite(texts_are_stored_once_and_deleted_when_unreferenced);
}

#[test]
fn postgres_stores_a_reverts_texts_once() {
    on_postgres(texts_are_stored_once_and_deleted_when_unreferenced);
}

#[test]
fn sqlite_counts_a_shared_text_once_in_the_outbox() {
    on_sqlite(the_outbox_counts_a_shared_text_once);
}

#[test]
fn postgres_counts_a_shared_text_once_in_the_outbox() {
    on_postgres(the_outbox_counts_a_shared_text_once);
}
