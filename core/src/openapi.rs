//! OpenAPI schemas (`utoipa`, feature `openapi`) of the domain types whose JSON form serde's attributes do not
//! say alone: the ids (strings of a fixed form), a part (its `type` chooses its fields; a type rewind does
//! not know is kept as it came), what a client may send as one (`NewPart`), and an event (`{id, type,
//! properties}`). The other types the HTTP API answers with derive theirs beside their definitions.

use std::borrow::Cow;

use serde_json::json;
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::{
    AdditionalProperties, AllOfBuilder, ObjectBuilder, OneOfBuilder, Schema, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::id::EventId;
use crate::model::{
    Event, EventPayload, MessageId, Part, PartBody, PartId, PatchPart, SessionId, SnapshotId,
    StepFinishPart, StepStartPart, TextPart, ToolPart,
};
use crate::service::NewPart;

/// A string of the form `pattern` (an ECMA-262 regular expression, anchored).
fn string_schema(pattern: &str, description: &str) -> RefOr<Schema> {
    string()
        .pattern(Some(pattern))
        .description(Some(description))
        .into()
}

/// An id of SPEC 3: `prefix_`, 12 lower-case hex digits of clock, 14 base62 characters.
fn id_schema(prefix: &str, description: &str) -> RefOr<Schema> {
    string_schema(
        &format!("^{prefix}_[0-9a-f]{{12}}[0-9A-Za-z]{{14}}$"),
        description,
    )
}

/// The schema of an id type: its prefix and what it names.
macro_rules! impl_id_schema {
    ($name:ident, $prefix:literal, $description:literal) => {
        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                id_schema($prefix, $description)
            }
        }

        impl ToSchema for $name {}
    };
}

impl_id_schema!(SessionId, "ses", "A session id (newer sessions sort first)");
impl_id_schema!(MessageId, "msg", "A message id (ascending)");
impl_id_schema!(PartId, "prt", "A part id (ascending)");
impl_id_schema!(EventId, "evt", "An event id (ascending)");

impl PartialSchema for SnapshotId {
    fn schema() -> RefOr<Schema> {
        string_schema(
            "^[0-9a-f]{40}$",
            "A snapshot: the git tree id of the worktree's tracked content at one moment",
        )
    }
}

impl ToSchema for SnapshotId {}

/// The part types rewind reads the fields of, with the schema of their other fields.
fn known_parts() -> [(&'static str, String); 5] {
    [
        ("text", TextPart::name().into_owned()),
        ("tool", ToolPart::name().into_owned()),
        ("step-start", StepStartPart::name().into_owned()),
        ("step-finish", StepFinishPart::name().into_owned()),
        ("patch", PatchPart::name().into_owned()),
    ]
}

/// A string.
fn string() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::String)
}

/// One of the strings `values`.
fn one_of_strings<const N: usize>(values: [&str; N]) -> ObjectBuilder {
    string().enum_values(Some(values))
}

/// An object with any field.
fn open_object() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(AdditionalProperties::FreeForm(true)))
}

/// An object whose `type` is `kind`, with any other field.
fn typed_as(kind: &str) -> ObjectBuilder {
    typed(one_of_strings([kind]))
}

/// An object whose `type` is any string but those of `excluded`, with any other field.
fn typed_other(excluded: &[&str]) -> ObjectBuilder {
    // JSON Schema's `not`, which utoipa's builders lack: an extension map is written out as it is, and
    // one built from an iterator keeps its keys unprefixed. (A look-ahead pattern would say the same, but
    // RE2 and Go's `regexp`, under some OpenAPI tools, refuse one.)
    let not = Extensions::from_iter([("not", json!({ "enum": excluded }))]);
    typed(string().extensions(Some(not)))
}

/// An object with the string `type` that `kind` describes, and any other field.
fn typed(kind: ObjectBuilder) -> ObjectBuilder {
    open_object().property("type", kind).required("type")
}

