//! The `capture` table (issue 6): the worktree states `rewind snapshot restore` saved before it overwrote
//! files, so gc keeps their snapshots and a restore can itself be undone. Captures belong to a worktree,
//! not a session, so they have no foreign key and outlive a deleted session until gc's cut-off.

use sea_orm::DbBackend;
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

#[derive(DeriveIden)]
enum Capture {
    Table,
    Seq,
    Directory,
    Time,
    Body,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        let mut directory = ColumnDef::new(Capture::Directory);
        directory.text().not_null();
        if backend == DbBackend::Postgres {
            // Compared byte by byte, like the session's directory it is matched against.
            directory.extra("COLLATE \"C\"");
        }
        manager
            .create_table(
                Table::create()
                    .table(Capture::Table)
                    .col(
                        ColumnDef::new(Capture::Seq)
                            .big_integer()
                            .not_null()
                            .auto_increment()
                            .primary_key(),
                    )
                    .col(directory)
                    .col(ColumnDef::new(Capture::Time).big_integer().not_null())
                    .col(ColumnDef::new(Capture::Body).text().not_null())
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("capture_by_directory")
                    .table(Capture::Table)
                    .col(Capture::Directory)
                    .col(Capture::Seq)
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Capture::Table).to_owned())
            .await
    }

    /// Runs in a transaction on SQLite too: a failure leaves no half-made table.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}
