//! Creating a session: the running row comes back at once and the run lands
//! its report; bad requests are refused before any row exists; inherited
//! context is written read-only.

use korvus_blob::{BlobKey, BlobStore};
use korvus_runner::{exit, RunOutcome};
use korvus_session::{ContextRequest, SessionError};
use korvus_store::StoreExt as _;
use korvus_store::{ArtifactId, Counters, NewIncident, SessionKind, SessionStatus, Store};
use korvus_testkit::faults::StoreOp;

use crate::support::{counters, settled, write_files, writing, Env, ScriptRunner};

#[tokio::test]
async fn returns_running_row_at_once_and_lands_report_then_completes() {
    let env = Env::new().await;
    let manager = env
        .builder(writing(&[
            ("report.md", "# Found it\n"),
            ("out/a.csv", "a\n"),
        ]))
        .build();
    let s = manager
        .create(env.request("why is db-1 full?"))
        .await
        .unwrap();
    assert_eq!(s.status, SessionStatus::Running);
    assert_eq!(s.kind, SessionKind::Initial);
    let done = settled(&manager, &s).await;
    assert_eq!(done.status, SessionStatus::Completed);
    assert_eq!(done.exit_reason.as_deref(), Some(exit::COMPLETED));
    assert_eq!(done.counters, counters());
    assert!(done.ended_at.is_some());
    let report = env.store.get_report(s.id, 1).await.unwrap();
    let key = report.markdown_key.clone().expect("markdown key");
    let bytes = env
        .blobs
        .get(&BlobKey::new(key).unwrap())
        .await
        .unwrap()
        .bytes;
    assert_eq!(&bytes[..], b"# Found it\n");
    assert_eq!(report.markdown_bytes, 11);
    env.assert_safe().await;
    // The second session of the incident is a follow-up.
    let s2 = manager.create(env.request("and now?")).await.unwrap();
    assert_eq!(s2.kind, SessionKind::FollowUp);
    manager.stop().await;
}

