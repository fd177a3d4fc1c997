//! Checkpoints while a run goes: what changed in the scratch dir is stored
//! every interval, so a lost replica loses at most one interval, and the
//! landing then stores only what changed since the last checkpoint.
//!
//! A [`Checkpointer`] lives for one run (one revision at one fence). Each
//! [`checkpoint`](Checkpointer::checkpoint) walks the scratch dir as the
//! landing does (same skips, limits and cap, plus the agent's kept state),
//! judges each file by its `stat` against what the run already stored,
//! stores the new and changed ones as [`Checkpoint`](ArtifactKind::Checkpoint)
//! rows — bytes first, one barrier, then **one**
//! [`Store::replace_checkpoints`] that also deletes the versions they
//! supersede — and deletes the superseded bytes after. [`land`](Checkpointer::land)
//! runs the persist phase with what the checkpoints stored: an unchanged
//! file's checkpoint is promoted (its final row names the same bytes, in
//! the same transition that deletes the checkpoint rows), a changed one is
//! stored as usual.

mod change;
pub(crate) mod land;
mod read;
pub(crate) mod state;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use futures::stream::{self, StreamExt};
use serde::Serialize;
use tracing::{info_span, warn, Instrument};

use korvus_blob::{BlobKey, BlobStore};
use korvus_store::{ArtifactId, ArtifactKind, NewArtifact, Store, StoreError};
use korvus_workspace::{UploadRow, WorkspacePath, REPORT_FILE};

use self::change::Change;
use self::read::{read_file, Job, Read};
use self::state::{admission, standing, CheckpointState, InOrder, Known, Standing};
use crate::agent_state::agent_state_candidates;
use crate::config::{PersistConfig, PersistRequest};
use crate::outcome::{error_chain, FailStage, FailedFile, StoredFile};
use crate::walk::{
    apply_budget, apply_cap, apply_size_limits, harvest_candidates_admitting, Candidate, Skipped,
    Walk, WalkLimits,
};

/// Checkpoints in a row that may find one file changing while it is read
/// before the next one stores it torn: the bytes up to the size its read
/// began with ([`StoredFile::torn`]).
pub const TORN_AFTER_SKIPS: u32 = 3;

/// A file a checkpoint left for the next one: it changed while it was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ChangingFile {
    /// Workspace path.
    pub path: String,
    /// Checkpoints in a row that found it changing; at
    /// [`TORN_AFTER_SKIPS`] the next one stores it torn.
    pub skips: u32,
}

/// What one checkpoint did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct CheckpointOutcome {
    /// Why it stored nothing, or stopped, in words.
    pub reason: Option<String>,
    /// Files stored now as checkpoint rows (a torn one says so).
    pub stored: Vec<StoredFile>,
    /// Files equal to what the run already stored: nothing stored.
    pub unchanged: u64,
    /// Files that changed while read, left for the next checkpoint.
    pub changing: Vec<ChangingFile>,
    /// Paths whose checkpoint was deleted: the file is gone or no longer
    /// worth storing.
    pub dropped: Vec<String>,
    /// Entries left out by the walk, each with its reason (the first
    /// [`MAX_LISTED_SKIPS`](crate::MAX_LISTED_SKIPS)).
    pub skipped: Vec<Skipped>,
    /// Entries left out past those listed.
    pub skipped_unlisted: u64,
    /// Files that could not be stored, each with its cause.
    pub failed: Vec<FailedFile>,
    /// Whether the rows of `stored` (and the deletions of `dropped` and of
    /// the versions `stored` supersedes) were written; `true` when there
    /// were none.
    pub rows_written: bool,
}

/// The checkpoints of one run, and its landing.
///
/// Made when the run starts, with the persist request its landing would
/// use (the run's incident, session, revision, fence, scratch dir,
/// read-only prefixes and restored files), and kept by the one task that
/// checkpoints it: its methods take `&mut self`, so checkpoints of one run
/// never overlap. Nothing here holds a lock the agent could feel: the walk
/// and reads run on blocking threads over the scratch dir as it is.
#[derive(Debug)]
pub struct Checkpointer {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) blobs: Arc<dyn BlobStore>,
    pub(crate) config: PersistConfig,
    pub(crate) request: Arc<PersistRequest>,
    pub(crate) state: CheckpointState,
}

