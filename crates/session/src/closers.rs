//! The interrupted-turn closers a continue appends before its message,
//! and what it reads of the session's log to find them.
//!
//! **What is kept where.** Turns nest and tool calls sit inside them, so
//! what is open at the end of a log depends, in general, on all of it.
//! But every continue (`reopen`, `send_message`) claims the log for its
//! new fence — a new *epoch*, stamped on each event it appends — and its
//! first events close everything then open and carry the user's message
//! (the *repair*). Epochs only grow along a log (an older writer's
//! appends are refused once a newer one claimed it), so the start of an
//! epoch is found by binary search, and from the start of the newest
//! epoch that begins with a repair nothing earlier is open: the closers
//! are computed from there on, a page at a time, holding only what is
//! open. Epochs that do not begin with a repair (a queued continue's
//! claimer, whose repair is the epoch before) send the search one epoch
//! further back; a log with no repair (never continued, or written
//! before epochs) is read whole — still a page at a time.
//!
//! The message a claimed continue resumes with is the last user message
//! of its log: read backwards from the end, a page at a time.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

use korvus_log::{Author, Event, EventKind, LogHandle, Role};

/// Events read per request while scanning a log.
pub(crate) const READ_PAGE: u64 = 1024;

/// Events read per request while reading a log backwards.
const TAIL_PAGE: u64 = 256;

/// The events that close every turn started but not ended and every tool
/// call without a result, in the order they must be appended: failed tool
/// results first (oldest call first), then turn ends (innermost turn first),
/// each marked interrupted.
///
/// Computed from the log itself, so it is idempotent: once the closers are
/// appended, the same log yields none. The whole-log form of what a
/// continue computes page by page; public only under the `testing`
/// feature (tests and the benchmarks compare with it).
///
/// ```
/// use korvus_log::{Event, EventKind};
/// use korvus_session::testing::interrupted_turn_closers;
///
/// let log = vec![
///     Event::new(EventKind::TurnStart { turn: 1 }),
///     Event::new(EventKind::ToolCall { call_id: "c1".into(), tool: "sh".into(), input: Default::default() }),
/// ];
/// let closers = interrupted_turn_closers(&log);
/// assert_eq!(closers.len(), 2);
/// let mut repaired = log.clone();
/// repaired.extend(closers);
/// assert!(interrupted_turn_closers(&repaired).is_empty());
/// ```
#[cfg(any(test, feature = "testing"))]
pub fn interrupted_turn_closers(events: &[Event]) -> Vec<Event> {
    // One pass, linear in the log's length: a log of a long session holds
    // hundreds of thousands of events. Call ids are borrowed from the log.
    let mut scan = Scan::<&str>::default();
    for e in events {
        match &e.kind {
            EventKind::TurnStart { turn } => scan.turns.open(*turn),
            EventKind::TurnEnd { turn, .. } => scan.turns.close(turn),
            EventKind::ToolCall { call_id, .. } => scan.calls.open(call_id.as_str()),
            EventKind::ToolResult { call_id, .. } => scan.calls.close(call_id.as_str()),
            _ => {}
        }
    }
    scan.finish()
}

/// What is open so far: turns by number, tool calls by id.
struct Scan<C> {
    turns: OpenSet<u64>,
    calls: OpenSet<C>,
}

impl<C> Default for Scan<C> {
    fn default() -> Self {
        Self {
            turns: OpenSet::default(),
            calls: OpenSet::default(),
        }
    }
}

impl Scan<String> {
    /// Takes the next events of a log read page by page (ids copied only
    /// while their call is open).
    fn feed(&mut self, events: &[Event]) {
        for e in events {
            match &e.kind {
                EventKind::TurnStart { turn } => self.turns.open(*turn),
                EventKind::TurnEnd { turn, .. } => self.turns.close(turn),
                EventKind::ToolCall { call_id, .. } => self.calls.open(call_id.clone()),
                EventKind::ToolResult { call_id, .. } => self.calls.close(call_id.as_str()),
                _ => {}
            }
        }
    }
}

impl<C: AsRef<str> + Hash + Eq + Clone> Scan<C> {
    /// The closers of what is still open: failed results (oldest call
    /// first), then turn ends (innermost, i.e. latest opened, first).
    fn finish(self) -> Vec<Event> {
        let (turns, calls) = (self.turns.into_open(), self.calls.into_open());
        let mut closers: Vec<Event> = calls
            .into_iter()
            .map(|call_id| {
                Event::korvus(EventKind::ToolResult {
                    call_id: call_id.as_ref().to_owned(),
                    ok: false,
                    output: serde_json::json!({ "error": "interrupted" }),
                })
            })
            .collect();
        closers.extend(turns.into_iter().rev().map(|turn| {
            Event::korvus(EventKind::TurnEnd {
                turn,
                interrupted: true,
            })
        }));
        closers
    }
}

/// Things opened in order and closed by key; an end closes every open
/// entry with its key (a log may repeat a turn number or a call id).
/// Holds only what is open — each with the position it was opened at —
/// so a long log of closed turns costs nothing.
struct OpenSet<K> {
    next: u64,
    open: HashMap<K, Vec<u64>>,
}

impl<K> Default for OpenSet<K> {
    fn default() -> Self {
        Self {
            next: 0,
            open: HashMap::new(),
        }
    }
}

impl<K: Hash + Eq> OpenSet<K> {
    fn open(&mut self, key: K) {
        self.open.entry(key).or_default().push(self.next);
        self.next += 1;
    }

    fn close<Q: Hash + Eq + ?Sized>(&mut self, key: &Q)
    where
        K: Borrow<Q>,
    {
        self.open.remove(key);
    }

