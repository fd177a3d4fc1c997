//! `POST /api/sessions/{id}/reopen` racing an applied prune of the
//! session, on the one-machine `JsonlLog`: each round answers the reopen
//! (the session kept whole) or `404 not_found` (the session gone) — never
//! `500 log_failed` — and leaves no log file of a pruned session behind.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::http::StatusCode;
use korvus_blob::{BlobStore, FsBlobStore};
use korvus_log::{JsonlLog, TurnLog};
use korvus_runner::testing::{write_files, ScriptRunner};
use korvus_runner::{ExitReason, RunOutcome};
use korvus_session::{prune, CreateSession, Manager, PruneConfig, PruneTargets};
use korvus_store::{CoordinatedStore, Counters, NewIncident, SessionStatus, Store};
use korvus_store_sql::{migrate, open_sqlite, SqliteStore};
use korvus_workspace::ScratchRoot;
use serde_json::json;

use crate::support::post;

/// Completes with a report the first time; a reopen (`hold`) runs until
/// cancelled.
fn runner() -> ScriptRunner {
    ScriptRunner::new(|ctx, message| async move {
        if message.is_some() {
            ctx.cancel.cancelled().await;
            return Ok(RunOutcome::new(ExitReason::CANCELLED, Counters::default())
                .with_author_finished(false));
        }
        write_files(&ctx, &[("report.md", "# R\n")]);
        Ok(RunOutcome::completed(Counters::default()))
    })
}

#[tokio::test]
async fn a_reopen_racing_prune_over_http_answers_the_session_or_404_on_jsonl_logs() {
    let dir = tempfile::tempdir().unwrap();
    let pool = open_sqlite(&dir.path().join("korvus.db")).await.unwrap();
    migrate(&pool).await.unwrap();
    let store = Arc::new(SqliteStore::new(pool));
    let logs_dir = dir.path().join("logs");
    let logs = Arc::new(JsonlLog::open_dir(&logs_dir).unwrap());
    let blobs = Arc::new(FsBlobStore::open(dir.path().join("blobs")).unwrap());
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let manager = Manager::builder(
        Arc::clone(&store) as Arc<dyn CoordinatedStore>,
        Arc::new(runner()),
    )
    .turn_log(Arc::clone(&logs) as Arc<dyn TurnLog>)
    .blob_store(Arc::clone(&blobs) as Arc<dyn BlobStore>)
    .scratch_root(ScratchRoot::supplied(&scratch))
    .cancel_grace(Duration::from_millis(200))
    .build();
    let app = korvus_http::router(manager.clone());
    let incident = store
        .create_incident(NewIncident {
            title: "db-1 disk".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let targets = || PruneTargets {
        store: &*store,
        logs: &*logs,
        blobs: &*blobs,
    };
    let config = PruneConfig::new(SystemTime::now() + Duration::from_secs(3600), true);
    let (mut kept, mut gone) = (0, 0);
    for round in 0..20u64 {
        let s = manager
            .create(CreateSession::new(incident.id, format!("run {round}")))
            .await
            .unwrap();
        let row = manager
            .await_settled(s.id, Duration::from_secs(20))
            .await
            .unwrap();
        assert_eq!(row.status, SessionStatus::Completed, "round {round}");
        // The prune starts at once, or a little after the reopen: each
        // side wins some rounds.
        let late = Duration::from_millis(if round % 2 == 0 { 0 } else { round });
        let uri = format!("/api/sessions/{}/reopen", s.id);
        let (pruned, answer) = tokio::join!(
            async {
                tokio::time::sleep(late).await;
                prune(targets(), &config).await
            },
            post(&app, &uri, json!({"message": "hold"}))
        );
        let pruned = pruned.unwrap();
        match answer.status {
            StatusCode::OK => {
                kept += 1;
                assert_eq!(pruned.pruned, 0, "round {round}: {pruned:?}");
                manager.cancel(s.id).await.unwrap();
                let row = manager
                    .await_settled(s.id, Duration::from_secs(20))
                    .await
                    .unwrap();
                assert_eq!(row.revision, 2, "round {round}");
            }
            StatusCode::NOT_FOUND => {
                gone += 1;
                answer.assert_error(StatusCode::NOT_FOUND, "not_found");
                assert_eq!(pruned.pruned, 1, "round {round}: {pruned:?}");
            }
            other => panic!(
                "round {round}: a reopen racing prune answered {other}: {}",
                answer.text()
            ),
        }
        // What the round kept is pruned before the next: no log file of
        // the session is left either way.
        prune(targets(), &config).await.unwrap();
        let left: Vec<_> = std::fs::read_dir(&logs_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "round {round}: {left:?}");
    }
    assert!(
        kept > 0 && gone > 0,
        "both sides won some rounds: {kept} kept, {gone} gone"
    );
    manager.stop().await;
}
