//! [`ApiError`]: every failure a route answers with, as a status code and a
//! JSON body `{"error": "...", "code": "..."}`; and the extractors that turn
//! bad input (ids, bodies) into one.

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use korvus_session::SessionError;
use korvus_store::StoreError;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Every `code` this crate answers with (the table on [`ApiError`]); the
/// OpenAPI document lists them as the `Error` schema's `code` enum, and a
/// test fails when the source uses a code missing here.
pub const CODES: &[&str] = &[
    "invalid_id",
    "invalid_revision",
    "invalid_body",
    "invalid_last_event_id",
    "prompt_required",
    "message_required",
    "invalid_context_ref",
    "invalid_input",
    "malformed_request",
    "token_required",
    "token_invalid",
    "host_not_allowed",
    "origin_not_allowed",
    "csrf_failed",
    "not_found",
    "no_document",
    "no_route",
    "method_not_allowed",
    "conflict",
    "incident_closed",
    "already_ended",
    "not_finished",
    "not_awaiting_user",
    "already_live",
    "idempotency_conflict",
    "output_kept",
    "no_budgets",
    "body_too_large",
    "uri_too_long",
    "headers_too_large",
    "queue_full",
    "unsupported_media_type",
    "store_failed",
    "log_failed",
    "blob_failed",
    "internal",
    "shutting_down",
    "store_unavailable",
    "not_ready",
];

/// A failed request: an HTTP status, a stable machine-readable `code` and a
/// human-readable message. The message never carries a backend's error
/// chain or a stack trace; those go to the log (`tracing`), where the
/// operator sees them.
///
/// | status | codes |
/// |---|---|
/// | 400 | `invalid_id`, `invalid_revision`, `invalid_body`, `invalid_last_event_id`, `prompt_required`, `message_required`, `invalid_context_ref`, `invalid_input`, `malformed_request` ([`Server`](crate::Server)) |
/// | 401 | `token_required`, `token_invalid` (the guard of `korvus serve`) |
/// | 403 | `host_not_allowed`, `origin_not_allowed`, `csrf_failed` (the guard) |
/// | 404 | `not_found`, `no_document`, `no_route` |
/// | 405 | `method_not_allowed` |
/// | 409 | `conflict`, `incident_closed`, `already_ended`, `not_finished`, `not_awaiting_user`, `already_live`, `idempotency_conflict`, `output_kept`, `no_budgets` |
/// | 413 | `body_too_large` |
/// | 414 | `uri_too_long` ([`Server`](crate::Server)) |
/// | 431 | `headers_too_large` ([`Server`](crate::Server)) |
/// | 429 | `queue_full` (with `Retry-After`) |
/// | 415 | `unsupported_media_type` |
/// | 500 | `store_failed`, `log_failed`, `blob_failed`, `internal` |
/// | 503 | `shutting_down`, `store_unavailable`, `not_ready` |
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// Seconds for a `Retry-After` header.
    retry_after: Option<u64>,
}

/// The JSON body of an error response (also written by `gate.rs`).
#[derive(Debug, Serialize)]
pub(crate) struct Body<'a> {
    pub(crate) error: &'a str,
    pub(crate) code: &'a str,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// The same error, telling the client to try again in `seconds`
    /// (`Retry-After`).
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The machine-readable code (see the table on [`ApiError`]).
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The human-readable message.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub(crate) fn internal(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, code, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Body {
            error: &self.message,
            code: self.code,
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds),
            );
        }
        response
    }
}

