//! Budgets: the gateway adds every metered call to the session's and the
//! incident's budgets in the store, refuses the call that would pass one,
//! and korvus stops the run — the session pauses `budget_reached` with its
//! files stored — until the budget is raised and it continues.

use std::ffi::OsString;
use std::sync::Arc;
use std::time::Duration;

use korvus_command::{CommandRunner, ModelGateway, Network, Roots};
use korvus_model_stub::{Script, StubServer, TestCa};
use korvus_session::CreateSession;
use korvus_store::{
    exit_reason, BudgetLimits, BudgetScope, Budgets, MemoryStore, PriceTable, SessionStatus,
    StoreExt as _,
};

use crate::support::{harness_in, sh, Harness};

const KEY_VAR: &str = "KORVUS_TEST_MODEL_KEY";

/// Calls the model `$CALLS` times (or once when an earlier revision's
/// `calls.txt` is back: the run after a raise), writing each answer's
/// status; then, if not stopped, completes.
const AGENT: &str = r#"
    echo '# R' > report.md
    n=${CALLS:-4}
    [ -f calls.txt ] && n=1
    i=0
    while [ $i -lt $n ]; do
        i=$((i + 1))
        code=$(curl -s -o "answer-$i.txt" -w '%{http_code}' --max-time 20 \
            -H "Authorization: Bearer $KORVUS_MODEL_TOKEN" -H 'content-type: application/json' \
            -d '{"input":"hi"}' "$KORVUS_MODEL_URL/v1/responses")
        echo "call $i: $code" >> calls.txt
    done
    sleep 1
"#;

/// A harness whose runner and manager keep budgets in one memory store,
/// on a stub whose every call uses 1,500 input and 500 output tokens.
async fn budgeted(calls: u32) -> (Harness, Arc<MemoryStore>, StubServer) {
    let ca = TestCa::new().unwrap();
    let script = Script {
        usage: (1_500, 500),
        ..Script::default()
    };
    let stub = StubServer::start_tls(script, &ca).await.unwrap();
    let gateway = ModelGateway::openai(stub.base_url(), KEY_VAR)
        .trusting(Roots::only().with(ca.ca_der().clone()));
    let source: Vec<(OsString, OsString)> = std::env::vars_os()
        .chain([
            (KEY_VAR.into(), "sk-budget-test".into()),
            ("CALLS".into(), calls.to_string().into()),
        ])
        .collect();
    let store = Arc::new(MemoryStore::new());
    let budgets: Arc<dyn Budgets> = store.clone();
    let runner: CommandRunner = sh(AGENT)
        .network(Network::host())
        .env_source(source)
        .env_pass("CALLS")
        .model_gateway(gateway)
        .budgets(Arc::clone(&budgets), PriceTable::new());
    let h = harness_in(store.clone(), runner, |b| b.budgets(budgets)).await;
    (h, store, stub)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_past_a_session_budget_is_refused_and_the_session_pauses_until_raised() {
    let (h, store, stub) = budgeted(4).await;
    let created = h
        .manager
        .create(CreateSession::new(h.incident, "spend").budget(BudgetLimits::new().tokens(5_000)))
        .await
        .unwrap();
    let paused = h.settled(created.id).await;
    assert_eq!(paused.status, SessionStatus::Running, "{paused:?}");
    assert_eq!(
        paused.exit_reason.as_deref(),
        Some(exit_reason::BUDGET_REACHED)
    );
    assert!(paused.is_idle());
    // Two calls went (4,000 tokens); the third, which would pass 5,000,
    // was refused and the run stopped.
    assert_eq!(stub.requests().len(), 2);
    // The agent is stopped as its third call is refused: whether it wrote
    // down the refusal first is a race.
    let calls = h.artifact_text(created.id, "calls.txt").await;
    let rest = calls.strip_prefix("call 1: 200\ncall 2: 200\n");
    assert!(matches!(rest, Some("" | "call 3: 400\n")), "{calls}");
    let budget = store
        .budget(BudgetScope::Session(created.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(budget.spent.total_tokens(), 4_000);
    assert_eq!(
        (paused.counters.input_tokens, paused.counters.output_tokens),
        (3_000, 1_000)
    );
    let texts = h.all_texts(created.id).await;
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("budget: the tokens budget of session")),
        "{texts:#?}"
    );
    assert!(
        texts.iter().any(|t| t.starts_with(
            "model gateway: 2 call(s) metered (3000 input / 1000 output tokens), 0 not metered, 0 refused for a wrong token, 0 could not reach the upstream, 1 refused past the budget"
        )),
        "{texts:#?}"
    );
    // Its files are stored, its report row written.
    let reports = h.store.all_reports(created.id).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].exit_reason.as_str(), exit_reason::BUDGET_REACHED);

    // Raised: it continues (revision 2, one more call) and completes.
    let standing = h
        .manager
        .set_budget(created.id, BudgetLimits::new().tokens(10_000))
        .await
        .unwrap();
    assert_eq!(standing.session.unwrap().limits.tokens, Some(10_000));
    let done = h.settled(created.id).await;
    let done = wait_for_revision(&h, done, 2).await;
    assert_eq!(done.status, SessionStatus::Completed, "{done:?}");
    assert_eq!(done.revision, 2);
    assert_eq!(stub.requests().len(), 3);
    let spent = store
        .budget(BudgetScope::Session(created.id))
        .await
        .unwrap()
        .unwrap()
        .spent;
    assert_eq!(spent.total_tokens(), 6_000);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incident_budget_spent_by_one_session_stops_the_next() {
    let (h, _store, stub) = budgeted(2).await;
    h.manager
        .set_incident_budget(h.incident, BudgetLimits::new().tokens(4_000))
        .await
        .unwrap();
    let first = h.run("spend it").await;
    assert_eq!(first.status, SessionStatus::Completed, "{first:?}");
    assert_eq!(stub.requests().len(), 2);

    let second = h.run("and more").await;
    assert_eq!(second.status, SessionStatus::Running, "{second:?}");
    assert_eq!(
        second.exit_reason.as_deref(),
        Some(exit_reason::BUDGET_REACHED)
    );
    assert_eq!(stub.requests().len(), 2, "the second made no call");
    let standing = h.manager.budget(second.id).await.unwrap();
    assert!(standing.reached());
    assert_eq!(standing.session, None);
    assert_eq!(standing.incident.unwrap().spent.total_tokens(), 4_000);

    // Cancelled while paused: it ends, like a session waiting for the user.
    let cancelled = h.manager.cancel(second.id).await.unwrap();
    assert_eq!(cancelled.status, SessionStatus::Cancelled);
    h.stop().await;
}

