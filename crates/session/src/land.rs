//! Landing one iteration: persist phase → workspace archive → report row
//! (written by `write.rs`), and the settlement the supervisor then writes.
//!
//! The manager's own exit reasons replace the runner's only when the run
//! itself ended normally (a cancelled run stays cancelled, a failed one
//! keeps its reason): `report_author_failed`, `report_upload_failed`,
//! `report_persist_failed`.

use std::sync::Arc;

use korvus_harvest::{
    persist, Checkpointer, FailStage, PersistOutcome, PersistRequest, ReportFile, SkipReason,
};
use korvus_log::{Event, EventKind, LogHandle};
use korvus_runner::ExitReason;
use korvus_store::{Counters, NewReport, Settlement};
use tracing::{info, warn};

use crate::execute::RunResult;
use crate::inner::Inner;
use crate::prepare::{FileStamp, Prepared};
use crate::run::{Run, RunKey};

/// How much of a rejected exit reason the turn log keeps.
const REJECTED_NOTE_BYTES: usize = 1024;

/// What landing decided: the settlement for the supervisor to write, and
/// why the scratch dir must be kept — its output is not stored whole —
/// when it must.
pub(crate) struct Landed {
    pub(crate) settlement: Settlement,
    pub(crate) keep: Option<String>,
}

impl Run<'_> {
    /// Persists the iteration's files, writes its report row and returns the
    /// settlement.
    pub(crate) async fn land(
        &self,
        prepared: &Prepared,
        result: RunResult,
        checkpointer: Option<Checkpointer>,
    ) -> Landed {
        let (inner, run, log) = (&**self.inner, self.key, &*self.log);
        let mut ending = result.ending();
        let returned = ending.settles().1;
        let why = result.why(inner.config.run_timeout);
        let unsaid = why.as_deref().filter(|_| result.unsaid());
        note_ending(log, unsaid, returned.rejected()).await;
        let claimed = result.outcome().is_some_and(|o| o.author_finished);
        let counters = counters_of(inner, run, log, &result).await.saturating();
        // Whatever the runner claims, a restored report.md it never touched was
        // not authored in this iteration.
        let author_finished = claimed && !untouched_restored_report(prepared).await;
        let ended_normally = ending.returned_normally();
        // Landed whatever this process's clock says of the lease: every write
        // below presents the run's fence, and the store refuses them only if
        // the session really moved on.
        let outcome = persist_phase(inner, run, prepared, checkpointer).await;
        note_over_budget(log, &outcome).await;
        if inner.config.archive_on_release {
            archive(inner, run, prepared).await;
        }

        // Which document this revision adopts.
        let markdown = match (&outcome.report, author_finished) {
            // A restored earlier report is adopted only when this iteration's
            // author phase finished.
            (ReportFile::Unchanged { .. }, false) => None,
            (ReportFile::Stored { .. }, false) if ended_normally => None,
            (report, _) => report.markdown().map(|(k, b)| (k.to_owned(), b)),
        };
        if ended_normally {
            // An empty report.md is nothing authored, like a missing one.
            if !author_finished || matches!(outcome.report, ReportFile::Empty) {
                ending = ending.with_report_failure(ExitReason::REPORT_AUTHOR_FAILED);
            } else if matches!(outcome.report, ReportFile::Failed { .. }) {
                ending = ending.with_report_failure(ExitReason::REPORT_UPLOAD_FAILED);
            }
        }
        // The scratch dir is the only copy of what could not be stored: it is
        // kept, and the report row says where.
        let mut keep = unstored(&outcome);
        let mut detail = cause_first(why, outcome.detail());
        if let (Some(_), Some(dir)) = (&keep, &prepared.dir) {
            detail = Some(kept_detail(detail, dir.path()));
        }
        let report = NewReport {
            session_id: run.session,
            incident_id: run.incident,
            revision: run.revision,
            markdown_key: markdown.as_ref().map(|(k, _)| k.clone()),
            manifest_key: outcome.manifest_key.clone(),
            markdown_bytes: markdown.as_ref().map_or(0, |(_, b)| *b),
            exit_reason: ending.settles().1,
            counters,
            // What degraded the persist phase, cause first, for the operator.
            detail,
            salvaged_from: None,
            fence: run.fence,
        };
        // The write comes first: a run that did not end normally still gets
        // its row, only its reason is not replaced.
        let written = inner.write_report(report).await;
        if !written {
            ending = ending.with_report_failure(ExitReason::REPORT_PERSIST_FAILED);
        }
        let (status, exit_reason) = ending.settles();
        if !written && outcome.attempted && keep.is_none() {
            keep = Some("the report row could not be written".into());
        }
        if exit_reason != returned {
            note_replaced(log, &returned, &exit_reason).await;
        }
        Landed {
            settlement: Settlement {
                status,
                exit_reason: Some(exit_reason),
                counters,
                fence: run.fence,
            },
            keep,
        }
    }
}

