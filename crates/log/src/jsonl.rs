//! [`JsonlLog`]: one JSON-lines file per log.
//!
//! The file is exactly the export format: a header line, then one compact JSON
//! event per line. A final line without its newline is a torn write: readers
//! ignore it, and the next writer cuts it off before appending, so the log
//! always continues on a clean line.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use crate::jsonl_buffer::{append_now, drain_shared, write_behind, Buffers, Shared, WriteSide};
use crate::jsonl_epoch::EpochFile;
use crate::jsonl_file::{
    blocking, cut_torn_tail, delete_files, io_err, lock_writer, read_header, revision_of,
    serialise, BACKEND,
};
use crate::jsonl_index::{Indexes, LineIndex};
use crate::jsonl_read::IoState;
use crate::{
    Access, Event, FlushError, LogError, LogHandle, LogHeader, LogId, LogIo, LogStat, Result,
    TurnLog, Writers,
};

const EXTENSION: &str = "jsonl";

/// A [`TurnLog`] storing each log as `<dir>/<id>.jsonl`.
///
/// `append` buffers its events in the write handle; the buffer goes to the
/// file at 64 KiB, at most 20 ms after its first event (so a watcher in
/// another process sees it soon), on `flush` and `close`, before any read
/// through this service (so a later read sees the appended prefix), and
/// when the handle is dropped. `flush` and `close` then `fsync`. A buffered
/// write that fails is reported by the handle's next call, after which it
/// refuses appends. `stat` reads only the header line and the file's
/// metadata: the revision is the file's length and modification time, and
/// `event_count` is not known.
///
/// A writer holds an advisory `flock` on its file for the life of its
/// handle (a second writer, in any process, gets `AlreadyOwned`). Epochs
/// live in `<dir>/<id>.jsonl.epoch`; every write of a writer's buffer to
/// the file, every claim and every [`fence`](TurnLog::fence) take a short
/// lock on that file, so a fence reaches a writer in another process —
/// a paused one too — and none of its writes lands after the fence. Events
/// a fenced writer had buffered but not written yet are discarded (its
/// next call says `Fenced`); a fence made through the service that holds
/// the writer first writes them out. A wait for that lock is bounded (1 s;
/// a transient error then), so a process paused in the middle of a write
/// cannot hang a fence.
#[derive(Debug)]
pub struct JsonlLog {
    dir: PathBuf,
    writers: Writers,
    buffers: Buffers,
    indexes: Indexes,
}

impl JsonlLog {
    /// A service over `dir`, created if missing (0700, whatever the
    /// umask: no other local user reads a log; an existing directory keeps
    /// its mode).
    ///
    /// # Errors
    /// `Backend` when the directory cannot be created.
    pub fn open_dir(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        if !dir.exists() {
            std::os::unix::fs::DirBuilderExt::mode(
                std::fs::DirBuilder::new().recursive(true),
                0o700,
            )
            .create(&dir)
            .map_err(|e| LogError::backend(BACKEND, e))?;
        }
        Ok(Self {
            dir,
            writers: Writers::new(),
            buffers: Buffers::default(),
            indexes: Indexes::default(),
        })
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, id: LogId) -> PathBuf {
        self.dir.join(format!("{id}.{EXTENSION}"))
    }

    /// Where the newest writer epoch of log `id` is recorded.
    fn epoch_path(&self, id: LogId) -> PathBuf {
        self.dir.join(format!("{id}.{EXTENSION}.epoch"))
    }
}

#[derive(Debug)]
struct JsonlIo {
    id: LogId,
    /// Read side: its own file description (its own offset), indexed lines.
    state: Arc<Mutex<IoState>>,
    /// Write side of a write handle: the file in append mode and the
    /// appends buffered in front of it (`jsonl_buffer.rs`). Buffers are
    /// written inline — one `write` of whole lines, no thread hand-off —
    /// because a page-cache write is cheaper than waking a blocking thread;
    /// `fsync` goes to a blocking thread.
    writer: Option<Shared>,
    /// The service's write sides, drained before every read.
    buffers: Buffers,
}

impl JsonlIo {
    fn new(
        id: LogId,
        read: File,
        write: Option<WriteSide>,
        index: Arc<Mutex<LineIndex>>,
        buffers: &Buffers,
    ) -> Self {
        let writer = write.map(|f| Arc::new(Mutex::new(Some(f))));
        if let Some(side) = &writer {
            buffers.register(id, side);
        }
        Self {
            id,
            state: Arc::new(Mutex::new(IoState {
                file: read,
                index,
                closed: false,
            })),
            writer,
            buffers: buffers.clone(),
        }
    }

    fn writer(&self) -> Result<&Shared> {
        self.writer
            .as_ref()
            .ok_or(LogError::ReadOnly { id: self.id })
    }

