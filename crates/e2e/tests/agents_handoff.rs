//! The real Codex binary handed off mid-run: its manager drains while the
//! agent's tool call runs; another manager of the pool (a second replica
//! on the same database, blob store and scratch root) resumes the same
//! revision from the checkpoint the hand-off stored — Codex resumes its
//! own thread, so the model's next request carries the earlier turn — and
//! the revision lands once.

use std::time::{Duration, Instant};

use korvus_command::{ModelEndpoint, Preset};
use korvus_log::EventKind;
use korvus_model_stub::{Script, StubServer};
use korvus_session::CreateSession;
use korvus_store::{NewIncident, SessionStatus, StoreExt as _};

use crate::agents::{agent_bin, Rig};

const PROMPT: &str = "Why is db-1's disk full?";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_codex_handed_off_mid_run_resumes_its_thread_on_another_replica() {
    let Some(bin) = agent_bin("KORVUS_CODEX_BIN") else {
        return;
    };
    // The tool call writes its progress, works a while, then the report.
    let stub = StubServer::start(Script {
        command: "mkdir -p work && echo 'step 1' > work/progress.txt && sleep 6 && \
                  printf '# Findings\\n' > report.md && echo written"
            .to_owned(),
        ..Script::default()
    })
    .await
    .unwrap();
    let endpoint = ModelEndpoint::new(stub.openai_base_url());
    let runner = || Preset::Codex.runner(&bin, Some(&endpoint));
    let rig = Rig::new(runner()).await;
    let incident = korvus_store::Store::create_incident(
        &*rig.store,
        NewIncident {
            title: "db-1 disk full".into(),
            workspace: None,
        },
    )
    .await
    .unwrap();
    let session = rig
        .manager
        .create(CreateSession::new(incident.id, PROMPT))
        .await
        .unwrap();
    let progress = rig
        .scratch()
        .join(session.id.to_string())
        .join("1/work/progress.txt");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !progress.exists() {
        assert!(
            Instant::now() < deadline,
            "the tool call never ran: {:#?}",
            rig.events(&session).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = stub.requests().len();
    let survivor = rig.replica(runner());
    assert!(rig.manager.drain(Duration::from_secs(60)).await);

    let row = match survivor
        .await_settled(session.id, Duration::from_secs(120))
        .await
    {
        Ok(row) => row,
        Err(e) => panic!("{e}: {:#?}", rig.events(&session).await),
    };
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    assert_eq!((row.revision, row.attempt), (1, 2), "{row:?}");
    let events = rig.events(&session).await;
    let noted = |prefix: &str| {
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Note { text } if text.starts_with(prefix)))
    };
    assert!(noted("handed off"), "{events:#?}");
    assert!(noted("resuming codex thread "), "{events:#?}");
    // The resumed agent's first request carries its earlier turn (the
    // prompt) and korvus's message that it was interrupted.
    let requests = stub.requests();
    let resumed = &requests[before..];
    assert!(!resumed.is_empty(), "{requests:#?}");
    assert!(
        resumed[0].mentions(PROMPT) && resumed[0].mentions("was interrupted"),
        "{:#?}",
        resumed[0]
    );
    let reports = rig.store.all_reports(session.id).await.unwrap();
    assert_eq!(reports.len(), 1, "{reports:#?}");
    assert_eq!(reports[0].exit_reason, "completed");
    let artifacts = rig.store.all_session_artifacts(session.id).await.unwrap();
    assert!(
        artifacts.iter().any(|a| a.path == "work/progress.txt"),
        "{artifacts:#?}"
    );
    survivor.stop().await;
}
