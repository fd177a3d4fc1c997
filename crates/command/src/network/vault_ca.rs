//! The run's own certificate authority (rcgen): made when the run starts,
//! its key never written anywhere, constrained to the bound names (name
//! constraints) and to 30 days, it signs one server certificate naming
//! every bound destination's host, which the proxy presents on the
//! connections it intercepts (rustls, HTTP/1.1 only).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CidrSubnet, ExtendedKeyUsagePurpose, GeneralSubtree, IsCa,
    KeyPair, KeyUsagePurpose, NameConstraints,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// The authority's certificate, as the agent's trust store gets it.
#[derive(Debug)]
pub(crate) struct Authority {
    pem: String,
}

/// A new authority and an acceptor presenting its certificate for
/// `names` (host names or addresses).
pub(crate) fn issue(names: &[String]) -> Result<(Authority, tokio_rustls::TlsAcceptor), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|x| e(&x))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "korvus run authority");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    // The agent's trust store holds it: it may vouch for the bound names
    // only, and only while runs last.
    params.name_constraints = Some(NameConstraints {
        permitted_subtrees: names
            .iter()
            .map(|n| match n.parse::<std::net::IpAddr>() {
                Ok(ip) => GeneralSubtree::IpAddress(CidrSubnet::from_addr_prefix(
                    ip,
                    if ip.is_ipv4() { 32 } else { 128 },
                )),
                Err(_) => GeneralSubtree::DnsName(n.clone()),
            })
            .collect(),
        excluded_subtrees: Vec::new(),
    });
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(30);
    let ca_key = KeyPair::generate().map_err(|x| e(&x))?;
    let ca = rcgen::CertifiedIssuer::self_signed(params, ca_key).map_err(|x| e(&x))?;
    let mut leaf_names = names.to_vec();
    leaf_names.sort();
    leaf_names.dedup();
    let leaf_key = KeyPair::generate().map_err(|x| e(&x))?;
    let mut leaf = CertificateParams::new(leaf_names).map_err(|x| e(&x))?;
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    leaf.not_before = now - time::Duration::hours(1);
    leaf.not_after = now + time::Duration::days(30);
    let leaf = leaf.signed_by(&leaf_key, &ca).map_err(|x| e(&x))?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|x| e(&x))?
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone(), CertificateDer::from(ca.der().to_vec())],
            key,
        )
        .map_err(|x| e(&x))?;
    // Only HTTP/1.1 on an intercepted connection: the proxy reads it.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((
        Authority { pem: ca.pem() },
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
    ))
}

impl Authority {
    /// Writes `ca.pem` (the authority alone, for trust stores that add to
    /// their own) and `bundle.pem` (the host's authorities and it, for
    /// those that replace theirs) into `dir`.
    pub(crate) fn write(&self, dir: &Path) -> std::io::Result<(PathBuf, PathBuf)> {
        std::fs::create_dir_all(dir)?;
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, &self.pem)?;
        let mut bundle = String::new();
        for cert in rustls_native_certs::load_native_certs().certs {
            bundle.push_str(&pem::encode(&pem::Pem::new("CERTIFICATE", cert.to_vec())));
        }
        bundle.push_str(&self.pem);
        let path = dir.join("bundle.pem");
        std::fs::write(&path, bundle)?;
        Ok((ca, path))
    }
}
