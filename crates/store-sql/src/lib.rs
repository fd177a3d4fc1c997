//! PostgreSQL and SQLite backends of korvus: the [`Store`](korvus_store::Store)
//! and [`TurnLog`](korvus_log::TurnLog) seams on real databases, through sqlx.
//!
//! # Overview
//!
//! - [`PgStore`] and [`SqliteStore`] implement `korvus_store::Store`: incidents,
//!   sessions, reports, artifacts and context refs.
//! - [`PgLog`] and [`SqliteLog`] implement `korvus_log::TurnLog`: per-session
//!   event logs in two tables, the header and every event kept as the exact
//!   JSON text, so `korvus_log::export_jsonl` gives the same bytes as the
//!   memory and JSONL backends.
//! - [`migrate`](fn@migrate) applies the migrations in `migrations/postgres` or
//!   `migrations/sqlite` (embedded at build time) to a pool;
//!   [`open_sqlite`] opens a SQLite file with the settings the backends need.
//!
//! The seams, the model and the input rules live in `korvus-store` and
//! `korvus-log`; the contract every backend passes is in `korvus-testkit`.
//!
//! # Why it is shaped like this
//!
//! The rules that must hold under concurrency are left to the database, not
//! to process-local locks: a session's `seq` is allocated inside the
//! inserting statement, reopen and the idle transitions are each one
//! conditional `UPDATE … RETURNING`, and a
//! context ref to another incident's artifact is refused by a composite
//! foreign key `(incident_id, artifact_id)`. Each write is one statement
//! where the database allows it, so it is atomic without a client-side
//! transaction and costs one round trip (see the table below). Driver errors
//! are mapped once (`Conflict` for a unique violation, `Constraint { name }`
//! for a foreign key, `Backend` for the rest), and queries are checked at run
//! time (`sqlx::query_as` with `FromRow`), so building needs no database.
//!
//! The two engines share one implementation, the way object_store writes
//! the request per backend and the algorithm once. What each engine does its
//! own way is a small private trait in `dialect.rs`, implemented in
//! `postgres.rs` and `sqlite.rs`: `StoreDialect` (the `INSERT` that
//! allocates a session's `seq`, numbering context refs, inserting a batch of
//! artifacts, fetching many artifacts by id) and `LogDialect` (numbering and
//! inserting the events of one append). The statements both engines run
//! unchanged are named once in `sql.rs`; every statement of each engine is
//! rendered, one clause per line, to `sql/postgres.sql` and
//! `sql/sqlite.sql`, which a snapshot test keeps equal to the code — read
//! those to see the SQL. Everything else — validation, binds, error
//! mapping and row conversion — is written once, in the `sql_store!` (`store.rs`) and
//! `sql_log!` (`log.rs`) macros each engine module expands for its own pool
//! type, over the row types of `rows.rs` and `log_rows.rs`. They are macros
//! rather than code generic over `sqlx::Database` because generic sqlx code
//! needs an `Encode`/`Type` bound for every bound Rust type and a `FromRow`
//! bound for every row type, repeated on every impl; expanded per engine,
//! the shared code is plain sqlx calls on a concrete pool. A fix to a shared
//! statement is made once, and comparing the engines means reading only
//! `postgres.rs` and `sqlite.rs`.
//!
//! A write this crate reports is a write that happened: **a statement's
//! rows are read only after it completed; in autocommit that includes its
//! commit.** sqlx's `fetch_optional` and `fetch_one` stop a SQLite
//! statement at its first row, and the commit that runs when it is reset
//! then fails unseen (a full disk: an `UPDATE … RETURNING` settle answered
//! its row and was never stored). Every statement is read to its end
//! instead (`fetch_all`, `execute`, or the crate's `fetch_optional_completed`
//! built on `fetch_all`), every explicit commit's result is checked, and a
//! failed commit is a `Backend` error — transient when the disk is full,
//! which may clear. A test refuses `fetch_optional`/`fetch_one` in the
//! sources, and `tests/commit_faults.rs` fills a real filesystem under
//! SQLite and fails PostgreSQL's commits with a deferred trigger.
//!
//! Input is checked with `korvus_store::validate` before any statement, so a
//! NUL byte (which PostgreSQL refuses in `text`) or an over-long field is the
//! same `InvalidInput { field }` on every backend and nothing is written.
//!
//! # Round trips
//!
//! SQL statements each [`Store`](korvus_store::Store) and
//! [`Coordination`](korvus_store::Coordination) call sends (a
//! `BEGIN`/`COMMIT` counts as one):
//!
//! | operation | PostgreSQL | SQLite |
//! |---|---|---|
//! | `create_incident`, `get_incident`, `list_incidents`, `close_incident` | 1 | 1 |
//! | `create_session` (seq allocated inside the `INSERT`) | 1 | 1 |
//! | `get_session`, `session_by_idempotency_key`, `list_sessions` | 1 | 1 |
//! | `settle_session` | 1; 2 when refused (telling a committed retry from `Fenced`/`NotActive`) | same |
//! | `continue_session` | 1; 2 when it fails (telling `NotFound` from `NotFinished`/`NotIdle`) | same |
//! | `cancel_idle_session` | 1; 2 when it fails (telling `NotFound` from `NotIdle`) | same |
//! | `insert_context_refs` | 1 (0 refs: 1 existence check) | 1 per 2000 refs; more than one chunk adds `BEGIN IMMEDIATE` and `COMMIT` |
//! | `list_context_refs` | 1 | 1 |
//! | `create_report`, `get_report`, `list_reports`, `next_report_revision` | 1 | 1 |
//! | `create_artifacts` | 1 (`UNNEST` of arrays), 0 for an empty batch | 1 multi-row `INSERT` per 2000 rows (more chunks: in one `BEGIN IMMEDIATE` transaction) |
//! | `replace_checkpoints` | `BEGIN`, the fence guard, the session read, 1 per deleted row, the insert (`UNNEST`), `COMMIT` | same, the insert 1 per 2000 rows |
//! | `get_artifacts` | 1 (`= ANY`), 0 for no ids | 1 per 2000 ids |
//! | `list_session_artifacts`, `list_incident_artifacts` | 1 | 1 |
//! | `request_cancel` | 1; 2 for a row not running | same |
//! | `cancel_requests`, `expired_leases` | 1 | 1 |
//! | `cancel_signal` | none per call; one `LISTEN` connection while a `Notify` lives | none (`None`: the caller polls) |
//! | `heartbeat` | 1, whatever the number of runs (also for none); it writes the owner's row and only the session rows it releases or takes back | 6: `BEGIN`, forget old owners, the owner's row, release / take back, the held runs, `COMMIT` |
//! | `take_over` | 1; 2 when refused (telling `Fenced` from `NotOrphaned`) | same |
//! | `mark_started` | 1; 2 when refused (telling `Fenced` from `NotActive`) | same |
//! | `release` | 1; 2 when refused (telling `Fenced`, `NotActive` and `AlreadyStarted` apart) | same |
//! | `claim_next` | 1 (`FOR UPDATE SKIP LOCKED` on the pick) | 1 |
//! | `settle_with_report` | 5: `BEGIN`, settle, insert unless present, read the standing report, `COMMIT` | same |
//! | `force_cancel` | 6: `BEGIN`, move the fence, settle, insert unless present, read the standing report, `COMMIT` | same |
//!
//! Turn logs: `create`, `open`, `stat`, `list` and `read` are one statement
//! each; `append` is one statement on PostgreSQL and a `BEGIN IMMEDIATE`,
//! `UPDATE`, `INSERT` (per 2000 events), `COMMIT` transaction on SQLite;
//! `flush` and `close` send nothing (every append is committed before it
//! returns).
//!
//! # Example
//!
//! ```
//! # #[cfg(feature = "sqlite")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use korvus_store::{NewIncident, NewSession, SessionId, Store};
//! use korvus_store_sql::{migrate, open_sqlite, SqliteStore};
//!
//! let dir = tempfile::tempdir()?;
//! let pool = open_sqlite(&dir.path().join("korvus.db")).await?;
//! migrate(&pool).await?;
//! let store = SqliteStore::new(pool);
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
//! assert_eq!(store.get_session(session.id).await?, session);
//! # Ok(()) }
//! # #[cfg(not(feature = "sqlite"))]
//! # fn main() {}
//! ```
//!
//! With PostgreSQL it is the same, starting from a [`PgPool`]:
//! `let pool = PgPool::connect(url).await?; migrate(&pool).await?; PgStore::new(pool)`.
//!
//! # Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `postgres` | yes | [`PgStore`], [`PgLog`], [`PgPool`] |
//! | `sqlite` | yes | [`SqliteStore`], [`SqliteLog`], [`SqlitePool`], [`open_sqlite`] (bundled SQLite) |
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]
// Without either backend only the shared helpers remain, and nothing uses them.
#![cfg_attr(
    not(any(feature = "postgres", feature = "sqlite")),
    allow(dead_code, unused_imports, unused_macros)
)]

// Lets `testing` name this crate by its name, so the same file also compiles
// inside this crate's own test binary.
#[cfg(feature = "testing")]
extern crate self as korvus_store_sql;

mod budget;
mod built;
mod completed;
mod dialect;
mod error;
mod heartbeat;
mod insert;
mod lease;
mod log;
mod log_rows;
mod migrate;
mod outbox;
#[cfg(feature = "postgres")]
mod postgres;
mod replace;
mod resume;
mod rows;
mod salvage;
mod session_row;
#[cfg(all(test, feature = "postgres", feature = "sqlite"))]
mod snapshot;
mod sql;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;
#[cfg(feature = "testing")]
pub mod testing;
mod transition;

pub use crate::migrate::{migrate, Migrations};
#[cfg(feature = "postgres")]
pub use crate::postgres::{PgLog, PgStore};
#[cfg(feature = "sqlite")]
pub use crate::sqlite::{open_sqlite, SqliteLog, SqliteStore};
/// The connection pools the backends are built on, re-exported so callers
/// use the same sqlx version as this crate.
#[cfg(feature = "postgres")]
pub use sqlx::PgPool;
#[cfg(feature = "sqlite")]
pub use sqlx::SqlitePool;
