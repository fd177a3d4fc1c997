//! The harvest and persist phase of korvus: what a session left behind in
//! its scratch directory, stored bytes-first and rows-second.
//!
//! # Overview
//!
//! [`persist`] walks a scratch dir (lexical order, never following
//! symlinks, pruning hidden names and the read-only trees that
//! `korvus-workspace`'s [`read_only_prefixes`](korvus_workspace::read_only_prefixes)
//! names), trims the result to the file cap (always keeping the root
//! `report.md`; what it leaves out is a [`Skipped`] with its
//! [`SkipReason`]), then stores each file through a
//! [`BlobStore`](korvus_blob::BlobStore) — `report.md` at the deterministic
//! report key, anything else at a unique artifact key — and writes all
//! artifact rows through the [`Store`](korvus_store::Store) in one call.
//! The [`PersistOutcome`] says what was stored, unchanged, skipped and
//! failed and whether the rows were written; it is stored after the rows
//! as the harvest manifest, at the key the revision's report row
//! references ([`PersistOutcome::manifest_key`]). [`sweep`] finds and
//! deletes bytes no row references. `korvus-session` runs the phase when
//! a run returns.
//!
//! The root `report.md` has outcomes of its own ([`ReportFile`]) and its own
//! size limit ([`PersistConfig::report_max_bytes`], 8 MiB by default,
//! independent of the artifact limit): over it, or when its upload or its
//! artifact row fails, it is [`ReportFile::Failed`] (it existed but is not
//! stored, so no report row may point at it); a 0-byte one is
//! [`ReportFile::Empty`] (nothing was authored). The manifest's `report`
//! field says which. [`PersistOutcome::detail`] is the cause-first text of a
//! degraded phase, bounded to [`DETAIL_MAX_BYTES`], for the report row.
//!
//! The code reads in the order the phase runs: `walk.rs` (the walk, the
//! size limits and the cap), `agent_state.rs` (a real agent's kept thread,
//! harvested as `agent_state` beside the walk), `persist.rs` (the orchestration: detached
//! task, timeout, uploads in parallel, one durability barrier, one row
//! batch, manifest), `file.rs` (open, read or stream, and upload one
//! file), `manifest.rs` (the harvest manifest) and `outcome.rs` (the public
//! result types); `sweep.rs` is the orphan-blob sweeper. Every file upload
//! goes through `korvus-workspace`'s [`upload`](korvus_workspace::upload()),
//! which also stores the workspace archive, so the key rule is written once;
//! the shared file names ([`REPORT_FILE`], [`HARVEST_MANIFEST`]) come from
//! there too.
//!
//! # Why it is shaped like this
//!
//! A cancelled or failed run's files are the ones worth keeping, so the
//! phase runs detached from the run's cancellation and bounded by its own
//! timeout. Bytes go first because a row must never point at missing
//! bytes; stray bytes are harmless. Nothing here can stop the report row
//! from landing: every failure degrades to a reported file. Every file is
//! opened through a cap-std `Dir` of the scratch dir, so nothing a session
//! planted (a symlink, a path swapped after the walk, a FIFO) makes the
//! phase read outside it or hang.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use korvus_harvest::{persist, PersistConfig, PersistRequest, ReportFile};
//! use korvus_store::{IncidentId, MemoryStore, SessionId};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let store = Arc::new(MemoryStore::new());
//! let request = PersistRequest {
//!     incident: IncidentId::new(),
//!     session: SessionId::new(),
//!     revision: 1,
//!     fence: 1,
//!     scratch: None,
//!     skip_prefixes: Vec::new(),
//!     restored: Default::default(),
//! };
//! // Without a blob store the phase is skipped, not failed.
//! let outcome = persist(store, None, &PersistConfig::default(), request).await;
//! assert!(!outcome.attempted);
//! assert_eq!(outcome.report, ReportFile::Absent);
//! # }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod agent_state;
mod checkpoint;
mod config;
mod content_type;
mod file;
mod held;
mod manifest;
mod outcome;
mod persist;
mod stat;
mod sweep;
mod walk;

pub use crate::checkpoint::state::final_kind;
pub use crate::checkpoint::{ChangingFile, CheckpointOutcome, Checkpointer, TORN_AFTER_SKIPS};
pub use crate::config::{
    PersistConfig, PersistRequest, DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_STORED_BYTES,
    DEFAULT_REPORT_MAX_BYTES,
};
pub use crate::content_type::{content_type_for, OCTET_STREAM};
pub use crate::held::{persist_held, HeldRows};
pub use crate::manifest::MANIFEST_PATH;
pub use crate::outcome::{
    FailStage, FailedFile, PersistOutcome, ReportFile, StoredFile, UnchangedFile, DETAIL_MAX_BYTES,
};
pub use crate::persist::persist;
pub use crate::sweep::{
    sweep, Orphan, SweepConfig, SweepError, SweepReport, DEFAULT_CLOCK_SKEW, DEFAULT_SWEEP_GRACE,
    MAX_REPORTED, SWEEP_PAGE,
};
pub use crate::walk::{SkipReason, Skipped, DEFAULT_MAX_FILES, MAX_LISTED_SKIPS};
/// The shared file names this crate relies on, defined once in
/// `korvus-workspace` and re-exported for callers of the harvest.
pub use korvus_workspace::{HARVEST_MANIFEST, REPORT_FILE};
