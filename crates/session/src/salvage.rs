//! Salvage: landing what a lost run left behind before its session is
//! settled for it.
//!
//! A run whose manager died (SIGKILL, out of memory, a lost node) leaves
//! its scratch dir — until then the only copy of what its agent made — on
//! that host. When a manager takes such a session over (its reaper, an
//! operator's `korvus reap --apply`, a cancel of the orphan) and the dead
//! run's iteration dir is under its own scratch root (the same host, or a
//! shared scratch root), it lands that dir first: the same persist phase a
//! run's own landing uses (bytes first, then rows; the same walk, skip
//! rules and caps), under the takeover's fence, so a run that comes back
//! to life writes nothing more. The revision's report row then carries
//! the salvaged `report.md` and says where it came from
//! (`Report::salvaged_from`); the exit reason stays `owner_lost` (or
//! `cancelled`): the run did not finish.
//!
//! The settlement of a session taken over is written here too
//! ([`Inner::settle_taken_over`]): after the salvage, with the report row
//! it feeds, in one transaction.
//!
//! A `report.md` is adopted only when this revision wrote it: one that is
//! still the restored report of an earlier revision (same digest) is the
//! unchanged rule's, and a revision never lands revision N−1's report as
//! its own. A dir whose output could not be stored whole is kept, and the
//! report row and the log say where.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use korvus_harvest::{persist, PersistOutcome, PersistRequest, ReportFile};
use korvus_store::{ArtifactKind, NewReport, Session, Settlement, StoreError};
use korvus_workspace::{RestoredFile, WorkspacePath};
use tracing::{debug, info, warn};

use crate::inner::Inner;
use crate::SessionError;

/// What a salvage stored of a lost run's scratch dir.
#[derive(Debug)]
pub(crate) struct Salvaged {
    /// The dead run's iteration dir; `None` when the output came from its
    /// last checkpoint (`salvage_checkpoint.rs`: the dir is on another
    /// host).
    pub(crate) dir: Option<PathBuf>,
    /// Where the output came from, for the report row.
    pub(crate) from: String,
    /// The document this revision adopts: its key and size.
    pub(crate) markdown: Option<(String, u64)>,
    /// The harvest manifest of the salvage.
    pub(crate) manifest_key: Option<String>,
    /// Files stored now.
    pub(crate) stored: usize,
    /// What went wrong, cause first (as a landing's `detail`).
    pub(crate) detail: Option<String>,
    /// Whether everything found was stored and its rows written: only
    /// then may the dir be removed.
    pub(crate) complete: bool,
}

impl Salvaged {
    /// The report row's `detail`: the cause of the takeover, then what the
    /// salvage could not do and where the dir is kept.
    /// The persist phase's own text is cut first, so where the dir is
    /// kept always fits in the row's bound.
    pub(crate) fn detail(&self, cause: String) -> String {
        let from = if self.dir.is_some() {
            "its scratch dir"
        } else {
            "its last checkpoint"
        };
        let head = format!("{cause}; {} file(s) of {from} stored", self.stored);
        let tail = match (&self.dir, self.complete) {
            (Some(dir), false) => format!(
                "; the scratch dir is kept at {} (its output is not stored whole)",
                dir.display()
            ),
            _ => String::new(),
        };
        let mut middle = self
            .detail
            .clone()
            .map(|d| format!("; {d}"))
            .unwrap_or_default();
        let room =
            korvus_store::validate::MAX_REPORT_DETAIL_BYTES.saturating_sub(head.len() + tail.len());
        crate::land::cut(&mut middle, room);
        format!("{head}{middle}{tail}")
    }
}

