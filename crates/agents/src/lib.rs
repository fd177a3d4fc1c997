//! korvus in one dependency: run long AI-agent sessions and never lose
//! what they produce.
//!
//! An embedding service builds a [`Manager`] from a store, a turn log, a
//! blob store and a [`Runner`] (any command-line agent with
//! `CommandRunner`), then asks it to create sessions inside incidents.
//! The manager writes the session row and returns it at once; the agent
//! runs in the background in a sandboxed scratch directory; what it leaves
//! is stored — bytes first, rows second — its `report.md` lands as a
//! report revision, and exactly one terminal status is written, whatever
//! happened. A finished session can be reopened with a new message.
//!
//! This crate only re-exports: the items most embedders use at its root,
//! and each korvus crate whole as a module ([`store`], [`log`], [`blob`],
//! [`runner`], [`session`], [`harvest`], [`workspace`], and by feature
//! `sql`, `s3`, `command`, `http`). The crates behind it are the API boundary for
//! backend authors (`korvus-store`, `korvus-log`, `korvus-blob` hold the
//! seams, `korvus-testkit` their contract suites); an embedder needs
//! only this one.
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `sqlite` (default) | `SqliteStore`, `SqliteLog`, `open_sqlite`, `migrate` (and the `sql` module): one machine on SQLite and files |
//! | `command` (default) | `CommandRunner` (and the `command` module): any command-line agent, sandboxed |
//! | `postgres` | `PgStore`, `PgLog`, `migrate` (and the `sql` module): replicas sharing PostgreSQL |
//! | `s3` | `S3BlobStore` (and the `s3` module): blobs in any S3-compatible store |
//! | `http` | the `http` module: the router (JSON API, event streams, web view) to mount in yours |
//! | `webhooks` | `http::webhook`, the completion webhooks' deliverer (implies `http`; brings korvus's HTTPS client, `korvus-tls`) |
//!
//! # Example
//!
//! A manager on SQLite and local files running a command-line agent (the
//! complete program, which also waits for the session and reports why it
//! failed, is `examples/embed.rs`):
//!
//! ```no_run
//! use std::sync::Arc;
//! use korvus_agents::{
//!     migrate, open_sqlite, CommandRunner, CreateSession, FsBlobStore, Manager, NewIncident,
//!     ScratchRoot, SqliteLog, SqliteStore,
//! };
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = open_sqlite(std::path::Path::new("data/korvus.db")).await?;
//! migrate(&pool).await?;
//! let manager = Manager::builder(
//!     Arc::new(SqliteStore::new(pool.clone())),
//!     Arc::new(CommandRunner::new("/usr/local/bin/my-agent")),
//! )
//! .turn_log(Arc::new(SqliteLog::new(pool)))
//! .blob_store(Arc::new(FsBlobStore::open("data/blobs")?))
//! .scratch_root(ScratchRoot::supplied("data/scratch"))
//! .build();
//! let incident = manager
//!     .store()
//!     .create_incident(NewIncident { title: "db-1 disk full".into(), workspace: None })
//!     .await?;
//! let session = manager
//!     .create(CreateSession::new(incident.id, "why?"))
//!     .await?;
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub use korvus_blob::{BlobError, BlobStore, FsBlobStore, MemoryBlobStore};
pub use korvus_log::{Author, Event, EventKind, LogError, MemoryLog, Role, TurnLog};
pub use korvus_runner::{exit, ExitReason, RunContext, RunError, RunOutcome, Runner};
pub use korvus_session::{
    ContextRequest, CreateOptions, CreateSession, Manager, ManagerBuilder, Progress, SessionError,
};
pub use korvus_store::{
    Artifact, ArtifactId, ArtifactKind, CoordinatedStore, Counters, Incident, IncidentId,
    MemoryStore, NewIncident, Priority, Report, Session, SessionId, SessionStatus, Store,
    StoreError, StoreExt, WorkspaceRef,
};
pub use korvus_workspace::ScratchRoot;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use korvus_store_sql::migrate;
#[cfg(feature = "sqlite")]
pub use korvus_store_sql::{open_sqlite, SqliteLog, SqlitePool, SqliteStore};
#[cfg(feature = "postgres")]
pub use korvus_store_sql::{PgLog, PgPool, PgStore};

#[cfg(feature = "s3")]
pub use korvus_blob_s3::S3BlobStore;

#[cfg(feature = "command")]
pub use korvus_command::CommandRunner;

/// Rows, ids and the `Store` seam (`korvus-store`, whole).
pub use korvus_store as store;

/// The turn log: events and the `TurnLog` seam (`korvus-log`, whole).
pub use korvus_log as log;

/// Blob storage: keys and the `BlobStore` seam (`korvus-blob`, whole).
pub use korvus_blob as blob;

/// The `Runner` seam an agent adapter implements (`korvus-runner`, whole).
pub use korvus_runner as runner;

/// The `Manager` and everything around it (`korvus-session`, whole).
pub use korvus_session as session;

/// The harvest: storing a scratch dir's files, and the orphan-blob sweep
/// (`korvus-harvest`, whole).
pub use korvus_harvest as harvest;

/// Scratch directories: seeding, context, skills (`korvus-workspace`, whole).
pub use korvus_workspace as workspace;

/// The PostgreSQL and SQLite backends (`korvus-store-sql`, whole).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub use korvus_store_sql as sql;

/// The S3 blob store (`korvus-blob-s3`, whole).
#[cfg(feature = "s3")]
pub use korvus_blob_s3 as s3;

/// Command-line agents: `CommandRunner`, its sandbox, presets
/// (`korvus-command`, whole).
#[cfg(feature = "command")]
pub use korvus_command as command;

/// The HTTP API and web view (`korvus-http`, whole).
#[cfg(feature = "http")]
pub use korvus_http as http;