impl Checkpointer {
    /// A checkpointer for the run `request` describes, storing through
    /// `store` and `blobs` within `config`'s limits (the file cap counts
    /// the distinct paths the revision holds, across its checkpoints and
    /// its landing).
    pub fn new(
        store: Arc<dyn Store>,
        blobs: Arc<dyn BlobStore>,
        config: PersistConfig,
        request: PersistRequest,
    ) -> Self {
        Self {
            store,
            blobs,
            config,
            request: Arc::new(request),
            state: CheckpointState::default(),
        }
    }

    /// The paths this run holds a checkpoint row for.
    pub fn held_files(&self) -> usize {
        self.state
            .known
            .values()
            .filter(|k| k.version.is_some())
            .count()
    }

    /// Stores what changed in the scratch dir since the last checkpoint.
    ///
    /// A file this run already judged is unchanged when its `stat` (size,
    /// modification and change times, inode) is the same — it is not read
    /// — unless that stat was taken too close to a write to vouch for the
    /// bytes, then it is hashed once more. A new or changed file is read
    /// and stored as a checkpoint row, superseding its previous version
    /// (row deleted in the same transition, bytes deleted after, best
    /// effort: the blob sweeper collects what a failed delete leaves). A
    /// file that changes while it is read is left for the next checkpoint;
    /// after [`TORN_AFTER_SKIPS`] in a row, the bytes up to the size its
    /// read began with are stored, marked torn. A file gone since (or no
    /// longer worth storing) has its checkpoint deleted.
    ///
    /// Never fails as a whole: everything is in the outcome. A checkpoint
    /// of a superseded run (`Fenced`) or of a run that ended (`NotActive`)
    /// writes no row and says so in [`CheckpointOutcome::reason`].
    ///
    /// # Cancel safety
    /// Not cancel-safe: a checkpoint dropped after its rows were written
    /// leaves checkpoint rows this checkpointer does not know of (hidden,
    /// never restored, their bytes kept until the session is deleted).
    /// Await it before [`land`](Self::land).
    pub async fn checkpoint(&mut self) -> CheckpointOutcome {
        let span = info_span!(
            "checkpoint",
            session_id = %self.request.session,
            incident_id = %self.request.incident,
            revision = self.request.revision
        );
        self.run().instrument(span).await
    }
}

/// What the walk of one checkpoint found.
struct Walked {
    walk: Walk,
    unchanged: u64,
    work: Vec<(Candidate, Option<Known>)>,
    gone: Vec<WorkspacePath>,
    dir: Dir,
}

impl Checkpointer {
    async fn run(&mut self) -> CheckpointOutcome {
        let mut outcome = CheckpointOutcome::new();
        let Some(scratch) = self.request.scratch.clone() else {
            outcome.reason = Some("no scratch directory".into());
            return outcome;
        };
        let walked = match self.walk(scratch).await {
            Ok(w) => w,
            Err(reason) => {
                outcome.reason = Some(reason);
                return outcome;
            }
        };
        outcome.skipped = walked.walk.skipped;
        outcome.skipped_unlisted = walked.walk.unlisted;
        outcome.unchanged = walked.unchanged;
        let dir = Arc::new(walked.dir);
        let reads = self.read_all(walked.work, &dir).await;
        let mut change = Change::default();
        for (path, known, against_known, read) in reads {
            change.add(
                &mut self.state,
                &mut outcome,
                path,
                known,
                against_known,
                read,
            );
        }
        for path in walked.gone {
            if let Some(known) = self.state.known.get(&path).cloned() {
                change.drop(&mut self.state, &mut outcome, path, known);
            }
        }
        self.commit(change, &mut outcome).await;
        outcome.stored.sort_by(|a, b| a.path.cmp(&b.path));
        outcome
    }

