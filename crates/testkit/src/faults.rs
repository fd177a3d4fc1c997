//! Fault-injecting wrappers: real backends that fail where a test says so.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use korvus_log::{
    Access, Event, FlushError, LogError, LogHandle, LogHeader, LogId, LogIo, LogStat, Result,
    TurnLog, Writers,
};

/// Shared switches of a [`FailingLog`].
#[derive(Debug, Default)]
struct LogFaults {
    fail_flush: HashSet<LogId>,
    flushed: Vec<LogId>,
    /// Per log: the next tries of an append that fail before storing.
    fail_appends: std::collections::HashMap<LogId, (u32, bool)>,
    /// Per log: the next tries of an append that store, then fail.
    lose_acks: std::collections::HashMap<LogId, u32>,
}

/// What the next append try of a log does under a [`FailingLog`].
enum AppendFault {
    None,
    FailBefore { transient: bool },
    LoseAck,
}

impl LogFaults {
    fn next_append(&mut self, id: LogId) -> AppendFault {
        if let Some((left, transient)) = self.fail_appends.get_mut(&id) {
            if *left > 0 {
                *left -= 1;
                return AppendFault::FailBefore {
                    transient: *transient,
                };
            }
        }
        if let Some(left) = self.lose_acks.get_mut(&id) {
            if *left > 0 {
                *left -= 1;
                return AppendFault::LoseAck;
            }
        }
        AppendFault::None
    }
}

/// A [`TurnLog`] wrapper whose handles fail `flush` or append tries for
/// chosen logs; every other call goes to the wrapped service. It keeps its own writer registry,
/// so its service-wide [`flush`](FailingLog::flush) sweeps its own handles
/// with the same [`Writers`] machinery backends use.
pub struct FailingLog<'a> {
    inner: &'a dyn TurnLog,
    writers: Writers,
    faults: Arc<Mutex<LogFaults>>,
}

impl fmt::Debug for FailingLog<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailingLog")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<'a> FailingLog<'a> {
    /// Wraps `inner`; nothing fails until told.
    pub fn new(inner: &'a dyn TurnLog) -> Self {
        Self {
            inner,
            writers: Writers::new(),
            faults: Arc::default(),
        }
    }

    /// From now on, flushing the log `id` fails.
    pub fn fail_flush(&self, id: LogId) {
        self.faults.lock().unwrap().fail_flush.insert(id);
    }

    /// The next `tries` append tries of log `id` fail before storing
    /// anything, with a transient or a permanent error. A [`LogHandle`]
    /// retries transient ones itself, up to
    /// [`APPEND_ATTEMPTS`](korvus_log::APPEND_ATTEMPTS) tries per append.
    pub fn fail_appends(&self, id: LogId, tries: u32, transient: bool) {
        self.faults
            .lock()
            .unwrap()
            .fail_appends
            .insert(id, (tries, transient));
    }

    /// The next `tries` append tries of log `id` store their events, then
    /// fail with a transient error, as if the acknowledgement was lost.
    pub fn lose_acks(&self, id: LogId, tries: u32) {
        self.faults.lock().unwrap().lose_acks.insert(id, tries);
    }

    /// Logs whose flush succeeded, in order.
    pub fn flushed(&self) -> Vec<LogId> {
        self.faults.lock().unwrap().flushed.clone()
    }

    fn wrap(&self, handle: LogHandle) -> Result<LogHandle> {
        let header = handle.header().clone();
        let access = handle.access();
        let io = Arc::new(FailingIo {
            inner: handle,
            faults: Arc::clone(&self.faults),
        });
        Ok(match access {
            Access::Read => LogHandle::reader(header, io),
            Access::Write => LogHandle::writer(header.clone(), io, self.writers.claim(header.id)?),
        })
    }

    /// [`TurnLog::create`] through the wrapper.
    ///
    /// # Errors
    /// As the wrapped service.
    pub async fn create(&self, header: LogHeader) -> Result<LogHandle> {
        let handle = self.inner.create(header).await?;
        self.wrap(handle)
    }

    /// [`TurnLog::open`] through the wrapper.
    ///
    /// # Errors
    /// As the wrapped service.
    pub async fn open(&self, id: LogId, access: Access) -> Result<LogHandle> {
        let handle = self.inner.open(id, access).await?;
        self.wrap(handle)
    }

    /// [`TurnLog::flush`] over this wrapper's handles.
    ///
    /// # Errors
    /// Every failing log.
    pub async fn flush(&self) -> std::result::Result<(), FlushError> {
        self.writers.flush_all().await
    }
}

#[async_trait]
impl TurnLog for FailingLog<'static> {
    async fn create(&self, header: LogHeader) -> Result<LogHandle> {
        FailingLog::create(self, header).await
    }

    async fn open(&self, id: LogId, access: Access) -> Result<LogHandle> {
        FailingLog::open(self, id, access).await
    }

    async fn stat(&self, id: LogId) -> Result<LogStat> {
        self.inner.stat(id).await
    }

    async fn list(&self) -> Result<Vec<LogId>> {
        self.inner.list().await
    }

    async fn delete(&self, id: LogId) -> Result<()> {
        // This wrapper's own writers first: the inner service does not
        // know them.
        let _claim = self.writers.claim(id)?;
        self.inner.delete(id).await
    }

    async fn fence(&self, id: LogId, epoch: u64) -> Result<()> {
        // The inner service fences the handles this wrapper's wrap.
        self.inner.fence(id, epoch).await
    }

    async fn flush(&self) -> std::result::Result<(), FlushError> {
        FailingLog::flush(self).await
    }
}

#[derive(Debug)]
struct FailingIo {
    inner: LogHandle,
    faults: Arc<Mutex<LogFaults>>,
}

#[async_trait]
impl LogIo for FailingIo {
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
        let id = self.inner.id();
        let fault = self.faults.lock().unwrap().next_append(id);
        let injected = |what: &str| format!("injected append failure for {id}: {what}");
        match fault {
            AppendFault::None => self.inner.append_at(at, events).await,
            AppendFault::FailBefore { transient: true } => Err(LogError::transient(
                "failing-log",
                injected("nothing stored"),
            )),
            AppendFault::FailBefore { transient: false } => Err(LogError::permanent(
                "failing-log",
                injected("nothing stored"),
            )),
            AppendFault::LoseAck => {
                self.inner.append_at(at, events).await?;
                Err(LogError::transient(
                    "failing-log",
                    injected("stored, acknowledgement lost"),
                ))
            }
        }
    }

    async fn flush(&self) -> Result<()> {
        let id = self.inner.id();
        if self.faults.lock().unwrap().fail_flush.contains(&id) {
            return Err(LogError::backend(
                "failing-log",
                format!("injected flush failure for {id}"),
            ));
        }
        self.inner.flush().await?;
        self.faults.lock().unwrap().flushed.push(id);
        Ok(())
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

pub use self::blob_faults::{BlobFault, FaultBlobStore};
pub use self::store_faults::{FaultStore, StoreFault, StoreOp};

mod blob_faults;
mod store_faults;
