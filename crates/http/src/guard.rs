//! [`Guard`]: the token check `korvus serve` puts in front of the router.
//!
//! A server on 127.0.0.1 is reachable from every web page its user opens:
//! a page can send it requests (cross-site requests) or rebind a name of
//! its own to 127.0.0.1 (DNS rebinding). So every request passes, in order:
//!
//! 1. **`Host`** must be one of the allowed hosts (`403 host_not_allowed`):
//!    a rebound name is not. An HTTP/2 request carries no `Host` but an
//!    `:authority`, which hyper puts in the URI: without `Host`, the URI's
//!    authority passes the same test; with both, they must be the same
//!    (ASCII case aside) and allowed.
//! 2. **`Origin`**, when present, must be `http://` or `https://` plus an
//!    allowed host (`403 origin_not_allowed`): another site's page is not.
//! 3. The view's static files (`/`, `/assets/…`) need nothing more: they
//!    hold no data.
//! 4. **`POST /api/login`** with `Authorization: Bearer <token>` sets an
//!    `HttpOnly`, `SameSite=Strict` cookie (a browser's `EventSource` and
//!    links cannot send a header) and answers `{"csrf": "…"}`;
//!    `GET /api/csrf` answers the same for a cookie already set.
//! 5. Everything else needs the **bearer token** (`401 token_required` /
//!    `401 token_invalid`) or the **cookie**; a cookie-authenticated
//!    request that is not `GET`/`HEAD` must also carry the CSRF token in
//!    `X-Korvus-Csrf` (`403 csrf_failed`).
//!
//! Refused requests reach no handler, so they write nothing.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};

use crate::ApiError;

/// The name of the cookie the browser view holds.
pub const COOKIE: &str = "korvus_sid";
/// The header that carries the CSRF token.
pub const CSRF_HEADER: &str = "x-korvus-csrf";
/// Cookie sessions kept at most; the oldest is forgotten first.
const MAX_SESSIONS: usize = 256;

/// The fewest bytes a token may have.
pub const MIN_TOKEN_BYTES: usize = 16;

/// A token given to [`Guard::new`] is too short to guard anything.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a token needs at least {MIN_TOKEN_BYTES} bytes (this one has {len})")]
#[non_exhaustive]
pub struct TokenTooShort {
    /// The token's length in bytes.
    pub len: usize,
}

/// The token check of `korvus serve`; see the module docs.
#[derive(Debug)]
pub struct Guard {
    token: String,
    hosts: Vec<String>,
    sessions: Mutex<Sessions>,
}

#[derive(Debug, Default)]
struct Sessions {
    csrf: HashMap<String, String>,
    order: VecDeque<String>,
}

impl Guard {
    /// A guard that admits `token` on requests to one of `hosts` (each
    /// `host[:port]` exactly as a browser sends it in `Host`, e.g.
    /// `127.0.0.1:8787` or `localhost:8787`).
    ///
    /// # Errors
    /// [`TokenTooShort`] if `token` has fewer than [`MIN_TOKEN_BYTES`]
    /// bytes: a guessable token guards nothing.
    pub fn new(
        token: impl Into<String>,
        hosts: impl IntoIterator<Item = String>,
    ) -> Result<Self, TokenTooShort> {
        let token = token.into();
        if token.len() < MIN_TOKEN_BYTES {
            return Err(TokenTooShort { len: token.len() });
        }
        Ok(Self {
            token,
            hosts: hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect(),
            sessions: Mutex::default(),
        })
    }

    /// A fresh random token: 32 bytes from the operating system, as hex.
    ///
    /// # Errors
    /// When the operating system has no randomness to give.
    pub fn generate_token() -> Result<String, getrandom::Error> {
        random_hex()
    }

