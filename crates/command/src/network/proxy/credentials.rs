//! The proxy's part of the credential vault: which requests it
//! intercepts, the header set on plain ones, and handing a `CONNECT`'s
//! connection over to the vault.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::AsyncReadExt as _;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::{mpsc, oneshot};

use super::http::{Ask, Input, Request};
use super::{Back, Proxy};
use crate::network::vault::Armed;
use crate::network::Destination;

impl Proxy {
    /// The vault, when `request` is a `CONNECT` to a destination it holds
    /// a credential for (counted as admitted).
    pub(super) fn intercepted(&self, request: &Request) -> Option<Arc<Armed>> {
        let vault = self.vault.as_ref()?;
        let bound = matches!(request.ask, Ask::Connect) && vault.bound(&request.dest).is_some();
        if bound {
            self.stats.admitted.fetch_add(1, Ordering::Relaxed);
        }
        bound.then(|| Arc::clone(vault))
    }

    /// A plain request to a bound destination: its credential set when the
    /// credential may travel in clear; refused (why) otherwise, and always
    /// for `TRACE`, which would echo the credential back to the agent.
    pub(super) fn with_credential(&self, request: Request) -> Result<Request, &'static str> {
        let Some(vault) = &self.vault else {
            return Ok(request);
        };
        let Some(bound) = vault.bound(&request.dest) else {
            return Ok(request);
        };
        if request.method.eq_ignore_ascii_case("TRACE") {
            return Err("korvus vault: TRACE to a bound destination would echo its credential");
        }
        let ask = match request.ask {
            Ask::Forward { .. } if !bound.plain_http() => {
                return Err(
                    "korvus vault: a credential bound here is never sent in clear; use https",
                )
            }
            Ask::Forward {
                head,
                body,
                upgrade,
            } => Ask::Forward {
                head: vault.rewrite_head(&head, bound),
                body,
                upgrade,
            },
            Ask::Connect => Ask::Connect,
        };
        Ok(Request { ask, ..request })
    }
}

/// Hands the rest of the connection to the vault, once the client was
/// told its `CONNECT` succeeded (after every answer before it).
pub(super) async fn intercept(
    vault: Arc<Armed>,
    input: Input<OwnedReadHalf>,
    back: &mpsc::Sender<Back>,
    dest: Destination,
) {
    let (give, take) = oneshot::channel();
    if back.send(Back::Intercept(give)).await.is_err() {
        return;
    }
    let Ok(write) = take.await else { return };
    let (read, seen) = input.into_parts();
    let stream = tokio::io::join(std::io::Cursor::new(seen).chain(read), write);
    vault.intercept(stream, dest).await;
}
