//! `commit`: one database transaction per `Transaction`. It checks the guards, applies the changes in order
//! and appends the events to the outbox, all or nothing.
//!
//! Commits are serialised, so outbox positions are assigned in commit order: on SQLite by the database's
//! single write lock, taken when the transaction begins (`BEGIN IMMEDIATE`); on PostgreSQL by an exclusive
//! lock on the outbox table, taken first in every write transaction (lease takes too) and held until it
//! ends (plain reads go on beside it). Under that lock the next position is `max(seq) + 1`: a sequence
//! would leave gaps on rollback, and a reader's cursor could pass a position whose transaction had not
//! committed yet.
//!
//! Each statement is a round trip to the driver's worker, so a commit uses few: the lease guards are read
//! with one query, and a row that belongs to a session (its diff, an intent record) is written with
//! `INSERT … SELECT … WHERE EXISTS (the session)` instead of a lookup and then a write.

use std::collections::HashMap;

use rewind_core::model::{
    Event, EventPayload, MessageId, RevertHistoryEntry, Session, SessionFields, SessionId, Warning,
};
use rewind_core::ports::{Change, Guard, Transaction};
use rewind_core::{Error, Result};
use sea_orm::ActiveValue::{NotSet, Set};
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseTransaction, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
};

use crate::SqlRepo;
use crate::entity::{
    capture, event_outbox, intent, lease, message, part, revert_history, session, session_diff,
    warning,
};
use crate::error::SqlError;
use crate::hooks::Hooks;
use crate::shared::{SWEEP, Shared};

/// The most rows one `INSERT` statement writes: within every backend's bound-parameter limit for the
/// widest row written so (4 columns).
const INSERT_ROWS: usize = 500;

fn session_not_found(id: &SessionId) -> Error {
    Error::NotFound(format!("Session not found: {id}"))
}

fn message_not_found(id: &MessageId) -> Error {
    Error::NotFound(format!("Message not found: {id}"))
}

/// The fields of a stored session's body a put keeps: what a client sets (`UpdateSession`), and the
/// update time when later. Read without decoding the whole body (its revert text may be large).
#[derive(serde::Deserialize)]
struct Kept {
    title: String,
    #[serde(default)]
    metadata: Option<serde_json::Map<String, serde_json::Value>>,
    time: KeptTime,
}

#[derive(serde::Deserialize)]
struct KeptTime {
    updated: u64,
    #[serde(default)]
    archived: Option<u64>,
}

impl Kept {
    /// The client's fields, and the update time.
    fn fields(self) -> (SessionFields, u64) {
        let fields = SessionFields {
            title: Some(self.title),
            metadata: Some(self.metadata),
            archived: Some(self.time.archived),
        };
        (fields, self.time.updated)
    }
}

/// What a transaction left a session it put or updated as, or deleted from.
enum AsStored {
    /// Put: the client's fields and the update time it kept or took.
    Put { fields: SessionFields, updated: u64 },
    /// Deleted: the client's fields and the update time it had then (an update takes no lease, and may
    /// have landed after the deleting caller read the session).
    Deleted { fields: SessionFields, updated: u64 },
    /// Updated: its body as stored (its revert text out of it while `diff_ref` names the shared text
    /// holding it).
    Renamed {
        session: Box<Session>,
        diff_ref: Option<String>,
    },
}

