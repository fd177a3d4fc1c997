//! What a run used, as its turn log says: the turns it started, the tool
//! calls it made and the tokens its usage events report (korvus's
//! measured ones, when it has any: [`TokenTally`]), counted over the
//! events of its own epoch (its fence). A run that did not return an
//! outcome — failed, timed out, cancelled past its grace, panicked — is
//! counted this way, so it is never settled as having used nothing.

use korvus_log::{EventKind, LogHandle, TokenTally};
use korvus_store::Counters;

use crate::closers::{first_of_epoch, READ_PAGE};

/// The counters of the events the run at `fence` appended to `log`,
/// read a page at a time from the first event of its epoch.
///
/// # Errors
/// The log's, when a read fails.
pub(crate) async fn logged(log: &LogHandle, fence: u64) -> korvus_log::Result<Counters> {
    let len = log.len().await?;
    if len == 0 {
        return Ok(Counters::default());
    }
    let from = first_of_epoch(log, len - 1, fence).await?;
    count(log, from, len, |e| e.epoch == Some(fence)).await
}

/// The counters of every event of the log's newest revision: from the
/// start of its newest repair (a reopen's closers and message) — or the
/// log's start — to its end, whichever runs wrote them. What a revision
/// whose runs were lost used.
///
/// # Errors
/// The log's, when a read fails.
pub(crate) async fn revision(log: &LogHandle) -> korvus_log::Result<Counters> {
    let len = log.len().await?;
    let from = crate::closers::balanced_start(log, len).await?;
    count(log, from, len, |_| true).await
}

/// The counters of the events in `from..len` that `mine` accepts.
async fn count(
    log: &LogHandle,
    from: u64,
    len: u64,
    mine: impl Fn(&korvus_log::Event) -> bool,
) -> korvus_log::Result<Counters> {
    let mut counters = Counters::default();
    let mut tokens = TokenTally::default();
    let mut at = from;
    while at < len {
        let page = log.read(at, Some(READ_PAGE.min(len - at))).await?;
        if page.is_empty() {
            break;
        }
        at += page.len() as u64;
        for event in page.iter().filter(|e| mine(e)) {
            match &event.kind {
                EventKind::TurnStart { .. } => counters.turns = counters.turns.saturating_add(1),
                EventKind::ToolCall { .. } => {
                    counters.tool_calls = counters.tool_calls.saturating_add(1);
                }
                _ => tokens.add(event),
            }
        }
    }
    (counters.input_tokens, counters.output_tokens) = tokens.tokens();
    Ok(counters)
}

/// The larger of each counter of `a` and `b`.
pub(crate) fn larger(a: Counters, b: Counters) -> Counters {
    Counters {
        turns: a.turns.max(b.turns),
        tool_calls: a.tool_calls.max(b.tool_calls),
        input_tokens: a.input_tokens.max(b.input_tokens),
        output_tokens: a.output_tokens.max(b.output_tokens),
    }
}
