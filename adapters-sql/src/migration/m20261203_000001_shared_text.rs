//! The `shared_text` table: a revert's large texts (the descriptor's text diff, the session diff), stored
//! once and referenced from the rows that would otherwise each hold a copy: the session row
//! (`session.diff_ref`), the session diff (`session_diff.body_ref`) and the outbox events that carry the
//! same text (`event_outbox.body_ref`). A row is immutable; it is deleted once nothing references it.
//! Rows written before this migration keep their texts inline (their references are null). A process
//! that predates it, still running, writes texts inline and leaves the references as they were; readers
//! use a reference only where the body lacks its text (see `shared.rs`). Such a process reads shared texts
//! as missing, so every process sharing a store should run this version once it has migrated (a process
//! started later with an older binary refuses the newer schema at start-up).

use sea_orm::{ConnectionTrait, DbBackend, Statement};
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

#[derive(DeriveIden)]
enum SharedText {
    Table,
    Id,
    Body,
}

#[derive(DeriveIden)]
enum Session {
    Table,
    DiffRef,
}

#[derive(DeriveIden)]
enum SessionDiff {
    Table,
    BodyRef,
}

#[derive(DeriveIden)]
enum EventOutbox {
    Table,
    BodyRef,
}

/// The columns that reference a shared text, with their tables.
fn references() -> [(DynIden, DynIden); 3] {
    [
        (Session::Table.into_iden(), Session::DiffRef.into_iden()),
        (
            SessionDiff::Table.into_iden(),
            SessionDiff::BodyRef.into_iden(),
        ),
        (
            EventOutbox::Table.into_iden(),
            EventOutbox::BodyRef.into_iden(),
        ),
    ]
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        // Ids compare by their bytes on PostgreSQL too, like every other id column.
        let text_id = |name: DynIden| {
            let mut column = ColumnDef::new(name);
            column.text();
            if backend == DbBackend::Postgres {
                column.extra("COLLATE \"C\"");
            }
            column
        };
        manager
            .create_table(
                Table::create()
                    .table(SharedText::Table)
                    .col(text_id(SharedText::Id.into_iden()).not_null().primary_key())
                    .col(ColumnDef::new(SharedText::Body).text().not_null())
                    .to_owned(),
            )
            .await?;
        // One column per statement: SQLite's ALTER TABLE adds one at a time.
        for (table, column) in references() {
            manager
                .alter_table(
                    Table::alter()
                        .table(table)
                        .add_column(text_id(column).null())
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    /// Refused while any text is shared: the bodies that reference one no longer hold it, so dropping the
    /// table would lose it.
    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let count = Statement::from_string(
            manager.get_database_backend(),
            "SELECT count(*) AS n FROM shared_text",
        );
        let shared: i64 = match manager.get_connection().query_one_raw(count).await? {
            Some(row) => row.try_get("", "n")?,
            None => 0,
        };
        if shared > 0 {
            return Err(DbErr::Migration(format!(
                "{shared} revert text(s) are stored in shared_text and referenced from other rows; undoing \
                 this migration would lose them"
            )));
        }
        for (table, column) in references() {
            manager
                .alter_table(Table::alter().table(table).drop_column(column).to_owned())
                .await?;
        }
        manager
            .drop_table(Table::drop().table(SharedText::Table).to_owned())
            .await
    }

    /// Runs in a transaction on SQLite too: a failure leaves no half-made schema.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}

#[cfg(test)]
mod tests {
    use sea_orm::{ConnectionTrait, Database, DbBackend, Statement};
    use sea_orm_migration::MigratorTrait;

    use crate::migration::Migrator;

    /// Undoing the migration is refused while a text is shared, and leaves everything as it was; with no
    /// shared text it goes through.
    #[tokio::test]
    async fn down_is_refused_while_texts_are_shared() {
        let db = Database::connect("sqlite::memory:")
            .await
            .expect("connects");
        // Up to this migration, so that undoing one step undoes it.
        let upto = Migrator::migrations()
            .iter()
            .position(|m| m.name() == "m20261203_000001_shared_text")
            .expect("known")
            + 1;
        Migrator::up(&db, Some(u32::try_from(upto).expect("few")))
            .await
            .expect("migrates");
        db.execute_unprepared("INSERT INTO shared_text (id, body) VALUES ('evt_1', 'a text')")
            .await
            .expect("a shared text is stored");
        let error = Migrator::down(&db, Some(1))
            .await
            .expect_err("undoing is refused");
        assert!(error.to_string().contains("would lose them"), "{error}");
        let left = db
            .query_one_raw(Statement::from_string(
                DbBackend::Sqlite,
                "SELECT count(*) AS n FROM shared_text",
            ))
            .await
            .expect("the table is still there")
            .expect("a row");
        assert_eq!(left.try_get::<i64>("", "n").expect("a count"), 1);

        db.execute_unprepared("DELETE FROM shared_text")
            .await
            .expect("emptied");
        Migrator::down(&db, Some(1))
            .await
            .expect("with nothing shared, undoing goes through");
        assert!(
            db.execute_unprepared("SELECT diff_ref FROM session")
                .await
                .is_err(),
            "the reference columns are gone"
        );
    }
}
