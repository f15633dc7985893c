//! Request extractors whose rejections are OpenCode's JSON errors, never axum's plain text: bodies (with
//! the size limit as 413), path ids (a malformed id is 400) and query strings.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A JSON body: an object, as every body of OpenCode's API is (serde would also take a struct's fields
/// as an array, `["msg_…", null]`). An empty body reads as `{}` (OpenCode's clients send none on some
/// POSTs, with no `Content-Type`). A body sent with a `Content-Type` must be sent as JSON
/// (`application/json`, or `…+json`): 415 otherwise, as a `text/plain` or form body is what a web page can
/// send without the browser asking the server first (review: such a body reverted a session).
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let content_type = request
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .map(|value| value.to_str().unwrap_or("?").to_owned());
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::PayloadTooLarge(format!(
                        "the request body is larger than the server's limit: {}",
                        rejection.body_text()
                    ))
                } else {
                    ApiError::BadRequest(format!(
                        "cannot read the request body: {}",
                        rejection.body_text()
                    ))
                }
            })?;
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            if let Some(given) = content_type.filter(|given| !is_json(given)) {
                return Err(ApiError::UnsupportedMediaType(format!(
                    "the request body is sent as {given:?}: send it as JSON (Content-Type: application/json)"
                )));
            }
            &bytes
        };
        if text.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::BadRequest(
                "invalid JSON body: it must be a JSON object ({…})".to_owned(),
            ));
        }
        serde_json::from_slice(text)
            .map(JsonBody)
            .map_err(|error| ApiError::BadRequest(format!("invalid JSON body: {error}")))
    }
}

/// The body of a route that reads none (a step's begin and abort, a session's abort, unrevert,
/// `revert/commit`, `DELETE`): empty, or a JSON object, whose fields are ignored; anything else is refused
/// as `JsonBody` refuses it (400 before anything is done; multi-server fuzz: `DELETE` with the body `{`
/// deleted the session).
#[derive(Debug)]
pub struct IgnoredBody;

impl<S: Send + Sync> FromRequest<S> for IgnoredBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let JsonBody(serde::de::IgnoredAny) = JsonBody::from_request(request, state).await?;
        Ok(IgnoredBody)
    }
}

/// Whether a `Content-Type` value names JSON: `application/json` or `application/<something>+json`, with
/// any parameters (`; charset=utf-8`), in any case.
pub(super) fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|subtype| subtype.ends_with("+json"))
}

/// Path parameters, parsed by `T`'s deserializer (ids validate themselves): a bad one is 400.
#[derive(Debug)]
pub struct PathIds<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for PathIds<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| PathIds(value))
            .map_err(|rejection| {
                ApiError::BadRequest(format!("invalid path: {}", rejection.body_text()))
            })
    }
}

/// A query string: a bad one is 400.
#[derive(Debug)]
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|Query(value)| QueryParams(value))
            .map_err(|rejection| {
                ApiError::BadRequest(format!("invalid query: {}", rejection.body_text()))
            })
    }
}
