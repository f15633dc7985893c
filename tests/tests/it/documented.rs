//! Every answer these tests get through the harness (`TestApp::send`, and each frame of its event streams)
//! is checked against the OpenAPI document the server serves (`GET /doc`): on a route and method the
//! document has, the status must be one it lists, and the body must be accepted by the schema it gives for
//! that status and content type (or, for an event stream, by its frame schema); a request answered 2xx must
//! have path parameters, query parameters and a JSON body the document's request schemas accept; and no
//! route the document lacks may answer 2xx. The checks run a JSON Schema validator that is not rewind's
//! (`jsonschema`, draft 2020-12, the dialect of OpenAPI 3.1), so a document that says one thing while the
//! server answers another fails whichever test met it. Unknown routes and methods (404, 405) are not the
//! document's to describe. Optional fields a test never meets are checked by `tests`' full values instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{Context, Result, anyhow, bail, ensure};
use jsonschema::Validator;
use serde_json::{Value, json};
use utoipa::OpenApi;

/// The document, with a validator per schema asked for.
struct Document {
    doc: Value,
    /// Each path of the document, split into segments (`{…}` matches any one).
    paths: Vec<(String, Vec<String>)>,
    validators: Mutex<HashMap<String, Arc<Validator>>>,
}

/// The document, built once for every test.
fn document() -> &'static Document {
    static DOCUMENT: OnceLock<Document> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let doc = serde_json::to_value(rewind_app::http::doc::ApiDoc::openapi())
            .expect("the OpenAPI document serialises");
        let paths = doc["paths"]
            .as_object()
            .map(|paths| {
                paths
                    .keys()
                    .map(|path| (path.clone(), segments(path)))
                    .collect()
            })
            .unwrap_or_default();
        Document {
            doc,
            paths,
            validators: Mutex::new(HashMap::new()),
        }
    })
}

/// The document the server serves: what `GET /doc` must answer.
pub fn served() -> Value {
    document().doc.clone()
}

/// The segments of a path (`/a/{b}` → `a`, `{b}`).
fn segments(path: &str) -> Vec<String> {
    path.trim_start_matches('/')
        .split('/')
        .map(str::to_owned)
        .collect()
}

fn is_parameter(segment: &str) -> bool {
    segment.starts_with('{') && segment.ends_with('}')
}

/// The document's path that `path` (a request's, without query) is an instance of: the one with the most
/// literal segments when several are (`/session/status` before `/session/{id}`), as the router chooses;
/// an error when two tie.
fn template(path: &str) -> Result<Option<&'static str>> {
    let asked = segments(path);
    let mut matching: Vec<(usize, &'static str)> = document()
        .paths
        .iter()
        .filter(|(_, template)| {
            template.len() == asked.len()
                && template
                    .iter()
                    .zip(&asked)
                    .all(|(t, a)| is_parameter(t) || t == a)
        })
        .map(|(path, template)| {
            let literal = template.iter().filter(|t| !is_parameter(t)).count();
            (literal, path.as_str())
        })
        .collect();
    matching.sort();
    match matching.as_slice() {
        [] => Ok(None),
        [.., (a, first), (b, second)] if a == b => {
            bail!("{path} is an instance of both {first} and {second}")
        }
        [.., (_, best)] => Ok(Some(best)),
    }
}

/// The operation `method path` names in the document, with its path there; `None` when it has none.
fn operation(method: &str, path: &str) -> Result<Option<(&'static str, &'static Value)>> {
    let Some(template) = template(path)? else {
        return Ok(None);
    };
    let operation = &document().doc["paths"][template][method.to_lowercase()];
    Ok(operation.is_object().then_some((template, operation)))
}

/// `segment` as a part of a JSON pointer in a URI fragment: `~` and `/` escaped as the pointer says, braces
/// percent-encoded.
fn escape(segment: &str) -> String {
    segment
        .replace('~', "~0")
        .replace('/', "~1")
        .replace('{', "%7B")
        .replace('}', "%7D")
}

/// The JSON pointer to the operation of `template`, `method`.
fn at(template: &str, method: &str) -> String {
    format!("#/paths/{}/{}", escape(template), method.to_lowercase())
}

