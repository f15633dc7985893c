//! The session routes of SPEC section 9. Each parses its input (a bad one is 400 before the core is
//! asked anything), calls one `Rewind` use case and returns its result in OpenCode's shape.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::Json;
use axum::extract::{Extension, State};
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use rewind_core::RevertTarget;
use rewind_core::model::{
    FileDiff, MessageId, MessageWithParts, Part, PartBody, PartId, Role, Session, SessionId,
    SessionStatus, Warning,
};
use rewind_core::service::{FileCounts, NewMessage, NewPart, Preview, StepEnd};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::AppState;
use super::dto::{
    CreateSessionBody, DirectoryParam, MESSAGE_BODY_FIELDS, MessageBody, MessagesQuery,
    PreviewQuery, RevertBody, SessionsQuery, StepFinishBody, UpdateSessionBody, extra_fields,
};
use super::error::{ApiError, BusyError, NamedError};
use super::extract::{IgnoredBody, JsonBody, PathIds, QueryParams};
use super::security::{NoOpenStep, RequestDirectory};

type ApiResult<T> = Result<Json<T>, ApiError>;

/// `/session/{id}`.
#[derive(Debug, Deserialize)]
pub struct SessionPath {
    id: SessionId,
}

/// `/session/{id}/message/{mid}`.
#[derive(Debug, Deserialize)]
pub struct MessagePath {
    id: SessionId,
    mid: MessageId,
}

fn in_session(id: &SessionId) -> impl FnOnce(rewind_core::Error) -> ApiError + '_ {
    move |error| ApiError::from_core(error, Some(id))
}

/// How long a message, a part or a step's beginning or end waits for an operation holding its session or
/// worktree (a step beginning or ending, a revert) before it is refused as busy.
const OPERATION_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// `busy::while_busy` with the routes' wait, tried every 20 ms: a message or part sent while a step begins
/// or ends, a revert runs, or another message makes a reverted session's revert permanent, is recorded
/// after it (OpenCode queues a prompt sent while it is busy); so is a step that begins or ends while
/// another session's step in the same worktree holds it for its snapshot. An operation that outlasts the
/// wait still makes it busy. (Black-box: waiting only while the session's lease looked held before one
/// try let posts that raced an operation's start, or each other on a reverted session, be refused at
/// once.)
async fn while_busy<T, F, Fut>(write: F) -> Result<T, rewind_core::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, rewind_core::Error>>,
{
    crate::busy::while_busy(OPERATION_WAIT, std::time::Duration::from_millis(20), write).await
}

/// Lists the sessions of the request's worktree (default: the server's directory), newest first, with
/// OpenCode's filters.
#[utoipa::path(get, path = "/session", params(SessionsQuery, DirectoryParam),
    responses((status = 200, description = "Sessions, newest first", body = Vec<Session>)))]
pub async fn list_sessions(
    State(state): State<AppState>,
    Extension(RequestDirectory(directory)): Extension<RequestDirectory>,
    QueryParams(query): QueryParams<SessionsQuery>,
) -> ApiResult<Vec<Session>> {
    let search = query.search.map(|text| text.to_lowercase());
    let mut sessions: Vec<Session> = worktree_sessions(&state, directory)
        .await?
        .into_iter()
        .filter(|session| {
            query
                .start
                .is_none_or(|start| session.time.updated >= start)
        })
        .filter(|session| {
            search
                .as_ref()
                .is_none_or(|text| session.title.to_lowercase().contains(text.as_str()))
        })
        .collect();
    // A child whose parent is gone (deleted, by hand or by gc) is a root: it is listed somewhere (review:
    // it was hidden for good).
    // A parent listed here exists: only the others are looked up, one read each.
    if query.roots == Some(true) {
        let listed: std::collections::HashSet<SessionId> =
            sessions.iter().map(|session| session.id.clone()).collect();
        let mut roots = Vec::with_capacity(sessions.len());
        for session in sessions {
            let orphan = match &session.parent_id {
                None => true,
                Some(parent) if listed.contains(parent) => false,
                Some(parent) => matches!(
                    state.services.rewind.session(parent).await,
                    Err(rewind_core::Error::NotFound(_))
                ),
            };
            if orphan {
                roots.push(session);
            }
        }
        sessions = roots;
    }
    if let Some(limit) = query.limit {
        sessions.truncate(limit);
    }
    Ok(Json(sessions))
}

