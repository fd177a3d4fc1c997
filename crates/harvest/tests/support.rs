//! Shared scaffolding: a store with one running session, a scratch dir and
//! a directory outside it, and the persist request for them.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use korvus_harvest::{PersistOutcome, PersistRequest};
use korvus_store::{MemoryStore, NewIncident, NewSession, Session, SessionId, Store};

/// A store with one running session, and a scratch dir.
pub(crate) struct Env {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) session: Session,
    pub(crate) scratch: tempfile::TempDir,
    pub(crate) outside: tempfile::TempDir,
}

async fn env_with(store: Arc<dyn Store>) -> Env {
    let incident = store
        .create_incident(NewIncident {
            title: "harvest".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let session = store
        .create_session(NewSession {
            runner: None,
            admission: Default::default(),
            lease: None,
            id: SessionId::new(),
            incident_id: incident.id,
            prompt: "go".into(),
            workspace_ref: None,
        })
        .await
        .unwrap();
    Env {
        store,
        session,
        scratch: tempfile::tempdir().unwrap(),
        outside: tempfile::tempdir().unwrap(),
    }
}

pub(crate) async fn env() -> Env {
    env_with(Arc::new(MemoryStore::new())).await
}

pub(crate) fn write(root: &Path, rel: &str, bytes: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

pub(crate) fn request(env: &Env, revision: u32) -> PersistRequest {
    PersistRequest {
        incident: env.session.incident_id,
        session: env.session.id,
        revision,
        // The sessions of these tests are never reopened.
        fence: 1,
        scratch: Some(env.scratch.path().to_path_buf()),
        skip_prefixes: korvus_workspace::read_only_prefixes(&korvus_workspace::default_trees()),
        restored: BTreeMap::new(),
    }
}

pub(crate) fn paths(outcome: &PersistOutcome) -> Vec<&str> {
    outcome.stored.iter().map(|s| s.path.as_str()).collect()
}