/// The JSON pointer to the schema of the answer `status` in `content_type` of the document's `operation`
/// (with its path, `template`, and `method`); an error when it has not that status or content.
fn schema_pointer(
    (template, operation): (&str, &Value),
    method: &str,
    status: u16,
    content_type: &str,
) -> Result<String> {
    let response = &operation["responses"][status.to_string()];
    if !response.is_object() {
        bail!(
            "{method} {template} answered {status}, which the document does not list: {}",
            operation["responses"]
        );
    }
    if response["content"][content_type]["schema"].is_null() {
        bail!(
            "{method} {template} answered {status} as {content_type:?}, which the document does not give"
        );
    }
    Ok(format!(
        "{}/responses/{status}/content/{}/schema",
        at(template, method),
        escape(content_type)
    ))
}

/// A validator of the schema at `pointer` in `root` (the document itself, or a stricter copy), so that
/// its `$ref`s to `#/components/schemas/…` resolve; cached under `key`.
fn validator_in(root: &Value, key: &str, pointer: &str) -> Result<Arc<Validator>> {
    let document = document();
    let mut validators = document
        .validators
        .lock()
        .map_err(|_| anyhow!("a test panicked while building a validator"))?;
    let key = format!("{key}{pointer}");
    if let Some(validator) = validators.get(&key) {
        return Ok(Arc::clone(validator));
    }
    let mut root = root.clone();
    if let Value::Object(fields) = &mut root {
        fields.insert("$ref".to_owned(), json!(pointer));
    }
    let validator = Arc::new(
        jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .build(&root)
            .map_err(|error| {
                anyhow!("the document's schema at {pointer} does not build: {error}")
            })?,
    );
    validators.insert(key, Arc::clone(&validator));
    Ok(validator)
}

/// Checks `body` against the schema at `pointer` of `root`; `what` names it in the error.
fn check_in(root: &Value, key: &str, pointer: &str, body: &Value, what: &str) -> Result<()> {
    let validator = validator_in(root, key, pointer)?;
    let errors: Vec<String> = validator
        .iter_errors(body)
        .take(5)
        .map(|error| format!("{} at {}", error, error.instance_path()))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        bail!(
            "{what} does not match the document's schema ({pointer}): {}; the body: {body}",
            errors.join("; ")
        )
    }
}

/// Checks `body` against the document's schema at `pointer`.
fn check(pointer: &str, body: &Value, what: &str) -> Result<()> {
    check_in(&document().doc, "", pointer, body, what)
}

/// Checks an answer of `method path` (the request's path, no query) sent as `content_type` (its media type,
/// without parameters): its status is listed and its body (parsed as JSON; `null` when it is not) fits the
/// schema the document gives it; a route the document lacks answers no 2xx.
pub fn check_answer(
    method: &str,
    path: &str,
    status: u16,
    content_type: &str,
    body: &Value,
) -> Result<()> {
    let Some((template, operation)) = operation(method, path)? else {
        // A route the server serves and the document leaves out: only the router's refusals (404, 405)
        // and the checks before it (401, 403, 413, 415, 400 for a worktree) answer where the document
        // has none.
        ensure!(
            !(200..=299).contains(&status),
            "{method} {path} answered {status}, and the document does not have it"
        );
        return Ok(());
    };
    let pointer = schema_pointer((template, operation), method, status, content_type)?;
    check(&pointer, body, &format!("{method} {path} ({status})"))
}

