//! What one checkpoint changes: the rows it inserts and deletes in its one
//! transition, the state it keeps once they are written, and the bytes it
//! deletes after.

use korvus_store::{ArtifactId, NewArtifact};
use korvus_workspace::WorkspacePath;

use super::read::Read;
use super::state::{CheckpointState, Known, Version};
use super::{ChangingFile, CheckpointOutcome};
use crate::outcome::StoredFile;

/// The rows, state and bytes one checkpoint changes.
#[derive(Debug, Default)]
pub(super) struct Change {
    /// Checkpoint rows to insert.
    pub insert: Vec<NewArtifact>,
    /// Checkpoint rows to delete (superseded or dropped).
    pub delete: Vec<ArtifactId>,
    /// What the run knows of each path once the rows are written (`None`:
    /// forget it).
    pub after: Vec<(WorkspacePath, Option<Known>)>,
    /// Bytes of the deleted rows, deleted once the rows are written.
    pub obsolete: Vec<String>,
    /// Bytes no row will ever name (a read that found its file
    /// changing), deleted whatever happens.
    pub orphans: Vec<String>,
}

impl Change {
    /// Takes in what became of one file. `against_known`: its bytes were
    /// compared with what the run knew of it (not with its restored twin).
    pub(super) fn add(
        &mut self,
        state: &mut CheckpointState,
        outcome: &mut CheckpointOutcome,
        path: WorkspacePath,
        known: Option<Known>,
        against_known: bool,
        read: Read,
    ) {
        match read {
            Read::Stored {
                row,
                stat,
                racy,
                torn,
            } => {
                state.skips.remove(&path);
                if let Some(old) = known.and_then(|k| k.version) {
                    self.supersede(old);
                }
                let mut stored = StoredFile::of(&row);
                stored.torn = torn;
                outcome.stored.push(stored);
                let version = Version {
                    artifact: row.id,
                    blob_key: row.blob_key.clone(),
                    sha256: row.sha256.clone(),
                    size: row.size_bytes,
                    content_type: row.content_type.clone(),
                    torn,
                };
                let next = Known {
                    stat,
                    racy,
                    version: Some(version),
                };
                self.after.push((path, Some(next)));
                self.insert.push(*row);
            }
            Read::Same { stat, racy } => {
                state.skips.remove(&path);
                outcome.unchanged += 1;
                // Equal to its own checkpoint, or to its restored twin (then
                // a checkpoint of other bytes is superseded by nothing).
                let version = match known {
                    Some(k) if against_known => k.version,
                    Some(k) => {
                        if let Some(old) = k.version {
                            self.supersede(old);
                        }
                        None
                    }
                    None => None,
                };
                let next = Known {
                    stat,
                    racy,
                    version,
                };
                self.after.push((path, Some(next)));
            }
            Read::Changing { orphan } => {
                let skips = state.skips.entry(path.clone()).or_insert(0);
                *skips += 1;
                outcome.changing.push(ChangingFile {
                    path: path.as_str().to_owned(),
                    skips: *skips,
                });
                self.orphans.extend(orphan);
            }
            Read::Skipped(skipped) => {
                outcome.skipped.push(skipped);
                if let Some(known) = known {
                    self.drop(state, outcome, path, known);
                }
            }
            Read::Failed(failed) => outcome.failed.push(failed),
        }
    }

    /// Forgets a path the run no longer stores: its checkpoint row and
    /// bytes go.
    pub(super) fn drop(
        &mut self,
        state: &mut CheckpointState,
        outcome: &mut CheckpointOutcome,
        path: WorkspacePath,
        known: Known,
    ) {
        state.skips.remove(&path);
        if let Some(old) = known.version {
            self.supersede(old);
            outcome.dropped.push(path.as_str().to_owned());
        }
        self.after.push((path, None));
    }

    fn supersede(&mut self, old: Version) {
        self.delete.push(old.artifact);
        self.obsolete.push(old.blob_key);
    }
}

impl CheckpointOutcome {
    /// The outcome of a checkpoint that has done nothing yet.
    pub(super) fn new() -> Self {
        Self {
            reason: None,
            stored: Vec::new(),
            unchanged: 0,
            changing: Vec::new(),
            dropped: Vec::new(),
            skipped: Vec::new(),
            skipped_unlisted: 0,
            failed: Vec::new(),
            rows_written: false,
        }
    }
}
