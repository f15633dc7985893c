//! The HTTP server (SPEC sections 9 and 10): OpenCode's session API over the core services, the event
//! stream fed by the outbox relay, and the OpenAPI document. Handlers are thin: they parse, call
//! `Rewind`, and map its errors to OpenCode's JSON error bodies.

pub mod doc;
pub mod dto;
pub mod error;
pub mod events;
pub mod extract;
pub mod routes;
pub mod security;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use rewind_bus::BroadcastBus;
use rewind_core::model::SessionId;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Settings;
use crate::startup::{Application, ServerOptions, Services};
use error::ApiError;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// The core services and adapters.
    pub services: Services,
    /// The live event bus the relay feeds.
    pub bus: Arc<BroadcastBus>,
    /// Canonical project roots.
    pub roots: Arc<Vec<PathBuf>>,
    /// The server's working directory: the default worktree.
    pub cwd: PathBuf,
    /// Whether `Host`/`Origin` must be loopback.
    pub loopback_only: bool,
    /// The basic-auth password, when one is set.
    pub password: Option<Arc<str>>,
    /// Cancelled when the server stops; ends the event streams.
    pub shutdown: CancellationToken,
    /// Wakes the outbox relay early.
    pub relay_wake: Arc<Notify>,
    /// The heartbeat interval of event streams.
    pub heartbeat: Duration,
    /// The requests running detached from their connection (`detach`), waited for when the server stops.
    pub requests: TaskTracker,
    /// The worktrees of the sessions found under the project roots (`check_session`): a session's
    /// directory never changes and its id is never reused, so each is read once, not with its whole body
    /// on every request.
    pub sessions_in_roots: Arc<std::sync::Mutex<std::collections::HashMap<SessionId, String>>>,
}

/// How many sessions `AppState::sessions_in_roots` holds before it starts again.
const SESSIONS_IN_ROOTS: usize = 10_000;

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("roots", &self.roots)
            .field("cwd", &self.cwd)
            .finish_non_exhaustive()
    }
}

impl AppState {
    /// `raw` canonical and under a project root, or 400.
    pub fn check_worktree(&self, raw: &str) -> Result<String, ApiError> {
        security::worktree_under_roots(raw, &self.roots)
    }

    /// 400 when session `id` belongs to a worktree outside the project roots: the command line records
    /// sessions of any directory in the same database, and a request naming one must not read or change
    /// them. Also 400 when its worktree no longer resolves to itself (replaced by a symlink, or a directory
    /// above it was): that is looked at on every request. An unknown session is left to its route (404).
    /// One that cannot be read is refused with that error: the route reads it again, and a read that then
    /// succeeded (the database was busy a moment) would act on a session this check never saw.
    pub async fn check_session(&self, id: &SessionId) -> Result<(), ApiError> {
        let known = lock(&self.sessions_in_roots).get(id).cloned();
        if let Some(directory) = known {
            return security::session_resolves_to_itself(&directory);
        }
        let session = match self.services.rewind.session(id).await {
            Ok(session) => session,
            Err(rewind_core::Error::NotFound(_)) => return Ok(()),
            Err(error) => return Err(ApiError::from_core(error, Some(id))),
        };
        security::session_under_roots(&session.directory, &self.roots)?;
        let mut known = lock(&self.sessions_in_roots);
        if known.len() >= SESSIONS_IN_ROOTS {
            known.clear();
        }
        known.insert(id.clone(), session.directory);
        Ok(())
    }
}

fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The router with every route of SPEC section 9 and OpenCode's routes beyond it (README, "Server"), the
/// guards and the body limit.
pub fn router(state: AppState, body_limit: usize) -> Router {
    use routes::*;
    Router::new()
        .route("/session", get(list_sessions).post(create_session))
        .route("/session/status", get(session_status))
        .route(
            "/session/{id}",
            get(get_session)
                .patch(update_session)
                .delete(delete_session),
        )
        .route("/session/{id}/children", get(session_children))
        .route(
            "/session/{id}/message",
            get(list_messages).post(create_message),
        )
        .route("/session/{id}/message/{mid}", get(get_message))
        .route("/session/{id}/message/{mid}/part", post(append_part))
        .route("/session/{id}/message/{mid}/step", post(begin_step))
        .route("/session/{id}/message/{mid}/step/finish", post(finish_step))
        .route("/session/{id}/message/{mid}/step/abort", post(abort_step))
        .route("/session/{id}/abort", post(abort))
        .route("/session/{id}/revert", post(revert))
        .route("/session/{id}/unrevert", post(unrevert))
        .route("/session/{id}/revert/commit", post(commit_revert))
        .route("/session/{id}/revert/preview", get(preview))
        .route("/session/{id}/diff", get(session_diff))
        .route("/session/{id}/warnings", get(warnings))
        .route("/event", get(events::stream))
        .route("/global/event", get(events::global_stream))
        .route("/global/health", get(health))
        .route("/doc", get(doc::openapi_json))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            security::guard,
        ))
        .layer(axum::middleware::from_fn_with_state(state.clone(), detach))
        .with_state(state)
}

