//! Errors as OpenCode's clients expect them: each failure becomes a status and a JSON body in OpenCode's
//! shapes (SPEC section 9); 500 is kept for real internal faults. A backend fault's cause is logged, never
//! sent; a missing snapshot object or an unreadable file is sent with its message (it names the object or
//! the worktree file, which the client needs to act on) and logged too.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rewind_core::Error;
use rewind_core::error::{BoxError, Noted, StorageFault};
use rewind_core::model::SessionId;
use serde::Serialize;
use utoipa::ToSchema;

/// A failed request.
#[derive(Debug)]
pub enum ApiError {
    /// 400 `{name:"BadRequest", data:{message}}`.
    BadRequest(String),
    /// 404 `{name:"NotFoundError", data:{message}}`.
    NotFound(String),
    /// 409 `{_tag:"SessionBusyError", sessionID, message}`.
    Busy {
        /// The session concerned, when known.
        session_id: Option<String>,
        /// What holds it.
        message: String,
    },
    /// 401 with `WWW-Authenticate`: the password is missing or wrong.
    Unauthorized,
    /// 403: a foreign `Host` or `Origin`.
    Forbidden(String),
    /// 405: the route exists with other methods.
    MethodNotAllowed(String),
    /// 413: the request body is over the limit.
    PayloadTooLarge(String),
    /// 415: a body that is not sent as JSON.
    UnsupportedMediaType(String),
    /// 500: an internal fault; `public` is sent, the cause has been logged.
    Internal(String),
}

impl ApiError {
    /// Maps a core error, naming `session` in a 409 when the core did not.
    pub fn from_core(error: Error, session: Option<&SessionId>) -> ApiError {
        match error {
            Error::NotFound(message) => ApiError::NotFound(message),
            Error::InvalidInput(message) => ApiError::BadRequest(message),
            Error::Busy {
                session_id,
                message,
            } => ApiError::Busy {
                session_id: session_id
                    .or_else(|| session.cloned())
                    .map(|id| id.as_str().to_owned()),
                message,
            },
            // The services build a stale write again; one still stale after that is a busy session.
            Error::Stale {
                session_id,
                message,
            } => ApiError::Busy {
                session_id: Some(session_id.as_str().to_owned()),
                message: format!("{message}; try again"),
            },
            Error::LeaseLost(what) => ApiError::Busy {
                session_id: session.map(|id| id.as_str().to_owned()),
                message: format!(
                    "the operation lost its lease ({what}) to another one; nothing was stored, retry"
                ),
            },
            // The store lacks what the session names: nothing was changed (every object is checked before
            // a file is touched). Still a fault (SPEC 9), of the data rather than of the request.
            // After a rollback the error says itself that the files are back (`Error::noted`): "nothing was
            // changed" is not added (review: both were said at once).
            error @ Error::MissingObject(_) => {
                tracing::error!(error = %error, "request failed");
                let said = error.to_string();
                let unchanged = if said.contains(rewind_core::error::PUT_BACK)
                    || said.contains(rewind_core::error::NOTHING_CHANGED)
                {
                    ""
                } else {
                    "; nothing was changed"
                };
                ApiError::Internal(format!(
                    "{error}{unchanged} (the snapshot was collected, or the session was recorded by a rewind \
                     with another data directory, whose snapshot store this server does not use)"
                ))
            }
            error @ (Error::Unreadable { .. } | Error::Damaged(_)) => {
                tracing::error!(error = %error, "request failed");
                ApiError::Internal(error.to_string())
            }
            Error::Storage { fault, source } => ApiError::from_storage(fault, source, session),
            error @ Error::Backend(_) => {
                tracing::error!(error = %crate::report::chain(&error), "internal fault");
                ApiError::Internal("internal error; the server log has the cause".to_owned())
            }
        }
    }