/// The sessions of the request's worktree `directory` (default: the server's directory), newest first.
async fn worktree_sessions(
    state: &AppState,
    directory: Option<String>,
) -> Result<Vec<Session>, ApiError> {
    let directory = match directory {
        Some(directory) => directory,
        None => default_worktree(state)?,
    };
    Ok(state.services.rewind.sessions(Some(&directory)).await?)
}

/// OpenCode's session statuses of the request's worktree: `{sessionID: {type: "busy"}}` for each session
/// with an open step that is not abandoned (its owner gone or its time out: the next operation aborts it);
/// a session that is idle is left out, as OpenCode leaves it out.
#[utoipa::path(get, path = "/session/status", params(DirectoryParam),
    responses((status = 200, description = "{sessionID: {type: \"busy\"}}", body = BTreeMap<SessionId, SessionStatus>)))]
pub async fn session_status(
    State(state): State<AppState>,
    Extension(RequestDirectory(directory)): Extension<RequestDirectory>,
) -> ApiResult<BTreeMap<SessionId, SessionStatus>> {
    let mut statuses = BTreeMap::new();
    for session in worktree_sessions(&state, directory).await? {
        if session.step.is_none() || state.services.rewind.step_is_abandoned(&session).await? {
            continue;
        }
        statuses.insert(session.id, SessionStatus::Busy);
    }
    Ok(Json(statuses))
}

/// The server's directory as a worktree: canonical and under a project root.
fn default_worktree(state: &AppState) -> Result<String, ApiError> {
    let cwd = state.cwd.to_str().ok_or_else(|| {
        ApiError::BadRequest("the server's directory is not a UTF-8 path".to_owned())
    })?;
    state.check_worktree(cwd)
}

/// Creates a session; its worktree is the body's `directory`, else the request's, else the server's.
#[utoipa::path(post, path = "/session", params(DirectoryParam), request_body = CreateSessionBody,
    responses((status = 200, description = "The session", body = Session),
              (status = 400, description = "Bad request", body = NamedError),
              (status = 404, description = "The parent session (`parentID`) is not found", body = NamedError)))]
pub async fn create_session(
    State(state): State<AppState>,
    Extension(RequestDirectory(directory)): Extension<RequestDirectory>,
    JsonBody(body): JsonBody<CreateSessionBody>,
) -> ApiResult<Session> {
    let directory = match (body.directory, directory) {
        (Some(raw), _) => state.check_worktree(&raw)?,
        (None, Some(canonical)) => canonical,
        (None, None) => default_worktree(&state)?,
    };
    let parent = match body.parent_id {
        Some(id) => Some(parse_id(&id, SessionId::parse)?),
        None => None,
    };
    // A parent outside the project roots is refused as every route naming it is (review: a child was
    // created under it, tying a session inside the roots to one outside).
    if let Some(parent) = &parent {
        state.check_session(parent).await?;
    }
    let session = state
        .services
        .rewind
        .create_child_session(&directory, body.title, parent)
        .await?;
    tracing::info!(session = %session.id, directory = %session.directory, "session created");
    Ok(Json(session))
}

/// One session.
#[utoipa::path(get, path = "/session/{id}", params(("id" = SessionId, Path, description = "The session"), DirectoryParam),
    responses((status = 200, description = "The session", body = Session),
              (status = 404, description = "Not found", body = NamedError)))]
pub async fn get_session(
    State(state): State<AppState>,
    PathIds(path): PathIds<SessionPath>,
) -> ApiResult<Session> {
    let rewind = &state.services.rewind;
    Ok(Json(
        rewind
            .session(&path.id)
            .await
            .map_err(in_session(&path.id))?,
    ))
}

