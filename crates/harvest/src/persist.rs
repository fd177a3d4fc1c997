//! The persist phase: harvested files to blob storage first, rows second.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt};
use futures::stream::{self, StreamExt};
use serde::Serialize;
use tracing::{info_span, warn, Instrument};

use korvus_blob::{artifact_key, report_key, BlobKey, BlobStore, PutOptions, Sha256Digest};
use korvus_store::{ArtifactId, ArtifactKind, IncidentId, NewArtifact, SessionId, Store};
use korvus_workspace::{RestoredFile, WorkspacePath};

use crate::walk::{
    apply_cap, apply_size_limits, harvest_candidates, Candidate, SkipReason, Skipped, REPORT_FILE,
};
use crate::{content_type_for, DEFAULT_MAX_FILES};

/// Workspace path of the harvest manifest. Dot-prefixed, so no harvest ever
/// picks it up and no session file can collide with it.
pub const MANIFEST_PATH: &str = ".korvus/harvest.json";

/// Limits of the persist phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistConfig {
    /// At most this many files are stored (`report.md` always kept).
    pub max_files: usize,
    /// Files larger than this are skipped.
    pub max_file_bytes: u64,
    /// Uploads in flight at once.
    pub concurrency: usize,
    /// The whole phase is bounded by this, whatever the backends do.
    pub timeout: Duration,
}

impl Default for PersistConfig {
    fn default() -> Self {
        Self {
            max_files: DEFAULT_MAX_FILES,
            max_file_bytes: 16 * 1024 * 1024,
            concurrency: 8,
            timeout: Duration::from_secs(120),
        }
    }
}

/// What one persist phase works on.
#[derive(Debug, Clone)]
pub struct PersistRequest {
    /// The session's incident.
    pub incident: IncidentId,
    /// The session.
    pub session: SessionId,
    /// The report revision this iteration lands.
    pub revision: u32,
    /// The scratch dir; `None` skips the phase.
    pub scratch: Option<PathBuf>,
    /// Pruned from the walk: [`korvus_workspace::read_only_prefixes`] plus
    /// the checkout dir when it sits inside the scratch dir.
    pub skip_prefixes: Vec<WorkspacePath>,
    /// Files restored on reopen, for the unchanged rule.
    pub restored: BTreeMap<WorkspacePath, RestoredFile>,
}

/// A file stored by this phase (bytes uploaded; see [`PersistOutcome::rows_written`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredFile {
    /// Workspace path.
    pub path: String,
    /// The new artifact's id.
    pub artifact_id: ArtifactId,
    /// `Report` for the root `report.md`, else `AgentOutput`.
    pub kind: ArtifactKind,
    /// Where the bytes are.
    pub blob_key: String,
    /// MIME type.
    pub content_type: String,
    /// Size in bytes.
    pub size: u64,
    /// Hex SHA-256.
    pub sha256: String,
}

/// A file equal to the restored artifact at its path: not stored again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnchangedFile {
    /// Workspace path.
    pub path: String,
    /// The earlier artifact it equals.
    pub artifact_id: ArtifactId,
    /// The earlier artifact's key (a report keeps pointing at it).
    pub blob_key: String,
    /// Size in bytes.
    pub size: u64,
}

/// The step at which a file failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailStage {
    /// Reading it from the scratch dir.
    Read,
    /// Uploading its bytes.
    Upload,
    /// Writing its row (its bytes are stored and harmless).
    Row,
}

/// A file that could not be stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedFile {
    /// Workspace path.
    pub path: String,
    /// Where it failed.
    pub stage: FailStage,
    /// The cause, in words.
    pub cause: String,
}

/// What happened to the root `report.md`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ReportFile {
    /// There was no `report.md` at the root (or the phase did not run).
    Absent,
    /// Stored now at `key`.
    Stored {
        /// The report key of this revision.
        key: String,
        /// Size in bytes.
        bytes: u64,
    },
    /// Equal to the restored earlier revision: the report points at its key.
    Unchanged {
        /// The earlier key.
        key: String,
        /// Size in bytes.
        bytes: u64,
    },
    /// It existed but could not be stored (read or upload failed).
    Failed {
        /// The cause.
        cause: String,
    },
}

impl ReportFile {
    /// The key and size a report row should carry, if any.
    pub fn markdown(&self) -> Option<(&str, u64)> {
        match self {
            ReportFile::Stored { key, bytes } | ReportFile::Unchanged { key, bytes } => {
                Some((key, *bytes))
            }
            _ => None,
        }
    }
}

