//! The `rewind_identity` table: one row holding a random identity drawn when the database is first
//! migrated. The snapshot stores of a PostgreSQL database are keyed on it (SPEC 2.1: one store per
//! worktree and database), so every spelling of the database's URL (`localhost` or `127.0.0.1`, with or
//! without the default port, `postgres://` or `postgresql://`, query parameters) finds the same stores.
//! Black-box: an `undo` through another spelling than the `exec` found no snapshot.

use sea_orm::DbBackend;
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

#[derive(DeriveIden)]
enum RewindIdentity {
    Table,
    Id,
    Value,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(RewindIdentity::Table)
                    .col(
                        ColumnDef::new(RewindIdentity::Id)
                            .integer()
                            .not_null()
                            .primary_key(),
                    )
                    .col(ColumnDef::new(RewindIdentity::Value).text().not_null())
                    .to_owned(),
            )
            .await?;
        // 128 random bits, drawn by the database itself.
        let random = match manager.get_database_backend() {
            DbBackend::Postgres => {
                "md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text)"
            }
            _ => "lower(hex(randomblob(16)))",
        };
        manager
            .get_connection()
            .execute_unprepared(&format!(
                "INSERT INTO rewind_identity (id, value) VALUES (1, {random})"
            ))
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(RewindIdentity::Table).to_owned())
            .await
    }

    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}