/// A session's child sessions (OpenCode's subagent sessions: those created with its id as `parentID`), newest
/// first, those whose worktree lies under the project roots (the command line may record others, which
/// this server shows nowhere else either); an unknown session is a 404, as for `GET /session/{id}`.
#[utoipa::path(get, path = "/session/{id}/children", params(("id" = SessionId, Path, description = "The session"), DirectoryParam),
    responses((status = 200, description = "The session's children, newest first", body = Vec<Session>),
              (status = 404, description = "Not found", body = NamedError)))]
pub async fn session_children(
    State(state): State<AppState>,
    PathIds(path): PathIds<SessionPath>,
) -> ApiResult<Vec<Session>> {
    let mut children = state
        .services
        .rewind
        .children(&path.id)
        .await
        .map_err(in_session(&path.id))?;
    children.retain(|child| {
        super::security::session_under_roots(&child.directory, &state.roots).is_ok()
    });
    Ok(Json(children))
}

/// Sets a session's title, metadata or archive time (OpenCode's `session.update`), announced by
/// `session.updated`.
#[utoipa::path(patch, path = "/session/{id}", params(("id" = SessionId, Path, description = "The session"), DirectoryParam),
    request_body = UpdateSessionBody,
    responses((status = 200, description = "The session", body = Session),
              (status = 400, description = "Bad request", body = NamedError),
              (status = 404, description = "Not found", body = NamedError)))]
pub async fn update_session(
    State(state): State<AppState>,
    PathIds(path): PathIds<SessionPath>,
    JsonBody(body): JsonBody<UpdateSessionBody>,
) -> ApiResult<Session> {
    // An update lands while a step is open or an operation runs too: their writes keep what it set.
    let fields = rewind_core::model::SessionFields {
        title: body.title,
        metadata: body.metadata,
        archived: body.time.and_then(|time| time.archived),
    };
    Ok(Json(
        state
            .services
            .rewind
            .update_session(&path.id, fields)
            .await
            .map_err(in_session(&path.id))?,
    ))
}

/// Deletes a session and its messages (never its files), and the sessions created under it.
#[utoipa::path(delete, path = "/session/{id}", params(("id" = SessionId, Path, description = "The session"), DirectoryParam),
    responses((status = 200, description = "true", body = bool, content_type = "application/json"),
              (status = 404, description = "Not found", body = NamedError),
              (status = 409, description = "Busy", body = BusyError)))]
pub async fn delete_session(
    State(state): State<AppState>,
    PathIds(path): PathIds<SessionPath>,
    _body: IgnoredBody,
) -> ApiResult<bool> {
    let rewind = &state.services.rewind;
    let roots = state.roots.clone();
    let within =
        move |directory: &str| super::security::session_under_roots(directory, &roots).is_ok();
    let left = rewind
        .delete_session_and_children(&path.id, &within)
        .await
        .map_err(in_session(&path.id))?;
    for (child, error) in left {
        tracing::warn!(
            session = %path.id,
            %child,
            %error,
            "deleted the session, but not this session created under it: it stays, as a root"
        );
    }
    Ok(Json(true))
}

/// The session's messages with their parts, ascending (reverted ones included until cleanup); with
/// `limit`, OpenCode's page of the newest `limit` messages (older than the cursor `before`, when given),
/// and, while older ones are left, the cursor of the next page in `X-Next-Cursor` and `Link`.
#[utoipa::path(get, path = "/session/{id}/message",
    params(("id" = SessionId, Path, description = "The session"), MessagesQuery, DirectoryParam),
    responses((status = 200, description = "[{info, parts}]; `X-Next-Cursor` and `Link` (rel=\"next\") \
                                            name the next page while older messages are left",
               body = Vec<MessageWithParts>,
               headers(("X-Next-Cursor" = MessageId, description = "The `before` of the next page, while older messages are left"),
                       ("Link" = String, description = "The next page's URL, `rel=\"next\"`, while older messages are left"))),
              (status = 400, description = "Bad request", body = NamedError),
              (status = 404, description = "Not found", body = NamedError)))]