    /// Walks the scratch dir and judges every candidate by its stat, on a
    /// blocking thread.
    async fn walk(&self, scratch: PathBuf) -> Result<Walked, String> {
        let known = Arc::clone(&self.state.known);
        let prefixes = self.request.skip_prefixes.clone();
        let limits = WalkLimits {
            max_bytes: self.config.max_file_bytes,
            max_files: self.config.max_files,
        };
        let budget = self.config.max_stored_bytes;
        let walked = tokio::task::spawn_blocking(move || {
            let mut admit = admission(&known, limits.max_files);
            let mut walk = harvest_candidates_admitting(&scratch, &prefixes, limits, &mut admit);
            apply_size_limits(&mut walk, limits.max_bytes);
            apply_cap(&mut walk, limits.max_files);
            walk.candidates.extend(agent_state_candidates(&scratch));
            apply_budget(&mut walk, budget);
            let dir = Dir::open_ambient_dir(&scratch, ambient_authority());
            judge(walk, &known, dir)
        })
        .await;
        match walked {
            Ok(Ok(w)) => Ok(w),
            Ok(Err(e)) => Err(format!("cannot open scratch dir: {e}")),
            Err(e) => Err(format!("checkpoint walk panicked: {e}")),
        }
    }

    /// Reads (and stores) every file of `work`, `config.concurrency` at a
    /// time.
    async fn read_all(
        &self,
        work: Vec<(Candidate, Option<Known>)>,
        dir: &Arc<Dir>,
    ) -> Vec<(WorkspacePath, Option<Known>, bool, Read)> {
        stream::iter(work)
            .map(|(candidate, known)| {
                let against_known = known
                    .as_ref()
                    .is_some_and(|k| candidate.stat == Some(k.stat));
                let job = self.job(&candidate, known.as_ref());
                async move {
                    let read = read_file(dir, &*self.blobs, job).await;
                    (candidate.path, known, against_known, read)
                }
            })
            .buffered(self.config.concurrency.max(1))
            .collect()
            .await
    }

    /// What to do with one file: compare with its last judged digest when
    /// its stat is unchanged (racy) or it has a restored twin (the
    /// unchanged rule); store it torn after too many skips.
    fn job(&self, candidate: &Candidate, known: Option<&Known>) -> Job {
        let path = candidate.path.as_str().to_owned();
        let twin = self.request.restored.get(&candidate.path);
        let compare = match known {
            Some(k) if candidate.stat == Some(k.stat) => k.digest(twin),
            _ => twin.map(|t| t.sha256),
        };
        let skips = self.state.skips.get(&candidate.path).copied().unwrap_or(0);
        Job {
            limit: if path == REPORT_FILE {
                self.config.report_max_bytes
            } else {
                self.config.max_file_bytes
            },
            compare,
            torn: skips >= TORN_AFTER_SKIPS,
            row: UploadRow {
                incident: self.request.incident,
                session: self.request.session,
                revision: self.request.revision,
                kind: ArtifactKind::Checkpoint,
                content_type: crate::content_type_for(&path),
                path: path.clone(),
                fence: self.request.fence,
            },
            path,
        }
    }

    /// Makes the stored bytes durable, writes the rows and deletions in one
    /// transition, then deletes the bytes of what it superseded — or, when
    /// the rows were not written, the bytes stored for them.
    async fn commit(&mut self, change: Change, outcome: &mut CheckpointOutcome) {
        let Change {
            insert,
            delete,
            after,
            mut obsolete,
            orphans,
        } = change;
        if insert.is_empty() && delete.is_empty() {
            outcome.rows_written = true;
            self.remember(after);
            self.delete_blobs(orphans).await;
            return;
        }
        let written = if insert.is_empty() {
            Ok(())
        } else {
            self.blobs
                .barrier()
                .await
                .map_err(|e| format!("stored bytes not made durable: {}", error_chain(&e)))
        };
        let written = match written {
            Ok(()) => self.write_rows(insert.clone(), delete).await,
            Err(cause) => Err(cause),
        };
        match written {
            Ok(()) => {
                outcome.rows_written = true;
                self.remember(after);
            }
            Err(cause) => {
                warn!(%cause, "checkpoint rows not written; their bytes are deleted");
                outcome.reason = Some(cause.clone());
                for s in outcome.stored.drain(..) {
                    outcome.failed.push(FailedFile {
                        path: s.path,
                        stage: FailStage::Row,
                        cause: cause.clone(),
                    });
                }
                outcome.dropped.clear();
                obsolete = insert.into_iter().map(|r| r.blob_key).collect();
            }
        }
        obsolete.extend(orphans);
        self.delete_blobs(obsolete).await;
    }

