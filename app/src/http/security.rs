//! The guards every request passes (SPEC section 9): on loopback, a `Host` that names loopback and no
//! foreign `Origin` (a web page must not drive the server through DNS rebinding); the basic-auth password
//! when one is set; and a worktree (`?directory=` or `x-opencode-directory`), and the session a path
//! names, under the project roots.

use std::path::{Path, PathBuf};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde::Deserialize;

use super::AppState;
use super::error::ApiError;
use crate::config::is_loopback_name;
use crate::worktree::{by_name, canonical_worktree};

/// The worktree a request named (query or header), canonical and under a project root; `None` when it
/// named none.
#[derive(Clone, Debug)]
pub struct RequestDirectory(pub Option<String>);

#[derive(Deserialize)]
struct DirectoryQuery {
    directory: Option<String>,
}

/// Host, Origin and password checks, then the worktree check; wakes the outbox relay after a request that
/// may have changed something, so this server's own events reach its streams at once.
pub async fn guard(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let checked = if state.loopback_only {
        check_host_and_origin(request.headers())
    } else {
        check_same_origin(request.headers())
    };
    if let Err(error) = checked {
        tracing::warn!(
            peer = %peer(&request),
            method = %request.method(),
            path = request.uri().path(),
            ?error,
            "refused a request"
        );
        return error.into_response();
    }
    if let Some(password) = &state.password
        && !authorized(request.headers(), password)
    {
        // A client without credentials (a browser's first try) is routine; a wrong password is said, with
        // where it came from, for whoever watches the log for guessing (review).
        if request.headers().contains_key(header::AUTHORIZATION) {
            tracing::warn!(
                peer = %peer(&request),
                method = %request.method(),
                path = request.uri().path(),
                "refused a request with a wrong password (or two Authorization headers)"
            );
        } else {
            tracing::debug!(peer = %peer(&request), "refused a request without a password");
        }
        return ApiError::Unauthorized.into_response();
    }
    if let Err(error) = check_content_type(&request) {
        return error.into_response();
    }
    let directory = match requested_directory(&request) {
        Ok(directory) => directory,
        Err(error) => return error.into_response(),
    };
    let directory = match directory {
        Some(raw) => match state.check_worktree(&raw) {
            Ok(canonical) => Some(canonical),
            Err(error) => return error.into_response(),
        },
        None => None,
    };
    request.extensions_mut().insert(RequestDirectory(directory));
    let session = session_of(request.uri().path());
    if let Some(id) = &session
        && let Err(error) = state.check_session(id).await
    {
        return error.into_response();
    }
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = std::time::Instant::now();
    let arrived = rewind_core::HostPort::now_ms(&*state.services.host);
    let response = next.run(request).await;
    tracing::debug!(
        %method,
        %path,
        status = response.status().as_u16(),
        elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
        "request"
    );
    // A request that writes on a session keeps its HTTP client's open step alive (the step timeout),
    // unless the timeout had passed when it came. Reads do not: a UI polling the session says nothing of
    // the agent, and would keep a dead agent's step open for ever (black-box). It is noted after the
    // request ran, so the request itself first sees whether the step was already abandoned.
    let reads = matches!(
        method,
        axum::http::Method::GET | axum::http::Method::HEAD | axum::http::Method::OPTIONS
    );
    // A route that answered with the session and no open step in it has nothing to renew.
    let no_step = response.extensions().get::<NoOpenStep>().is_some();
    if let Some(session) = session.filter(|_| !reads && !no_step)
        && let Err(error) = state.services.rewind.note_request(&session, arrived).await
    {
        tracing::warn!(%session, %error, "cannot renew the session's open step");
    }
    if method != axum::http::Method::GET {
        state.relay_wake.notify_one();
    }
    response
}

/// Put in a response by a route that answers with the session, when it has no open step: the step
/// timeout's renewal after the request has nothing to do (its read of the session is saved).
#[derive(Clone, Copy, Debug)]
pub struct NoOpenStep;

/// The session a `/session/{id}…` path names, when the id is well-formed (percent-decoded first, as the
/// router decodes it).
fn session_of(path: &str) -> Option<rewind_core::model::SessionId> {
    let id = path.strip_prefix("/session/")?.split('/').next()?;
    rewind_core::model::SessionId::parse(&percent_decode(id)?).ok()
}

/// The address `request` came from, or `unknown` (a request not served through `startup::serve`).
fn peer(request: &Request) -> String {
    request
        .extensions()
        .get::<crate::startup::ConnectInfo<std::net::SocketAddr>>()
        .map_or_else(|| "unknown".to_owned(), |info| info.0.to_string())
}

