//! Messages and parts in OpenCode's shapes. Fields rewind does not interpret are kept as they came, so a
//! client reads back exactly what it stored, including part types rewind does not know.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::{FileDiff, MessageId, PartId, SessionId, SnapshotId, Tokens};

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The person (or a script) driving the agent.
    User,
    /// The agent: one message per model call of a turn.
    Assistant,
}

/// Message times, epoch milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MessageTime {
    /// When the message was created.
    pub created: u64,
    /// When an assistant message completed.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed: Option<u64>,
}

/// A message's info (OpenCode's `Message`): the fields rewind uses, and every other field kept in `extra`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Message {
    /// The message id.
    pub id: MessageId,
    /// Its session.
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    /// User or assistant.
    pub role: Role,
    /// Times.
    pub time: MessageTime,
    /// For an assistant message: the user message of its turn.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(rename = "parentID", default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<MessageId>,
    /// Every other field, as the client sent it (agent, model, summary, …).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The name of OpenCode's error for an interrupted assistant message.
const ABORTED_ERROR: &str = "MessageAbortedError";

impl Message {
    /// Gives the fields OpenCode's `UserMessage` and `AssistantMessage` require, and the client left out,
    /// a neutral value (rewind runs no model, and a recording agent may not say which it ran): a client
    /// typed against OpenCode's schema reads `tokens.output` or sums `cost` of every assistant message.
    /// A user message gets `agent` and `model`; an assistant message `modelID`, `providerID`, `mode`,
    /// `agent`, `path` (the session's directory), `cost` and `tokens`. Fields given are kept as given.
    pub fn fill_required_fields(&mut self, directory: &str) {
        let mut put = |key: &str, value: Value| {
            self.extra.entry(key.to_owned()).or_insert(value);
        };
        put("agent", Value::String(String::new()));
        match self.role {
            Role::User => put(
                "model",
                serde_json::json!({"providerID": "", "modelID": ""}),
            ),
            Role::Assistant => {
                put("modelID", Value::String(String::new()));
                put("providerID", Value::String(String::new()));
                put("mode", Value::String(String::new()));
                put(
                    "path",
                    serde_json::json!({"cwd": directory, "root": directory}),
                );
                put("cost", Value::from(0));
                put("tokens", tokens_value(&Tokens::default()));
            }
        }
    }

    /// Counts a step that ended with `cost` and `tokens` (when the agent gave them) in an assistant
    /// message's own `cost` and `tokens`, as OpenCode's processor does: the cost is added, and the tokens
    /// are the last step's (what the model's context held).
    pub fn add_step_usage(&mut self, cost: f64, tokens: Option<&Tokens>) {
        let before = self
            .extra
            .get("cost")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        // A client's own huge `cost` is left as it was rather than made infinite (JSON `null`).
        if (before + cost).is_finite() {
            self.extra
                .insert("cost".to_owned(), number_value(before + cost));
        }
        if let Some(tokens) = tokens {
            self.extra.insert("tokens".to_owned(), tokens_value(tokens));
        }
    }

    /// Records how an assistant message's last step ended, as OpenCode's processor does: `finish` is the
    /// step's reason (a client reads it to tell a final answer from one that goes on), and an aborted step
    /// gives the message OpenCode's `MessageAbortedError` (a client shows the turn as interrupted), unless
    /// the client gave an error of its own. `aborted` also when the reason is not `aborted` (an abort whose
    /// end snapshot failed ends with `error`).
    pub fn note_step_end(&mut self, reason: &str, aborted: bool) {
        self.extra
            .insert("finish".to_owned(), Value::String(reason.to_owned()));
        if aborted || reason == "aborted" {
            self.extra.entry("error").or_insert_with(|| {
                serde_json::json!({
                    "name": ABORTED_ERROR,
                    "data": {"message": "The step was aborted"}
                })
            });
        }
    }

    /// Whether the message's last step ended aborted, as `note_step_end` noted it (and no step began on it
    /// since: `note_step_begun` takes it back): its reason `aborted`, or another reason (`error`: the abort's
    /// end snapshot failed) with the message's `MessageAbortedError`.
    pub fn last_step_aborted(&self) -> bool {
        match self.extra.get("finish").and_then(Value::as_str) {
            Some("aborted") => true,
            Some(_) => self.aborted_error(),
            None => false,
        }
    }

    /// Whether the message's error is OpenCode's `MessageAbortedError`.
    fn aborted_error(&self) -> bool {
        self.extra
            .get("error")
            .and_then(|error| error.get("name"))
            .and_then(Value::as_str)
            == Some(ABORTED_ERROR)
    }

