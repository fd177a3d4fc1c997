//! The domain model of korvus and the [`Store`] seam that keeps it.
//!
//! # Overview
//!
//! korvus runs long agent *sessions* inside *incidents*. This crate names the
//! rows that outlive a run — [`Incident`], [`Session`], [`Report`],
//! [`Artifact`] and [`SessionContextRef`] — and two object-safe traits the
//! session layer (`korvus-session`) reads and writes them through:
//! [`Store`] for the rows and their lifecycle, and [`Coordination`] for
//! what replicas sharing one store need (cancel requests, heartbeats,
//! orphans, takeover, forced cancel). A value with both is a
//! [`CoordinatedStore`], what the manager is built from. [`MemoryStore`]
//! implements both in memory; `korvus-store-sql` implements them on
//! PostgreSQL and SQLite. The contract
//! itself is pinned by the suites in `korvus-testkit`, which every backend runs.
//!
//! # Why it is shaped like this
//!
//! The store is a seam: it depends on no other korvus crate, so backends and
//! the session layer meet here and nowhere else. The insert types carry only
//! what a caller may choose — [`NewSession`] has no `seq` and no `status`, so a
//! caller cannot allocate a seq racily or create a session in any state but
//! `running`. Rules that need a race-free answer (seq allocation, the
//! conditional transitions [`Store::continue_session`] and
//! [`Store::cancel_idle_session`], takeover and forced cancel) live
//! behind the trait, where a backend can make them one transaction or one
//! statement. Every error says whether a retry may help
//! ([`StoreError::is_transient`]), so a caller retries only what may pass. Input rules live in
//! [`validate`], shared by every backend, so bad input is the same typed
//! [`StoreError::InvalidInput`] everywhere.
//!
//! # Example
//!
//! ```
//! use korvus_store::{MemoryStore, NewIncident, NewSession, SessionId, Store};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> korvus_store::Result<()> {
//! let store = MemoryStore::new();
//! let incident = store
//!     .create_incident(NewIncident { title: "disk full on db-1".into(), workspace: None })
//!     .await?;
//! let session = store
//!     .create_session(NewSession {
//!         runner: None,
//!         lease: None,
//!         admission: Default::default(),
//!         id: SessionId::new(),
//!         incident_id: incident.id,
//!         prompt: "find out why".into(),
//!         workspace_ref: None,
//!     })
//!     .await?;
//! assert_eq!(session.seq, 1);
//! assert!(!session.status.is_terminal());
//! // Created without a lease: queued for a manager of its pool to claim.
//! assert!(session.is_queued());
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `mock` | `MockStore`, a [`mockall`](https://docs.rs/mockall) mock of [`Store`] |
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod admission;
mod backoff;
mod budget;
pub mod constraint;
mod coordination;
mod counters;
mod error;
pub mod exit_reason;
mod lease;
mod memory;
mod model;
mod outbox;
mod page;
mod report;
mod salvage;
mod session_rules;
mod store;
pub mod validate;

pub use crate::admission::{Admission, Priority, QueueDepth, DEFAULT_POOL};
pub use crate::backoff::{Backoff, Retries};
pub use crate::budget::{
    Budget, BudgetLimit, BudgetLimits, BudgetScope, Budgets, Price, PriceTable, Spend,
};
pub use crate::coordination::{CoordinatedStore, Coordination};
pub use crate::counters::Counters;
pub use crate::error::{io_kind_is_transient, Entity, Result, StoreError};
pub use crate::exit_reason::{ExitReason, InvalidExitReason};
pub use crate::lease::{forced_cancel, Lease, OwnerId, Settlement};
pub use crate::memory::MemoryStore;
pub use crate::model::{
    Artifact, ArtifactId, ArtifactKind, ContextRef, Incident, IncidentId, IncidentStatus,
    NewArtifact, NewIncident, NewSession, ParseEnumError, Session, SessionContextRef, SessionId,
    SessionKind, SessionStatus, WorkspaceRef,
};
#[cfg(feature = "mock")]
pub use crate::outbox::MockOutbox;
pub use crate::outbox::{Outbox, OutboxEvent, OutboxKey, OutboxKind};
pub use crate::page::{walk, Cursor, Page, Paged, DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE};
pub use crate::report::{NewReport, Report};
pub use crate::salvage::KeptOutput;
pub use crate::session_rules::Phase;
#[cfg(feature = "mock")]
pub use crate::store::MockStore;
pub use crate::store::{ContinueFrom, Store, StoreExt};
