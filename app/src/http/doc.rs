//! `GET /doc`: the OpenAPI document, generated from the route annotations and request types.

use axum::Json;
use utoipa::OpenApi;

use super::dto;

/// The API as utoipa derives it from the handlers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "rewind",
        description = "OpenCode's session API with undo that can be undone"
    ),
    paths(
        super::routes::list_sessions,
        super::routes::create_session,
        super::routes::get_session,
        super::routes::session_children,
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
        openapi_json,
    ),
    components(schemas(
        dto::CreateSessionBody,
        dto::MessageBody,
        dto::StepFinishBody,
        dto::RevertBody
    ))
)]
pub struct ApiDoc;

/// `GET /doc`.
#[utoipa::path(get, path = "/doc", responses((status = 200, description = "This OpenAPI document", body = Object)))]
pub async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