/// `settled` may return the paused row before the continue's row: waits
/// until the row has reached `revision` and ended.
async fn wait_for_revision(
    h: &Harness,
    mut row: korvus_store::Session,
    revision: u32,
) -> korvus_store::Session {
    for _ in 0..600 {
        if row.revision >= revision && !row.is_active() && !row.is_idle() {
            return row;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        row = h.settled(row.id).await;
    }
    panic!("session never reached revision {revision}: {row:?}");
}

/// A wall-time budget stops a run that makes no model call at all (no
/// gateway): the session pauses `budget_reached` once its time is spent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_time_budget_stops_a_run_without_model_calls() {
    let store = Arc::new(MemoryStore::new());
    let budgets: Arc<dyn Budgets> = store.clone();
    let runner = sh("echo '# R' > report.md; echo x > started; sleep 60; echo x > finished")
        .budgets(Arc::clone(&budgets), PriceTable::new());
    let h = harness_in(store.clone(), runner, |b| b.budgets(budgets)).await;
    let limits = BudgetLimits::new().wall(Duration::from_secs(2));
    let created = h
        .manager
        .create(CreateSession::new(h.incident, "wait").budget(limits))
        .await
        .unwrap();
    let paused = h.settled(created.id).await;
    assert_eq!(
        paused.exit_reason.as_deref(),
        Some(exit_reason::BUDGET_REACHED),
        "{paused:?}"
    );
    let stored = h.store_artifacts(created.id).await;
    assert!(stored.iter().any(|a| a == "started"), "{stored:?}");
    assert!(!stored.iter().any(|a| a == "finished"), "{stored:?}");
    let spent = store
        .budget(BudgetScope::Session(created.id))
        .await
        .unwrap()
        .unwrap()
        .spent;
    assert!(spent.wall_ms >= 2_000, "{spent:?}");
    let texts = h.all_texts(created.id).await;
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("budget: the wall_time budget of session")),
        "{texts:#?}"
    );
    h.stop().await;
}

/// A budget asked of a manager that keeps none is refused before anything
/// is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_without_a_budget_store_is_refused_and_nothing_written() {
    let h = crate::support::harness(sh("echo '# R' > report.md")).await;
    let asked = CreateSession::new(h.incident, "capped").budget(BudgetLimits::new().tokens(1));
    match h.manager.create(asked).await {
        Err(korvus_session::SessionError::NoBudgets) => {}
        other => panic!("expected NoBudgets, got {other:?}"),
    }
    assert!(h.store.all_sessions(h.incident).await.unwrap().is_empty());
    // An incident's budget: an unknown incident is `NotFound` first, as a
    // session's is; a known one `NoBudgets`.
    let limits = BudgetLimits::new().tokens(1);
    let unknown = korvus_store::IncidentId::new();
    for result in [
        h.manager.incident_budget(unknown).await.map(|_| ()),
        h.manager
            .set_incident_budget(unknown, limits)
            .await
            .map(|_| ()),
    ] {
        assert!(
            matches!(
                result,
                Err(korvus_session::SessionError::NotFound {
                    entity: korvus_store::Entity::Incident,
                    ..
                })
            ),
            "{result:?}"
        );
    }
    for result in [
        h.manager.incident_budget(h.incident).await.map(|_| ()),
        h.manager
            .set_incident_budget(h.incident, limits)
            .await
            .map(|_| ()),
    ] {
        assert!(
            matches!(result, Err(korvus_session::SessionError::NoBudgets)),
            "{result:?}"
        );
    }
    h.stop().await;
}
