//! The epoch file of a [`JsonlLog`](crate::JsonlLog) log, and the short
//! lock on it that orders every write of the log against fences.
//!
//! `<log>.epoch`, beside the log, holds the newest writer epoch the log
//! has seen (absent or empty: 0). An `flock` on it is the log's **epoch
//! lock**, held for moments only:
//!
//! - every write of event lines to the log (a write-out of a writer's
//!   buffer) takes it, reads the newest epoch, writes only when its
//!   writer is not older, and releases it;
//! - a writer's claim ([`LogHandle::claim_epoch`](crate::LogHandle::claim_epoch))
//!   and a fence ([`TurnLog::fence`](crate::TurnLog::fence)) take it, read
//!   the newest epoch, write the new one durably and release it.
//!
//! So a fence and a write are ordered, whichever process holds the log
//! open: a write that took the lock first is in the file before the fence
//! returns, and a write after it finds the newer epoch and stores nothing.
//! The writer's own `flock`, held for the life of its handle, is on the
//! log file: the two locks never block each other.
//!
//! The epoch is read at every write — one `pread` of 21 bytes — and not
//! only when the file's metadata changed: modification times are as
//! coarse as the kernel's clock tick, so two records written in one tick
//! would look alike. It is written in place (twenty digits and a newline
//! at offset 0, within one sector, never truncated), then `fdatasync`ed:
//! renaming a new file over it would leave the lockers of the old one
//! behind. A wait for the lock is bounded ([`LOCK_WAIT`]): a process
//! paused while holding it (stopped in the middle of a write) makes the
//! waiter fail with a transient error instead of hanging.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::{flock, FlockOperation};

use crate::jsonl_file::{io_err, BACKEND};
use crate::{LogError, LogId, Result};

/// The longest a write, a claim or a fence waits for a log's epoch lock
/// before failing with a transient error: 1 s. The lock is held for a
/// write of at most 64 KiB or an `fdatasync` of 21 bytes, so only a
/// holder that was paused keeps it that long.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(1);

/// The length of a record: the epoch as 20 digits (any `u64`), a newline.
const RECORD: usize = 21;

/// An open epoch file (created when missing).
#[derive(Debug)]
pub(crate) struct EpochFile {
    file: File,
    path: PathBuf,
    /// This open created the file and its directory entry may not be
    /// durable yet: the first record makes it so.
    unsynced: AtomicBool,
}

/// The epoch lock of a log, held until dropped.
#[derive(Debug)]
pub(crate) struct EpochLock<'a> {
    epoch: &'a EpochFile,
    id: LogId,
}

impl EpochFile {
    /// Opens the epoch file of log `id` at `path`, creating it (empty,
    /// epoch 0) when missing.
    pub(crate) fn open(id: LogId, path: &Path) -> Result<Self> {
        let mut options = OpenOptions::new();
        options.read(true).write(true);
        let (file, created) = match options.clone().create_new(true).open(path) {
            Ok(file) => (file, true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                (options.open(path).map_err(|e| io_err(id, e))?, false)
            }
            Err(e) => return Err(io_err(id, e)),
        };
        Ok(Self {
            file,
            path: path.to_owned(),
            unsynced: AtomicBool::new(created),
        })
    }

    /// Says the directory entry was made durable by the caller.
    pub(crate) fn entry_synced(&self) {
        self.unsynced.store(false, Ordering::Release);
    }