/// Every `Host` and `Origin` value is checked, not the first alone: a request that repeats one (which no
/// browser sends) must not pass on a loopback first value (black-box).
fn check_host_and_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    if headers.get_all(header::HOST).iter().count() > 1 {
        return Err(ApiError::Forbidden(
            "a request may carry one Host header only".to_owned(),
        ));
    }
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .ok_or_else(|| ApiError::Forbidden("a Host header is required".to_owned()))?;
    if !is_loopback_name(strip_port(host)) {
        return Err(ApiError::Forbidden(format!(
            "Host {host:?} is not a loopback name; this server only answers requests made to localhost"
        )));
    }
    check_same_origin(headers)
}

/// A request a web page sends (it carries an `Origin`) is served only from the server's own origin: its
/// `Origin` names the `Host` it calls. The server sends no CORS headers, so a page of any other origin
/// cannot read an answer, and could only send blind writes: a page of another local server (a dev server,
/// a local app with a script injection) reverted a session and committed the revert with a `text/plain`
/// body, which a browser sends without asking first (review: loopback origins were allowed). Beyond
/// loopback the browser may hold the basic-auth credentials, which such a page would use the same way.
/// Clients that are not browsers (OpenCode's, `curl`) send no `Origin`.
fn check_same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    for origin in headers.get_all(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("");
        let origin_host = origin_authority(origin);
        let same = !origin_host.is_empty() && origin_host.eq_ignore_ascii_case(host);
        if !same {
            return Err(ApiError::Forbidden(format!(
                "Origin {origin:?} is foreign; only pages served by this server may call it"
            )));
        }
    }
    Ok(())
}

/// The `host[:port]` of an `Origin` value (`scheme://host[:port]`), empty when it has none (`null`).
fn origin_authority(origin: &str) -> &str {
    origin
        .split_once("://")
        .map(|(_, rest)| rest.split('/').next().unwrap_or(""))
        .unwrap_or("")
}

/// `host`, `host:port`, `[v6]` or `[v6]:port` without the port. Anything else after a `]` than a port is
/// left in place, so the value names no loopback host (review: `[::1]evil` was taken for `[::1]`).
fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) if is_port_suffix(&authority[end + 1..]) => &authority[..=end],
            _ => authority,
        };
    }
    match authority.rsplit_once(':') {
        // A bare IPv6 address has several colons and no port.
        Some((host, port)) if !host.contains(':') && port.chars().all(|c| c.is_ascii_digit()) => {
            host
        }
        _ => authority,
    }
}

/// Whether `rest` is nothing or `:` and a port's digits.
fn is_port_suffix(rest: &str) -> bool {
    rest.is_empty()
        || rest
            .strip_prefix(':')
            .is_some_and(|port| !port.is_empty() && port.chars().all(|c| c.is_ascii_digit()))
}

/// A request that may change something (any method but `GET`, `HEAD` and `OPTIONS`) that names a
/// `Content-Type` must name JSON (`application/json` or `…+json`), also on a route that reads no body
/// (a step's begin, abort, unrevert, `revert/commit`, `DELETE`), and also with an empty body: `text/plain`
/// and form bodies are what a web page can send without the browser asking the server first, so this is
/// the second check behind the `Origin` one (security review M1: those routes acted on such requests).
fn check_content_type(request: &Request) -> Result<(), ApiError> {
    use axum::http::Method;
    if matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    ) {
        return Ok(());
    }
    for given in request.headers().get_all(header::CONTENT_TYPE) {
        let text = given.to_str().unwrap_or("?");
        if !super::extract::is_json(text) {
            return Err(ApiError::UnsupportedMediaType(format!(
                "the request is sent as {text:?}: send its body, if any, as JSON (Content-Type: \
                 application/json), or send no Content-Type"
            )));
        }
    }
    Ok(())
}

/// Whether the request carries the password: one `Authorization` header (two are refused, as two `Host`
/// headers are: which one a proxy on the way read is not known; review), basic, with the password.
fn authorized(headers: &HeaderMap, password: &str) -> bool {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    let Ok(value) = value.to_str() else {
        return false;
    };
    // The scheme in any case (RFC 9110), as a client may spell it.
    let Some((scheme, encoded)) = value.split_once(' ') else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return false;
    }
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
        return false;
    };
    // Any user name is accepted (OpenCode's clients send `opencode`); the password decides.
    let given = match decoded.iter().position(|&b| b == b':') {
        Some(colon) => &decoded[colon + 1..],
        None => return false,
    };
    constant_time_eq(given, password.as_bytes())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut difference = a.len() ^ b.len();
    for (i, byte) in b.iter().enumerate() {
        difference |= usize::from(a.get(i).copied().unwrap_or(0) ^ byte);
    }
    difference == 0
}

