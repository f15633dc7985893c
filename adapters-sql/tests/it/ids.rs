//! Ids sort by their bytes on every store, as Rust's string order does: SQL's order and range deletes
//! follow creation order even where a database's locale would sort differently (upper case before lower
//! case, which a natural-language collation such as ICU's `en-US` reverses).

use rewind_core::model::{MessageId, Role};
use rewind_core::ports::{Change, MessageRepo};

use crate::support::{
    Ids, PgSchema, admin, file_repo, memory_repo, message, pg_repo, run, run_pg, session,
    transaction,
};

/// Message ids that differ only in the case of their random part, where byte order and a locale's order
/// disagree.
fn tricky_ids() -> Vec<MessageId> {
    ["B", "a", "Z"]
        .iter()
        .map(|first| {
            let text = format!("msg_{:012x}{first}{}", 1, "a".repeat(13));
            MessageId::parse(&text).expect("a valid message id")
        })
        .collect()
}

async fn messages_sort_by_bytes(repo: &dyn MessageRepo) {
    let ids = Ids::default();
    let s = session(&ids, "/work/ids");
    let mut changes = vec![Change::PutSession(Box::new(s.clone()))];
    for id in tricky_ids() {
        let mut m = message(&ids, &s, Role::User);
        m.id = id;
        changes.push(Change::PutMessage(Box::new(m)));
    }
    repo.commit(transaction(changes, Vec::new()))
        .await
        .expect("commits");
    let mut expected = tricky_ids();
    expected.sort();
    let read: Vec<MessageId> = repo
        .messages(&s.id)
        .await
        .expect("reads")
        .into_iter()
        .map(|m| m.info.id)
        .collect();
    assert_eq!(
        read, expected,
        "messages come back in byte order of their ids"
    );

    // A hidden range from the middle id removes exactly the ids that sort after it by bytes.
    repo.commit(transaction(
        vec![Change::DeleteHiddenRange {
            session: s.id.clone(),
            message: expected[1].clone(),
            part: None,
        }],
        Vec::new(),
    ))
    .await
    .expect("commits");
    let kept: Vec<MessageId> = repo
        .messages(&s.id)
        .await
        .expect("reads")
        .into_iter()
        .map(|m| m.info.id)
        .collect();
    assert_eq!(
        kept,
        expected[..1].to_vec(),
        "the hidden range follows byte order"
    );
}

#[test]
fn sqlite_ids_sort_by_their_bytes() {
    run(async {
        messages_sort_by_bytes(&memory_repo().await).await;
        messages_sort_by_bytes(&file_repo().await.repo).await;
    });
}

#[test]
fn postgres_ids_sort_by_their_bytes_whatever_the_database_locale() {
    run_pg(async {
        messages_sort_by_bytes(&pg_repo().await.repo).await;

        // The CI database's locale may already sort by bytes, so check the columns' collation too.
        let schema = PgSchema::create().await;
        schema.open().await.close().await.expect("closes");
        let admin = admin(&schema.url).await;
        let rows = sea_orm::ConnectionTrait::query_all_raw(
            &admin,
            sea_orm::Statement::from_sql_and_values(
                sea_orm::DbBackend::Postgres,
                "SELECT table_name, column_name, coalesce(collation_name, '') AS collation \
                 FROM information_schema.columns \
                 WHERE table_schema = $1 AND column_name IN ('id', 'session_id', 'message_id', 'token', 'key')",
                [schema.name.clone().into()],
            ),
        )
        .await
        .expect("reads the catalog");
        assert!(
            rows.len() >= 10,
            "every id column is found, got {}",
            rows.len()
        );
        for row in rows {
            let table: String = row.try_get("", "table_name").expect("a name");
            let column: String = row.try_get("", "column_name").expect("a name");
            let collation: String = row.try_get("", "collation").expect("a collation");
            // SeaORM's own table, and the one-row table of the database's identity (an integer key).
            if table == "seaql_migrations" || table == "rewind_identity" {
                continue;
            }
            assert_eq!(collation, "C", "{table}.{column} compares by bytes");
        }
        let _ = admin.close().await;
    });
}