/// Checks a request that `method url` accepted (answered with 2xx): the document's schemas of its path
/// parameters, its query parameters and its JSON body (`sent`) must accept them too, so that a client
/// built from the document can send what the server takes.
pub fn check_accepted_request(
    method: &str,
    url: &reqwest::Url,
    sent: Option<&Value>,
) -> Result<()> {
    let path = url.path();
    let Some((template, operation)) = operation(method, path)? else {
        return Ok(());
    };
    let at = at(template, method);
    let parameters: &[Value] = operation["parameters"]
        .as_array()
        .map_or(&[], Vec::as_slice);
    let parameter = |place: &str, name: &str| {
        parameters
            .iter()
            .position(|p| p["in"] == place && p["name"] == name)
            .map(|index| format!("{at}/parameters/{index}/schema"))
    };
    for (name, value) in segments(template).iter().zip(segments(path)) {
        let Some(name) = name.strip_prefix('{').and_then(|n| n.strip_suffix('}')) else {
            continue;
        };
        let pointer = parameter("path", name).with_context(|| {
            format!("{method} {template} does not document its parameter {name}")
        })?;
        check(
            &pointer,
            &Value::String(value),
            &format!("the path parameter {name} {method} {path} accepted"),
        )?;
    }
    for (name, value) in url.query_pairs() {
        let pointer = parameter("query", &name).with_context(|| {
            format!("{method} {template} accepted the query parameter {name}, which it does not document")
        })?;
        // A query value is text: it fits as it is, or as the number or boolean it spells.
        let what = format!("the query parameter {name}={value} {method} {path} accepted");
        let as_text = check(&pointer, &Value::String(value.to_string()), &what);
        let spelt = serde_json::from_str::<Value>(&value)
            .ok()
            .filter(|v| v.is_number() || v.is_boolean());
        match (as_text, spelt) {
            (Ok(()), _) => {}
            (Err(_), Some(spelt)) => check(&pointer, &spelt, &what)?,
            (Err(error), None) => return Err(error),
        }
    }
    match sent {
        Some(body)
            if !operation["requestBody"]["content"]["application/json"]["schema"].is_null() =>
        {
            check(
                &format!("{at}/requestBody/content/application~1json/schema"),
                body,
                &format!("the body {method} {path} accepted"),
            )
        }
        _ => Ok(()),
    }
}

/// The schema each frame of the event stream `GET path` must fit.
pub fn stream_schema(path: &str) -> Result<String> {
    let operation = operation("get", path)?
        .with_context(|| format!("the document has no event stream at {path}"))?;
    schema_pointer(operation, "get", 200, "text/event-stream")
}

