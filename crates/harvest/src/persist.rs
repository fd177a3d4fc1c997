//! The persist phase's orchestration: walk, upload every file, upload the
//! manifest, write all rows — detached from the caller and bounded by a
//! timeout.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use futures::stream::{self, StreamExt};
use tracing::{info_span, warn, Instrument};

use korvus_blob::BlobStore;
use korvus_store::{ArtifactKind, NewArtifact, Store, StoreError};
use korvus_workspace::REPORT_FILE;

use crate::agent_state::agent_state_candidates;
use crate::checkpoint::land::{land_file, Prior};
use crate::checkpoint::state::CheckpointState;
use crate::checkpoint::Checkpointer;
use crate::config::{PersistConfig, PersistRequest};
use crate::file::{store_file, FileResult};
use crate::manifest::store_manifest;
use crate::outcome::{error_chain, FailStage, FailedFile, PersistOutcome, ReportFile, StoredFile};
use crate::walk::{
    apply_budget, apply_cap, apply_size_limits, harvest_candidates_admitting, Candidate,
    SkipReason, Walk, WalkLimits,
};

/// Runs the persist phase.
///
/// `blobs: None` or `request.scratch: None` skips the phase
/// (`attempted: false` with a reason) — that is a degradation, not an error.
///
/// The phase runs on its own task, so it is detached from the caller's
/// cancellation: a cancelled run's files are still stored. It is bounded by
/// `config.timeout`: a hanging backend cannot hold it longer; what finished
/// by then is reported and the rest is marked failed.
///
/// Order: every upload first (at most `config.concurrency` at once, with
/// durability deferred), then **one** [`BlobStore::barrier`], then all
/// artifact rows in **one** store call, then the harvest manifest, which
/// says whether the rows were written. The manifest is stored also when the
/// phase timed out or panicked (bounded by `config.manifest_timeout`), and
/// its key is [`PersistOutcome::manifest_key`] for the report row. A failed
/// upload gets no row; a failed barrier or row write leaves harmless bytes
/// and is reported. Nothing here fails the phase as a whole: every failure
/// degrades to a reported file.
///
/// # Cancel safety
/// Dropping the returned future does not stop the phase's task, but the
/// timeout is enforced by this future: a dropped call's task then runs until
/// it finishes. Await it (the session layer always does).
pub async fn persist(
    store: Arc<dyn Store>,
    blobs: Option<Arc<dyn BlobStore>>,
    config: &PersistConfig,
    request: PersistRequest,
) -> PersistOutcome {
    persist_with(store, blobs, config, request, None).await
}

impl Checkpointer {
    /// Lands the run: the persist phase ([`persist`]), storing only what
    /// changed since the last checkpoint. A file whose checkpoint still
    /// holds its bytes (same `stat`, or same digest where the stat cannot
    /// vouch) is promoted: its final row (`report`, `agent_output` or
    /// `agent_state`) names the checkpoint's bytes and nothing is uploaded
    /// ([`StoredFile::promoted`], [`PersistOutcome::promoted`]); the rest
    /// is stored as usual, the unchanged rule for restored files included.
    /// The final rows go in with **one**
    /// [`Store::replace_checkpoints`](korvus_store::Store::replace_checkpoints)
    /// that deletes every checkpoint row of the run; the bytes of
    /// checkpoints not promoted are deleted after (best effort).
    ///
    /// # Cancel safety
    /// As [`persist`].
    pub async fn land(self) -> PersistOutcome {
        let request = Arc::unwrap_or_clone(self.request);
        let config = self.config;
        persist_with(
            self.store,
            Some(self.blobs),
            &config,
            request,
            Some(self.state),
        )
        .await
    }
}

/// [`persist`] after the run's checkpoints (`prior`): files they hold are
/// promoted, not uploaded, and their rows replaced in one transition.
async fn persist_with(
    store: Arc<dyn Store>,
    blobs: Option<Arc<dyn BlobStore>>,
    config: &PersistConfig,
    request: PersistRequest,
    prior: Option<CheckpointState>,
) -> PersistOutcome {
    let Some(blobs) = blobs else {
        return PersistOutcome::skipped_phase("no blob store configured");
    };
    let Some(scratch) = request.scratch.clone() else {
        return PersistOutcome::skipped_phase("no scratch directory");
    };
    let (mut outcome, request, span) = run_phase(
        Rows::Write(store),
        Arc::clone(&blobs),
        config,
        request,
        scratch,
        prior,
    )
    .await;
    store_manifest(&*blobs, &request, &mut outcome, config.manifest_timeout)
        .instrument(span)
        .await;
    outcome
}

