//! The file side of [`JsonlLog`](crate::JsonlLog): the header line,
//! serialising events to lines, writing them with a count of what was
//! written, cutting a torn final line off before a writer continues, and
//! removing a log's files.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::{Event, LogError, LogHeader, LogId, Result, Revision};

pub(crate) const BACKEND: &str = "jsonl";

/// Takes the writer's advisory lock on the log file (`flock`, exclusive,
/// not waiting): held by this open file until it is closed — by `close`,
/// by dropping the handle, or by the process dying — so a second writer,
/// from another service in this process or from another process, gets
/// [`LogError::AlreadyOwned`].
pub(crate) fn lock_writer(id: LogId, file: &File) -> Result<()> {
    use rustix::fs::{flock, FlockOperation};
    match flock(file, FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(()),
        Err(e) if e == rustix::io::Errno::WOULDBLOCK => Err(LogError::AlreadyOwned { id }),
        Err(e) => Err(LogError::backend(BACKEND, io::Error::from(e))),
    }
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| LogError::backend(BACKEND, e))?
}

pub(crate) fn io_err(id: LogId, e: io::Error) -> LogError {
    if e.kind() == io::ErrorKind::NotFound {
        LogError::NotFound { id }
    } else {
        LogError::backend(BACKEND, e)
    }
}

/// Reads the header line; returns it and the byte offset of the first event.
pub(crate) fn read_header(id: LogId, file: &File) -> Result<(LogHeader, u64)> {
    let mut reader = BufReader::new(file);
    reader.seek(SeekFrom::Start(0)).map_err(|e| io_err(id, e))?;
    let mut line = Vec::new();
    reader
        .read_until(b'\n', &mut line)
        .map_err(|e| io_err(id, e))?;
    if line.last() != Some(&b'\n') {
        return Err(LogError::Corrupt {
            id,
            detail: "header line is incomplete".into(),
        });
    }
    let header: LogHeader = serde_json::from_slice(&line).map_err(|e| LogError::Corrupt {
        id,
        detail: format!("header line does not parse: {e}"),
    })?;
    if header.id != id {
        return Err(LogError::Corrupt {
            id,
            detail: format!("header names log {}", header.id),
        });
    }
    Ok((header, line.len() as u64))
}

pub(crate) fn revision_of(meta: &std::fs::Metadata) -> Revision {
    Revision::new(format!(
        "{}-{}.{}",
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec()
    ))
}

pub(crate) fn serialise(events: &[Event]) -> Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(events.len() * 64);
    serialise_into(&mut buf, events, None).map_err(|e| LogError::backend(BACKEND, e))?;
    Ok(buf)
}

/// Appends `events` to `buf` as JSON lines, each stamped with `epoch` when
/// one is given: the bytes `serde_json` writes for the stamped event, made
/// without cloning it and without `serde(flatten)`'s buffering (the kind is
/// an internally tagged object, written after the event's own fields by
/// dropping its opening brace). On an error `buf` holds a partial line;
/// the caller cuts it back.
pub(crate) fn serialise_into(
    buf: &mut Vec<u8>,
    events: &[Event],
    epoch: Option<u64>,
) -> serde_json::Result<()> {
    for e in events {
        buf.push(b'{');
        if let Some(at) = &e.at {
            buf.extend_from_slice(b"\"at\":");
            serde_json::to_writer(&mut *buf, at)?;
            buf.push(b',');
        }
        if let Some(epoch) = epoch.or(e.epoch) {
            let _ = write!(buf, "\"epoch\":{epoch},");
        }
        if let Some(by) = e.by {
            let _ = write!(buf, "\"by\":\"{}\",", by.as_str());
        }
        let kind = buf.len();
        serde_json::to_writer(&mut *buf, &e.kind)?;
        if buf.get(kind) != Some(&b'{') {
            return Err(serde::ser::Error::custom(
                "an event kind is not a JSON object",
            ));
        }
        buf.remove(kind);
        buf.push(b'\n');
    }
    Ok(())
}

