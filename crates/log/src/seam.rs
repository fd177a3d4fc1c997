//! The [`TurnLog`] service trait, the backend-side [`LogIo`] trait and the
//! [`LogHandle`] every caller holds.

use std::collections::HashMap;
use std::fmt::{self, Debug};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use async_trait::async_trait;

use crate::{Event, FlushError, LogError, LogHandle, LogHeader, LogId, Result};

/// How a handle was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read only; `append` and `flush` fail with [`LogError::ReadOnly`].
    Read,
    /// The single writer of the log in this process.
    Write,
}

/// An opaque change token: equal revisions mean an unchanged log.
///
/// Only compare revisions of the same log from the same backend.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Revision(String);

impl Revision {
    /// Wraps a backend's token.
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }

    /// The token's text, for storing or logging.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What [`TurnLog::stat`] knows without reading the log's events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogStat {
    /// The log's header.
    pub header: LogHeader,
    /// Current change token.
    pub revision: Revision,
    /// Number of events, when the backend knows it without reading them.
    pub event_count: Option<u64>,
    /// Stored size in bytes, when the backend knows it.
    pub size_bytes: Option<u64>,
}

/// The turn-log service: creates and opens per-session logs.
///
/// # Guarantees every backend gives (pinned by `korvus-testkit`'s suite)
///
/// - At most one write handle per log id at a time in this service
///   ([`LogError::AlreadyOwned`]); after the writer is closed or dropped,
///   opening for write succeeds again.
/// - Once [`LogHandle::append`] or [`LogHandle::flush`] returns, a read started
///   afterwards through any handle of this service sees at least that prefix.
/// - [`Revision`] changes on append and on nothing else a caller does
///   (open, read, close leave it unchanged).
/// - Writers are known by epoch ([`LogHandle::claim_epoch`]): a log
///   refuses a claim older than the newest epoch it has seen, and every
///   append of a writer once a newer epoch claimed or fenced it
///   ([`TurnLog::fence`]), with [`LogError::Fenced`].
///
/// Crash repair of turn structure is not a storage concern: see the session layer.
///
/// # Cancel safety
/// `stat` and `list` only read. A dropped `create` may leave the log created
/// but no writer holding it; a dropped `open` holds no writer claim; a dropped
/// `delete` or `fence` has happened whole or not at all and may be made again;
/// a dropped `flush` may have flushed some writers and not others. An
/// implementation must release a writer claim it took when the call is dropped
/// before it returns the handle (a dropped [`WriterClaim`] does).
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait TurnLog: Send + Sync + Debug + 'static {
    /// Creates an empty log and returns its write handle.
    ///
    /// # Errors
    /// [`LogError::AlreadyExists`] when the id has a log; `Backend` on I/O failure.
    ///
    /// # Cancel safety
    /// Not cancel-safe: a dropped call may leave the log created (and unowned).
    async fn create(&self, header: LogHeader) -> Result<LogHandle>;

    /// Opens an existing log.
    ///
    /// # Errors
    /// [`LogError::NotFound`]; [`LogError::AlreadyOwned`] for a second writer.
    ///
    /// # Cancel safety
    /// Cancel-safe: a dropped call leaves no writer registered.
    async fn open(&self, id: LogId, access: Access) -> Result<LogHandle>;

    /// Reads the header and change token without reading events.
    ///
    /// # Errors
    /// [`LogError::NotFound`]; `Backend` on I/O failure.
    async fn stat(&self, id: LogId) -> Result<LogStat>;

    /// Lists every log id, sorted.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn list(&self) -> Result<Vec<LogId>>;

    /// Removes a log and every event of it, for good (retention). A log
    /// that does not exist is `Ok`, so a delete cut short can be made
    /// again. Handles already open for reading may go on reading what
    /// they had or fail; a later `open` is `NotFound`.
    ///
    /// # Errors
    /// [`LogError::AlreadyOwned`] while a writer holds the log (in this
    /// service, or — where the backend can tell, as `JsonlLog`'s file lock
    /// does — in another process): nothing is removed. `Backend` on I/O
    /// failure.
    async fn delete(&self, id: LogId) -> Result<()>;

    /// Fences the log off for every writer older than `epoch`, without
    /// becoming its writer: records `epoch` as the newest the log has
    /// seen (as a writer's claim of it would) and, once this returns
    /// `Ok`, every later append of a writer whose epoch is older is
    /// refused with [`LogError::Fenced`] — a writer of this service, of
    /// another service, or of another process, holding the log open
    /// included. An append in flight when the fence is made is either
    /// stored before it or refused; none lands after. A writer of
    /// `epoch` itself or newer is not affected. Fencing again at the
    /// newest epoch is `Ok` (idempotent).
    ///
    /// How a take-over stops the appends of the run it superseded, while
    /// that run may still hold the log open (a paused process that comes
    /// back, a live run in another process).
    ///
    /// # Errors
    /// `Fenced` when the log has seen a newer epoch than `epoch` (nothing
    /// changes: the log is fenced off all the more); [`LogError::NotFound`];
    /// `Backend` on I/O failure — transient when the same call may work
    /// later (`JsonlLog`: the log's epoch lock was held past its bound by
    /// a writer paused in the middle of a write).
    ///
    /// # Cancel safety
    /// Cancel-safe in effect: a dropped call has fenced the log or not
    /// (never half-way), and may be made again.
    async fn fence(&self, id: LogId, epoch: u64) -> Result<()>;

    /// Flushes every active write handle. A failure of one log does not stop
    /// the sweep: every failing log is reported in the error.
    ///
    /// # Errors
    /// [`FlushError`] naming each log whose flush failed.
    async fn flush(&self) -> std::result::Result<(), FlushError>;
}

