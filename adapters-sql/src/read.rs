//! The reads of the port. A read that takes several queries (a message list and its parts, the snapshot
//! references) runs in one read transaction, so it sees one committed state.

use std::collections::BTreeSet;

use rewind_core::Result;
use rewind_core::model::{
    Capture, EventId, FileDiff, IntentRecord, Lease, LeaseKey, Message, MessageHead, MessageId,
    MessageWithParts, PartBody, PartId, RevertHistoryEntry, Session, SessionId, SnapshotId,
    StoredEvent, Warning, worktrees_overlap,
};
use sea_orm::sea_query::{Expr, LikeExpr, Query, SelectStatement};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, EntityTrait, JoinType, QueryFilter, QueryOrder,
    QuerySelect, QueryTrait, RelationDef, Select,
};

use crate::SqlRepo;
use crate::convert::{
    SNAPSHOT_PART_KINDS, history_snapshots, part_snapshots, session_snapshots, warning_snapshots,
};
use crate::entity::{
    capture, event_outbox, intent, lease, message, part, revert_history, session, session_diff,
    shared_text, warning,
};
use crate::shared::{JoinedEvent, JoinedRow};

/// How many bytes of stored event text one `events_after` reads before it stops short of its limit: a
/// batch holds at most this and one more event (a large one alone: a part of up to a request body's 8 MiB,
/// or a revert's events, which carry its whole diff).
const EVENTS_READ_BYTES: u64 = 1024 * 1024;

/// `SELECT id FROM session WHERE directory = ?`: the sessions of one worktree.
fn sessions_of(directory: &str) -> SelectStatement {
    Query::select()
        .column(session::Column::Id)
        .from(session::Entity)
        .and_where(session::Column::Directory.eq(directory))
        .to_owned()
}

/// `query` narrowed to its rows' `body`, their `reference` to a shared text as `body_ref`, and that text
/// as `shared` (a left join: one statement, so the row and its text come from one committed state).
fn with_shared<E: EntityTrait>(
    query: Select<E>,
    body: E::Column,
    reference: E::Column,
) -> Select<E> {
    query
        .select_only()
        .column(body)
        .column_as(reference, "body_ref")
        .column_as(shared_text::Column::Body, "shared")
        .join(JoinType::LeftJoin, shared_text_of::<E>(reference))
}

/// The relation from rows of `E` to the shared text their `reference` column names.
fn shared_text_of<E: EntityTrait>(reference: E::Column) -> RelationDef {
    E::belongs_to(shared_text::Entity)
        .from(reference)
        .to(shared_text::Column::Id)
        .into()
}

impl SqlRepo {
    pub(crate) async fn read_session(&self, id: &SessionId) -> Result<Option<Session>> {
        let row = with_shared(
            session::Entity::find_by_id(id.as_str()),
            session::Column::Body,
            session::Column::DiffRef,
        )
        .into_model::<JoinedRow>()
        .one(&self.db)
        .await
        .map_err(self.fault("reading a session"))?;
        row.map(|r| self.session_from(r)).transpose()
    }

    pub(crate) async fn read_sessions(&self, directory: Option<String>) -> Result<Vec<Session>> {
        // Session ids descend in time, so ascending id order is newest first.
        let query = session::Entity::find()
            .apply_if(directory, |query, directory| {
                query.filter(session::Column::Directory.eq(directory))
            })
            .order_by_asc(session::Column::Id);
        self.sessions_of(query, "listing sessions").await
    }

    /// The sessions `query` selects, in its order, each with its shared text joined.
    async fn sessions_of(
        &self,
        query: Select<session::Entity>,
        what: &'static str,
    ) -> Result<Vec<Session>> {
        let rows = with_shared(query, session::Column::Body, session::Column::DiffRef)
            .into_model::<JoinedRow>()
            .all(&self.db)
            .await
            .map_err(self.fault(what))?;
        rows.into_iter().map(|r| self.session_from(r)).collect()
    }

