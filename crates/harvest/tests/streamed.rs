//! Large files: streamed to the blob store (never held in memory), refused
//! when they change between the digest and the upload; one durability
//! barrier per phase, before any row.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use korvus_blob::{
    Blob, BlobBody, BlobKey, BlobMeta, BlobStore, FsBlobStore, MemoryBlobStore, PutOptions,
    Sha256Digest,
};
use korvus_harvest::{persist, FailStage, PersistConfig, ReportFile};
use korvus_store::StoreExt;
use korvus_testkit::faults::{BlobFault, FaultBlobStore};
use korvus_workspace::STREAM_FROM_BYTES;

use crate::support::{env, paths, request, write};

/// Bytes that differ by position, `len` of them.
fn patterned(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[tokio::test]
async fn a_large_file_is_streamed_and_lands_identical() {
    let len = usize::try_from(STREAM_FROM_BYTES).unwrap() * 2 + 17;
    let data = patterned(len);
    let root = tempfile::tempdir().unwrap();
    for blobs in [
        Arc::new(MemoryBlobStore::new()) as Arc<dyn BlobStore>,
        Arc::new(FsBlobStore::open(root.path()).unwrap()),
    ] {
        let env = env().await;
        write(env.scratch.path(), "data/dump.bin", &data);
        write(env.scratch.path(), "report.md", b"# R\n");
        let outcome = persist(
            Arc::clone(&env.store),
            Some(Arc::clone(&blobs)),
            &PersistConfig::default(),
            request(&env, 1),
        )
        .await;
        assert_eq!(paths(&outcome), ["data/dump.bin", "report.md"], "{blobs:?}");
        let dump = &outcome.stored[0];
        let row = env.store.get_artifact(dump.artifact_id).await.unwrap();
        assert_eq!(row.size_bytes, len as u64);
        assert_eq!(row.sha256, Sha256Digest::of(&data).to_hex());
        let blob = blobs
            .get(&BlobKey::new(row.blob_key).unwrap())
            .await
            .unwrap();
        assert!(blob.bytes == data, "stored bytes differ");
    }
}

/// Rewrites a file in the scratch dir when its streamed put starts: the
/// bytes the upload reads are no longer the ones hashed before it (the
/// default `put_file` hashes, then streams).
#[derive(Debug)]
struct ChangeOnStream {
    inner: Arc<dyn BlobStore>,
    file: PathBuf,
}

#[async_trait]
impl BlobStore for ChangeOnStream {
    async fn put(&self, key: &BlobKey, bytes: Bytes, o: PutOptions) -> korvus_blob::Result<()> {
        self.inner.put(key, bytes, o).await
    }
    async fn put_stream(
        &self,
        key: &BlobKey,
        body: BlobBody,
        o: PutOptions,
    ) -> korvus_blob::Result<()> {
        // Only the file's own upload changes it (the others run beside it).
        if self.file.file_name().and_then(|n| n.to_str()) == key.as_str().rsplit('/').next() {
            let mut changed = std::fs::read(&self.file).unwrap();
            changed[1000] ^= 0xff; // same size, other bytes, same inode
            std::fs::write(&self.file, changed).unwrap();
        }
        self.inner.put_stream(key, body, o).await
    }
    async fn get(&self, key: &BlobKey) -> korvus_blob::Result<Blob> {
        self.inner.get(key).await
    }
    async fn head(&self, key: &BlobKey) -> korvus_blob::Result<BlobMeta> {
        self.inner.head(key).await
    }
    async fn delete(&self, key: &BlobKey) -> korvus_blob::Result<()> {
        self.inner.delete(key).await
    }
    async fn list<'a>(&self, p: Option<&'a BlobKey>) -> korvus_blob::Result<Vec<BlobMeta>> {
        self.inner.list(p).await
    }
    async fn barrier(&self) -> korvus_blob::Result<()> {
        self.inner.barrier().await
    }
}

#[tokio::test]
async fn a_file_changed_during_its_upload_is_failed_and_nothing_is_stored() {
    let env = env().await;
    let len = usize::try_from(STREAM_FROM_BYTES).unwrap() + 1;
    write(env.scratch.path(), "big.bin", &patterned(len));
    write(env.scratch.path(), "small.txt", b"small");
    let root = tempfile::tempdir().unwrap();
    let fs: Arc<dyn BlobStore> = Arc::new(FsBlobStore::open(root.path()).unwrap());
    let blobs = Arc::new(ChangeOnStream {
        inner: Arc::clone(&fs),
        file: env.scratch.path().join("big.bin"),
    });
    let outcome = persist(
        Arc::clone(&env.store),
        Some(blobs),
        &PersistConfig::default(),
        request(&env, 1),
    )
    .await;
    assert_eq!(paths(&outcome), ["small.txt"]);
    assert_eq!(outcome.failed.len(), 1, "{:?}", outcome.failed);
    assert_eq!(outcome.failed[0].path, "big.bin");
    assert_eq!(outcome.failed[0].stage, FailStage::Upload);
    assert!(
        outcome.failed[0].cause.contains("changed"),
        "{:?}",
        outcome.failed
    );
    // Only small.txt and the manifest are stored; big.bin left nothing.
    let stored = fs.list(None).await.unwrap();
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert!(stored.iter().all(|m| !m.key.as_str().ends_with("big.bin")));
}

#[tokio::test]
async fn one_barrier_per_phase_and_none_failed_means_no_rows() {
    let env = env().await;
    for i in 0..10 {
        write(env.scratch.path(), &format!("f{i}.txt"), b"x");
    }
    write(env.scratch.path(), "report.md", b"# R\n");
    let root = tempfile::tempdir().unwrap();
    let fs = Arc::new(FsBlobStore::open(root.path()).unwrap());
    let blobs = Arc::new(FaultBlobStore::new(fs));
    let outcome = persist(
        Arc::clone(&env.store),
        Some(blobs.clone()),
        &PersistConfig::default(),
        request(&env, 1),
    )
    .await;
    assert!(outcome.rows_written);
    assert_eq!(outcome.stored.len(), 11);
    // One barrier for the 11 files before their rows, one for the
    // manifest after them (its only flush).
    assert_eq!(
        blobs.barriers(),
        2,
        "one barrier for 11 uploads, one for the manifest"
    );

    // A barrier that fails: the bytes may not survive a crash, so no row
    // may point at them.
    let env = crate::support::env().await;
    write(env.scratch.path(), "a.txt", b"a");
    write(env.scratch.path(), "report.md", b"# R\n");
    blobs.fault_barrier(BlobFault::Fail);
    let outcome = persist(
        Arc::clone(&env.store),
        Some(blobs.clone()),
        &PersistConfig::default(),
        request(&env, 1),
    )
    .await;
    assert!(!outcome.rows_written);
    assert!(outcome.stored.is_empty());
    assert!(outcome.failed.iter().all(|f| f.stage == FailStage::Row));
    assert!(matches!(outcome.report, ReportFile::Failed { .. }));
    assert!(outcome.error_text().unwrap().contains("durable"));
    // The manifest that records it is still stored, durable on return
    // (not behind another barrier).
    let manifest = outcome
        .manifest_key
        .clone()
        .expect("the manifest is stored");
    let manifest = BlobKey::new(manifest).unwrap();
    assert!(blobs.get(&manifest).await.is_ok());
    let rows = env
        .store
        .all_session_artifacts(env.session.id)
        .await
        .unwrap();
    assert!(rows.is_empty(), "{rows:?}");
}