/// Why a persist phase that ran left output unstored, if it did: a file
/// that failed to be read, uploaded or recorded, rows not written, a
/// `report.md` that could not be stored. A file refused by its size limit
/// is not stored by the operator's choice (as a skipped one), and keeps
/// nothing; nor does a phase that did not run (no blob store, no scratch
/// dir).
pub(crate) fn unstored(outcome: &PersistOutcome) -> Option<String> {
    if !outcome.attempted {
        return None;
    }
    let over_limit = |path: &str| {
        outcome
            .failed
            .iter()
            .any(|f| f.path == path && f.stage == FailStage::Limit)
    };
    if let ReportFile::Failed { cause } = &outcome.report {
        if !over_limit(korvus_workspace::REPORT_FILE) {
            return Some(format!("report.md not stored: {cause}"));
        }
    }
    if outcome.failed.iter().any(|f| f.stage != FailStage::Limit) || !outcome.rows_written {
        return Some(
            outcome
                .error_text()
                .unwrap_or_else(|| "the artifact rows were not written".into()),
        );
    }
    None
}

/// The report's detail: why the run ended without its runner's say (the
/// session's cause), then what degraded the persist phase, within the
/// row's bound.
fn cause_first(why: Option<String>, persist: Option<String>) -> Option<String> {
    let max = korvus_store::validate::MAX_REPORT_DETAIL_BYTES;
    let mut detail = match (why, persist) {
        (Some(mut why), Some(persist)) => {
            cut(&mut why, max / 2);
            Some(format!("{why}; {persist}"))
        }
        (why, persist) => why.or(persist),
    };
    if let Some(d) = &mut detail {
        cut(d, max);
    }
    detail
}

/// `detail` with where the scratch dir is kept, within the row's bound:
/// the persist phase's text is cut, never the path.
fn kept_detail(detail: Option<String>, dir: &std::path::Path) -> String {
    let kept = format!(
        "the scratch dir is kept at {} (its output is not stored whole)",
        dir.display()
    );
    match detail {
        None => kept,
        Some(mut d) => {
            let max = korvus_store::validate::MAX_REPORT_DETAIL_BYTES;
            cut(&mut d, max.saturating_sub(kept.len() + 2));
            format!("{d}; {kept}")
        }
    }
}

/// Cuts `text` to at most `max` bytes at a character boundary, ending it
/// with `…` when anything was cut (the mark alone, 3 bytes, when `max` is
/// smaller than that).
pub(crate) fn cut(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max.saturating_sub('…'.len_utf8());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
}

