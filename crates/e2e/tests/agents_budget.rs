//! The real Codex and Claude Code binaries at a budget: the answer korvus
//! gives a call past a budget is final for both (neither retries it), and
//! a session whose budget runs out mid-turn pauses `budget_reached` with
//! its files, then continues natively — its agent's own thread — once the
//! budget is raised.

use std::time::{Duration, Instant};

use korvus_command::Preset;
use korvus_model_stub::{Mode, Script, StubServer, TestCa};
use korvus_session::CreateSession;
use korvus_store::{exit_reason, BudgetLimits, NewIncident, SessionStatus, Store as _};

use crate::agents::{agent_bin, through_the_gateway, Rig};

/// `preset`'s runner against a TLS stub with `script`, through the
/// gateway, in a rig.
async fn budget_rig(preset: Preset, bin: &std::path::Path, script: Script) -> (StubServer, Rig) {
    let ca = TestCa::new().unwrap();
    let (stub, runner) = through_the_gateway(preset, bin, script, &ca).await;
    (stub, Rig::new(runner).await)
}

/// Both agents, each with its binary.
fn agents() -> Vec<(Preset, std::path::PathBuf)> {
    [
        (Preset::Codex, "KORVUS_CODEX_BIN"),
        (Preset::ClaudeCode, "KORVUS_CLAUDE_BIN"),
    ]
    .into_iter()
    .filter_map(|(preset, var)| agent_bin(var).map(|bin| (preset, bin)))
    .collect()
}

/// An upstream answering every call as korvus answers one past a budget
/// (`400`, `budget_reached`, `x-should-retry: false`), with no budget of
/// korvus's own to stop the run: each agent gives up by itself after the
/// one call — no retry reaches the upstream — and ends its turn failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_answer_is_final_for_both_agents() {
    for (preset, bin) in agents() {
        let script = Script {
            mode: Mode::Refuse,
            ..Script::default()
        };
        let (stub, rig) = budget_rig(preset, &bin, script).await;
        let started = Instant::now();
        let row = start(&rig, "x", None).await;
        let row = rig.settled(&row).await;
        let elapsed = started.elapsed();
        assert_eq!(row.status, SessionStatus::Failed, "{preset:?}: {row:?}");
        // Any retry would have reached the upstream: none did.
        assert_eq!(
            stub.requests().len(),
            1,
            "{preset:?}: {:#?}",
            stub.requests()
        );
        assert!(elapsed < Duration::from_secs(60), "{preset:?}: {elapsed:?}");
        rig.manager.stop().await;
    }
}

/// A 150-token session budget on a stub whose answers use 110 each: the
/// agent's first call goes, its second (after running the tool) is
/// refused and korvus stops it — the session pauses `budget_reached`;
/// raised to 1,000, it continues in its agent's own thread and completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_agents_pause_at_their_budget_and_continue_once_raised() {
    for (preset, bin) in agents() {
        let (stub, rig) = budget_rig(preset, &bin, Script::default()).await;
        let limits = BudgetLimits::new().tokens(150);
        let row = start(&rig, "Why is db-1's disk full?", Some(limits)).await;
        let paused = rig.settled(&row).await;
        assert_eq!(
            paused.status,
            SessionStatus::Running,
            "{preset:?}: {paused:?}"
        );
        assert_eq!(
            paused.exit_reason.as_deref(),
            Some(exit_reason::BUDGET_REACHED),
            "{preset:?}"
        );
        assert_eq!(
            stub.requests().len(),
            1,
            "{preset:?}: the refused call stayed here"
        );
        let texts: Vec<String> = rig
            .events(&paused)
            .await
            .into_iter()
            .filter_map(|e| match e.kind {
                korvus_log::EventKind::Note { text } => Some(text),
                _ => None,
            })
            .collect();
        assert!(
            texts
                .iter()
                .any(|t| t.ends_with(", 1 refused past the budget")),
            "{preset:?}: one refusal, no retry before the stop: {texts:#?}"
        );

        rig.manager
            .set_budget(paused.id, BudgetLimits::new().tokens(1_000))
            .await
            .unwrap();
        let mut done = rig.settled(&paused).await;
        for _ in 0..600 {
            if done.revision == 2 && done.status.is_terminal() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            done = rig.settled(&paused).await;
        }
        assert_eq!(
            done.status,
            SessionStatus::Completed,
            "{preset:?}: {done:?}"
        );
        assert_eq!(done.revision, 2);
        let requests = stub.requests();
        assert!(
            requests
                .iter()
                .skip(1)
                .any(|r| r.mentions("Why is db-1's disk full?")),
            "{preset:?}: the continued agent resumed its own thread: {requests:#?}"
        );
        rig.manager.stop().await;
    }
}

/// Creates a session in a new incident, with `budget` when given.
async fn start(rig: &Rig, prompt: &str, budget: Option<BudgetLimits>) -> korvus_store::Session {
    let incident = rig
        .store
        .create_incident(NewIncident {
            title: "db-1 disk full".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let mut request = CreateSession::new(incident.id, prompt);
    if let Some(limits) = budget {
        request = request.budget(limits);
    }
    rig.manager.create(request).await.unwrap()
}