    /// Maps a storage fault. Another process holding the database's write lock past the busy timeout is no
    /// internal fault (SPEC 9: 500 only for those): a 409, as the request may be sent again once it lets go.
    /// The other faults are the machine's, not faults of rewind's to hide: a 500 that says which, so its user
    /// can act (free space, restart, restore a backup); the cause itself stays in the log, as for any 500
    /// (it may name the database). A rollback's note (`Error::noted`) is said after either.
    fn from_storage(
        fault: StorageFault,
        source: BoxError,
        session: Option<&SessionId>,
    ) -> ApiError {
        let noted = source.downcast_ref::<Noted>();
        let said = match fault {
            StorageFault::Locked | StorageFault::Busy => {
                // A pool that never frees a connection (a leak, a hang) would otherwise answer "retry"
                // to every request with nothing in the log.
                if fault == StorageFault::Busy {
                    tracing::warn!(
                        error = %rewind_core::error::chain(source.as_ref()),
                        "database busy: no connection came free in time"
                    );
                }
                // Under a note, the lock's own text (not the causes `Noted` adds), then the note.
                let message = match noted {
                    Some(noted) => format!("{}; {}", noted.error(), noted.note()),
                    None => source.to_string(),
                };
                return ApiError::Busy {
                    session_id: session.map(|id| id.as_str().to_owned()),
                    message,
                };
            }
            StorageFault::Replaced => {
                "the database file was deleted or replaced while the server had it open; nothing was \
                 stored: restart the server to use the file now at that path; the server log names it"
            }
            // Review: a Postgres that is down answered "internal error" after 30 s.
            StorageFault::Unreachable => {
                "the database cannot be reached (its PostgreSQL server is down or unreachable): try again \
                 once it is back; an operation it interrupted is finished by the next one; the server log \
                 names it"
            }
            // Stop 66's outage fuzz: a connection the server ended mid-request answered "internal error".
            StorageFault::ConnectionLost => {
                "the connection to the database broke during the request (its PostgreSQL server restarted \
                 or ended the connection): whether its last change was stored is not known, so look at the \
                 session before sending it again; an operation it interrupted is finished by the next one; \
                 the server log has the cause"
            }
            StorageFault::Corrupt => {
                "the database is corrupt; nothing was stored; the server log names it"
            }
            StorageFault::DiskFull => {
                // What became of an operation's files is its note's to say (black-box review: "is put back
                // once there is" was said before "were put back").
                "a disk rewind writes to (the worktree's or the data directory's) is full; free some space \
                 and try again; the server log has the cause"
            }
            StorageFault::ReadOnly => {
                "a disk or database rewind writes to (the worktree's, the data directory's or the \
                 database) can only be read; the server log names it"
            }
        };
        tracing::error!(error = %rewind_core::error::chain(source.as_ref()), "storage fault");
        let note = noted
            .map(|noted| format!("; {}", noted.note()))
            .unwrap_or_default();
        ApiError::Internal(format!("{said}{note}"))
    }

    /// The status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::Busy { .. } => StatusCode::CONFLICT,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The JSON body of this error.
    pub fn body(&self) -> ErrorBody {
        let named = |name: ErrorName, message: &str| {
            ErrorBody::Named(NamedError {
                name,
                data: ErrorData {
                    message: message.to_owned(),
                },
            })
        };
        match self {
            ApiError::BadRequest(message) => named(ErrorName::BadRequest, message),
            ApiError::NotFound(message) => named(ErrorName::NotFoundError, message),
            ApiError::Busy {
                session_id,
                message,
            } => ErrorBody::Busy(BusyError {
                tag: BusyTag::SessionBusyError,
                message: message.clone(),
                session_id: session_id.clone(),
            }),
            ApiError::Unauthorized => named(
                ErrorName::Unauthorized,
                "this server requires a password (HTTP basic auth)",
            ),
            ApiError::Forbidden(message) => named(ErrorName::Forbidden, message),
            ApiError::MethodNotAllowed(message) => named(ErrorName::MethodNotAllowed, message),
            ApiError::PayloadTooLarge(message) => named(ErrorName::PayloadTooLarge, message),
            ApiError::UnsupportedMediaType(message) => {
                named(ErrorName::UnsupportedMediaType, message)
            }
            ApiError::Internal(message) => named(ErrorName::UnknownError, message),
        }
    }
}