pub async fn list_messages(
    State(state): State<AppState>,
    PathIds(path): PathIds<SessionPath>,
    QueryParams(query): QueryParams<MessagesQuery>,
    uri: Uri,
) -> Result<Response, ApiError> {
    // Checked before anything is read, as OpenCode's route validates its query first.
    let before = match (&query.before, query.limit) {
        (None, _) => None,
        (Some(_), None) => {
            return Err(ApiError::BadRequest(
                "`before` requires `limit` (OpenCode's paging: `limit=N`, then `before` set to the \
                 `X-Next-Cursor` of the previous page)"
                    .to_owned(),
            ));
        }
        (Some(cursor), Some(_)) => Some(MessageId::parse(cursor).map_err(|_| {
            ApiError::BadRequest(format!(
                "invalid cursor {cursor:?}: `before` takes the `X-Next-Cursor` of a page of this route"
            ))
        })?),
    };
    let rewind = &state.services.rewind;
    // `limit=0` is every message, as in OpenCode.
    let Some(limit) = query.limit.filter(|limit| *limit > 0) else {
        let messages = rewind
            .messages(&path.id)
            .await
            .map_err(in_session(&path.id))?;
        return Ok(Json(messages).into_response());
    };
    // Only the page is read with its parts (a long session's other messages are not).
    let (messages, next) = rewind
        .messages_page(&path.id, before.as_ref(), limit)
        .await
        .map_err(in_session(&path.id))?;
    let next = next.map(|id| id.as_str().to_owned());
    let mut response = Json(messages).into_response();
    if let Some(cursor) = next {
        let headers = response.headers_mut();
        let link = format!("<{}>; rel=\"next\"", next_page(&uri, limit, &cursor));
        for (name, value) in [
            (
                "access-control-expose-headers",
                "Link, X-Next-Cursor".to_owned(),
            ),
            ("link", link),
            ("x-next-cursor", cursor),
        ] {
            if let Ok(value) = axum::http::HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        }
    }
    Ok(response)
}

/// The path and query of the page after this one: the request's own, with `limit` and `before` set (its
/// other parameters, such as `directory`, kept as they came).
fn next_page(uri: &Uri, limit: usize, cursor: &str) -> String {
    let kept = uri.query().unwrap_or_default().split('&').filter(|pair| {
        let name = pair.split('=').next().unwrap_or_default();
        !pair.is_empty() && name != "limit" && name != "before"
    });
    let query: Vec<String> = kept
        .map(str::to_owned)
        .chain([format!("limit={limit}"), format!("before={cursor}")])
        .collect();
    format!("{}?{}", uri.path(), query.join("&"))
}

/// One message with its parts.
#[utoipa::path(get, path = "/session/{id}/message/{mid}",
    params(("id" = SessionId, Path, description = "The session"), ("mid" = MessageId, Path, description = "The message"), DirectoryParam),
    responses((status = 200, description = "{info, parts}", body = MessageWithParts),
              (status = 404, description = "Not found", body = NamedError)))]
pub async fn get_message(
    State(state): State<AppState>,
    PathIds(path): PathIds<MessagePath>,
) -> ApiResult<MessageWithParts> {
    let rewind = &state.services.rewind;
    Ok(Json(
        rewind
            .message(&path.id, &path.mid)
            .await
            .map_err(in_session(&path.id))?,
    ))
}

/// Records a message: OpenCode's prompt body records a user message (rewind runs no model); rewind's
/// extension `{id?, role, parentID?, parts?}` records either kind.
#[utoipa::path(post, path = "/session/{id}/message",
    params(("id" = SessionId, Path, description = "The session"), DirectoryParam), request_body = MessageBody,
    responses((status = 200, description = "{info, parts} of the recorded message", body = MessageWithParts),
              (status = 400, description = "Bad request", body = NamedError),
              (status = 404, description = "Not found", body = NamedError),
              (status = 409, description = "Busy", body = BusyError)))]
