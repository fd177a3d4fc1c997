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

use crate::inner::Inner;

/// What an iteration leaves to clean up after its terminal write.
#[derive(Default)]
pub(crate) struct Leftovers {
    /// The docs lease to release.
    pub(crate) lease: Option<DocsLease>,
    /// The scratch dir to remove.
    pub(crate) dir: Option<ScratchDir>,
    /// Why the dir must be kept instead — its output is not stored whole —
    /// if it must: it is marked kept (`korvus_workspace::keep`), not removed.
    pub(crate) keep: Option<String>,
}

impl Leftovers {
    /// What a run that stored its output (or never started) leaves: the
    /// dir is removed.
    pub(crate) fn removing(lease: Option<DocsLease>, dir: Option<ScratchDir>) -> Self {
        Self {
            lease,
            dir,
            keep: None,
        }
    }
}

/// Releases the docs lease and removes the scratch dir, within the bound.
pub(crate) async fn cleanup(inner: &Arc<Inner>, leftovers: Leftovers) {
    let Leftovers { lease, dir, keep } = leftovers;
    if lease.is_none() && dir.is_none() {
        return;
    }
    let dir = match (dir, keep) {
        (Some(dir), Some(reason)) => {
            let path = dir.path().to_path_buf();
            let marked = tokio::task::spawn_blocking({
                let (path, reason) = (path.clone(), reason.clone());
                move || korvus_workspace::keep(&path, &reason)
            })
            .await;
            match marked {
                Ok(Ok(())) => {
                    warn!(dir = %path.display(), %reason, "the run's output is not stored whole: its scratch dir is kept")
                }
                Ok(Err(e)) => {
                    error!(dir = %path.display(), error = %e, %reason, "the run's output is not stored whole and its scratch dir could not be marked kept; it is left in place")
                }
                Err(e) => {
                    error!(dir = %path.display(), error = %e, "marking the scratch dir kept panicked; it is left in place")
                }
            }
            crate::metrics::kept();
            None
        }
        (dir, _) => dir,
    };
    let work = async move {
        // Its output is stored (or there was none): the mark of a running
        // dir goes first — before anything that may hang — then the dir.
        let dir = match dir {
            Some(dir) => {
                let path = dir.path().to_path_buf();
                let unmarked =
                    tokio::task::spawn_blocking(move || korvus_workspace::unkeep(&path)).await;
                if matches!(unmarked, Ok(Ok(()))) {
                    Some(dir)
                } else {
                    warn!(
                        ?unmarked,
                        "the scratch dir's running mark not cleared; it is kept"
                    );
                    None
                }
            }
            None => None,
        };
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
    match tokio::time::timeout(inner.config.cleanup_timeout, task).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => error!(error = %e, "clean-up panicked; `reap` removes what is left"),
        Err(_) => {
            abort.abort();
            error!(
                bound = ?inner.config.cleanup_timeout,
                "clean-up did not finish in time; abandoned (`reap` removes what is left)"
            );
        }
    }
}
