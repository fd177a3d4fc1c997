//! Shared test scaffolding: a scriptable runner and an environment of real
//! in-memory backends wrapped in fault injectors.

use korvus_store::StoreExt as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use korvus_blob::{BlobKey, BlobStore, MemoryBlobStore};
use korvus_log::{EventKind, MemoryLog, TurnLog};
use korvus_runner::{RunOutcome, Runner};
use korvus_session::{CreateSession, Manager, ManagerBuilder};
use korvus_store::{
    CoordinatedStore, Counters, Incident, MemoryStore, NewIncident, SessionStatus, Store,
};
use korvus_testkit::faults::{FaultBlobStore, FaultStore};
use korvus_workspace::ScratchRoot;

pub(crate) use korvus_runner::testing::{log_turn, write_files, ScriptRunner};
pub(crate) use korvus_session::testing::settled;

/// A runner that writes `report.md` plus `files`, logs one turn, completes.
pub(crate) fn writing(files: &'static [(&'static str, &'static str)]) -> ScriptRunner {
    ScriptRunner::new(move |ctx, _| async move {
        write_files(&ctx, files);
        log_turn(&ctx, 1).await;
        Ok(RunOutcome::completed(counters()))
    })
}

pub(crate) fn counters() -> Counters {
    Counters {
        turns: 1,
        tool_calls: 2,
        input_tokens: 30,
        output_tokens: 40,
    }
}

pub(crate) fn write(dir: &Path, path: &str, body: &str) {
    let p = dir.join(path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, body).unwrap();
}

/// Real in-memory backends behind fault injectors, a scratch root, and a
/// builder to finish.
pub(crate) struct Env {
    pub(crate) store: Arc<FaultStore>,
    pub(crate) blobs: Arc<FaultBlobStore>,
    pub(crate) logs: Arc<dyn TurnLog>,
    pub(crate) root: tempfile::TempDir,
    pub(crate) incident: Incident,
}

impl Env {
    pub(crate) async fn new() -> Self {
        Self::with(
            Arc::new(MemoryStore::new()),
            Arc::new(MemoryBlobStore::new()),
            Arc::new(MemoryLog::new()),
        )
        .await
    }

    pub(crate) async fn with(
        store: Arc<dyn CoordinatedStore>,
        blobs: Arc<dyn BlobStore>,
        logs: Arc<dyn TurnLog>,
    ) -> Self {
        let store = Arc::new(FaultStore::new(store));
        let incident = store
            .create_incident(NewIncident {
                title: "test incident".into(),
                workspace: None,
            })
            .await
            .unwrap();
        Self {
            store,
            blobs: Arc::new(FaultBlobStore::new(blobs)),
            logs,
            root: tempfile::tempdir().unwrap(),
            incident,
        }
    }

    pub(crate) fn builder(&self, runner: impl Runner) -> ManagerBuilder {
        Manager::builder(self.store.clone(), Arc::new(runner))
            .blob_store(self.blobs.clone())
            .turn_log(Arc::clone(&self.logs))
            .scratch_root(ScratchRoot::supplied(self.root.path()))
            // Checkpoints are tested on their own (`checkpoints.rs`): here
            // a turn's end must not race the landing's store calls.
            .checkpoint_interval(Duration::ZERO)
            .settle_timeout(Duration::from_secs(5))
            .cancel_grace(Duration::from_millis(200))
    }

    /// Creates a session asking `prompt` through `manager` and waits (ten
    /// seconds at most) until it settled; returns the settled row.
    pub(crate) async fn run_to_end(
        &self,
        manager: &Manager,
        prompt: &str,
    ) -> korvus_store::Session {
        let session = manager.create(self.request(prompt)).await.unwrap();
        manager
            .await_settled(session.id, Duration::from_secs(10))
            .await
            .unwrap()
    }

    /// The scratch dir of `session`'s `revision` under this env's root.
    pub(crate) fn dir_of(
        &self,
        session: korvus_store::SessionId,
        revision: u32,
    ) -> std::path::PathBuf {
        self.root
            .path()
            .join(session.to_string())
            .join(revision.to_string())
    }

    pub(crate) fn request(&self, prompt: &str) -> CreateSession {
        CreateSession::new(self.incident.id, prompt)
    }

    /// The invariants every fault path must keep: no row running (unless
    /// waiting for the user) and no row pointing at missing bytes.
    pub(crate) async fn assert_safe(&self) {
        for s in self.store.all_sessions(self.incident.id).await.unwrap() {
            if s.status == SessionStatus::Running {
                assert_eq!(
                    s.exit_reason.as_deref(),
                    Some(korvus_runner::exit::AWAITING_USER),
                    "session {} left running",
                    s.id
                );
            }
            assert_eq!(s.ended_at.is_some(), s.status.is_terminal());
            for r in self.store.all_reports(s.id).await.unwrap() {
                if let Some(key) = r.markdown_key {
                    let key = BlobKey::new(key).unwrap();
                    assert!(
                        self.blobs.head(&key).await.is_ok(),
                        "report {key} points at missing bytes"
                    );
                }
            }
        }
        for a in self
            .store
            .all_incident_artifacts(self.incident.id)
            .await
            .unwrap()
        {
            let key = BlobKey::new(a.blob_key.clone()).unwrap();
            let blob = self.blobs.get(&key).await;
            assert!(blob.is_ok(), "artifact {} points at missing bytes", a.path);
            assert_eq!(blob.unwrap().bytes.len() as u64, a.size_bytes);
        }
    }
}

/// The texts of every note in a session's turn log.
pub(crate) async fn notes(env: &Env, session: korvus_store::SessionId) -> Vec<String> {
    let log = env
        .logs
        .open(
            korvus_log::LogId::from_uuid(session.as_uuid()),
            korvus_log::Access::Read,
        )
        .await
        .unwrap();
    log.read(0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Note { text } => Some(text),
            _ => None,
        })
        .collect()
}
