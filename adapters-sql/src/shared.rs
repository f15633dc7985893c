//! Large texts stored once. A revert's result transaction carries its text diff twice (the session row
//! and the `session.updated` event) and its session diff twice (the `session_diff` row and the
//! `session.diff` event). When a transaction writes a session and an event with the very same session, or a
//! session diff and an event with the very same diff, and the text is at least `MIN_BYTES` long, the text
//! goes into one `shared_text` row, which both rows reference, instead of into both bodies. A text diff
//! that holds a NUL byte stays in the bodies (JSON spells it `\u0000`; a PostgreSQL text column refuses
//! the byte itself).
//!
//! A `shared_text` row never changes. Every read joins it in the same statement as the row that names it,
//! so a read sees both from one committed state. A row is deleted by `sweep` once no session, session diff
//! or outbox event references it; `sweep` runs when outbox events are deleted and when a session is.

use std::collections::HashMap;

use rewind_core::Result;
use rewind_core::model::{Event, EventPayload, FileDiff, Session};
use rewind_core::ports::{Change, Transaction};

use crate::SqlRepo;

/// Texts shorter than this stay inline: below it, a row of its own costs more than the copy it saves.
pub(crate) const MIN_BYTES: usize = 4096;

/// Deletes every shared text that no row references.
pub(crate) const SWEEP: &str = "DELETE FROM shared_text WHERE id NOT IN (\
     SELECT diff_ref FROM session WHERE diff_ref IS NOT NULL \
     UNION ALL SELECT body_ref FROM session_diff WHERE body_ref IS NOT NULL \
     UNION ALL SELECT body_ref FROM event_outbox WHERE body_ref IS NOT NULL)";

/// What one transaction shares: the rows to insert, and which change and event reference which row.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// `(id, text)` of each new `shared_text` row.
    pub rows: Vec<(String, String)>,
    /// The row referenced by the change at an index.
    pub changes: HashMap<usize, String>,
    /// The row referenced by the event at an index.
    pub events: HashMap<usize, String>,
}

/// The revert descriptor's text diff, taken out of `session` (none when it has none).
fn take_revert_text(session: &mut Session) -> Option<String> {
    session
        .revert
        .as_mut()
        .and_then(|revert| revert.diff.take())
}

impl SqlRepo {
    /// Finds the texts `transaction` would store twice, takes them out of the change and the event, and
    /// returns them as rows to store once. Each shared row is named after its text (`Shared::add`).
    pub(crate) fn share(&self, transaction: &mut Transaction) -> Result<Shared> {
        let mut shared = Shared::default();
        let Transaction {
            changes, events, ..
        } = transaction;
        for (index, event) in events.iter_mut().enumerate() {
            match &mut event.payload {
                EventPayload::SessionUpdated { info, .. } => {
                    // A text with a NUL (a file git's 8000-byte look calls text) stays in the bodies, where
                    // JSON spells it `\u0000`: a PostgreSQL text column refuses the byte itself (kill fuzz:
                    // every revert of such a file failed).
                    let large = info
                        .revert
                        .as_ref()
                        .and_then(|revert| revert.diff.as_ref())
                        .is_some_and(|text| text.len() >= MIN_BYTES && !text.contains('\0'));
                    if !large {
                        continue;
                    }
                    let Some(at) = changes.iter().enumerate().position(|(at, change)| {
                        !shared.changes.contains_key(&at)
                            && matches!(change, Change::PutSession(session) if **session == **info)
                    }) else {
                        continue;
                    };
                    if let Change::PutSession(session) = &mut changes[at] {
                        take_revert_text(session);
                    }
                    if let Some(text) = take_revert_text(info) {
                        shared.add(text, at, index);
                    }
                }
                EventPayload::SessionDiff { session_id, diff } => {
                    if diff.is_empty() {
                        continue;
                    }
                    let Some(at) = changes.iter().enumerate().position(|(at, change)| {
                        !shared.changes.contains_key(&at)
                            && matches!(change, Change::SetSessionDiff { session, diff: stored }
                                if session == session_id && stored == diff)
                    }) else {
                        continue;
                    };
                    let text = self.encode(diff, "session diff")?;
                    if text.len() < MIN_BYTES {
                        continue;
                    }
                    if let Change::SetSessionDiff { diff: stored, .. } = &mut changes[at] {
                        stored.clear();
                    }
                    diff.clear();
                    shared.add(text, at, index);
                }
                _ => {}
            }
        }
        Ok(shared)
    }