    /// `router` behind this guard.
    pub fn protect<S: Clone + Send + Sync + 'static>(self, router: Router<S>) -> Router<S> {
        router.layer(axum::middleware::from_fn_with_state(Arc::new(self), check))
    }

    fn host_allowed(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| h.eq_ignore_ascii_case(host))
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        let host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        host.is_some_and(|h| self.host_allowed(h))
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new cookie session: `(sid, csrf)`.
    fn login(&self) -> Result<(String, String), ApiError> {
        let (sid, csrf) = (random_hex(), random_hex());
        let (Ok(sid), Ok(csrf)) = (sid, csrf) else {
            return Err(ApiError::internal(
                "internal",
                "no randomness for a session",
            ));
        };
        let mut s = self.sessions();
        if s.order.len() >= MAX_SESSIONS {
            if let Some(old) = s.order.pop_front() {
                s.csrf.remove(&old);
            }
        }
        s.order.push_back(sid.clone());
        s.csrf.insert(sid.clone(), csrf.clone());
        Ok((sid, csrf))
    }

    fn csrf_of(&self, sid: &str) -> Option<String> {
        self.sessions().csrf.get(sid).cloned()
    }
}

fn random_hex() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Compares without stopping at the first difference, so the time taken
/// does not tell how much of a guess was right.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn forbidden(code: &'static str, message: &str) -> Response {
    ApiError::new(StatusCode::FORBIDDEN, code, message).into_response()
}

fn unauthorized(code: &'static str, message: &str) -> Response {
    let mut r = ApiError::new(StatusCode::UNAUTHORIZED, code, message).into_response();
    r.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

fn header_str(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers.get(name).map(|v| v.to_str().unwrap_or("\u{0}"))
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    header_str(headers, header::AUTHORIZATION).map(|v| v.strip_prefix("Bearer ").unwrap_or(""))
}

fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == COOKIE).then_some(value)
        })
}

/// The host a request names: its `Host` header, or its URI's authority
/// (HTTP/2's `:authority`, an HTTP/1 absolute-form target). `None` when
/// both are present and differ — which of them would be served is then
/// the server's choice, so neither is trusted.
fn named_host(request: &Request) -> Option<&str> {
    let host = header_str(request.headers(), header::HOST);
    let authority = request.uri().authority().map(|a| a.as_str());
    match (host, authority) {
        (Some(h), Some(a)) if !h.eq_ignore_ascii_case(a) => None,
        (Some(h), _) => Some(h),
        (None, a) => a,
    }
}

async fn check(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    if !named_host(&request).is_some_and(|h| guard.host_allowed(h)) {
        return forbidden("host_not_allowed", "this Host is not served here");
    }
    let headers = request.headers();
    if let Some(origin) = header_str(headers, header::ORIGIN) {
        if !guard.origin_allowed(origin) {
            return forbidden(
                "origin_not_allowed",
                "requests from this Origin are refused",
            );
        }
    }
    let path = request.uri().path();
    if path == "/" || path.starts_with("/assets/") {
        return next.run(request).await;
    }
    let method = request.method().clone();
    if path == "/api/login" && method == Method::POST {
        return login(&guard, headers);
    }
    match bearer(headers) {
        Some(token) if same(token, &guard.token) => return next.run(request).await,
        Some(_) => return unauthorized("token_invalid", "the token is not valid"),
        None => {}
    }
    let Some(sid) = cookie(headers) else {
        return unauthorized("token_required", "a token is required");
    };
    let Some(csrf) = guard.csrf_of(sid) else {
        return unauthorized(
            "token_invalid",
            "the session cookie is not valid; log in again",
        );
    };
    if path == "/api/csrf" && method == Method::GET {
        return Json(serde_json::json!({ "csrf": csrf })).into_response();
    }
    if method != Method::GET && method != Method::HEAD {
        let sent = header_str(headers, CSRF_HEADER).unwrap_or("");
        if !same(sent, &csrf) {
            return forbidden("csrf_failed", "the CSRF token is missing or wrong");
        }
    }
    next.run(request).await
}

fn login(guard: &Guard, headers: &HeaderMap) -> Response {
    match bearer(headers) {
        Some(token) if same(token, &guard.token) => {}
        Some(_) => return unauthorized("token_invalid", "the token is not valid"),
        None => return unauthorized("token_required", "a token is required"),
    }
    let (sid, csrf) = match guard.login() {
        Ok(pair) => pair,
        Err(e) => return e.into_response(),
    };
    // No Path: the browser scopes it to the login's directory, the API
    // (wherever the router is nested). Max-Age: a day, then log in again.
    let cookie = format!("{COOKIE}={sid}; HttpOnly; SameSite=Strict; Max-Age=86400");
    let mut response = Json(serde_json::json!({ "csrf": csrf })).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}
