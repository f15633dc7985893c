//! Request bodies and query strings of the HTTP API, in OpenCode's field names. Responses are the core's
//! domain types, which already serialise in OpenCode's shapes.

use rewind_core::model::{MessageId, PartId, Role, SessionId};
use rewind_core::service::NewPart;
use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};

/// `POST /session`.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct CreateSessionBody {
    /// The title (default "New session").
    pub title: Option<String>,
    /// The worktree (default: `?directory=`, the `x-opencode-directory` header, the server's directory).
    pub directory: Option<String>,
    /// The session this one is created under (OpenCode's subagent sessions): it must exist (404 otherwise).
    /// `GET /session/{id}/children` lists a session's children.
    #[serde(rename = "parentID")]
    #[schema(value_type = Option<SessionId>)]
    pub parent_id: Option<String>,
}

/// `PATCH /session/:id` (OpenCode's `session.update`): each field given replaces the stored one; absent
/// ones leave the session as it is. OpenCode's `permission` is not kept (rewind runs no tools).
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct UpdateSessionBody {
    /// The new title.
    pub title: Option<String>,
    /// The client's own data about the session, replacing what it had whole; `null` clears it.
    #[serde(default, deserialize_with = "given")]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Option<Map<String, Value>>>,
    /// `{archived}`: when the session was archived, epoch milliseconds; `null` clears it.
    pub time: Option<UpdateSessionTime>,
}

/// `PATCH /session/:id`'s `time`.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct UpdateSessionTime {
    /// When the session was archived, epoch milliseconds; `null` clears it, absent leaves it.
    #[serde(default, deserialize_with = "given")]
    #[schema(value_type = Option<u64>)]
    pub archived: Option<Option<u64>>,
}

/// A field that may be `null`: `Some(None)` when it is, `None` (by `default`) when it is absent.
fn given<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// `POST /session/:id/message`: OpenCode's prompt body (`{messageID?, parts, agent?, model?, …}`) or
/// rewind's extension (`{id?, role, parentID?, parts?}`). Fields not listed are kept on the message.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct MessageBody {
    /// The client's own message id (rewind's name).
    #[schema(value_type = Option<MessageId>)]
    pub id: Option<String>,
    /// The client's own message id (OpenCode's name).
    #[serde(rename = "messageID")]
    #[schema(value_type = Option<MessageId>)]
    pub message_id: Option<String>,
    /// `user` (default) or `assistant`.
    #[schema(value_type = Option<Role>)]
    pub role: Option<String>,
    /// For an assistant message: its turn's user message (default: the latest).
    #[serde(rename = "parentID")]
    #[schema(value_type = Option<MessageId>)]
    pub parent_id: Option<String>,
    /// The parts, each `{id?, type, …}`.
    #[serde(default)]
    #[schema(value_type = Vec<NewPart>)]
    pub parts: Vec<Value>,
}

/// The fields of a message body that are not kept on the message (a `sessionID` is checked against the
/// route and taken out before).
pub const MESSAGE_BODY_FIELDS: &[&str] =
    &["id", "messageID", "role", "parentID", "parts", "noReply"];

/// `POST /session/:id/message/:mid/step/finish`.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct StepFinishBody {
    /// Why the step ended (default `stop`).
    pub reason: Option<String>,
    /// The step's cost.
    pub cost: Option<f64>,
    /// The step's tokens `{input, output, reasoning, cache:{read, write}}`.
    pub tokens: Option<rewind_core::model::Tokens>,
}

/// `POST /session/:id/revert`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct RevertBody {
    /// The message to revert to.
    #[serde(rename = "messageID")]
    #[schema(value_type = MessageId)]
    pub message_id: String,
    /// A part of it, for a part-level revert.
    #[serde(rename = "partID")]
    #[schema(value_type = Option<PartId>)]
    pub part_id: Option<String>,
}

/// `GET /session/:id/revert/preview`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PreviewQuery {
    /// The message a revert would go to.
    #[serde(rename = "messageID")]
    #[param(value_type = MessageId)]
    pub message_id: String,
    /// A part of it.
    #[serde(rename = "partID")]
    #[param(value_type = Option<PartId>)]
    pub part_id: Option<String>,
}

/// `GET /session`: OpenCode's filters of the list.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SessionsQuery {
    /// Only sessions updated at or after this time (epoch milliseconds).
    pub start: Option<u64>,
    /// Only sessions whose title holds this text, in any case.
    pub search: Option<String>,
    /// Only the newest `limit` sessions.
    pub limit: Option<usize>,
    /// Only root sessions: those created without a `parentID`, or whose parent is gone.
    pub roots: Option<bool>,
}

/// `GET /session/:id/message`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MessagesQuery {
    /// Only the newest `limit` messages (`0`: all of them, as without it).
    pub limit: Option<usize>,
    /// OpenCode's paging cursor: only messages older than it (requires `limit`); the `X-Next-Cursor` of
    /// the previous page.
    #[param(value_type = Option<MessageId>)]
    pub before: Option<String>,
}

/// The worktree parameter every route accepts.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DirectoryParam {
    /// The worktree (also the `x-opencode-directory` header); it must lie under a project root.
    pub directory: Option<String>,
}

/// Fields of an object other than `known`.
pub fn extra_fields(mut fields: Map<String, Value>, known: &[&str]) -> Map<String, Value> {
    for key in known {
        fields.remove(*key);
    }
    fields
}
