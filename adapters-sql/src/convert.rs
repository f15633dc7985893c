//! Where domain types and rows meet: JSON text bodies, ids as text, epoch milliseconds as `BIGINT`, lease
//! keys in their storage form, and the snapshot ids each kind of row refers to.

use std::collections::BTreeSet;

use rewind_core::Result;
use rewind_core::model::{
    Holder, Lease, LeaseKey, LeaseToken, Message, MessageWithParts, Part, PartBody, PartId,
    RevertHistoryEntry, Session, SessionId, SnapshotId, Warning,
};
use sea_orm::ActiveValue::Set;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::SqlRepo;
use crate::entity::{lease, message, part};
use crate::error::SqlError;

/// The part types whose bodies name snapshots.
pub(crate) const SNAPSHOT_PART_KINDS: [&str; 3] = ["step-start", "step-finish", "patch"];

impl SqlRepo {
    /// A value as the JSON text stored in a body column.
    pub(crate) fn encode<T: Serialize>(&self, value: &T, what: &'static str) -> Result<String> {
        serde_json::to_string(value).map_err(|e| {
            SqlError::Encode {
                target: self.target.clone(),
                what,
                reason: e.to_string(),
            }
            .into()
        })
    }

    /// A body column's JSON text as a value.
    pub(crate) fn decode<T: DeserializeOwned>(&self, text: &str, what: &'static str) -> Result<T> {
        serde_json::from_str(text).map_err(|e| self.decode_error(what, e.to_string()))
    }

    /// `decode` of the row named `row` (its id, or its position and session), which the error names.
    pub(crate) fn decode_row<T: DeserializeOwned>(
        &self,
        text: &str,
        what: &'static str,
        row: &str,
    ) -> Result<T> {
        serde_json::from_str(text).map_err(|e| self.decode_row_error(what, row, e.to_string()))
    }

    pub(crate) fn decode_error(&self, what: &'static str, reason: String) -> rewind_core::Error {
        self.decode_row_error(what, "", reason)
    }

    /// The error of a row that cannot be read: `row` names it (empty: unknown).
    pub(crate) fn decode_row_error(
        &self,
        what: &'static str,
        row: &str,
        reason: String,
    ) -> rewind_core::Error {
        SqlError::Decode {
            target: self.target.clone(),
            what,
            row: if row.is_empty() {
                String::new()
            } else {
                format!(" ({row})")
            },
            reason,
        }
        .into()
    }

    /// Epoch milliseconds (or an outbox position) as a `BIGINT`.
    pub(crate) fn u64_to_bigint(&self, value: u64, what: &'static str) -> Result<i64> {
        i64::try_from(value).map_err(|_| {
            SqlError::Encode {
                target: self.target.clone(),
                what,
                reason: format!("{value} is beyond the database's 64-bit signed range"),
            }
            .into()
        })
    }

    pub(crate) fn bigint_to_u64(&self, value: i64, what: &'static str) -> Result<u64> {
        u64::try_from(value).map_err(|_| self.decode_error(what, format!("negative value {value}")))
    }

    pub(crate) fn message_row(&self, info: &Message) -> Result<message::ActiveModel> {
        Ok(message::ActiveModel {
            session_id: Set(info.session_id.as_str().to_owned()),
            id: Set(info.id.as_str().to_owned()),
            body: Set(self.encode(info, "message")?),
        })
    }

    pub(crate) fn part_row(&self, part: &Part) -> Result<part::ActiveModel> {
        Ok(part::ActiveModel {
            session_id: Set(part.session_id.as_str().to_owned()),
            message_id: Set(part.message_id.as_str().to_owned()),
            id: Set(part.id.as_str().to_owned()),
            // The column only finds the kinds that name snapshots (`SNAPSHOT_PART_KINDS`); the body keeps
            // the type as given. A NUL byte, which a PostgreSQL text column refuses, can only be in a kind
            // rewind does not know: stored as U+FFFD there.
            kind: Set(part.body.kind().replace('\0', "\u{fffd}")),
            // Only the body: the ids live in their columns, and the body's JSON keeps its key order.
            body: Set(self.encode(&part.body, "part")?),
        })
    }

    pub(crate) fn part_from_row(&self, row: &part::Model) -> Result<Part> {
        let id_error =
            |e: rewind_core::Error| self.decode_row_error("part", &row.id, e.to_string());
        Ok(Part {
            id: PartId::parse(&row.id).map_err(id_error)?,
            session_id: SessionId::parse(&row.session_id).map_err(id_error)?,
            message_id: rewind_core::model::MessageId::parse(&row.message_id).map_err(id_error)?,
            body: self.decode_row::<PartBody>(&row.body, "part", &row.id)?,
        })
    }

