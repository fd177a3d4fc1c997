//! Checkpoints while a run goes: an unchanged tree stores nothing, a file
//! rewritten every interval keeps one version, a file that never stops
//! growing is stored torn, the landing promotes what the checkpoints hold,
//! the file cap spans checkpoints and landing, and checkpoint rows are
//! never restored.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use korvus_blob::{
    BlobBody, BlobKey, BlobMeta, BlobStore, MemoryBlobStore, PutFileOptions, PutOptions,
    Sha256Digest,
};
use korvus_harvest::{Checkpointer, PersistConfig, ReportFile, SkipReason, TORN_AFTER_SKIPS};
use korvus_store::{Artifact, ArtifactKind, StoreExt};
use korvus_testkit::faults::FaultBlobStore;
use korvus_workspace::{RestoredFile, WorkspacePath};

use crate::support::{env, request, write, Env};

fn checkpointer(env: &Env, blobs: Arc<dyn BlobStore>, config: PersistConfig) -> Checkpointer {
    Checkpointer::new(Arc::clone(&env.store), blobs, config, request(env, 1))
}

async fn rows(env: &Env) -> Vec<Artifact> {
    let mut rows = env
        .store
        .all_session_artifacts(env.session.id)
        .await
        .unwrap();
    rows.sort_by(|a, b| a.path.cmp(&b.path));
    rows
}

async fn bytes_at(blobs: &dyn BlobStore, key: &str) -> Bytes {
    blobs.get(&BlobKey::new(key).unwrap()).await.unwrap().bytes
}

#[tokio::test]
async fn a_checkpoint_of_an_unchanged_tree_stores_nothing() {
    let env = env().await;
    for name in ["a.txt", "dir/b.txt", "report.md"] {
        write(env.scratch.path(), name, name.as_bytes());
    }
    let blobs = Arc::new(FaultBlobStore::new(Arc::new(MemoryBlobStore::new())));
    let mut ck = checkpointer(&env, blobs.clone(), PersistConfig::default());
    let first = ck.checkpoint().await;
    assert!(first.rows_written, "{first:?}");
    assert_eq!(first.stored.len(), 3);
    assert_eq!(blobs.total_puts(), 3);
    for _ in 0..3 {
        let again = ck.checkpoint().await;
        assert!(again.stored.is_empty(), "{again:?}");
        assert_eq!(again.unchanged, 3);
    }
    assert_eq!(blobs.total_puts(), 3, "an unchanged tree stores nothing");
    let rows = rows(&env).await;
    assert_eq!(rows.len(), 3);
    assert!(rows.iter().all(|a| a.kind == ArtifactKind::Checkpoint));
}

#[tokio::test]
async fn a_file_rewritten_every_checkpoint_ends_with_one_row_and_one_blob() {
    let env = env().await;
    let blobs = Arc::new(MemoryBlobStore::new());
    let mut ck = checkpointer(&env, blobs.clone(), PersistConfig::default());
    for i in 0..4 {
        // Same size every time: only the bytes (and the times) change.
        write(
            env.scratch.path(),
            "state.txt",
            format!("version {i}").as_bytes(),
        );
        let outcome = ck.checkpoint().await;
        assert_eq!(outcome.stored.len(), 1, "checkpoint {i}: {outcome:?}");
        assert!(outcome.rows_written);
    }
    let rows = rows(&env).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].sha256, Sha256Digest::of(b"version 3").to_hex());
    let listed = blobs.list(None).await.unwrap();
    assert_eq!(listed.len(), 1, "superseded bytes are deleted: {listed:?}");
    assert_eq!(
        &bytes_at(&*blobs, &rows[0].blob_key).await[..],
        b"version 3"
    );
    assert_eq!(ck.held_files(), 1);
}

/// A blob store that appends a line to one file whenever it is asked to
/// store bytes: the file grows during every read of it.
#[derive(Debug)]
struct Growing {
    inner: Arc<dyn BlobStore>,
    file: PathBuf,
    /// The writer stopped: puts no longer grow the file.
    stopped: std::sync::atomic::AtomicBool,
}

