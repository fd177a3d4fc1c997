//! Per-session scratch directories for korvus: created fresh, seeded from git
//! at a pinned commit, given their context, restored on reopen, archived and
//! removed.
//!
//! # Overview
//!
//! Each iteration of a session (its first run, then every reopen) runs in
//! `<root>/<session id>/<revision>`, a [`ScratchDir`] made by
//! [`create_iteration`] under a [`ScratchRoot`] (supplied by the embedder, or
//! owned and removed on release), so a dir an earlier iteration left behind
//! never blocks a later one; [`create`] makes the older one-dir-per-session
//! layout `<root>/<session id>`. Into it go, in this order:
//!
//! 1. the read-only trees of a repository at the session's pinned commit,
//!    written by a [`Seeder`] — for real by [`GitSeeder`] with the `git`
//!    binary (`skills/`, `docs/`, `runbooks/` by default);
//! 2. the inherited artifacts, read-only at [`context_path`]`(n, name)`, by
//!    [`materialize_context`];
//! 3. on reopen, the session's own earlier output, by [`restore_own_output`].
//!
//! [`read_only_prefixes`] is the one deny list (the seeded trees and
//! `context/`) that restore here and the harvest walk in `korvus-harvest`
//! both use. [`SkillCatalog`] reads `skills/*/SKILL.md` front matter. At the
//! end, [`archive`] packs the directory into one `workspace.tar.gz` (streamed
//! into a temporary file, capped by [`ArchiveConfig`]),
//! [`store_archive`] stores it bytes-first/row-second, and
//! [`ScratchDir::release`] removes it. [`reap`] removes the directories a
//! crash left behind, after stopping the agent process groups their runs
//! recorded ([`record_agent`], beside the scratch dir, `agents.rs`).
//!
//! [`upload_artifact`] is the one upload path for anything taken from a
//! workspace (the archive here, the harvested files and the harvest
//! manifest in `korvus-harvest`): bytes up first, the row to write handed
//! back. The file names every phase and runner agree on are defined once
//! here too: [`REPORT_FILE`], and under [`METADATA_DIR`] the
//! [`RUN_MANIFEST`] and the [`HARVEST_MANIFEST`].
//!
//! Rows and bytes go through the seams only: [`korvus_store::Store`] and
//! [`korvus_blob::BlobStore`]; which backends sit behind them is the
//! embedder's choice.
//!
//! # Why it is shaped like this
//!
//! A scratch dir is made with one non-recursive `mkdir` under a fresh id (or
//! a fresh revision of a session), so an existing directory is someone
//! else's and is refused. Everything a
//! session could have planted is handled without following symlinks: restore
//! writes only validated [`WorkspacePath`]s, archive and reap never follow a
//! link, and a failed seeding leaves no half-written tree. Every path rule
//! that two phases must agree on ([`read_only_prefixes`], [`context_path`])
//! has exactly one definition here. Filesystem work runs on tokio's blocking
//! pool.
//!
//! Read-only means mode bits (files 0444, directories 0555), and **root
//! ignores mode bits**: an agent running as root can write into seeded trees
//! and `context/`. Harvest still skips those prefixes, so nothing written
//! there is stored, but the files the agent reads may have been changed by
//! it. Run agents as an unprivileged user. See `docs/workspace.md`.
//!
//! # Example
//!
//! ```
//! use korvus_store::SessionId;
//! use korvus_workspace::{
//!     archive, GitSeeder, ScratchRoot, SeedOutcome, SeedSkipReason, Seeder, REPORT_FILE,
//! };
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> korvus_workspace::Result<()> {
//! let root = ScratchRoot::create_owned(&std::env::temp_dir()).await?;
//! let dir = root.create(SessionId::new()).await?;
//!
//! // An unpinned session is not seeded; the reason is for the caller to log.
//! let seeder = GitSeeder::default();
//! let outcome = seeder.seed(&dir, None).await?;
//! assert_eq!(outcome, SeedOutcome::Skipped(SeedSkipReason::NotPinned));
//!
//! std::fs::write(dir.path().join(REPORT_FILE), "# Findings\n").unwrap();
//! let packed = archive(dir.path()).await?;
//! assert_eq!(packed.files, 1);
//!
//! dir.release().await?;
//! let path = root.path().to_path_buf();
//! root.release().await?;
//! assert!(!path.exists());
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `mock` | `MockSeeder`, a [`mockall`](https://docs.rs/mockall) mock of [`Seeder`] |
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod agents;
mod archive;
mod context;
mod context_path;
mod error;
mod fetch;
mod fsutil;
mod kept;
mod reap;
mod remove;
mod scratch;
mod seed;
mod skills;
mod upload;

pub use crate::agents::{
    agent_record_path, forget_agent, record_agent, stop_recorded_agent, stop_recorded_agents,
};
pub use crate::archive::{
    archive, archive_with, store_archive, ArchiveConfig, WorkspaceArchive, ARCHIVE_CONTENT_TYPE,
    ARCHIVE_PATH, DEFAULT_ARCHIVE_MAX_BYTES,
};
pub use crate::context::{
    materialize_context, restore_own_output, ContextFile, ContextOutcome, FileFailure,
    RefuseReason, Refused, RestoreOutcome, RestoredFile, FETCH_CONCURRENCY,
};
pub use crate::context_path::context_path;
pub use crate::error::{Result, WorkspaceError};
pub use crate::kept::{
    discard, kept_dirs, mark_running, prune_kept, KeptDir, KeptRetention, PrunedKept,
    RUNNING_REASON,
};
pub use crate::reap::{
    keep, kept_reason, reap, reap_session_through, reap_sessions, session_dirs, unkeep, Reaped,
};
pub use crate::scratch::{create, create_iteration, ScratchDir, ScratchRoot};
#[cfg(feature = "mock")]
pub use crate::seed::MockSeeder;
pub use crate::seed::{GitSeeder, LeftOut, SeedOutcome, SeedReport, SeedSkipReason, Seeder};
pub use crate::skills::LoadSkills;
pub use crate::upload::{
    upload, upload_artifact, upload_file, UploadBody, UploadRow, STREAM_FROM_BYTES,
};
pub use korvus_paths::{
    default_trees, is_read_only, read_only_prefixes, tree_prefix, InvalidPath, WorkspacePath,
    AGENT_HOME, AGENT_STATE_DIR, AGENT_TMP, CONTEXT_DIR, HARVEST_MANIFEST, MAX_PATH_BYTES,
    MAX_SEGMENT_BYTES, METADATA_DIR, REPORT_FILE, REPORT_TEMPLATE, RUN_MANIFEST,
};
pub use korvus_paths::{
    Skill, SkillCatalog, SkippedSkill, MAX_SKILL_FILE_BYTES, SKILLS_DIR, SKILL_FILE,
};
