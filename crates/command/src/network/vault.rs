//! The credential vault: credentials bound to destinations of an `allow`
//! policy, put on the agent's requests by the egress proxy so the agent
//! never holds them. Plain HTTP requests get the header set; HTTPS
//! connections to a bound destination are terminated by the proxy with a
//! certificate of the run's own authority (which the agent's trust store
//! is told about), each request gets the header, and goes on to the real
//! host over TLS with its real certificate checked (`korvus-tls`). Every
//! other destination passes through `CONNECT` untouched.

use std::convert::Infallible;
use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Either, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use korvus_tls::{HttpsClient, Roots};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tracing::warn;

use super::Destination;
use crate::hop::copy_headers;
use crate::CommandError;

/// What the agent's variable of a credential holds instead of its value.
pub const PLACEHOLDER: &str = "korvus-vault-placeholder";

/// Injections noted one by one in the log, per run; later ones are counted.
const NOTED: u64 = 32;
/// The largest request body forwarded to a bound destination.
const MAX_REQUEST: usize = 16 * 1024 * 1024;

/// Where a credential's value comes from: read by korvus, never by the
/// agent.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    Env(String),
    File(PathBuf),
}

/// One credential bound to one destination of the run's `allow` policy:
/// requests the agent sends there carry `header` set to the value korvus
/// read, whatever the agent sent in it (`docs/operations.md`, "The
/// credential vault").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    destination: Destination,
    header: String,
    source: Source,
    placeholder_var: Option<String>,
    plain_http: bool,
}

impl Credential {
    /// The header `header` of requests to `destination`, its value (the
    /// whole header value, e.g. `Bearer …`) read from the embedding
    /// process's variable `var` (or the runner's `env_source`) when the
    /// run starts; `var` is removed from the agent's environment.
    pub fn from_env(
        destination: Destination,
        header: impl Into<String>,
        var: impl Into<String>,
    ) -> Self {
        Self::new(destination, header.into(), Source::Env(var.into()))
    }

    /// As [`from_env`](Self::from_env), the value read from the file at
    /// `path` (its last line break dropped) when the run starts.
    pub fn from_file(
        destination: Destination,
        header: impl Into<String>,
        path: impl Into<PathBuf>,
    ) -> Self {
        Self::new(destination, header.into(), Source::File(path.into()))
    }

    fn new(destination: Destination, header: String, source: Source) -> Self {
        Self {
            destination,
            header,
            source,
            placeholder_var: None,
            plain_http: false,
        }
    }

    /// Lets the credential travel on plain HTTP requests to its
    /// destination (a service on a network korvus's host trusts). Without
    /// it a plain request to the destination is refused: on plain HTTP the
    /// credential would cross the network in clear, to whoever answers the
    /// destination's name.
    #[must_use]
    pub fn over_plain_http(mut self) -> Self {
        self.plain_http = true;
        self
    }

    /// Gives the agent the variable `var` holding [`PLACEHOLDER`], for an
    /// agent that will not send a request without a value of its own.
    #[must_use]
    pub fn placeholder_in(mut self, var: impl Into<String>) -> Self {
        self.placeholder_var = Some(var.into());
        self
    }

    /// The destination the credential is bound to.
    pub fn destination(&self) -> &Destination {
        &self.destination
    }

    /// The header it sets.
    pub fn header(&self) -> &str {
        &self.header
    }
}

/// The credentials of a runner and how their destinations are reached
/// (see [`CommandRunner::vault`](crate::CommandRunner::vault)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vault {
    credentials: Vec<Credential>,
    roots: Option<Roots>,
    hosts: Vec<(String, IpAddr)>,
}

impl Vault {
    /// No credentials.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `credential`.
    #[must_use]
    pub fn credential(mut self, credential: Credential) -> Self {
        self.credentials.push(credential);
        self
    }

    /// Checks bound destinations' certificates against `roots` instead of
    /// the system's.
    #[must_use]
    pub fn trusting(mut self, roots: Roots) -> Self {
        self.roots = Some(roots);
        self
    }

    /// Reaches the bound host `host` at `ip` instead of where the system's
    /// resolver says (its certificate is still checked against `host`).
    #[must_use]
    pub fn resolve(mut self, host: impl Into<String>, ip: IpAddr) -> Self {
        self.hosts.push((host.into().to_ascii_lowercase(), ip));
        self
    }

    /// Whether the vault holds no credential.
    pub fn is_empty(&self) -> bool {
        self.credentials.is_empty()
    }

    /// The credentials.
    pub fn credentials(&self) -> &[Credential] {
        &self.credentials
    }

    /// The variables whose values are credentials: never the agent's.
    pub(crate) fn secret_vars(&self) -> impl Iterator<Item = &str> {
        self.credentials.iter().filter_map(|c| match &c.source {
            Source::Env(var) => Some(var.as_str()),
            Source::File(_) => None,
        })
    }