#[tokio::test]
async fn refuses_blank_prompt_closed_incident_and_after_stop() {
    let env = Env::new().await;
    let manager = env.builder(writing(&[])).build();
    assert!(matches!(
        manager.create(env.request("   ")).await,
        Err(SessionError::PromptRequired)
    ));
    let closed = env
        .store
        .create_incident(NewIncident {
            title: "closed".into(),
            workspace: None,
        })
        .await
        .unwrap();
    env.store.close_incident(closed.id).await.unwrap();
    let mut req = env.request("x");
    req.incident_id = closed.id;
    assert!(matches!(
        manager.create(req).await,
        Err(SessionError::IncidentClosed { .. })
    ));
    manager.stop().await;
    assert!(matches!(
        manager.create(env.request("x")).await,
        Err(SessionError::ShuttingDown)
    ));
    assert!(env
        .store
        .all_sessions(env.incident.id)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn bad_context_refs_are_refused_before_the_row_exists() {
    let env = Env::new().await;
    let manager = env.builder(writing(&[("report.md", "# R\n")])).build();
    let first = manager.create(env.request("first")).await.unwrap();
    settled(&manager, &first).await;
    let art = env.store.all_session_artifacts(first.id).await.unwrap()[0].clone();
    let other = env
        .store
        .create_incident(NewIncident {
            title: "other".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let other_manager = env.builder(writing(&[("report.md", "# R\n")])).build();
    let mut req = env.request("elsewhere");
    req.incident_id = other.id;
    let foreign = other_manager.create(req).await.unwrap();
    settled(&other_manager, &foreign).await;
    let foreign_art = env.store.all_session_artifacts(foreign.id).await.unwrap()[0].id;
    let before = env.store.count(StoreOp::CreateSession);
    let cases = [
        vec![ContextRequest::new(
            ArtifactId::from_uuid(uuid::Uuid::nil()),
        )],
        vec![ContextRequest::new(art.id), ContextRequest::new(art.id)],
        vec![ContextRequest::new(ArtifactId::new())],
        vec![ContextRequest::new(foreign_art)],
    ];
    for context in cases {
        let mut req = env.request("with refs");
        req.context = context;
        let err = manager.create(req).await.unwrap_err();
        assert!(
            matches!(err, SessionError::InvalidContextRef { .. }),
            "{err:?}"
        );
    }
    assert_eq!(
        env.store.count(StoreOp::CreateSession),
        before,
        "refs are resolved before any row is written"
    );
    // A role the store would refuse is refused before any row too.
    for role in ["nul\0role".to_owned(), "r".repeat(200)] {
        let mut req = env.request("bad role");
        req.context = vec![ContextRequest::new(art.id).with_role(role)];
        let err = manager.create(req).await.unwrap_err();
        assert!(
            matches!(err, SessionError::InvalidContextRef { .. }),
            "{err:?}"
        );
    }
    assert_eq!(env.store.count(StoreOp::CreateSession), before);
    // A good ref gets its role from the artifact's kind.
    let mut req = env.request("with a good ref");
    req.context = vec![ContextRequest::new(art.id).with_role("  ")];
    let s = manager.create(req).await.unwrap();
    let refs = env.store.list_context_refs(s.id).await.unwrap();
    assert_eq!(art.kind, korvus_store::ArtifactKind::Report);
    assert_eq!(refs[0].role, "prior_report");
    assert_eq!(
        refs[0].role,
        korvus_session::default_role(korvus_store::ArtifactKind::Report)
    );
    settled(&manager, &s).await;
    manager.stop().await;
    other_manager.stop().await;
}

#[tokio::test]
async fn inherited_context_is_written_read_only_at_its_manifest_path() {
    let env = Env::new().await;
    let producer = env
        .builder(writing(&[("report.md", "# R\n"), ("notes.txt", "n")]))
        .build();
    let first = producer.create(env.request("first")).await.unwrap();
    settled(&producer, &first).await;
    let arts = env.store.all_session_artifacts(first.id).await.unwrap();
    let notes = arts.iter().find(|a| a.path == "notes.txt").unwrap();
    let runner = ScriptRunner::new(|ctx, _| async move {
        let f = &ctx.inherited[0];
        let path = f.path.as_ref().expect("written");
        let body =
            std::fs::read_to_string(ctx.scratch.as_ref().unwrap().join(path.as_str())).unwrap();
        assert_eq!(body, "n");
        assert_eq!(path.as_str(), "context/1-notes.txt");
        Ok(RunOutcome::completed(Counters::default()))
    });
    let consumer = env.builder(runner.clone()).build();
    let mut req = env.request("use it");
    req.context = vec![ContextRequest::new(notes.id).with_role("input")];
    let s = consumer.create(req).await.unwrap();
    let done = settled(&consumer, &s).await;
    assert_eq!(done.status, SessionStatus::Completed, "{done:?}");
    assert_eq!(runner.seen.lock().unwrap().len(), 1);
    producer.stop().await;
    consumer.stop().await;
}

#[tokio::test]
async fn the_report_template_is_copied_read_only_and_named_to_the_run() {
    let env = Env::new().await;
    let template = env.root.path().join("template.md");
    std::fs::write(&template, "# Findings\n## Cause\n").unwrap();
    let runner = ScriptRunner::new(|ctx, _| async move {
        let at = ctx.report_template.clone().expect("template named");
        assert_eq!(at.as_str(), korvus_workspace::REPORT_TEMPLATE);
        let path = ctx.scratch.as_ref().unwrap().join(at.as_str());
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "# Findings\n## Cause\n"
        );
        assert!(std::fs::metadata(&path).unwrap().permissions().readonly());
        write_files(&ctx, &[("report.md", "# Findings\n")]);
        Ok(RunOutcome::completed(Counters::default()))
    });
    let manager = env.builder(runner).report_template(&template).build();
    let s = manager.create(env.request("templated")).await.unwrap();
    let row = settled(&manager, &s).await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    // The template is korvus's, not the agent's output: it is not stored.
    let paths: Vec<String> = env
        .store
        .all_session_artifacts(s.id)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.path)
        .collect();
    assert!(
        !paths.iter().any(|p| p.contains("report-template")),
        "{paths:?}"
    );
    manager.stop().await;
}

#[tokio::test]
async fn the_row_is_running_in_the_store_while_the_runner_works() {
    let env = Env::new().await;
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
    let started_tx = std::sync::Mutex::new(Some(started_tx));
    let release = std::sync::Arc::new(tokio::sync::Notify::new());
    let gate = release.clone();
    let runner = ScriptRunner::new(move |ctx, _| {
        if let Some(tx) = started_tx.lock().unwrap().take() {
            let _ = tx.send(());
        }
        let gate = gate.clone();
        async move {
            gate.notified().await;
            write_files(&ctx, &[("report.md", "# R\n")]);
            Ok(RunOutcome::completed(Counters::default()))
        }
    });
    let manager = env.builder(runner).build();
    let s = manager.create(env.request("slow")).await.unwrap();
    started_rx.await.unwrap();
    // While the runner works, the stored row (not the returned copy) is
    // running with no end time and no report row yet.
    let stored = env.store.get_session(s.id).await.unwrap();
    assert_eq!(stored.status, SessionStatus::Running);
    assert_eq!(stored.ended_at, None);
    assert!(env.store.all_reports(s.id).await.unwrap().is_empty());
    release.notify_one();
    let done = settled(&manager, &s).await;
    assert_eq!(done.status, SessionStatus::Completed);
    manager.stop().await;
}

/// Two concurrent first creates in a fresh incident, 100 rounds: exactly
/// one is `initial` — the store decides the kind from the seq it assigns,
/// and create no longer reads the incident's sessions to guess it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_first_creates_give_exactly_one_initial() {
    let env = Env::new().await;
    let manager = env.builder(writing(&[("report.md", "# R\n")])).build();
    for round in 0..100 {
        let incident = env
            .store
            .create_incident(NewIncident {
                title: format!("round {round}"),
                workspace: None,
            })
            .await
            .unwrap();
        let request = |prompt: &str| korvus_session::CreateSession::new(incident.id, prompt);
        let (a, b) = tokio::join!(manager.create(request("a")), manager.create(request("b")));
        let (a, b) = (a.unwrap(), b.unwrap());
        let kinds = [a.kind, b.kind];
        assert_eq!(
            kinds.iter().filter(|k| **k == SessionKind::Initial).count(),
            1,
            "round {round}: {kinds:?}"
        );
        for s in [&a, &b] {
            assert_eq!(s.kind, SessionKind::for_seq(s.seq), "round {round}");
        }
    }
    manager.stop().await;
}
