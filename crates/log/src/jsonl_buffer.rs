//! The write side of a [`JsonlLog`](crate::JsonlLog) handle: the file, and
//! the appends buffered in front of it.
//!
//! Appends are serialised into a buffer, not written one `write(2)` each.
//! The buffer goes to the file when it reaches [`BUFFER_BYTES`], at most
//! [`WRITE_BEHIND`] after its first append (a timer task, so a watcher in
//! another process never waits longer), on `flush` and `close`, before any
//! read through the same service, and when the handle is dropped. A
//! buffered write that fails later is reported by the next call on the
//! handle, which from then on refuses appends: the events it had
//! acknowledged are lost, as they would be in a crash before `flush`.
//!
//! Every write to the file is made under the log's epoch lock
//! (`jsonl_epoch.rs`) and only while no newer writer claimed or fenced
//! the log. A write-out that finds the writer fenced off stores nothing:
//! the events it buffered are discarded, and it and every later call
//! report [`LogError::Fenced`]. One that cannot take the lock in time
//! keeps its buffer for the next try and reports a transient error.

use std::collections::HashMap;
use std::fs::File;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::jsonl_epoch::EpochFile;
use crate::jsonl_file::{serialise_into, write_counted, BACKEND};
use crate::{Event, LogError, LogId, Result};

/// The buffer goes to the file once it holds this many bytes: 64 KiB.
pub(crate) const BUFFER_BYTES: usize = 64 * 1024;

/// The longest an appended event waits in the buffer: 20 ms.
pub(crate) const WRITE_BEHIND: Duration = Duration::from_millis(20);

/// A write side, shared by its handle, its timer and the service's readers.
pub(crate) type Shared = Arc<Mutex<Option<WriteSide>>>;

/// The write sides of the open write handles of one service, so a read of
/// any handle of that service first writes out the writer's buffer.
#[derive(Debug, Default, Clone)]
pub(crate) struct Buffers(Arc<Mutex<HashMap<LogId, WeakShared>>>);

/// A [`Shared`] write side that does not keep its handle alive.
type WeakShared = Weak<Mutex<Option<WriteSide>>>;

impl Buffers {
    /// Registers the write side of `id`'s write handle.
    pub(crate) fn register(&self, id: LogId, side: &Shared) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, w| w.strong_count() > 0);
        map.insert(id, Arc::downgrade(side));
    }

    /// The write side of `id`'s writer in this service, if any.
    pub(crate) fn get(&self, id: LogId) -> Option<Shared> {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&id).and_then(Weak::upgrade)
    }

    /// Writes out the buffer of `id`'s writer in this service, if any.
    pub(crate) fn drain(&self, id: LogId) -> Result<()> {
        match self.get(id) {
            Some(side) => drain_shared(id, &side),
            None => Ok(()),
        }
    }
}

/// The write side's file, the appends not yet in it, and how many events
/// the log holds when known.
#[derive(Debug)]
pub(crate) struct WriteSide {
    pub(crate) file: File,
    /// The log's epoch file, whose lock every write of `file` holds.
    sidecar: EpochFile,
    /// Complete events in the log (in the file and buffered); `None`
    /// until counted (a writer opened on an existing log counts them
    /// before its first append).
    pub(crate) count: Option<u64>,
    /// This writer's epoch (0 until it claims one) and the newest the log
    /// had seen when this writer last looked (opening, claiming, writing
    /// out, or a fence of this service): appends are refused while the
    /// first is older.
    pub(crate) epoch: u64,
    pub(crate) newest: u64,
    /// Whole event lines appended but not yet written.
    pending: Vec<u8>,
    /// Why a buffered write failed, reported by every later call.
    failed: Option<String>,
}

impl WriteSide {
    /// A write side on `file` holding `count` events, whose epoch file
    /// held `newest`.
    pub(crate) fn new(file: File, sidecar: EpochFile, count: Option<u64>, newest: u64) -> Self {
        Self {
            file,
            sidecar,
            count,
            epoch: 0,
            newest,
            pending: Vec::new(),
            failed: None,
        }
    }