    /// A session from its row: `body`, and the shared text its `diff_ref` names.
    ///
    /// The reference is in force only where `share` left its mark: a revert without its text. A body
    /// with no revert, or with its text inline, was written since by a process that predates shared
    /// texts (its upsert leaves `diff_ref` as it was), and the body is what that process stored.
    pub(crate) fn session_from(&self, mut row: JoinedRow) -> Result<Session> {
        let mut session: Session = self.decode(&row.body, "session")?;
        if let Some(revert) = session.revert.as_mut()
            && revert.diff.is_none()
            && let Some(text) = self.shared_of(&mut row, "session")?
        {
            revert.diff = Some(text);
        }
        Ok(session)
    }

    /// A session diff from its row. The reference is in force only with the empty body `share` leaves
    /// (an inline diff is never empty: at least `[]`); see `session_from`.
    pub(crate) fn session_diff_from(&self, mut row: JoinedRow) -> Result<Vec<FileDiff>> {
        if row.body.is_empty()
            && let Some(text) = self.shared_of(&mut row, "session diff")?
        {
            return self.decode(&text, "session diff");
        }
        self.decode(&row.body, "session diff")
    }

    /// An outbox event from its row: the shared text goes back where `share` took it from.
    pub(crate) fn event_from(&self, mut row: JoinedRow) -> Result<Event> {
        let mut event: Event = self.decode(&row.body, "event")?;
        let Some(text) = self.shared_of(&mut row, "event")? else {
            return Ok(event);
        };
        match &mut event.payload {
            EventPayload::SessionUpdated { info, .. } => match info.revert.as_mut() {
                Some(revert) => revert.diff = Some(text),
                None => {
                    return Err(self.decode_error(
                        "event",
                        "it references a revert diff but its session has no revert".to_owned(),
                    ));
                }
            },
            EventPayload::SessionDiff { diff, .. } => *diff = self.decode(&text, "session diff")?,
            _ => {
                return Err(self.decode_error(
                    "event",
                    format!(
                        "a {} event cannot reference a shared text",
                        event.payload.kind()
                    ),
                ));
            }
        }
        Ok(event)
    }

    /// The shared text a row references, or none when it references none; an error when the reference
    /// leads nowhere (the database was changed behind rewind's back).
    fn shared_of(&self, row: &mut JoinedRow, what: &'static str) -> Result<Option<String>> {
        match (&row.body_ref, row.shared.take()) {
            (None, _) => Ok(None),
            (Some(_), Some(text)) => Ok(Some(text)),
            (Some(id), None) => Err(self.decode_error(
                what,
                format!("the shared text {id} it references is missing"),
            )),
        }
    }
}

impl Shared {
    /// Shares `text` between change `change` and event `event`. The row is named after the text's content
    /// (its SHA-1), so the same text, stored again by a later revert (an undo and redo loop writes the same
    /// diffs over and over), references the row already there instead of adding a copy (black-box: 312
    /// rows held 12 texts, 573 MB of a 614 MB database).
    fn add(&mut self, text: String, change: usize, event: usize) {
        let digest = <sha1::Sha1 as sha1::Digest>::digest(text.as_bytes());
        let id = digest.iter().fold(String::from("sha1-"), |mut id, byte| {
            id.push_str(&format!("{byte:02x}"));
            id
        });
        if !self.rows.iter().any(|(known, _)| *known == id) {
            self.rows.push((id.clone(), text));
        }
        self.changes.insert(change, id.clone());
        self.events.insert(event, id);
    }
}

/// A row's body with the shared text it references, read in one statement.
#[derive(Debug, sea_orm::FromQueryResult)]
pub(crate) struct JoinedRow {
    pub body: String,
    pub body_ref: Option<String>,
    pub shared: Option<String>,
}

/// An outbox row with the shared text it references.
#[derive(Debug, sea_orm::FromQueryResult)]
pub(crate) struct JoinedEvent {
    pub seq: i64,
    pub event_id: String,
    pub body: String,
    pub body_ref: Option<String>,
    pub shared: Option<String>,
}

impl From<JoinedEvent> for JoinedRow {
    fn from(row: JoinedEvent) -> Self {
        JoinedRow {
            body: row.body,
            body_ref: row.body_ref,
            shared: row.shared,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Shared;

    /// A shared text is named `sha1-` and its SHA-1 in lowercase hex, as rows stored by earlier versions
    /// are (the published test vector of "abc"), so the same text stored again finds their row.
    #[test]
    fn a_text_is_named_after_its_sha1() {
        let mut shared = Shared::default();
        shared.add("abc".to_owned(), 0, 1);
        let name = "sha1-a9993e364706816aba3e25717850c26c9cd0d89d";
        assert_eq!(shared.rows, vec![(name.to_owned(), "abc".to_owned())]);
        assert_eq!(shared.changes.get(&0).map(String::as_str), Some(name));
        assert_eq!(shared.events.get(&1).map(String::as_str), Some(name));
    }
}