/// The backend side of one open handle. Backends implement this; callers use
/// [`LogHandle`], which adds the rules every backend shares (read-only checks,
/// never-shrinking reads, idempotent uncancellable close).
///
/// # Cancel safety
/// `read` and `event_count` must change nothing. A dropped `append` must have
/// stored all of its events or none (a torn tail is never counted or read):
/// the handle asks `event_count` again before its next append. A dropped
/// `claim` or `flush` may have taken effect or not and is made again. `close`
/// is called on a task of its own that [`LogHandle`] never drops.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait LogIo: Send + Sync + Debug + 'static {
    /// Returns events `offset..offset+len` (or to the end when `len` is `None`)
    /// as far as they are stored completely: a contiguous, validated run that
    /// never includes a torn tail. Fewer than `len` events means the log ends.
    async fn read(&self, offset: u64, len: Option<u64>) -> Result<Vec<Event>>;

    /// The number of events stored completely (a torn tail does not count).
    async fn event_count(&self) -> Result<u64>;

    /// Appends `events` so that the first is stored at offset `at`, visible
    /// to reads that start after it returns; all of them or none.
    ///
    /// Idempotent, so a retry is safe: when the log already holds
    /// `at + events.len()` events and those from `at` on are these very
    /// events, an earlier attempt of this same append committed (its
    /// acknowledgement was lost) and nothing is stored again. When it holds any other number than `at`, the append fails
    /// with [`LogError::Conflict`] and stores nothing. `events` is never
    /// empty.
    async fn append(&self, at: u64, events: &[Event]) -> Result<()>;

    /// The fast path of an append, for backends that buffer in memory:
    /// appends `events` at `at` without waiting, each stamped with `epoch`
    /// when one is given (an event's own otherwise), and returns `true`;
    /// or returns `false` having stored nothing, and the caller takes
    /// [`append`](Self::append), which also reports any error (a closed or
    /// fenced writer, an earlier write that failed, an offset that is not
    /// the end). The default always returns `false`.
    ///
    /// Asked only by handles built with
    /// [`LogHandle::with_fast_appends`](crate::LogHandle::with_fast_appends),
    /// with the handle's append lock held; it must not block on I/O.
    fn append_now(&self, at: u64, events: &[Event], epoch: Option<u64>) -> bool {
        let _ = (at, events, epoch);
        false
    }

    /// Makes `epoch` this writer's epoch: refused with
    /// [`LogError::Fenced`] when the log has seen a newer one, else
    /// recorded as the log's newest (it may equal it). From then on, every
    /// append through this I/O is refused with `Fenced` once a newer writer
    /// claimed the log or a [`TurnLog::fence`] at a newer epoch was made.
    /// A writer that never claims has epoch 0.
    ///
    /// # Errors
    /// `Fenced`, `NotFound`, `Backend`.
    async fn claim(&self, epoch: u64) -> Result<()>;

    /// Makes everything appended durable.
    async fn flush(&self) -> Result<()>;

    /// Releases the handle's resources, making appends durable. Called once.
    async fn close(&self) -> Result<()>;
}

