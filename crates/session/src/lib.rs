//! The session layer of korvus: the [`Manager`] an embedding service uses to
//! run long agent sessions and never lose what they produce.
//!
//! # Overview
//!
//! [`Manager::create`] writes a session row (`running`) and returns it at
//! once; the run happens in the background: a scratch dir is prepared
//! (`korvus-workspace`: seeded trees, inherited context, skills), the
//! [`Runner`] works in it, the files it left are persisted
//! (`korvus-harvest`: bytes first, rows second), the report row lands and
//! exactly one final status is written — whatever happened. [`Manager::cancel`],
//! [`Manager::wait`], [`Manager::stop`], [`Manager::await_settled`] and
//! [`Manager::watch`] observe and steer runs; [`Manager::reopen`] runs one
//! more iteration of a finished session and [`Manager::send_message`] one of
//! a session waiting for the user. [`LiveRuns`] shows which sessions this
//! process runs.
//!
//! The manager is composed from seams — `Arc<dyn CoordinatedStore>` (a
//! `Store` that also does replica `Coordination`),
//! `Arc<dyn TurnLog>`, `Arc<dyn BlobStore>` — chosen by the embedder: this
//! crate never depends on a backend crate, so it compiles without sqlx or
//! the AWS SDK.
//!
//! # Why it is shaped like this
//!
//! The code follows a run's phases, one file each: the supervisor
//! (`supervise.rs`: `launch` and the order of the phases), `prepare.rs`,
//! `execute.rs`, `land.rs`, `write.rs` (the bounded writes, the one settle
//! among them), `cleanup.rs`, plus `reopen.rs` and `watch.rs`. What a run
//! is — its session, incident, revision and fence, each stored once — and
//! what its phases read live in `run.rs`, which every phase imports
//! instead of each other: the modules' imports form a DAG, which
//! `cargo xtask tidy` checks. Everything
//! other calls need to reach a live run sits in one table, [`LiveRuns`];
//! `cancel_poll.rs` reaches it for cancels made on other replicas (a
//! request in the store naming the run's fence). A settlement presents
//! the run's fence, so a run that was superseded writes nothing.
//! The orderings that keep data safe are written once, in the
//! supervisor's module docs, and kept by the supervisor and `land`: bytes before rows, report row before the terminal status (on
//! every path, also where the agent never ran), the terminal write before
//! clean-up, deregistration, the settle signal and the run group's release.
//! Every write on that path is bounded, and retried only when the store
//! says the error is transient. A run's cancellation is its live-run entry, never the
//! caller's request; landing and settling are detached from it,
//! because a cancelled run's files are the ones worth keeping. The store and
//! runner are constructor arguments of [`ManagerBuilder`]: a manager without
//! them cannot be expressed.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use async_trait::async_trait;
//! use korvus_session::{CreateSession, Manager, RunContext, RunError, RunOutcome, Runner};
//! use korvus_store::{Counters, MemoryStore, NewIncident, SessionStatus, Store};
//!
//! #[derive(Debug)]
//! struct Echo;
//!
//! #[async_trait]
//! impl Runner for Echo {
//!     async fn run(&self, _ctx: RunContext) -> Result<RunOutcome, RunError> {
//!         Ok(RunOutcome::completed(Counters::default()))
//!     }
//!     async fn resume(&self, ctx: RunContext, _msg: String) -> Result<RunOutcome, RunError> {
//!         self.run(ctx).await
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Arc::new(MemoryStore::new());
//! let incident = store.create_incident(NewIncident { title: "db-1 disk".into(), workspace: None }).await?;
//! let manager = Manager::builder(store, Arc::new(Echo)).build();
//! let session = manager
//!     .create(CreateSession::new(incident.id, "why?"))
//!     .await?;
//! let settled = manager.await_settled(session.id, std::time::Duration::from_secs(10)).await?;
//! assert_eq!(settled.status, SessionStatus::Completed);
//! manager.stop().await;
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `mock` | `MockRunner`, `MockDocsSearch`, `MockDocsClient`, `MockStreamReopener` ([`mockall`](https://docs.rs/mockall)) |
//! | `testing` | `testing::settled`, the wait for a run's settled row that tests of embedding code share |
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod admission;
mod cancel_poll;
mod checkpoint_slot;
mod checkpoints;
mod cleanup;
mod closers;
mod config;
mod ending;
mod error;
mod execute;
mod handoff;
mod inner;
mod kept;
mod kept_rows;
mod land;
mod lease;
mod live;
mod live_state;
mod manager;
pub mod metrics;
mod notify_log;
mod prepare;
mod progress;
mod prune;
mod reopen;
mod reopener;
mod resume;
mod run;
mod salvage;
mod salvage_checkpoint;
mod supervise;
#[cfg(feature = "testing")]
pub mod testing;
mod usage;
mod watch;
mod write;

pub use crate::error::{Result, SessionError};
pub use crate::kept::{Salvage, SalvagedDir};
pub use crate::live::LiveRuns;
pub use crate::manager::{
    default_role, ContextRequest, CreateOptions, CreateSession, Manager, ManagerBuilder,
    SessionBudgets, BUDGET_RAISED_MESSAGE, DEFAULT_CANCEL_POLL, DEFAULT_CHECKPOINT_INTERVAL,
    DEFAULT_HEARTBEAT, DEFAULT_LEASE_TTL, DEFAULT_MAX_RUNNING, DEFAULT_RESUME_ORPHANS,
    DEFAULT_RUN_TIMEOUT,
};
pub use crate::progress::Progress;
pub use crate::prune::{
    prune, PruneConfig, PruneError, PruneReport, PruneTargets, MAX_REPORTED_FAILURES,
    PRUNE_CONCURRENCY,
};
#[cfg(feature = "mock")]
pub use crate::reopener::MockStreamReopener;
pub use crate::reopener::StreamReopener;
pub use korvus_runner::{
    exit, CheckpointHook, DocsClient, DocsLease, DocsSearch, ExitReason, InheritedFile,
    InvalidExitReason, RunContext, RunError, RunOutcome, Runner, Tools,
};
#[cfg(feature = "mock")]
pub use korvus_runner::{MockDocsClient, MockDocsSearch, MockRunner};
