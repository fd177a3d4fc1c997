//! Docs search: pinned at the session's commit, handed to the run, released
//! exactly once after landing — also when the run was cancelled or
//! panicked. Uses the `mock` feature's `MockDocsSearch`/`MockDocsClient`.

use korvus_store::StoreExt as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use korvus_runner::{exit, DocsLease, MockDocsClient, MockDocsSearch, RunOutcome};
use korvus_session::{CreateSession, Manager};
use korvus_store::{Counters, IncidentId, NewIncident, SessionStatus, Store, WorkspaceRef};

use crate::support::{settled, write_files, Env, ScriptRunner};

const COMMIT: &str = "0123456789abcdef0123456789abcdef01234567";

/// What the release of a lease saw.
#[derive(Default)]
struct Released {
    times: AtomicUsize,
    /// The revision's report row existed when the release ran.
    after_report: AtomicBool,
}

/// A docs search that expects exactly `pins` pins at [`COMMIT`]; each lease
/// answers one search and records its release in `released`.
fn docs(store: Arc<dyn Store>, pins: usize, released: &Arc<Released>) -> MockDocsSearch {
    let released = Arc::clone(released);
    let mut docs = MockDocsSearch::new();
    docs.expect_pin()
        .withf(|pin: &WorkspaceRef| pin.commit == COMMIT && pin.repo == "repo.git")
        .times(pins)
        .returning(move |_| {
            let mut client = MockDocsClient::new();
            client
                .expect_search()
                .returning(|query, _| Ok(vec![format!("docs about {query}")]));
            let (store, released) = (Arc::clone(&store), Arc::clone(&released));
            Ok(DocsLease {
                client: Arc::new(client),
                release: Box::pin(async move {
                    released.times.fetch_add(1, Ordering::SeqCst);
                    let incidents = store.all_incidents().await.unwrap();
                    for incident in incidents {
                        for s in store.all_sessions(incident.id).await.unwrap() {
                            if store.get_report(s.id, s.revision).await.is_ok() {
                                released.after_report.store(true, Ordering::SeqCst);
                            }
                        }
                    }
                }),
            })
        });
    docs
}

async fn pinned_incident(env: &Env) -> IncidentId {
    env.store
        .create_incident(NewIncident {
            title: "pinned".into(),
            workspace: Some(WorkspaceRef {
                repo: "repo.git".into(),
                commit: COMMIT.into(),
            }),
        })
        .await
        .unwrap()
        .id
}

fn request(incident_id: IncidentId) -> CreateSession {
    CreateSession::new(incident_id, "why?")
}

async fn run_once(manager: &Manager, incident: IncidentId) -> korvus_store::Session {
    let s = manager.create(request(incident)).await.unwrap();
    settled(manager, &s).await
}

#[tokio::test]
async fn pinned_at_the_commit_handed_to_the_run_and_released_once_after_landing() {
    let env = Env::new().await;
    let released = Arc::new(Released::default());
    let runner = ScriptRunner::new(|ctx, _| async move {
        let docs = ctx.tools.docs.clone().expect("docs handed to the run");
        let found = docs.search("disk usage", 3).await.unwrap();
        write_files(&ctx, &[("report.md", &found.join("\n"))]);
        Ok(RunOutcome::completed(Counters::default()))
    });
    let manager = env
        .builder(runner)
        .docs_search(Arc::new(docs(env.store.clone(), 1, &released)))
        .build();
    let incident = pinned_incident(&env).await;
    let done = run_once(&manager, incident).await;
    assert_eq!(done.status, SessionStatus::Completed);
    assert_eq!(released.times.load(Ordering::SeqCst), 1);
    assert!(released.after_report.load(Ordering::SeqCst));
    let report = env.store.get_report(done.id, 1).await.unwrap();
    assert!(report.markdown_key.is_some(), "the run used the client");
    manager.stop().await;
    assert_eq!(released.times.load(Ordering::SeqCst), 1, "released once");
}

#[tokio::test]
async fn released_once_when_the_run_is_cancelled() {
    let env = Env::new().await;
    let released = Arc::new(Released::default());
    let runner = ScriptRunner::new(|ctx, _| async move {
        assert!(ctx.tools.docs.is_some());
        ctx.cancel.cancelled().await;
        Ok(RunOutcome::completed(Counters::default()))
    });
    let manager = env
        .builder(runner.clone())
        .docs_search(Arc::new(docs(env.store.clone(), 1, &released)))
        .build();
    let incident = pinned_incident(&env).await;
    let s = manager.create(request(incident)).await.unwrap();
    while runner.seen.lock().unwrap().is_empty() {
        tokio::task::yield_now().await;
    }
    manager.cancel(s.id).await.unwrap();
    let done = settled(&manager, &s).await;
    assert_eq!(done.status, SessionStatus::Cancelled);
    assert_eq!(released.times.load(Ordering::SeqCst), 1);
    assert!(released.after_report.load(Ordering::SeqCst));
    manager.stop().await;
}

#[tokio::test]
async fn released_once_when_the_runner_panics() {
    let env = Env::new().await;
    let released = Arc::new(Released::default());
    let runner = ScriptRunner::new(|ctx, _| async move {
        assert!(ctx.tools.docs.is_some());
        panic!("runner blew up");
    });
    let manager = env
        .builder(runner)
        .docs_search(Arc::new(docs(env.store.clone(), 1, &released)))
        .build();
    let incident = pinned_incident(&env).await;
    let done = run_once(&manager, incident).await;
    assert_eq!(done.status, SessionStatus::Failed);
    assert_eq!(done.exit_reason.as_deref(), Some(exit::PANICKED));
    assert_eq!(released.times.load(Ordering::SeqCst), 1);
    assert!(released.after_report.load(Ordering::SeqCst));
    manager.stop().await;
}

#[tokio::test]
async fn an_unpinned_session_gets_no_docs_and_pins_nothing() {
    let env = Env::new().await;
    let released = Arc::new(Released::default());
    let runner = ScriptRunner::new(|ctx, _| async move {
        assert!(ctx.tools.docs.is_none(), "no commit, no docs");
        write_files(&ctx, &[("report.md", "# no docs\n")]);
        Ok(RunOutcome::completed(Counters::default()))
    });
    let manager = env
        .builder(runner)
        .docs_search(Arc::new(docs(env.store.clone(), 0, &released)))
        .build();
    let done = run_once(&manager, env.incident.id).await;
    assert_eq!(done.status, SessionStatus::Completed);
    assert_eq!(released.times.load(Ordering::SeqCst), 0);
    manager.stop().await;
}