/// Gives the `session.updated` events of the sessions put the client's fields (title, metadata, archive
/// time) and update time they were left with, and those of the sessions updated (`UpdateSession`) the
/// whole session as stored, referencing its shared revert text as the session row does (`shared`: the
/// events' references), so an update copies no large text.
fn announce_as_stored(
    events: &mut [Event],
    stored: &HashMap<SessionId, AsStored>,
    shared: &mut HashMap<usize, String>,
) {
    for (at, event) in events.iter_mut().enumerate() {
        if let EventPayload::SessionDeleted { session_id, info } = &mut event.payload
            && let Some(AsStored::Deleted { fields, updated }) = stored.get(session_id)
        {
            fields.apply_to(info);
            info.time.updated = *updated;
            continue;
        }
        let EventPayload::SessionUpdated { session_id, info } = &mut event.payload else {
            continue;
        };
        match stored.get(session_id) {
            Some(AsStored::Put { fields, updated }) => {
                fields.apply_to(info);
                info.time.updated = *updated;
            }
            Some(AsStored::Renamed { session, diff_ref }) => {
                info.clone_from(session);
                let text_out = info
                    .revert
                    .as_ref()
                    .is_some_and(|revert| revert.diff.is_none());
                match diff_ref {
                    Some(reference) if text_out => {
                        shared.insert(at, reference.clone());
                    }
                    _ => {
                        shared.remove(&at);
                    }
                }
            }
            Some(AsStored::Deleted { .. }) | None => {}
        }
    }
}

impl SqlRepo {
    pub(crate) async fn apply(&self, mut transaction: Transaction) -> Result<()> {
        let mut hooks = std::mem::take(&mut *self.hooks());
        if let Some(started) = hooks.started.take() {
            let _ = started.send(());
        }
        // Before the write lock: finding and encoding the shared texts holds no one up.
        let shared = self.share(&mut transaction)?;
        let txn = self.begin_write().await?;
        let fault = self.fault("committing a transaction");
        match self.apply_in(&txn, transaction, shared, hooks).await {
            Ok(()) => txn.commit().await.map_err(fault),
            Err(error) => {
                // The error that failed the transaction is the one to report; after a failed rollback the
                // connection is closed when it is handed back (`connect.rs`), which rolls back as well.
                let _ = txn.rollback().await;
                Err(error)
            }
        }
    }

    async fn apply_in(
        &self,
        txn: &DatabaseTransaction,
        transaction: Transaction,
        mut shared: Shared,
        hooks: Hooks,
    ) -> Result<()> {
        self.check_guards(txn, &transaction.guards).await?;
        self.insert_shared(txn, std::mem::take(&mut shared.rows))
            .await?;
        // After the events: a text this transaction's events reference must not be swept before they are in.
        let sweep = transaction.changes.iter().any(|change| {
            matches!(
                change,
                Change::DeleteSession(_) | Change::DeleteEventsThrough { .. }
            )
        });
        // What the sessions this transaction puts or renames are left as: their `session.updated` events
        // carry it.
        let mut stored = HashMap::new();
        for (at, change) in transaction.changes.into_iter().enumerate() {
            self.apply_change(txn, change, shared.changes.remove(&at), &mut stored)
                .await?;
        }
        let mut events = transaction.events;
        announce_as_stored(&mut events, &stored, &mut shared.events);
        self.append_events(txn, &events, &shared.events).await?;
        if sweep {
            self.sweep_shared(txn).await?;
        }
        if let Some(pause) = hooks.pause {
            pause.hold().await;
        }
        if hooks.fail {
            return Err(SqlError::Injected {
                target: self.target.clone(),
                what: "fail_next_commit",
            }
            .into());
        }
        Ok(())
    }

    /// Checks every guard, in order (the first that fails is the error). The leases of all lease guards
    /// are read with one query.
    async fn check_guards(&self, txn: &DatabaseTransaction, guards: &[Guard]) -> Result<()> {
        let keys: Vec<String> = guards
            .iter()
            .filter_map(|guard| match guard {
                Guard::LeaseHeld { key, .. } | Guard::LeaseNotTaken { key, .. } => {
                    Some(key.as_storage_key())
                }
                Guard::IntentExists(_)
                | Guard::RevertIs { .. }
                | Guard::MessageExists { .. }
                | Guard::LastMessageIs { .. }
                | Guard::LastPartIs { .. }
                | Guard::PartIdFree { .. } => None,
            })
            .collect();
        // Expiry is deliberately not checked: until someone takes an expired lease over, it is still
        // held. On PostgreSQL the rows are share-locked until the commit ends, and lease takes wait for
        // the outbox lock this transaction holds, so no take slips in between the check and the commit
        // (also not of a lease that has no row yet).
        let leases: HashMap<String, lease::Model> = if keys.is_empty() {
            HashMap::new()
        } else {
            lease::Entity::find()
                .filter(lease::Column::Key.is_in(keys))
                .lock_shared()
                .all(txn)
                .await
                .map_err(self.fault("checking the lease guards"))?
                .into_iter()
                .map(|row| (row.key.clone(), row))
                .collect()
        };
        for guard in guards {
            self.check_guard(txn, guard, &leases).await?;
        }
        Ok(())
    }