    /// Reads every value and makes the run's authority: what the proxy
    /// needs. A credential whose destination `allow` does not admit, or
    /// whose value cannot be read, fails the run before the agent starts.
    pub(crate) fn arm(
        &self,
        allow: &[Destination],
        source: Option<&[(OsString, OsString)]>,
        notes: mpsc::Sender<String>,
    ) -> Result<Armed, CommandError> {
        let fail = |reason: String| CommandError::Vault { reason };
        let mut bound = Vec::new();
        for c in &self.credentials {
            if !allow.iter().any(|d| d.admits(&c.destination)) {
                return Err(fail(format!(
                    "the credential for {} is bound to a destination the network policy does \
                     not allow (it needs an allow policy listing it)",
                    c.destination
                )));
            }
            let name = HeaderName::try_from(c.header.as_str())
                .map_err(|_| fail(format!("{:?} is not a header name", c.header)))?;
            let value = read(&c.source, source).map_err(fail)?;
            let value = HeaderValue::try_from(value).map_err(|_| {
                fail(format!(
                    "the value for {} is not a header value",
                    c.destination
                ))
            })?;
            bound.push(Bound {
                dest: c.destination.clone(),
                name,
                value,
                plain_http: c.plain_http,
            });
        }
        let names: Vec<String> = bound.iter().map(|b| b.dest.host().to_owned()).collect();
        let (authority, acceptor) = super::vault_ca::issue(&names)
            .map_err(|e| fail(format!("the run's authority: {e}")))?;
        let roots = self.roots.clone().unwrap_or_else(Roots::native);
        let client = HttpsClient::resolving(&roots, &self.hosts)
            .map_err(|e| fail(format!("no client for the bound destinations: {e}")))?;
        Ok(Armed {
            bound,
            authority,
            acceptor,
            client,
            notes,
            injected: AtomicU64::new(0),
        })
    }

    /// The agent's placeholder variables.
    pub(crate) fn placeholders(&self) -> impl Iterator<Item = (OsString, OsString)> + '_ {
        self.credentials.iter().filter_map(|c| {
            c.placeholder_var
                .as_ref()
                .map(|v| (OsString::from(v), OsString::from(PLACEHOLDER)))
        })
    }
}

/// A credential's value, from the runner's environment source, the
/// process's environment, or its file.
fn read(from: &Source, source: Option<&[(OsString, OsString)]>) -> Result<String, String> {
    let value = match from {
        Source::Env(var) => crate::env::lookup(source, var)
            .and_then(|v| v.into_string().ok())
            .ok_or_else(|| format!("the credential variable {var} is not set (or not UTF-8)"))?,
        Source::File(path) => std::fs::read_to_string(path).map_err(|e| {
            format!(
                "the credential file {} could not be read: {e}",
                path.display()
            )
        })?,
    };
    let value = value.strip_suffix('\n').unwrap_or(&value);
    let value = value.strip_suffix('\r').unwrap_or(value);
    if value.is_empty() {
        return Err("a credential's value is empty".to_owned());
    }
    Ok(value.to_owned())
}

/// A bound destination and its header.
#[derive(Debug)]
pub(crate) struct Bound {
    dest: Destination,
    name: HeaderName,
    value: HeaderValue,
    plain_http: bool,
}

impl Bound {
    /// Whether the credential may go on plain HTTP requests.
    pub(crate) fn plain_http(&self) -> bool {
        self.plain_http
    }
}

/// One run's vault, armed: the values, the run's authority, the client to
/// the real hosts.
pub(crate) struct Armed {
    bound: Vec<Bound>,
    authority: super::vault_ca::Authority,
    acceptor: tokio_rustls::TlsAcceptor,
    client: HttpsClient,
    notes: mpsc::Sender<String>,
    injected: AtomicU64,
}

impl std::fmt::Debug for Armed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Armed")
            .field("bound", &self.bound.len())
            .finish_non_exhaustive()
    }
}