pub async fn create_message(
    State(state): State<AppState>,
    PathIds(path): PathIds<SessionPath>,
    JsonBody(mut fields): JsonBody<Map<String, Value>>,
) -> ApiResult<MessageWithParts> {
    take_route_ids(
        &mut fields,
        "message",
        &[("sessionID", Some(path.id.as_str()))],
    )?;
    // OpenCode's prompt body has `parts`, rewind's extension a `role`: a body with neither (empty, or a
    // misspelt `part`) is no message, and must not be recorded as an empty user message (which, on a
    // reverted session, would also make the revert permanent).
    let given = |field: &str| fields.get(field).is_some_and(|value| !value.is_null());
    if !given("parts") && !given("role") {
        return Err(ApiError::BadRequest(
            "invalid message: it needs `parts` (OpenCode's prompt body) or a `role` (\"user\" or \
             \"assistant\", rewind's extension)"
                .to_owned(),
        ));
    }
    let body: MessageBody = serde_json::from_value(Value::Object(fields.clone()))
        .map_err(|error| ApiError::BadRequest(format!("invalid message: {error}")))?;
    let id = match body.id.or(body.message_id) {
        Some(id) => Some(parse_id(&id, MessageId::parse)?),
        None => None,
    };
    let role = match body.role.as_deref() {
        None | Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some(other) => {
            return Err(ApiError::BadRequest(format!(
                "role must be \"user\" or \"assistant\", not {other:?}"
            )));
        }
    };
    let parent_id = match body.parent_id {
        Some(id) => Some(parse_id(&id, MessageId::parse)?),
        None => None,
    };
    let parts = body
        .parts
        .into_iter()
        // A part may name its message when the body gives the message's id (a client sending back the
        // parts it stored, as OpenCode's `Part` carries both ids); without one there is none to match.
        .map(|part| new_part(part, &path.id, id.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    let input = NewMessage {
        id,
        role,
        parent_id,
        extra: extra_fields(fields, MESSAGE_BODY_FIELDS),
        parts,
    };
    let rewind = &state.services.rewind;
    Ok(Json(
        while_busy(|| rewind.create_message(&path.id, input.clone()))
            .await
            .map_err(in_session(&path.id))?,
    ))
}

/// Appends a part (with or without its own `prt_` id) to a message.
#[utoipa::path(post, path = "/session/{id}/message/{mid}/part",
    params(("id" = SessionId, Path, description = "The session"), ("mid" = MessageId, Path, description = "The message"), DirectoryParam),
    request_body(content = NewPart, description = "A part: {id?, type, …}"),
    responses((status = 200, description = "The part", body = Part),
              (status = 400, description = "Bad request", body = NamedError),
              (status = 404, description = "Not found", body = NamedError),
              (status = 409, description = "Busy (an operation held the session for longer than the 2 s wait)", body = BusyError)))]
pub async fn append_part(
    State(state): State<AppState>,
    PathIds(path): PathIds<MessagePath>,
    JsonBody(part): JsonBody<Value>,
) -> ApiResult<Part> {
    let part = new_part(part, &path.id, Some(&path.mid))?;
    let rewind = &state.services.rewind;
    Ok(Json(
        while_busy(|| rewind.append_part(&path.id, &path.mid, part.clone()))
            .await
            .map_err(in_session(&path.id))?,
    ))
}

/// Begins a step of an assistant message: snapshots the worktree and appends `step-start`.
#[utoipa::path(post, path = "/session/{id}/message/{mid}/step",
    params(("id" = SessionId, Path, description = "The session"), ("mid" = MessageId, Path, description = "The message"), DirectoryParam),
    responses((status = 200, description = "The parts appended ([step-start])", body = Vec<Part>),
              (status = 400, description = "Bad request (not an assistant message, a step already open)", body = NamedError),
              (status = 404, description = "Unknown session or message", body = NamedError),
              (status = 409, description = "Busy", body = BusyError)))]
pub async fn begin_step(
    State(state): State<AppState>,
    PathIds(path): PathIds<MessagePath>,
    _body: IgnoredBody,
) -> ApiResult<Vec<Part>> {
    let rewind = &state.services.rewind;
    let part = while_busy(|| rewind.begin_step(&path.id, &path.mid))
        .await
        .map_err(in_session(&path.id))?;
    Ok(Json(vec![part]))
}