    /// Messages in id order with their parts; `parts` come in (message, id) order.
    pub(crate) fn assemble(
        &self,
        messages: Vec<message::Model>,
        parts: Vec<part::Model>,
    ) -> Result<Vec<MessageWithParts>> {
        let mut by_message: std::collections::HashMap<String, Vec<Part>> =
            std::collections::HashMap::new();
        for row in &parts {
            by_message
                .entry(row.message_id.clone())
                .or_default()
                .push(self.part_from_row(row)?);
        }
        messages
            .iter()
            .map(|row| {
                Ok(MessageWithParts {
                    info: self.decode_row::<Message>(&row.body, "message", &row.id)?,
                    parts: by_message.remove(&row.id).unwrap_or_default(),
                })
            })
            .collect()
    }

    pub(crate) fn lease_row(&self, lease: &Lease) -> Result<lease::ActiveModel> {
        Ok(lease::ActiveModel {
            key: Set(lease.key.as_storage_key()),
            token: Set(lease.token.0.clone()),
            holder: Set(self.encode(&lease.holder, "lease holder")?),
            expires_at: Set(self.u64_to_bigint(lease.expires_at, "a lease's expiry")?),
        })
    }

    pub(crate) fn lease_from_row(&self, row: &lease::Model) -> Result<Lease> {
        let key = if let Some(id) = row.key.strip_prefix("session:") {
            LeaseKey::Session(
                SessionId::parse(id).map_err(|e| self.decode_error("lease", e.to_string()))?,
            )
        } else if let Some(path) = row.key.strip_prefix("worktree:") {
            LeaseKey::Worktree(path.to_owned())
        } else {
            return Err(self.decode_error("lease", format!("unknown key {:?}", row.key)));
        };
        Ok(Lease {
            key,
            token: LeaseToken(row.token.clone()),
            holder: self.decode::<Holder>(&row.holder, "lease holder")?,
            expires_at: self.bigint_to_u64(row.expires_at, "lease expiry")?,
        })
    }
}

/// The snapshots a session row refers to: its descriptor, `applied` and open step.
pub(crate) fn session_snapshots(session: &Session, out: &mut BTreeSet<SnapshotId>) {
    out.extend(session.revert.iter().filter_map(|r| r.snapshot.clone()));
    out.extend(session.applied.iter().cloned());
    out.extend(session.step.iter().map(|s| s.snapshot.clone()));
}

/// The snapshot a part refers to, if any.
pub(crate) fn part_snapshots(body: &PartBody, out: &mut BTreeSet<SnapshotId>) {
    match body {
        PartBody::StepStart(p) => out.extend(p.snapshot.iter().cloned()),
        PartBody::StepFinish(p) => out.extend(p.snapshot.iter().cloned()),
        PartBody::Patch(p) => {
            out.insert(p.hash.clone());
        }
        PartBody::Text(_) | PartBody::Tool(_) | PartBody::Other { .. } => {}
    }
}

pub(crate) fn warning_snapshots(warning: &Warning, out: &mut BTreeSet<SnapshotId>) {
    out.extend(warning.snapshot.iter().cloned());
}

pub(crate) fn history_snapshots(entry: &RevertHistoryEntry, out: &mut BTreeSet<SnapshotId>) {
    out.extend(entry.descriptor.snapshot.iter().cloned());
    out.extend(entry.applied.iter().cloned());
    for warning in &entry.warnings {
        warning_snapshots(warning, out);
    }
}

/// A message's info read without its `summary`: the field is skipped as it is parsed (no value is built
/// for it), the others are read as `Message` reads them.
pub(crate) struct WithoutSummary(pub Message);

impl<'de> serde::Deserialize<'de> for WithoutSummary {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = serde_json::Map<String, serde_json::Value>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a message object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut fields = serde_json::Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "summary" {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    } else {
                        let value = map.next_value::<serde_json::Value>()?;
                        fields.insert(key, value);
                    }
                }
                Ok(fields)
            }
        }
        let fields = deserializer.deserialize_map(Fields)?;
        serde_json::from_value(serde_json::Value::Object(fields))
            .map(WithoutSummary)
            .map_err(serde::de::Error::custom)
    }
}
