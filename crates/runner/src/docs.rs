//! Documentation search pinned to a session's commit: [`DocsSearch`] pins,
//! [`DocsClient`] searches, [`DocsLease`] releases.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use korvus_store::WorkspaceRef;

use crate::RunError;

/// A documentation search client pinned to one commit.
///
/// # Cancel safety
/// The manager never drops a search on its own: the runner that holds the
/// client owns each call, and drops it only when the run itself is dropped.
/// A search only reads; an implementation must hold nothing past a dropped
/// call.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait DocsClient: Send + Sync + Debug + 'static {
    /// Searches; returns matching snippets.
    ///
    /// # Errors
    /// Whatever the search backend fails with.
    ///
    /// # Cancel safety
    /// Up to the implementation; the manager never drops a search half-way
    /// on its own (the runner owns the call).
    async fn search(&self, query: &str, limit: usize) -> Result<Vec<String>, RunError>;
}

/// A pinned docs client and how to unpin it.
pub struct DocsLease {
    /// The client handed to the run.
    pub client: Arc<dyn DocsClient>,
    /// Unpins the commit; awaited exactly once after the run landed — also
    /// when the run was cancelled or panicked.
    pub release: BoxFuture<'static, ()>,
}

impl Debug for DocsLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DocsLease")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// Pins documentation search at a session's commit.
///
/// # Cancel safety
/// The manager drops a `pin` in progress when the run is cancelled: an
/// implementation must then leave no pin behind (the lease's `release` is
/// never called for a pin that did not return).
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait DocsSearch: Send + Sync + Debug + 'static {
    /// Pins `workspace` and returns a client plus its release.
    ///
    /// # Errors
    /// A failure degrades to a run without docs search (logged).
    ///
    /// # Cancel safety
    /// The manager drops the call when the run is cancelled while it pins;
    /// an implementation must not leave a pin behind when dropped.
    async fn pin(&self, workspace: &WorkspaceRef) -> Result<DocsLease, RunError>;
}
