//! One run's gateway server: HTTP/1.1 on the listener placed for it
//! (hyper), each call checked for the run's token, forwarded to the
//! upstream with the real key (korvus-tls), and its answer streamed back
//! through a [`Meter`]; what each call used goes to the turn log.

use std::convert::Infallible;
use std::net::TcpListener as StdListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Either, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use korvus_log::{Event, EventKind, LogHandle};
use korvus_tls::HttpsClient;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::{JoinHandle, JoinSet};
use tracing::{debug, warn};

use super::body::{Measured, MeteredBody, DRAIN_WAIT, MAX_DRAINS};
use super::meter::{Api, Meter};
use super::{ModelGateway, UpstreamAuth};
use crate::budget::{Guard, Refused};
use crate::hop::copy_headers;

/// The largest request body the gateway forwards (a long conversation
/// with images stays well under it).
const MAX_REQUEST: usize = 16 * 1024 * 1024;
/// Connections served at once, per run.
const MAX_CONNECTIONS: usize = 64;
/// How long the end of a run waits for the last measurements to be
/// logged: a whole answer still being read to its end, and then 5 s.
const FINISH_WAIT: Duration = Duration::from_secs(5 + DRAIN_WAIT.as_secs());
/// Headers of the agent's never forwarded upstream besides the hop's own:
/// its key, and its choice of compression (the meter reads the answer).
const ALSO_DROPPED: &[&str] = &["authorization", "x-api-key", "accept-encoding"];

/// What one run's gateway measured.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Totals {
    pub(crate) calls: u64,
    pub(crate) input: u64,
    pub(crate) output: u64,
    pub(crate) unmetered: u64,
    pub(crate) refused: u64,
    pub(crate) failed: u64,
    /// Calls refused because a budget is reached (or the store could not
    /// say).
    pub(crate) over_budget: u64,
}

/// Shared by the connections of one run.
struct State {
    upstream: String,
    auth: UpstreamAuth,
    key: HeaderValue,
    token: String,
    client: HttpsClient,
    measured: mpsc::UnboundedSender<Measured>,
    totals: Arc<Mutex<Totals>>,
    /// The run's budgets, asked before each call.
    guard: Option<Arc<Guard>>,
    /// Turns at reading a whole answer to its end after the agent hung up.
    drains: Arc<tokio::sync::Semaphore>,
}

/// A run's running gateway; [`finish`](Self::finish) stops it.
#[derive(Debug)]
pub(crate) struct Serving {
    accept: JoinHandle<()>,
    logger: JoinHandle<()>,
    totals: Arc<Mutex<Totals>>,
}

impl Drop for Serving {
    /// A run dropped mid-way (cancelled, panicked) stops serving too: no
    /// listener with the real key behind it outlives its run.
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Serving {
    /// Serves `listener` (already bound) on the current runtime for one
    /// run whose agent presents `token`; the real key is `key`.
    pub(crate) fn start(
        config: &ModelGateway,
        key: &str,
        token: String,
        listener: StdListener,
        log: Arc<LogHandle>,
        guard: Option<Arc<Guard>>,
    ) -> Result<Self, crate::CommandError> {
        let fail = |what: &str, e: &dyn std::fmt::Display| crate::CommandError::Gateway {
            reason: format!("{what}: {e}"),
        };
        let client =
            HttpsClient::new(&config.roots).map_err(|e| fail("no client for the upstream", &e))?;
        let key = match config.auth {
            UpstreamAuth::Bearer => HeaderValue::try_from(format!("Bearer {key}")),
            UpstreamAuth::XApiKey => HeaderValue::try_from(key),
        }
        .map_err(|e| fail("the model key is not a valid header value", &e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| fail("the listener", &e))?;
        let listener = TcpListener::from_std(listener).map_err(|e| fail("the listener", &e))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let totals = Arc::new(Mutex::new(Totals::default()));
        let state = Arc::new(State {
            upstream: config.upstream.clone(),
            auth: config.auth,
            key,
            token,
            client,
            measured: tx,
            totals: Arc::clone(&totals),
            guard: guard.clone(),
            drains: Arc::new(tokio::sync::Semaphore::new(MAX_DRAINS)),
        });
        Ok(Self {
            accept: tokio::spawn(accept(listener, state)),
            logger: tokio::spawn(logger(rx, log, Arc::clone(&totals), guard)),
            totals,
        })
    }

    /// Stops serving (a call still streaming is cut, and counted so),
    /// waits for the last measurements to reach the log, and returns the
    /// run's totals.
    pub(crate) async fn finish(mut self) -> Totals {
        self.accept.abort();
        let _ = (&mut self.accept).await;
        if tokio::time::timeout(FINISH_WAIT, &mut self.logger)
            .await
            .is_err()
        {
            warn!("the model gateway's last measurements were not all logged");
        }
        *lock(&self.totals)
    }
}

fn lock(totals: &Mutex<Totals>) -> std::sync::MutexGuard<'_, Totals> {
    totals
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Accepts connections until aborted; aborting drops every connection.
async fn accept(listener: TcpListener, state: Arc<State>) {
    let mut connections = JoinSet::new();
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                debug!(error = %e, "gateway accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        while connections.try_join_next().is_some() {}
        if connections.len() >= MAX_CONNECTIONS {
            debug!("gateway connection dropped: too many at once");
            continue;
        }
        let state = Arc::clone(&state);
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let state = Arc::clone(&state);
                async move { Ok::<_, Infallible>(handle(&state, request).await) }
            });
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(e) = served {
                debug!(error = %e, "gateway connection ended");
            }
        });
    }
}

