//! The logical log as JSON lines, the same bytes from every backend, read
//! and written a chunk at a time ([`JsonlExport`]) or whole
//! ([`export_jsonl`]).

use std::borrow::Borrow;

use crate::{LogError, LogHandle, Result};

/// Events in one chunk of an export, at most.
pub const EXPORT_CHUNK_EVENTS: u64 = 1024;

/// Bytes after which a chunk ends early (events can be large: a line of an
/// agent's output may be 256 KiB).
pub const EXPORT_CHUNK_BYTES: usize = 1024 * 1024;

/// Events read per round trip while filling a chunk.
const READ_EVENTS: u64 = 16;

/// An export in progress: the header line, then the events in chunks of at
/// most [`EXPORT_CHUNK_EVENTS`] (ending early past [`EXPORT_CHUNK_BYTES`]),
/// each event a compact JSON object on a line of its own. Memory is
/// bounded by one chunk (and the 16 events read at a time to fill it)
/// whatever the log's length, so a download or `korvus export` of any log
/// streams.
///
/// The output is byte-identical across backends for the same header and
/// events: it is produced here from parsed values, never copied from
/// storage.
#[derive(Debug)]
pub struct JsonlExport<H> {
    handle: H,
    offset: u64,
    header_done: bool,
    done: bool,
}

impl<H: Borrow<LogHandle>> JsonlExport<H> {
    /// An export of the log `handle` reads (a read handle is enough; it can
    /// be owned, borrowed or shared).
    pub fn new(handle: H) -> Self {
        Self {
            handle,
            offset: 0,
            header_done: false,
            done: false,
        }
    }

    /// The next chunk of the export: the header line first, then up to
    /// [`EXPORT_CHUNK_EVENTS`] event lines (fewer once the chunk passes
    /// [`EXPORT_CHUNK_BYTES`]); `None` once every event is out.
    ///
    /// # Errors
    /// Whatever [`LogHandle::read`] returns; the export cannot go on then.
    ///
    /// # Cancel safety
    /// Not cancel safe: it only reads the log, but a call dropped after its
    /// first read has moved the export past events it never returned. Start
    /// a new export after a dropped call.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        let handle = self.handle.borrow();
        if !self.header_done {
            let mut out =
                serde_json::to_vec(handle.header()).map_err(|e| LogError::backend("export", e))?;
            out.push(b'\n');
            self.header_done = true;
            return Ok(Some(out));
        }
        let mut out = Vec::new();
        let mut in_chunk = 0u64;
        while !self.done && in_chunk < EXPORT_CHUNK_EVENTS && out.len() < EXPORT_CHUNK_BYTES {
            let want = READ_EVENTS.min(EXPORT_CHUNK_EVENTS - in_chunk);
            let events = handle.read(self.offset, Some(want)).await?;
            if (events.len() as u64) < want {
                self.done = true;
            }
            for e in &events {
                serde_json::to_writer(&mut out, e).map_err(|e| LogError::backend("export", e))?;
                out.push(b'\n');
            }
            self.offset += events.len() as u64;
            in_chunk += events.len() as u64;
        }
        Ok((!out.is_empty()).then_some(out))
    }
}

/// Serialises a whole log into memory — its header line, then one compact
/// JSON event per line — reading through `handle`. For logs known to be
/// small; otherwise use [`JsonlExport`].
///
/// # Errors
/// Whatever [`LogHandle::read`] returns.
///
/// # Cancel safety
/// Cancel-safe: it only reads.
pub async fn export_jsonl(handle: &LogHandle) -> Result<Vec<u8>> {
    let mut export = JsonlExport::new(handle);
    let mut out = Vec::new();
    while let Some(chunk) = export.next_chunk().await? {
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}