    /// What a cleanup that cuts steps from the message (a revert to one of its parts, made permanent) leaves
    /// of their sums: their `cut_cost` taken off the message's `cost`, and `finish` and `tokens` those of the
    /// last step it keeps (`last`: its reason and tokens), or none when it keeps none (review: the message
    /// kept the cut step's totals, and disagreed with the session's).
    pub fn note_steps_cut(&mut self, cut_cost: f64, last: Option<(&str, &Tokens)>) {
        let before = self
            .extra
            .get("cost")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        let after = (before - cut_cost).max(0.0);
        if after.is_finite() {
            self.extra.insert("cost".to_owned(), number_value(after));
        }
        self.note_step_begun();
        match last {
            Some((reason, tokens)) => {
                self.extra.insert("tokens".to_owned(), tokens_value(tokens));
                self.note_step_end(reason, false);
            }
            None => {
                self.extra.remove("tokens");
            }
        }
    }

    /// Takes back what `note_step_end` said when a step begins again on the message: it is working, and no
    /// longer interrupted (an error the client gave is kept).
    pub fn note_step_begun(&mut self) {
        self.extra.remove("finish");
        if self.aborted_error() {
            self.extra.remove("error");
        }
    }

    /// The turn's diffs on a user message (`summary.diffs`), when set.
    pub fn summary_diffs(&self) -> Option<Vec<FileDiff>> {
        let diffs = self.extra.get("summary")?.get("diffs")?;
        serde_json::from_value(diffs.clone()).ok()
    }

    /// Sets `summary.diffs` on a user message, keeping the summary's other fields.
    pub fn set_summary_diffs(&mut self, diffs: &[FileDiff]) {
        let value = serde_json::to_value(diffs).unwrap_or(Value::Array(Vec::new()));
        let summary = self
            .extra
            .entry("summary")
            .or_insert_with(|| Value::Object(Map::new()));
        if !summary.is_object() {
            *summary = Value::Object(Map::new());
        }
        if let Value::Object(fields) = summary {
            fields.insert("diffs".to_owned(), value);
        }
    }
}

/// A `text` part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TextPart {
    /// The text (empty when a client sent none; always written).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub text: String,
    /// Other fields (`synthetic`, `ignored`, `time`, `metadata`, …).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `tool` part; rewind only needs to know that it is one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolPart {
    /// Every field (`callID`, `tool`, `state`, …).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What a tool call that was still pending or running says once its step is aborted (OpenCode's processor).
const TOOL_ABORTED: &str = "Tool execution aborted";

impl ToolPart {
    /// This call as its step's abort leaves it, at `now` (epoch ms), when it had not ended: its `state` is
    /// OpenCode's `ToolStateError` (`status: "error"`, `error`, `time: {start, end}`, its `input` and every
    /// other field kept), as OpenCode's processor sets it on an abort, so a client stops showing it as
    /// running. `None` for a call that completed or failed already.
    pub fn aborted(&self, now: u64) -> Option<ToolPart> {
        let state = self.extra.get("state")?.as_object()?;
        match state.get("status").and_then(Value::as_str) {
            Some("pending" | "running") => {}
            _ => return None,
        }
        let mut state = state.clone();
        let start = state
            .get("time")
            .and_then(|time| time.get("start"))
            .and_then(Value::as_u64)
            .unwrap_or(now);
        state.insert("status".to_owned(), Value::from("error"));
        state.insert("error".to_owned(), Value::from(TOOL_ABORTED));
        state.insert(
            "time".to_owned(),
            serde_json::json!({"start": start, "end": now}),
        );
        state
            .entry("input")
            .or_insert_with(|| Value::Object(Map::new()));
        let mut extra = self.extra.clone();
        extra.insert("state".to_owned(), Value::Object(state));
        Some(ToolPart { extra })
    }
}

/// A `step-start` part: the snapshot before the step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepStartPart {
    /// The snapshot taken when the step began.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotId>,
    /// Other fields.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `step-finish` part: the snapshot after the step, with its usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StepFinishPart {
    /// Why the step ended (`stop`, `tool-calls`, `aborted`, `error`, …).
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub reason: String,
    /// The snapshot after the step; absent when it could not be taken.
    #[cfg_attr(feature = "openapi", schema(nullable = false))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotId>,
    /// The step's cost.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub cost: f64,
    /// The step's tokens.
    #[cfg_attr(feature = "openapi", schema(required = true))]
    #[serde(default)]
    pub tokens: Tokens,
    /// Other fields.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A `patch` part: the files a step changed, and the snapshot from before the step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PatchPart {
    /// The snapshot at step start.
    pub hash: SnapshotId,
    /// Absolute, forward-slash paths.
    pub files: Vec<String>,
    /// Other fields.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A part's type and fields.
#[derive(Clone, Debug, PartialEq)]
pub enum PartBody {
    /// `text`
    Text(TextPart),
    /// `tool`
    Tool(ToolPart),
    /// `step-start`
    StepStart(StepStartPart),
    /// `step-finish`
    StepFinish(StepFinishPart),
    /// `patch`
    Patch(PatchPart),
    /// Any other type (`reasoning`, `file`, `agent`, …, or one rewind has never heard of), kept as it came.
    Other {
        /// The `type` field.
        kind: String,
        /// Every other field.
        fields: Map<String, Value>,
    },
}