    /// Runs `f` on the write side's file on a blocking thread (for `fsync`).
    async fn with_writer(
        &self,
        close: bool,
        f: impl FnOnce(&File) -> std::io::Result<()> + Send + 'static,
    ) -> Result<()> {
        let writer = Arc::clone(self.writer()?);
        let id = self.id;
        blocking(move || {
            let mut guard = writer.lock().unwrap_or_else(|p| p.into_inner());
            let Some(side) = guard.as_mut() else {
                return if close {
                    Ok(())
                } else {
                    Err(LogError::Closed { id })
                };
            };
            let result = side
                .write_pending(id)
                .and_then(|()| f(&side.file).map_err(|e| LogError::backend(BACKEND, e)));
            if close {
                *guard = None;
            }
            result
        })
        .await
    }

    async fn with_state<T: Send + 'static>(
        &self,
        f: impl FnOnce(LogId, &mut IoState) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let state = Arc::clone(&self.state);
        let (id, buffers) = (self.id, self.buffers.clone());
        blocking(move || {
            // A read sees every append made through this service.
            buffers.drain(id)?;
            let mut guard: MutexGuard<'_, IoState> =
                state.lock().unwrap_or_else(|p| p.into_inner());
            if guard.closed {
                return Err(LogError::Closed { id });
            }
            f(id, &mut guard)
        })
        .await
    }
}

impl Drop for JsonlIo {
    /// A handle dropped without `close` still writes out what it buffered
    /// (not `fsync`ed: that only `flush` and `close` promise).
    fn drop(&mut self) {
        if let Some(side) = &self.writer {
            let _ = drain_shared(self.id, side);
        }
    }
}

#[async_trait]
impl LogIo for JsonlIo {
    async fn read(&self, offset: u64, len: Option<u64>) -> Result<Vec<Event>> {
        self.with_state(move |id, s| s.read(id, offset, len)).await
    }

    async fn event_count(&self) -> Result<u64> {
        self.with_state(|id, s| s.count(id)).await
    }

    async fn claim(&self, epoch: u64) -> Result<()> {
        let writer = Arc::clone(self.writer()?);
        let id = self.id;
        blocking(
            move || match writer.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                Some(side) => side.claim(id, epoch),
                None => Err(LogError::Closed { id }),
            },
        )
        .await
    }

    async fn append(&self, at: u64, events: &[Event]) -> Result<()> {
        let buf = serialise(events)?;
        let known = match self
            .writer()?
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            Some(side) => {
                side.check_epoch(self.id)?;
                side.check(self.id)?;
                side.count
            }
            None => return Err(LogError::Closed { id: self.id }),
        };
        let found = match known {
            Some(count) => count,
            None => self.event_count().await?,
        };
        let n = events.len() as u64;
        if found != at {
            // Done already only when an earlier try of this very append
            // stored these events at `at`.
            if found == at + n {
                let stored = self
                    .with_state(move |id, s| s.read(id, at, Some(n)))
                    .await?;
                if stored == events {
                    return Ok(());
                }
            }
            return Err(LogError::Conflict {
                id: self.id,
                expected: at,
                found,
            });
        }
        let writer = self.writer()?;
        let start_timer = {
            let mut guard = writer.lock().unwrap_or_else(|p| p.into_inner());
            let Some(side) = guard.as_mut() else {
                return Err(LogError::Closed { id: self.id });
            };
            side.push(self.id, &buf, at, n)?
        };
        if start_timer {
            write_behind(self.id, writer);
        }
        Ok(())
    }

    fn append_now(&self, at: u64, events: &[Event], epoch: Option<u64>) -> bool {
        self.writer
            .as_ref()
            .is_some_and(|w| append_now(self.id, w, events, epoch, at))
    }

    async fn flush(&self) -> Result<()> {
        self.with_writer(false, File::sync_data).await
    }

    async fn close(&self) -> Result<()> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).closed = true;
        match &self.writer {
            Some(_) => self.with_writer(true, File::sync_data).await,
            None => Ok(()),
        }
    }
}