/// Where a phase's artifact rows go.
pub(crate) enum Rows {
    /// Written by the phase, through this store.
    Write(Arc<dyn Store>),
    /// Held for the caller, who writes them in a transaction of its own
    /// ([`persist_held`](crate::persist_held)).
    Hold(Arc<Mutex<Vec<NewArtifact>>>),
}

/// Runs the phase on its own task within `config.timeout`: the outcome,
/// without its manifest, and the request and span the manifest is stored
/// under.
pub(crate) async fn run_phase(
    rows: Rows,
    blobs: Arc<dyn BlobStore>,
    config: &PersistConfig,
    request: PersistRequest,
    scratch: PathBuf,
    prior: Option<CheckpointState>,
) -> (PersistOutcome, Arc<PersistRequest>, tracing::Span) {
    let progress = Progress::new();
    let span = info_span!(
        "persist",
        session_id = %request.session,
        incident_id = %request.incident,
        revision = request.revision
    );
    let request = Arc::new(request);
    let phase = Phase {
        rows,
        blobs,
        config: config.clone(),
        request: Arc::clone(&request),
        progress: progress.clone(),
        prior: prior.map(|p| Arc::new(Prior::new(p))),
    };
    let task = tokio::spawn(phase.run(scratch).instrument(span.clone()));
    let abort = task.abort_handle();
    let outcome = match tokio::time::timeout(config.timeout, task).await {
        Ok(Ok(())) => progress.snapshot(),
        Ok(Err(join)) => progress.cut_short(format!("persist phase panicked: {join}")),
        Err(_) => {
            abort.abort();
            progress.cut_short(format!(
                "persist phase timed out after {:?}",
                config.timeout
            ))
        }
    };
    (outcome, request, span)
}

/// The outcome so far, shared between the phase's task and [`persist`], so
/// that a timeout or panic still reports what finished.
#[derive(Clone)]
struct Progress(Arc<Mutex<PersistOutcome>>);

impl Progress {
    /// Progress of a phase that has just started.
    fn new() -> Self {
        Self(Arc::new(Mutex::new(PersistOutcome::empty())))
    }