    /// One guard, the lease guards against `leases` (read by `check_guards`).
    async fn check_guard(
        &self,
        txn: &DatabaseTransaction,
        guard: &Guard,
        leases: &HashMap<String, lease::Model>,
    ) -> Result<()> {
        match guard {
            Guard::LeaseHeld { key, token } => match leases.get(&key.as_storage_key()) {
                Some(row) if row.token == token.0 => Ok(()),
                Some(row) => {
                    let holder = self.lease_from_row(row)?.holder;
                    Err(Error::LeaseLost(format!(
                        "the lease on {key:?} is now held by {holder} (token {})",
                        row.token
                    )))
                }
                None => Err(Error::LeaseLost(format!(
                    "the lease on {key:?} is no longer held"
                ))),
            },
            Guard::LeaseNotTaken { key, seen } => match leases.get(&key.as_storage_key()) {
                Some(row) if Some(row.token.as_str()) != seen.as_ref().map(|t| t.0.as_str()) => {
                    let holder = self.lease_from_row(row)?.holder;
                    Err(Error::lease_busy(key, holder, key.session()))
                }
                _ => Ok(()),
            },
            Guard::RevertIs { session: id, point } => {
                // Only the descriptor's message and part are read out of the session's body.
                #[derive(serde::Deserialize)]
                struct RevertOnly {
                    #[serde(default)]
                    revert: Option<rewind_core::model::RevertDescriptor>,
                }
                let stored: RevertOnly = self
                    .session_fields(txn, id, "checking a revert guard")
                    .await?
                    .ok_or_else(|| session_not_found(id))?;
                if stored.revert.map(|r| r.point()) == *point {
                    Ok(())
                } else {
                    Err(Error::revert_changed(id))
                }
            }
            Guard::MessageExists {
                session,
                message: id,
            } => {
                let found = message::Entity::find_by_id((session.to_string(), id.to_string()))
                    .select_only()
                    .column(message::Column::Id)
                    .into_tuple::<String>()
                    .one(txn)
                    .await
                    .map_err(self.fault("checking a message guard"))?;
                match found {
                    Some(_) => Ok(()),
                    None => Err(Error::revert_changed(session)),
                }
            }
            // Commits take the outbox lock first (`SqlRepo::commit`), so no other commit stores a message
            // or part between these reads and this commit.
            Guard::LastMessageIs {
                session,
                message: seen,
            } => {
                let last: Option<String> = message::Entity::find()
                    .select_only()
                    .column(message::Column::Id)
                    .filter(message::Column::SessionId.eq(session.as_str()))
                    .order_by_desc(message::Column::Id)
                    .into_tuple()
                    .one(txn)
                    .await
                    .map_err(self.fault("checking a last-message guard"))?;
                // No message is also what a deleted session has: told apart by its row.
                if last.is_some() && last.as_deref() == seen.as_ref().map(|m| m.as_str()) {
                    return Ok(());
                }
                let found = session::Entity::find_by_id(session.as_str())
                    .select_only()
                    .column(session::Column::Id)
                    .into_tuple::<String>()
                    .one(txn)
                    .await
                    .map_err(self.fault("checking a last-message guard"))?;
                match found {
                    None => Err(session_not_found(session)),
                    Some(_) if last.is_none() && seen.is_none() => Ok(()),
                    Some(_) => Err(Error::stale(
                        session,
                        format!("the last message of session {session}"),
                    )),
                }
            }
            Guard::LastPartIs {
                session,
                message,
                part: seen,
            } => {
                let last = crate::read::last_part_id(session, message)
                    .one(txn)
                    .await
                    .map_err(self.fault("checking a last-part guard"))?;
                if last.is_some() && last.as_deref() == seen.as_ref().map(|p| p.as_str()) {
                    return Ok(());
                }
                let found = crate::read::message_row(session, message)
                    .select_only()
                    .column(message::Column::Id)
                    .into_tuple::<String>()
                    .one(txn)
                    .await
                    .map_err(self.fault("checking a last-part guard"))?;
                match found {
                    None => Err(message_not_found(message)),
                    Some(_) if last.is_none() && seen.is_none() => Ok(()),
                    Some(_) => Err(Error::stale(
                        session,
                        format!("the last part of message {message}"),
                    )),
                }
            }
            // Commits take the outbox lock first (`SqlRepo::commit`), so no other commit stores a part
            // between this read and this commit.
            Guard::PartIdFree { session, part } => {
                match self.part_message_in(txn, session, part).await? {
                    Some(holder) => Err(Error::part_id_taken(part, &holder)),
                    None => Ok(()),
                }
            }
            Guard::IntentExists(token) => {
                let found = intent::Entity::find_by_id(token.0.as_str())
                    .select_only()
                    .column(intent::Column::Token)
                    .into_tuple::<String>()
                    .one(txn)
                    .await
                    .map_err(self.fault("checking an intent guard"))?;
                match found {
                    Some(_) => Ok(()),
                    None => Err(Error::LeaseLost(format!(
                        "the intent record {token} no longer exists"
                    ))),
                }
            }
        }
    }

