//! Contract suites for korvus backends, and fault-injecting wrappers.
//!
//! # Overview
//!
//! Each seam of korvus — [`Store`](korvus_store::Store),
//! [`TurnLog`](korvus_log::TurnLog), [`BlobStore`](korvus_blob::BlobStore) —
//! has a suite here: a module of public async functions, one per behaviour,
//! each taking `&dyn Trait` ([`store`], [`log`], [`blob`]), plus `run_all`.
//! The macros [`store_contract_tests!`], [`log_contract_tests!`] and
//! [`blob_contract_tests!`] (and [`budgets_contract_tests!`] for the
//! [`Budgets`](korvus_store::Budgets) side of a store) turn a suite into one
//! `#[tokio::test]` per case,
//! so a backend's test run names every behaviour it honours; their
//! `skip_unless = …` argument skips the cases where the server a backend
//! needs is not configured (and `teardown = …` cleans up after each case).
//! [`faults`] has wrappers that make a real backend fail (or hang, or panic)
//! where a test says and record what was called; [`fixtures`] plants hostile
//! workspaces.
//!
//! # Why it is shaped like this
//!
//! A behaviour pinned here is pinned for every backend — ours (memory, JSONL,
//! files, PostgreSQL, SQLite, S3) and third-party ones. The crate depends on
//! the seam crates only, so a backend author can run the suites without
//! pulling in our backends or their drivers.
//!
//! # Example
//!
//! In your backend's `tests/contract.rs`:
//!
//! ```
//! use std::sync::Arc;
//!
//! korvus_testkit::store_contract_tests!(async { Arc::new(korvus_store::MemoryStore::new()) });
//! korvus_testkit::blob_contract_tests!(async { Arc::new(korvus_blob::MemoryBlobStore::new()) });
//! # fn main() {}
//! ```
//!
//! Or call one case directly:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let logs = korvus_log::MemoryLog::new();
//! korvus_testkit::log::reads_are_contiguous_prefixes(&logs).await;
//! # }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

pub mod blob;
pub mod budgets;
pub mod coordination;
pub mod faults;
pub mod fixtures;
pub mod log;
mod macros;
pub mod store;
pub mod tmpfs;