    /// The error of an earlier buffered write, if one failed.
    pub(crate) fn check(&self, id: LogId) -> Result<()> {
        match &self.failed {
            Some(cause) => Err(LogError::backend(
                BACKEND,
                std::io::Error::other(format!(
                    "log {id}: a buffered append could not be written ({cause}); \
                     its events are lost, reopen the log to go on"
                )),
            )),
            None => Ok(()),
        }
    }

    /// `Fenced` when this writer is older than the newest epoch it knows of.
    pub(crate) fn check_epoch(&self, id: LogId) -> Result<()> {
        if self.epoch < self.newest {
            return Err(LogError::Fenced {
                id,
                epoch: self.epoch,
                newest: self.newest,
            });
        }
        Ok(())
    }

    /// Claims `epoch` for this writer under the log's epoch lock (see
    /// [`LogIo::claim`](crate::LogIo::claim)).
    pub(crate) fn claim(&mut self, id: LogId, epoch: u64) -> Result<()> {
        let claimed = self.sidecar.lock(id)?.claim(epoch);
        match claimed {
            Ok(()) => {
                self.epoch = epoch;
                self.newest = epoch;
                Ok(())
            }
            Err(LogError::Fenced { newest, .. }) => {
                self.newest = self.newest.max(newest);
                claimed
            }
            Err(e) => Err(e),
        }
    }

    /// Appends whole event lines holding `n` events; the log then holds
    /// `at + n`. Small appends are buffered; when the buffer would reach
    /// [`BUFFER_BYTES`] it is written out first, and an append that is that
    /// large on its own is written straight through, so its failure (a
    /// full disk, a file size limit) is its own: the log is cut back to its
    /// last complete line and the next append goes on. Returns whether the
    /// buffer was empty before (so the caller starts the write-behind
    /// timer).
    pub(crate) fn push(&mut self, id: LogId, lines: &[u8], at: u64, n: u64) -> Result<bool> {
        self.check(id)?;
        if self.pending.len() + lines.len() >= BUFFER_BYTES {
            self.write_pending(id)?;
            if lines.len() >= BUFFER_BYTES {
                let (sidecar, epoch) = (&self.sidecar, self.epoch);
                let written = write_fenced(id, sidecar, epoch, &mut self.newest, || {
                    write_lines(&mut self.file, lines)
                })?;
                if let Some(cause) = written {
                    return Err(LogError::backend(BACKEND, std::io::Error::other(cause)));
                }
                self.count = Some(at + n);
                return Ok(false);
            }
        }
        let was_empty = self.pending.is_empty();
        self.pending.extend_from_slice(lines);
        self.count = Some(at + n);
        Ok(was_empty)
    }

    /// The fast path of an append: serialises `events` (stamped with
    /// `epoch` when given) straight into the buffer, when this side can
    /// take them at `at` now. `Some(start_timer)` once they are appended
    /// (as [`push`](Self::push)); `None` with nothing stored when the
    /// caller must take the full path (a fenced or failed side, an offset
    /// that is not the end, an event that does not serialise, or a buffer
    /// that would reach [`BUFFER_BYTES`]: this path never writes).
    pub(crate) fn push_events(
        &mut self,
        events: &[Event],
        epoch: Option<u64>,
        at: u64,
    ) -> Option<bool> {
        if self.failed.is_some() || self.epoch < self.newest || self.count != Some(at) {
            return None;
        }
        let start = self.pending.len();
        if serialise_into(&mut self.pending, events, epoch).is_err() {
            self.pending.truncate(start);
            return None;
        }
        if self.pending.len() >= BUFFER_BYTES {
            // The buffer is full: the full path writes it out (and a large
            // append straight through), and reports a failure as its own.
            self.pending.truncate(start);
            return None;
        }
        self.count = Some(at + events.len() as u64);
        Some(start == 0)
    }

