//! Helpers for tests that drive a [`Manager`], behind the `testing`
//! feature: korvus's own tests (the session layer's, the end-to-end ones)
//! and an embedder's share them instead of each writing a copy.

use std::time::Duration;

use korvus_store::Session;

use crate::Manager;

pub use crate::closers::interrupted_turn_closers;

/// How long [`settled`] waits before it fails the test.
pub const SETTLE_WAIT: Duration = Duration::from_secs(30);

/// The row of `session` once its run has settled (terminal, or idle
/// waiting for the user), waiting at most [`SETTLE_WAIT`].
///
/// # Panics
/// When the run does not settle in time or the store cannot be read — a
/// test helper.
pub async fn settled(manager: &Manager, session: &Session) -> Session {
    manager
        .await_settled(session.id, SETTLE_WAIT)
        .await
        .unwrap_or_else(|e| panic!("session {} did not settle: {e}", session.id))
}