/// The worktree named by `?directory=` or else the `x-opencode-directory` header (percent-encoded by
/// OpenCode's client).
/// A query that cannot be read is refused rather than ignored: ignoring it would run the request on the
/// server's directory instead of the one the client meant.
fn requested_directory(request: &Request) -> Result<Option<String>, ApiError> {
    let query = axum::extract::Query::<DirectoryQuery>::try_from_uri(request.uri())
        .map(|axum::extract::Query(query)| query.directory)
        .map_err(|rejection| {
            ApiError::BadRequest(format!("invalid query: {}", rejection.body_text()))
        })?;
    if let Some(directory) = query.filter(|d| !d.is_empty()) {
        return Ok(Some(directory));
    }
    match request.headers().get("x-opencode-directory") {
        Some(value) => {
            let raw = value.to_str().map_err(|_| {
                ApiError::BadRequest("the x-opencode-directory header is not text".to_owned())
            })?;
            let decoded = percent_decode(raw).ok_or_else(|| {
                ApiError::BadRequest(
                    "the x-opencode-directory header is not valid percent-encoded UTF-8".to_owned(),
                )
            })?;
            Ok(Some(decoded).filter(|d| !d.is_empty()))
        }
        None => Ok(None),
    }
}

/// `text` with its `%XX` escapes decoded; `None` when an escape is malformed or the result is not UTF-8.
pub(crate) fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Canonicalises `raw` and checks it lies under one of `roots` (already canonical).
pub fn worktree_under_roots(raw: &str, roots: &[PathBuf]) -> Result<String, ApiError> {
    let path = Path::new(raw);
    if !path.is_absolute() {
        return Err(ApiError::BadRequest(format!(
            "worktree {raw:?} must be an absolute path"
        )));
    }
    // Outside the roots, the answer says only that, with the path as given: not whether something is
    // there, of what kind, or where a symlink leads (review: `/etc/shadow` "is not a directory", `/root/.ssh`
    // "does not exist", a symlink's target named).
    let (canonical, text) = match canonical_worktree(path) {
        Ok(found) => found,
        Err(_) if !under_roots(&leads_to(path, SYMLINK_HOPS), roots) => {
            return Err(outside_roots(path, roots));
        }
        Err(error) => return Err(ApiError::BadRequest(format!("worktree {error}"))),
    };
    if !under_roots(&canonical, roots) {
        return Err(outside_roots(path, roots));
    }
    Ok(text)
}

/// How many symlinks `leads_to` follows (the system's own limit).
const SYMLINK_HOPS: u32 = 40;

/// Where `path` leads as far as it exists: its longest prefix that resolves, resolved, with the rest by
/// name; a dangling symlink on the way is followed to where it points (up to `hops` of them). So a path
/// that cannot be a worktree is judged by where it goes, not by its spelling: a symlink inside the roots
/// to a file, a missing path or another symlink outside them is outside (diff review: its target's kind
/// and name were told).
fn leads_to(path: &Path, hops: u32) -> PathBuf {
    let parts: Vec<std::path::Component<'_>> = path.components().collect();
    for at in (1..=parts.len()).rev() {
        let prefix: PathBuf = parts[..at].iter().collect();
        let rest: PathBuf = parts[at..].iter().collect();
        if let Ok(real) = std::fs::canonicalize(&prefix) {
            return by_name(&real.join(rest));
        }
        if hops > 0
            && let Ok(target) = std::fs::read_link(&prefix)
        {
            // Relative to the link's directory (an absolute target replaces it).
            let base = prefix.parent().unwrap_or(Path::new("/"));
            return leads_to(&base.join(target).join(rest), hops - 1);
        }
    }
    by_name(path)
}

/// A stored session's worktree `directory` (canonical when it was recorded) under a project root, and
/// still resolving to itself (`session_resolves_to_itself`), or 400. A session whose directory was deleted
/// stays readable.
pub fn session_under_roots(directory: &str, roots: &[PathBuf]) -> Result<(), ApiError> {
    session_resolves_to_itself(directory)?;
    let path = Path::new(directory);
    if under_roots(path, roots) {
        return Ok(());
    }
    Err(outside_roots(path, roots))
}

