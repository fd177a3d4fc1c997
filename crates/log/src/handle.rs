//! [`LogHandle`]: the one type callers hold, for both accesses. It adds
//! the rules every backend shares: read-only checks, never-shrinking reads,
//! an idempotent uncancellable close, and for the writer the offset of the
//! next append, bounded retries of transient failures, and a note in the
//! log itself for events that could not be stored.

mod writing;

use std::fmt::{self, Debug};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use self::writing::Writing;
use crate::error::error_chain;
use crate::seam::{Access, LogIo, WriterClaim};
use crate::{Event, EventKind, LogError, LogHeader, LogId, Result};

/// Events appended through a [`LogHandle`] (counter, through the
/// `metrics` facade; the embedder's recorder, if any, sees it).
pub const EVENTS_APPENDED: &str = "korvus_log_events_appended_total";
/// Events of appends that failed, counted as lost (counter).
pub const EVENTS_DROPPED: &str = "korvus_log_events_dropped_total";

/// How often [`LogHandle::append`] tries one batch before it counts the
/// events as lost.
pub const APPEND_ATTEMPTS: u32 = 4;

/// The pause before the first retry of an append; it doubles with each
/// retry (25, 50, 100 ms).
pub const APPEND_BACKOFF: Duration = Duration::from_millis(25);

/// How every note about output that was not stored begins — events a log
/// could not store, agent output past a cap, output cut at the end of a
/// run — so readers (`korvus show`) can find them.
pub const DROPPED_PREFIX: &str = "dropped: ";

/// Told the outcome of every append a write handle makes (its own, the
/// note about lost events, [`LogHandle::append_at`]), with the events it
/// appended: `Ok` once they are stored, or the error the append ended
/// with. Set with [`LogHandle::with_append_hook`]; it runs on the
/// appending task, so it must be quick (wake a watcher, fire a
/// cancellation, note that a turn ended) and must not append itself.
pub type AppendHook = Arc<dyn Fn(&[Event], std::result::Result<(), &LogError>) + Send + Sync>;

/// An open log: the one type for both accesses.
///
/// All methods take `&self`; share a handle with `Arc` if several tasks use it.
/// A handle's reads never shrink: once it has returned events up to `n`, a
/// later read to the end returns at least `n` (a backend that lost data is
/// reported as [`LogError::Corrupt`], never as a shorter log).
pub struct LogHandle {
    header: Arc<LogHeader>,
    access: Access,
    io: Arc<dyn LogIo>,
    seen: AtomicU64,
    closing: AtomicBool,
    closed: Arc<crate::latch::Latch>,
    claim: Mutex<Option<WriterClaim>>,
    writing: tokio::sync::Mutex<Writing>,
    hook: Option<AppendHook>,
    /// Whether appends try [`LogIo::append_now`] first.
    fast: bool,
}

