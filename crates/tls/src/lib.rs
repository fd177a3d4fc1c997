//! The one HTTPS client korvus reaches the outside with: [`HttpsClient`],
//! rustls on ring over HTTP/1.1, trusting the system's root certificates
//! plus any the embedder adds ([`Roots`]), or only those.
//!
//! Every korvus component that calls a server it does not run — the
//! completion webhooks' deliverer (`korvus-http`), a run's model upstream —
//! builds its client here, so korvus's own calls out share one TLS
//! configuration, one place that decides what they trust, and one crate
//! to audit. (The S3 backend's AWS SDK keeps its own client, also rustls
//! on ring.) It sits at
//! the bottom of the layers (no korvus dependency) so both the HTTP front
//! and the agent adapter can use it. Not an API boundary of its own:
//! embedders reach it through the crates that use it.
//!
//! ```no_run
//! # async fn f() -> Result<(), Box<dyn std::error::Error>> {
//! use korvus_tls::{HttpsClient, Roots};
//!
//! let client = HttpsClient::new(&Roots::native())?;
//! let request = korvus_tls::http::Request::post("https://hooks.example.com/korvus")
//!     .body(korvus_tls::Full::new(korvus_tls::Bytes::from_static(b"{}")))?;
//! let answer = client.send(request).await?;
//! println!("{}", answer.status());
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

use std::sync::Arc;

pub use bytes::Bytes;
pub use http_body_util::Full;
pub use hyper::body::Incoming;
pub use hyper::http;
pub use rustls::pki_types::CertificateDer;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::{GaiResolver, Name};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// The certificate authorities a client trusts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roots {
    native: bool,
    extra: Vec<CertificateDer<'static>>,
}

impl Roots {
    /// The system's root certificates (what a browser on this host would
    /// trust).
    pub fn native() -> Self {
        Self {
            native: true,
            extra: Vec::new(),
        }
    }

    /// Only the authorities added with [`with`](Self::with): for a private
    /// upstream, or a test's throwaway authority.
    pub fn only() -> Self {
        Self::default()
    }

    /// The same roots and `ca` (DER).
    #[must_use]
    pub fn with(mut self, ca: CertificateDer<'static>) -> Self {
        self.extra.push(ca);
        self
    }

    /// The same roots and every certificate of the PEM file at `path`
    /// (a private authority's bundle).
    ///
    /// # Errors
    /// [`TlsError::Roots`] when the file cannot be read, is not PEM, or
    /// holds no certificate.
    pub fn with_pem_file(mut self, path: &std::path::Path) -> Result<Self, TlsError> {
        use rustls::pki_types::pem::PemObject as _;
        let bad = |e: &dyn std::fmt::Display| TlsError::Roots(format!("{}: {e}", path.display()));
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| bad(&e))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(&e))?;
        if certs.is_empty() {
            return Err(bad(&"no certificate in the file"));
        }
        self.extra.extend(certs);
        Ok(self)
    }
}

/// Why a client could not be built or a request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// No usable root certificate: the system has none (no CA bundle
    /// installed) and none was added, or an added one is malformed.
    #[error("no usable root certificates: {0}")]
    Roots(String),
    /// The request failed: connect, handshake (an untrusted certificate
    /// included) or the exchange.
    #[error("request failed: {0}")]
    Request(String),
}

/// An HTTPS (and plain HTTP) client, cheap to clone: clones share one
/// connection pool.
#[derive(Clone)]
pub struct HttpsClient {
    inner: Client<hyper_rustls::HttpsConnector<HttpConnector<Resolver>>, Full<Bytes>>,
}

/// The system's resolver, except for the host names given an address.
#[derive(Clone)]
struct Resolver {
    hosts: Arc<[(String, IpAddr)]>,
    system: GaiResolver,
}

type Resolved = std::vec::IntoIter<SocketAddr>;

impl tower_service::Service<Name> for Resolver {
    type Response = Resolved;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Resolved, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let given = self
            .hosts
            .iter()
            .find(|(host, _)| host.eq_ignore_ascii_case(name.as_str()))
            .map(|(_, ip)| *ip);
        if let Some(ip) = given {
            // Port 0: the connector puts the URL's port in.
            return Box::pin(std::future::ready(Ok(
                vec![SocketAddr::new(ip, 0)].into_iter()
            )));
        }
        let lookup = self.system.call(name);
        Box::pin(async move { Ok(lookup.await?.collect::<Vec<_>>().into_iter()) })
    }
}

impl std::fmt::Debug for HttpsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpsClient").finish_non_exhaustive()
    }
}

impl HttpsClient {
    /// A client trusting `roots`, speaking HTTP/1.1 over TLS to `https://`
    /// URLs and plainly to `http://` ones.
    ///
    /// The system's certificates are read with rustls-native-certs (the
    /// platform's bundle; `SSL_CERT_FILE` and `SSL_CERT_DIR` honoured);
    /// ones rustls cannot use are skipped.
    ///
    /// # Errors
    /// [`TlsError::Roots`] when `roots` end up empty (with what went wrong
    /// reading the system's) or an added one is malformed.
    pub fn new(roots: &Roots) -> Result<Self, TlsError> {
        Self::resolving(roots, &[])
    }

    /// As [`new`](Self::new), with `hosts` reached at the address given
    /// instead of the one the system's resolver would give (as curl's
    /// `--resolve`): for a host without a DNS name, or a test's. The
    /// certificate is still checked against the host's name.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn resolving(roots: &Roots, hosts: &[(String, IpAddr)]) -> Result<Self, TlsError> {
        let mut store = rustls::RootCertStore::empty();
        // Why system certificates were not loaded, for the error when none was.
        let mut problems = Vec::new();
        if roots.native {
            let found = rustls_native_certs::load_native_certs();
            problems.extend(found.errors.iter().map(ToString::to_string));
            // A system bundle may hold certificates rustls cannot use;
            // those are skipped, as browsers do.
            let (_, skipped) = store.add_parsable_certificates(found.certs);
            if skipped > 0 {
                problems.push(format!("{skipped} system certificate(s) unusable"));
            }
        }
        for cert in &roots.extra {
            store
                .add(cert.clone())
                .map_err(|e| TlsError::Roots(e.to_string()))?;
        }
        if store.is_empty() {
            let mut why = "neither the system nor the caller gave a root certificate".to_owned();
            if !problems.is_empty() {
                why = format!("{why} ({})", problems.join("; "));
            }
            return Err(TlsError::Roots(why));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Roots(e.to_string()))?
            .with_root_certificates(store)
            .with_no_client_auth();
        let mut http = HttpConnector::new_with_resolver(Resolver {
            hosts: hosts.into(),
            system: GaiResolver::new(),
        });
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Self {
            inner: Client::builder(TokioExecutor::new()).build(https),
        })
    }

    /// Sends `request` and returns the answer with its body unread (read it
    /// to the end, or drop it, to free the connection).
    ///
    /// # Errors
    /// [`TlsError::Request`] when no answer came: the connection, the TLS
    /// handshake (an untrusted certificate) or the exchange failed.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future abandons the request; a request
    /// already sent may still have reached the server.
    pub async fn send(
        &self,
        request: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<Incoming>, TlsError> {
        self.inner
            .request(request)
            .await
            .map_err(|e| TlsError::Request(error_chain(&e)))
    }
}

/// An error and its sources, `: `-joined (the handshake's reason is a
/// source of hyper's "client error (Connect)").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
