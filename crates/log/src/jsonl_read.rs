//! The read side of a [`JsonlLog`](crate::JsonlLog) handle: its own file
//! description (its own offset) and the log's shared line index.

use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::sync::{Arc, Mutex};

use crate::jsonl_file::io_err;
use crate::jsonl_index::LineIndex;
use crate::{Event, LogError, LogId, Result};

/// The read side of one handle.
#[derive(Debug)]
pub(crate) struct IoState {
    pub(crate) file: File,
    /// The log's line index, shared with the service's other handles.
    pub(crate) index: Arc<Mutex<LineIndex>>,
    /// Set by `close`: every later call is `Closed`.
    pub(crate) closed: bool,
}

impl IoState {
    /// The number of complete events (counting lines appended since the
    /// index last looked, without parsing them).
    pub(crate) fn count(&mut self, id: LogId) -> Result<u64> {
        let mut index = self.index.lock().unwrap_or_else(|p| p.into_inner());
        index.extend(id, &self.file)?;
        Ok(index.count())
    }

    /// Reads events `offset..offset+len` (or to the end): seeks to the
    /// nearest indexed line, skips to `offset` without parsing, and parses
    /// only the lines returned.
    pub(crate) fn read(&mut self, id: LogId, offset: u64, len: Option<u64>) -> Result<Vec<Event>> {
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