impl Debug for LogHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogHandle")
            .field("id", &self.header.id)
            .field("access", &self.access)
            .field("seen", &self.seen.load(Ordering::Relaxed))
            .field("closing", &self.closing.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl LogHandle {
    /// A read handle over a backend's I/O. The header may be shared with
    /// the backend (`Arc<LogHeader>`) or given by value.
    pub fn reader(header: impl Into<Arc<LogHeader>>, io: Arc<dyn LogIo>) -> Self {
        Self::build(header.into(), Access::Read, io, None)
    }

    /// The write handle over a backend's I/O, holding the writer claim.
    /// The header may be shared with the backend (`Arc<LogHeader>`) or
    /// given by value.
    pub fn writer(
        header: impl Into<Arc<LogHeader>>,
        io: Arc<dyn LogIo>,
        claim: WriterClaim,
    ) -> Self {
        claim.attach(&io);
        Self::build(header.into(), Access::Write, io, Some(claim))
    }

    fn build(
        header: Arc<LogHeader>,
        access: Access,
        io: Arc<dyn LogIo>,
        claim: Option<WriterClaim>,
    ) -> Self {
        Self {
            header,
            access,
            io,
            seen: AtomicU64::new(0),
            closing: AtomicBool::new(false),
            closed: Arc::default(),
            claim: Mutex::new(claim),
            writing: tokio::sync::Mutex::new(Writing::default()),
            hook: None,
            fast: false,
        }
    }

    /// This handle, trying the backend's [`LogIo::append_now`] before the
    /// full path of every append: for backends that buffer appends in
    /// memory (`JsonlLog`). Off by default, so a backend (or a mock) that
    /// does not implement the fast path is never asked.
    #[must_use]
    pub fn with_fast_appends(mut self) -> Self {
        self.fast = self.access == Access::Write;
        self
    }

    /// This handle, telling `hook` the outcome of every append it makes
    /// from now on (see [`AppendHook`]): how an embedder wakes its
    /// watchers or stops a writer that was fenced off, without wrapping
    /// the handle in another.
    #[must_use]
    pub fn with_append_hook(mut self, hook: AppendHook) -> Self {
        self.hook = Some(hook);
        self
    }

    fn told(&self, events: &[Event], outcome: std::result::Result<(), &LogError>) {
        if let Some(hook) = &self.hook {
            hook(events, outcome);
        }
    }

    /// The log's id.
    pub fn id(&self) -> LogId {
        self.header.id
    }

    /// The log's header.
    pub fn header(&self) -> &LogHeader {
        &self.header
    }

    /// How the handle was opened.
    pub fn access(&self) -> Access {
        self.access
    }

    /// The number of events this handle has seen so far (its high-water mark).
    pub fn seen(&self) -> u64 {
        self.seen.load(Ordering::Acquire)
    }

    fn check_open(&self) -> Result<()> {
        if self.closing.load(Ordering::Acquire) {
            Err(LogError::Closed { id: self.id() })
        } else {
            Ok(())
        }
    }

    fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        if self.access == Access::Read {
            return Err(LogError::ReadOnly { id: self.id() });
        }
        Ok(())
    }

    /// Reads events `offset..offset+len`, or to the end when `len` is `None`.
    /// Returns fewer than `len` events when the log ends sooner, and an empty
    /// vector when `offset` is at or past the end.
    ///
    /// # Errors
    /// [`LogError::Closed`]; [`LogError::Corrupt`] when stored data does not
    /// parse or the log shrank below what this handle already saw.
    ///
    /// # Cancel safety
    /// Cancel-safe: reading changes nothing but the handle's high-water mark.
    pub async fn read(&self, offset: u64, len: Option<u64>) -> Result<Vec<Event>> {
        self.check_open()?;
        let events = self.io.read(offset, len).await?;
        let end = offset + events.len() as u64;
        let seen = self.seen();
        let short = len.is_none_or(|l| (events.len() as u64) < l);
        if short && end < seen && offset <= seen {
            return Err(LogError::Corrupt {
                id: self.id(),
                detail: format!("log ends at event {end} but this handle already saw {seen}"),
            });
        }
        if !events.is_empty() {
            self.seen.fetch_max(end, Ordering::AcqRel);
        }
        Ok(events)
    }

    /// The number of events stored completely.
    ///
    /// # Errors
    /// [`LogError::Closed`]; `Backend`.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn len(&self) -> Result<u64> {
        self.check_open()?;
        self.io.event_count().await
    }

    /// Whether the log holds no event.
    ///
    /// # Errors
    /// As [`LogHandle::len`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn is_empty(&self) -> Result<bool> {
        Ok(self.len().await? == 0)
    }

    /// Appends events at the end. An empty slice is a no-op.
    ///
    /// A transient failure is retried, up to [`APPEND_ATTEMPTS`] tries with
    /// a doubling pause from [`APPEND_BACKOFF`]; every try names the offset
    /// the events start at, so one whose acknowledgement was lost is not
    /// stored twice. Do not retry a failed append yourself: its events are
    /// counted as lost, and the next append that works — or at the latest
    /// [`close`](LogHandle::close) — first stores one note (beginning with
    /// [`DROPPED_PREFIX`]) saying how many events were lost and why.
    ///
    /// # Errors
    /// [`LogError::ReadOnly`] on a read handle; [`LogError::Closed`];
    /// [`LogError::Conflict`] when another writer appended; `Backend`.
    ///
    /// # Cancel safety
    /// Not cancel-safe: a dropped append may or may not have stored its events
    /// (never a part of one event: backends discard torn tails). Its events
    /// are not counted as lost, so no `dropped:` note is stored for them.
    pub async fn append(&self, events: &[Event]) -> Result<()> {
        self.check_writable()?;
        if events.is_empty() {
            return Ok(());
        }
        if self.append_now(events) {
            return Ok(());
        }
        let mut writing = self.writing.lock().await;
        let note = (writing.lost > 0).then(|| lost_note(writing.lost, &writing.reason));
        let batch: std::borrow::Cow<'_, [Event]> = match &note {
            Some(note) => std::iter::once(note.clone())
                .chain(events.iter().cloned())
                .collect::<Vec<_>>()
                .into(),
            None => events.into(),
        };
        match self.try_append(&mut writing, &batch).await {
            Ok(()) => {
                metrics::counter!(EVENTS_APPENDED).increment(batch.len() as u64);
                if note.is_some() {
                    writing.lost = 0;
                    writing.reason.clear();
                }
                Ok(())
            }
            Err(e) => {
                metrics::counter!(EVENTS_DROPPED).increment(events.len() as u64);
                writing.lost += events.len() as u64;
                writing.reason = error_chain(&e);
                Err(e)
            }
        }
    }

    /// The fast path of [`append`](Self::append), taken when nothing is
    /// in the way (no other append in progress, no lost events to note,
    /// the next offset known) and the backend can take the events without
    /// waiting ([`LogIo::append_now`]): no await, no copy of the events.
    /// `false` when the full path must run.
    fn append_now(&self, events: &[Event]) -> bool {
        if !self.fast {
            return false;
        }
        let Ok(mut writing) = self.writing.try_lock() else {
            return false;
        };
        let Some(at) = writing.next.filter(|_| writing.lost == 0) else {
            return false;
        };
        if !self.io.append_now(at, events, writing.epoch) {
            return false;
        }
        writing.next = Some(at + events.len() as u64);
        // Under the lock, as the full path does: the hook hears appends in
        // the order they were stored.
        self.told(events, Ok(()));
        drop(writing);
        metrics::counter!(EVENTS_APPENDED).increment(events.len() as u64);
        true
    }

    /// Appends `events` so the first is stored at offset `at`, in one try:
    /// when the log already holds them there (an earlier try committed),
    /// nothing is stored again. For wrappers that forward a handle's
    /// appends; [`LogHandle::append`] is what callers want.
    ///
    /// # Errors
    /// As [`LogHandle::append`]; [`LogError::Conflict`] when the log holds
    /// neither `at` nor `at + events.len()` events.
    ///
    /// # Cancel safety
    /// As [`LogHandle::append`].
    pub async fn append_at(&self, at: u64, events: &[Event]) -> Result<()> {
        self.check_writable()?;
        if events.is_empty() {
            return Ok(());
        }
        let mut writing = self.writing.lock().await;
        writing.next = None;
        let events = writing.stamped(events);
        let stored = self.io.append(at, &events).await;
        self.told(&events, stored.as_ref().map(|_| ()));
        stored?;
        writing.next = Some(at + events.len() as u64);
        Ok(())
    }

    /// Claims `epoch` for this writer — for a session, the fence of the run
    /// that writes: the log refuses it when a newer epoch claimed the log,
    /// then refuses this writer's appends once a newer one claims or fences
    /// it ([`LogError::Fenced`], for good; `JsonlLog` drops what it had
    /// buffered). Events appended afterwards record the epoch
    /// ([`Event::epoch`]). Claim once, right after opening, before appending.
    ///
    /// # Errors
    /// [`LogError::ReadOnly`] on a read handle; [`LogError::Closed`];
    /// `Fenced`; `NotFound`; `Backend`.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped after the backend recorded the claim, the log
    /// refuses older writers but this handle does not stamp its events with
    /// the epoch. Claim the same epoch again (it is accepted).
    pub async fn claim_epoch(&self, epoch: u64) -> Result<()> {
        self.check_writable()?;
        let mut writing = self.writing.lock().await;
        self.io.claim(epoch).await?;
        writing.epoch = Some(epoch);
        Ok(())
    }

    /// The epoch this writer claimed, if any.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits for the append lock, then reads.
    pub async fn epoch(&self) -> Option<u64> {
        self.writing.lock().await.epoch
    }

    /// Events of failed appends not yet noted in the log.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits for the append lock, then reads.
    pub async fn lost(&self) -> u64 {
        self.writing.lock().await.lost
    }

    /// One append, retried on transient failures at the same offset.
    async fn try_append(&self, writing: &mut Writing, batch: &[Event]) -> Result<()> {
        let stamped = writing.stamped(batch);
        let batch = &stamped[..];
        let mut pause = APPEND_BACKOFF;
        let mut attempt = 1;
        loop {
            let result = match writing.next {
                Some(at) => Ok(at),
                None => self.io.event_count().await,
            };
            let result = match result {
                Ok(at) => {
                    // Unknown while the try is in flight: a dropped future
                    // leaves the next append to ask the backend again.
                    writing.next = None;
                    self.io
                        .append(at, batch)
                        .await
                        .map(|()| at + batch.len() as u64)
                        .inspect_err(|e| {
                            if e.is_transient() {
                                // The same offset again: idempotent.
                                writing.next = Some(at);
                            }
                        })
                }
                Err(e) => Err(e),
            };
            match result {
                Ok(next) => {
                    writing.next = Some(next);
                    self.told(batch, Ok(()));
                    return Ok(());
                }
                Err(e) if e.is_transient() && attempt < APPEND_ATTEMPTS => {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                    attempt += 1;
                }
                Err(e) => {
                    // Whether it committed is unknown: ask before the next.
                    writing.next = None;
                    self.told(batch, Err(&e));
                    return Err(e);
                }
            }
        }
    }

    /// Durability barrier for everything appended so far.
    ///
    /// # Errors
    /// [`LogError::ReadOnly`] on a read handle; [`LogError::Closed`]; `Backend`.
    ///
    /// # Cancel safety
    /// Cancel-safe: call it again.
    pub async fn flush(&self) -> Result<()> {
        self.check_writable()?;
        self.io.flush().await
    }

    /// Closes the handle: stores the note about lost events if one is
    /// still owed, makes appends durable and releases the writer claim.
    /// Idempotent; later calls wait for the first to finish and return `Ok`.
    ///
    /// # Errors
    /// The first call reports the backend's close failure; the claim is
    /// released anyway.
    ///
    /// # Cancel safety
    /// The close runs on its own task: dropping this future does not stop it
    /// half-way. Dropped before that (while it waits for an append or stores
    /// the note about lost events), the handle stays open: call it again.
    pub async fn close(&self) -> Result<()> {
        if self.access == Access::Write && !self.closing.load(Ordering::Acquire) {
            let mut writing = self.writing.lock().await;
            if writing.lost > 0 {
                let note = lost_note(writing.lost, &writing.reason);
                if self.try_append(&mut writing, &[note]).await.is_ok() {
                    writing.lost = 0;
                }
            }
        }
        if self.closing.swap(true, Ordering::AcqRel) {
            self.closed.wait().await;
            return Ok(());
        }
        let io = Arc::clone(&self.io);
        let claim = self.claim.lock().unwrap_or_else(|p| p.into_inner()).take();
        let done = Arc::clone(&self.closed);
        let task = tokio::spawn(async move {
            // Opened however the task ends (a panic too): a later `close` waits.
            let _open = done.on_drop();
            let result = io.close().await;
            drop(claim);
            result
        });
        match task.await {
            Ok(result) => result,
            Err(join) => {
                // The close panicked: the claim was dropped during unwinding.
                self.closed.open();
                Err(LogError::backend("close", join))
            }
        }
    }
}

/// The note stored for `lost` events that could not be appended.
fn lost_note(lost: u64, reason: &str) -> Event {
    Event::korvus(EventKind::Note {
        text: format!(
            "{DROPPED_PREFIX}{lost} event(s) could not be stored in this log \
             (after {APPEND_ATTEMPTS} tries): {reason}"
        ),
    })
}
