//! What runs after landing: releasing docs search, archiving the scratch
//! dir (when configured), removing it, and closing the turn log.
//!
//! Clean-up runs on its own task: a panic in it (an archive, a docs
//! release) must not replace the outcome the report row already carries.

use std::sync::Arc;

use korvus_log::LogHandle;
use korvus_runner::DocsLease;
use korvus_workspace::ScratchDir;
use tracing::{error, warn, Instrument};

use crate::manager::Inner;
use crate::supervise::Plan;

/// Releases the docs lease and the scratch dir, then closes the log.
pub(crate) async fn cleanup(
    inner: &Arc<Inner>,
    plan: &Plan,
    lease: Option<DocsLease>,
    dir: Option<ScratchDir>,
    log: Arc<LogHandle>,
) {
    let work = {
        let inner = Arc::clone(inner);
        let (session, incident, revision) =
            (plan.session.id, plan.session.incident_id, plan.revision);
        async move {
            if let Some(lease) = lease {
                lease.release.await;
            }
            let Some(dir) = dir else { return };
            if inner.config.archive_on_release {
                archive(&inner, incident, session, revision, &dir).await;
            }
            if let Err(e) = dir.release().await {
                warn!(error = %e, "scratch dir not removed; `reap` will");
            }
        }
    };
    if let Err(e) = tokio::spawn(work.in_current_span()).await {
        error!(error = %e, "workspace clean-up panicked; `reap` removes what is left");
    }
    if let Err(e) = log.close().await {
        warn!(error = %e, "turn log close failed");
    }
}

/// Stores the scratch dir as one `workspace.tar.gz` artifact.
async fn archive(
    inner: &Inner,
    incident: korvus_store::IncidentId,
    session: korvus_store::SessionId,
    revision: u32,
    dir: &ScratchDir,
) {
    let Some(blobs) = &inner.blobs else { return };
    match korvus_workspace::archive(dir.path()).await {
        Ok(archive) => {
            let stored = korvus_workspace::store_archive(
                &*inner.store,
                &**blobs,
                incident,
                session,
                revision,
                &archive,
            )
            .await;
            if let Err(e) = stored {
                warn!(error = %e, "workspace archive not stored");
            }
        }
        Err(e) => warn!(error = %e, "workspace not archived"),
    }
}
