//! Salvage of kept scratch dirs after their session settled:
//! [`Manager::salvage`], and the salvage a reopen makes first.
//!
//! A run whose files, report row or settlement could not be written (the
//! blob store refused, the disk was full, the database was gone) leaves its
//! iteration dir kept (`korvus_workspace::keep`): no removal takes it. Once
//! the cause is gone, a salvage stores the dir — the same walk, skip rules
//! and caps as a landing, bytes first — and attaches the rows to the
//! revision they belong to in one store transition under a new fence
//! ([`Coordination::attach_kept_output`](korvus_store::Coordination::attach_kept_output)):
//! the artifact rows, and on the report row the document (when it had
//! none), the manifest, `salvaged_from` and `detail`. The exit reason and
//! counters stay what the run's settlement said. A dir stored whole loses
//! its mark and is removed; one that is not stays kept with the new reason.
//!
//! A session still running is not salvaged here: its own landing stores
//! its dir, and an orphan's takeover salvages it ([`crate::salvage`]);
//! `Manager::salvage` of an orphan takes it over to do so.

use std::path::PathBuf;
use std::sync::Arc;

use korvus_harvest::{persist_held, PersistRequest, ReportFile};
use korvus_store::{KeptOutput, Session, SessionId, StoreError};
use korvus_workspace::{KeptDir, KeptRetention, PrunedKept, REPORT_FILE};
use tracing::{info, warn};

use crate::inner::Inner;
use crate::kept_rows::Found;
use crate::manager::Manager;
use crate::{Result, SessionError};

/// What a salvage stored of one kept dir.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SalvagedDir {
    /// The revision the dir's run worked on; its rows are attached there.
    pub revision: u32,
    /// The dir.
    pub dir: PathBuf,
    /// Files stored now (files stored before are not stored again).
    pub stored: usize,
    /// Whether the revision's report row now has the document the dir held.
    pub report: bool,
    /// Whether everything in the dir is stored: it is removed then, and
    /// stays kept otherwise.
    pub complete: bool,
    /// What could not be stored, cause first.
    pub detail: Option<String>,
}

/// What [`Manager::salvage`] did.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Salvage {
    /// The session's row afterwards.
    pub session: Session,
    /// Whether the session was an orphan that this manager took over and
    /// settled (its lost run's dir salvaged by the takeover).
    pub taken_over: bool,
    /// The kept dirs stored, oldest revision first.
    pub dirs: Vec<SalvagedDir>,
    /// Kept dirs of the session still on this host afterwards.
    pub still_kept: Vec<KeptDir>,
    /// Agent process groups the session's dead runs left running on this
    /// host, stopped before their dirs were stored.
    pub agents_stopped: Vec<i32>,
}

impl Manager {
    /// Stores what a session's runs left kept under this manager's scratch
    /// root, once the cause is gone — the blob store is back, the disk has
    /// room. For a settled session (terminal or idle) each kept iteration
    /// dir is stored and attached to its revision in one fenced store
    /// transition (the only write a settled row accepts; its status, exit
    /// reason and counters do not change); the report row says where the
    /// output came from (`salvaged_from`). An orphan (running, its owner's
    /// lease expired) is taken over first and settled as a reaper settles
    /// it, its lost run's dir salvaged. A dir stored whole is removed; one
    /// that is not stays kept, with the new reason.
    ///
    /// # Errors
    /// `ShuttingDown`; `NotFinished` while a live run has the session (its
    /// own landing stores its dir); `NotReady` when there is no blob store
    /// or the scratch root cannot be listed; `NotFound`; `Store` when the
    /// rows could not be attached (the dir stays kept).
    ///
    /// # Cancel safety
    /// Dropped midway, stored bytes may be left without rows (the blob
    /// sweeper removes them) and the dir stays kept: nothing is lost. An
    /// orphan dropped while it is ended stays registered as a live run here,
    /// as for [`cancel`](Manager::cancel).
    pub async fn salvage(&self, id: SessionId) -> Result<Salvage> {
        self.check_not_stopping()?;
        let inner = &self.inner;
        let mut row = inner.store.get_session(id).await?;
        let mut taken_over = false;
        if row.is_active() {
            let taken = match inner.store.take_over(id, row.fence, inner.lease()).await {
                Ok(taken) => taken,
                Err(StoreError::NotOrphaned { .. } | StoreError::Fenced { .. }) => {
                    return Err(SessionError::NotFinished { session: id })
                }
                Err(e) => return Err(e.into()),
            };
            info!(session_id = %id, "salvage: the session's owner is gone; taken over");
            let member = inner.runs.join();
            row = match inner.end_orphan_as_run(&taken, false, member).await {
                Some(ended) => ended?,
                None => return Err(SessionError::NotFinished { session: id }),
            };
            taken_over = true;
        }
        let (session, dirs, agents_stopped) = inner.salvage_kept(row).await?;
        let still_kept = inner.kept_dirs(id).await?;
        Ok(Salvage {
            session,
            taken_over,
            dirs,
            still_kept,
            agents_stopped,
        })
    }
}