    /// What is still open, in the order it was opened.
    fn into_open(self) -> Vec<K>
    where
        K: Clone,
    {
        let mut open: Vec<(u64, K)> = self
            .open
            .into_iter()
            .flat_map(|(key, at)| at.into_iter().map(move |a| (a, key.clone())))
            .collect();
        open.sort_unstable_by_key(|(at, _)| *at);
        open.into_iter().map(|(_, key)| key).collect()
    }
}

/// The closers of a session's log, and how much of it was read.
#[derive(Debug)]
pub(crate) struct LogClosers {
    pub(crate) closers: Vec<Event>,
    /// Where the scan began (0: the whole log).
    pub(crate) from: u64,
    /// The log's length when read.
    pub(crate) len: u64,
}

/// The closers of `log`: what is open from the start of its newest
/// repair to its end, read a page at a time.
///
/// # Errors
/// The log's, when a read fails.
pub(crate) async fn closers_of(log: &LogHandle) -> korvus_log::Result<LogClosers> {
    let len = log.len().await?;
    let from = balanced_start(log, len).await?;
    let mut scan = Scan::<String>::default();
    let mut at = from;
    while at < len {
        let page = log.read(at, Some(READ_PAGE.min(len - at))).await?;
        if page.is_empty() {
            break;
        }
        at += page.len() as u64;
        scan.feed(&page);
    }
    Ok(LogClosers {
        closers: scan.finish(),
        from,
        len,
    })
}

/// The epoch of the event at `at` (0 for one written before epochs, or
/// none there).
async fn epoch_at(log: &LogHandle, at: u64) -> korvus_log::Result<u64> {
    let event = log.read(at, Some(1)).await?;
    Ok(event.first().and_then(|e| e.epoch).unwrap_or(0))
}

/// The offset of the first event in `0..=last` whose epoch is `epoch` or
/// newer (`last` when none before it is), by binary search: epochs never
/// decrease along a log, since every backend refuses an older writer.
pub(crate) async fn first_of_epoch(
    log: &LogHandle,
    last: u64,
    epoch: u64,
) -> korvus_log::Result<u64> {
    let (mut lo, mut hi) = (0, last);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if epoch_at(log, mid).await? < epoch {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// The offset from which nothing earlier is open: the start of the
/// newest epoch that begins with a repair, else 0.
pub(crate) async fn balanced_start(log: &LogHandle, len: u64) -> korvus_log::Result<u64> {
    let mut end = len;
    while end > 0 {
        let epoch = epoch_at(log, end - 1).await?;
        if epoch == 0 {
            return Ok(0);
        }
        // The first event in 0..end of this epoch (or a newer one).
        let lo = first_of_epoch(log, end - 1, epoch).await?;
        if lo == 0 || begins_with_repair(log, lo, end).await? {
            return Ok(lo);
        }
        end = lo;
    }
    Ok(0)
}

/// Whether the events from `start` (before `end`) are a repair: closers,
/// then a user message.
async fn begins_with_repair(log: &LogHandle, start: u64, end: u64) -> korvus_log::Result<bool> {
    let mut at = start;
    while at < end {
        let page = log.read(at, Some(READ_PAGE.min(end - at))).await?;
        if page.is_empty() {
            return Ok(false);
        }
        at += page.len() as u64;
        for e in &page {
            match &e.kind {
                EventKind::Message {
                    role: Role::User, ..
                } => return Ok(true),
                EventKind::TurnEnd {
                    interrupted: true, ..
                }
                | EventKind::ToolResult { ok: false, .. } => {}
                _ => return Ok(false),
            }
        }
    }
    Ok(false)
}

/// The last user message of `log` that korvus wrote (the prompt, a
/// reopen's or an answer's message), read backwards a page at a time. A
/// message the agent's output held under the user role (a dialect's tool
/// result, or a forgery) is passed over.
///
/// # Errors
/// The log's, when a read fails.
pub(crate) async fn last_user_message(log: &LogHandle) -> korvus_log::Result<Option<String>> {
    last_of(log, 0, |e| match e.kind {
        EventKind::Message {
            role: Role::User,
            text,
        } if e.by != Some(Author::Agent) => Some(text),
        _ => None,
    })
    .await
}

/// The text of the last note korvus wrote in `log` since its newest
/// revision began (why a run ended, what it could not do), read backwards
/// a page at a time; an agent's note is passed over, however it reads,
/// and so is an earlier revision's.
///
/// # Errors
/// The log's, when a read fails.
pub(crate) async fn last_korvus_note(log: &LogHandle) -> korvus_log::Result<Option<String>> {
    let from = balanced_start(log, log.len().await?).await?;
    last_of(log, from, |e| match e.kind {
        EventKind::Note { text } if e.by == Some(Author::Korvus) => Some(text),
        _ => None,
    })
    .await
}

/// The time of the last event of `log` that carries one (read before
/// anything is appended for a resumed attempt: when its previous attempt
/// last logged).
///
/// # Errors
/// The log's, when a read fails.
pub(crate) async fn last_event_at(
    log: &LogHandle,
) -> korvus_log::Result<Option<chrono::DateTime<chrono::Utc>>> {
    last_of(log, 0, |e| e.at).await
}

/// What `pick` makes of the last event of `log` at `floor` or later it
/// accepts, read backwards a page at a time.
async fn last_of<T>(
    log: &LogHandle,
    floor: u64,
    mut pick: impl FnMut(Event) -> Option<T>,
) -> korvus_log::Result<Option<T>> {
    let mut end = log.len().await?;
    while end > floor {
        let from = end.saturating_sub(TAIL_PAGE).max(floor);
        let page = log.read(from, Some(end - from)).await?;
        if let Some(found) = page.into_iter().rev().find_map(&mut pick) {
            return Ok(Some(found));
        }
        end = from;
    }
    Ok(None)
}

#[cfg(test)]
mod tests;