/// The registry of write handles of one service: enforces the single writer
/// and lets [`TurnLog::flush`] reach every active writer.
///
/// Backends hold one and call [`Writers::claim`] when opening for write.
#[derive(Debug, Default, Clone)]
pub struct Writers {
    active: Arc<Mutex<HashMap<LogId, WriterSlot>>>,
}

#[derive(Debug)]
struct WriterSlot {
    token: u64,
    io: Option<Weak<dyn LogIo>>,
}

static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// Proof of being the single writer of a log. Dropping it releases the claim.
#[derive(Debug)]
pub struct WriterClaim {
    active: Arc<Mutex<HashMap<LogId, WriterSlot>>>,
    id: LogId,
    token: u64,
}

impl Writers {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LogId, WriterSlot>> {
        // The map is only ever inserted into or removed from; a poisoned lock
        // still holds a consistent map.
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claims the write side of `id`.
    ///
    /// # Errors
    /// [`LogError::AlreadyOwned`] while another claim on `id` is alive.
    pub fn claim(&self, id: LogId) -> Result<WriterClaim> {
        let mut active = self.lock();
        if active.contains_key(&id) {
            return Err(LogError::AlreadyOwned { id });
        }
        let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        active.insert(id, WriterSlot { token, io: None });
        Ok(WriterClaim {
            active: Arc::clone(&self.active),
            id,
            token,
        })
    }

    /// Flushes every active writer, collecting every failure.
    ///
    /// # Errors
    /// [`FlushError`] naming each failed log.
    ///
    /// # Cancel safety
    /// Dropping it aborts the per-log flush tasks (a backend's blocking
    /// `fsync` already started still finishes); nothing is lost: call it again.
    pub async fn flush_all(&self) -> std::result::Result<(), FlushError> {
        // Collect strong references, then release the lock before awaiting.
        let ios: Vec<(LogId, Arc<dyn LogIo>)> = self
            .lock()
            .iter()
            .filter_map(|(id, slot)| slot.io.as_ref()?.upgrade().map(|io| (*id, io)))
            .collect();
        let results = futures_join_all(ios).await;
        let failures: Vec<(LogId, LogError)> = results
            .into_iter()
            .filter_map(|(id, r)| r.err().map(|e| (id, e)))
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(FlushError { failures })
        }
    }
}

async fn futures_join_all(ios: Vec<(LogId, Arc<dyn LogIo>)>) -> Vec<(LogId, Result<()>)> {
    let mut set = tokio::task::JoinSet::new();
    for (id, io) in ios {
        set.spawn(async move { (id, io.flush().await) });
    }
    let mut out = Vec::new();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok(r) => out.push(r),
            // A panicking backend flush must not hide the other results; it is
            // reported without an id because the task's id is lost with it.
            Err(e) => out.push((
                LogId::from_uuid(uuid::Uuid::nil()),
                Err(LogError::backend("flush", e)),
            )),
        }
    }
    out.sort_by_key(|(id, _)| *id);
    out
}

impl WriterClaim {
    pub(crate) fn attach(&self, io: &Arc<dyn LogIo>) {
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = active.get_mut(&self.id) {
            if slot.token == self.token {
                slot.io = Some(Arc::downgrade(io));
            }
        }
    }
}

impl Drop for WriterClaim {
    fn drop(&mut self) {
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        if active.get(&self.id).is_some_and(|s| s.token == self.token) {
            active.remove(&self.id);
        }
    }
}