/// Writes each measurement to the log as it comes, and keeps the totals.
async fn logger(
    mut rx: mpsc::UnboundedReceiver<Measured>,
    log: Arc<LogHandle>,
    totals: Arc<Mutex<Totals>>,
    guard: Option<Arc<Guard>>,
) {
    let mut failures = 0u64;
    while let Some(measured) = rx.recv().await {
        if let Some(guard) = &guard {
            // A call cut short counts what was read of it: a lower bound.
            let used = match &measured {
                Measured::Used(used) => Some(used),
                Measured::Unmetered { partial, .. } => partial.as_ref(),
            };
            if let Some(used) = used {
                guard
                    .spent(used.model.as_deref(), used.input, used.output)
                    .await;
            }
        }
        let event = match measured {
            Measured::Used(used) => {
                {
                    let mut t = lock(&totals);
                    t.calls += 1;
                    t.input = t.input.saturating_add(used.input);
                    t.output = t.output.saturating_add(used.output);
                }
                EventKind::MeteredUsage {
                    input_tokens: used.input,
                    output_tokens: used.output,
                    model: used.model,
                    unmetered: false,
                }
            }
            Measured::Unmetered { path, why, partial } => {
                let partial = partial.unwrap_or_default();
                {
                    let mut t = lock(&totals);
                    t.unmetered += 1;
                    t.input = t.input.saturating_add(partial.input);
                    t.output = t.output.saturating_add(partial.output);
                }
                let path: String = path.chars().take(200).collect();
                let note = EventKind::Note {
                    text: format!("model gateway: a call to {path} could not be metered ({why})"),
                };
                let lower_bound = EventKind::MeteredUsage {
                    input_tokens: partial.input,
                    output_tokens: partial.output,
                    model: partial.model,
                    unmetered: true,
                };
                append(
                    &log,
                    vec![Event::korvus(note), Event::korvus(lower_bound)],
                    &mut failures,
                )
                .await;
                continue;
            }
        };
        append(&log, vec![Event::korvus(event)], &mut failures).await;
    }
}

/// Appends `events`; the first failure is a warning, all are counted.
async fn append(log: &LogHandle, events: Vec<Event>, failures: &mut u64) {
    {
        if let Err(e) = log.append(&events).await {
            if *failures == 0 {
                warn!(error = %e, "a gateway measurement was not logged");
            }
            *failures += 1;
        }
    }
}

type Answer = Response<Either<Full<Bytes>, MeteredBody>>;

/// One call: the token checked, the body read, forwarded, answered.
async fn handle(state: &State, request: Request<Incoming>) -> Answer {
    if !presents_token(request.headers(), &state.token) {
        lock(&state.totals).refused += 1;
        return refusal(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "korvus model gateway: the run's token is missing or wrong",
        );
    }
    if let Some(refused) = match &state.guard {
        Some(guard) => guard.check().await.err(),
        None => None,
    } {
        lock(&state.totals).over_budget += 1;
        return over_budget(state.auth, &refused);
    }
    let (parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or_else(|| "/".to_owned(), |p| p.as_str().to_owned());
    let body = match Limited::new(body, MAX_REQUEST).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                &format!("korvus model gateway: the request body could not be read ({e})"),
            )
        }
    };
    let api = Api::of_path(&path);
    let body = match api {
        Some(Api::Chat) => ask_chat_usage(body),
        _ => body,
    };
    let upstream = match upstream_request(state, parts, &path, body) {
        Ok(r) => r,
        Err(e) => {
            return refusal(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                &format!("korvus model gateway: {e}"),
            )
        }
    };
    match state.client.send(upstream).await {
        Ok(answer) => metered(state, api, path, answer),
        Err(e) => {
            lock(&state.totals).failed += 1;
            warn!(error = %e, "the model upstream could not be reached");
            refusal(
                StatusCode::BAD_GATEWAY,
                "api_error",
                "korvus model gateway: the upstream could not be reached",
            )
        }
    }
}