/// Runs every request to its end even when its client goes away. hyper drops a handler's future when the
/// connection closes, at whatever await it stands: a revert dropped there would keep its leases until they
/// expire (the session answers 409 meanwhile) and leave its intent for recovery to roll back, and the
/// store's thread would go on writing files no one records. So the request is a task of its own, tracked
/// in `AppState::requests` (the server waits for those still running when it stops); only the wait for its
/// response is dropped with the connection.
async fn detach(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    match state.requests.spawn(next.run(request)).await {
        Ok(response) => response,
        Err(error) => {
            tracing::error!(%error, "a request's task failed");
            ApiError::Internal("the request failed inside the server".to_owned()).into_response()
        }
    }
}

/// Runs `rewind serve` until SIGINT or SIGTERM: recovery, then the server and its outbox relay.
/// `directory` (the current directory, or `-C`) is the worktree of requests that name none. With `json`
/// the line that says where it listens is a JSON document, `{"listening": URL}`.
pub async fn serve(settings: Settings, directory: PathBuf, json: bool) -> Result<()> {
    let application = Application::build_with(
        settings,
        ServerOptions {
            cwd: Some(directory),
            ..ServerOptions::default()
        },
    )
    .await?;
    let stop = application.shutdown_token();
    // Listened for before the line below: a script that sends SIGTERM as soon as it reads it is heard.
    let stop_signal = stop_signal();
    // Scripts read the port from this line (`--port 0` picks a free one).
    let url = format!("http://{}", application.address());
    if json {
        println!("{}", serde_json::json!({ "listening": url }));
    } else {
        println!("rewind listening on {url}");
    }
    tokio::spawn(async move {
        stop_signal.await;
        tracing::info!(
            "stopping: finishing requests and breaking off event streams (their clients reconnect)"
        );
        stop.cancel();
    });
    application.run_until_stopped().await
}

/// Listens for SIGINT and SIGTERM from the moment it is called; the future ends at the first of them.
#[cfg(unix)]
fn stop_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let interrupt = signal(SignalKind::interrupt());
    let terminate = signal(SignalKind::terminate());
    async move {
        match (interrupt, terminate) {
            (Ok(mut interrupt), Ok(mut terminate)) => {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
            }
            (Ok(mut interrupt), Err(error)) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the server");
                interrupt.recv().await;
            }
            (Err(error), Ok(mut terminate)) => {
                tracing::warn!(%error, "cannot listen for SIGINT; only SIGTERM stops the server");
                terminate.recv().await;
            }
            (Err(interrupt), Err(terminate)) => {
                tracing::error!(%interrupt, %terminate, "cannot listen for SIGINT or SIGTERM; the server runs until it is killed");
                std::future::pending::<()>().await;
            }
        }
    }
}

/// Listens for Ctrl-C (from its first poll, where signals are not Unix's).
#[cfg(not(unix))]
fn stop_signal() -> impl std::future::Future<Output = ()> {
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session whose row cannot be read is refused by the roots check with the read's error, not let
    /// through to its route (review: any failed read passed the check, so a route whose own read then
    /// succeeded would act on a session outside the roots).
    #[tokio::test]
    async fn a_session_that_cannot_be_read_is_refused_by_the_roots_check() {
        let (root, outside, data) = (tempdir(), tempdir(), tempdir());
        let settings = crate::Settings::new(data.path(), root.path());
        let services = Services::open(&settings, rewind_core::model::HolderKind::Server)
            .await
            .expect("services");
        let session = services
            .rewind
            .create_session(&outside.path().to_string_lossy(), None)
            .await
            .expect("a session outside the roots");
        let database = services.repo.sqlite_file().expect("SQLite").to_owned();
        let state = AppState {
            services,
            bus: Arc::new(BroadcastBus::new(16)),
            roots: Arc::new(vec![std::fs::canonicalize(root.path()).expect("root")]),
            cwd: root.path().to_owned(),
            loopback_only: true,
            password: None,
            shutdown: CancellationToken::new(),
            relay_wake: Arc::new(Notify::new()),
            heartbeat: Duration::from_secs(10),
            requests: TaskTracker::new(),
            sessions_in_roots: Arc::default(),
        };
        let refused = |result: Result<(), ApiError>| match result {
            Err(error) => error,
            Ok(()) => panic!("let through"),
        };
        let outside_roots = refused(state.check_session(&session.id).await);
        assert!(
            format!("{outside_roots:?}").contains("outside the project roots"),
            "{outside_roots:?}"
        );
        // The session's stored body made unreadable (a damaged row; a locked database answers alike).
        let damaged = std::process::Command::new("python3")
            .args([
                "-c",
                "import sqlite3, sys\n\
                 db = sqlite3.connect(sys.argv[1])\n\
                 db.execute(\"update session set body = 'not json'\")\n\
                 db.commit()",
            ])
            .arg(&database)
            .status()
            .expect("python3");
        assert!(damaged.success());
        let unreadable = refused(state.check_session(&session.id).await);
        assert!(
            !format!("{unreadable:?}").contains("outside the project roots"),
            "{unreadable:?}"
        );
        // An unknown session is left to its route, which answers 404.
        let unknown = SessionId::parse("ses_000000000001abcdefghijklmn").expect("an id");
        assert!(state.check_session(&unknown).await.is_ok());
    }

    fn tempdir() -> tempfile::TempDir {
        tempfile::tempdir().expect("a temporary directory")
    }
}
