//! [`MemoryLog`]: turn logs in process memory.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use crate::{
    Access, Event, FlushError, LogError, LogHandle, LogHeader, LogId, LogIo, LogStat, Result,
    Revision, TurnLog, Writers,
};

/// A [`TurnLog`] that keeps every log in memory. Appends are visible and
/// "durable" at once; the revision is the event count.
#[derive(Debug, Default)]
pub struct MemoryLog {
    logs: Mutex<BTreeMap<LogId, Arc<MemoryLogData>>>,
    writers: Writers,
}

#[derive(Debug)]
struct MemoryLogData {
    /// Shared with every handle on the log.
    header: Arc<LogHeader>,
    events: Mutex<Vec<Event>>,
    /// The newest writer epoch claimed; read and written under `events`'
    /// lock, so a claim and an append never interleave.
    newest: AtomicU64,
}

impl MemoryLogData {
    fn events(&self) -> MutexGuard<'_, Vec<Event>> {
        // Appends extend the vector in one call; a poisoned lock still holds a
        // whole prefix.
        self.events.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl MemoryLog {
    /// An empty service.
    pub fn new() -> Self {
        Self::default()
    }

    fn get(&self, id: LogId) -> Result<Arc<MemoryLogData>> {
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
            .ok_or(LogError::NotFound { id })
    }
}

#[derive(Debug)]
struct MemoryIo {
    data: Arc<MemoryLogData>,
    /// This writer's epoch (0 until it claims one).
    epoch: AtomicU64,
}

impl MemoryIo {
    fn new(data: Arc<MemoryLogData>) -> Self {
        Self {
            data,
            epoch: AtomicU64::new(0),
        }
    }

    /// `Fenced` when the log has seen an epoch newer than `epoch`.
    fn check(&self, epoch: u64) -> Result<()> {
        let newest = self.data.newest.load(Ordering::SeqCst);
        if newest > epoch {
            return Err(LogError::Fenced {
                id: self.data.header.id,
                epoch,
                newest,
            });
        }
        Ok(())
    }
}

#[async_trait]
impl LogIo for MemoryIo {
    async fn read(&self, offset: u64, len: Option<u64>) -> Result<Vec<Event>> {
        let events = self.data.events();
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(events.len());
        let end = match len {
            Some(l) => start
                .saturating_add(usize::try_from(l).unwrap_or(usize::MAX))
                .min(events.len()),
            None => events.len(),
        };
        Ok(events[start..end].to_vec())
    }

    async fn event_count(&self) -> Result<u64> {
        Ok(self.data.events().len() as u64)
    }

    async fn claim(&self, epoch: u64) -> Result<()> {
        let _events = self.data.events();
        self.check(epoch)?;
        self.data.newest.store(epoch, Ordering::SeqCst);
        self.epoch.store(epoch, Ordering::SeqCst);
        Ok(())
    }

    async fn append(&self, at: u64, events: &[Event]) -> Result<()> {
        let mut stored = self.data.events();
        self.check(self.epoch.load(Ordering::SeqCst))?;
        let found = stored.len() as u64;
        if found != at {
            // Done already only when an earlier try of this very append
            // stored these events at `at`.
            let start = usize::try_from(at).unwrap_or(usize::MAX);
            if found == at + events.len() as u64 && stored.get(start..) == Some(events) {
                return Ok(());
            }
            return Err(LogError::Conflict {
                id: self.data.header.id,
                expected: at,
                found,
            });
        }
        stored.extend_from_slice(events);
        Ok(())
    }

    async fn flush(&self) -> Result<()> {
        Ok(())
    }

    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

#[async_trait]
impl TurnLog for MemoryLog {
    async fn create(&self, header: LogHeader) -> Result<LogHandle> {
        let id = header.id;
        let data = {
            let mut logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
            if logs.contains_key(&id) {
                return Err(LogError::AlreadyExists { id });
            }
            let data = Arc::new(MemoryLogData {
                header: Arc::new(header),
                events: Mutex::new(Vec::new()),
                newest: AtomicU64::new(0),
            });
            logs.insert(id, Arc::clone(&data));
            data
        };
        let claim = self.writers.claim(id)?;
        Ok(LogHandle::writer(
            Arc::clone(&data.header),
            Arc::new(MemoryIo::new(data)),
            claim,
        ))
    }

    async fn open(&self, id: LogId, access: Access) -> Result<LogHandle> {
        let data = self.get(id)?;
        let header = Arc::clone(&data.header);
        let io = Arc::new(MemoryIo::new(data));
        Ok(match access {
            Access::Read => LogHandle::reader(header, io),
            Access::Write => LogHandle::writer(header, io, self.writers.claim(id)?),
        })
    }

    async fn stat(&self, id: LogId) -> Result<LogStat> {
        let data = self.get(id)?;
        let count = data.events().len() as u64;
        Ok(LogStat {
            header: (*data.header).clone(),
            revision: Revision::new(count.to_string()),
            event_count: Some(count),
            size_bytes: None,
        })
    }

    async fn list(&self) -> Result<Vec<LogId>> {
        Ok(self
            .logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .copied()
            .collect())
    }

    async fn delete(&self, id: LogId) -> Result<()> {
        // Held while the log goes: no writer can open it meanwhile.
        let _claim = self.writers.claim(id)?;
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        Ok(())
    }

    async fn fence(&self, id: LogId, epoch: u64) -> Result<()> {
        let data = self.get(id)?;
        // Under the events' lock, as claims and appends: an append is
        // stored before the fence or checked after it.
        let _events = data.events();
        let newest = data.newest.load(Ordering::SeqCst);
        if newest > epoch {
            return Err(LogError::Fenced { id, epoch, newest });
        }
        data.newest.store(epoch, Ordering::SeqCst);
        Ok(())
    }

    async fn flush(&self) -> std::result::Result<(), FlushError> {
        self.writers.flush_all().await
    }
}