    /// Inserts (or on `conflict` updates) a row of `table` that belongs to session `id`, only when that
    /// session exists: `INSERT … SELECT … WHERE EXISTS (the session)`, one statement where a lookup and a
    /// write were two. `NotFound` when the session does not exist (nothing written).
    async fn upsert_of_session<C: sea_orm::sea_query::IntoIden>(
        &self,
        txn: &DatabaseTransaction,
        id: &SessionId,
        table: impl sea_orm::sea_query::IntoTableRef,
        row: Vec<(C, sea_orm::Value)>,
        conflict: OnConflict,
        what: &'static str,
    ) -> Result<()> {
        use sea_orm::sea_query::{Expr, Query};
        let (columns, values): (Vec<C>, Vec<sea_orm::Value>) = row.into_iter().unzip();
        let session_exists = Query::select()
            .expr(Expr::val(1))
            .from(session::Entity)
            .and_where(session::Column::Id.eq(id.as_str()))
            .to_owned();
        let select = Query::select()
            .exprs(values.into_iter().map(Expr::val))
            .and_where(Expr::exists(session_exists))
            .to_owned();
        let mut insert = Query::insert();
        insert
            .into_table(table)
            .columns(columns)
            .select_from(select)
            .map_err(|e| SqlError::Encode {
                target: self.target.clone(),
                what,
                reason: e.to_string(),
            })?
            .on_conflict(conflict);
        let written = txn.execute(&insert).await.map_err(self.fault(what))?;
        if written.rows_affected() == 0 {
            return Err(session_not_found(id));
        }
        Ok(())
    }

    /// Some fields of session `id`'s stored body (`T` names them: serde skips the others), or none when
    /// the session does not exist; `what` names the read in an error.
    async fn session_fields<T: serde::de::DeserializeOwned>(
        &self,
        txn: &DatabaseTransaction,
        id: &SessionId,
        what: &'static str,
    ) -> Result<Option<T>> {
        let body = session::Entity::find_by_id(id.as_str())
            .select_only()
            .column(session::Column::Body)
            .into_tuple::<String>()
            .one(txn)
            .await
            .map_err(self.fault(what))?;
        body.map(|body| self.decode::<T>(&body, "session"))
            .transpose()
    }