    /// Changes the outcome under the lock. A panicked holder cannot have
    /// left it half-changed in a way that matters, so poison is ignored.
    fn update(&self, f: impl FnOnce(&mut PersistOutcome)) {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// A copy of the outcome so far, lists sorted by path.
    fn snapshot(&self) -> PersistOutcome {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .sorted()
    }

    /// The outcome of an interrupted phase: stored files never got rows,
    /// pending ones never finished.
    fn cut_short(&self, reason: String) -> PersistOutcome {
        warn!(%reason, "persist phase cut short");
        let mut outcome = self.snapshot();
        if !outcome.rows_written {
            rows_failed(&mut outcome, &reason);
        }
        outcome.failed.sort_by(|a, b| a.path.cmp(&b.path));
        outcome.reason = Some(reason);
        outcome
    }

    /// Records what became of one file, keeping [`PersistOutcome::report`]
    /// in step when it is the root [`REPORT_FILE`].
    fn record(&self, result: &FileResult) {
        self.update(|o| match result {
            FileResult::Stored(row) | FileResult::Promoted(row) => {
                if row.kind == ArtifactKind::Report {
                    o.report = ReportFile::Stored {
                        key: row.blob_key.clone(),
                        bytes: row.size_bytes,
                    };
                }
                let mut stored = StoredFile::of(row);
                stored.promoted = matches!(result, FileResult::Promoted(_));
                o.promoted += usize::from(stored.promoted);
                o.stored.push(stored);
            }
            FileResult::Unchanged(u) => {
                if u.path == REPORT_FILE {
                    o.report = ReportFile::Unchanged {
                        key: u.blob_key.clone(),
                        bytes: u.size,
                    };
                }
                o.unchanged.push(u.clone());
            }
            FileResult::Skipped(s) => {
                if s.path == REPORT_FILE {
                    o.report = match s.reason {
                        SkipReason::Empty => ReportFile::Empty,
                        _ => ReportFile::Failed {
                            cause: format!("{REPORT_FILE} skipped: {}", s.reason),
                        },
                    };
                }
                o.skipped.push(s.clone());
            }
            FileResult::Failed(f) => {
                if f.path == REPORT_FILE {
                    o.report = ReportFile::Failed {
                        cause: f.cause.clone(),
                    };
                }
                warn!(path = %f.path, cause = %f.cause, "file not stored");
                o.failed.push(f.clone());
            }
        });
    }
}

/// Moves every stored file to the failed list at the row stage: their bytes
/// are up but no row points at them. A stored `report.md` becomes
/// [`ReportFile::Failed`] with the same cause: a report row must never point
/// at bytes whose artifact row is missing.
pub(crate) fn rows_failed(outcome: &mut PersistOutcome, cause: &str) {
    if matches!(outcome.report, ReportFile::Stored { .. }) {
        outcome.report = ReportFile::Failed {
            cause: cause.to_owned(),
        };
    }
    for s in outcome.stored.drain(..) {
        outcome.failed.push(FailedFile {
            path: s.path,
            stage: FailStage::Row,
            cause: cause.to_owned(),
        });
    }
}

/// Everything the phase's task owns.
struct Phase {
    rows: Rows,
    blobs: Arc<dyn BlobStore>,
    config: PersistConfig,
    request: Arc<PersistRequest>,
    progress: Progress,
    /// What the run's checkpoints stored, when it had any.
    prior: Option<Arc<Prior>>,
}

impl Phase {
    /// Walk, uploads, one barrier, rows — in that order. The manifest
    /// follows in [`persist`].
    async fn run(self, scratch: PathBuf) {
        let Some((walk, dir)) = self.walk(scratch).await else {
            return;
        };
        let rows = self.upload_files(walk.candidates, dir).await;
        let checkpoints = self.prior.as_ref().map_or(0, |p| p.checkpoint_rows().len());
        if rows.is_empty() && checkpoints == 0 {
            self.progress.update(|o| o.rows_written = true);
            return;
        }
        // One durability barrier for every upload above, before any row.
        if let Err(e) = self.blobs.barrier().await {
            let cause = format!("stored bytes not made durable: {}", error_chain(&e));
            warn!(error = %e, "blob barrier failed; no artifact row written");
            self.progress.update(|o| rows_failed(o, &cause));
            return;
        }
        match &self.rows {
            Rows::Write(store) => self.write_rows(&**store, rows).await,
            Rows::Hold(held) => *held.lock().unwrap_or_else(|p| p.into_inner()) = rows,
        }
    }

    /// Walks the scratch dir and opens it as a capability, on a blocking
    /// thread. Records the skipped entries; `None` (with the reason
    /// recorded) when the dir cannot be opened.
    async fn walk(&self, scratch: PathBuf) -> Option<(Walk, Arc<Dir>)> {
        let prefixes = self.request.skip_prefixes.clone();
        let (max_files, max_bytes) = (self.config.max_files, self.config.max_file_bytes);
        let budget = self.config.max_stored_bytes;
        let prior = self.prior.clone();
        let walked = tokio::task::spawn_blocking(move || {
            let limits = WalkLimits {
                max_bytes,
                max_files,
            };
            // After checkpoints the cap counts the paths they hold.
            let mut admit = Prior::admission(prior.as_deref(), max_files);
            let mut walk = harvest_candidates_admitting(&scratch, &prefixes, limits, &mut admit);
            apply_size_limits(&mut walk, max_bytes);
            apply_cap(&mut walk, max_files);
            walk.candidates.extend(agent_state_candidates(&scratch));
            apply_budget(&mut walk, budget);
            let dir = Dir::open_ambient_dir(&scratch, ambient_authority());
            (walk, dir)
        })
        .await;
        let (walk, dir) = match walked {
            Ok((walk, Ok(dir))) => (walk, Arc::new(dir)),
            Ok((_, Err(e))) => {
                let reason = format!("cannot open scratch dir: {e}");
                self.progress.update(|o| o.reason = Some(reason));
                return None;
            }
            Err(e) => {
                let reason = format!("harvest walk panicked: {e}");
                self.progress.update(|o| o.reason = Some(reason));
                return None;
            }
        };
        // Until report.md is stored, it counts as failed: a timeout or panic
        // mid-phase must not look like "there was no report".
        let has_report = walk
            .candidates
            .iter()
            .any(|c| c.path.as_str() == REPORT_FILE);
        self.progress.update(|o| {
            o.skipped = walk.skipped.clone();
            o.skipped_unlisted = walk.unlisted;
            if has_report {
                o.report = ReportFile::Failed {
                    cause: format!("{REPORT_FILE} was not stored before the phase ended"),
                };
            }
        });
        Some((walk, dir))
    }

