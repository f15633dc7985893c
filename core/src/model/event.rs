//! Events (SPEC section 10): written to the outbox in the transaction of the change they describe, then
//! relayed to subscribers. The JSON form is `{id, type, properties}`.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::{FileDiff, Message, MessageId, Part, PartId, Session, SessionId, SnapshotId};
use crate::id::EventId;

/// Whether a session is working.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum SessionStatus {
    /// No step is open.
    Idle,
    /// A step is open.
    Busy,
}

/// The type and properties of an event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", content = "properties")]
pub enum EventPayload {
    /// The first event of every stream.
    #[serde(rename = "server.connected")]
    ServerConnected {},
    /// Sent every 10 seconds.
    #[serde(rename = "server.heartbeat")]
    ServerHeartbeat {},
    /// The subscriber fell behind and missed events: it must re-read state.
    #[serde(rename = "server.lagged")]
    ServerLagged {
        /// How many events it missed.
        missed: u64,
    },
    /// A session was created.
    #[serde(rename = "session.created")]
    SessionCreated {
        /// The session.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// The session as stored.
        info: Box<Session>,
    },
    /// A session changed.
    #[serde(rename = "session.updated")]
    SessionUpdated {
        /// The session.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// The session as stored after the change.
        info: Box<Session>,
    },
    /// A session was deleted.
    #[serde(rename = "session.deleted")]
    SessionDeleted {
        /// The session.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// The session as it was.
        info: Box<Session>,
    },
    /// The diff of a revert.
    #[serde(rename = "session.diff")]
    SessionDiff {
        /// The session.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// The changes undone, forward direction.
        diff: Vec<FileDiff>,
    },
    /// Something the user should know about the session's files.
    #[serde(rename = "session.warning")]
    SessionWarning {
        /// The session.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// What happened.
        message: String,
        /// A snapshot holding what was overwritten.
        #[cfg_attr(feature = "openapi", schema(nullable = false))]
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot: Option<SnapshotId>,
        /// The files concerned (absolute paths).
        files: Vec<String>,
    },
    /// The session became busy or idle.
    #[serde(rename = "session.status")]
    SessionStatus {
        /// The session.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// Busy or idle.
        status: SessionStatus,
    },
    /// The session became idle: sent after `session.status` idle, as OpenCode still sends it (its
    /// clients' event type has it, and scripts wait for it).
    #[serde(rename = "session.idle")]
    SessionIdle {
        /// The session.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
    },
    /// A message was created or changed.
    #[serde(rename = "message.updated")]
    MessageUpdated {
        /// The session.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// The message.
        info: Box<Message>,
    },
    /// A message was removed by cleanup.
    #[serde(rename = "message.removed")]
    MessageRemoved {
        /// The session.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// The message.
        #[serde(rename = "messageID")]
        message_id: MessageId,
    },
    /// A part was created or changed.
    #[serde(rename = "message.part.updated")]
    PartUpdated {
        /// The session.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// The part.
        part: Box<Part>,
        /// When, epoch milliseconds.
        time: u64,
    },
    /// A part was removed by cleanup.
    #[serde(rename = "message.part.removed")]
    PartRemoved {
        /// The session.
        #[serde(rename = "sessionID")]
        session_id: SessionId,
        /// The message.
        #[serde(rename = "messageID")]
        message_id: MessageId,
        /// The part.
        #[serde(rename = "partID")]
        part_id: PartId,
    },
}

impl EventPayload {
    /// The session an event is about, and the session itself when the event carries it; `None` for the
    /// server's own events.
    pub fn session(&self) -> Option<(&SessionId, Option<&Session>)> {
        match self {
            EventPayload::ServerConnected {}
            | EventPayload::ServerHeartbeat {}
            | EventPayload::ServerLagged { .. } => None,
            EventPayload::SessionCreated { session_id, info }
            | EventPayload::SessionUpdated { session_id, info }
            | EventPayload::SessionDeleted { session_id, info } => Some((session_id, Some(info))),
            EventPayload::SessionDiff { session_id, .. }
            | EventPayload::SessionWarning { session_id, .. }
            | EventPayload::SessionStatus { session_id, .. }
            | EventPayload::SessionIdle { session_id }
            | EventPayload::MessageUpdated { session_id, .. }
            | EventPayload::MessageRemoved { session_id, .. }
            | EventPayload::PartUpdated { session_id, .. }
            | EventPayload::PartRemoved { session_id, .. } => Some((session_id, None)),
        }
    }

    /// The `type` field.
    pub fn kind(&self) -> &'static str {
        match self {
            EventPayload::ServerConnected {} => "server.connected",
            EventPayload::ServerHeartbeat {} => "server.heartbeat",
            EventPayload::ServerLagged { .. } => "server.lagged",
            EventPayload::SessionCreated { .. } => "session.created",
            EventPayload::SessionUpdated { .. } => "session.updated",
            EventPayload::SessionDeleted { .. } => "session.deleted",
            EventPayload::SessionDiff { .. } => "session.diff",
            EventPayload::SessionWarning { .. } => "session.warning",
            EventPayload::SessionStatus { .. } => "session.status",
            EventPayload::SessionIdle { .. } => "session.idle",
            EventPayload::MessageUpdated { .. } => "message.updated",
            EventPayload::MessageRemoved { .. } => "message.removed",
            EventPayload::PartUpdated { .. } => "message.part.updated",
            EventPayload::PartRemoved { .. } => "message.part.removed",
        }
    }
}

/// An event with its id.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// `evt_…`
    pub id: EventId,
    /// Type and properties.
    pub payload: EventPayload,
}

impl Serialize for Event {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error as _;
        let mut value = serde_json::to_value(&self.payload).map_err(S::Error::custom)?;
        if let Value::Object(fields) = &mut value {
            fields.insert("id".to_owned(), Value::String(self.id.as_str().to_owned()));
        }
        value.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut value = Value::deserialize(deserializer)?;
        let id = match value.as_object_mut().and_then(|fields| fields.remove("id")) {
            Some(Value::String(id)) => EventId::parse(&id).map_err(D::Error::custom)?,
            _ => return Err(D::Error::missing_field("id")),
        };
        let payload = serde_json::from_value(value).map_err(D::Error::custom)?;
        Ok(Event { id, payload })
    }
}

/// An event as the outbox holds it: with its position in commit order.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredEvent {
    /// The outbox position; ascending in commit order, no gaps among committed events.
    pub seq: u64,
    /// The event.
    pub event: Event,
}