impl Manager {
    /// Removes kept dirs under this manager's scratch root past
    /// `retention` (`korvus_workspace::prune_kept`): older than its age,
    /// then the oldest while all of them hold more than its size. Output
    /// that was never stored goes with them, so each one is a warning in
    /// the log and counts in `korvus_kept_dirs_removed_total`. Returns
    /// them; none without a scratch root.
    ///
    /// # Errors
    /// `NotReady` when the scratch root cannot be listed.
    ///
    /// # Cancel safety
    /// Not cancel safe: the removal runs on a blocking task that finishes
    /// anyway, and a dropped call neither logs nor counts what it removed.
    pub async fn prune_kept(&self, retention: KeptRetention) -> Result<Vec<PrunedKept>> {
        let Some(root) = self.inner.scratch.clone() else {
            return Ok(Vec::new());
        };
        let pruned =
            tokio::task::spawn_blocking(move || korvus_workspace::prune_kept(&root, retention))
                .await
                .map_err(|e| not_ready(format!("pruning kept dirs panicked: {e}")))?
                .map_err(|e| not_ready(format!("kept dirs not pruned: {e}")))?;
        for p in &pruned {
            warn!(
                session_id = %p.session,
                dir = %p.dir.path.display(),
                kept_for_secs = p.age.as_secs(),
                bytes = p.bytes,
                bound = p.bound,
                reason = %p.dir.reason,
                "a kept scratch dir removed by its retention: its output was never stored"
            );
            crate::metrics::kept_removed(p.bound);
        }
        Ok(pruned)
    }
}

impl Manager {
    /// Gives up the kept dirs of session `id` under this manager's scratch
    /// root — output that can never be stored whole (a file that cannot be
    /// read), which a reopen would otherwise refuse for: each is removed,
    /// a warning in the log and counted in
    /// `korvus_kept_dirs_removed_total{bound="discard"}`. A dir whose run's
    /// process is alive is left alone. Returns the dirs removed.
    ///
    /// # Errors
    /// `NotReady` when the scratch root cannot be listed.
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped, the dir being removed is removed all the
    /// same (a blocking task), without its warning or count; later dirs stay.
    pub async fn discard_kept(&self, id: SessionId) -> Result<Vec<KeptDir>> {
        let mut removed = Vec::new();
        for dir in self.inner.kept_dirs(id).await? {
            if dir.run_alive {
                continue;
            }
            let path = dir.path.clone();
            let gone = tokio::task::spawn_blocking(move || korvus_workspace::discard(&path)).await;
            if !matches!(gone, Ok(Ok(()))) {
                warn!(session_id = %id, dir = %dir.path.display(), ?gone, "a kept dir not discarded");
                continue;
            }
            warn!(session_id = %id, dir = %dir.path.display(), reason = %dir.reason, "a kept scratch dir discarded by an operator: its output was never stored");
            crate::metrics::kept_removed("discard");
            removed.push(dir);
        }
        Ok(removed)
    }
}

impl Inner {
    /// The kept iteration dirs of `id` under this manager's scratch root
    /// (none without one).
    pub(crate) async fn kept_dirs(&self, id: SessionId) -> Result<Vec<KeptDir>> {
        let Some(root) = self.scratch.clone() else {
            return Ok(Vec::new());
        };
        let listed = tokio::task::spawn_blocking(move || korvus_workspace::kept_dirs(&root, id))
            .await
            .map_err(|e| not_ready(format!("listing kept dirs panicked: {e}")))?;
        listed.map_err(|e| not_ready(format!("kept dirs of session {id} not listed: {e}")))
    }

