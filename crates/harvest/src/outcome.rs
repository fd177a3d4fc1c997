//! The public result types of the persist phase: [`PersistOutcome`] and
//! what it is made of. The outcome is also what the harvest manifest stores
//! (see `manifest.rs`), so its serialised shape is part of the contract.

use std::fmt;

use serde::Serialize;

use korvus_store::{ArtifactId, ArtifactKind, NewArtifact};

use crate::walk::Skipped;

/// A file stored by this phase (bytes uploaded; see [`PersistOutcome::rows_written`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct StoredFile {
    /// Workspace path.
    pub path: String,
    /// The new artifact's id.
    pub artifact_id: ArtifactId,
    /// `Report` for the root [`REPORT_FILE`](crate::REPORT_FILE),
    /// `AgentState` for an agent's kept state, else `AgentOutput`; a
    /// checkpoint's file is `Checkpoint`.
    pub kind: ArtifactKind,
    /// Where the bytes are.
    pub blob_key: String,
    /// MIME type.
    pub content_type: String,
    /// Size in bytes.
    pub size: u64,
    /// Hex SHA-256.
    pub sha256: String,
    /// Only the bytes up to the size its read began with: a checkpoint of a
    /// file that never stopped changing
    /// ([`TORN_AFTER_SKIPS`](crate::TORN_AFTER_SKIPS)).
    #[serde(skip_serializing_if = "is_false")]
    pub torn: bool,
    /// Not uploaded by the landing: its row names the bytes a checkpoint
    /// of this run stored ([`Checkpointer::land`](crate::Checkpointer::land)).
    #[serde(skip_serializing_if = "is_false")]
    pub promoted: bool,
}

/// Serde's test for the flags left out of the manifest when unset.
fn is_false(flag: &bool) -> bool {
    !flag
}

/// A file equal to the restored artifact at its path: not stored again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
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
    /// Checking its size: over its limit. Only the root `report.md` fails
    /// here (it has its own limit, and a report that existed but cannot be
    /// stored is a failure); other over-size files are skipped.
    Limit,
}

/// A file that could not be stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
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
    /// It existed but was empty (0 bytes): nothing was authored. It is
    /// listed in [`PersistOutcome::skipped`] as empty, and no document is
    /// stored.
    Empty,
    /// It existed but could not be stored: reading or uploading it failed,
    /// it was over [`PersistConfig::report_max_bytes`](crate::PersistConfig::report_max_bytes),
    /// or its artifact row was not written. No report row may point at it.
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
#[non_exhaustive]
pub struct PersistOutcome {
    /// `false` when the phase was skipped (no blob store or no scratch dir).
    pub attempted: bool,
    /// Why it was skipped or cut short, in words.
    pub reason: Option<String>,
    /// Files stored now (their rows written by this phase), promoted ones
    /// included.
    pub stored: Vec<StoredFile>,
    /// How many of `stored` were promoted from this run's checkpoints
    /// rather than uploaded ([`StoredFile::promoted`]).
    pub promoted: usize,
    /// Files equal to their restored artifact, not stored again.
    pub unchanged: Vec<UnchangedFile>,
    /// Entries left out, each with its reason: the first
    /// [`MAX_LISTED_SKIPS`](crate::MAX_LISTED_SKIPS).
    pub skipped: Vec<Skipped>,
    /// Entries left out past those listed in `skipped`, counted only (a
    /// scratch dir of millions of entries is walked whole, but not listed).
    pub skipped_unlisted: u64,
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
    /// The outcome of a phase that did not run, with the reason.
    pub(crate) fn skipped_phase(reason: &str) -> Self {
        Self {
            attempted: false,
            reason: Some(reason.to_owned()),
            ..Self::empty()
        }
    }

    /// The outcome of a phase that ran and has done nothing yet.
    pub(crate) fn empty() -> Self {
        Self {
            attempted: true,
            reason: None,
            stored: Vec::new(),
            promoted: 0,
            unchanged: Vec::new(),
            skipped: Vec::new(),
            skipped_unlisted: 0,
            failed: Vec::new(),
            report: ReportFile::Absent,
            rows_written: false,
            manifest_key: None,
        }
    }

    /// The outcome with its lists sorted by path: uploads finish in any
    /// order, and the outcome (and the manifest made from it) should not
    /// depend on that.
    pub(crate) fn sorted(mut self) -> Self {
        self.stored.sort_by(|a, b| a.path.cmp(&b.path));
        self.unchanged.sort_by(|a, b| a.path.cmp(&b.path));
        self.failed.sort_by(|a, b| a.path.cmp(&b.path));
        self
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
                    FailStage::Limit => "size of",
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

/// The most [`PersistOutcome::detail`] returns, in bytes: what a report
/// row's `detail` column holds.
pub const DETAIL_MAX_BYTES: usize = 4096;

impl PersistOutcome {
    /// The cause-first text of a degraded phase ([`error_text`](Self::error_text)),
    /// bounded to [`DETAIL_MAX_BYTES`] for the report row an operator reads.
    /// A longer text is cut on a character boundary and ends with `…`.
    /// `None` when nothing failed (an empty `report.md` is not a failure of
    /// this phase: see [`ReportFile::Empty`]).
    pub fn detail(&self) -> Option<String> {
        self.error_text()
            .map(|text| bounded(text, DETAIL_MAX_BYTES))
    }
}

/// `text` cut to at most `max` bytes on a character boundary, with `…`
/// marking a cut.
fn bounded(mut text: String, max: usize) -> String {
    const MARK: &str = "…";
    if text.len() <= max {
        return text;
    }
    let mut end = max.saturating_sub(MARK.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(MARK);
    text
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
        write!(f, "stored {}", self.stored.len())?;
        if self.promoted > 0 {
            write!(f, " ({} promoted)", self.promoted)?;
        }
        write!(
            f,
            ", unchanged {}, skipped {}, failed {}",
            self.unchanged.len(),
            self.skipped.len() as u64 + self.skipped_unlisted,
            self.failed.len()
        )
    }
}

impl StoredFile {
    /// What the outcome records of an uploaded file, from its row.
    pub(crate) fn of(row: &NewArtifact) -> Self {
        Self {
            path: row.path.clone(),
            artifact_id: row.id,
            kind: row.kind,
            blob_key: row.blob_key.clone(),
            content_type: row.content_type.clone(),
            size: row.size_bytes,
            sha256: row.sha256.clone(),
            torn: false,
            promoted: false,
        }
    }
}

/// An error and its sources, outermost first, joined with `: `: the cause
/// text of a [`FailedFile`].
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_cuts_on_a_char_boundary_and_marks_the_cut() {
        assert_eq!(bounded("short".into(), 10), "short");
        assert_eq!(bounded("x".repeat(10), 10), "x".repeat(10));
        // Two-byte characters: the cut never splits one.
        let cut = bounded("é".repeat(10), 10);
        assert!(cut.len() <= 10, "{cut}");
        assert_eq!(cut, format!("{}…", "é".repeat(3)));
    }
}