    /// The sessions of worktrees that overlap `directory` (`worktrees_overlap`): its ancestors by equality,
    /// the worktrees inside it by a `LIKE` on the path with `/`, whose answer is checked again here (SQLite's
    /// `LIKE` ignores ASCII case).
    pub(crate) async fn read_sessions_overlapping(&self, directory: &str) -> Result<Vec<Session>> {
        let mut around: Vec<String> = directory
            .match_indices('/')
            .map(|(at, _)| directory[..at.max(1)].to_owned())
            .collect();
        around.push(directory.to_owned());
        let escaped: String = directory
            .chars()
            .flat_map(|c| match c {
                '\\' | '%' | '_' => vec!['\\', c],
                c => vec![c],
            })
            .collect();
        let inside = LikeExpr::new(format!("{}/%", escaped.trim_end_matches('/'))).escape('\\');
        let query = session::Entity::find()
            .filter(
                Condition::any()
                    .add(session::Column::Directory.is_in(around))
                    .add(session::Column::Directory.like(inside)),
            )
            .order_by_asc(session::Column::Id);
        let mut sessions = self
            .sessions_of(query, "listing the sessions of nested worktrees")
            .await?;
        sessions.retain(|session| worktrees_overlap(&session.directory, directory));
        Ok(sessions)
    }

    pub(crate) async fn read_messages(&self, session: &SessionId) -> Result<Vec<MessageWithParts>> {
        self.read_messages_from(session, None, None).await
    }

    /// The session's messages (those from `from` on, and before `before`, when given) with their parts,
    /// ascending.
    pub(crate) async fn read_messages_from(
        &self,
        session: &SessionId,
        from: Option<&MessageId>,
        before: Option<&MessageId>,
    ) -> Result<Vec<MessageWithParts>> {
        let fault = self.fault("reading a session's messages");
        let txn = self.begin_read().await?;
        let mut messages =
            message::Entity::find().filter(message::Column::SessionId.eq(session.as_str()));
        let mut parts = part::Entity::find().filter(part::Column::SessionId.eq(session.as_str()));
        if let Some(from) = from {
            messages = messages.filter(message::Column::Id.gte(from.as_str()));
            parts = parts.filter(part::Column::MessageId.gte(from.as_str()));
        }
        if let Some(before) = before {
            messages = messages.filter(message::Column::Id.lt(before.as_str()));
            parts = parts.filter(part::Column::MessageId.lt(before.as_str()));
        }
        let messages = messages
            .order_by_asc(message::Column::Id)
            .all(&txn)
            .await
            .map_err(&fault)?;
        let parts = parts
            .order_by_asc(part::Column::MessageId)
            .order_by_asc(part::Column::Id)
            .all(&txn)
            .await
            .map_err(&fault)?;
        txn.commit().await.map_err(&fault)?;
        self.assemble(messages, parts)
    }

    pub(crate) async fn read_message(
        &self,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        let fault = self.fault("reading a message");
        let txn = self.begin_read().await?;
        let Some(row) = message_row(session, id).one(&txn).await.map_err(&fault)? else {
            txn.commit().await.map_err(&fault)?;
            return Ok(None);
        };
        let parts = parts_of(session, id)
            .order_by_asc(part::Column::Id)
            .all(&txn)
            .await
            .map_err(&fault)?;
        txn.commit().await.map_err(&fault)?;
        Ok(self.assemble(vec![row], parts)?.pop())
    }

    /// Every message of `session`, ascending, from the `message` rows alone (no part is read).
    pub(crate) async fn read_message_infos(&self, session: &SessionId) -> Result<Vec<Message>> {
        let fault = self.fault("reading a session's messages");
        let rows = message::Entity::find()
            .filter(message::Column::SessionId.eq(session.as_str()))
            .order_by_asc(message::Column::Id)
            .all(&self.db)
            .await
            .map_err(&fault)?;
        // The summary (a turn's diffs, megabytes for a big turn) is skipped as it is parsed: every message
        // recorded reads this (big-repository review: a message took 600 ms after one big turn).
        rows.iter()
            .map(|row| {
                self.decode_row::<crate::convert::WithoutSummary>(&row.body, "message", &row.id)
                    .map(|info| info.0)
            })
            .collect()
    }