/// An error's body: one of OpenCode's two shapes.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum ErrorBody {
    /// Every error but a busy session's.
    Named(NamedError),
    /// A busy session (409).
    Busy(BusyError),
}

/// OpenCode's error body, `{name, data: {message}}`: every error but a busy session's.
#[derive(Debug, Serialize, ToSchema)]
pub struct NamedError {
    /// Which error.
    pub name: ErrorName,
    /// What went wrong.
    pub data: ErrorData,
}

/// The names `NamedError` takes.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
pub enum ErrorName {
    /// 400: a malformed id, JSON or worktree, a wrong type, a request the session's state refuses.
    BadRequest,
    /// 404: an unknown route, session, message or part.
    NotFoundError,
    /// 401: a password is required and was not given, or is wrong.
    Unauthorized,
    /// 403: a foreign `Host` or `Origin`.
    Forbidden,
    /// 405: the route exists with other methods.
    MethodNotAllowed,
    /// 413: the body is over the limit.
    PayloadTooLarge,
    /// 415: a body not sent as JSON.
    UnsupportedMediaType,
    /// 500: an internal or storage fault, or a snapshot object missing from the store.
    UnknownError,
}

/// `NamedError`'s `data`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorData {
    /// What went wrong and, where the client can act, what to do.
    pub message: String,
}

/// OpenCode's busy session, `{_tag: "SessionBusyError", sessionID?, message}` (409).
#[derive(Debug, Serialize, ToSchema)]
pub struct BusyError {
    /// Always `SessionBusyError`.
    #[serde(rename = "_tag")]
    pub tag: BusyTag,
    /// What holds the session, and whether to try again.
    pub message: String,
    /// The session, when known.
    #[serde(rename = "sessionID", skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<SessionId>, nullable = false)]
    pub session_id: Option<String>,
}