/// Finishes the open step: snapshots again, appends `step-finish` and, when files changed, `patch`.
#[utoipa::path(post, path = "/session/{id}/message/{mid}/step/finish",
    params(("id" = SessionId, Path, description = "The session"), ("mid" = MessageId, Path, description = "The message"), DirectoryParam),
    request_body = StepFinishBody,
    responses((status = 200, description = "The parts appended", body = Vec<Part>),
              (status = 400, description = "Bad request (no step open in the message: the message says whether its step was aborted, say after the step timeout, finished already, or never begun; bad usage counts)", body = NamedError),
              (status = 404, description = "Unknown session or message", body = NamedError),
              (status = 409, description = "Busy", body = BusyError)))]
pub async fn finish_step(
    State(state): State<AppState>,
    PathIds(path): PathIds<MessagePath>,
    JsonBody(body): JsonBody<StepFinishBody>,
) -> ApiResult<Vec<Part>> {
    let end = StepEnd {
        reason: body.reason,
        cost: body.cost,
        tokens: body.tokens,
    };
    let rewind = &state.services.rewind;
    Ok(Json(
        while_busy(|| rewind.finish_step(&path.id, &path.mid, end.clone()))
            .await
            .map_err(in_session(&path.id))?,
    ))
}

/// Aborts the open step of the message (it stays revertable).
#[utoipa::path(post, path = "/session/{id}/message/{mid}/step/abort",
    params(("id" = SessionId, Path, description = "The session"), ("mid" = MessageId, Path, description = "The message"), DirectoryParam),
    responses((status = 200, description = "The parts appended", body = Vec<Part>),
              (status = 400, description = "Bad request (no step open in the message: the message says whether its step was aborted, finished already, or never begun)", body = NamedError),
              (status = 404, description = "Unknown session or message", body = NamedError),
              (status = 409, description = "Busy", body = BusyError)))]
pub async fn abort_step(
    State(state): State<AppState>,
    PathIds(path): PathIds<MessagePath>,
    _body: IgnoredBody,
) -> ApiResult<Vec<Part>> {
    let rewind = &state.services.rewind;
    Ok(Json(
        rewind
            .abort_step(&path.id, &path.mid)
            .await
            .map_err(in_session(&path.id))?,
    ))
}

/// Aborts the session's open step, if any, when this server owns it or its owner is gone.
#[utoipa::path(post, path = "/session/{id}/abort", params(("id" = SessionId, Path, description = "The session"), DirectoryParam),
    responses((status = 200, description = "true", body = bool, content_type = "application/json"),
              (status = 404, description = "Not found", body = NamedError),
              (status = 409, description = "The step belongs to a running process", body = BusyError)))]
pub async fn abort(
    State(state): State<AppState>,
    PathIds(path): PathIds<SessionPath>,
    _body: IgnoredBody,
) -> ApiResult<bool> {
    let rewind = &state.services.rewind;
    rewind.abort(&path.id).await.map_err(in_session(&path.id))?;
    Ok(Json(true))
}

/// Reverts the files and the visible conversation to a message or part.
#[utoipa::path(post, path = "/session/{id}/revert", params(("id" = SessionId, Path, description = "The session"), DirectoryParam),
    request_body = RevertBody,
    responses((status = 200, description = "The session with `revert`", body = Session),
              (status = 400, description = "Bad request", body = NamedError),
              (status = 404, description = "Unknown message or part", body = NamedError),
              (status = 409, description = "Busy", body = BusyError)))]
pub async fn revert(
    State(state): State<AppState>,
    PathIds(path): PathIds<SessionPath>,
    JsonBody(body): JsonBody<RevertBody>,
) -> Result<Response, ApiError> {
    let target = revert_target(body.message_id, body.part_id)?;
    let started = Instant::now();
    let (session, counts) = state
        .services
        .rewind
        .revert_counted(&path.id, target)
        .await
        .map_err(in_session(&path.id))?;
    log_file_operation("revert", &path.id, counts, started);
    Ok(without_open_step(session))
}