impl Armed {
    /// The values of the credentials (never the agent's).
    pub(crate) fn values(&self) -> impl Iterator<Item = String> + '_ {
        self.bound
            .iter()
            .map(|b| String::from_utf8_lossy(b.value.as_bytes()).into_owned())
    }

    /// The binding of `dest`, if it has one.
    pub(crate) fn bound(&self, dest: &Destination) -> Option<&Bound> {
        self.bound.iter().find(|b| b.dest.admits(dest))
    }

    /// Writes the run's authority (`ca.pem`) and a bundle of the host's
    /// authorities plus it (`bundle.pem`) into `dir`; the variables that
    /// point the agent's TLS clients at them.
    pub(crate) fn trust(&self, dir: &Path) -> std::io::Result<Vec<(OsString, OsString)>> {
        let (ca, bundle) = self.authority.write(dir)?;
        let mut vars = vec![(OsString::from("NODE_EXTRA_CA_CERTS"), ca.into_os_string())];
        for var in [
            "SSL_CERT_FILE",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "GIT_SSL_CAINFO",
        ] {
            vars.push((OsString::from(var), bundle.clone().into_os_string()));
        }
        Ok(vars)
    }

    /// A plain HTTP request head with the bound header set (any the agent
    /// sent replaced).
    pub(crate) fn rewrite_head(&self, head: &[u8], bound: &Bound) -> Vec<u8> {
        self.noted(bound);
        let name = bound.name.as_str().as_bytes();
        let mut out = Vec::with_capacity(head.len() + 64);
        let mut lines = head.split_inclusive(|b| *b == b'\n');
        if let Some(first) = lines.next() {
            out.extend_from_slice(first);
        }
        for line in lines {
            if line == b"\r\n" || line == b"\n" {
                break;
            }
            let field = line.split(|b| *b == b':').next().unwrap_or_default();
            if !field.trim_ascii().eq_ignore_ascii_case(name) {
                out.extend_from_slice(line);
            }
        }
        out.extend_from_slice(bound.name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(bound.value.as_bytes());
        out.extend_from_slice(b"\r\n\r\n");
        out
    }

    /// Serves a `CONNECT` tunnel to `dest` (a bound destination) as its
    /// server: TLS with the run's authority, HTTP/1.1 only, each request
    /// sent on to the real host with the bound header.
    pub(crate) async fn intercept<S>(self: Arc<Self>, stream: S, dest: Destination)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let tls = match self.acceptor.accept(stream).await {
            Ok(tls) => tls,
            Err(e) => {
                let _ = self.notes.try_send(format!(
                    "vault: the agent's TLS handshake for {dest} failed ({e}); an agent that \
                     does not trust the run's authority cannot reach a bound destination"
                ));
                return;
            }
        };
        let armed = Arc::clone(&self);
        let service = hyper::service::service_fn(move |request| {
            let (armed, dest) = (Arc::clone(&armed), dest.clone());
            async move { Ok::<_, Infallible>(armed.forward(request, &dest).await) }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(tls), service)
            .await;
    }

    /// One intercepted request, sent on to the real host.
    async fn forward(
        &self,
        request: Request<Incoming>,
        dest: &Destination,
    ) -> Response<Either<Full<Bytes>, Incoming>> {
        let answer = |status: StatusCode, text: &str| {
            let mut r = Response::new(Either::Left(Full::new(Bytes::from(format!("{text}\n")))));
            *r.status_mut() = status;
            r
        };
        let Some(bound) = self.bound(dest) else {
            return answer(
                StatusCode::FORBIDDEN,
                "korvus vault: not a bound destination",
            );
        };
        if matches!(request.method().as_str(), "TRACE" | "CONNECT") {
            // TRACE echoes the request, credential and all, back.
            return answer(
                StatusCode::METHOD_NOT_ALLOWED,
                "korvus vault: method refused",
            );
        }
        let (parts, body) = request.into_parts();
        let Ok(body) = Limited::new(body, MAX_REQUEST).collect().await else {
            return answer(StatusCode::PAYLOAD_TOO_LARGE, "korvus vault: body not read");
        };
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut upstream = Request::builder()
            .method(parts.method)
            .uri(format!("https://{dest}{path}"));
        if let Some(headers) = upstream.headers_mut() {
            copy_headers(&parts.headers, headers, &[bound.name.as_str()]);
            headers.insert(bound.name.clone(), bound.value.clone());
        }
        let Ok(upstream) = upstream.body(Full::new(body.to_bytes())) else {
            return answer(StatusCode::BAD_REQUEST, "korvus vault: bad request");
        };
        self.noted(bound);
        match self.client.send(upstream).await {
            Ok(response) => {
                let (mut parts, body) = response.into_parts();
                let mut headers = hyper::HeaderMap::new();
                copy_headers(&parts.headers, &mut headers, &[]);
                parts.headers = headers;
                Response::from_parts(parts, Either::Right(body))
            }
            Err(e) => {
                warn!(error = %e, %dest, "vault: the bound destination could not be reached");
                answer(
                    StatusCode::BAD_GATEWAY,
                    "korvus vault: the destination could not be reached",
                )
            }
        }
    }

    /// Counts an injection; the first [`NOTED`] are notes (destination and
    /// header name, never the value).
    fn noted(&self, bound: &Bound) {
        let n = self.injected.fetch_add(1, Ordering::Relaxed) + 1;
        if n <= NOTED {
            let _ = self.notes.try_send(format!(
                "vault: {} set on a request to {} (the agent's value, if any, replaced)",
                bound.name, bound.dest
            ));
        }
    }

    /// One line for the run's log.
    pub(crate) fn summary(&self) -> String {
        format!(
            "vault: {} credential(s) bound, {} injection(s)",
            self.bound.len(),
            self.injected.load(Ordering::Relaxed)
        )
    }
}

#[cfg(test)]
mod tests;
