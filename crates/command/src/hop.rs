//! Hop-by-hop headers: what neither the model gateway nor the vault
//! passes on between the agent and the real host.

use hyper::header::{self, HeaderMap};

/// Headers of the hop, never forwarded either way.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

/// Copies `from` into `to` but the hop's headers (those of
/// [`HOP_BY_HOP`] and those its `Connection` header names) and `also`.
pub(crate) fn copy_headers(from: &HeaderMap, to: &mut HeaderMap, also: &[&str]) {
    let listed: Vec<String> = from
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|n| n.trim().to_ascii_lowercase())
        .collect();
    for (name, value) in from {
        let name_str = name.as_str();
        let dropped = HOP_BY_HOP.contains(&name_str)
            || also.contains(&name_str)
            || listed.iter().any(|n| n == name_str);
        if !dropped {
            to.append(name.clone(), value.clone());
        }
    }
}