/// Everything the persist phase did. Serialised as the harvest manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PersistOutcome {
    /// `false` when the phase was skipped (no blob store or no scratch dir).
    pub attempted: bool,
    /// Why it was skipped or cut short, in words.
    pub reason: Option<String>,
    /// Files stored now.
    pub stored: Vec<StoredFile>,
    /// Files equal to their restored artifact, not stored again.
    pub unchanged: Vec<UnchangedFile>,
    /// Entries left out, each with its reason.
    pub skipped: Vec<Skipped>,
    /// Files that failed, each with its cause.
    pub failed: Vec<FailedFile>,
    /// The root `report.md`.
    pub report: ReportFile,
    /// Whether the artifact rows of `stored` were written.
    pub rows_written: bool,
    /// Blob key of the harvest manifest, when it was stored.
    pub manifest_key: Option<String>,
}

impl PersistOutcome {
    fn skipped_phase(reason: &str) -> Self {
        Self {
            attempted: false,
            reason: Some(reason.to_owned()),
            ..Self::empty()
        }
    }

    fn empty() -> Self {
        Self {
            attempted: true,
            reason: None,
            stored: Vec::new(),
            unchanged: Vec::new(),
            skipped: Vec::new(),
            failed: Vec::new(),
            report: ReportFile::Absent,
            rows_written: false,
            manifest_key: None,
        }
    }

    /// Every failure joined into one line, cause first
    /// (`"<cause> (upload of out.csv); …"`), or `None` when nothing failed.
    pub fn error_text(&self) -> Option<String> {
        let mut parts: Vec<String> = self
            .failed
            .iter()
            .map(|f| {
                let stage = match f.stage {
                    FailStage::Read => "read",
                    FailStage::Upload => "upload",
                    FailStage::Row => "row of",
                };
                format!("{} ({stage} {})", f.cause, f.path)
            })
            .collect();
        if let Some(reason) = self.reason.as_ref().filter(|_| self.attempted) {
            parts.insert(0, reason.clone());
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

impl fmt::Display for PersistOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.attempted {
            return write!(
                f,
                "persist skipped: {}",
                self.reason.as_deref().unwrap_or("")
            );
        }
        write!(
            f,
            "stored {}, unchanged {}, skipped {}, failed {}",
            self.stored.len(),
            self.unchanged.len(),
            self.skipped.len(),
            self.failed.len()
        )
    }
}

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
/// Order: every upload first (at most `config.concurrency` at once), then
/// the harvest manifest, then all artifact rows in **one** store call. A
/// failed upload gets no row; a failed row write leaves harmless bytes and
/// is reported. Nothing here fails the phase as a whole: every failure
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
    let Some(blobs) = blobs else {
        return PersistOutcome::skipped_phase("no blob store configured");
    };
    let Some(scratch) = request.scratch.clone() else {
        return PersistOutcome::skipped_phase("no scratch directory");
    };
    let progress = Arc::new(Mutex::new(PersistOutcome::empty()));
    let span = info_span!(
        "persist",
        session_id = %request.session,
        incident_id = %request.incident,
        revision = request.revision
    );
    let task = tokio::spawn(
        run(
            store,
            blobs,
            config.clone(),
            request,
            scratch,
            Arc::clone(&progress),
        )
        .instrument(span),
    );
    let abort = task.abort_handle();
    match tokio::time::timeout(config.timeout, task).await {
        Ok(Ok(())) => take(&progress),
        Ok(Err(join)) => {
            let mut outcome = take(&progress);
            cut_short(&mut outcome, format!("persist phase panicked: {join}"));
            outcome
        }
        Err(_) => {
            abort.abort();
            let mut outcome = take(&progress);
            cut_short(
                &mut outcome,
                format!("persist phase timed out after {:?}", config.timeout),
            );
            outcome
        }
    }
}

/// A snapshot of the outcome, lists sorted by path: uploads finish in any
/// order, the outcome (and the manifest) should not depend on it.
fn take(progress: &Mutex<PersistOutcome>) -> PersistOutcome {
    let mut outcome = progress.lock().unwrap_or_else(|p| p.into_inner()).clone();
    outcome.stored.sort_by(|a, b| a.path.cmp(&b.path));
    outcome.unchanged.sort_by(|a, b| a.path.cmp(&b.path));
    outcome.failed.sort_by(|a, b| a.path.cmp(&b.path));
    outcome
}

/// Marks an interrupted phase: stored files never got rows, pending ones
/// never finished.
fn cut_short(outcome: &mut PersistOutcome, reason: String) {
    warn!(%reason, "persist phase cut short");
    if !outcome.rows_written {
        // The manifest's row was not written either.
        outcome.manifest_key = None;
        for s in outcome.stored.drain(..) {
            outcome.failed.push(FailedFile {
                path: s.path,
                stage: FailStage::Row,
                cause: reason.clone(),
            });
        }
    }
    outcome.failed.sort_by(|a, b| a.path.cmp(&b.path));
    outcome.reason = Some(reason);
}

enum FileResult {
    Stored(Box<(StoredFile, NewArtifact)>),
    Unchanged(UnchangedFile),
    Skipped(Skipped),
    Failed(FailedFile),
}

