//! The runner seam of korvus: the small trait crate an agent adapter
//! implements and the session layer drives.
//!
//! # Overview
//!
//! A [`Runner`] does the work of a session: [`Runner::run`] one
//! investigation, [`Runner::resume`] one more iteration of a reopened
//! session. It gets a [`RunContext`] (the session row, its incident, the
//! [`InheritedFile`]s, the scratch dir, the turn log's write handle, the
//! [`Tools`] such as a [`DocsClient`], and the run's cancellation) and
//! returns a [`RunOutcome`] or a [`RunError`], each naming an
//! [`ExitReason`]. [`DocsSearch`] pins documentation search at the
//! session's commit and hands back a [`DocsLease`].
//!
//! The other halves live elsewhere: `korvus-session`'s `Manager` calls the
//! runner and re-exports everything here; `korvus-command`'s
//! `CommandRunner` implements it for any command-line program.
//!
//! # Why it is shaped like this
//!
//! An adapter should compile against the contract, not against the consumer:
//! like ripgrep's `grep-matcher`, this crate is what both sides depend on,
//! so `korvus-command` builds without the manager, the harvest or any
//! backend. It depends on the seam crates and `korvus-paths` only (for the
//! types a run sees: [`korvus_paths::WorkspacePath`],
//! [`korvus_paths::SkillCatalog`]) — not on `korvus-workspace`, so an
//! adapter builds without git seeding, tar or flate2.
//!
//! Exit reasons are validated values: a runner can hand over any text (an
//! agent's own words), but what reaches the session row is always a short
//! printable code, so no row write can fail on it.
//!
//! # Example
//!
//! ```
//! use async_trait::async_trait;
//! use korvus_runner::{ExitReason, RunContext, RunError, RunOutcome, Runner};
//! use korvus_store::Counters;
//!
//! #[derive(Debug)]
//! struct Echo;
//!
//! #[async_trait]
//! impl Runner for Echo {
//!     async fn run(&self, ctx: RunContext) -> Result<RunOutcome, RunError> {
//!         if ctx.cancel.is_cancelled() {
//!             let outcome = RunOutcome::new(ExitReason::CANCELLED, Counters::default());
//!             return Ok(outcome.with_author_finished(false));
//!         }
//!         Ok(RunOutcome::completed(Counters::default()))
//!     }
//!     async fn resume(&self, ctx: RunContext, _message: String) -> Result<RunOutcome, RunError> {
//!         self.run(ctx).await
//!     }
//! }
//! ```
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `mock` | `MockRunner`, `MockDocsSearch`, `MockDocsClient` ([`mockall`](https://docs.rs/mockall)) |
//! | `testing` | `testing::ScriptRunner`, a runner whose behaviour is a closure |
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod checkpoint;
mod context;
mod docs;
mod runner;
#[cfg(feature = "testing")]
pub mod testing;

pub use crate::checkpoint::CheckpointHook;
pub use crate::context::{InheritedFile, Resumed, RunContext, Tools};
pub use crate::docs::{DocsClient, DocsLease, DocsSearch};
pub use crate::runner::{RunError, RunOutcome, Runner};
pub use korvus_store::{exit_reason as exit, ExitReason, InvalidExitReason};

#[cfg(feature = "mock")]
pub use crate::docs::{MockDocsClient, MockDocsSearch};
#[cfg(feature = "mock")]
pub use crate::runner::MockRunner;