    /// Reads and uploads every candidate, `config.concurrency` at a time,
    /// recording each as it finishes. Returns the rows of the stored ones.
    async fn upload_files(&self, candidates: Vec<Candidate>, dir: Arc<Dir>) -> Vec<NewArtifact> {
        let results: Vec<FileResult> = stream::iter(candidates)
            .map(|candidate| {
                let dir = Arc::clone(&dir);
                async move {
                    let (blobs, request, config) = (&*self.blobs, &*self.request, &self.config);
                    let result = match &self.prior {
                        Some(prior) => {
                            land_file(&dir, blobs, request, config, candidate, prior).await
                        }
                        None => store_file(&dir, blobs, request, config, candidate).await,
                    };
                    self.progress.record(&result);
                    result
                }
            })
            .buffered(self.config.concurrency.max(1))
            .collect()
            .await;
        results
            .into_iter()
            .filter_map(|r| match r {
                FileResult::Stored(row) | FileResult::Promoted(row) => Some(*row),
                _ => None,
            })
            .collect()
    }

    /// Writes all rows in one store call, retried with backoff while the
    /// store says the failure is transient (a database outage): the phase's
    /// own bound ends the retries. A retry that finds the ids taken checks
    /// whether they are these rows (the first attempt committed, its answer
    /// lost). On failure the bytes stay behind (harmless) and every stored
    /// file is reported failed at the row stage.
    async fn write_rows(&self, store: &dyn Store, rows: Vec<NewArtifact>) {
        let mut backoff = korvus_store::Backoff::WRITES.start();
        let mut retried = false;
        let written = loop {
            let call = match &self.prior {
                Some(prior) => {
                    let r = &self.request;
                    let delete = prior.checkpoint_rows();
                    store
                        .replace_checkpoints(r.session, r.fence, rows.clone(), delete)
                        .await
                }
                None => store.create_artifacts(rows.clone()).await,
            };
            match call {
                Ok(_) => break Ok(()),
                Err(StoreError::Conflict { .. } | StoreError::NotFound { .. })
                    if retried && already_written(store, &rows).await =>
                {
                    break Ok(())
                }
                Err(e) if e.is_transient() => {
                    warn!(error = %e, delay = ?backoff.delay(), "artifact rows not written; retrying");
                    tokio::time::sleep(backoff.delay()).await;
                    backoff.advance();
                    retried = true;
                }
                Err(e) => break Err(e),
            }
        };
        match written {
            Ok(()) => {
                self.progress.update(|o| o.rows_written = true);
                if let Some(prior) = &self.prior {
                    prior.delete_unpromoted(&*self.blobs, &rows).await;
                }
            }
            Err(e) => {
                let cause = format!("artifact rows not written: {}", error_chain(&e));
                warn!(error = %e, "artifact rows not written; their bytes remain");
                self.progress.update(|o| rows_failed(o, &cause));
            }
        }
    }
}

/// Whether every row of `rows` is stored as it is (by id and key).
async fn already_written(store: &dyn Store, rows: &[NewArtifact]) -> bool {
    let ids: Vec<_> = rows.iter().map(|r| r.id).collect();
    match store.get_artifacts(&ids).await {
        Ok(found) => {
            found.len() == rows.len()
                && found
                    .iter()
                    .zip(rows)
                    .all(|(a, r)| a.id == r.id && a.blob_key == r.blob_key && a.fence == r.fence)
        }
        Err(_) => false,
    }
}