async fn run(
    store: Arc<dyn Store>,
    blobs: Arc<dyn BlobStore>,
    config: PersistConfig,
    request: PersistRequest,
    scratch: PathBuf,
    progress: Arc<Mutex<PersistOutcome>>,
) {
    let update = |f: &mut dyn FnMut(&mut PersistOutcome)| {
        f(&mut progress.lock().unwrap_or_else(|p| p.into_inner()));
    };
    let walk_scratch = scratch.clone();
    let prefixes = request.skip_prefixes.clone();
    let (max_files, max_bytes) = (config.max_files, config.max_file_bytes);
    let walked = tokio::task::spawn_blocking(move || {
        let mut walk = harvest_candidates(&walk_scratch, &prefixes);
        apply_size_limits(&mut walk, max_bytes);
        apply_cap(&mut walk, max_files);
        let dir = Dir::open_ambient_dir(&walk_scratch, ambient_authority());
        (walk, dir)
    })
    .await;
    let (walk, dir) = match walked {
        Ok((walk, Ok(dir))) => (walk, Arc::new(dir)),
        Ok((_, Err(e))) => {
            update(&mut |o| o.reason = Some(format!("cannot open scratch dir: {e}")));
            return;
        }
        Err(e) => {
            update(&mut |o| o.reason = Some(format!("harvest walk panicked: {e}")));
            return;
        }
    };
    // Until report.md is stored, it counts as failed: a timeout or panic
    // mid-phase must not look like "there was no report".
    let has_report = walk
        .candidates
        .iter()
        .any(|c| c.path.as_str() == REPORT_FILE);
    update(&mut |o| {
        o.skipped = walk.skipped.clone();
        if has_report {
            o.report = ReportFile::Failed {
                cause: "report.md was not stored before the phase ended".into(),
            };
        }
    });

    let request = Arc::new(request);
    let results: Vec<FileResult> = stream::iter(walk.candidates)
        .map(|candidate| {
            let (dir, blobs, request, config) = (
                Arc::clone(&dir),
                Arc::clone(&blobs),
                Arc::clone(&request),
                config.clone(),
            );
            let progress = Arc::clone(&progress);
            async move {
                let result = one_file(&dir, &*blobs, &request, &config, candidate).await;
                record(&progress, &result);
                result
            }
        })
        .buffered(config.concurrency.max(1))
        .collect()
        .await;

    let mut rows: Vec<NewArtifact> = Vec::new();
    for r in results {
        if let FileResult::Stored(stored) = r {
            rows.push(stored.1);
        }
    }
    // The manifest describes the uploads; it goes up before any row.
    let manifest = take(&progress);
    if let Some(row) = store_manifest(&*blobs, &request, &manifest).await {
        update(&mut |o| o.manifest_key = Some(row.blob_key.clone()));
        rows.push(row);
    }

    if rows.is_empty() {
        update(&mut |o| o.rows_written = true);
        return;
    }
    match store.create_artifacts(rows).await {
        Ok(_) => update(&mut |o| o.rows_written = true),
        Err(e) => {
            let cause = format!("artifact rows not written: {e}");
            warn!(error = %e, "artifact rows not written; their bytes remain");
            update(&mut |o| {
                for s in o.stored.drain(..) {
                    o.failed.push(FailedFile {
                        path: s.path,
                        stage: FailStage::Row,
                        cause: cause.clone(),
                    });
                }
                o.manifest_key = None;
            });
        }
    }
}

fn record(progress: &Mutex<PersistOutcome>, result: &FileResult) {
    let mut o = progress.lock().unwrap_or_else(|p| p.into_inner());
    match result {
        FileResult::Stored(stored) => {
            let s = &stored.0;
            if s.kind == ArtifactKind::Report {
                o.report = ReportFile::Stored {
                    key: s.blob_key.clone(),
                    bytes: s.size,
                };
            }
            o.stored.push(s.clone());
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
                o.report = ReportFile::Failed {
                    cause: format!("report.md skipped: {}", s.reason),
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
    }
}

enum Read_ {
    Bytes(Vec<u8>),
    Skip(SkipReason),
}

/// Reads a candidate through the scratch dir's capability: no path can lead
/// outside it, a FIFO swapped in cannot block (non-blocking open), and
/// whatever is opened must be a regular file within the size limit.
fn read_candidate(dir: &Dir, path: &Path, limit: u64) -> std::io::Result<Read_> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW);
    let file = dir.open_with(path, &options)?;
    let md = file.metadata()?;
    if !md.is_file() {
        return Ok(Read_::Skip(SkipReason::NotRegular {
            kind: "not a regular file when opened".into(),
        }));
    }
    let mut bytes = Vec::with_capacity(md.len().min(limit) as usize);
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.is_empty() {
        return Ok(Read_::Skip(SkipReason::Empty));
    }
    if bytes.len() as u64 > limit {
        return Ok(Read_::Skip(SkipReason::TooLarge {
            size: md.len().max(bytes.len() as u64),
            limit,
        }));
    }
    Ok(Read_::Bytes(bytes))
}