    /// Keeps what the checkpoint judged, once its rows (if any) are
    /// written. Copies the map only when the walk's snapshot is still
    /// alive, which it is not by now.
    fn remember(&mut self, after: Vec<(WorkspacePath, Option<Known>)>) {
        if after.is_empty() {
            return;
        }
        let known = Arc::make_mut(&mut self.state.known);
        for (path, next) in after {
            match next {
                Some(k) => known.insert(path, k),
                None => known.remove(&path),
            };
        }
    }

    /// One [`Store::replace_checkpoints`], retried with backoff while the
    /// store says the failure is transient, within the phase timeout. A
    /// retry refused after a lost acknowledgement checks whether its rows
    /// are there.
    async fn write_rows(
        &self,
        insert: Vec<NewArtifact>,
        delete: Vec<ArtifactId>,
    ) -> Result<(), String> {
        let r = &self.request;
        let deadline = tokio::time::Instant::now() + self.config.timeout;
        let mut backoff = korvus_store::Backoff::WRITES.start();
        let mut retried = false;
        loop {
            let call =
                self.store
                    .replace_checkpoints(r.session, r.fence, insert.clone(), delete.clone());
            let Err(e) = call.await else {
                return Ok(());
            };
            if retried && !e.is_transient() && self.already_written(&insert).await {
                return Ok(());
            }
            if !e.is_transient() || tokio::time::Instant::now() + backoff.delay() > deadline {
                return Err(match e {
                    StoreError::Fenced { .. } | StoreError::NotActive { .. } => {
                        format!("the run no longer owns its session: {e}")
                    }
                    e => format!("checkpoint rows not written: {}", error_chain(&e)),
                });
            }
            warn!(error = %e, delay = ?backoff.delay(), "checkpoint rows not written; retrying");
            tokio::time::sleep(backoff.delay()).await;
            backoff.advance();
            retried = true;
        }
    }

    /// Whether every row of `rows` is stored (by id and key).
    async fn already_written(&self, rows: &[NewArtifact]) -> bool {
        let ids: Vec<_> = rows.iter().map(|r| r.id).collect();
        match self.store.get_artifacts(&ids).await {
            Ok(found) => {
                found.len() == rows.len()
                    && found
                        .iter()
                        .zip(rows)
                        .all(|(a, r)| a.id == r.id && a.blob_key == r.blob_key)
            }
            Err(_) => false,
        }
    }

    /// Deletes bytes no row names any more, best effort: a failure is
    /// logged and the blob sweeper collects what it leaves.
    async fn delete_blobs(&self, keys: Vec<String>) {
        let keys: Vec<BlobKey> = keys
            .iter()
            .filter_map(|k| BlobKey::new(k.as_str()).ok())
            .collect();
        if keys.is_empty() {
            return;
        }
        for (key, e) in self.blobs.delete_many(&keys).await {
            warn!(%key, error = %e, "superseded checkpoint bytes not deleted; the sweeper will");
        }
    }
}

/// Judges every candidate of `walk` against `known`: unchanged by stat
/// (counted), or work to do; and lists the known paths the walk no longer
/// found.
fn judge(
    mut walk: Walk,
    known: &BTreeMap<WorkspacePath, Known>,
    dir: std::io::Result<Dir>,
) -> std::io::Result<Walked> {
    let dir = dir?;
    let mut unchanged = 0;
    let mut fresh = 0usize;
    let mut work = Vec::new();
    let mut lookup = InOrder::new(known);
    for candidate in &walk.candidates {
        let k = lookup.get(&candidate.path);
        match standing(k, candidate) {
            Standing::Unchanged(_) => unchanged += 1,
            Standing::Verify(k) => work.push((candidate.clone(), Some(k.clone()))),
            Standing::Changed => {
                fresh += usize::from(k.is_none());
                work.push((candidate.clone(), k.cloned()));
            }
        }
    }
    // Every candidate but the new ones is known: when they number all the
    // known paths, none is gone (a path is walked once).
    let gone = if walk.candidates.len() - fresh == known.len() {
        Vec::new()
    } else {
        let walked: std::collections::HashSet<&WorkspacePath> =
            walk.candidates.iter().map(|c| &c.path).collect();
        known
            .keys()
            .filter(|p| !walked.contains(p))
            .cloned()
            .collect()
    };
    walk.candidates.clear();
    Ok(Walked {
        walk,
        unchanged,
        work,
        gone,
        dir,
    })
}
