//! The first schema: sessions, messages, parts, the session diff, warnings, revert history, leases, intent
//! records and the event outbox, with the indexes the service's queries use.
//!
//! Ids are text compared byte by byte, so that SQL order is the ids' string order (creation order): SQLite
//! compares text that way already, and on PostgreSQL the id columns get the `C` collation, whatever the
//! database's default collation is.

use sea_orm::DbBackend;
use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub(crate) struct Migration;

#[derive(DeriveIden)]
enum Session {
    Table,
    Id,
    Directory,
    Body,
}

#[derive(DeriveIden)]
enum Message {
    Table,
    SessionId,
    Id,
    Body,
}

#[derive(DeriveIden)]
enum Part {
    Table,
    SessionId,
    MessageId,
    Id,
    Kind,
    Body,
}

#[derive(DeriveIden)]
enum SessionDiff {
    Table,
    SessionId,
    Body,
}

#[derive(DeriveIden)]
enum Warning {
    Table,
    Seq,
    SessionId,
    Body,
}

#[derive(DeriveIden)]
enum RevertHistory {
    Table,
    Seq,
    SessionId,
    Body,
}

#[derive(DeriveIden)]
enum Lease {
    Table,
    Key,
    Token,
    Holder,
    ExpiresAt,
}

#[derive(DeriveIden)]
enum Intent {
    Table,
    Token,
    SessionId,
    Directory,
    Body,
}

#[derive(DeriveIden)]
enum EventOutbox {
    Table,
    Seq,
    EventId,
    Body,
}

/// A text column compared byte by byte (ids, tokens, keys).
fn id_column(name: impl IntoIden, backend: DbBackend) -> ColumnDef {
    let mut column = ColumnDef::new(name);
    column.text().not_null();
    if backend == DbBackend::Postgres {
        column.extra("COLLATE \"C\"");
    }
    column
}

fn text_column(name: impl IntoIden) -> ColumnDef {
    ColumnDef::new(name).text().not_null().to_owned()
}

/// A `session_id` column whose rows go with their session.
fn belongs_to_session(table: impl IntoIden, column: impl IntoIden) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .from(table, column)
        .to(Session::Table, Session::Id)
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let backend = manager.get_database_backend();
        let id = |name: DynIden| id_column(name, backend);

        manager
            .create_table(
                Table::create()
                    .table(Session::Table)
                    .col(id(Session::Id.into_iden()).primary_key())
                    .col(text_column(Session::Directory))
                    .col(text_column(Session::Body))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("session_by_directory")
                    .table(Session::Table)
                    .col(Session::Directory)
                    .col(Session::Id)
                    .to_owned(),
            )
            .await?;

        // Messages of a session in id order: the primary key.
        manager
            .create_table(
                Table::create()
                    .table(Message::Table)
                    .col(id(Message::SessionId.into_iden()))
                    .col(id(Message::Id.into_iden()))
                    .col(text_column(Message::Body))
                    .primary_key(Index::create().col(Message::SessionId).col(Message::Id))
                    .foreign_key(&mut belongs_to_session(Message::Table, Message::SessionId))
                    .to_owned(),
            )
            .await?;

        // Parts of a message in id order, and of a session in (message, id) order: the primary key.
        manager
            .create_table(
                Table::create()
                    .table(Part::Table)
                    .col(id(Part::SessionId.into_iden()))
                    .col(id(Part::MessageId.into_iden()))
                    .col(id(Part::Id.into_iden()))
                    .col(text_column(Part::Kind))
                    .col(text_column(Part::Body))
                    .primary_key(
                        Index::create()
                            .col(Part::SessionId)
                            .col(Part::MessageId)
                            .col(Part::Id),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(Part::Table, (Part::SessionId, Part::MessageId))
                            .to(Message::Table, (Message::SessionId, Message::Id))
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(SessionDiff::Table)
                    .col(id(SessionDiff::SessionId.into_iden()).primary_key())
                    .col(text_column(SessionDiff::Body))
                    .foreign_key(&mut belongs_to_session(
                        SessionDiff::Table,
                        SessionDiff::SessionId,
                    ))
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Warning::Table)
                    .col(
                        ColumnDef::new(Warning::Seq)
                            .big_integer()
                            .not_null()
                            .auto_increment()
                            .primary_key(),
                    )
                    .col(id(Warning::SessionId.into_iden()))
                    .col(text_column(Warning::Body))
                    .foreign_key(&mut belongs_to_session(Warning::Table, Warning::SessionId))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("warning_by_session")
                    .table(Warning::Table)
                    .col(Warning::SessionId)
                    .col(Warning::Seq)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(RevertHistory::Table)
                    .col(
                        ColumnDef::new(RevertHistory::Seq)
                            .big_integer()
                            .not_null()
                            .auto_increment()
                            .primary_key(),
                    )
                    .col(id(RevertHistory::SessionId.into_iden()))
                    .col(text_column(RevertHistory::Body))
                    .foreign_key(&mut belongs_to_session(
                        RevertHistory::Table,
                        RevertHistory::SessionId,
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("revert_history_by_session")
                    .table(RevertHistory::Table)
                    .col(RevertHistory::SessionId)
                    .col(RevertHistory::Seq)
                    .to_owned(),
            )
            .await?;

        // Leases outlive sessions (a worktree lease has none), so no foreign key.
        manager
            .create_table(
                Table::create()
                    .table(Lease::Table)
                    .col(id(Lease::Key.into_iden()).primary_key())
                    .col(id(Lease::Token.into_iden()))
                    .col(text_column(Lease::Holder))
                    .col(ColumnDef::new(Lease::ExpiresAt).big_integer().not_null())
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Intent::Table)
                    .col(id(Intent::Token.into_iden()).primary_key())
                    .col(id(Intent::SessionId.into_iden()))
                    .col(text_column(Intent::Directory))
                    .col(text_column(Intent::Body))
                    .foreign_key(&mut belongs_to_session(Intent::Table, Intent::SessionId))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("intent_by_session")
                    .table(Intent::Table)
                    .col(Intent::SessionId)
                    .to_owned(),
            )
            .await?;

        // Positions are assigned by the committing transaction under the outbox lock, never by a sequence
        // (a rolled-back sequence value would leave a gap that a reader's cursor could skip past).
        manager
            .create_table(
                Table::create()
                    .table(EventOutbox::Table)
                    .col(
                        ColumnDef::new(EventOutbox::Seq)
                            .big_integer()
                            .not_null()
                            .primary_key(),
                    )
                    .col(text_column(EventOutbox::EventId))
                    .col(text_column(EventOutbox::Body))
                    .to_owned(),
            )
            .await?;
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            EventOutbox::Table.into_iden(),
            Intent::Table.into_iden(),
            Lease::Table.into_iden(),
            RevertHistory::Table.into_iden(),
            Warning::Table.into_iden(),
            SessionDiff::Table.into_iden(),
            Part::Table.into_iden(),
            Message::Table.into_iden(),
            Session::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }

    /// Every migration runs in a transaction on SQLite too: a failure leaves no half-made schema.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }
}