    /// Takes the epoch lock, waiting at most [`LOCK_WAIT`].
    ///
    /// # Errors
    /// A transient `Backend` error when the lock stayed held that long.
    pub(crate) fn lock(&self, id: LogId) -> Result<EpochLock<'_>> {
        let deadline = Instant::now() + LOCK_WAIT;
        let mut pause = Duration::from_micros(50);
        loop {
            match flock(&self.file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(EpochLock { epoch: self, id }),
                Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {}
                Err(e) => return Err(LogError::backend(BACKEND, io::Error::from(e))),
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(LogError::transient(
                    BACKEND,
                    io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "log {id}: its epoch lock ({}) stayed held for {LOCK_WAIT:?} \
                             (by a process paused in the middle of a write?)",
                            self.path.display()
                        ),
                    ),
                ));
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    /// Removes the file at this epoch file's path if it is still this
    /// very file (a fence that created it for a log deleted meanwhile).
    fn remove_if_current(&self) {
        let (Ok(mine), Ok(there)) = (self.file.metadata(), std::fs::metadata(&self.path)) else {
            return;
        };
        if (mine.dev(), mine.ino()) == (there.dev(), there.ino()) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl EpochLock<'_> {
    /// The newest epoch the log has seen.
    ///
    /// # Errors
    /// `Corrupt` when the file holds anything but a number; `Backend`.
    pub(crate) fn newest(&self) -> Result<u64> {
        let id = self.id;
        let mut buf = [0u8; RECORD + 1];
        let mut n = 0;
        while n < buf.len() {
            match self.epoch.file.read_at(&mut buf[n..], n as u64) {
                Ok(0) => break,
                Ok(read) => n += read,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(id, e)),
            }
        }
        let text = std::str::from_utf8(&buf[..n]).unwrap_or("?").trim();
        if text.is_empty() {
            return Ok(0);
        }
        match text.parse::<u64>() {
            Ok(epoch) if n <= RECORD => Ok(epoch),
            _ => Err(LogError::Corrupt {
                id,
                detail: format!(
                    "epoch file {} holds {:?}",
                    self.epoch.path.display(),
                    String::from_utf8_lossy(&buf[..n])
                ),
            }),
        }
    }

    /// Records `epoch` as the newest, durably.
    ///
    /// # Errors
    /// `Backend` when it could not be written or made durable.
    pub(crate) fn record(&self, epoch: u64) -> Result<()> {
        let file = &self.epoch.file;
        file.write_all_at(format!("{epoch:020}\n").as_bytes(), 0)
            .and_then(|()| file.sync_data())
            .map_err(|e| LogError::backend(BACKEND, e))?;
        if self.epoch.unsynced.swap(false, Ordering::AcqRel) {
            if let Some(dir) = self.epoch.path.parent() {
                File::open(dir)
                    .and_then(|d| d.sync_all())
                    .map_err(|e| LogError::backend(BACKEND, e))?;
            }
        }
        Ok(())
    }

    /// Claims `epoch`: `Fenced` (with the newest) when the log has seen a
    /// newer one, else records it when it is newer than the newest.
    pub(crate) fn claim(&self, epoch: u64) -> Result<()> {
        let newest = self.newest()?;
        if newest > epoch {
            return Err(LogError::Fenced {
                id: self.id,
                epoch,
                newest,
            });
        }
        if newest < epoch {
            self.record(epoch)?;
        }
        Ok(())
    }
}

impl Drop for EpochLock<'_> {
    fn drop(&mut self) {
        // Closing the file would release it too; a handle's file stays open.
        let _ = flock(&self.epoch.file, FlockOperation::Unlock);
    }
}

/// Fences log `id` — its file at `log`, its epoch file at `path` — at
/// `epoch` ([`TurnLog::fence`](crate::TurnLog::fence)): under the epoch
/// lock, `Fenced` when the log has seen a newer epoch, else `epoch` is
/// recorded (unless it is the newest already).
pub(crate) fn fence(id: LogId, log: &Path, path: &Path, epoch: u64) -> Result<()> {
    // No epoch file is made for a log that does not exist.
    std::fs::metadata(log).map_err(|e| io_err(id, e))?;
    let file = EpochFile::open(id, path)?;
    let lock = file.lock(id)?;
    if let Err(e) = std::fs::metadata(log) {
        // Deleted between the two looks: leave no epoch file behind.
        if e.kind() == io::ErrorKind::NotFound {
            file.remove_if_current();
        }
        return Err(io_err(id, e));
    }
    lock.claim(epoch)
}