/// Writes all of `buf`, like `write_all`, but says how much was written
/// before a failure.
pub(crate) fn write_counted(file: &mut File, buf: &[u8]) -> (usize, Option<std::io::Error>) {
    let mut written = 0;
    while written < buf.len() {
        match file.write(&buf[written..]) {
            Ok(0) => return (written, Some(std::io::ErrorKind::WriteZero.into())),
            Ok(n) => written += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return (written, Some(e)),
        }
    }
    (written, None)
}

/// Cuts a torn final line off, so the next append starts on a clean line.
pub(crate) fn cut_torn_tail(id: LogId, file: &mut File) -> Result<()> {
    let len = file.metadata().map_err(|e| io_err(id, e))?.len();
    if len == 0 {
        return Ok(());
    }
    let mut end = len;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))
            .map_err(|e| io_err(id, e))?;
        file.read_exact(chunk).map_err(|e| io_err(id, e))?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            let keep = start + i as u64 + 1;
            if keep != len {
                file.set_len(keep).map_err(|e| io_err(id, e))?;
                file.sync_data().map_err(|e| io_err(id, e))?;
            }
            return Ok(());
        }
        if start == 0 {
            // Not even a complete header: nothing a writer could continue.
            return Err(LogError::Corrupt {
                id,
                detail: "header line is incomplete".into(),
            });
        }
        end = start;
    }
}

/// Removes a log's file and its epoch file, under the writer's lock (a
/// writer in another process makes it [`LogError::AlreadyOwned`]), then
/// makes the removal durable. A missing file is `Ok`.
pub(crate) fn delete_files(id: LogId, path: &Path, epoch_path: &Path, dir: &Path) -> Result<()> {
    let file = match OpenOptions::new().read(true).append(true).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(LogError::backend(BACKEND, e)),
    };
    lock_writer(id, &file)?;
    for p in [path, epoch_path] {
        match std::fs::remove_file(p) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(LogError::backend(BACKEND, e)),
        }
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| LogError::backend(BACKEND, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventKind, Role};

    /// Every kind, with and without a time, an event's own epoch and a
    /// writer's epoch: the fast serialiser writes exactly what `serde_json`
    /// writes for the stamped event.
    #[test]
    fn the_fast_serialiser_writes_serde_jsons_bytes() {
        let kinds = [
            EventKind::TurnStart { turn: 7 },
            EventKind::TurnEnd {
                turn: 7,
                interrupted: true,
            },
            EventKind::TurnEnd {
                turn: 8,
                interrupted: false,
            },
            EventKind::Message {
                role: Role::Assistant,
                text: "quotes \" and \\ and\nlines ✓".into(),
            },
            EventKind::ToolCall {
                call_id: "c1".into(),
                tool: "shell".into(),
                input: serde_json::json!({"cmd": ["ls", "-l"], "n": 1.5}),
            },
            EventKind::ToolResult {
                call_id: "c1".into(),
                ok: false,
                output: serde_json::Value::Null,
            },
            EventKind::Note {
                text: String::new(),
            },
        ];
        for kind in kinds {
            for at in [false, true] {
                for (own, by) in [(None, None), (Some(3), Some(crate::Author::Agent))] {
                    for writer in [None, Some(9)] {
                        let mut e = if at {
                            Event::now(kind.clone())
                        } else {
                            Event::new(kind.clone())
                        };
                        e.epoch = own;
                        e.by = by;
                        let mut fast = Vec::new();
                        serialise_into(&mut fast, std::slice::from_ref(&e), writer).unwrap();
                        let stamped = Event {
                            epoch: writer.or(own),
                            ..e
                        };
                        let mut expected = serde_json::to_vec(&stamped).unwrap();
                        expected.push(b'\n');
                        assert_eq!(
                            String::from_utf8(fast).unwrap(),
                            String::from_utf8(expected).unwrap()
                        );
                    }
                }
            }
        }
    }
}
