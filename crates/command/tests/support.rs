//! A manager around a `CommandRunner` running a shell script.

use korvus_store::StoreExt as _;
use std::sync::Arc;
use std::time::Duration;

use korvus_blob::MemoryBlobStore;
use korvus_command::CommandRunner;
use korvus_log::{Access, Event, EventKind, LogId};
use korvus_session::{CreateSession, Manager};
use korvus_store::{IncidentId, MemoryStore, NewIncident, Session, SessionId, Store};
use korvus_workspace::ScratchRoot;

pub(crate) use korvus_runner::testing::unique_sleep;

/// The note a root agent's run gets (what it keeps of root's
/// capabilities), which every run of these tests gets.
fn is_root_note(e: &Event) -> bool {
    matches!(&e.kind, EventKind::Note { text } if text.starts_with("the agent runs as root without"))
}

/// A message's or a note's text.
fn text_of(e: Event) -> Option<String> {
    match e.kind {
        EventKind::Message { text, .. } | EventKind::Note { text } => Some(text),
        _ => None,
    }
}

pub(crate) struct Harness {
    pub(crate) manager: Manager,
    pub(crate) store: Arc<MemoryStore>,
    pub(crate) incident: IncidentId,
    pub(crate) blobs: Arc<MemoryBlobStore>,
    pub(crate) _root: tempfile::TempDir,
}

/// A runner for `sh -c script`.
pub(crate) fn sh(script: &str) -> CommandRunner {
    CommandRunner::new("sh").arg("-c").arg(script)
}

pub(crate) async fn harness(runner: CommandRunner) -> Harness {
    harness_with(runner, |b| b).await
}

pub(crate) async fn harness_with(
    runner: CommandRunner,
    configure: impl FnOnce(korvus_session::ManagerBuilder) -> korvus_session::ManagerBuilder,
) -> Harness {
    harness_in(Arc::new(MemoryStore::new()), runner, configure).await
}

/// A harness on `store` (which the runner may use too).
pub(crate) async fn harness_in(
    store: Arc<MemoryStore>,
    runner: CommandRunner,
    configure: impl FnOnce(korvus_session::ManagerBuilder) -> korvus_session::ManagerBuilder,
) -> Harness {
    let root = tempfile::tempdir().expect("temp dir");
    let blobs = Arc::new(MemoryBlobStore::new());
    let manager = configure(
        Manager::builder(store.clone(), Arc::new(runner))
            .blob_store(blobs.clone())
            .scratch_root(ScratchRoot::supplied(root.path()))
            .cancel_grace(Duration::from_secs(10)),
    )
    .build();
    let incident = store
        .create_incident(NewIncident {
            title: "disk full on db-1".into(),
            workspace: None,
        })
        .await
        .expect("incident");
    Harness {
        manager,
        store,
        incident: incident.id,
        blobs,
        _root: root,
    }
}

impl Harness {
    pub(crate) async fn start(&self, prompt: &str) -> Session {
        self.manager
            .create(CreateSession::new(self.incident, prompt))
            .await
            .expect("create")
    }

    pub(crate) async fn settled(&self, id: SessionId) -> Session {
        self.manager
            .await_settled(id, Duration::from_secs(60))
            .await
            .expect("settled")
    }

    /// Starts a session and waits for its final row.
    pub(crate) async fn run(&self, prompt: &str) -> Session {
        let s = self.start(prompt).await;
        self.settled(s.id).await
    }

    /// The events of the session's log after the prompt, which the
    /// manager logs first as a `user` message (checked here): what the
    /// agent's run produced.
    pub(crate) async fn events(&self, id: SessionId) -> Vec<Event> {
        let mut events = self.log(id).await;
        assert!(
            matches!(
                events.first().map(|e| &e.kind),
                Some(EventKind::Message {
                    role: korvus_log::Role::User,
                    ..
                })
            ),
            "the prompt is the log's first event: {:?}",
            events.first()
        );
        events.remove(0);
        events.into_iter().filter(|e| !is_root_note(e)).collect()
    }

    /// The texts of the messages and notes of `id`'s log (after the
    /// prompt, without the note a root agent's run starts with: these
    /// tests run their agents as root).
    pub(crate) async fn texts(&self, id: SessionId) -> Vec<String> {
        self.events(id)
            .await
            .into_iter()
            .filter_map(text_of)
            .collect()
    }

    /// [`texts`](Self::texts) with the root agent's note kept.
    pub(crate) async fn all_texts(&self, id: SessionId) -> Vec<String> {
        self.log(id).await.into_iter().filter_map(text_of).collect()
    }

    /// Every event of `id`'s log, as stored.
    async fn log(&self, id: SessionId) -> Vec<Event> {
        let log = self
            .manager
            .turn_log()
            .open(LogId::from_uuid(id.as_uuid()), Access::Read)
            .await
            .expect("open log");
        log.read(0, None).await.expect("read log")
    }

    pub(crate) async fn stop(self) {
        self.manager.stop().await;
    }
}

/// Whether a process whose command line starts with `pattern` exists
/// (anchored, so the shell that started it does not count).
pub(crate) fn running(pattern: &str) -> bool {
    std::process::Command::new("pgrep")
        .arg("-f")
        .arg(format!("^{pattern}"))
        .output()
        .expect("pgrep runs")
        .status
        .success()
}

/// Waits (up to 10 s) until `cond` holds.
pub(crate) async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Harness {
    /// Paths of the session's stored artifacts.
    pub(crate) async fn store_artifacts(&self, id: SessionId) -> Vec<String> {
        self.store
            .all_session_artifacts(id)
            .await
            .expect("artifacts")
            .into_iter()
            .map(|a| a.path)
            .collect()
    }

    /// The stored bytes of `id`'s artifact at `path`, as text.
    pub(crate) async fn artifact_text(&self, id: SessionId, path: &str) -> String {
        use korvus_blob::BlobStore as _;
        let artifacts = self
            .store
            .all_session_artifacts(id)
            .await
            .expect("artifacts");
        let artifact = artifacts
            .iter()
            .find(|a| a.path == path)
            .unwrap_or_else(|| panic!("no artifact {path}: {artifacts:#?}"));
        let key = korvus_blob::BlobKey::new(artifact.blob_key.clone()).expect("key");
        let blob = self.blobs.get(&key).await.expect("blob");
        String::from_utf8_lossy(&blob.bytes).into_owned()
    }
}