    async fn require_session(&self, txn: &DatabaseTransaction, id: &SessionId) -> Result<()> {
        let found = session::Entity::find_by_id(id.as_str())
            .select_only()
            .column(session::Column::Id)
            .into_tuple::<String>()
            .one(txn)
            .await
            .map_err(self.fault("looking up a session"))?;
        found.map(|_| ()).ok_or_else(|| session_not_found(id))
    }

    async fn require_message(
        &self,
        txn: &DatabaseTransaction,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<()> {
        let found =
            message::Entity::find_by_id((session.as_str().to_owned(), id.as_str().to_owned()))
                .select_only()
                .column(message::Column::Id)
                .into_tuple::<String>()
                .one(txn)
                .await
                .map_err(self.fault("looking up a message"))?;
        found.map(|_| ()).ok_or_else(|| message_not_found(id))
    }

    /// Stores the texts `share` found, before the rows that reference them.
    async fn insert_shared(
        &self,
        txn: &DatabaseTransaction,
        rows: Vec<(String, String)>,
    ) -> Result<()> {
        // A row of the same text may be there already (rows are named after their text): it serves. No
        // sweep can delete it before this transaction commits its reference, as every write transaction
        // is serialised with every other one (`begin_write`).
        // One raw statement per text, which takes the text itself as its value: an entity insert copied
        // it into the statement it built, once more than this (a revert's texts are megabytes each, held
        // about five times while inserted: the statement, the driver's arguments and SQLite's binding).
        let backend = txn.get_database_backend();
        for (id, body) in rows {
            let statement = sea_orm::Statement::from_sql_and_values(
                backend,
                "INSERT INTO shared_text (id, body) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING",
                [id.into(), body.into()],
            );
            txn.execute_raw(statement)
                .await
                .map_err(self.fault("storing a shared text"))?;
        }
        Ok(())
    }

    /// Deletes the shared texts nothing references any more.
    async fn sweep_shared(&self, txn: &DatabaseTransaction) -> Result<()> {
        txn.execute_unprepared(SWEEP)
            .await
            .map_err(self.fault("deleting unreferenced shared texts"))?;
        Ok(())
    }

    /// Applies one change; `shared` names the shared text that holds the large text taken out of it.
    async fn apply_change(
        &self,
        txn: &DatabaseTransaction,
        change: Change,
        shared: Option<String>,
        stored: &mut HashMap<SessionId, AsStored>,
    ) -> Result<()> {
        match change {
            Change::PutSession(mut info) => {
                // Replacing a session keeps its messages and other rows: only the session row changes, and
                // of it not what a client sets (only `UpdateSession` changes that), nor an update time
                // later than its own.
                let kept: Option<Kept> = self
                    .session_fields(txn, &info.id, "reading a session's client fields")
                    .await?;
                if let Some(kept) = kept {
                    let (fields, updated) = kept.fields();
                    fields.apply_to(&mut info);
                    info.time.updated = info.time.updated.max(updated);
                }
                stored.insert(
                    info.id.clone(),
                    AsStored::Put {
                        fields: SessionFields::of(&info),
                        updated: info.time.updated,
                    },
                );
                let row = session::ActiveModel {
                    id: Set(info.id.as_str().to_owned()),
                    directory: Set(info.directory.clone()),
                    body: Set(self.encode(&*info, "session")?),
                    diff_ref: Set(shared),
                };
                session::Entity::insert(row)
                    .on_conflict(
                        OnConflict::column(session::Column::Id)
                            .update_columns([
                                session::Column::Directory,
                                session::Column::Body,
                                session::Column::DiffRef,
                            ])
                            .to_owned(),
                    )
                    .exec_without_returning(txn)
                    .await
                    .map_err(self.fault("storing a session"))?;
            }
            Change::UpdateSession {
                session: id,
                fields,
                updated,
            } => {
                let (body, diff_ref) = session::Entity::find_by_id(id.as_str())
                    .select_only()
                    .column(session::Column::Body)
                    .column(session::Column::DiffRef)
                    .into_tuple::<(String, Option<String>)>()
                    .one(txn)
                    .await
                    .map_err(self.fault("reading a session"))?
                    .ok_or_else(|| session_not_found(&id))?;
                // The body as stored (a revert text `share` took out stays out, under its reference).
                let mut session: Session = self.decode_row(&body, "session", id.as_str())?;
                fields.apply_to(&mut session);
                session.time.updated = session.time.updated.max(updated);
                session::Entity::update_many()
                    .col_expr(
                        session::Column::Body,
                        sea_orm::sea_query::Expr::value(self.encode(&session, "session")?),
                    )
                    .filter(session::Column::Id.eq(id.as_str()))
                    .exec(txn)
                    .await
                    .map_err(self.fault("updating a session"))?;
                stored.insert(
                    id,
                    AsStored::Renamed {
                        session: Box::new(session),
                        diff_ref,
                    },
                );
            }
            Change::DeleteSession(id) => {
                self.require_session(txn, &id).await?;
                let kept: Option<Kept> = self
                    .session_fields(txn, &id, "reading a session's client fields")
                    .await?;
                if let Some(kept) = kept {
                    let (fields, updated) = kept.fields();
                    stored.insert(id.clone(), AsStored::Deleted { fields, updated });
                }
                let fault = self.fault("deleting a session");
                // Children first, explicitly: the foreign keys cascade too, but the delete must not depend on
                // a connection having them switched on.
                let sid = id.as_str();
                part::Entity::delete_many()
                    .filter(part::Column::SessionId.eq(sid))
                    .exec(txn)
                    .await
                    .map_err(&fault)?;
                message::Entity::delete_many()
                    .filter(message::Column::SessionId.eq(sid))
                    .exec(txn)
                    .await
                    .map_err(&fault)?;
                session_diff::Entity::delete_many()
                    .filter(session_diff::Column::SessionId.eq(sid))
                    .exec(txn)
                    .await
                    .map_err(&fault)?;
                warning::Entity::delete_many()
                    .filter(warning::Column::SessionId.eq(sid))
                    .exec(txn)
                    .await
                    .map_err(&fault)?;
                revert_history::Entity::delete_many()
                    .filter(revert_history::Column::SessionId.eq(sid))
                    .exec(txn)
                    .await
                    .map_err(&fault)?;
                intent::Entity::delete_many()
                    .filter(intent::Column::SessionId.eq(sid))
                    .exec(txn)
                    .await
                    .map_err(&fault)?;
                session::Entity::delete_by_id(sid)
                    .exec(txn)
                    .await
                    .map_err(&fault)?;
            }
            Change::PutMessage(info) => {
                self.require_session(txn, &info.session_id).await?;
                // Replacing a message keeps its parts.
                message::Entity::insert(self.message_row(&info)?)
                    .on_conflict(
                        OnConflict::columns([message::Column::SessionId, message::Column::Id])
                            .update_column(message::Column::Body)
                            .to_owned(),
                    )
                    .exec_without_returning(txn)
                    .await
                    .map_err(self.fault("storing a message"))?;
            }
            Change::PutPart(part) => {
                self.require_session(txn, &part.session_id).await?;
                self.require_message(txn, &part.session_id, &part.message_id)
                    .await?;
                part::Entity::insert(self.part_row(&part)?)
                    .on_conflict(
                        OnConflict::columns([
                            part::Column::SessionId,
                            part::Column::MessageId,
                            part::Column::Id,
                        ])
                        .update_columns([part::Column::Kind, part::Column::Body])
                        .to_owned(),
                    )
                    .exec_without_returning(txn)
                    .await
                    .map_err(self.fault("storing a part"))?;
            }
            Change::DeleteHiddenRange {
                session,
                message,
                part,
            } => {
                self.require_session(txn, &session).await?;
                self.require_message(txn, &session, &message).await?;
                self.delete_hidden_range(txn, &session, &message, part.as_ref())
                    .await?;
            }
            Change::SetSessionDiff { session, diff } => {
                let body = match shared {
                    Some(_) => String::new(),
                    None => self.encode(&diff, "session diff")?,
                };
                self.upsert_of_session(
                    txn,
                    &session,
                    session_diff::Entity,
                    vec![
                        (session_diff::Column::SessionId, session.as_str().into()),
                        (session_diff::Column::Body, body.into()),
                        (session_diff::Column::BodyRef, shared.into()),
                    ],
                    OnConflict::column(session_diff::Column::SessionId)
                        .update_columns([session_diff::Column::Body, session_diff::Column::BodyRef])
                        .to_owned(),
                    "storing a session diff",
                )
                .await?;
            }
            Change::AddWarning { session, warning } => {
                self.require_session(txn, &session).await?;
                self.add_warning(txn, &session, &warning).await?;
            }
            Change::AddRevertHistory { session, entry } => {
                self.require_session(txn, &session).await?;
                self.add_history(txn, &session, &entry).await?;
            }
            Change::PutIntent(record) => {
                let body = self.encode(&*record, "intent record")?;
                self.upsert_of_session(
                    txn,
                    &record.session_id,
                    intent::Entity,
                    vec![
                        (intent::Column::Token, record.token.0.as_str().into()),
                        (intent::Column::SessionId, record.session_id.as_str().into()),
                        (intent::Column::Directory, record.directory.as_str().into()),
                        (intent::Column::Body, body.into()),
                    ],
                    OnConflict::column(intent::Column::Token)
                        .update_columns([
                            intent::Column::SessionId,
                            intent::Column::Directory,
                            intent::Column::Body,
                        ])
                        .to_owned(),
                    "storing an intent record",
                )
                .await?;
            }
            Change::DeleteIntent(token) => {
                // Deleting an absent intent is not an error; a transaction that needs it to exist says so
                // with `Guard::IntentExists`.
                intent::Entity::delete_by_id(token.0.as_str())
                    .exec(txn)
                    .await
                    .map_err(self.fault("deleting an intent record"))?;
            }
            Change::AddCapture(record) => {
                let row = capture::ActiveModel {
                    seq: NotSet,
                    directory: Set(record.directory.clone()),
                    time: Set(i64::try_from(record.time).unwrap_or(i64::MAX)),
                    body: Set(self.encode(&*record, "capture")?),
                };
                capture::Entity::insert(row)
                    .exec_without_returning(txn)
                    .await
                    .map_err(self.fault("storing a capture"))?;
            }
            Change::DeleteCapturesBefore { before } => {
                capture::Entity::delete_many()
                    .filter(capture::Column::Time.lt(i64::try_from(before).unwrap_or(i64::MAX)))
                    .exec(txn)
                    .await
                    .map_err(self.fault("deleting old captures"))?;
            }
            Change::ReleaseLease { key, token } => self.release_on(txn, &key, &token).await?,
            Change::DeleteEventsThrough { seq } => {
                // The newest event stays, so the next position (`max(seq) + 1`) is never one a relay has
                // already passed. The caller holds the write serialisation (see the module doc).
                let last = self.last_seq_in(txn).await?;
                let through = i64::try_from(seq).unwrap_or(i64::MAX).min(last - 1);
                event_outbox::Entity::delete_many()
                    .filter(event_outbox::Column::Seq.lte(through))
                    .exec(txn)
                    .await
                    .map_err(self.fault("deleting old outbox events"))?;
            }
        }
        Ok(())
    }

    /// SPEC section 5's hidden range: every later message, and `message` itself when `part` is none, else
    /// its parts from `part` on.
    async fn delete_hidden_range(
        &self,
        txn: &DatabaseTransaction,
        session: &SessionId,
        message: &MessageId,
        part: Option<&rewind_core::model::PartId>,
    ) -> Result<()> {
        let fault = self.fault("deleting a hidden range");
        let sid = session.as_str();
        let mid = message.as_str();
        let (parts_of_later, later_messages) = match part {
            None => (
                part::Column::MessageId.gte(mid),
                message::Column::Id.gte(mid),
            ),
            Some(first) => {
                part::Entity::delete_many()
                    .filter(part::Column::SessionId.eq(sid))
                    .filter(part::Column::MessageId.eq(mid))
                    .filter(part::Column::Id.gte(first.as_str()))
                    .exec(txn)
                    .await
                    .map_err(&fault)?;
                (part::Column::MessageId.gt(mid), message::Column::Id.gt(mid))
            }
        };
        part::Entity::delete_many()
            .filter(part::Column::SessionId.eq(sid))
            .filter(parts_of_later)
            .exec(txn)
            .await
            .map_err(&fault)?;
        message::Entity::delete_many()
            .filter(message::Column::SessionId.eq(sid))
            .filter(later_messages)
            .exec(txn)
            .await
            .map_err(&fault)?;
        Ok(())
    }

    async fn add_warning(
        &self,
        txn: &DatabaseTransaction,
        session: &SessionId,
        warning: &Warning,
    ) -> Result<()> {
        let row = warning::ActiveModel {
            seq: NotSet,
            session_id: Set(session.as_str().to_owned()),
            body: Set(self.encode(warning, "warning")?),
        };
        warning::Entity::insert(row)
            .exec_without_returning(txn)
            .await
            .map_err(self.fault("storing a warning"))?;
        Ok(())
    }

    async fn add_history(
        &self,
        txn: &DatabaseTransaction,
        session: &SessionId,
        entry: &RevertHistoryEntry,
    ) -> Result<()> {
        let row = revert_history::ActiveModel {
            seq: NotSet,
            session_id: Set(session.as_str().to_owned()),
            body: Set(self.encode(entry, "revert history entry")?),
        };
        revert_history::Entity::insert(row)
            .exec_without_returning(txn)
            .await
            .map_err(self.fault("storing a revert history entry"))?;
        Ok(())
    }

    /// The last position in the outbox (0 when it is empty), read inside `txn`.
    async fn last_seq_in(&self, txn: &DatabaseTransaction) -> Result<i64> {
        Ok(event_outbox::Entity::find()
            .select_only()
            .column_as(event_outbox::Column::Seq.max(), "last")
            .into_tuple::<Option<i64>>()
            .one(txn)
            .await
            .map_err(self.fault("reading the end of the event outbox"))?
            .flatten()
            .unwrap_or(0))
    }

    /// Appends the events at the next positions. The caller holds the write serialisation (see the module
    /// doc), so `max(seq)` is the last committed position and no other writer can take the next one.
    async fn append_events(
        &self,
        txn: &DatabaseTransaction,
        events: &[rewind_core::model::Event],
        shared: &HashMap<usize, String>,
    ) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let fault = self.fault("appending to the event outbox");
        let last = self.last_seq_in(txn).await?;
        let mut rows = Vec::with_capacity(events.len());
        for (at, (seq, event)) in (last + 1..).zip(events).enumerate() {
            rows.push(event_outbox::ActiveModel {
                seq: Set(seq),
                event_id: Set(event.id.as_str().to_owned()),
                body: Set(self.encode(event, "event")?),
                body_ref: Set(shared.get(&at).cloned()),
            });
        }
        // In statements of `INSERT_ROWS` rows: one statement of them all exceeds the bound parameters a
        // statement may have (SQLite's 32,766, PostgreSQL's 65,535) from about 8,000 events, a cleanup of
        // 4,000 turns (review: such a revert could never be made permanent).
        while !rows.is_empty() {
            let rest = rows.split_off(rows.len().min(INSERT_ROWS));
            event_outbox::Entity::insert_many(rows)
                .exec_without_returning(txn)
                .await
                .map_err(&fault)?;
            rows = rest;
        }
        Ok(())
    }
}
