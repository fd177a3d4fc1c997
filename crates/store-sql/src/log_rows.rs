//! What the SQL turn logs store, and how it turns back into the seam's types.
//!
//! The header and each event are stored as the exact JSON text serde_json
//! writes for them — the same text as a line of the JSONL export — so the
//! stored size is the export's size and nothing is lost in a JSON column
//! type's normalisation.

use korvus_log::{Event, LogError, LogHeader, LogId, LogStat, Revision};

use crate::error::corrupt;

/// A `turn_logs` row.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct LogRow {
    header: String,
    event_count: i64,
    size_bytes: i64,
}

impl LogRow {
    /// The parsed header, which must name `id`.
    pub(crate) fn header(&self, id: LogId) -> korvus_log::Result<LogHeader> {
        let header: LogHeader = serde_json::from_str(&self.header)
            .map_err(|e| corrupt(id, format!("header does not parse: {e}")))?;
        if header.id != id {
            return Err(corrupt(id, format!("header names log {}", header.id)));
        }
        Ok(header)
    }

    /// What `stat` returns: read from this row alone.
    pub(crate) fn stat(&self, id: LogId) -> korvus_log::Result<LogStat> {
        let count = count(id, self.event_count)?;
        let size = u64::try_from(self.size_bytes)
            .map_err(|_| corrupt(id, format!("size {}", self.size_bytes)))?;
        Ok(LogStat {
            header: self.header(id)?,
            // Appends are the only change and each one adds events, so the
            // count is a token that changes exactly on append.
            revision: Revision::new(count.to_string()),
            event_count: Some(count),
            size_bytes: Some(size),
        })
    }
}

/// A stored event count as a `u64`.
pub(crate) fn count(id: LogId, count: i64) -> korvus_log::Result<u64> {
    u64::try_from(count).map_err(|_| corrupt(id, format!("event count {count}")))
}

/// The header's JSON text.
pub(crate) fn header_json(backend: &'static str, header: &LogHeader) -> korvus_log::Result<String> {
    serde_json::to_string(header).map_err(|e| LogError::backend(backend, e))
}

/// Bytes `text` takes in the export: the text and its newline.
pub(crate) fn line_bytes(text: &str) -> i64 {
    i64::try_from(text.len())
        .unwrap_or(i64::MAX)
        .saturating_add(1)
}

/// Each event's JSON text, and the bytes they add to the export.
pub(crate) fn event_lines(
    backend: &'static str,
    events: &[Event],
) -> korvus_log::Result<(Vec<String>, i64)> {
    let mut bytes = 0i64;
    let lines = events
        .iter()
        .map(|e| {
            let text = serde_json::to_string(e).map_err(|e| LogError::backend(backend, e))?;
            bytes = bytes.saturating_add(line_bytes(&text));
            Ok(text)
        })
        .collect::<korvus_log::Result<Vec<String>>>()?;
    Ok((lines, bytes))
}

/// `(first seq, row limit)` of a read, or `None` when nothing can be returned
/// (a zero-length read, or an offset beyond any stored sequence number).
pub(crate) fn window(offset: u64, len: Option<u64>) -> Option<(i64, i64)> {
    let start = i64::try_from(offset).ok()?;
    let limit = match len {
        Some(0) => return None,
        Some(l) => i64::try_from(l).unwrap_or(i64::MAX),
        None => i64::MAX,
    };
    Some((start, limit))
}

/// Parses `(seq, body)` rows read from `start` on, checking that they are the
/// contiguous run `start, start + 1, …` (a gap would be a damaged log, never
/// a shorter one).
pub(crate) fn events(
    id: LogId,
    start: i64,
    rows: Vec<(i64, String)>,
) -> korvus_log::Result<Vec<Event>> {
    rows.into_iter()
        .zip(start..)
        .map(|((seq, body), expected)| {
            if seq != expected {
                return Err(corrupt(
                    id,
                    format!("event {expected} is missing (next stored is {seq})"),
                ));
            }
            serde_json::from_str(&body)
                .map_err(|e| corrupt(id, format!("event {seq} does not parse: {e}")))
        })
        .collect()
}

/// A writer epoch as the column holds it; one past `i64::MAX` is refused
/// as a conflict of nothing (no log ever sees such an epoch).
pub(crate) fn to_epoch(id: LogId, epoch: u64) -> korvus_log::Result<i64> {
    i64::try_from(epoch).map_err(|_| korvus_log::LogError::Fenced {
        id,
        epoch,
        newest: u64::MAX,
    })
}

/// What an append that stored nothing found: `Fenced` when the log's
/// newest epoch `newest` is newer than the writer's, else the count.
pub(crate) fn refused(
    id: LogId,
    epoch: u64,
    found: i64,
    newest: i64,
) -> korvus_log::Result<Option<i64>> {
    let newest = u64::try_from(newest).unwrap_or_default();
    if newest > epoch {
        return Err(korvus_log::LogError::Fenced { id, epoch, newest });
    }
    Ok(Some(found))
}

#[cfg(test)]
mod tests {
    use super::*;
    use korvus_log::EventKind;

    #[test]
    fn window_clamps_and_skips_empty_reads() {
        assert_eq!(window(0, None), Some((0, i64::MAX)));
        assert_eq!(window(3, Some(4)), Some((3, 4)));
        assert_eq!(window(3, Some(0)), None);
        assert_eq!(window(u64::MAX, Some(1)), None);
        assert_eq!(window(1, Some(u64::MAX)), Some((1, i64::MAX)));
    }

    #[test]
    fn a_gap_is_corrupt_not_short() {
        let id = LogId::from_uuid(uuid::Uuid::now_v7());
        let body = serde_json::to_string(&Event::new(EventKind::TurnStart { turn: 1 })).unwrap();
        let ok = events(id, 4, vec![(4, body.clone()), (5, body.clone())]).unwrap();
        assert_eq!(ok.len(), 2);
        let err = events(id, 4, vec![(4, body.clone()), (6, body)]).unwrap_err();
        assert!(matches!(err, LogError::Corrupt { .. }), "{err:?}");
    }

    #[test]
    fn sizes_count_the_newline() {
        let (lines, bytes) =
            event_lines("test", &[Event::new(EventKind::Note { text: "é".into() })]).unwrap();
        assert_eq!(bytes, lines[0].len() as i64 + 1);
    }
}