impl Growing {
    fn grow(&self) {
        use std::io::Write;
        if self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.file)
            .unwrap();
        f.write_all(b"one more line\n").unwrap();
    }
}

#[async_trait]
impl BlobStore for Growing {
    async fn put(
        &self,
        key: &BlobKey,
        bytes: Bytes,
        options: PutOptions,
    ) -> korvus_blob::Result<()> {
        self.inner.put(key, bytes, options).await
    }
    async fn put_stream(
        &self,
        key: &BlobKey,
        body: BlobBody,
        options: PutOptions,
    ) -> korvus_blob::Result<()> {
        self.grow();
        self.inner.put_stream(key, body, options).await
    }
    async fn put_file(
        &self,
        key: &BlobKey,
        file: std::fs::File,
        len: u64,
        options: PutFileOptions,
    ) -> korvus_blob::Result<Sha256Digest> {
        self.grow();
        self.inner.put_file(key, file, len, options).await
    }
    async fn barrier(&self) -> korvus_blob::Result<()> {
        self.inner.barrier().await
    }
    async fn get(&self, key: &BlobKey) -> korvus_blob::Result<korvus_blob::Blob> {
        self.inner.get(key).await
    }
    async fn get_stream(&self, key: &BlobKey) -> korvus_blob::Result<korvus_blob::BlobReader> {
        self.inner.get_stream(key).await
    }
    async fn head(&self, key: &BlobKey) -> korvus_blob::Result<BlobMeta> {
        self.inner.head(key).await
    }
    async fn delete(&self, key: &BlobKey) -> korvus_blob::Result<()> {
        self.inner.delete(key).await
    }
    async fn list<'a>(&self, prefix: Option<&'a BlobKey>) -> korvus_blob::Result<Vec<BlobMeta>> {
        self.inner.list(prefix).await
    }
    async fn list_page<'a>(
        &self,
        prefix: Option<&'a BlobKey>,
        after: Option<&'a BlobKey>,
        limit: usize,
    ) -> korvus_blob::Result<Vec<BlobMeta>> {
        self.inner.list_page(prefix, after, limit).await
    }
    async fn delete_many(&self, keys: &[BlobKey]) -> Vec<(BlobKey, korvus_blob::BlobError)> {
        self.inner.delete_many(keys).await
    }
}

#[tokio::test]
async fn a_growing_file_is_skipped_then_stored_torn_at_its_starting_size() {
    let env = env().await;
    write(env.scratch.path(), "app.log", b"started\n");
    let inner = Arc::new(MemoryBlobStore::new());
    let blobs = Arc::new(Growing {
        inner: inner.clone(),
        file: env.scratch.path().join("app.log"),
        stopped: false.into(),
    });
    let mut ck = checkpointer(&env, blobs.clone(), PersistConfig::default());
    for skips in 1..=TORN_AFTER_SKIPS {
        let outcome = ck.checkpoint().await;
        assert!(outcome.stored.is_empty(), "{outcome:?}");
        assert_eq!(outcome.changing.len(), 1);
        assert_eq!(outcome.changing[0].skips, skips);
        assert!(rows(&env).await.is_empty());
        assert!(
            inner.list(None).await.unwrap().is_empty(),
            "no torn bytes kept"
        );
    }
    let before = std::fs::read(env.scratch.path().join("app.log")).unwrap();
    let outcome = ck.checkpoint().await;
    assert_eq!(outcome.stored.len(), 1, "{outcome:?}");
    assert!(outcome.stored[0].torn);
    assert_eq!(outcome.stored[0].size, before.len() as u64);
    let held = rows(&env).await;
    assert_eq!(held.len(), 1);
    assert_eq!(&bytes_at(&*inner, &held[0].blob_key).await[..], &before[..]);
    let now = std::fs::read(env.scratch.path().join("app.log")).unwrap();
    assert!(
        now.len() > before.len(),
        "the file grew during the torn read"
    );

    // The writer stops (the agent ended): the landing reads the file
    // whole, its manifest says so, and the torn copy goes.
    blobs
        .stopped
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let torn_key = held[0].blob_key.clone();
    let landed = ck.land().await;
    assert!(landed.rows_written, "{landed:?}");
    let file = landed
        .stored
        .iter()
        .find(|f| f.path == "app.log")
        .expect("stored");
    assert!(!file.torn && !file.promoted, "{file:?}");
    assert_eq!(file.size, now.len() as u64);
    let manifest_key = BlobKey::new(landed.manifest_key.clone().expect("manifest")).unwrap();
    let manifest: serde_json::Value =
        serde_json::from_slice(&bytes_at(&*inner, manifest_key.as_str()).await).unwrap();
    let listed = manifest["stored"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "app.log")
        .expect("listed");
    assert_ne!(listed["torn"], serde_json::json!(true), "{manifest}");
    let final_rows = rows(&env).await;
    assert_eq!(final_rows.len(), 1, "{final_rows:?}");
    assert_eq!(final_rows[0].kind, ArtifactKind::AgentOutput);
    assert_eq!(
        &bytes_at(&*inner, &final_rows[0].blob_key).await[..],
        &now[..]
    );
    let torn = BlobKey::new(torn_key).unwrap();
    assert!(inner.head(&torn).await.is_err(), "the torn copy is deleted");
}

