//! HTTPS for the stub: [`TestCa`], a throwaway certificate authority with a
//! server certificate for `127.0.0.1` and `localhost`, and the accept loop
//! that serves the stub's router over TLS (rustls on ring, HTTP/1.1).
//!
//! A client under test trusts the authority's certificate
//! ([`TestCa::ca_pem`], or [`TestCa::ca_der`]) and nothing else changes: it
//! is how a gateway's upstream connection is tested without the internet.

use std::sync::Arc;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// A certificate authority made for one test, and the stub's certificate
/// it signed (for `127.0.0.1`, `::1` and `localhost`).
pub struct TestCa {
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    server_der: CertificateDer<'static>,
    server_key: Vec<u8>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

impl TestCa {
    /// A new authority and server certificate (ECDSA P-256).
    ///
    /// # Errors
    /// When the certificates cannot be generated (never, short of a broken
    /// build of the crypto library).
    pub fn new() -> Result<Self, rcgen::Error> {
        Self::with_names(&["127.0.0.1", "::1", "localhost"])
    }

    /// A new authority and a server certificate for `names` (host names
    /// or IP addresses), e.g. a test's `api.example.test` reached at
    /// `127.0.0.1` by a client told so.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_names(names: &[&str]) -> Result<Self, rcgen::Error> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "korvus model stub test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_key = KeyPair::generate()?;
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key)?;
        let server_params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())?;
        let server_key = KeyPair::generate()?;
        let server = server_params.signed_by(&server_key, &ca)?;
        Ok(Self {
            ca_pem: ca.pem(),
            ca_der: ca.der().clone(),
            server_der: server.der().clone(),
            server_key: server_key.serialize_der(),
        })
    }

    /// The authority's certificate, PEM (for `NODE_EXTRA_CA_CERTS`,
    /// `SSL_CERT_FILE` and the like).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The authority's certificate, DER (for a rustls root store).
    pub fn ca_der(&self) -> &CertificateDer<'static> {
        &self.ca_der
    }

    /// A rustls server configuration presenting the stub's certificate,
    /// offering HTTP/1.1 only.
    fn server_config(&self) -> std::io::Result<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key.clone()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(std::io::Error::other)?
            .with_no_client_auth()
            .with_single_cert(vec![self.server_der.clone()], key)
            .map_err(std::io::Error::other)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// Serves `app` over TLS on `listener` until the task is aborted. A
/// handshake or connection that fails ends that connection only.
pub(crate) fn serve(
    listener: TcpListener,
    app: Router,
    ca: &TestCa,
) -> std::io::Result<impl std::future::Future<Output = ()>> {
    let acceptor = TlsAcceptor::from(Arc::new(ca.server_config()?));
    Ok(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                // Out of descriptors, say: wait rather than spin.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = TowerToHyperService::new(app);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    })
}
