//! Blob storage for korvus: where the bytes of reports, artifacts and
//! workspace archives live.
//!
//! # Overview
//!
//! [`BlobStore`] is the seam: `put` (with content type and SHA-256),
//! `put_stream` (a [`BlobBody`] of any size, hashed while it is read, never
//! held in memory whole), `barrier` (one durability flush for a batch of
//! puts made with [`Durability::AtBarrier`]), `get`, `head`, `delete`,
//! `list`; every object carries its [`BlobMeta::last_modified`] time. Keys are [`BlobKey`]s — validated values, refused
//! before any I/O — and korvus derives them instead of taking free text from a
//! session: [`report_key`] is deterministic per revision (a retried upload
//! overwrites) and [`artifact_key`] is unique per artifact id. Backends here
//! are [`MemoryBlobStore`] and [`FsBlobStore`]; `korvus-blob-s3` adds S3. Rows
//! describing the bytes live in `korvus-store`; the session layer writes bytes
//! first and rows second, so a row never points at missing bytes.
//!
//! # Why it is shaped like this
//!
//! A key is a type, not a string, so a path a session planted (`../x`, a NUL,
//! a backslash) cannot reach a backend at all. The digest travels with every
//! `put` so each backend can verify the bytes it stores (S3 has the server do
//! it). The trait is object-safe and small; the session layer holds an
//! `Arc<dyn BlobStore>` chosen by the embedder.
//!
//! # Example
//!
//! ```
//! use bytes::Bytes;
//! use korvus_blob::{report_key, BlobStore, MemoryBlobStore, PutOptions};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> korvus_blob::Result<()> {
//! let blobs = MemoryBlobStore::new();
//! let key = report_key(uuid::Uuid::now_v7(), uuid::Uuid::now_v7(), 1, 1);
//! let body = Bytes::from_static(b"# Findings\n");
//! blobs.put(&key, body.clone(), PutOptions::for_bytes("text/markdown", &body)).await?;
//! assert_eq!(blobs.get(&key).await?.bytes, body);
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `mock` | `MockBlobStore`, a [`mockall`](https://docs.rs/mockall) mock of [`BlobStore`] |
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod body;
mod digest;
mod error;
mod file;
mod fs;
mod fs_list;
mod fs_write;
mod key;
mod memory;
mod store;

pub use crate::body::BlobBody;
pub use crate::digest::{ParseDigestError, Sha256Digest};
pub use crate::error::{BlobError, Result};
pub use crate::file::{copy_and_hash, digest_of_file};
pub use crate::fs::FsBlobStore;
pub use crate::key::{
    artifact_key, manifest_key, probe_key, report_key, salvage_manifest_key, sanitize_file_name,
    session_prefix, BlobKey, MAX_FILE_NAME_BYTES, MAX_KEY_BYTES, PROBE_PREFIX,
};
pub use crate::memory::MemoryBlobStore;
#[cfg(feature = "mock")]
pub use crate::store::MockBlobStore;
pub use crate::store::{
    hash_then_rewind, Blob, BlobMeta, BlobReader, BlobStore, Durability, PutFileOptions,
    PutOptions, DELETE_MANY_CONCURRENCY,
};