/// The session as the answer, saying to the guard (`security::guard`) when it has no open step: the
/// step timeout's renewal after the request (`Rewind::note_request`, a read of the session) has then
/// nothing to renew. A revert or unrevert runs only without one.
fn without_open_step(session: Session) -> Response {
    let open = session.step.is_some();
    let mut response = Json(session).into_response();
    if !open {
        response.extensions_mut().insert(NoOpenStep);
    }
    response
}

/// The one log line of a revert or unrevert: the session, the files written, deleted and kept, the time.
fn log_file_operation(what: &str, session: &SessionId, counts: FileCounts, started: Instant) {
    let elapsed_ms = (started.elapsed().as_secs_f64() * 10_000.0).round() / 10.0;
    let FileCounts {
        written,
        deleted,
        kept,
    } = counts;
    let kept = kept.len();
    tracing::info!(session = %session, written, deleted, kept, elapsed_ms, "{what}");
}

/// Puts the files the revert changed back as they were before it.
#[utoipa::path(post, path = "/session/{id}/unrevert", params(("id" = SessionId, Path, description = "The session"), DirectoryParam),
    responses((status = 200, description = "The session", body = Session),
              (status = 404, description = "Not found", body = NamedError),
              (status = 409, description = "Busy", body = BusyError)))]
pub async fn unrevert(
    State(state): State<AppState>,
    PathIds(path): PathIds<SessionPath>,
    _body: IgnoredBody,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let (session, counts) = state
        .services
        .rewind
        .unrevert_counted(&path.id)
        .await
        .map_err(in_session(&path.id))?;
    log_file_operation("unrevert", &path.id, counts, started);
    Ok(without_open_step(session))
}

/// Makes the current revert permanent (cleanup): the hidden messages and parts are deleted.
#[utoipa::path(post, path = "/session/{id}/revert/commit",
    params(("id" = SessionId, Path, description = "The session"), DirectoryParam),
    responses((status = 200, description = "The session", body = Session),
              (status = 404, description = "Not found", body = NamedError),
              (status = 409, description = "Busy", body = BusyError)))]
pub async fn commit_revert(
    State(state): State<AppState>,
    PathIds(path): PathIds<SessionPath>,
    _body: IgnoredBody,
) -> ApiResult<Session> {
    let rewind = &state.services.rewind;
    Ok(Json(
        rewind
            .commit_revert(&path.id)
            .await
            .map_err(in_session(&path.id))?,
    ))
}

/// What a revert would do, changing nothing.
#[utoipa::path(get, path = "/session/{id}/revert/preview",
    params(("id" = SessionId, Path, description = "The session"), PreviewQuery, DirectoryParam),
    responses((status = 200, description = "{descriptor, files: [{file, action}]}", body = Preview),
              (status = 400, description = "Bad request (a malformed id)", body = NamedError),
              (status = 404, description = "Unknown message or part", body = NamedError)))]
pub async fn preview(
    State(state): State<AppState>,
    PathIds(path): PathIds<SessionPath>,
    QueryParams(query): QueryParams<PreviewQuery>,
) -> ApiResult<Preview> {
    let target = revert_target(query.message_id, query.part_id)?;
    let rewind = &state.services.rewind;
    Ok(Json(
        rewind
            .preview(&path.id, target)
            .await
            .map_err(in_session(&path.id))?,
    ))
}

/// The file diffs of the last revert (`?messageID=` is accepted and ignored, as in OpenCode).
#[utoipa::path(get, path = "/session/{id}/diff", params(("id" = SessionId, Path, description = "The session"), DirectoryParam,
        ("messageID" = Option<String>, Query, description = "accepted and ignored, as in OpenCode")),
    responses((status = 200, description = "FileDiff[]", body = Vec<FileDiff>),
              (status = 404, description = "Not found", body = NamedError)))]
pub async fn session_diff(
    State(state): State<AppState>,
    PathIds(path): PathIds<SessionPath>,
) -> ApiResult<Vec<FileDiff>> {
    let rewind = &state.services.rewind;
    Ok(Json(
        rewind
            .session_diff(&path.id)
            .await
            .map_err(in_session(&path.id))?,
    ))
}