/// `rest` with the id fields `ids` (each a field's name and its schema's) beside it, all required.
fn with_ids(description: &str, ids: &[(&str, Cow<'static, str>)], rest: Ref) -> RefOr<Schema> {
    let ids = ids.iter().fold(
        ObjectBuilder::new().schema_type(Type::Object),
        |object, (field, schema)| {
            object
                .property(*field, Ref::from_schema_name(schema.clone()))
                .required(*field)
        },
    );
    AllOfBuilder::new()
        .description(Some(description))
        .item(ids)
        .item(rest)
        .into()
}

impl PartialSchema for PartBody {
    fn schema() -> RefOr<Schema> {
        let known = known_parts();
        let names: Vec<&str> = known.iter().map(|(kind, _)| *kind).collect();
        let mut one_of = OneOfBuilder::new().description(Some(
            "The part's type and the fields it has; a type rewind does not read is kept as the client sent it",
        ));
        for (kind, schema) in &known {
            one_of = one_of.item(
                AllOfBuilder::new()
                    .item(typed_as(kind))
                    .item(Ref::from_schema_name(schema.as_str())),
            );
        }
        one_of.item(typed_other(&names)).into()
    }
}

impl ToSchema for PartBody {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        push::<TextPart>(schemas);
        push::<ToolPart>(schemas);
        push::<StepStartPart>(schemas);
        push::<StepFinishPart>(schemas);
        push::<PatchPart>(schemas);
    }
}

/// The parts a client may send (`record.rs`'s `reject_recorded_kinds`): the step operations record
/// `step-start`, `step-finish` and `patch` parts, so of the types rewind reads only `text` and `tool` are
/// sent.
impl PartialSchema for NewPart {
    fn schema() -> RefOr<Schema> {
        let known: Vec<&str> = known_parts().iter().map(|(kind, _)| *kind).collect();
        // OpenCode's `ToolPart` fields that SPEC 5 and its clients rely on (`check_tool_part`).
        let status = one_of_strings(["pending", "running", "completed", "error"]);
        let tool = typed_as("tool")
            .property("callID", string())
            .property("tool", string())
            .property(
                "state",
                open_object().property("status", status).required("status"),
            )
            .required("callID")
            .required("tool")
            .required("state");
        // `text` may be left out (it is then empty), unlike in an answer's `TextPart`.
        let text = typed_as("text").property("text", string());
        let body = OneOfBuilder::new()
            .item(text)
            .item(tool)
            .item(typed_other(&known));
        AllOfBuilder::new()
            .description(Some(
                "A part a client sends: `text`, `tool` (with OpenCode's `callID`, `tool` and `state.status`) \
                 or a type rewind does not read, kept as it came; `step-start`, `step-finish` and `patch` \
                 parts are recorded by the step operations. `id`: the client's own, which must sort after \
                 every part of the message (`null`: none). `sessionID` and `messageID`, when given, must name \
                 the route's session and message (in a message's body: the id the body gives it)",
            ))
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Object)
                    .property(
                        "id",
                        OneOfBuilder::new()
                            .item(ObjectBuilder::new().schema_type(Type::Null))
                            .item(Ref::from_schema_name(PartId::name())),
                    )
                    .property("sessionID", Ref::from_schema_name(SessionId::name()))
                    .property("messageID", Ref::from_schema_name(MessageId::name())),
            )
            .item(body)
            .into()
    }
}

impl ToSchema for NewPart {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        push_part_ids(schemas);
    }
}

/// The schemas of the three ids a part names (its own, its session's and its message's), which both what a
/// client sends and what rewind answers refer to.
fn push_part_ids(schemas: &mut Vec<(String, RefOr<Schema>)>) {
    push::<PartId>(schemas);
    push::<SessionId>(schemas);
    push::<MessageId>(schemas);
}

impl PartialSchema for Part {
    fn schema() -> RefOr<Schema> {
        with_ids(
            "A part of a message",
            &[
                ("id", PartId::name()),
                ("sessionID", SessionId::name()),
                ("messageID", MessageId::name()),
            ],
            Ref::from_schema_name(PartBody::name()),
        )
    }
}

impl ToSchema for Part {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        push_part_ids(schemas);
        push::<PartBody>(schemas);
    }
}

impl PartialSchema for Event {
    fn schema() -> RefOr<Schema> {
        with_ids(
            "An event: its id, `type` and `properties`",
            &[("id", EventId::name())],
            Ref::from_schema_name(EventPayload::name()),
        )
    }
}

impl ToSchema for Event {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        push::<EventId>(schemas);
        push::<EventPayload>(schemas);
    }
}

/// Adds `T`'s schema under its name, and the schemas it refers to.
fn push<T: ToSchema>(schemas: &mut Vec<(String, RefOr<Schema>)>) {
    schemas.push((T::name().into_owned(), T::schema()));
    T::schemas(schemas);
}
