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
//! A `report.md` is adopted only when this revision wrote it: one that is
//! still the restored report of an earlier revision (same digest) is the
//! unchanged rule's, and a revision never lands revision N−1's report as
//! its own. A dir whose output could not be stored whole is kept, and the
//! report row and the log say where.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use korvus_harvest::{persist, PersistOutcome, PersistRequest, ReportFile};
use korvus_store::{ArtifactKind, Session};
use korvus_workspace::{RestoredFile, WorkspacePath};
use tracing::{info, warn};

use crate::manager::Inner;

/// What a salvage stored of a lost run's scratch dir.
#[derive(Debug)]
pub(crate) struct Salvaged {
    /// The dead run's iteration dir.
    pub(crate) dir: PathBuf,
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
    pub(crate) fn detail(&self, cause: String) -> String {
        let mut text = format!("{cause}; {} file(s) of its scratch dir stored", self.stored);
        if let Some(d) = &self.detail {
            text.push_str("; ");
            text.push_str(d);
        }
        if !self.complete {
            text.push_str(&format!(
                "; the scratch dir is kept at {} (`korvus reap --apply` stores it once the cause is gone)",
                self.dir.display()
            ));
        }
        text
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
        let (Some(root), Some(_)) = (self.scratch(), self.blobs()) else {
            return None;
        };
        let dir = root.join(row.id.to_string()).join(row.revision.to_string());
        if !is_real_dir(&dir).await {
            return None;
        }
        let restored = self.restored_before(row).await;
        let outcome = persist(
            Arc::clone(self.store()).into_store(),
            self.blobs().clone(),
            &self.config().persist,
            PersistRequest {
                incident: row.incident_id,
                session: row.id,
                revision: row.revision,
                fence: row.fence,
                scratch: Some(dir.clone()),
                skip_prefixes: self.read_only().clone(),
                restored,
            },
        )
        .await;
        let salvaged = salvaged(self, dir, &outcome);
        if salvaged.complete {
            info!(session_id = %row.id, dir = %salvaged.dir.display(), stored = salvaged.stored, "salvaged the lost run's scratch dir");
        } else {
            warn!(session_id = %row.id, dir = %salvaged.dir.display(), errors = ?salvaged.detail, "the lost run's scratch dir was not stored whole; it is kept");
        }
        crate::metrics::salvaged(salvaged.stored as u64, salvaged.complete);
        Some(salvaged)
    }

    /// The session's own output of earlier revisions, newest per path, as
    /// the restore of the lost run put it into its dir: the unchanged rule
    /// then keeps an untouched `report.md` of revision N−1 from being
    /// adopted as this revision's. A read that fails leaves it empty (every
    /// file is then stored again, and a `report.md` adopted).
    async fn restored_before(&self, row: &Session) -> BTreeMap<WorkspacePath, RestoredFile> {
        let artifacts = match self.store().latest_session_artifacts(row.id).await {
            Ok(a) => a,
            Err(e) => {
                warn!(session_id = %row.id, error = %e, "earlier output not read for the salvage");
                return BTreeMap::new();
            }
        };
        let mut restored: BTreeMap<WorkspacePath, RestoredFile> = BTreeMap::new();
        for a in artifacts {
            if a.revision >= row.revision
                || !matches!(a.kind, ArtifactKind::Report | ArtifactKind::AgentOutput)
            {
                continue;
            }
            let (Ok(path), Ok(sha256)) = (WorkspacePath::new(&a.path), a.sha256.parse()) else {
                continue;
            };
            let newer = restored
                .get(&path)
                .is_some_and(|r| r.artifact.revision > a.revision);
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
    let complete = outcome.attempted
        && outcome.failed.is_empty()
        && outcome.rows_written
        && !matches!(outcome.report, ReportFile::Failed { .. });
    Salvaged {
        from: format!(
            "the scratch dir {} of the lost run, landed by manager {}",
            dir.display(),
            inner.ownership().owner(),
        ),
        dir,
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
