//! A log handle wrapper that wakes watchers on every append.

use std::sync::Arc;

use async_trait::async_trait;
use korvus_log::{Event, LogHandle, LogIo, Result, Writers};
use tokio::sync::Notify;

/// Delegates to the backend's write handle and wakes `notify` after every
/// successful append, so [`Manager::watch`](crate::Manager::watch) streams
/// live events without polling the backend in a tight loop.
#[derive(Debug)]
pub(crate) struct NotifyingIo {
    inner: LogHandle,
    notify: Arc<Notify>,
}

impl NotifyingIo {
    pub(crate) fn new(inner: LogHandle, notify: Arc<Notify>) -> Self {
        Self { inner, notify }
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
        self.inner.append_at(at, events).await?;
        self.notify.notify_waiters();
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        self.inner.flush().await
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

/// Re-wraps a write handle so every append wakes `notify`; the wrapper
/// takes this process's single-writer claim of the log.
pub(crate) fn notifying(
    writers: &Writers,
    log: LogHandle,
    notify: Arc<Notify>,
) -> Result<LogHandle> {
    let header = log.header().clone();
    let claim = writers.claim(header.id)?;
    Ok(LogHandle::writer(
        header,
        Arc::new(NotifyingIo::new(log, notify)),
        claim,
    ))
}