    /// Stores every kept dir of the settled session `row` under this
    /// manager's scratch root, oldest revision first, each attached under
    /// its own new fence. Returns the row afterwards and what each salvage
    /// did, and the agent process groups its dead runs left running here,
    /// stopped first. A store refusal stops here (the dir stays kept).
    pub(crate) async fn salvage_kept(
        &self,
        row: Session,
    ) -> Result<(Session, Vec<SalvagedDir>, Vec<i32>)> {
        let kept = self.kept_dirs(row.id).await?;
        let mut row = row;
        let mut done = Vec::new();
        let mut stopped = Vec::new();
        for dir in kept {
            if dir.run_alive {
                // A run still using the dir (a stale run unwinding, or a
                // run of another manager on this host): its own landing
                // or a later salvage stores it, and its agent is its own.
                info!(session_id = %row.id, dir = %dir.path.display(), "a kept dir whose run's process is alive; left alone");
                continue;
            }
            if dir.revision > row.revision {
                warn!(session_id = %row.id, dir = %dir.path.display(), "a kept dir of a revision the session has not reached; left alone");
                continue;
            }
            // The dead run's agent may still be writing into its dir:
            // stopped first (that run's only), so nothing is stored torn
            // or left running.
            let path = dir.path.clone();
            let agent =
                tokio::task::spawn_blocking(move || korvus_workspace::stop_recorded_agent(&path))
                    .await
                    .ok()
                    .flatten();
            if let Some(pgid) = agent {
                warn!(session_id = %row.id, pgid, "stopped the agent a dead run left running");
                stopped.push(pgid);
            }
            let (now, salvaged) = self.salvage_kept_dir(&row, &dir).await?;
            row = now;
            done.push(salvaged);
        }
        Ok((row, done, stopped))
    }