/// Checks one frame of an event stream against `pointer` (from `stream_schema`).
pub fn check_frame(pointer: &str, frame: &Value) -> Result<()> {
    check(pointer, frame, "an event")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `check_answer` of an answer sent as JSON.
    fn json_answer(method: &str, path: &str, status: u16, body: &Value) -> Result<()> {
        check_answer(method, path, status, "application/json", body)
    }

    /// The URL of `path_and_query` on some server.
    fn url(path_and_query: &str) -> reqwest::Url {
        reqwest::Url::parse(&format!("http://127.0.0.1:4096{path_and_query}")).expect("a valid URL")
    }

    #[test]
    fn an_answer_the_document_does_not_describe_fails_the_check() {
        // A session without its fields, a status no route lists, a part whose type's fields are wrong.
        assert!(json_answer("POST", "/session", 200, &json!({"id": 5})).is_err());
        assert!(json_answer("GET", "/session/status", 418, &json!({})).is_err());
        let part = json!({
            "id": "prt_0000000000010123456789abcd",
            "sessionID": "ses_0000000000010123456789abcd",
            "messageID": "msg_0000000000010123456789abcd",
            "type": "patch",
            "hash": "not a snapshot id",
            "files": [],
        });
        let path =
            "/session/ses_0000000000010123456789abcd/message/msg_0000000000010123456789abcd/part";
        assert!(json_answer("POST", path, 200, &part).is_err());
        // The same part with a snapshot id fits; so does a type rewind does not read, kept as it came.
        let mut fits = part.clone();
        fits["hash"] = json!("0123456789abcdef0123456789abcdef01234567");
        assert!(json_answer("POST", path, 200, &fits).is_ok());
        let mut unknown = part;
        unknown["type"] = json!("reasoning");
        assert!(json_answer("POST", path, 200, &unknown).is_ok());
        // Routes the document does not have are not its to describe, but none of them may answer 2xx.
        assert!(json_answer("GET", "/no/such/route", 404, &json!({})).is_ok());
        assert!(json_answer("GET", "/no/such/route", 200, &json!({})).is_err());
        assert!(json_answer("PUT", "/session", 200, &json!({})).is_err());
        // An error body has OpenCode's shape.
        let not_found = json!({"name": "NotFoundError", "data": {"message": "Session not found"}});
        assert!(
            json_answer(
                "GET",
                "/session/ses_0000000000010123456789abcd",
                404,
                &not_found
            )
            .is_ok()
        );
        assert!(
            json_answer(
                "GET",
                "/session/ses_0000000000010123456789abcd",
                404,
                &json!({"name": "NotFoundError"})
            )
            .is_err()
        );
    }

    #[test]
    fn a_request_the_document_does_not_describe_fails_the_check() {
        let path = "/session/ses_0000000000010123456789abcd/revert";
        let revert = json!({"messageID": "msg_0000000000010123456789abcd"});
        assert!(check_accepted_request("POST", &url(path), Some(&revert)).is_ok());
        let to_a_part = json!({"messageID": "prt_0000000000010123456789abcd"});
        assert!(check_accepted_request("POST", &url(path), Some(&to_a_part)).is_err());
        // What a client may send as a part: a text part without its text (it is then empty), no id, a tool
        // call with OpenCode's fields; not a part the step operations record, nor a tool call without its
        // state, nor ids of the wrong kind.
        let part = url(
            "/session/ses_0000000000010123456789abcd/message/msg_0000000000010123456789abcd/part",
        );
        for (sent, fits) in [
            (json!({"type": "text"}), true),
            (json!({"type": "text", "text": "x", "id": null}), true),
            (json!({"type": "reasoning", "text": "x"}), true),
            (
                json!({"type": "tool", "callID": "c", "tool": "t", "state": {"status": "running"}}),
                true,
            ),
            (json!({"type": "tool", "callID": "c", "tool": "t"}), false),
            (json!({"type": "step-start"}), false),
            (
                json!({"type": "text", "id": "msg_0000000000010123456789abcd"}),
                false,
            ),
            (
                json!({"type": "text", "messageID": "prt_0000000000010123456789abcd"}),
                false,
            ),
        ] {
            let checked = check_accepted_request("POST", &part, Some(&sent));
            assert_eq!(checked.is_ok(), fits, "{sent}: {checked:?}");
        }
        let of_a_message = "/session/msg_0000000000010123456789abcd/revert";
        assert!(check_accepted_request("POST", &url(of_a_message), Some(&revert)).is_err());
    }

    #[test]
    fn an_event_the_document_does_not_describe_fails_the_check() {
        let pointer = stream_schema("/event").expect("the document has the stream");
        let idle = json!({
            "id": "evt_0000000000010123456789abcd",
            "type": "session.idle",
            "properties": {"sessionID": "ses_0000000000010123456789abcd"},
        });
        assert!(check_frame(&pointer, &idle).is_ok());
        let mut unknown = idle.clone();
        unknown["type"] = json!("session.exploded");
        assert!(check_frame(&pointer, &unknown).is_err());
        let mut without_id = idle;
        if let Value::Object(fields) = &mut without_id {
            fields.remove("id");
        }
        assert!(check_frame(&pointer, &without_id).is_err());
    }

    #[test]
    fn a_query_the_document_does_not_describe_fails_the_check() {
        let preview = "/session/ses_0000000000010123456789abcd/revert/preview";
        let to = |query: &str| url(&format!("{preview}?{query}"));
        assert!(
            check_accepted_request("GET", &to("messageID=msg_0000000000010123456789abcd"), None)
                .is_ok()
        );
        assert!(
            check_accepted_request("GET", &to("messageID=prt_0000000000010123456789abcd"), None)
                .is_err()
        );
        assert!(check_accepted_request("GET", &to("bogus=1"), None).is_err());
        // A number is spelt as text in a query.
        assert!(check_accepted_request("GET", &url("/session?limit=5"), None).is_ok());
        assert!(check_accepted_request("GET", &url("/session?limit=five"), None).is_err());
        // An answer in a content type the document does not give.
        assert!(check_answer("GET", "/session", 200, "text/plain", &json!([])).is_err());
    }

    /// The document with every object schema that names its properties and says nothing of others made
    /// strict (`unevaluatedProperties: false`), except where an `allOf` combines it with another (its own
    /// members, the branches of a `oneOf` among them, and the components an `allOf` refers to): a field
    /// serde writes under a name the document does not have then fails.
    fn strict() -> &'static Value {
        /// Tightens the schema `schema`; `combined` when an `allOf` combines it with others.
        fn tighten(schema: &mut Value, combined: bool) {
            let Value::Object(fields) = schema else {
                return;
            };
            let names_its_fields = fields.get("properties").is_some_and(Value::is_object);
            if names_its_fields && !combined && !fields.contains_key("additionalProperties") {
                fields.insert("unevaluatedProperties".to_owned(), json!(false));
            }
            for (key, value) in fields.iter_mut() {
                match key.as_str() {
                    "properties" => {
                        if let Value::Object(properties) = value {
                            properties.values_mut().for_each(|p| tighten(p, false));
                        }
                    }
                    "items" | "additionalProperties" | "not" | "propertyNames" => {
                        tighten(value, false);
                    }
                    "allOf" | "oneOf" | "anyOf" => {
                        let members_combined = key == "allOf" || combined;
                        if let Value::Array(members) = value {
                            members
                                .iter_mut()
                                .for_each(|m| tighten(m, members_combined));
                        }
                    }
                    _ => {}
                }
            }
        }
        /// The components an `allOf` somewhere refers to as one of its members.
        fn all_of_members(value: &Value, found: &mut Vec<String>) {
            match value {
                Value::Object(fields) => {
                    if let Some(Value::Array(members)) = fields.get("allOf") {
                        found.extend(members.iter().filter_map(|m| {
                            let to = m["$ref"].as_str()?;
                            Some(to.trim_start_matches("#/components/schemas/").to_owned())
                        }));
                    }
                    fields.values().for_each(|v| all_of_members(v, found));
                }
                Value::Array(items) => items.iter().for_each(|v| all_of_members(v, found)),
                _ => {}
            }
        }
        static STRICT: OnceLock<Value> = OnceLock::new();
        STRICT.get_or_init(|| {
            let mut doc = document().doc.clone();
            let mut combined = Vec::new();
            all_of_members(&doc, &mut combined);
            if let Value::Object(schemas) = &mut doc["components"]["schemas"] {
                for (name, schema) in schemas.iter_mut() {
                    tighten(schema, combined.contains(name));
                }
            }
            doc
        })
    }

    /// Checks `value` as serde writes it against the strict document's schema `name`.
    fn strictly(value: &impl serde::Serialize, name: &str) -> Result<()> {
        let json = serde_json::to_value(value)?;
        let pointer = format!("#/components/schemas/{name}");
        check_in(strict(), "strict", &pointer, &json, name)
    }

    #[test]
    fn every_field_serde_writes_is_one_the_document_names() -> Result<()> {
        use rewind_core::RevertPoint;
        use rewind_core::model::*;
        use rewind_core::service::{Preview, PreviewFile};

        let session_id = SessionId::parse("ses_0000000000010123456789abcd")?;
        let message_id = MessageId::parse("msg_0000000000010123456789abcd")?;
        let part_id = PartId::parse("prt_0000000000010123456789abcd")?;
        let snapshot = SnapshotId::parse("0123456789abcdef0123456789abcdef01234567")?;
        let tokens = Tokens {
            total: Some(10.0),
            input: 3.0,
            output: 4.0,
            reasoning: 1.0,
            cache: TokenCache {
                read: 1.0,
                write: 1.0,
            },
        };
        let warning = Warning {
            time: 2,
            message: "kept".to_owned(),
            snapshot: Some(snapshot.clone()),
            files: vec!["/w/a.txt".to_owned()],
        };
        let diff = FileDiff {
            file: "a.txt".to_owned(),
            patch: "@@ -1 +1 @@\n-a\n+b\n".to_owned(),
            additions: 1,
            deletions: 1,
            status: FileStatus::Modified,
        };
        // Every field set, the optional ones too.
        let session = Session {
            id: session_id.clone(),
            slug: "slug".to_owned(),
            project_id: "project".to_owned(),
            directory: "/w".to_owned(),
            parent_id: Some(SessionId::parse("ses_0000000000000123456789abcd")?),
            title: "title".to_owned(),
            metadata: Some(serde_json::Map::from_iter([("k".to_owned(), json!(1))])),
            version: "0.1.0".to_owned(),
            time: SessionTime {
                created: 1,
                updated: 2,
                archived: Some(3),
            },
            summary: Some(DiffSummary {
                additions: 1,
                deletions: 1,
                files: 1,
            }),
            cost: 0.5,
            tokens,
            revert: Some(RevertDescriptor {
                message_id: message_id.clone(),
                part_id: Some(part_id.clone()),
                snapshot: Some(snapshot.clone()),
                diff: Some("diff".to_owned()),
            }),
            store: "store".to_owned(),
            applied: Some(snapshot.clone()),
            reverted_at: Some(4),
            step: Some(OpenStep {
                message_id: message_id.clone(),
                snapshot: snapshot.clone(),
                token: LeaseToken("token".to_owned()),
                holder: Holder {
                    kind: HolderKind::Server,
                    process: ProcessIdentity {
                        host: "host".to_owned(),
                        pid: 1,
                        start_time: 2,
                        boot: Some("boot".to_owned()),
                        machine: Some("machine".to_owned()),
                    },
                },
                started: 5,
            }),
            skipped: vec!["big.bin".to_owned()],
        };
        strictly(&session, "Session")?;
        strictly(&warning, "Warning")?;
        strictly(&diff, "FileDiff")?;
        strictly(
            &Preview {
                descriptor: RevertPoint {
                    message_id: message_id.clone(),
                    part_id: Some(part_id.clone()),
                },
                files: vec![PreviewFile {
                    file: "/w/a.txt".to_owned(),
                    action: FileActionKind::Keep,
                    reason: Some("why".to_owned()),
                }],
            },
            "Preview",
        )?;
        let message = Message {
            id: message_id.clone(),
            session_id: session_id.clone(),
            role: Role::Assistant,
            time: MessageTime {
                created: 1,
                completed: Some(2),
            },
            parent_id: Some(MessageId::parse("msg_0000000000000123456789abcd")?),
            extra: serde_json::Map::new(),
        };
        let part = Part {
            id: part_id.clone(),
            session_id: session_id.clone(),
            message_id: message_id.clone(),
            body: PartBody::text("hello"),
        };
        strictly(
            &MessageWithParts {
                info: message.clone(),
                parts: vec![part.clone()],
            },
            "MessageWithParts",
        )?;
        // Every event, as its payload (an `Event` adds its id beside it).
        let payloads = [
            EventPayload::ServerConnected {},
            EventPayload::ServerHeartbeat {},
            EventPayload::ServerLagged { missed: 3 },
            EventPayload::SessionCreated {
                session_id: session_id.clone(),
                info: Box::new(session.clone()),
            },
            EventPayload::SessionUpdated {
                session_id: session_id.clone(),
                info: Box::new(session.clone()),
            },
            EventPayload::SessionDeleted {
                session_id: session_id.clone(),
                info: Box::new(session.clone()),
            },
            EventPayload::SessionDiff {
                session_id: session_id.clone(),
                diff: vec![diff.clone()],
            },
            EventPayload::SessionWarning {
                session_id: session_id.clone(),
                message: warning.message.clone(),
                snapshot: warning.snapshot.clone(),
                files: warning.files.clone(),
            },
            EventPayload::SessionStatus {
                session_id: session_id.clone(),
                status: SessionStatus::Busy,
            },
            EventPayload::SessionIdle {
                session_id: session_id.clone(),
            },
            EventPayload::MessageUpdated {
                session_id: session_id.clone(),
                info: Box::new(message),
            },
            EventPayload::MessageRemoved {
                session_id: session_id.clone(),
                message_id: message_id.clone(),
            },
            EventPayload::PartUpdated {
                session_id: session_id.clone(),
                part: Box::new(part),
                time: 6,
            },
            EventPayload::PartRemoved {
                session_id,
                message_id,
                part_id,
            },
        ];
        for payload in &payloads {
            strictly(payload, "EventPayload")?;
        }
        // And what the strict document refuses: a field under a name it does not have, at the top of a
        // session, deep in it, and in an event's properties.
        let renamed = |value: &Value, at: &[&str], to: &str| -> Result<Value> {
            let mut value = value.clone();
            let (last, path) = at.split_last().context("a path")?;
            let mut object = &mut value;
            for key in path {
                object = &mut object[*key];
            }
            let fields = object.as_object_mut().context("an object")?;
            let field = fields
                .remove(*last)
                .with_context(|| format!("{last} is written"))?;
            fields.insert(to.to_owned(), field);
            Ok(value)
        };
        let session = serde_json::to_value(&session)?;
        let deep = ["step", "holder", "process", "boot"];
        for (at, to) in [(&["revertedAt"][..], "reverted_at"), (&deep[..], "bootId")] {
            let renamed = renamed(&session, at, to)?;
            ensure!(
                strictly(&renamed, "Session").is_err(),
                "{at:?} renamed passed"
            );
        }
        let warning = serde_json::to_value(&payloads[7])?;
        ensure!(warning["type"] == "session.warning", "{warning}");
        let renamed = renamed(&warning, &["properties", "snapshot"], "snapshotID")?;
        ensure!(
            strictly(&renamed, "EventPayload").is_err(),
            "a renamed event field passed"
        );
        // An event, with its id beside its payload, still fits the strict document.
        let event = Event {
            id: EventId::parse("evt_0000000000010123456789abcd")?,
            payload: payloads[7].clone(),
        };
        strictly(&event, "Event")?;
        Ok(())
    }

    #[test]
    fn no_answer_schema_allows_null() {
        // The component schemas the answers refer to, and those they refer to in turn.
        fn refs(value: &Value, found: &mut Vec<String>) {
            match value {
                Value::Object(fields) => {
                    if let Some(Value::String(to)) = fields.get("$ref") {
                        found.push(to.trim_start_matches("#/components/schemas/").to_owned());
                    }
                    fields.values().for_each(|v| refs(v, found));
                }
                Value::Array(items) => items.iter().for_each(|v| refs(v, found)),
                _ => {}
            }
        }
        fn allows_null(value: &Value) -> bool {
            match value {
                Value::Object(fields) => {
                    let null = |t: &Value| t == "null";
                    fields.get("type").is_some_and(|t| {
                        null(t) || t.as_array().is_some_and(|types| types.iter().any(null))
                    }) || fields.values().any(allows_null)
                }
                Value::Array(items) => items.iter().any(allows_null),
                _ => false,
            }
        }
        let doc = &document().doc;
        let mut pending = Vec::new();
        for operation in doc["paths"]
            .as_object()
            .into_iter()
            .flat_map(|p| p.values())
        {
            for operation in operation.as_object().into_iter().flat_map(|o| o.values()) {
                let responses = &operation["responses"];
                // The answers' own schemas (arrays, maps), then those they refer to.
                for response in responses.as_object().into_iter().flat_map(|r| r.values()) {
                    let contents = response["content"].as_object();
                    for content in contents.into_iter().flat_map(|c| c.values()) {
                        let schema = &content["schema"];
                        assert!(!allows_null(schema), "an answer allows null: {schema}");
                    }
                }
                refs(responses, &mut pending);
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        while let Some(name) = pending.pop() {
            if seen.insert(name.clone()) {
                let schema = &doc["components"]["schemas"][&name];
                assert!(
                    schema.is_object(),
                    "{name} is referred to and not in the document"
                );
                // serde leaves out a field it has no value for: an answer never holds `null`.
                assert!(!allows_null(schema), "{name} allows null: {schema}");
                refs(schema, &mut pending);
            }
        }
        assert!(
            seen.contains("Session") && seen.contains("OpenStep"),
            "{seen:?}"
        );
    }
}