    /// Writes the buffer to the file in one call. A write that fails
    /// half-way keeps the complete lines it wrote; the other buffered
    /// events are lost (their appends were acknowledged), so the side
    /// refuses further appends and the handle must be reopened.
    pub(crate) fn write_pending(&mut self, id: LogId) -> Result<()> {
        self.check(id)?;
        if self.pending.is_empty() {
            return Ok(());
        }
        let (sidecar, epoch) = (&self.sidecar, self.epoch);
        let (file, pending) = (&mut self.file, &self.pending);
        match write_fenced(id, sidecar, epoch, &mut self.newest, || {
            write_lines(file, pending)
        }) {
            Ok(failed) => {
                self.pending.clear();
                if let Some(cause) = failed {
                    self.count = None;
                    self.failed = Some(cause);
                }
                self.check(id)
            }
            Err(e @ LogError::Fenced { .. }) => {
                // Superseded: what this writer buffered is never stored.
                self.pending.clear();
                self.count = None;
                Err(e)
            }
            // The lock not taken in time, or the epoch not read: nothing
            // was written, the buffer waits for the next write-out.
            Err(e) => Err(e),
        }
    }
}

/// Runs `write` (a write to the log file) under the log's epoch lock, when
/// the log has seen no epoch newer than `epoch`, this writer's; `newest`
/// learns what the epoch file holds. `Fenced` having written nothing when
/// a newer writer claimed or fenced the log.
fn write_fenced<T>(
    id: LogId,
    sidecar: &EpochFile,
    epoch: u64,
    newest: &mut u64,
    write: impl FnOnce() -> T,
) -> Result<T> {
    let lock = sidecar.lock(id)?;
    let found = lock.newest()?;
    *newest = (*newest).max(found);
    if found > epoch {
        return Err(LogError::Fenced {
            id,
            epoch,
            newest: found,
        });
    }
    let written = write();
    drop(lock);
    Ok(written)
}

/// Writes whole lines to the end of `file` (opened in append mode) in one
/// call, so a reader sees whole lines or a torn tail it skips. A write that
/// fails half-way is cut back to the last complete line it wrote, so the
/// log stays readable and the next write starts on a clean line. Returns
/// the cause of a failure.
fn write_lines(file: &mut File, lines: &[u8]) -> Option<String> {
    let (written, failed) = write_counted(file, lines);
    let e = failed?;
    // Only this writer appends, so the file grew by `written`, and the
    // bytes after the last newline among them are a torn line.
    let whole = lines[..written]
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let torn = (written - whole) as u64;
    if torn > 0 {
        let cut = file
            .metadata()
            .and_then(|m| file.set_len(m.len().saturating_sub(torn)));
        if let Err(cut) = cut {
            return Some(format!(
                "{e}; and the partial line could not be cut off: {cut}"
            ));
        }
    }
    Some(e.to_string())
}

/// Writes out the buffer of a shared write side (closed: nothing to do).
pub(crate) fn drain_shared(id: LogId, side: &Shared) -> Result<()> {
    let mut guard = side.lock().unwrap_or_else(|p| p.into_inner());
    match guard.as_mut() {
        Some(side) => side.write_pending(id),
        None => Ok(()),
    }
}

/// Writes out `side`'s buffer [`WRITE_BEHIND`] from now, unless the side
/// is gone by then. A failure is kept on the side for the next call.
pub(crate) fn write_behind(id: LogId, side: &Shared) {
    let weak = Arc::downgrade(side);
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        // No runtime to time it: write now.
        let _ = drain_shared(id, side);
        return;
    };
    runtime.spawn(async move {
        loop {
            tokio::time::sleep(WRITE_BEHIND).await;
            let Some(side) = weak.upgrade() else {
                return;
            };
            match drain_shared(id, &side) {
                // The epoch lock was not free in time: the buffer is kept,
                // and tried again one window later.
                Err(e) if e.is_transient() => {}
                _ => return,
            }
        }
    });
}

/// The fast path of an append on a shared write side
/// ([`WriteSide::push_events`]), starting the write-behind timer when the
/// buffer was empty: `false` when the full path must run.
pub(crate) fn append_now(
    id: LogId,
    side: &Shared,
    events: &[Event],
    epoch: Option<u64>,
    at: u64,
) -> bool {
    let pushed = side
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_mut()
        .and_then(|s| s.push_events(events, epoch, at));
    match pushed {
        Some(start_timer) => {
            if start_timer {
                write_behind(id, side);
            }
            true
        }
        None => false,
    }
}
