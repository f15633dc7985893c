//! The space of deleted rows: a SQLite file rewind makes gives it back to the file system when asked
//! (`MessageRepo::reclaim_space`, which `gc` calls last), and its write-ahead log is cut back after a
//! checkpoint. SQLite itself, asked over a connection of its own, is the oracle for the pages.

use rewind_core::ports::{Change, MessageRepo};
use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};

use crate::support::{Ids, SqliteFile, run, session, transaction, updated};

/// What SQLite answers for `pragma` on a connection of its own to `file`.
async fn pragma(file: &SqliteFile, pragma: &str) -> i64 {
    let url = format!("sqlite://{}?mode=ro", file.path.display());
    let db = Database::connect(url)
        .await
        .expect("a connection of its own");
    let row = db
        .query_one_raw(Statement::from_string(DbBackend::Sqlite, pragma))
        .await
        .expect("the pragma answers")
        .expect("a row");
    let value = row.try_get_by_index::<i64>(0).expect("a number");
    let _ = db.close().await;
    value
}

#[test]
fn a_database_rewind_made_gives_the_space_of_deleted_rows_back() {
    run(async {
        let file = SqliteFile::new();
        let repo = file.open().await;
        let ids = Ids::default();
        let mut big = session(&ids, "/work/space");
        big.title = "x".repeat(200_000);
        repo.commit(transaction(
            vec![Change::PutSession(Box::new(big.clone()))],
            vec![],
        ))
        .await
        .expect("stored");
        // Twenty events of 200 KB each, then all but the newest deleted from the outbox.
        for _ in 0..20 {
            repo.commit(transaction(vec![], vec![updated(&ids, &big)]))
                .await
                .expect("stored");
        }
        let last = repo.last_event_seq().await.expect("the outbox's end");
        repo.commit(transaction(
            vec![Change::DeleteEventsThrough { seq: last }],
            vec![],
        ))
        .await
        .expect("deleted");
        assert_eq!(pragma(&file, "PRAGMA auto_vacuum").await, 2, "incremental");
        let free = pragma(&file, "PRAGMA freelist_count").await;
        assert!(
            free > 500,
            "19 events of 200 KB leave their pages free: {free}"
        );
        let page = pragma(&file, "PRAGMA page_size").await;
        let sessions = repo.sessions(None).await.expect("sessions");

        let given_back = repo.reclaim_space().await.expect("reclaimed");
        assert_eq!(given_back, u64::try_from(free * page).expect("positive"));
        assert_eq!(pragma(&file, "PRAGMA freelist_count").await, 0);
        // No row changed.
        assert_eq!(repo.sessions(None).await.expect("sessions"), sessions);
        assert_eq!(repo.last_event_seq().await.expect("the outbox's end"), last);
        assert_eq!(repo.reclaim_space().await.expect("nothing left"), 0);
    });
}

#[test]
fn a_database_in_memory_has_nothing_to_give_back() {
    run(async {
        let repo = crate::support::memory_repo().await;
        assert_eq!(repo.reclaim_space().await.expect("nothing done"), 0);
    });
}