/// What the run used. A runner that returned says so itself; for any
/// other ending the larger of what the runner still told (a `RunError`'s
/// counters, a cancelled run's late outcome) and what the run's turn log
/// holds under its fence (turns, tool calls, usage events), read within
/// the report bound.
async fn counters_of(inner: &Inner, run: RunKey, log: &LogHandle, result: &RunResult) -> Counters {
    let told = match result {
        RunResult::Returned(o) => return o.counters,
        RunResult::Failed(e) => e.counters,
        RunResult::Cancelled(Some(o)) | RunResult::LeaseLost(Some(o)) => o.counters,
        _ => Counters::default(),
    };
    let bound = inner.config.report_timeout;
    match tokio::time::timeout(bound, crate::usage::logged(log, run.fence)).await {
        Ok(Ok(logged)) => crate::usage::larger(told, logged),
        Ok(Err(e)) => {
            warn!(error = %e, "the run's usage not read from its log");
            told
        }
        Err(_) => {
            warn!(?bound, "the run's usage not read from its log in time");
            told
        }
    }
}

/// Stores the scratch dir as one `workspace.tar.gz` artifact of the
/// revision, before its report row, within the persist bound: on timeout
/// it is skipped with a reason in the log.
async fn archive(inner: &Inner, run: RunKey, prepared: &Prepared) {
    let (Some(blobs), Some(dir)) = (&inner.blobs, &prepared.dir) else {
        return;
    };
    let work = async {
        let archive = korvus_workspace::archive(dir.path()).await?;
        korvus_workspace::store_archive(
            &*inner.store,
            &**blobs,
            run.incident,
            run.session,
            run.revision,
            run.fence,
            &archive,
        )
        .await
    };
    match tokio::time::timeout(inner.config.persist.timeout, work).await {
        Ok(Ok(_)) => info!("workspace archived"),
        Ok(Err(e)) => warn!(error = %e, "workspace archive not stored"),
        Err(_) => warn!(
            bound = ?inner.config.persist.timeout,
            "workspace archive skipped: not stored within the persist bound"
        ),
    }
}

/// Whether the scratch dir's `report.md` is still exactly the restored
/// one (same inode, same modification time): then nothing was authored.
async fn untouched_restored_report(prepared: &Prepared) -> bool {
    let (Some(before), Some(dir)) = (prepared.restored_report, &prepared.dir) else {
        return false;
    };
    let now = FileStamp::of(&dir.path().join(korvus_workspace::REPORT_FILE)).await;
    let untouched = now == Some(before);
    if untouched {
        info!("report.md is the restored one, untouched in this iteration");
    }
    untouched
}

/// The persist phase of this iteration (bytes first, rows second), logged.
/// What the persist phase of the run `run` works on — its landing's, and
/// its checkpoints' (`checkpoints.rs`).
pub(crate) fn landing_request(inner: &Inner, run: RunKey, prepared: &Prepared) -> PersistRequest {
    PersistRequest {
        incident: run.incident,
        session: run.session,
        revision: run.revision,
        fence: run.fence,
        scratch: prepared.dir.as_ref().map(|d| d.path().to_path_buf()),
        skip_prefixes: inner.read_only.clone(),
        restored: prepared.restored.clone(),
    }
}

