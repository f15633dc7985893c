//! Every answer these tests get is checked against the OpenAPI document the server serves (`GET /doc`): on
//! a route and method the document has, the status must be one it lists, and the body must be accepted by
//! the schema it gives for that status (a JSON answer) or by the event schema (each frame of an event
//! stream). The checks run a JSON Schema validator that is not rewind's (`jsonschema`, draft 2020-12, the
//! dialect of OpenAPI 3.1), so a document that says one thing while the server answers another fails
//! whichever test met it. Unknown routes and methods (404, 405) are not the document's to describe.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use anyhow::{Context, Result, anyhow, bail};
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

fn document() -> &'static Document {
    static DOCUMENT: OnceLock<Document> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let doc =
            serde_json::to_value(rewind_app::http::doc::ApiDoc::openapi()).unwrap_or(Value::Null);
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

fn segments(path: &str) -> Vec<String> {
    path.trim_start_matches('/')
        .split('/')
        .map(str::to_owned)
        .collect()
}

/// The document's path that `path` (a request's, without query) is an instance of: the one with the most
/// literal segments when several are (`/session/status` before `/session/{id}`).
fn template(path: &str) -> Option<&'static str> {
    let asked = segments(path);
    document()
        .paths
        .iter()
        .filter(|(_, template)| {
            template.len() == asked.len()
                && template
                    .iter()
                    .zip(&asked)
                    .all(|(t, a)| (t.starts_with('{') && t.ends_with('}')) || t == a)
        })
        .max_by_key(|(_, template)| template.iter().filter(|t| !t.starts_with('{')).count())
        .map(|(path, _)| path.as_str())
}

/// The JSON pointer to the schema of `method path`'s answer `status` in `content_type`; `None` when the
/// document has no such route and method; an error when it has them but not that status or content.
fn schema_pointer(
    method: &str,
    path: &str,
    status: u16,
    content_type: &str,
) -> Result<Option<String>> {
    let Some(template) = template(path) else {
        return Ok(None);
    };
    let method = method.to_lowercase();
    let doc = &document().doc;
    let operation = &doc["paths"][template][&method];
    if !operation.is_object() {
        return Ok(None);
    }
    let response = &operation["responses"][status.to_string()];
    if !response.is_object() {
        bail!(
            "{method} {template} answered {status}, which the document does not list: {}",
            operation["responses"]
        );
    }
    if response["content"][content_type]["schema"].is_null() {
        bail!(
            "{method} {template} answered {status} as {content_type}, which the document does not give"
        );
    }
    Ok(Some(format!(
        "#/paths/{}/{method}/responses/{status}/content/{}/schema",
        escape(template),
        escape(content_type)
    )))
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

/// A validator of the schema at `pointer` in the document (the document itself is the root, so that its
/// `$ref`s to `#/components/schemas/…` resolve).
fn validator(pointer: &str) -> Result<Arc<Validator>> {
    let document = document();
    let mut validators = document
        .validators
        .lock()
        .map_err(|_| anyhow!("a test panicked while building a validator"))?;
    if let Some(validator) = validators.get(pointer) {
        return Ok(Arc::clone(validator));
    }
    let mut root = document.doc.clone();
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
    validators.insert(pointer.to_owned(), Arc::clone(&validator));
    Ok(validator)
}

fn check(pointer: &str, body: &Value, what: &str) -> Result<()> {
    let validator = validator(pointer)?;
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

/// Checks an answer of `method path` (the request's path, no query): its status is listed and its JSON
/// body fits the schema the document gives it.
pub fn check_answer(method: &str, path: &str, status: u16, body: &Value) -> Result<()> {
    // A route the server serves and the document leaves out: only the router's refusals (404, 405) and
    // the checks before it (401, 403, 413, 415, 400 for a worktree) answer where the document has none.
    let documented = template(path).is_some_and(|template| {
        document().doc["paths"][template][method.to_lowercase()].is_object()
    });
    if !documented && (200..=299).contains(&status) {
        bail!("{method} {path} answered {status}, and the document does not have it");
    }
    match schema_pointer(method, path, status, "application/json")? {
        Some(pointer) => check(&pointer, body, &format!("{method} {path} ({status})")),
        None => Ok(()),
    }
}

/// Checks a request that `method path` accepted (answered with 2xx): the document's schemas of its path
/// parameters and of its JSON body (`sent`) must accept them too, so that a client built from the document
/// can send what the server takes.
pub fn check_accepted_request(method: &str, path: &str, sent: Option<&Value>) -> Result<()> {
    let Some(template) = template(path) else {
        return Ok(());
    };
    let method = method.to_lowercase();
    let operation = &document().doc["paths"][template][&method];
    if !operation.is_object() {
        return Ok(());
    }
    let at = format!("#/paths/{}/{method}", escape(template));
    let parameters = operation["parameters"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (name, value) in segments(template).iter().zip(segments(path)) {
        let Some(name) = name.strip_prefix('{').and_then(|n| n.strip_suffix('}')) else {
            continue;
        };
        let index = parameters
            .iter()
            .position(|p| p["in"] == "path" && p["name"] == name)
            .with_context(|| {
                format!("{method} {template} does not document its parameter {name}")
            })?;
        check(
            &format!("{at}/parameters/{index}/schema"),
            &Value::String(value),
            &format!("the path parameter {name} {method} {path} accepted"),
        )?;
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
    schema_pointer("get", path, 200, "text/event-stream")?
        .with_context(|| format!("the document has no event stream at {path}"))
}

/// Checks one frame of an event stream against `pointer` (from `stream_schema`).
pub fn check_frame(pointer: &str, frame: &Value) -> Result<()> {
    check(pointer, frame, "an event")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_the_document_does_not_describe_fails_the_check() {
        // A session without its fields, a status no route lists, a part whose type's fields are wrong.
        assert!(check_answer("POST", "/session", 200, &json!({"id": 5})).is_err());
        assert!(check_answer("GET", "/session/status", 418, &json!({})).is_err());
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
        assert!(check_answer("POST", path, 200, &part).is_err());
        // The same part with a snapshot id fits; so does a type rewind does not read, kept as it came.
        let mut fits = part.clone();
        fits["hash"] = json!("0123456789abcdef0123456789abcdef01234567");
        assert!(check_answer("POST", path, 200, &fits).is_ok());
        let mut unknown = part;
        unknown["type"] = json!("reasoning");
        assert!(check_answer("POST", path, 200, &unknown).is_ok());
        // Routes the document does not have are not its to describe, but none of them may answer 2xx.
        assert!(check_answer("GET", "/no/such/route", 404, &json!({})).is_ok());
        assert!(check_answer("GET", "/no/such/route", 200, &json!({})).is_err());
        assert!(check_answer("PUT", "/session", 200, &json!({})).is_err());
        // An error body has OpenCode's shape.
        let not_found = json!({"name": "NotFoundError", "data": {"message": "Session not found"}});
        assert!(
            check_answer(
                "GET",
                "/session/ses_0000000000010123456789abcd",
                404,
                &not_found
            )
            .is_ok()
        );
        assert!(
            check_answer(
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
        assert!(check_accepted_request("POST", path, Some(&revert)).is_ok());
        let to_a_part = json!({"messageID": "prt_0000000000010123456789abcd"});
        assert!(check_accepted_request("POST", path, Some(&to_a_part)).is_err());
        let of_a_message = "/session/msg_0000000000010123456789abcd/revert";
        assert!(check_accepted_request("POST", of_a_message, Some(&revert)).is_err());
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
}
