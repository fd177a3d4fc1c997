//! The persist phase's inputs: its limits ([`PersistConfig`]) and what
//! one phase works on ([`PersistRequest`]) — shared by the landing, the
//! checkpoints and the files they store.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use korvus_store::{IncidentId, SessionId};
use korvus_workspace::{RestoredFile, WorkspacePath};

use crate::DEFAULT_MAX_FILES;

/// The default of [`PersistConfig::report_max_bytes`]: 8 MiB. A report is
/// read by people and rendered whole; anything larger is not a report.
pub const DEFAULT_REPORT_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// The default of [`PersistConfig::max_file_bytes`]: 1 GiB. The harvest
/// hands each file to the blob store open
/// ([`BlobStore::put_file`](korvus_blob::BlobStore::put_file)) and never
/// reads one whole: `FsBlobStore` copies it through a small buffer and S3
/// holds one only below its multipart threshold, so the limit bounds
/// storage and time, not the process's memory.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1024 * 1024 * 1024;

/// The default of [`PersistConfig::max_stored_bytes`]: 10 GiB, the
/// scratch limit `korvus` applies by default.
pub const DEFAULT_MAX_STORED_BYTES: u64 = 10 * 1024 * 1024 * 1024;

/// Limits of the persist phase.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PersistConfig {
    /// At most this many files are stored (`report.md` always kept).
    pub max_files: usize,
    /// Files larger than this are skipped. Not applied to the root
    /// `report.md`, which has its own limit.
    pub max_file_bytes: u64,
    /// The root `report.md` larger than this is not stored and the outcome's
    /// report is [`ReportFile::Failed`](crate::ReportFile::Failed) (it existed but cannot be stored).
    /// Independent of `max_file_bytes`; [`DEFAULT_REPORT_MAX_BYTES`] by
    /// default.
    pub report_max_bytes: u64,
    /// At most this many bytes — logical sizes, each inode once — are
    /// stored for a revision, its checkpoints and its landing together;
    /// files past it are skipped and listed
    /// ([`SkipReason::OverBudget`](crate::SkipReason::OverBudget)), the root
    /// `report.md` first in line. [`DEFAULT_MAX_STORED_BYTES`] by default;
    /// `korvus` sets it to the scratch limit.
    pub max_stored_bytes: u64,
    /// Uploads in flight at once.
    pub concurrency: usize,
    /// The whole phase is bounded by this, whatever the backends do.
    pub timeout: Duration,
    /// The harvest manifest, stored after the phase (also after a phase
    /// cut short by `timeout`), is bounded by this.
    pub manifest_timeout: Duration,
}

impl Default for PersistConfig {
    fn default() -> Self {
        Self {
            max_files: DEFAULT_MAX_FILES,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            report_max_bytes: DEFAULT_REPORT_MAX_BYTES,
            max_stored_bytes: DEFAULT_MAX_STORED_BYTES,
            concurrency: 8,
            timeout: Duration::from_secs(120),
            manifest_timeout: Duration::from_secs(10),
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
    /// The fence of the run that lands it: its artifact rows are written
    /// only while it is the session's.
    pub fence: u64,
    /// The scratch dir; `None` skips the phase.
    pub scratch: Option<PathBuf>,
    /// Pruned from the walk: [`korvus_workspace::read_only_prefixes`].
    pub skip_prefixes: Vec<WorkspacePath>,
    /// Files restored on reopen, for the unchanged rule.
    pub restored: BTreeMap<WorkspacePath, RestoredFile>,
}