#[tokio::test]
async fn the_landing_after_checkpoints_uploads_only_what_changed_and_promotes_the_rest() {
    let env = env().await;
    for (name, body) in [
        ("report.md", "# R\n"),
        ("a.txt", "a"),
        ("b.txt", "b"),
        ("c.txt", "c"),
    ] {
        write(env.scratch.path(), name, body.as_bytes());
    }
    write(env.scratch.path(), ".korvus/agent/thread.jsonl", b"{}\n");
    let blobs = Arc::new(FaultBlobStore::new(Arc::new(MemoryBlobStore::new())));
    let mut ck = checkpointer(&env, blobs.clone(), PersistConfig::default());
    assert_eq!(ck.checkpoint().await.stored.len(), 5);
    let held: BTreeMap<String, String> = rows(&env)
        .await
        .into_iter()
        .map(|a| (a.path, a.blob_key))
        .collect();
    write(env.scratch.path(), "b.txt", b"b, longer now");
    write(env.scratch.path(), "d.txt", b"d");
    std::fs::remove_file(env.scratch.path().join("c.txt")).unwrap();
    let puts = blobs.total_puts();
    let landed = ck.land().await;
    assert!(landed.rows_written, "{landed:?}");
    // b.txt, d.txt and the manifest: nothing for what the checkpoint holds.
    assert_eq!(blobs.total_puts() - puts, 3);
    assert_eq!(landed.promoted, 3);
    let promoted: Vec<&str> = landed
        .stored
        .iter()
        .filter(|s| s.promoted)
        .map(|s| s.path.as_str())
        .collect();
    assert_eq!(
        promoted,
        [".korvus/agent/thread.jsonl", "a.txt", "report.md"]
    );
    assert_eq!(
        landed.report,
        ReportFile::Stored {
            key: held["report.md"].clone(),
            bytes: 4
        }
    );
    let rows = rows(&env).await;
    let got: Vec<(&str, ArtifactKind)> = rows.iter().map(|a| (a.path.as_str(), a.kind)).collect();
    assert_eq!(
        got,
        [
            (".korvus/agent/thread.jsonl", ArtifactKind::AgentState),
            ("a.txt", ArtifactKind::AgentOutput),
            ("b.txt", ArtifactKind::AgentOutput),
            ("d.txt", ArtifactKind::AgentOutput),
            ("report.md", ArtifactKind::Report),
        ]
    );
    assert_eq!(rows[1].blob_key, held["a.txt"], "promoted: the same bytes");
    for gone in ["b.txt", "c.txt"] {
        let key = BlobKey::new(held[gone].as_str()).unwrap();
        assert!(
            blobs.head(&key).await.is_err(),
            "{gone}'s checkpoint bytes are deleted"
        );
    }
}

