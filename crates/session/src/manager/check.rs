//! [`Manager::check`]: refuse before an agent starts. A blob store that
//! refuses writes, a database that is not migrated or not writable, or a
//! scratch root that cannot be written would otherwise be found only when
//! a run lands — after the agent did its work, with its output then kept
//! on disk at best.

use bytes::Bytes;
use korvus_blob::{probe_key, BlobStore, PutOptions};
use tracing::info;

use super::Manager;
use crate::{Result, SessionError};

impl Manager {
    /// Checks that every backend this manager was given does what a run
    /// needs, and names the first one that does not:
    ///
    /// - the **store** is migrated and writable: this incarnation's lease
    ///   is renewed (a real write to the newest table) and the sessions
    ///   table is read;
    /// - the **blob store** accepts a write: a probe object is put under
    ///   [`korvus_blob::PROBE_PREFIX`] (outside the key layout the sweeper
    ///   walks), read back, compared and deleted;
    /// - the **scratch root**, when one is set, accepts a new directory
    ///   (made and removed).
    ///
    /// Call it once at start-up, before the first `create`; the `korvus`
    /// commands that run agents call it before they write a row.
    ///
    /// # Errors
    /// [`SessionError::NotReady`] naming the part and the cause (the
    /// backend's error chain, cause first).
    ///
    /// # Cancel safety
    /// Cancel-safe in effect: dropping it may leave one probe object or
    /// directory behind, which nothing reads.
    pub async fn check(&self) -> Result<()> {
        let inner = &self.inner;
        let store = &inner.store;
        // This manager's own renewal, naming its live runs: a probe that
        // named none would release them.
        inner.renew().await.map_err(|e| not_ready("store", &e))?;
        // A read of the sessions table: an unknown id is `NotFound`.
        match store.get_session(korvus_store::SessionId::new()).await {
            Ok(_) | Err(korvus_store::StoreError::NotFound { .. }) => {}
            Err(e) => return Err(not_ready("store", &e)),
        }
        if let Some(blobs) = &inner.blobs {
            probe_blobs(&**blobs).await?;
        }
        if let Some(root) = &inner.scratch {
            let probe = root.join(format!(".probe-{}", uuid::Uuid::now_v7()));
            tokio::fs::create_dir(&probe)
                .await
                .map_err(|e| SessionError::NotReady {
                    part: "scratch root",
                    reason: format!("{}: {e}", root.display()),
                })?;
            let _ = tokio::fs::remove_dir(&probe).await;
        }
        info!("store, blob store and scratch root checked");
        Ok(())
    }
}

/// Puts a probe object, reads it back and deletes it.
async fn probe_blobs(blobs: &dyn BlobStore) -> Result<()> {
    let key = probe_key(uuid::Uuid::now_v7());
    let body = Bytes::from_static(b"korvus start-up probe\n");
    let options = PutOptions::for_bytes("text/plain", &body);
    blobs
        .put(&key, body.clone(), options)
        .await
        .map_err(|e| not_ready("blob store", &e))?;
    let read = blobs
        .get(&key)
        .await
        .map_err(|e| not_ready("blob store", &e))?;
    if read.bytes != body {
        return Err(SessionError::NotReady {
            part: "blob store",
            reason: format!("the probe {key} read back other bytes than were written"),
        });
    }
    blobs
        .delete(&key)
        .await
        .map_err(|e| not_ready("blob store", &e))
}

/// A [`SessionError::NotReady`] whose reason is `e`'s whole chain.
fn not_ready(part: &'static str, e: &(dyn std::error::Error + 'static)) -> SessionError {
    SessionError::NotReady {
        part,
        reason: crate::error::chain(e),
    }
}