    /// Stores one kept dir of the settled `row` and attaches it.
    async fn salvage_kept_dir(
        &self,
        row: &Session,
        kept: &KeptDir,
    ) -> Result<(Session, SalvagedDir)> {
        let Some(blobs) = self.blobs.clone() else {
            return Err(SessionError::NotReady {
                part: "blob store",
                reason: "no blob store is configured: a kept dir cannot be stored".into(),
            });
        };
        let (mut held, markdown) = self.store_kept(row, kept, blobs).await;
        let existing = match self.store.get_report(row.id, kept.revision).await {
            Ok(r) => Some(r),
            Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let stored = held.outcome.stored.len();
        let complete_if_attached = {
            let mut o = held.outcome.clone();
            o.rows_written = true;
            o.attempted && crate::land::unstored(&o).is_none()
        };
        let unstored = if complete_if_attached {
            None
        } else {
            Some(
                held.outcome
                    .detail()
                    .unwrap_or_else(|| "not every file was stored".into()),
            )
        };
        let found = Found {
            existing: existing.as_ref(),
            markdown,
            manifest_key: held.outcome.manifest_key.clone(),
            stored,
            unstored: unstored.clone(),
        };
        if held.rows.is_empty() && found.markdown.is_none() && !complete_if_attached {
            return Ok((row.clone(), self.nothing_stored(row, kept, unstored).await));
        }
        let has_document = existing.as_ref().is_some_and(|r| r.markdown_key.is_some());
        if held.rows.is_empty()
            && complete_if_attached
            && (found.markdown.is_none() || has_document)
        {
            // Everything in it was stored already (a run whose clean-up
            // never cleared its mark): nothing to attach, the row stays as
            // its run left it, and the dir goes.
            let salvaged = SalvagedDir {
                revision: kept.revision,
                dir: kept.path.clone(),
                stored: 0,
                report: has_document,
                complete: true,
                detail: None,
            };
            self.after_salvage(row, &salvaged).await;
            return Ok((row.clone(), salvaged));
        }
        let report = self.kept_report(row, kept, found);
        let attach = KeptOutput::new(held.rows.clone(), report);
        match self.attach_kept(row, attach).await {
            Ok((session, report)) => {
                held.attached();
                let salvaged = SalvagedDir {
                    revision: kept.revision,
                    dir: kept.path.clone(),
                    stored,
                    report: report.markdown_key.is_some(),
                    complete: complete_if_attached,
                    detail: unstored,
                };
                self.after_salvage(&session, &salvaged).await;
                crate::metrics::salvaged(stored as u64, salvaged.complete);
                Ok((session, salvaged))
            }
            Err(e) => {
                held.refused(&e.to_string());
                warn!(session_id = %row.id, dir = %kept.path.display(), error = %e, "kept dir stored but its rows not attached; it stays kept");
                crate::metrics::salvaged(0, false);
                Err(e.into())
            }
        }
    }

    /// Stores the kept dir under the next fence with its rows held, and
    /// its manifest: the held phase and the document this revision
    /// adopts. This revision's own rows count as stored — a file its
    /// landing stored before it failed is not stored twice, and its own
    /// `report.md` among them is still the document.
    async fn store_kept(
        &self,
        row: &Session,
        kept: &KeptDir,
        blobs: Arc<dyn korvus_blob::BlobStore>,
    ) -> (korvus_harvest::HeldRows, Option<(String, u64)>) {
        let restored = self.restored_before(row.id, kept.revision + 1, true).await;
        let own_report = restored
            .iter()
            .any(|(p, r)| p.as_str() == REPORT_FILE && r.artifact.revision == kept.revision);
        let request = PersistRequest {
            incident: row.incident_id,
            session: row.id,
            revision: kept.revision,
            fence: row.fence + 1,
            scratch: Some(kept.path.clone()),
            skip_prefixes: self.read_only.clone(),
            restored,
        };
        let config = &self.config.persist;
        let mut held = persist_held(Arc::clone(&blobs), config, request.clone()).await;
        held.store_manifest(&*blobs, config, &request).await;
        let markdown = match &held.outcome.report {
            ReportFile::Stored { key, bytes } => Some((key.clone(), *bytes)),
            ReportFile::Unchanged { key, bytes } if own_report => Some((key.clone(), *bytes)),
            _ => None,
        };
        (held, markdown)
    }

    /// A salvage that stored nothing: nothing is attached, and the row is
    /// left as it is (its fence too); the mark gets the new reason.
    async fn nothing_stored(
        &self,
        row: &Session,
        kept: &KeptDir,
        unstored: Option<String>,
    ) -> SalvagedDir {
        let salvaged = SalvagedDir {
            revision: kept.revision,
            dir: kept.path.clone(),
            stored: 0,
            report: false,
            complete: false,
            detail: unstored,
        };
        warn!(session_id = %row.id, dir = %kept.path.display(), errors = ?salvaged.detail, "nothing of the kept dir could be stored; it stays kept");
        self.after_salvage(row, &salvaged).await;
        crate::metrics::salvaged(0, false);
        salvaged
    }

    /// After the attach: a dir stored whole loses its mark and is removed
    /// (with what earlier runs of the session left beside it); one that is
    /// not gets the new reason on its mark.
    async fn after_salvage(&self, session: &Session, salvaged: &SalvagedDir) {
        let Some(root) = self.scratch.clone() else {
            return;
        };
        let dir = salvaged.dir.clone();
        if !salvaged.complete {
            let reason = salvaged.detail.clone().unwrap_or_default();
            let marked =
                tokio::task::spawn_blocking(move || korvus_workspace::keep(&dir, &reason)).await;
            if !matches!(marked, Ok(Ok(()))) {
                warn!(session_id = %session.id, dir = %salvaged.dir.display(), "the kept mark not renewed; the old one holds the dir");
            }
            return;
        }
        if let Err(e) = korvus_workspace::unkeep(&dir) {
            warn!(session_id = %session.id, error = %e, "the salvaged dir's kept mark not cleared; it stays");
            return;
        }
        info!(session_id = %session.id, dir = %dir.display(), stored = salvaged.stored, "kept dir salvaged");
        match korvus_workspace::reap_session_through(&root, session.id, salvaged.revision).await {
            Ok(r) if r.failed.is_empty() => {}
            Ok(r) => {
                warn!(session_id = %session.id, failed = ?r.failed, "salvaged dir not removed whole; `korvus reap --apply` removes it")
            }
            Err(e) => {
                warn!(session_id = %session.id, error = %e, "salvaged dir not removed; `korvus reap --apply` removes it")
            }
        }
    }
}

/// A scratch root that cannot be read.
fn not_ready(reason: String) -> SessionError {
    SessionError::NotReady {
        part: "scratch root",
        reason,
    }
}