    /// One message and its last part's id: the part rows' keys are read, not their bodies.
    pub(crate) async fn read_message_head(
        &self,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageHead>> {
        let fault = self.fault("reading a message");
        let txn = self.begin_read().await?;
        let Some(row) = message_row(session, id).one(&txn).await.map_err(&fault)? else {
            txn.commit().await.map_err(&fault)?;
            return Ok(None);
        };
        let last = last_part_id(session, id).one(&txn).await.map_err(&fault)?;
        txn.commit().await.map_err(&fault)?;
        Ok(Some(MessageHead {
            info: self.decode_row::<Message>(&row.body, "message", &row.id)?,
            last_part: last
                .map(|id| {
                    PartId::parse(&id).map_err(|e| self.decode_error("a part id", e.to_string()))
                })
                .transpose()?,
        }))
    }

    /// The first message (in id order) of `session` that has a part with id `id`, read on `db` (a commit's
    /// transaction, for `Guard::PartIdFree`). The part's key is (session, message, id): this reads the
    /// session's part keys, no bodies.
    pub(crate) async fn part_message_in(
        &self,
        db: &impl ConnectionTrait,
        session: &SessionId,
        id: &PartId,
    ) -> Result<Option<MessageId>> {
        let fault = self.fault("looking up a part id");
        let found: Option<String> = part::Entity::find()
            .select_only()
            .column(part::Column::MessageId)
            .filter(part::Column::SessionId.eq(session.as_str()))
            .filter(part::Column::Id.eq(id.as_str()))
            .order_by_asc(part::Column::MessageId)
            .into_tuple()
            .one(db)
            .await
            .map_err(&fault)?;
        found
            .map(|message| {
                MessageId::parse(&message)
                    .map_err(|e| self.decode_error("a part's message id", e.to_string()))
            })
            .transpose()
    }

    pub(crate) async fn read_session_diff(&self, session: &SessionId) -> Result<Vec<FileDiff>> {
        let row = with_shared(
            session_diff::Entity::find_by_id(session.as_str()),
            session_diff::Column::Body,
            session_diff::Column::BodyRef,
        )
        .into_model::<JoinedRow>()
        .one(&self.db)
        .await
        .map_err(self.fault("reading a session diff"))?;
        match row {
            Some(row) => self.session_diff_from(row),
            None => Ok(Vec::new()),
        }
    }

    pub(crate) async fn read_warnings(&self, session: &SessionId) -> Result<Vec<Warning>> {
        let rows = warning::Entity::find()
            .filter(warning::Column::SessionId.eq(session.as_str()))
            .order_by_asc(warning::Column::Seq)
            .all(&self.db)
            .await
            .map_err(self.fault("reading a session's warnings"))?;
        rows.iter()
            .map(|r| self.decode_row(&r.body, "warning", &of_session(r.seq, &r.session_id)))
            .collect()
    }

    pub(crate) async fn read_revert_history(
        &self,
        session: &SessionId,
    ) -> Result<Vec<RevertHistoryEntry>> {
        let rows = revert_history::Entity::find()
            .filter(revert_history::Column::SessionId.eq(session.as_str()))
            .order_by_asc(revert_history::Column::Seq)
            .all(&self.db)
            .await
            .map_err(self.fault("reading a session's revert history"))?;
        rows.iter()
            .map(|r| {
                self.decode_row(
                    &r.body,
                    "revert history entry",
                    &of_session(r.seq, &r.session_id),
                )
            })
            .collect()
    }

    pub(crate) async fn read_intents(&self) -> Result<Vec<IntentRecord>> {
        let rows = intent::Entity::find()
            .order_by_asc(intent::Column::Token)
            .all(&self.db)
            .await
            .map_err(self.fault("reading the intent records"))?;
        // A record that cannot be read is returned as unreadable, named by its columns: recovery refuses its
        // worktree alone, instead of every command of every worktree failing on the list (black-box).
        rows.iter()
            .map(
                |r| match self.decode::<IntentRecord>(&r.body, "intent record") {
                    Ok(intent) => Ok(intent),
                    Err(error) => match SessionId::parse(&r.session_id) {
                        Ok(session) => Ok(IntentRecord::unreadable(
                            rewind_core::model::LeaseToken(r.token.clone()),
                            session,
                            r.directory.clone(),
                            error.to_string(),
                        )),
                        Err(_) => Err(error),
                    },
                },
            )
            .collect()
    }

    pub(crate) async fn read_lease(&self, key: &LeaseKey) -> Result<Option<Lease>> {
        let row = lease::Entity::find_by_id(key.as_storage_key())
            .one(&self.db)
            .await
            .map_err(self.fault("reading a lease"))?;
        row.map(|r| self.lease_from_row(&r)).transpose()
    }

    pub(crate) async fn read_leases(&self) -> Result<Vec<Lease>> {
        let rows = lease::Entity::find()
            .all(&self.db)
            .await
            .map_err(self.fault("reading the leases"))?;
        rows.iter().map(|row| self.lease_from_row(row)).collect()
    }

    /// The events after `after`, at most `limit`, and fewer once their stored texts reach
    /// `EVENTS_READ_BYTES` (at least one when any is there: the port's rule).
    pub(crate) async fn read_events_after(
        &self,
        after: u64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>> {
        // No position is beyond the 64-bit signed range, so nothing comes after such a cursor.
        let Ok(after) = i64::try_from(after) else {
            return Ok(Vec::new());
        };
        let fault = self.fault("reading the event outbox");
        // First the positions and stored sizes of the rows asked for, with no text read into this process;
        // then the rows through the last one that fits `EVENTS_READ_BYTES` (the first, whatever its size):
        // reading rows one by one and stopping still had the driver read ahead, or the server send, every
        // row up to the limit (diff review), and a batch of large events (an 8 MiB part each) was held
        // whole by every stream catching up (review: 100 MB a stream).
        let on = shared_text_of::<event_outbox::Entity>(event_outbox::Column::BodyRef);
        let sizes: Vec<(i64, i64)> = event_outbox::Entity::find()
            .select_only()
            .column(event_outbox::Column::Seq)
            .column_as(
                Expr::cust(
                    "CAST(octet_length(event_outbox.body) + COALESCE(octet_length(shared_text.body), 0) \
                     AS BIGINT)",
                ),
                "bytes",
            )
            .join(JoinType::LeftJoin, on)
            .filter(event_outbox::Column::Seq.gt(after))
            .order_by_asc(event_outbox::Column::Seq)
            .limit(u64::from(limit))
            .into_tuple()
            .all(&self.db)
            .await
            .map_err(&fault)?;
        let mut through = None;
        let mut bytes: u64 = 0;
        for (seq, size) in sizes {
            through = Some(seq);
            bytes = bytes.saturating_add(u64::try_from(size).unwrap_or(0));
            if bytes >= EVENTS_READ_BYTES {
                break;
            }
        }
        let Some(through) = through else {
            return Ok(Vec::new());
        };
        // Rows cut by gc meanwhile are missing here too: the caller sees the gap.
        let query = event_outbox::Entity::find()
            .filter(event_outbox::Column::Seq.gt(after))
            .filter(event_outbox::Column::Seq.lte(through))
            .order_by_asc(event_outbox::Column::Seq);
        let read = with_shared(
            query,
            event_outbox::Column::Body,
            event_outbox::Column::BodyRef,
        )
        .column(event_outbox::Column::Seq)
        .column(event_outbox::Column::EventId)
        .into_model::<JoinedEvent>()
        .all(&self.db)
        .await
        .map_err(&fault)?;
        read.into_iter()
            .map(|r| {
                let seq = self.bigint_to_u64(r.seq, "event position")?;
                let id = r.event_id.clone();
                let event = match self.event_from(r.into()) {
                    Ok(event) => event,
                    // An event this version cannot read (damaged, or of a kind a newer rewind sharing the
                    // database writes) is passed on as a missed one, `server.lagged`, whose subscriber
                    // re-reads state: failing the read failed every read after it, and every event
                    // stream stopped for good (review). Its position and id stay.
                    Err(error) => rewind_core::model::Event {
                        id: EventId::parse(&id).map_err(|_| error)?,
                        payload: rewind_core::model::EventPayload::ServerLagged { missed: 1 },
                    },
                };
                Ok(StoredEvent { seq, event })
            })
            .collect()
    }

    pub(crate) async fn read_event_id_at(&self, seq: u64) -> Result<Option<EventId>> {
        let Ok(seq) = i64::try_from(seq) else {
            return Ok(None);
        };
        let id: Option<String> = event_outbox::Entity::find()
            .select_only()
            .column(event_outbox::Column::EventId)
            .filter(event_outbox::Column::Seq.eq(seq))
            .into_tuple()
            .one(&self.db)
            .await
            .map_err(self.fault("reading an event's id in the outbox"))?;
        id.map(|id| {
            EventId::parse(&id).map_err(|e| self.decode_error("outbox event id", e.to_string()))
        })
        .transpose()
    }

    /// The position alone, read from the key's index: the relay asks every poll, and reading the whole row
    /// read the last event's body, up to 8 MiB (review: an idle server made 10,000 reads a second).
    pub(crate) async fn read_last_event_seq(&self) -> Result<u64> {
        let last: Option<i64> = event_outbox::Entity::find()
            .select_only()
            .column(event_outbox::Column::Seq)
            .order_by_desc(event_outbox::Column::Seq)
            .into_tuple()
            .one(&self.db)
            .await
            .map_err(self.fault("reading the end of the event outbox"))?;
        match last {
            Some(seq) => self.bigint_to_u64(seq, "event position"),
            None => Ok(0),
        }
    }

    /// `MessageRepo::outbox_over`: the stored sizes newest first, a page at a time, with no text read
    /// into this process; a shared text counts once, at the newest event that names it.
    pub(crate) async fn read_outbox_over(&self, bytes: u64) -> Result<Option<u64>> {
        const PAGE: u64 = 1000;
        let fault = self.fault("measuring the event outbox");
        let txn = self.begin_read().await?;
        let mut counted = std::collections::HashSet::new();
        let mut total: u64 = 0;
        let mut before: Option<i64> = None;
        let over = 'pages: loop {
            let on = shared_text_of::<event_outbox::Entity>(event_outbox::Column::BodyRef);
            let rows: Vec<(i64, i64, Option<String>, i64)> = event_outbox::Entity::find()
                .select_only()
                .column(event_outbox::Column::Seq)
                .column_as(
                    Expr::cust("CAST(octet_length(event_outbox.body) AS BIGINT)"),
                    "own",
                )
                .column(event_outbox::Column::BodyRef)
                .column_as(
                    Expr::cust("CAST(COALESCE(octet_length(shared_text.body), 0) AS BIGINT)"),
                    "shared",
                )
                .join(JoinType::LeftJoin, on)
                .apply_if(before, |query, before| {
                    query.filter(event_outbox::Column::Seq.lt(before))
                })
                .order_by_desc(event_outbox::Column::Seq)
                .limit(PAGE)
                .into_tuple()
                .all(&txn)
                .await
                .map_err(&fault)?;
            let Some(&(oldest, ..)) = rows.last() else {
                break None;
            };
            for (seq, own, reference, shared) in rows {
                let mut size = u64::try_from(own).unwrap_or(0);
                if reference.is_some_and(|r| counted.insert(r)) {
                    size = size.saturating_add(u64::try_from(shared).unwrap_or(0));
                }
                total = total.saturating_add(size);
                if total > bytes {
                    break 'pages Some(seq);
                }
            }
            before = Some(oldest);
        };
        txn.commit().await.map_err(&fault)?;
        over.map(|seq| self.bigint_to_u64(seq, "event position"))
            .transpose()
    }

    pub(crate) async fn read_referenced_snapshots(
        &self,
        directory: Option<String>,
    ) -> Result<BTreeSet<SnapshotId>> {
        let fault = self.fault("listing the referenced snapshots");
        let txn = self.begin_read().await?;
        let mut out = BTreeSet::new();

        let sessions = session::Entity::find()
            .apply_if(directory.clone(), |query, directory| {
                query.filter(session::Column::Directory.eq(directory))
            })
            .all(&txn)
            .await
            .map_err(&fault)?;
        for row in &sessions {
            session_snapshots(
                &self.decode_row::<Session>(&row.body, "session", &row.id)?,
                &mut out,
            );
        }

        let parts = part::Entity::find()
            .filter(part::Column::Kind.is_in(SNAPSHOT_PART_KINDS))
            .apply_if(directory.as_deref(), |query, directory| {
                query.filter(part::Column::SessionId.in_subquery(sessions_of(directory)))
            })
            .all(&txn)
            .await
            .map_err(&fault)?;
        for row in &parts {
            part_snapshots(
                &self.decode_row::<PartBody>(&row.body, "part", &row.id)?,
                &mut out,
            );
        }

        let warnings = warning::Entity::find()
            .apply_if(directory.as_deref(), |query, directory| {
                query.filter(warning::Column::SessionId.in_subquery(sessions_of(directory)))
            })
            .all(&txn)
            .await
            .map_err(&fault)?;
        for row in &warnings {
            warning_snapshots(
                &self.decode_row::<Warning>(
                    &row.body,
                    "warning",
                    &of_session(row.seq, &row.session_id),
                )?,
                &mut out,
            );
        }

        let history = revert_history::Entity::find()
            .apply_if(directory.as_deref(), |query, directory| {
                query.filter(revert_history::Column::SessionId.in_subquery(sessions_of(directory)))
            })
            .all(&txn)
            .await
            .map_err(&fault)?;
        for row in &history {
            history_snapshots(
                &self.decode_row::<RevertHistoryEntry>(
                    &row.body,
                    "revert history entry",
                    &of_session(row.seq, &row.session_id),
                )?,
                &mut out,
            );
        }

        // An intent counts for the worktree it names.
        let intents = intent::Entity::find()
            .apply_if(directory.as_deref(), |query, directory| {
                query.filter(intent::Column::Directory.eq(directory))
            })
            .all(&txn)
            .await
            .map_err(&fault)?;
        for row in &intents {
            out.insert(
                self.decode_row::<IntentRecord>(&row.body, "intent record", &row.token)?
                    .before,
            );
        }

        let captures = capture::Entity::find()
            .apply_if(directory.as_deref(), |query, directory| {
                query.filter(capture::Column::Directory.eq(directory))
            })
            .all(&txn)
            .await
            .map_err(&fault)?;
        for row in &captures {
            out.insert(
                self.decode_row::<Capture>(&row.body, "capture", &format!("position {}", row.seq))?
                    .snapshot,
            );
        }
        txn.commit().await.map_err(&fault)?;
        Ok(out)
    }

    pub(crate) async fn read_captures(&self, directory: Option<String>) -> Result<Vec<Capture>> {
        let fault = self.fault("listing the captures");
        let rows = capture::Entity::find()
            .apply_if(directory, |query, directory| {
                query.filter(capture::Column::Directory.eq(directory))
            })
            .order_by_asc(capture::Column::Seq)
            .all(&self.db)
            .await
            .map_err(&fault)?;
        rows.iter()
            .map(|row| {
                self.decode_row::<Capture>(&row.body, "capture", &format!("position {}", row.seq))
            })
            .collect()
    }
}

/// Message `id` of `session`.
pub(crate) fn message_row(session: &SessionId, id: &MessageId) -> Select<message::Entity> {
    message::Entity::find_by_id((session.as_str().to_owned(), id.as_str().to_owned()))
}

/// The id of the last part (in id order) of message `id` of `session`: its key alone is read.
pub(crate) fn last_part_id(
    session: &SessionId,
    id: &MessageId,
) -> sea_orm::Selector<sea_orm::SelectGetableTuple<String>> {
    parts_of(session, id)
        .select_only()
        .column(part::Column::Id)
        .order_by_desc(part::Column::Id)
        .into_tuple()
}

/// The parts of message `id` of `session`.
pub(crate) fn parts_of(session: &SessionId, id: &MessageId) -> Select<part::Entity> {
    part::Entity::find()
        .filter(part::Column::SessionId.eq(session.as_str()))
        .filter(part::Column::MessageId.eq(id.as_str()))
}

/// A row of a session's numbered rows (warnings, revert history), as an error names it.
fn of_session(seq: i64, session: &str) -> String {
    format!("position {seq} of session {session}")
}
