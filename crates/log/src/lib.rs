//! The turn log of korvus: a per-session, append-only event log behind a
//! handle-based seam with a single writer.
//!
//! # Overview
//!
//! A [`TurnLog`] service creates and opens logs; each open log is a
//! [`LogHandle`] opened for [`Access::Read`] or [`Access::Write`]. A log is a
//! [`LogHeader`] followed by [`Event`]s whose [`EventKind`]s carry the turn
//! structure (turn start/end, messages, tool calls and results, notes).
//! Backends: [`MemoryLog`], [`JsonlLog`] (one file per log), and PostgreSQL /
//! SQLite tables in `korvus-store-sql`. The session layer (`korvus-session`)
//! writes through the handle and repairs interrupted turns on reopen;
//! `korvus-testkit` pins the contract every backend honours.
//!
//! # Why it is shaped like this
//!
//! One handle type serves both accesses so readers and writers share one code
//! path; a mutation through a read handle is a runtime
//! [`LogError::ReadOnly`]. The rules every backend shares — the single writer
//! ([`Writers`]), reads that never shrink, an idempotent close that cannot be
//! cancelled half-way — live in [`LogHandle`], so a backend implements only
//! the raw I/O ([`LogIo`]). Crash repair is not a storage concern: storage
//! only guarantees whole events; the session layer appends closers.
//!
//! # Example
//!
//! ```
//! use korvus_log::{export_jsonl, Access, Event, EventKind, LogHeader, LogId, MemoryLog, TurnLog};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> korvus_log::Result<()> {
//! let logs = MemoryLog::new();
//! let id = LogId::from_uuid(uuid::Uuid::now_v7());
//! let writer = logs.create(LogHeader::new(id)).await?;
//! writer.append(&[Event::new(EventKind::TurnStart { turn: 1 })]).await?;
//! writer.flush().await?;
//!
//! let reader = logs.open(id, Access::Read).await?;
//! assert_eq!(reader.read(0, None).await?.len(), 1);
//! assert!(reader.append(&[]).await.is_err()); // read-only
//! let jsonl = export_jsonl(&reader).await?;
//! assert_eq!(jsonl.iter().filter(|&&b| b == b'\n').count(), 2);
//! writer.close().await?;
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `mock` | `MockTurnLog` and `MockLogIo`, [`mockall`](https://docs.rs/mockall) mocks of the traits |
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod error;
mod event;
mod export;
mod handle;
mod jsonl;
mod jsonl_buffer;
mod jsonl_epoch;
mod jsonl_file;
mod jsonl_index;
mod jsonl_read;
mod latch;
mod memory;
mod seam;
mod tally;

pub use crate::error::{FlushError, LogError, Result};
pub use crate::event::{Author, Event, EventKind, LogHeader, LogId, Role};
pub use crate::export::{export_jsonl, JsonlExport, EXPORT_CHUNK_BYTES, EXPORT_CHUNK_EVENTS};
pub use crate::handle::{
    AppendHook, LogHandle, APPEND_ATTEMPTS, APPEND_BACKOFF, DROPPED_PREFIX, EVENTS_APPENDED,
    EVENTS_DROPPED,
};
pub use crate::jsonl::JsonlLog;
pub use crate::memory::MemoryLog;
pub use crate::seam::{Access, LogIo, LogStat, Revision, TurnLog, WriterClaim, Writers};
#[cfg(feature = "mock")]
pub use crate::seam::{MockLogIo, MockTurnLog};
pub use crate::tally::TokenTally;
