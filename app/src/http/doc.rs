//! `GET /doc`: the OpenAPI document, generated from the route annotations, the request types and the
//! types the routes answer with.

use std::borrow::Cow;
use std::collections::btree_map::Entry;

use axum::Json;
use utoipa::openapi::path::{Parameter, ParameterIn};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Required, Response, ResponseBuilder};
use utoipa::{Modify, OpenApi, ToSchema};

use super::dto;
use super::error::{BusyError, NamedError};

/// The API as utoipa derives it from the handlers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "rewind",
        description = "OpenCode's session API with undo that can be undone"
    ),
    paths(
        super::routes::list_sessions,
        super::routes::session_status,
        super::routes::create_session,
        super::routes::get_session,
        super::routes::session_children,
        super::routes::update_session,
        super::routes::delete_session,
        super::routes::list_messages,
        super::routes::get_message,
        super::routes::create_message,
        super::routes::append_part,
        super::routes::begin_step,
        super::routes::finish_step,
        super::routes::abort_step,
        super::routes::abort,
        super::routes::revert,
        super::routes::unrevert,
        super::routes::commit_revert,
        super::routes::preview,
        super::routes::session_diff,
        super::routes::warnings,
        super::events::stream,
        super::events::global_stream,
        super::routes::health,
        openapi_json,
    ),
    components(schemas(
        dto::CreateSessionBody,
        dto::UpdateSessionBody,
        dto::UpdateSessionTime,
        dto::MessageBody,
        dto::StepFinishBody,
        dto::RevertBody,
        super::error::NamedError,
        super::error::BusyError,
    )),
    modifiers(&Shared)
)]
pub struct ApiDoc;

/// What every route shares, added to each operation of the document: the answers of the checks made
/// before any handler (SPEC 9: 401 and 403 from the security checks, 413 for an oversize body, 415 for a
/// write not sent as JSON, 400 for a malformed id, JSON or worktree), the answers any handler may give
/// (500 for an internal or storage fault, 409 for a busy database), the `x-opencode-directory` header
/// beside `?directory=`, and a tag, the path's first segment; and the basic-auth scheme, optional.
struct Shared;

impl Modify for Shared {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{
            Http, HttpAuthScheme, SecurityRequirement, SecurityScheme,
        };
        // Basic auth, any user name: required when the server listens beyond loopback (none or it).
        openapi
            .components
            .get_or_insert_with(Default::default)
            .add_security_scheme(
                "basic",
                SecurityScheme::Http(Http::new(HttpAuthScheme::Basic)),
            );
        openapi.security = Some(vec![
            SecurityRequirement::default(),
            SecurityRequirement::new("basic", Vec::<String>::new()),
        ]);
        for (path, item) in &mut openapi.paths.paths {
            let tag = path
                .trim_start_matches('/')
                .split('/')
                .next()
                .unwrap_or_default()
                .to_owned();
            let names_a_worktree = path != "/doc";
            // Every route but these two reads the database, whose lock another process may hold past the
            // busy timeout, or whose pool may have no connection free in time: a 409 (`error.rs`).
            let reads_the_database = path != "/doc" && path != "/global/health";
            // (operation, whether it may carry a body, whether it is a DELETE)
            let operations = [
                (&mut item.post, true, false),
                (&mut item.put, true, false),
                (&mut item.patch, true, false),
                (&mut item.get, false, false),
                (&mut item.delete, false, true),
            ];
            for (operation, has_body, operation_is_delete) in operations {
                let Some(operation) = operation else {
                    continue;
                };
                operation.tags = Some(vec![tag.clone()]);
                let mut shared = vec![
                    (
                        "401",
                        "A password is required (basic auth, any user name) and was not given, or is wrong",
                    ),
                    (
                        "403",
                        "The request's Host or Origin is not one this server answers",
                    ),
                ];
                if names_a_worktree {
                    shared.push((
                        "400",
                        "Bad request: a malformed id, malformed JSON or a wrong type, or a worktree outside the \
                         project roots",
                    ));
                }
                // Any route may meet an internal or storage fault (SPEC 9: 500 only for those).
                shared.push((
                    "500",
                    "An internal or storage fault, or a snapshot object missing from the store: nothing was \
                     changed unless the message says what was",
                ));
                if has_body {
                    shared.push(("413", "The body is over 8 MiB"));
                }
                if has_body || operation_is_delete {
                    shared.push((
                        "415",
                        "Sent with a Content-Type that is not JSON (application/json or …+json)",
                    ));
                }
                for (status, description) in shared {
                    operation
                        .responses
                        .responses
                        .entry(status.to_owned())
                        .or_insert_with(|| error_response(description, NamedError::name()));
                }
                if reads_the_database {
                    // Said beside the route's own 409, if it has one (its schema is the same).
                    match operation.responses.responses.entry("409".to_owned()) {
                        Entry::Vacant(vacant) => {
                            vacant.insert(error_response(BUSY_DATABASE, BusyError::name()));
                        }
                        Entry::Occupied(mut occupied) => {
                            if let RefOr::T(response) = occupied.get_mut() {
                                response.description =
                                    format!("{}; or: {BUSY_DATABASE}", response.description);
                            }
                        }
                    }
                }
                if names_a_worktree {
                    let parameters = operation.parameters.get_or_insert_with(Vec::new);
                    if !parameters.iter().any(|p| p.name == DIRECTORY_HEADER) {
                        parameters.push(directory_header());
                    }
                }
            }
        }
    }
}

/// What a 409 says on any route that reads the database.
const BUSY_DATABASE: &str = "The database is busy (another process holds its lock, or no connection came \
                             free in time): nothing was stored; try again";

/// A response whose body is the error schema `schema` (`NamedError` or `BusyError`).
fn error_response(description: &str, schema: Cow<'static, str>) -> RefOr<Response> {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name(schema)))
                .build(),
        )
        .build()
        .into()
}

/// OpenCode's client names the worktree in this header, as `?directory=` does.
const DIRECTORY_HEADER: &str = "x-opencode-directory";

fn directory_header() -> Parameter {
    Parameter::builder()
        .name(DIRECTORY_HEADER)
        .parameter_in(ParameterIn::Header)
        .required(Required::False)
        .description(Some(
            "The worktree, percent-encoded (as OpenCode's client sends it); as `?directory=`",
        ))
        .schema(Some(ObjectBuilder::new().schema_type(Type::String)))
        .build()
}

/// `GET /doc`.
#[utoipa::path(get, path = "/doc", responses((status = 200, description = "This OpenAPI document", body = Object)))]
pub async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