/// The session's warnings with the snapshots that hold what was overwritten.
#[utoipa::path(get, path = "/session/{id}/warnings", params(("id" = SessionId, Path, description = "The session"), DirectoryParam),
    responses((status = 200, description = "[{time, message, snapshot?, files}]", body = Vec<Warning>),
              (status = 404, description = "Not found", body = NamedError)))]
pub async fn warnings(
    State(state): State<AppState>,
    PathIds(path): PathIds<SessionPath>,
) -> ApiResult<Vec<Warning>> {
    let rewind = &state.services.rewind;
    Ok(Json(
        rewind
            .warnings(&path.id)
            .await
            .map_err(in_session(&path.id))?,
    ))
}

/// `GET /global/health`: OpenCode's health route (its v2 client's `global.health()`, beyond SPEC 9's
/// table), which OpenCode's apps ask before they use a server: `{healthy: true, version}` from a server
/// that answers. It reads nothing: a database fault shows on the routes that need the database.
#[utoipa::path(get, path = "/global/health",
    responses((status = 200, description = "{healthy: true, version}", body = Health)))]
pub async fn health() -> Json<Health> {
    Json(Health {
        healthy: true,
        version: env!("CARGO_PKG_VERSION"),
    })
}

/// `GET /global/health`'s answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Health {
    /// Always true: a server that answers is healthy.
    pub healthy: bool,
    /// rewind's version.
    pub version: &'static str,
}

/// Unknown routes: OpenCode's 404 body.
pub async fn not_found(method: Method, uri: Uri) -> ApiError {
    ApiError::NotFound(format!("No route for {method} {}", uri.path()))
}

/// A known route with another method.
pub async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}

fn parse_id<T>(text: &str, parse: fn(&str) -> rewind_core::Result<T>) -> Result<T, ApiError> {
    parse(text).map_err(|error| ApiError::BadRequest(error.to_string()))
}

fn revert_target(message_id: String, part_id: Option<String>) -> Result<RevertTarget, ApiError> {
    Ok(RevertTarget {
        message_id: parse_id(&message_id, MessageId::parse)?,
        part_id: match part_id {
            Some(id) => Some(parse_id(&id, PartId::parse)?),
            None => None,
        },
    })
}

/// Takes the ids a body of `what` (a message, a part) may repeat from its route out of `fields`: each
/// `(key, expected)` must be absent or name the route's own (`expected`; `None` when the route has none).
/// Kept, they would be stored beside the fields of the same name.
fn take_route_ids(
    fields: &mut Map<String, Value>,
    what: &str,
    ids: &[(&str, Option<&str>)],
) -> Result<(), ApiError> {
    for &(key, expected) in ids {
        match (fields.remove(key), expected) {
            (None, _) => {}
            (Some(Value::String(given)), Some(expected)) if given == expected => {}
            (Some(given), _) => {
                return Err(ApiError::BadRequest(format!(
                    "{what} {key} {given} does not match the route"
                )));
            }
        }
    }
    Ok(())
}

/// A part as a client sends it: `{id?, type, …}`, maybe with `sessionID`/`messageID`, which must then
/// name the route's session and message.
fn new_part(
    value: Value,
    session: &SessionId,
    message: Option<&MessageId>,
) -> Result<NewPart, ApiError> {
    let Value::Object(mut fields) = value else {
        return Err(ApiError::BadRequest(
            "a part must be a JSON object {type, …}".to_owned(),
        ));
    };
    let id = match fields.remove("id") {
        Some(Value::String(id)) => Some(parse_id(&id, PartId::parse)?),
        Some(Value::Null) | None => None,
        Some(_) => return Err(ApiError::BadRequest("part id must be a string".to_owned())),
    };
    take_route_ids(
        &mut fields,
        "part",
        &[
            ("sessionID", Some(session.as_str())),
            ("messageID", message.map(MessageId::as_str)),
        ],
    )?;
    let body: PartBody = serde_json::from_value(Value::Object(fields))
        .map_err(|error| ApiError::BadRequest(format!("invalid part: {error}")))?;
    Ok(NewPart { id, body })
}