impl Inner {
    /// Lands the scratch dir the lost run of `row` left under this
    /// manager's scratch root, under `row.fence` (the takeover's). `None`
    /// when there is nothing to salvage here: no scratch root or blob
    /// store, or no dir of that revision on this host.
    ///
    /// Bounded by the persist bound (the phase runs on its own task and is
    /// cut off there); never fails — what it could not store is in the
    /// outcome.
    pub(crate) async fn salvage(&self, row: &Session) -> Option<Salvaged> {
        let (Some(root), Some(_)) = (&self.scratch, &self.blobs) else {
            return None;
        };
        // A run that never started died while its dir was being prepared:
        // what is there is seeded or half-restored, not the agent's.
        row.started_at?;
        let dir = root.join(row.id.to_string()).join(row.revision.to_string());
        if !is_real_dir(&dir).await {
            return None;
        }
        let restored = self.restored_before(row.id, row.revision, false).await;
        let outcome = persist(
            Arc::clone(&self.store).into_store(),
            self.blobs.clone(),
            &self.config.persist,
            PersistRequest {
                incident: row.incident_id,
                session: row.id,
                revision: row.revision,
                fence: row.fence,
                scratch: Some(dir.clone()),
                skip_prefixes: self.read_only.clone(),
                restored,
            },
        )
        .await;
        let salvaged = salvaged(self, dir, &outcome);
        if salvaged.complete {
            info!(session_id = %row.id, dir = ?salvaged.dir, stored = salvaged.stored, "salvaged the lost run's scratch dir");
        } else {
            warn!(session_id = %row.id, dir = ?salvaged.dir, errors = ?salvaged.detail, "the lost run's scratch dir was not stored whole; it is kept");
        }
        crate::metrics::salvaged(salvaged.stored as u64, salvaged.complete);
        Some(salvaged)
    }

    /// The session's own output of revisions before `revision`, newest per path, as
    /// the restore of the lost run put it into its dir: the unchanged rule
    /// then keeps an untouched `report.md` of revision N−1 from being
    /// adopted as this revision's. A read that fails leaves it empty (every
    /// file is then stored again, and a `report.md` adopted).
    ///
    /// Read from every artifact row of the session, not only the newest
    /// per path: a later revision's file must not hide the one this
    /// bound sees. With `own_state`, the agent state of the revision just
    /// below the bound counts too (a salvage of a settled revision does
    /// not store its thread twice).
    pub(crate) async fn restored_before(
        &self,
        id: korvus_store::SessionId,
        revision: u32,
        own_state: bool,
    ) -> BTreeMap<WorkspacePath, RestoredFile> {
        use korvus_store::StoreExt as _;
        let artifacts = match self.store.all_session_artifacts(id).await {
            Ok(a) => a,
            Err(e) => {
                warn!(session_id = %id, error = %e, "earlier output not read for the salvage");
                return BTreeMap::new();
            }
        };
        let mut restored: BTreeMap<WorkspacePath, RestoredFile> = BTreeMap::new();
        for a in artifacts {
            let counted = match a.kind {
                ArtifactKind::Report | ArtifactKind::AgentOutput => true,
                ArtifactKind::AgentState => own_state && a.revision + 1 == revision,
                _ => false,
            };
            if a.revision >= revision || !counted {
                continue;
            }
            let (Ok(path), Ok(sha256)) = (WorkspacePath::new(&a.path), a.sha256.parse()) else {
                continue;
            };
            let newer = restored.get(&path).is_some_and(|r| {
                (r.artifact.revision, r.artifact.created_at, r.artifact.id)
                    > (a.revision, a.created_at, a.id)
            });
            if !newer {
                restored.insert(
                    path,
                    RestoredFile {
                        artifact: a,
                        sha256,
                    },
                );
            }
        }
        restored
    }
}

/// What the report row takes from a salvage's persist outcome.
fn salvaged(inner: &Inner, dir: PathBuf, outcome: &PersistOutcome) -> Salvaged {
    // Only a report.md this revision wrote: an unchanged one is the
    // restored report of an earlier revision.
    let markdown = match &outcome.report {
        ReportFile::Stored { key, bytes } => Some((key.clone(), *bytes)),
        _ => None,
    };
    // The same judgement as a run's own landing.
    let complete = outcome.attempted && crate::land::unstored(outcome).is_none();
    Salvaged {
        dir: Some(dir.clone()),
        from: format!(
            "the scratch dir {} of the lost run, landed by manager {}",
            dir.display(),
            inner.ownership.owner(),
        ),
        markdown,
        manifest_key: outcome.manifest_key.clone(),
        stored: outcome.stored.len(),
        detail: outcome.detail(),
        complete,
    }
}