/// The call as the upstream gets it: the same method, path and headers,
/// the real key instead of the token, no compression (the meter reads the
/// answer).
fn upstream_request(
    state: &State,
    parts: hyper::http::request::Parts,
    path: &str,
    body: Bytes,
) -> Result<Request<Full<Bytes>>, hyper::http::Error> {
    let mut upstream = Request::builder()
        .method(parts.method)
        .uri(format!("{}{}", state.upstream, path));
    if let Some(headers) = upstream.headers_mut() {
        copy_headers(&parts.headers, headers, ALSO_DROPPED);
        let name = match state.auth {
            UpstreamAuth::Bearer => header::AUTHORIZATION,
            UpstreamAuth::XApiKey => HeaderName::from_static("x-api-key"),
        };
        headers.insert(name, state.key.clone());
        headers.insert(
            header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
    }
    upstream.body(Full::new(body))
}

/// The upstream's answer for the agent, a successful model call's read by
/// a meter on its way.
fn metered(state: &State, api: Option<Api>, path: String, answer: Response<Incoming>) -> Answer {
    let (parts, body) = answer.into_parts();
    let streamed = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    // Every successful answer is read, whatever its path: usage is found
    // by its shape.
    let meter = parts.status.is_success().then(|| Meter::new(streamed));
    let mut response = Response::builder().status(parts.status);
    if let Some(headers) = response.headers_mut() {
        copy_headers(&parts.headers, headers, &[]);
    }
    let body = MeteredBody::new(
        body,
        meter,
        api.is_some(),
        path,
        state.measured.clone(),
        Arc::clone(&state.drains),
    );
    response
        .body(Either::Right(body))
        .unwrap_or_else(|_| refusal(StatusCode::BAD_GATEWAY, "api_error", "bad answer"))
}

/// Whether the call carries the run's token as a bearer token or an
/// `x-api-key`, compared in constant time.
fn presents_token(headers: &HeaderMap, token: &str) -> bool {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let api_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
    [bearer, api_key]
        .into_iter()
        .flatten()
        .any(|given| same(given.trim().as_bytes(), token.as_bytes()))
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A streamed Chat Completions request asks for its usage in the stream
/// (`stream_options.include_usage`), which the API sends only when asked.
fn ask_chat_usage(body: Bytes) -> Bytes {
    let Ok(mut json) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return body;
    };
    if json.get("stream").and_then(serde_json::Value::as_bool) != Some(true) {
        return body;
    }
    let Some(object) = json.as_object_mut() else {
        return body;
    };
    let options = object
        .entry("stream_options")
        .or_insert_with(|| serde_json::json!({}));
    match options.as_object_mut() {
        Some(options) => {
            options.insert("include_usage".to_owned(), serde_json::Value::Bool(true));
        }
        None => *options = serde_json::json!({"include_usage": true}),
    }
    serde_json::to_vec(&json).map_or(body, Bytes::from)
}

/// An answer of the gateway's own, in the shape both SDKs read as an API
/// error.
fn refusal(status: StatusCode, kind: &str, message: &str) -> Answer {
    let body = serde_json::json!({
        "type": "error",
        "error": {"type": kind, "message": message},
    });
    let mut response = Response::new(Either::Left(Full::new(Bytes::from(body.to_string()))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The answer to a call past the run's budget, one each agent's client
/// takes as final (checked with the real binaries, `korvus-e2e`'s
/// `agents_budget.rs`): Anthropic's Messages API gets `402` (Claude Code
/// retries a `400` with its optional features stripped), OpenAI's `400`
/// (Codex retries every other `4xx` it does not know); both with
/// `x-should-retry: false`, which the SDKs honour. Korvus stops the run
/// anyway. A call the store could not judge gets `503`, which they retry.
fn over_budget(auth: UpstreamAuth, refused: &Refused) -> Answer {
    let Refused::Reached(why) = refused else {
        return refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded_error",
            "korvus model gateway: the run's budget could not be checked; try again",
        );
    };
    let status = match auth {
        UpstreamAuth::XApiKey => StatusCode::PAYMENT_REQUIRED,
        UpstreamAuth::Bearer => StatusCode::BAD_REQUEST,
    };
    let mut answer = refusal(
        status,
        "budget_reached",
        &format!("korvus model gateway: {why}; the session is paused until it is raised"),
    );
    answer.headers_mut().insert(
        HeaderName::from_static("x-should-retry"),
        HeaderValue::from_static("false"),
    );
    answer
}