/// The `Retry-After` of a `queue_full` answer, in seconds.
const QUEUE_FULL_RETRY_AFTER_SECS: u64 = 5;

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        use StatusCode as S;
        let conflict = |code| Self::new(S::CONFLICT, code, e.to_string());
        match &e {
            SessionError::PromptRequired => Self::bad_request("prompt_required", e.to_string()),
            SessionError::MessageRequired => Self::bad_request("message_required", e.to_string()),
            SessionError::InvalidContextRef { .. } => {
                Self::bad_request("invalid_context_ref", e.to_string())
            }
            SessionError::IncidentClosed { .. } => conflict("incident_closed"),
            SessionError::AlreadyEnded { .. } => conflict("already_ended"),
            SessionError::NotFinished { .. } => conflict("not_finished"),
            SessionError::NotAwaitingUser { .. } => conflict("not_awaiting_user"),
            SessionError::AlreadyLive { .. } => conflict("already_live"),
            SessionError::IdempotencyConflict { .. } => conflict("idempotency_conflict"),
            SessionError::NoBudgets => conflict("no_budgets"),
            // The dir and the cause go to the log, as every backend's do.
            SessionError::OutputKept {
                session, revision, ..
            } => {
                tracing::warn!(error = %e, "a reopen found output it could not store");
                Self::new(
                    S::CONFLICT,
                    "output_kept",
                    format!(
                        "session {session}: the output of its revision {revision} is kept on the \
                         server and could not be stored yet (the server log says why); it is \
                         stored before the session continues — try again once the cause is gone"
                    ),
                )
            }
            SessionError::NotReady { .. } => {
                tracing::error!(error = %e, "a backend is not usable");
                Self::new(
                    S::SERVICE_UNAVAILABLE,
                    "not_ready",
                    "a backend of the manager is not usable; see the server log",
                )
            }
            // The queue drains as runs end: a few seconds is a fair wait.
            SessionError::QueueFull { .. } => {
                Self::new(S::TOO_MANY_REQUESTS, "queue_full", e.to_string())
                    .retry_after(QUEUE_FULL_RETRY_AFTER_SECS)
            }
            SessionError::NotFound { .. } => Self::new(S::NOT_FOUND, "not_found", e.to_string()),
            SessionError::ShuttingDown => {
                Self::new(S::SERVICE_UNAVAILABLE, "shutting_down", e.to_string())
            }
            SessionError::Store(inner) => Self::from_store(inner),
            SessionError::Log(inner) => {
                tracing::error!(error = %inner, "turn log failed");
                Self::internal("log_failed", "the turn log failed")
            }
            // `SessionError` is non-exhaustive: anything new is a server
            // fault until it is mapped here.
            other => {
                tracing::error!(error = %other, "unmapped session error");
                Self::internal("internal", "internal error")
            }
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        SessionError::from(e).into()
    }
}

impl ApiError {
    fn from_store(e: &StoreError) -> Self {
        match e {
            StoreError::InvalidInput { .. } => {
                return Self::bad_request("invalid_input", e.to_string())
            }
            StoreError::Conflict { .. } | StoreError::Constraint { .. } => {
                return Self::new(StatusCode::CONFLICT, "conflict", e.to_string())
            }
            _ => {}
        }
        tracing::error!(error = %e, "store failed");
        if e.is_transient() {
            Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "the store is unavailable; try again",
            )
        } else {
            Self::internal("store_failed", "the store failed")
        }
    }
}

/// `axum::Json` whose rejections are [`ApiError`]s: a body over the limit
/// is `413 body_too_large`, a wrong content type `415`, anything that does
/// not parse as the request type `400 invalid_body`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ApiJson<T>(pub(crate) T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(json_rejection(&rejection)),
        }
    }
}

fn json_rejection(rejection: &JsonRejection) -> ApiError {
    let status = rejection.status();
    let code = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        _ => "invalid_body",
    };
    let status = if code == "invalid_body" {
        StatusCode::BAD_REQUEST
    } else {
        status
    };
    ApiError::new(status, code, rejection.body_text())
}

/// Defines an extractor wrapping axum's `$inner` whose rejection is an
/// [`ApiError`] with `$code` (400), as JSON like every other error.
macro_rules! api_extractor {
    ($(#[$doc:meta])* $name:ident, $inner:ident, $code:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, Default)]
        pub(crate) struct $name<T>(pub(crate) T);

        impl<S, T> axum::extract::FromRequestParts<S> for $name<T>
        where
            T: DeserializeOwned + Send,
            S: Send + Sync,
        {
            type Rejection = ApiError;

            async fn from_request_parts(
                parts: &mut axum::http::request::Parts,
                state: &S,
            ) -> Result<Self, Self::Rejection> {
                match axum::extract::$inner::<T>::from_request_parts(parts, state).await {
                    Ok(axum::extract::$inner(value)) => Ok(Self(value)),
                    Err(rejection) => Err(ApiError::bad_request($code, rejection.body_text())),
                }
            }
        }
    };
}

api_extractor!(
    /// `axum::extract::Query` answering a query string that does not parse
    /// (a repeated or unknown parameter) with `400 invalid_input`.
    ApiQuery,
    Query,
    "invalid_input"
);

api_extractor!(
    /// `axum::extract::Path` answering a path segment that is not valid
    /// UTF-8 once percent-decoded with `400 invalid_id`.
    ApiPath,
    Path,
    "invalid_id"
);

/// Parses an id from a path segment: `400 invalid_id` when it is not one.
pub(crate) fn parse_id<T: std::str::FromStr>(what: &str, text: &str) -> Result<T, ApiError> {
    text.parse().map_err(|_| {
        ApiError::bad_request("invalid_id", format!("{what} id {text:?} is not a UUID"))
    })
}
