//! The logical log as JSON lines, the same bytes from every backend.

use crate::{LogError, LogHandle, Result};

/// Events read per round trip while exporting.
const CHUNK: u64 = 1024;

/// Serialises a log — its header line, then one compact JSON event per line —
/// reading through `handle` (a read handle is enough).
///
/// The output is byte-identical across backends for the same header and
/// events: it is produced here from parsed values, never copied from storage.
///
/// # Errors
/// Whatever [`LogHandle::read`] returns.
///
/// # Cancel safety
/// Cancel-safe: it only reads.
pub async fn export_jsonl(handle: &LogHandle) -> Result<Vec<u8>> {
    let mut out =
        serde_json::to_vec(handle.header()).map_err(|e| LogError::backend("export", e))?;
    out.push(b'\n');
    let mut offset = 0;
    loop {
        let events = handle.read(offset, Some(CHUNK)).await?;
        for e in &events {
            serde_json::to_writer(&mut out, e).map_err(|e| LogError::backend("export", e))?;
            out.push(b'\n');
        }
        offset += events.len() as u64;
        if (events.len() as u64) < CHUNK {
            return Ok(out);
        }
    }
}