/// `BusyError`'s `_tag`.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
pub enum BusyTag {
    /// The only one.
    SessionBusyError,
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        ApiError::from_core(error, None)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), Json(self.body())).into_response();
        if matches!(self, ApiError::Unauthorized) {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"rewind\", charset=\"UTF-8\""),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// The body `api` answers with, as JSON.
    fn json_of(api: &ApiError) -> Value {
        serde_json::to_value(api.body()).expect("an error body serialises")
    }

    #[test]
    fn core_errors_map_to_opencode_statuses_and_bodies() {
        let session = SessionId::parse("ses_000000000001abcdefghijklmn").expect("a valid id");
        let cases = [
            (
                Error::NotFound("Session not found: x".into()),
                404,
                json!({"name": "NotFoundError", "data": {"message": "Session not found: x"}}),
            ),
            (
                Error::InvalidInput("bad id".into()),
                400,
                json!({"name": "BadRequest", "data": {"message": "bad id"}}),
            ),
            (
                Error::Busy {
                    session_id: None,
                    message: "Session is busy".into(),
                },
                409,
                json!({"_tag": "SessionBusyError", "sessionID": session.as_str(), "message": "Session is busy"}),
            ),
        ];
        for (error, status, body) in cases {
            let api = ApiError::from_core(error, Some(&session));
            assert_eq!(api.status().as_u16(), status);
            assert_eq!(json_of(&api), body);
        }
        let lost = ApiError::from_core(Error::LeaseLost("token".into()), Some(&session));
        assert_eq!(lost.status().as_u16(), 409);
        assert_eq!(json_of(&lost)["sessionID"], session.as_str());
    }

    /// A missing snapshot object is a 500 that says nothing was changed, unless a rollback's note says the
    /// files were put back (review: both were said at once).
    #[test]
    fn a_missing_object_says_nothing_was_changed_only_when_no_rollback_ran() {
        let message = |error: Error| -> String {
            let body = json_of(&ApiError::from_core(error, None));
            body["data"]["message"]
                .as_str()
                .expect("a message")
                .to_owned()
        };
        let plain = message(Error::MissingObject("tree 1234".into()));
        assert!(plain.contains("nothing was changed"), "{plain}");
        let rolled_back = message(
            Error::MissingObject("tree 1234".into())
                .noted("the files it had changed were put back to their state before the revert"),
        );
        assert!(
            rolled_back.contains(rewind_core::error::PUT_BACK)
                && !rolled_back.contains("nothing was changed"),
            "{rolled_back}"
        );
    }

    /// A database locked by another process past the busy timeout, or one whose connections all stayed in
    /// use (`Busy`), is a 409 that says so, not a 500; also when a rollback has put a note after it
    /// (`Error::noted`).
    #[test]
    fn a_locked_database_is_busy_not_an_internal_fault() {
        for fault in [StorageFault::Locked, StorageFault::Busy] {
            busy_database_is_409(fault);
        }
    }

    fn busy_database_is_409(fault: StorageFault) {
        let session = SessionId::parse("ses_0123456789abABCDEFGHIJKLMN").expect("id");
        let text =
            "the database /data/rewind.db is locked by another process; retry when it has finished";
        let locked = || Error::storage(fault, text);
        let note = "the files it had changed were put back";
        let as_text = Error::backend(text).noted(note);
        assert_eq!(
            ApiError::from_core(as_text, Some(&session))
                .status()
                .as_u16(),
            500,
            "the same text without the fault is no lock"
        );
        for (error, ends) in [(locked(), "finished"), (locked().noted(note), note)] {
            let api = ApiError::from_core(error, Some(&session));
            assert_eq!(api.status().as_u16(), 409);
            let body = json_of(&api);
            assert_eq!(body["_tag"], "SessionBusyError");
            assert_eq!(body["sessionID"], session.as_str());
            let message = body["message"].as_str().unwrap_or_default();
            assert!(
                message.starts_with(text) && message.ends_with(ends),
                "{message}"
            );
        }
    }

    #[test]
    fn backend_faults_are_500s_that_do_not_leak_their_cause() {
        let api = ApiError::from_core(Error::backend("password=hunter2 at db"), None);
        assert_eq!(api.status().as_u16(), 500);
        assert_eq!(json_of(&api)["name"], "UnknownError");
        assert!(!json_of(&api).to_string().contains("hunter2"));
    }

    /// Every other storage fault is a 500 that says which (black-box: "internal error" hid a full disk, and
    /// a PostgreSQL that is down after 30 s), without its cause (which may name the database), with a
    /// rollback's note after it; the same words as a backend fault say nothing of the kind (review: a full
    /// disk was found by the text of its error).
    #[test]
    fn storage_faults_are_500s_that_say_which() {
        let cause =
            "writing /data/x for postgres://rewind:***@db.internal: No space left on device";
        let note = "nothing was changed: no file had been written yet";
        for (fault, says) in [
            (StorageFault::DiskFull, "is full; free some space"),
            (StorageFault::Unreachable, "the database cannot be reached"),
            (
                StorageFault::ConnectionLost,
                "whether its last change was stored is not known",
            ),
            (StorageFault::Corrupt, "the database is corrupt"),
            (StorageFault::Replaced, "was deleted or replaced"),
            (StorageFault::ReadOnly, "can only be read"),
        ] {
            for (error, ends) in [
                (Error::storage(fault, cause), "names it"),
                (Error::storage(fault, cause).noted(note), note),
            ] {
                let api = ApiError::from_core(error, None);
                assert_eq!(api.status().as_u16(), 500);
                let message = json_of(&api)["data"]["message"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                assert!(message.contains(says), "{fault:?}: {message}");
                assert!(
                    message.ends_with(ends) || (ends == "names it" && message.ends_with("cause")),
                    "{fault:?}: {message}"
                );
                assert!(!message.contains("/data/x"), "{message}");
                assert!(!message.contains("db.internal"), "{message}");
            }
        }
        let said = json_of(&ApiError::from_core(Error::backend(cause), None))["data"]["message"]
            .to_string();
        assert!(said.contains("internal error"), "{said}");
    }

    #[test]
    fn unauthorized_carries_the_basic_challenge() {
        let response = ApiError::Unauthorized.into_response();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        let challenge = response
            .headers()
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        assert!(challenge.starts_with("Basic "), "{challenge}");
    }
}
