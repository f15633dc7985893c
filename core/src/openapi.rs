//! OpenAPI schemas (`utoipa`, feature `openapi`) of the domain types whose JSON form serde's attributes do not
//! say alone: the ids (strings of a fixed form), a part (its `type` chooses its fields; a type rewind does
//! not know is kept as it came) and an event (`{id, type, properties}`). The other types the HTTP API answers
//! with derive theirs beside their definitions.

use utoipa::openapi::schema::{
    AdditionalProperties, AllOfBuilder, Object, ObjectBuilder, OneOfBuilder, Schema, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::id::EventId;
use crate::model::{
    Event, EventPayload, MessageId, Part, PartBody, PartId, PatchPart, SessionId, SnapshotId,
    StepFinishPart, StepStartPart, TextPart, ToolPart,
};

/// A string of the form `pattern` (an ECMA-262 regular expression, anchored).
fn string_schema(pattern: &str, description: &str) -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::String)
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

macro_rules! id_schema {
    ($name:ident, $prefix:literal, $description:literal) => {
        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                id_schema($prefix, $description)
            }
        }

        impl ToSchema for $name {}
    };
}

id_schema!(SessionId, "ses", "A session id (newer sessions sort first)");
id_schema!(MessageId, "msg", "A message id (ascending)");
id_schema!(PartId, "prt", "A part id (ascending)");
id_schema!(EventId, "evt", "An event id (ascending)");

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

/// An object whose `type` is one of `values`, or any string but `not` when `values` is empty.
fn typed(values: &[&str], not: &[&str]) -> Object {
    let kind = ObjectBuilder::new().schema_type(Type::String);
    let kind = if values.is_empty() {
        // ECMA-262 look-ahead: any type but those with a schema of their own.
        kind.pattern(Some(format!("^(?!({})$)", not.join("|"))))
    } else {
        kind.enum_values(Some(values.iter().copied()))
    };
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("type", kind)
        .required("type")
        .additional_properties(Some(AdditionalProperties::FreeForm(true)))
        .build()
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
                    .item(typed(&[kind], &[]))
                    .item(Ref::from_schema_name(schema.as_str())),
            );
        }
        one_of.item(typed(&[], &names)).into()
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

impl PartialSchema for Part {
    fn schema() -> RefOr<Schema> {
        AllOfBuilder::new()
            .description(Some("A part of a message"))
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Object)
                    .property("id", Ref::from_schema_name(PartId::name()))
                    .property("sessionID", Ref::from_schema_name(SessionId::name()))
                    .property("messageID", Ref::from_schema_name(MessageId::name()))
                    .required("id")
                    .required("sessionID")
                    .required("messageID"),
            )
            .item(Ref::from_schema_name(PartBody::name()))
            .into()
    }
}

impl ToSchema for Part {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        push::<PartId>(schemas);
        push::<SessionId>(schemas);
        push::<MessageId>(schemas);
        push::<PartBody>(schemas);
    }
}

impl PartialSchema for Event {
    fn schema() -> RefOr<Schema> {
        AllOfBuilder::new()
            .description(Some("An event: its id, `type` and `properties`"))
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::Object)
                    .property("id", Ref::from_schema_name(EventId::name()))
                    .required("id"),
            )
            .item(Ref::from_schema_name(EventPayload::name()))
            .into()
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
