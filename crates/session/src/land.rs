//! Landing one iteration: persist phase → report row, and the settlement
//! the supervisor then writes.
//!
//! The manager's own exit reasons replace the runner's only when the run
//! itself ended normally (a cancelled run stays cancelled, a failed one
//! keeps its reason): `report_author_failed`, `report_upload_failed`,
//! `report_persist_failed`.

use std::sync::Arc;

use korvus_harvest::{persist, PersistOutcome, PersistRequest, ReportFile};
use korvus_log::{Event, EventKind, LogHandle};
use korvus_runner::ExitReason;
use korvus_store::{Counters, NewReport, SessionStatus, Settlement};
use tracing::{error, info, warn};

use crate::execute::RunResult;
use crate::manager::Inner;
use crate::prepare::Prepared;
use crate::supervise::Plan;

/// How much of a rejected exit reason the turn log keeps.
const REJECTED_NOTE_BYTES: usize = 1024;

/// Persists the iteration's files, writes its report row and returns the
/// settlement.
pub(crate) async fn land(
    inner: &Inner,
    plan: &Plan,
    prepared: &Prepared,
    log: &LogHandle,
    result: RunResult,
) -> Settlement {
    let (mut status, mut exit_reason) = result.status();
    if let Some(original) = exit_reason.rejected() {
        note_rejected(log, original).await;
    }
    let (counters, author_finished) = result.outcome().map_or((Counters::default(), false), |o| {
        (o.counters, o.author_finished)
    });
    let ended_normally = matches!(&result, RunResult::Returned(_)) && status.is_terminal();

    let outcome = persist_phase(inner, plan, prepared).await;

    // Which document this revision adopts.
    let markdown = match (&outcome.report, author_finished) {
        // A restored earlier report is adopted only when this iteration's
        // author phase finished.
        (ReportFile::Unchanged { .. }, false) => None,
        (ReportFile::Stored { .. }, false) if ended_normally => None,
        (report, _) => report.markdown().map(|(k, b)| (k.to_owned(), b)),
    };
    if ended_normally {
        if !author_finished {
            status = SessionStatus::Failed;
            exit_reason = ExitReason::REPORT_AUTHOR_FAILED;
        } else if matches!(outcome.report, ReportFile::Failed { .. }) {
            status = SessionStatus::Failed;
            exit_reason = ExitReason::REPORT_UPLOAD_FAILED;
        }
    }
    let report = NewReport {
        session_id: plan.session.id,
        incident_id: plan.session.incident_id,
        revision: plan.revision,
        markdown_key: markdown.as_ref().map(|(k, _)| k.clone()),
        markdown_bytes: markdown.as_ref().map_or(0, |(_, b)| *b),
        exit_reason: exit_reason.to_string(),
        counters,
        detail: None,
    };
    if let Err(e) = inner.store.create_report(report).await {
        error!(error = %e, "report row not written");
        if ended_normally {
            status = SessionStatus::Failed;
            exit_reason = ExitReason::REPORT_PERSIST_FAILED;
        }
    }
    Settlement {
        status,
        exit_reason: Some(exit_reason.into()),
        counters,
    }
}

/// The persist phase of this iteration (bytes first, rows second), logged.
async fn persist_phase(inner: &Inner, plan: &Plan, prepared: &Prepared) -> PersistOutcome {
    let outcome = persist(
        Arc::clone(&inner.store),
        inner.blobs.clone(),
        &inner.config.persist,
        PersistRequest {
            incident: plan.session.incident_id,
            session: plan.session.id,
            revision: plan.revision,
            scratch: prepared.dir.as_ref().map(|d| d.path().to_path_buf()),
            skip_prefixes: inner.read_only.clone(),
            restored: prepared.restored.clone(),
        },
    )
    .await;
    if !outcome.attempted {
        info!(reason = ?outcome.reason, "persist phase skipped");
    } else {
        info!(%outcome, "persist phase done");
        if let Some(text) = outcome.error_text() {
            warn!(errors = %text, "persist phase degraded");
        }
    }
    outcome
}

/// Keeps the text a runner handed over as its exit reason, which was not a
/// valid one, in the turn log: escaped (no control characters reach a
/// backend) and cut to [`REJECTED_NOTE_BYTES`].
async fn note_rejected(log: &LogHandle, original: &str) {
    let mut escaped = format!("{original:?}");
    if escaped.len() > REJECTED_NOTE_BYTES {
        let mut end = REJECTED_NOTE_BYTES;
        while !escaped.is_char_boundary(end) {
            end -= 1;
        }
        escaped.truncate(end);
        escaped.push('…');
    }
    warn!(original = %escaped, "runner returned an invalid exit reason");
    let note = Event::now(EventKind::Note {
        text: format!(
            "the runner's exit reason was not valid and is stored as {}; it was {escaped}",
            ExitReason::INVALID
        ),
    });
    if let Err(e) = log.append(&[note]).await {
        warn!(error = %e, "invalid exit reason not noted in the turn log");
    }
}