async fn one_file(
    dir: &Arc<Dir>,
    blobs: &dyn BlobStore,
    request: &PersistRequest,
    config: &PersistConfig,
    candidate: Candidate,
) -> FileResult {
    let path_text = candidate.path.as_str().to_owned();
    if candidate.size > config.max_file_bytes {
        return FileResult::Skipped(Skipped {
            path: path_text,
            reason: SkipReason::TooLarge {
                size: candidate.size,
                limit: config.max_file_bytes,
            },
        });
    }
    let read_dir = Arc::clone(dir);
    let rel = candidate.path.to_relative_path();
    let limit = config.max_file_bytes;
    let read = tokio::task::spawn_blocking(move || read_candidate(&read_dir, &rel, limit)).await;
    let bytes = match read {
        Ok(Ok(Read_::Bytes(b))) => b,
        Ok(Ok(Read_::Skip(reason))) => {
            return FileResult::Skipped(Skipped {
                path: path_text,
                reason,
            })
        }
        Ok(Err(e)) => {
            return FileResult::Failed(FailedFile {
                path: path_text,
                stage: FailStage::Read,
                cause: e.to_string(),
            })
        }
        Err(e) => {
            return FileResult::Failed(FailedFile {
                path: path_text,
                stage: FailStage::Read,
                cause: format!("read panicked: {e}"),
            })
        }
    };
    let digest = Sha256Digest::of(&bytes);
    let size = bytes.len() as u64;
    if let Some(restored) = request.restored.get(&candidate.path) {
        if restored.sha256 == digest {
            return FileResult::Unchanged(UnchangedFile {
                path: path_text,
                artifact_id: restored.artifact.id,
                blob_key: restored.artifact.blob_key.clone(),
                size,
            });
        }
    }
    let id = ArtifactId::new();
    let (kind, key) = if path_text == REPORT_FILE {
        (
            ArtifactKind::Report,
            report_key(
                request.incident.as_uuid(),
                request.session.as_uuid(),
                request.revision,
            ),
        )
    } else {
        (
            ArtifactKind::AgentOutput,
            artifact_key(
                request.incident.as_uuid(),
                request.session.as_uuid(),
                id.as_uuid(),
                candidate.path.file_name(),
            ),
        )
    };
    let content_type = content_type_for(&path_text);
    let options = PutOptions {
        content_type: content_type.clone(),
        sha256: digest,
    };
    if let Err(e) = blobs.put(&key, Bytes::from(bytes), options).await {
        return FileResult::Failed(FailedFile {
            path: path_text,
            stage: FailStage::Upload,
            cause: error_chain(&e),
        });
    }
    let stored = StoredFile {
        path: path_text.clone(),
        artifact_id: id,
        kind,
        blob_key: key.to_string(),
        content_type: content_type.clone(),
        size,
        sha256: digest.to_hex(),
    };
    let row = NewArtifact {
        id,
        incident_id: request.incident,
        session_id: request.session,
        kind,
        path: path_text,
        blob_key: key.to_string(),
        content_type,
        size_bytes: size,
        sha256: digest.to_hex(),
        revision: request.revision,
    };
    FileResult::Stored(Box::new((stored, row)))
}

async fn store_manifest(
    blobs: &dyn BlobStore,
    request: &PersistRequest,
    outcome: &PersistOutcome,
) -> Option<NewArtifact> {
    let bytes = match serde_json::to_vec_pretty(outcome) {
        Ok(b) => b,
        Err(e) => {
            warn!(error = %e, "harvest manifest does not serialise");
            return None;
        }
    };
    let id = ArtifactId::new();
    let key: BlobKey = artifact_key(
        request.incident.as_uuid(),
        request.session.as_uuid(),
        id.as_uuid(),
        "harvest.json",
    );
    let options = PutOptions::for_bytes("application/json", &bytes);
    let size = bytes.len() as u64;
    let sha256 = options.sha256.to_hex();
    if let Err(e) = blobs.put(&key, Bytes::from(bytes), options).await {
        warn!(error = %error_chain(&e), "harvest manifest not stored");
        return None;
    }
    Some(NewArtifact {
        id,
        incident_id: request.incident,
        session_id: request.session,
        kind: ArtifactKind::AgentOutput,
        path: MANIFEST_PATH.to_owned(),
        blob_key: key.to_string(),
        content_type: "application/json".to_owned(),
        size_bytes: size,
        sha256,
        revision: request.revision,
    })
}

/// An error and its sources, outermost first, joined with `: `.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
