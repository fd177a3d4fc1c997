//! A log handle wrapper that wakes watchers on every append.

use std::sync::Arc;

use async_trait::async_trait;
use korvus_log::{Event, LogError, LogHandle, LogIo, Result, Writers};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Delegates to the backend's write handle and wakes `notify` after every
/// successful append, so [`Manager::watch`](crate::Manager::watch) streams
/// live events without polling the backend in a tight loop. An append the
/// log refuses because a newer run claimed it (`LogError::Fenced`) cancels
/// the run: it was superseded and must stop.
#[derive(Debug)]
pub(crate) struct NotifyingIo {
    inner: LogHandle,
    notify: Arc<Notify>,
    cancel: CancellationToken,
}

impl NotifyingIo {
    pub(crate) fn new(inner: LogHandle, notify: Arc<Notify>, cancel: CancellationToken) -> Self {
        Self {
            inner,
            notify,
            cancel,
        }
    }
}

#[async_trait]
impl LogIo for NotifyingIo {
    async fn read(&self, offset: u64, len: Option<u64>) -> Result<Vec<Event>> {
        self.inner.read(offset, len).await
    }

    async fn event_count(&self) -> Result<u64> {
        self.inner.len().await
    }

    async fn claim(&self, epoch: u64) -> Result<()> {
        self.inner.claim_epoch(epoch).await
    }

    async fn append(&self, at: u64, events: &[Event]) -> Result<()> {
        match self.inner.append_at(at, events).await {
            Ok(()) => {
                self.notify.notify_waiters();
                Ok(())
            }
            Err(e @ LogError::Fenced { .. }) => {
                if !self.cancel.is_cancelled() {
                    warn!(error = %e, "the turn log has a newer writer: this run was superseded; cancelling it");
                    self.cancel.cancel();
                }
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    async fn flush(&self) -> Result<()> {
        self.inner.flush().await
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

/// Re-wraps a write handle so every append wakes `notify` (and a fenced
/// append fires `cancel`); the wrapper takes this process's single-writer
/// claim of the log.
pub(crate) fn notifying(
    writers: &Writers,
    log: LogHandle,
    notify: Arc<Notify>,
    cancel: CancellationToken,
) -> Result<LogHandle> {
    let header = log.header().clone();
    let claim = writers.claim(header.id)?;
    Ok(LogHandle::writer(
        header,
        Arc::new(NotifyingIo::new(log, notify, cancel)),
        claim,
    ))
}
