//! How a run ends in the log and in its outcome: the summary note, the
//! failure note of an error raised before the program's output closed, and
//! whether the author phase finished.

use std::path::Path;
use std::process::ExitStatus;

use korvus_log::{Event, EventKind, LogHandle};
use korvus_runner::{ExitReason, RunContext, RunError, RunOutcome};
use korvus_store::Counters;
use korvus_workspace::REPORT_FILE;
use tracing::{info, warn};

use crate::dialect::Decoder;
use crate::sink::Sink;
use crate::CommandError;

/// Logs how the program ended (the stderr tail and a summary note, with
/// what the run `used` at most where known) and
/// turns its exit reason into the run's outcome.
pub(crate) async fn conclude(
    scratch: &Path,
    mut sink: Sink<'_>,
    status: ExitStatus,
    result: Result<&'static str, CommandError>,
    used: Option<String>,
) -> Result<RunOutcome, CommandError> {
    let author_finished = report_exists(scratch).await;
    let mut summary = match &result {
        Ok(reason) => format!("agent exited ({status}); exit reason {reason}"),
        Err(e) => format!("{e} ({status}); exit reason {}", e.reason()),
    };
    if let Some(used) = used {
        summary.push_str("; ");
        summary.push_str(&used);
    }
    info!(%summary, author_finished, "agent finished");
    sink.finish(summary).await;
    result.map(|reason| {
        RunOutcome::new(reason, sink.into_counters()).with_author_finished(author_finished)
    })
}

/// Turns a [`CommandError`] into the [`RunError`] the manager expects. An
/// error raised before the program's output was closed with a note (no
/// scratch dir, manifest, start, wait) gets its note here, so the log
/// always says why a run failed.
pub(crate) async fn failed(
    log: &LogHandle,
    result: Result<RunOutcome, CommandError>,
) -> Result<RunOutcome, RunError> {
    let e = match result {
        Ok(outcome) => return Ok(outcome),
        Err(e) => e,
    };
    let noted = matches!(
        e,
        CommandError::Exited { .. }
            | CommandError::Signaled { .. }
            | CommandError::TimedOut { .. }
            | CommandError::MemoryExceeded
            | CommandError::DiskQuotaExceeded
            | CommandError::Stalled
            | CommandError::AgentFailed { .. }
    );
    let message = format!("{} (exit reason {})", error_chain(&e), e.reason());
    if !noted {
        let note = Event::korvus(EventKind::Note {
            text: message.clone(),
        });
        if let Err(log_error) = log.append(&[note]).await {
            warn!(error = %log_error, "failure note not logged");
        }
    }
    let reason = e.reason();
    Err(RunError::msg(message)
        .with_exit_reason(reason)
        .with_source(e))
}

/// An error and its sources, joined with `: `.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Whether the author phase finished: [`REPORT_FILE`] is a regular file
/// (not a symlink) at the scratch root.
pub(crate) async fn report_exists(scratch: &Path) -> bool {
    tokio::fs::symlink_metadata(scratch.join(REPORT_FILE))
        .await
        .is_ok_and(|m| m.is_file())
}

/// A failing exit whose agent reported why (its dialect's failure) is
/// that failure.
pub(crate) fn with_agent_failure(
    result: Result<&'static str, CommandError>,
    decoder: Option<&Decoder>,
) -> Result<&'static str, CommandError> {
    match (result, decoder.and_then(Decoder::failure)) {
        (Err(CommandError::Exited { code }), Some(message)) => Err(CommandError::AgentFailed {
            code,
            message: message.to_owned(),
        }),
        (result, _) => result,
    }
}

/// A run cancelled before it started: nothing to stop, nothing written.
pub(crate) async fn cancelled_before_start(ctx: &RunContext, scratch: &Path) -> Option<RunOutcome> {
    ctx.cancel.is_cancelled().then_some(())?;
    Some(
        RunOutcome::new(ExitReason::CANCELLED, Counters::default())
            .with_author_finished(report_exists(scratch).await),
    )
}

/// The outcome of a run whose budget is reached before its agent starts
/// (the session's, or its incident's, spent by an earlier run): the agent
/// is not started. A store that cannot say lets the run start; its first
/// model call asks again.
pub(crate) async fn budget_before_start(
    guard: Option<&crate::budget::Guard>,
    scratch: &Path,
) -> Option<RunOutcome> {
    let refused = guard?.check().await.err()?;
    matches!(refused, crate::budget::Refused::Reached(_)).then_some(())?;
    Some(
        RunOutcome::new(ExitReason::BUDGET_REACHED, Counters::default())
            .with_author_finished(report_exists(scratch).await),
    )
}