#[async_trait]
impl TurnLog for JsonlLog {
    async fn create(&self, header: LogHeader) -> Result<LogHandle> {
        let id = header.id;
        let (path, epoch_path) = (self.path(id), self.epoch_path(id));
        let dir = self.dir.clone();
        let mut line = serde_json::to_vec(&header).map_err(|e| LogError::backend(BACKEND, e))?;
        line.push(b'\n');
        let claim = self.writers.claim(id)?;
        let indexes = self.indexes.clone();
        let file = blocking(move || {
            let mut file = OpenOptions::new()
                .append(true)
                .read(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| match e.kind() {
                    io::ErrorKind::AlreadyExists => LogError::AlreadyExists { id },
                    _ => LogError::backend(BACKEND, e),
                })?;
            lock_writer(id, &file)?;
            file.write_all(&line)
                .and_then(|()| file.sync_data())
                .map_err(|e| LogError::backend(BACKEND, e))?;
            let sidecar = EpochFile::open(id, &epoch_path)?;
            // Make the new directory entries durable too.
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| LogError::backend(BACKEND, e))?;
            sidecar.entry_synced();
            let newest = sidecar.lock(id)?.newest()?;
            // Reads get a file description of their own: appends move the
            // writer's offset, which must not move a reader's.
            let read = File::open(&path).map_err(|e| LogError::backend(BACKEND, e))?;
            let index = indexes.of(id, &read, line.len() as u64)?;
            Ok((read, WriteSide::new(file, sidecar, Some(0), newest), index))
        })
        .await;
        let (read, write, index) = file?;
        Ok(LogHandle::writer(
            header,
            Arc::new(JsonlIo::new(id, read, Some(write), index, &self.buffers)),
            claim,
        )
        .with_fast_appends())
    }

    async fn open(&self, id: LogId, access: Access) -> Result<LogHandle> {
        let path = self.path(id);
        let epoch_path = self.epoch_path(id);
        // Claim first so a second writer is refused before touching the file.
        let claim = match access {
            Access::Write => Some(self.writers.claim(id)?),
            Access::Read => None,
        };
        let indexes = self.indexes.clone();
        let (header, read, write, index) = blocking(move || {
            let write = match access {
                Access::Write => {
                    let mut file = OpenOptions::new()
                        .read(true)
                        .append(true)
                        .open(&path)
                        .map_err(|e| io_err(id, e))?;
                    // Before touching the file: another writer may be on it.
                    lock_writer(id, &file)?;
                    cut_torn_tail(id, &mut file)?;
                    // The epoch file every write of this writer locks.
                    let sidecar = EpochFile::open(id, &epoch_path)?;
                    let newest = sidecar.lock(id)?.newest()?;
                    Some(WriteSide::new(file, sidecar, None, newest))
                }
                Access::Read => None,
            };
            let read = File::open(&path).map_err(|e| io_err(id, e))?;
            let (header, first_event) = read_header(id, &read)?;
            let index = indexes.of(id, &read, first_event)?;
            Ok((header, read, write, index))
        })
        .await?;
        let io = Arc::new(JsonlIo::new(id, read, write, index, &self.buffers));
        Ok(match claim {
            Some(claim) => LogHandle::writer(header, io, claim).with_fast_appends(),
            None => LogHandle::reader(header, io),
        })
    }

    async fn stat(&self, id: LogId) -> Result<LogStat> {
        let path = self.path(id);
        let buffers = self.buffers.clone();
        blocking(move || {
            // What this service appended counts.
            buffers.drain(id)?;
            let file = File::open(&path).map_err(|e| io_err(id, e))?;
            let meta = file.metadata().map_err(|e| io_err(id, e))?;
            let (header, _) = read_header(id, &file)?;
            Ok(LogStat {
                header,
                revision: revision_of(&meta),
                event_count: None,
                size_bytes: Some(meta.len()),
            })
        })
        .await
    }

    async fn delete(&self, id: LogId) -> Result<()> {
        // In this service, then (the file lock) in any other.
        let _claim = self.writers.claim(id)?;
        let (path, epoch_path, dir) = (self.path(id), self.epoch_path(id), self.dir.clone());
        blocking(move || delete_files(id, &path, &epoch_path, &dir)).await
    }

    async fn fence(&self, id: LogId, epoch: u64) -> Result<()> {
        let (path, epoch_path) = (self.path(id), self.epoch_path(id));
        let side = self.buffers.get(id);
        blocking(move || {
            // This service's writer of the log, if any, appends nothing
            // meanwhile, and what it buffered goes to the file first (or
            // is refused, if it is older than the log's newest already).
            let mut guard = side
                .as_ref()
                .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()));
            if let Some(side) = guard.as_mut().and_then(|g| g.as_mut()) {
                // Its failure is the writer's, reported by its next call.
                let _ = side.write_pending(id);
                crate::jsonl_epoch::fence(id, &path, &epoch_path, epoch)?;
                side.newest = side.newest.max(epoch);
                return Ok(());
            }
            crate::jsonl_epoch::fence(id, &path, &epoch_path, epoch)
        })
        .await
    }

    async fn list(&self) -> Result<Vec<LogId>> {
        let dir = self.dir.clone();
        blocking(move || {
            let mut ids = Vec::new();
            for entry in std::fs::read_dir(&dir).map_err(|e| LogError::backend(BACKEND, e))? {
                let entry = entry.map_err(|e| LogError::backend(BACKEND, e))?;
                let name = entry.file_name();
                let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".jsonl")) else {
                    continue;
                };
                if let Ok(id) = stem.parse::<LogId>() {
                    ids.push(id);
                }
            }
            ids.sort();
            Ok(ids)
        })
        .await
    }

    async fn flush(&self) -> std::result::Result<(), FlushError> {
        self.writers.flush_all().await
    }
}
