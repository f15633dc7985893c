//! The `shared_text` table: a revert's large texts (the descriptor's text diff, the session diff), stored
//! once and referenced from the rows that would otherwise each hold a copy: the session row
//! (`session.diff_ref`), the session diff (`session_diff.body_ref`) and the outbox events that carry the
//! same text (`event_outbox.body_ref`). A row is immutable; it is deleted once nothing references it.
//! Rows written before this migration keep their texts inline (their references are null).

use sea_orm::DbBackend;
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
        for (table, column) in [
            (Session::Table.into_iden(), Session::DiffRef.into_iden()),
            (
                SessionDiff::Table.into_iden(),
                SessionDiff::BodyRef.into_iden(),
            ),
            (
                EventOutbox::Table.into_iden(),
                EventOutbox::BodyRef.into_iden(),
            ),
        ] {
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

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for (table, column) in [
            (Session::Table.into_iden(), Session::DiffRef.into_iden()),
            (
                SessionDiff::Table.into_iden(),
                SessionDiff::BodyRef.into_iden(),
            ),
            (
                EventOutbox::Table.into_iden(),
                EventOutbox::BodyRef.into_iden(),
            ),
        ] {
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
