//! [`JsonlLog`]: one JSON-lines file per log.
//!
//! The file is exactly the export format: a header line, then one compact JSON
//! event per line. A final line without its newline is a torn write: readers
//! ignore it, and the next writer cuts it off before appending, so the log
//! always continues on a clean line.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use crate::jsonl_buffer::{append_now, drain_shared, write_behind, Buffers, Shared, WriteSide};
use crate::jsonl_file::{
    blocking, claim_epoch_file, cut_torn_tail, delete_files, io_err, lock_writer, read_epoch_file,
    read_header, revision_of, serialise, BACKEND,
};
use crate::jsonl_index::{Indexes, LineIndex};
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
#[derive(Debug)]
pub struct JsonlLog {
    dir: PathBuf,
    writers: Writers,
    buffers: Buffers,
    indexes: Indexes,
}

impl JsonlLog {
    /// A service over `dir`, created if missing.
    ///
    /// # Errors
    /// `Backend` when the directory cannot be created.
    pub fn open_dir(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| LogError::backend(BACKEND, e))?;
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
    /// Where a writer records the newest epoch claimed (`<log>.epoch`,
    /// beside the log). Only the holder of the file lock writes it, so a
    /// claim needs no lock of its own, and appends need no check: no newer
    /// writer can claim while this one holds the lock.
    epoch_file: Option<PathBuf>,
}

#[derive(Debug)]
struct IoState {
    file: File,
    /// The log's line index, shared with the service's other handles.
    index: Arc<Mutex<LineIndex>>,
    closed: bool,
}

impl IoState {
    /// The number of complete events (counting lines appended since the
    /// index last looked, without parsing them).
    fn count(&mut self, id: LogId) -> Result<u64> {
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        index.extend(id, &self.file)?;
        Ok(index.count())
    }

    /// Reads events `offset..offset+len` (or to the end): seeks to the
    /// nearest indexed line, skips to `offset` without parsing, and parses
    /// only the lines returned.
    fn read(&mut self, id: LogId, offset: u64, len: Option<u64>) -> Result<Vec<Event>> {
        let (pos, skip, available) = {
            let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
            index.extend(id, &self.file)?;
            let count = index.count();
            if offset >= count {
                return Ok(Vec::new());
            }
            let (pos, skip) = index.seek_point(offset);
            (pos, skip, count - offset)
        };
        let want = len.map_or(available, |l| l.min(available));
        let mut reader = BufReader::with_capacity(64 * 1024, &self.file);
        reader
            .seek(SeekFrom::Start(pos))
            .map_err(|e| io_err(id, e))?;
        let mut at = offset - skip;
        let mut out = Vec::with_capacity(want.min(4096) as usize);
        let mut line = Vec::new();
        while (out.len() as u64) < want {
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .map_err(|e| io_err(id, e))?;
            if n == 0 || line.last() != Some(&b'\n') {
                return Err(LogError::Corrupt {
                    id,
                    detail: format!("the file ends before event {at}, which was counted"),
                });
            }
            if at >= offset {
                let event: Event =
                    serde_json::from_slice(&line).map_err(|e| LogError::Corrupt {
                        id,
                        detail: format!("event {at} does not parse: {e}"),
                    })?;
                out.push(event);
            }
            at += 1;
        }
        Ok(out)
    }
}

impl JsonlIo {
    fn new(
        id: LogId,
        read: File,
        write: Option<WriteSide>,
        index: Arc<Mutex<LineIndex>>,
        epoch_file: PathBuf,
        buffers: &Buffers,
    ) -> Self {
        let writer = write.map(|f| Arc::new(Mutex::new(Some(f))));
        if let Some(side) = &writer {
            buffers.register(id, side);
        }
        Self {
            epoch_file: writer.is_some().then_some(epoch_file),
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
        let writer = self.writer()?;
        let (id, path) = (self.id, self.epoch_file.clone());
        let Some(path) = path else {
            return Err(LogError::ReadOnly { id });
        };
        blocking(move || claim_epoch_file(id, &path, epoch)).await?;
        if let Some(side) = writer.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            side.epoch = epoch;
            side.newest = epoch;
        }
        Ok(())
    }

    async fn append(&self, at: u64, events: &[Event]) -> Result<()> {
        let buf = serialise(events)?;
        let known = match self
            .writer()?
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            Some(side) if side.epoch < side.newest => {
                return Err(LogError::Fenced {
                    id: self.id,
                    epoch: side.epoch,
                    newest: side.newest,
                })
            }
            Some(side) => {
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
        let path = self.path(id);
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
            // Make the new directory entry durable too.
            File::open(&dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| LogError::backend(BACKEND, e))?;
            // Reads get a file description of their own: appends move the
            // writer's offset, which must not move a reader's.
            let read = File::open(&path).map_err(|e| LogError::backend(BACKEND, e))?;
            let index = indexes.of(id, &read, line.len() as u64)?;
            Ok((read, file, index))
        })
        .await;
        let (read, write, index) = file?;
        Ok(LogHandle::writer(
            header,
            Arc::new(JsonlIo::new(
                id,
                read,
                Some(WriteSide::new(write, Some(0), 0)),
                index,
                self.epoch_path(id),
                &self.buffers,
            )),
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
                    let newest = read_epoch_file(id, &epoch_path)?;
                    Some(WriteSide::new(file, None, newest))
                }
                Access::Read => None,
            };
            let read = File::open(&path).map_err(|e| io_err(id, e))?;
            let (header, first_event) = read_header(id, &read)?;
            let index = indexes.of(id, &read, first_event)?;
            Ok((header, read, write, index))
        })
        .await?;
        let io = Arc::new(JsonlIo::new(
            id,
            read,
            write,
            index,
            self.epoch_path(id),
            &self.buffers,
        ));
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
