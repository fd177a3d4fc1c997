//! The rows a salvage of a settled session attaches (`kept.rs`): the
//! revision's report row as the salvage leaves it, and the one store
//! transition that attaches it with the artifact rows, retried within the
//! settle bound and judged whole when a retry finds its first attempt
//! committed.

use korvus_runner::ExitReason;
use korvus_store::{KeptOutput, NewReport, Report, Session, StoreError};
use korvus_workspace::KeptDir;
use tracing::warn;

use crate::inner::Inner;
use crate::salvage::bounded_detail;

/// What a salvage found and stored of one kept dir, for its report row.
pub(crate) struct Found<'a> {
    /// The revision's report row, if it has one.
    pub(crate) existing: Option<&'a Report>,
    /// The document this revision adopts: its key and size.
    pub(crate) markdown: Option<(String, u64)>,
    /// The salvage's manifest.
    pub(crate) manifest_key: Option<String>,
    /// Files stored now.
    pub(crate) stored: usize,
    /// What could not be stored, when something could not.
    pub(crate) unstored: Option<String>,
}

impl Inner {
    /// The report row a salvage of `kept` attaches: the row's own exit
    /// reason and counters (the settlement's, when the revision has no
    /// row), the document the dir held, where it came from, and a detail
    /// that keeps the row's cause and adds what the salvage did.
    pub(crate) fn kept_report(&self, row: &Session, kept: &KeptDir, found: Found<'_>) -> NewReport {
        let Found {
            existing,
            markdown,
            manifest_key,
            stored,
            unstored,
        } = found;
        let mut cause = existing
            .and_then(|r| r.detail.clone())
            .unwrap_or_else(|| format!("the run's output was kept: {}", kept.reason));
        let mut tail = format!(
            "; salvaged later by manager {}: {stored} file(s) stored",
            self.ownership.owner()
        );
        if let Some(unstored) = unstored {
            tail.push_str(&format!(
                "; still not stored whole, the dir stays kept at {}: {unstored}",
                kept.path.display()
            ));
        }
        // What this salvage did always fits: the earlier cause is cut
        // first (then the salvage's own text, should it alone be too long).
        let room = korvus_store::validate::MAX_REPORT_DETAIL_BYTES.saturating_sub(tail.len());
        crate::land::cut(&mut cause, room);
        let detail = format!("{cause}{tail}");
        let (exit_reason, counters) = match existing {
            Some(r) => (r.exit_reason.clone(), r.counters),
            None if kept.revision == row.revision => (
                row.exit_reason.clone().unwrap_or(ExitReason::OWNER_LOST),
                row.counters,
            ),
            None => (ExitReason::OWNER_LOST, Default::default()),
        };
        NewReport {
            session_id: row.id,
            incident_id: row.incident_id,
            revision: kept.revision,
            markdown_bytes: markdown.as_ref().map_or(0, |(_, b)| *b),
            markdown_key: markdown.map(|(k, _)| k),
            manifest_key,
            exit_reason,
            counters,
            detail: Some(bounded_detail(detail)),
            salvaged_from: Some(bounded_detail(format!(
                "the kept scratch dir {} (kept because: {}), stored by manager {}",
                kept.path.display(),
                kept.reason,
                self.ownership.owner()
            ))),
            fence: row.fence + 1,
        }
    }

    /// `attach_kept_output`, retried on transient errors with backoff
    /// within the settle bound.
    pub(crate) async fn attach_kept(
        &self,
        row: &Session,
        kept: KeptOutput,
    ) -> std::result::Result<(Session, Report), StoreError> {
        let deadline = tokio::time::Instant::now() + self.config.settle_timeout;
        let mut backoff = korvus_store::Backoff::WRITES.start();
        let mut retried = false;
        loop {
            let attempt = self
                .store
                .attach_kept_output(row.id, row.fence, kept.clone());
            let answer = match tokio::time::timeout_at(deadline, attempt).await {
                Ok(answer) => answer,
                Err(_) => Err(StoreError::transient(
                    "session",
                    "attach_kept_output did not answer in time",
                )),
            };
            match answer {
                Err(e)
                    if e.is_transient()
                        && tokio::time::Instant::now() + backoff.delay() < deadline =>
                {
                    warn!(session_id = %row.id, error = %e, "kept output not attached; retrying");
                    tokio::time::sleep(backoff.delay()).await;
                    backoff.advance();
                    retried = true;
                }
                // A retry refused by the fence the first attempt moved: that
                // attempt committed when the rows standing are these.
                Err(e @ StoreError::Fenced { .. }) if retried => {
                    return match self.attached_before(row, &kept).await {
                        Some(done) => Ok(done),
                        None => Err(e),
                    };
                }
                done => return done,
            }
        }
    }

    /// The row and report row when `kept` is what stands at the fence after
    /// `row`'s (its report row at that fence, from this salvage, and its
    /// first artifact stored): an earlier attempt committed.
    async fn attached_before(&self, row: &Session, kept: &KeptOutput) -> Option<(Session, Report)> {
        let now = self.store.get_session(row.id).await.ok()?;
        let report = self
            .store
            .get_report(row.id, kept.report.revision)
            .await
            .ok()?;
        let ours =
            report.fence == row.fence + 1 && report.salvaged_from == kept.report.salvaged_from;
        let rows = match kept.artifacts.first() {
            Some(a) => self.store.get_artifacts(&[a.id]).await.ok()?.len() == 1,
            None => true,
        };
        (ours && rows).then_some((now, report))
    }
}