/// Whether `path` is a real directory (never following a symlink).
async fn is_real_dir(path: &Path) -> bool {
    tokio::fs::symlink_metadata(path)
        .await
        .is_ok_and(|m| m.file_type().is_dir())
}

impl Inner {
    /// Ends a run this manager took over: fences its turn log at the new
    /// fence (`TurnLog::fence`), stops the dead run's recorded agent processes on this host,
    /// salvages the scratch dir the dead run left here (`salvage.rs`: its
    /// files stored, its `report.md` adopted when this revision wrote it),
    /// then writes the report row (unless the dead run wrote its own) and
    /// the settlement in one transaction — `cancelled` when `cancel` is
    /// set or a cancel was pending, else `failed` / `owner_lost` — retried
    /// on transient errors within the settle bound, and finally removes
    /// the salvaged dir if everything in it was stored.
    ///
    /// `cancelled` tells whether a cancel reached the session while it was
    /// being ended (its live entry's cancellation), read right before the
    /// settlement.
    pub(crate) async fn settle_taken_over(
        &self,
        row: &Session,
        cancel: bool,
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Result<Session, SessionError> {
        self.claim_log(row).await?;
        let _ = self.stop_dead_agents(row.id).await;
        // The dead run's dir when it is on this host, else its last
        // checkpoint.
        let salvaged = match self.salvage(row).await {
            Some(salvaged) => Some(salvaged),
            None => self.salvage_checkpoint(row).await,
        };
        if let Some((s, dir)) = salvaged
            .as_ref()
            .filter(|s| !s.complete)
            .and_then(|s| Some((s, s.dir.clone()?)))
        {
            // The only copy of what could not be stored: no removal takes
            // it until a salvage stores it whole.
            let reason = s.detail.clone().unwrap_or_default();
            let marked = tokio::task::spawn_blocking({
                let dir = dir.clone();
                move || korvus_workspace::keep(&dir, &reason)
            })
            .await;
            if !matches!(marked, Ok(Ok(()))) {
                warn!(session_id = %row.id, dir = %dir.display(), "the salvaged dir could not be marked kept; it is left in place");
            }
        }
        // What the lost revision used, as its log says: its row never got it.
        let counters = self.counted_lost_run(row).await;
        let (status, reason) = crate::ending::Ending::TakenOver {
            cancelled: cancel || cancelled() || row.cancel_requested,
        }
        .settles();
        let settlement = Settlement {
            status,
            exit_reason: Some(reason.clone()),
            counters,
            fence: row.fence,
        };
        let cause = format!(
            "the manager running this revision stopped renewing its lease; \
             manager {} took the session over",
            self.ownership.owner()
        );
        let markdown = salvaged.as_ref().and_then(|s| s.markdown.clone());
        let report = NewReport {
            session_id: row.id,
            incident_id: row.incident_id,
            revision: row.revision,
            markdown_bytes: markdown.as_ref().map_or(0, |(_, b)| *b),
            markdown_key: markdown.map(|(k, _)| k),
            manifest_key: salvaged.as_ref().and_then(|s| s.manifest_key.clone()),
            exit_reason: reason,
            counters,
            detail: Some(bounded_detail(match &salvaged {
                Some(s) => s.detail(cause),
                None => cause,
            })),
            salvaged_from: salvaged.as_ref().map(|s| bounded_detail(s.from.clone())),
            fence: row.fence,
        };
        let (settled, report) = self.settle_with_report(row, settlement, report).await?;
        if let Some(dir) = salvaged.filter(|s| s.complete).and_then(|s| s.dir) {
            self.remove_salvaged(row, &dir).await;
        }
        crate::metrics::taken_over();
        crate::metrics::settled(settled.exit_reason.as_deref());
        info!(session_id = %row.id, %status, report_exit_reason = %report.exit_reason, "taken-over session settled");
        Ok(settled)
    }

    /// The counters of the lost revision of `row`, counted from the
    /// session's turn log — every event since the revision began (its
    /// newest repair, or the log's start), whichever runs of it wrote them
    /// — within the report bound; none when the log cannot be read (the
    /// row's own are the revision before's).
    async fn counted_lost_run(&self, row: &Session) -> korvus_store::Counters {
        let id = korvus_log::LogId::from_uuid(row.id.as_uuid());
        let count = async {
            let log = self.logs.open(id, korvus_log::Access::Read).await?;
            let counted = crate::usage::revision(&log).await;
            let _ = log.close().await;
            counted
        };
        match tokio::time::timeout(self.config.report_timeout, count).await {
            Ok(Ok(counted)) => counted.saturating(),
            Ok(Err(e)) => {
                debug!(session_id = %row.id, error = %e, "the lost run's usage not read from its log");
                korvus_store::Counters::default()
            }
            Err(_) => korvus_store::Counters::default(),
        }
    }

    /// `settle_with_report`, retried on transient errors with backoff until
    /// the settle bound passes: the salvage before it is not repeated.
    async fn settle_with_report(
        &self,
        row: &Session,
        settlement: Settlement,
        report: NewReport,
    ) -> Result<(Session, korvus_store::Report), StoreError> {
        let deadline = tokio::time::Instant::now() + self.config.settle_timeout;
        let mut backoff = korvus_store::Backoff::WRITES.start();
        let per_attempt = self.config.settle_timeout / 4;
        loop {
            let until = deadline.min(tokio::time::Instant::now() + per_attempt);
            let attempt = self
                .store
                .settle_with_report(row.id, settlement.clone(), report.clone());
            let answer = match tokio::time::timeout_at(until, attempt).await {
                Ok(answer) => answer,
                // A hung call (a black-holed connection) is given up and
                // tried again, never waited for past the bound.
                Err(_) => Err(StoreError::transient(
                    "session",
                    "settle_with_report did not answer in time",
                )),
            };
            match answer {
                Err(e)
                    if e.is_transient()
                        && tokio::time::Instant::now() + backoff.delay() < deadline =>
                {
                    warn!(session_id = %row.id, error = %e, "taken-over session not settled; retrying");
                    tokio::time::sleep(backoff.delay()).await;
                    backoff.advance();
                }
                done => return done,
            }
        }
    }

    /// Removes the dir a salvage stored whole (and what the dead runs of
    /// the session up to this revision left beside it), after the
    /// settlement: a failure is logged and `reap` removes it later.
    async fn remove_salvaged(&self, row: &Session, dir: &std::path::Path) {
        let Some(root) = &self.scratch else { return };
        // Its output is stored now: a mark the lost run's landing left
        // (its outcome was not written) no longer holds it.
        if let Err(e) = korvus_workspace::unkeep(dir) {
            warn!(session_id = %row.id, error = %e, "the salvaged dir's kept mark not cleared; it stays");
            return;
        }
        match korvus_workspace::reap_session_through(root, row.id, row.revision).await {
            Ok(reaped) if reaped.failed.is_empty() => {
                debug!(session_id = %row.id, dir = %dir.display(), "salvaged scratch dir removed");
            }
            Ok(reaped) => {
                warn!(session_id = %row.id, failed = ?reaped.failed, "salvaged scratch dir not removed whole; `korvus reap --apply` removes it");
            }
            Err(e) => {
                warn!(session_id = %row.id, error = %e, "salvaged scratch dir not removed; `korvus reap --apply` removes it")
            }
        }
    }
}

/// `text` cut to what a report row's `detail` (and `salvaged_from`) may
/// hold, at a character boundary.
pub(crate) fn bounded_detail(mut text: String) -> String {
    crate::land::cut(&mut text, korvus_store::validate::MAX_REPORT_DETAIL_BYTES);
    text
}