/// 400 when a stored session's worktree `directory` (canonical when it was recorded) resolves elsewhere
/// now: it, or a directory above it, was replaced by a symlink (or moved). Following it would read and
/// write another directory, perhaps outside the project roots, with snapshots of the first. A directory
/// that is gone is left to the routes (the session stays readable).
pub fn session_resolves_to_itself(directory: &str) -> Result<(), ApiError> {
    let elsewhere = |canonical: &dyn std::fmt::Display| {
        ApiError::BadRequest(format!(
            "worktree {directory} now resolves to {canonical}: it, or a directory above it, was replaced by a \
             symlink or moved; rewind does not follow it (the session's snapshots are of {directory})"
        ))
    };
    match canonical_worktree(Path::new(directory)) {
        Ok((canonical, _)) if canonical != Path::new(directory) => {
            Err(elsewhere(&canonical.display()))
        }
        // The stored path is UTF-8: one that resolves to a path that is not lies elsewhere.
        Err(crate::worktree::WorktreeError::NotUtf8(canonical)) => Err(elsewhere(&canonical)),
        _ => Ok(()),
    }
}

/// Whether `path` (canonical) lies under one of the (canonical) project roots.
pub fn under_roots(path: &Path, roots: &[PathBuf]) -> bool {
    roots.iter().any(|root| path.starts_with(root))
}

fn outside_roots(worktree: &Path, roots: &[PathBuf]) -> ApiError {
    let roots: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
    ApiError::BadRequest(format!(
        "worktree {} is outside the project roots ({}); start the server with --project-root",
        worktree.display(),
        roots.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_stripped_from_authorities() {
        assert_eq!(strip_port("localhost:4096"), "localhost");
        assert_eq!(strip_port("127.0.0.1"), "127.0.0.1");
        assert_eq!(strip_port("[::1]:80"), "[::1]");
        assert_eq!(strip_port("::1"), "::1");
        assert_eq!(strip_port("evil.com:80"), "evil.com");
        assert_eq!(strip_port("[::1]evil"), "[::1]evil");
        assert_eq!(strip_port("[::1]:80x"), "[::1]:80x");
        assert_eq!(strip_port("[::1]:"), "[::1]:");
        assert!(!is_loopback_name(strip_port("[::1]evil")));
        assert!(!is_loopback_name(strip_port("[::1]:4096.evil.example")));
        assert!(is_loopback_name(strip_port("[::1]:4096")));
    }

    #[test]
    fn percent_decoding_matches_encode_uri_component() {
        assert_eq!(
            percent_decode("%2Ftmp%2Fa%20b%C3%A9").as_deref(),
            Some("/tmp/a bé")
        );
        assert_eq!(percent_decode("/plain").as_deref(), Some("/plain"));
        assert_eq!(percent_decode("%zz"), None);
    }

    /// A repeated `Origin` or `Host` header is checked whole: a foreign value after a loopback one is
    /// refused (black-box: only the first was looked at).
    #[test]
    fn every_origin_and_host_value_is_checked() {
        let header = |value: &str| value.parse::<axum::http::HeaderValue>().expect("a header");
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, header("127.0.0.1:4096"));
        headers.append(header::ORIGIN, header("http://127.0.0.1:4096"));
        assert!(check_host_and_origin(&headers).is_ok());
        assert!(check_same_origin(&headers).is_ok());
        headers.append(header::ORIGIN, header("http://evil.example"));
        assert!(check_host_and_origin(&headers).is_err());
        assert!(check_same_origin(&headers).is_err());

        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, header("localhost"));
        headers.append(header::HOST, header("evil.example"));
        assert!(check_host_and_origin(&headers).is_err());
    }

    #[test]
    fn basic_auth_checks_the_password() {
        let mut headers = HeaderMap::new();
        assert!(!authorized(&headers, "pw"));
        let encoded = base64::engine::general_purpose::STANDARD.encode("opencode:pw");
        headers.insert(
            header::AUTHORIZATION,
            format!("Basic {encoded}").parse().expect("a valid header"),
        );
        assert!(authorized(&headers, "pw"));
        for scheme in ["basic", "BASIC", "bAsIc"] {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::AUTHORIZATION,
                format!("{scheme} {encoded}")
                    .parse()
                    .expect("a valid header"),
            );
            assert!(authorized(&headers, "pw"), "{scheme}");
        }
        assert!(!authorized(&headers, "pw2"));
        assert!(!authorized(&headers, "p"));
    }
}