impl PartBody {
    /// The `type` field.
    pub fn kind(&self) -> &str {
        match self {
            PartBody::Text(_) => "text",
            PartBody::Tool(_) => "tool",
            PartBody::StepStart(_) => "step-start",
            PartBody::StepFinish(_) => "step-finish",
            PartBody::Patch(_) => "patch",
            PartBody::Other { kind, .. } => kind,
        }
    }

    /// A plain text part.
    pub fn text(text: impl Into<String>) -> Self {
        PartBody::Text(TextPart {
            text: text.into(),
            extra: Map::new(),
        })
    }
}

impl Serialize for PartBody {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error as _;
        let value = match self {
            PartBody::Text(p) => serde_json::to_value(p),
            PartBody::Tool(p) => serde_json::to_value(p),
            PartBody::StepStart(p) => serde_json::to_value(p),
            PartBody::StepFinish(p) => serde_json::to_value(p),
            PartBody::Patch(p) => serde_json::to_value(p),
            PartBody::Other { fields, .. } => Ok(Value::Object(fields.clone())),
        }
        .map_err(S::Error::custom)?;
        let mut fields = match value {
            Value::Object(fields) => fields,
            _ => Map::new(),
        };
        fields.insert("type".to_owned(), Value::String(self.kind().to_owned()));
        fields.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for PartBody {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut fields = Map::<String, Value>::deserialize(deserializer)?;
        let kind = match fields.remove("type") {
            Some(Value::String(kind)) => kind,
            Some(_) => return Err(D::Error::custom("part field \"type\" must be a string")),
            None => return Err(D::Error::missing_field("type")),
        };
        let rest = Value::Object(fields);
        let body = match kind.as_str() {
            "text" => PartBody::Text(serde_json::from_value(rest).map_err(D::Error::custom)?),
            "tool" => PartBody::Tool(serde_json::from_value(rest).map_err(D::Error::custom)?),
            "step-start" => {
                PartBody::StepStart(serde_json::from_value(rest).map_err(D::Error::custom)?)
            }
            "step-finish" => {
                PartBody::StepFinish(serde_json::from_value(rest).map_err(D::Error::custom)?)
            }
            "patch" => PartBody::Patch(serde_json::from_value(rest).map_err(D::Error::custom)?),
            _ => match rest {
                Value::Object(fields) => PartBody::Other { kind, fields },
                _ => PartBody::Other {
                    kind,
                    fields: Map::new(),
                },
            },
        };
        Ok(body)
    }
}

/// A part of a message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Part {
    /// The part id.
    pub id: PartId,
    /// Its session.
    #[serde(rename = "sessionID")]
    pub session_id: SessionId,
    /// Its message.
    #[serde(rename = "messageID")]
    pub message_id: MessageId,
    /// Its type and fields.
    #[serde(flatten)]
    pub body: PartBody,
}

impl Part {
    /// True for the parts whose presence keeps a part-level revert point (`text`, `tool`).
    pub fn is_text_or_tool(&self) -> bool {
        matches!(self.body, PartBody::Text(_) | PartBody::Tool(_))
    }

    /// The patch, when this is a patch part.
    pub fn as_patch(&self) -> Option<&PatchPart> {
        match &self.body {
            PartBody::Patch(p) => Some(p),
            _ => None,
        }
    }
}

/// A message with the id of its last part, without the parts' bodies: what appending to it needs (a new
/// part's id must sort after the last), read without the parts a long message holds.
#[derive(Clone, Debug, PartialEq)]
pub struct MessageHead {
    /// The message.
    pub info: Message,
    /// Its last part's id (parts are in id order), if it has any.
    pub last_part: Option<PartId>,
}

/// A message with its parts in id order (`{info, parts}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MessageWithParts {
    /// The message.
    pub info: Message,
    /// Its parts, ascending.
    pub parts: Vec<Part>,
}

/// `tokens` as JSON, whole counts as integers (`3`, not `3.0`).
fn tokens_value(tokens: &Tokens) -> Value {
    let mut value = serde_json::json!({
        "input": number_value(tokens.input),
        "output": number_value(tokens.output),
        "reasoning": number_value(tokens.reasoning),
        "cache": {
            "read": number_value(tokens.cache.read),
            "write": number_value(tokens.cache.write),
        },
    });
    if let (Some(total), Value::Object(map)) = (tokens.total, &mut value) {
        map.insert("total".to_owned(), number_value(total));
    }
    value
}

/// A number as JSON: an integer when it is a whole number that fits one.
fn number_value(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        Value::from(n as i64)
    } else {
        Value::from(n)
    }
}
