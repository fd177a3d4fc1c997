//! What runs after the terminal write: releasing docs search and removing
//! the scratch dir.
//!
//! Clean-up runs on its own task, bounded by the clean-up bound
//! (`ManagerBuilder::cleanup_timeout`): a panic in it cannot change the
//! outcome the rows already carry, and a hanging docs release or file
//! system cannot keep `stop` waiting. What it could not do is logged; `reap`
//! removes a scratch dir left behind.

use std::sync::Arc;

use korvus_runner::DocsLease;
use korvus_workspace::ScratchDir;
use tracing::{error, warn, Instrument};

use crate::manager::Inner;

/// What an iteration leaves to clean up after its terminal write.
#[derive(Default)]
pub(crate) struct Leftovers {
    /// The docs lease to release.
    pub(crate) lease: Option<DocsLease>,
    /// The scratch dir to remove.
    pub(crate) dir: Option<ScratchDir>,
}

/// Releases the docs lease and removes the scratch dir, within the bound.
pub(crate) async fn cleanup(inner: &Arc<Inner>, leftovers: Leftovers) {
    let Leftovers { lease, dir } = leftovers;
    if lease.is_none() && dir.is_none() {
        return;
    }
    let work = async move {
        if let Some(lease) = lease {
            lease.release.await;
        }
        if let Some(dir) = dir {
            if let Err(e) = dir.release().await {
                warn!(error = %e, "scratch dir not removed; `reap` will");
            }
        }
    };
    let task = tokio::spawn(work.in_current_span());
    let abort = task.abort_handle();
    match tokio::time::timeout(inner.config().cleanup_timeout, task).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => error!(error = %e, "clean-up panicked; `reap` removes what is left"),
        Err(_) => {
            abort.abort();
            error!(
                bound = ?inner.config().cleanup_timeout,
                "clean-up did not finish in time; abandoned (`reap` removes what is left)"
            );
        }
    }
}