async fn persist_phase(
    inner: &Inner,
    run: RunKey,
    prepared: &Prepared,
    checkpointer: Option<Checkpointer>,
) -> PersistOutcome {
    let started = std::time::Instant::now();
    let outcome = match checkpointer {
        // After checkpoints that hold files: only what changed since the
        // last one. A run no checkpoint stored anything of lands as usual.
        Some(checkpointer) if checkpointer.held_files() > 0 => checkpointer.land().await,
        _ => {
            persist(
                Arc::clone(&inner.store).into_store(),
                inner.blobs.clone(),
                &inner.config.persist,
                landing_request(inner, run, prepared),
            )
            .await
        }
    };
    // `stored` holds every file stored now, `report.md` included.
    if outcome.attempted {
        crate::metrics::persisted(
            outcome.stored.len() as u64,
            outcome.stored.iter().map(|f| f.size).sum(),
            outcome.failed.len() as u64,
            started.elapsed(),
        );
    }
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

/// Says in the turn log what the revision's byte budget left out (the
/// exit reason stays what it was; the manifest lists each file).
async fn note_over_budget(log: &LogHandle, outcome: &PersistOutcome) {
    let mut over = 0u64;
    let mut links = 0u64;
    let mut limit = 0;
    for s in &outcome.skipped {
        match &s.reason {
            SkipReason::OverBudget { limit: l, .. } => {
                over += 1;
                limit = *l;
            }
            SkipReason::HardLink { .. } => links += 1,
            _ => {}
        }
    }
    if over == 0 && links == 0 {
        return;
    }
    let mut parts = Vec::new();
    if over > 0 {
        parts.push(format!(
            "{over} file(s) not stored: past the revision's limit of {limit} bytes"
        ));
    }
    if links > 0 {
        parts.push(format!(
            "{links} hard link(s) stored once, under the first path"
        ));
    }
    let note = Event::korvus(EventKind::Note {
        text: format!("{} (the harvest manifest lists them)", parts.join("; ")),
    });
    if let Err(e) = log.append(&[note]).await {
        warn!(error = %e, "over-budget files not noted in the turn log");
    }
}

/// Says in the turn log why the run ended without its runner's say (a
/// panic, the timeout, a lapsed lease) and keeps an exit reason it handed
/// over that was not valid.
async fn note_ending(log: &LogHandle, why: Option<&str>, rejected: Option<&str>) {
    if let Some(why) = why {
        note_why(log, why).await;
    }
    if let Some(original) = rejected {
        note_rejected(log, original).await;
    }
}

async fn note_why(log: &LogHandle, why: &str) {
    let mut text = why.to_owned();
    cut(&mut text, REJECTED_NOTE_BYTES);
    if let Err(e) = log.append(&[Event::korvus(EventKind::Note { text })]).await {
        warn!(error = %e, "the run's end not noted in the turn log");
    }
}

/// Says in the turn log that the manager replaced the runner's exit reason
/// (an agent that exited 0 without a report), so the log's last word and
/// the row agree on the outcome.
async fn note_replaced(log: &LogHandle, returned: &ExitReason, now: &ExitReason) {
    let why = if *now == ExitReason::REPORT_AUTHOR_FAILED {
        "no report.md was written in this iteration (or it is empty)"
    } else if *now == ExitReason::REPORT_UPLOAD_FAILED {
        "report.md could not be stored"
    } else {
        "the report row could not be written"
    };
    let note = Event::korvus(EventKind::Note {
        text: format!("the run returned {returned}, but {why}: the session ends failed ({now})"),
    });
    if let Err(e) = log.append(&[note]).await {
        warn!(error = %e, "replaced exit reason not noted in the turn log");
    }
}

/// Keeps the text a runner handed over as its exit reason, which was not a
/// valid one, in the turn log: escaped (no control characters reach a
/// backend) and cut to [`REJECTED_NOTE_BYTES`].
async fn note_rejected(log: &LogHandle, original: &str) {
    let mut escaped = format!("{original:?}");
    cut(&mut escaped, REJECTED_NOTE_BYTES);
    warn!(original = %escaped, "runner returned an invalid exit reason");
    let note = Event::korvus(EventKind::Note {
        text: format!(
            "the runner's exit reason was not valid and is stored as {}; it was {escaped}",
            ExitReason::INVALID
        ),
    });
    if let Err(e) = log.append(&[note]).await {
        warn!(error = %e, "invalid exit reason not noted in the turn log");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cut_keeps_within_the_bound_at_a_character_boundary() {
        let mut short = "fits".to_owned();
        super::cut(&mut short, 4);
        assert_eq!(short, "fits");
        let mut long = "ééééé".to_owned(); // 10 bytes
        super::cut(&mut long, 6);
        assert!(long.len() <= 6, "{long}");
        assert_eq!(long, "é…");
        let mut tiny = "abcdef".to_owned();
        super::cut(&mut tiny, 2);
        assert_eq!(tiny, "…", "nothing fits but the mark");
    }
}