#[tokio::test]
async fn the_file_cap_counts_the_paths_of_checkpoints_and_landing() {
    let env = env().await;
    write(env.scratch.path(), "b.txt", b"b");
    write(env.scratch.path(), "c.txt", b"c");
    let mut config = PersistConfig::default();
    config.max_files = 2;
    let blobs = Arc::new(MemoryBlobStore::new());
    let mut ck = checkpointer(&env, blobs, config);
    assert_eq!(ck.checkpoint().await.stored.len(), 2);
    // Sorts first, but the two held paths keep their places.
    write(env.scratch.path(), "a.txt", b"a");
    let second = ck.checkpoint().await;
    assert!(second.stored.is_empty(), "{second:?}");
    let over = |skipped: &[korvus_harvest::Skipped]| {
        skipped
            .iter()
            .any(|s| s.path == "a.txt" && matches!(s.reason, SkipReason::OverCap { cap: 2 }))
    };
    assert!(over(&second.skipped), "{second:?}");
    let landed = ck.land().await;
    assert!(over(&landed.skipped), "{landed:?}");
    let paths: Vec<String> = rows(&env).await.into_iter().map(|a| a.path).collect();
    assert_eq!(paths, ["b.txt", "c.txt"]);
}

#[tokio::test]
async fn checkpoint_rows_are_never_restored_and_the_landing_replaces_them() {
    let env = env().await;
    write(env.scratch.path(), "out.txt", b"x");
    let blobs = Arc::new(MemoryBlobStore::new());
    let mut ck = checkpointer(&env, blobs, PersistConfig::default());
    ck.checkpoint().await;
    let listed = rows(&env).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].kind, ArtifactKind::Checkpoint);
    let restored = env
        .store
        .latest_session_artifacts(env.session.id)
        .await
        .unwrap();
    assert!(
        restored.is_empty(),
        "a reopen restores no checkpoint: {restored:?}"
    );
    ck.land().await;
    let restored = env
        .store
        .latest_session_artifacts(env.session.id)
        .await
        .unwrap();
    assert_eq!(restored.len(), 1);
    assert_eq!(restored[0].kind, ArtifactKind::AgentOutput);
    assert_eq!(restored[0].blob_key, listed[0].blob_key);
}

#[tokio::test]
async fn a_restored_report_left_as_it_was_is_not_adopted_after_checkpoints() {
    let env = env().await;
    let blobs = Arc::new(MemoryBlobStore::new());
    write(env.scratch.path(), "report.md", b"# revision 1\n");
    // Revision 1 lands as usual; its report is what a reopen restores.
    let first = korvus_harvest::persist(
        Arc::clone(&env.store),
        Some(blobs.clone()),
        &PersistConfig::default(),
        request(&env, 1),
    )
    .await;
    assert!(matches!(first.report, ReportFile::Stored { .. }));
    let restored: BTreeMap<WorkspacePath, RestoredFile> = rows(&env)
        .await
        .into_iter()
        .map(|a| {
            let sha256 = a.sha256.parse().unwrap();
            let path = WorkspacePath::new(a.path.clone()).unwrap();
            (
                path,
                RestoredFile {
                    artifact: a,
                    sha256,
                },
            )
        })
        .collect();
    let mut req = request(&env, 1);
    req.restored = restored;
    let store = Arc::clone(&env.store);
    let mut ck = Checkpointer::new(store, blobs.clone(), PersistConfig::default(), req);
    let outcome = ck.checkpoint().await;
    assert!(outcome.stored.is_empty(), "{outcome:?}");
    assert_eq!(outcome.unchanged, 1);
    let landed = ck.land().await;
    assert!(
        matches!(landed.report, ReportFile::Unchanged { .. }),
        "{:?}",
        landed.report
    );
    assert!(landed.stored.is_empty());
}
