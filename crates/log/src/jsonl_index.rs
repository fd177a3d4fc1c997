//! The line index of a `JsonlLog` file: the byte offset of every
//! [`EVERY`]-th event line, shared by every handle of the log in one
//! service, so a reader that starts at event n (an SSE reconnect, an export
//! page) seeks near it instead of reading the file from the top, and a new
//! handle counts only the lines appended since any handle last looked.
//!
//! Counting does not parse: a complete line (one ending in `\n`) is an
//! event; a line is parsed when it is read, and a line that does not parse
//! is then reported as corrupt. A file shorter than the lines already
//! counted is corrupt too, never a shorter log.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};

use crate::jsonl_file::io_err;
use crate::{LogError, LogId, Result};

/// One mark per this many events.
pub(crate) const EVERY: u64 = 256;

/// Logs whose index a service keeps; past it the cache starts afresh (an
/// index is rebuilt by one pass over its file).
const CACHED_LOGS: usize = 4096;

/// What one log's lines are known to be.
#[derive(Debug)]
pub(crate) struct LineIndex {
    /// The file (device and inode) this index describes.
    file: (u64, u64),
    /// Byte offset of event `k * EVERY`, for each `k` reached.
    marks: Vec<u64>,
    /// Complete event lines counted.
    count: u64,
    /// Byte offset just past the last counted line.
    end: u64,
}

impl LineIndex {
    fn new(file: (u64, u64), first_event: u64) -> Self {
        Self {
            file,
            marks: vec![first_event],
            count: 0,
            end: first_event,
        }
    }

    /// The complete event lines of `f` (the file this index describes).
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// Counts the complete lines appended after the last counted one.
    ///
    /// # Errors
    /// `Corrupt` when the file is shorter than what was counted; `Backend`
    /// on I/O failure.
    pub(crate) fn extend(&mut self, id: LogId, f: &File) -> Result<()> {
        let len = f.metadata().map_err(|e| io_err(id, e))?.len();
        if len < self.end {
            return Err(LogError::Corrupt {
                id,
                detail: format!(
                    "the file shrank to {len} bytes below the {} events already read",
                    self.count
                ),
            });
        }
        if len == self.end {
            return Ok(());
        }
        let mut reader = BufReader::with_capacity(64 * 1024, f);
        reader
            .seek(SeekFrom::Start(self.end))
            .map_err(|e| io_err(id, e))?;
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .map_err(|e| io_err(id, e))?;
            if n == 0 || line.last() != Some(&b'\n') {
                // End of file, or a torn final line: not an event (yet).
                return Ok(());
            }
            if self.count.is_multiple_of(EVERY) && self.count / EVERY == self.marks.len() as u64 {
                self.marks.push(self.end);
            }
            self.count += 1;
            self.end += n as u64;
        }
    }

    /// Where to start reading for event `offset` (at most the count): the
    /// byte offset of the nearest mark at or before it, and how many lines
    /// to skip from there.
    pub(crate) fn seek_point(&self, offset: u64) -> (u64, u64) {
        let mark = (offset / EVERY).min(self.marks.len() as u64 - 1);
        (self.marks[mark as usize], offset - mark * EVERY)
    }
}

/// The indexes of one service's logs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Indexes(Arc<Mutex<HashMap<LogId, Arc<Mutex<LineIndex>>>>>);

impl Indexes {
    /// The index of log `id` whose file is `f` (events from byte
    /// `first_event`): the one another handle built, when it describes the
    /// same file, or a new one.
    pub(crate) fn of(
        &self,
        id: LogId,
        f: &File,
        first_event: u64,
    ) -> Result<Arc<Mutex<LineIndex>>> {
        let meta = f.metadata().map_err(|e| io_err(id, e))?;
        let file = (meta.dev(), meta.ino());
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(index) = map.get(&id) {
            // The same file, still at least as long as what was counted
            // (a file rewritten shorter in place starts a fresh index; one
            // rewritten in place at the same length or longer cannot be
            // told apart — logs are only ever appended to).
            let same = {
                let i = index.lock().unwrap_or_else(|p| p.into_inner());
                i.file == file && i.marks.first() == Some(&first_event) && meta.len() >= i.end
            };
            if same {
                return Ok(Arc::clone(index));
            }
        }
        if map.len() >= CACHED_LOGS {
            map.clear();
        }
        let index = Arc::new(Mutex::new(LineIndex::new(file, first_event)));
        map.insert(id, Arc::clone(&index));
        Ok(index)
    }
}
