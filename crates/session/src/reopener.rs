//! [`StreamReopener`], the session layer's own collaborator trait. The
//! runner seam ([`Runner`](crate::Runner), [`RunContext`](crate::RunContext),
//! …) lives in `korvus-runner` and is re-exported from the crate root.

use std::fmt::Debug;

use async_trait::async_trait;
use korvus_store::SessionId;

/// Lifts the "finished" latch of an external event stream (e.g. an SSE hub)
/// when a session is reopened, so subscribers see the next iteration.
///
/// # Cancel safety
/// The manager awaits `reopen` on a task of its own and never drops it, nor
/// bounds it: an implementation need not be cancel safe, but must return
/// promptly, since the reopen waits for it.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait StreamReopener: Send + Sync + Debug + 'static {
    /// Called by `reopen` after the store's transition, before it returns.
    async fn reopen(&self, session: SessionId);
}
