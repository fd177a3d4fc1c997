//! The [`Store`] contract. Every case is a public async function taking
//! `&dyn Store`; [`run_all`] runs them in order; the
//! [`store_contract_tests!`](crate::store_contract_tests) macro makes one test
//! per case. Cases create their own incidents, so a shared store is fine.
//! What a store must honour to be shared by replicas is the
//! [`coordination`](crate::coordination) suite.
//!
//! The cases live in one file per topic (incidents, errors, sessions,
//! context refs, reports, artifacts, checkpoints, idle rows, terminal rows, retention) and are
//! re-exported here, so every case is `korvus_testkit::store::<case>`, the
//! path the macros call. The fixtures the cases of both suites share stay
//! in this file.

mod artifacts;
mod checkpoints;
mod context_refs;
mod errors;
mod idle;
mod incidents;
mod pages;
mod reports;
mod retention;
mod sessions;
mod terminal;

use korvus_store::{
    ArtifactId, ArtifactKind, Counters, Incident, NewArtifact, NewIncident, NewReport, NewSession,
    Session, SessionId, SessionStatus, Settlement, Store, WorkspaceRef,
};

pub use self::artifacts::{
    artifacts_are_listed_and_fetched, artifacts_batch_is_all_or_nothing,
    latest_session_artifacts_keep_the_newest_per_path,
};
pub use self::checkpoints::{
    a_checkpoint_is_superseded_then_promoted_in_one_step,
    a_stale_or_ended_run_replaces_no_checkpoint,
    replace_checkpoints_refuses_what_is_not_its_own_and_writes_nothing,
};
pub use self::context_refs::{
    context_refs_keep_request_order, cross_incident_context_ref_is_refused,
    duplicate_context_ref_is_a_conflict,
};
pub use self::errors::{invalid_input_is_refused_and_nothing_written, unknown_ids_are_not_found};
pub use self::idle::{
    cancel_and_resume_of_an_idle_row_have_exactly_one_winner,
    cancel_idle_session_cancels_an_idle_row, continue_from_idle_resumes_an_idle_row,
    idle_transitions_refuse_terminal_and_active_rows,
};
pub use self::incidents::incidents_round_trip;
pub use self::pages::{a_cursor_of_another_list_is_invalid_input, every_list_walks_page_by_page};
pub use self::reports::{
    a_stale_fence_writes_no_artifact_rows, a_stale_fence_writes_no_report_row,
    identical_second_report_is_a_conflict_and_keeps_the_first,
    report_detail_round_trips_and_is_bounded, report_for_another_incidents_session_is_refused,
    reports_are_unique_per_revision,
};
pub use self::retention::{
    a_reopen_racing_a_delete_wins_or_finds_nothing, delete_session_never_reuses_a_seq,
    delete_session_refuses_unfinished_stale_and_inherited_rows,
    delete_session_removes_a_finished_session_and_its_rows,
};
pub use self::sessions::{
    a_stale_fence_settles_nothing, admission_round_trips_and_idempotency_keys_are_unique,
    concurrent_creates_get_seqs_one_to_hundred, concurrent_first_creates_have_one_initial,
    each_new_run_increments_the_fence, reopen_has_exactly_one_winner,
    reopen_of_a_running_session_is_not_finished, session_insert_rules,
    settle_sets_and_clears_ended_at, the_runner_description_round_trips_and_is_bounded,
};
pub use self::terminal::{
    a_settle_retry_racing_an_idle_cancel_leaves_the_cancel_standing,
    a_terminal_or_idle_row_refuses_every_write_of_its_run,
};

crate::__with_cases!(store, [crate::__gen_run_all], (store, Store,));

/// Creates an open incident with a unique title.
pub async fn incident<S: Store + ?Sized>(store: &S) -> Incident {
    store
        .create_incident(NewIncident {
            title: format!("contract incident {}", uuid::Uuid::now_v7()),
            workspace: Some(WorkspaceRef {
                repo: "/srv/repos/ops.git".into(),
                commit: "0123456789abcdef0123456789abcdef01234567".into(),
            }),
        })
        .await
        .expect("create_incident")
}

/// Creates a running session in `incident`.
pub async fn session<S: Store + ?Sized>(store: &S, incident: &Incident) -> Session {
    store
        .create_session(new_session(incident, "investigate"))
        .await
        .expect("create_session")
}

/// A new session of `incident` with `prompt`: no lease (queued when
/// created through a coordinated store's manager), default admission.
pub fn new_session(incident: &Incident, prompt: &str) -> NewSession {
    NewSession {
        runner: None,
        admission: Default::default(),
        lease: None,
        id: SessionId::new(),
        incident_id: incident.id,
        prompt: prompt.into(),
        workspace_ref: incident.workspace.clone(),
    }
}

/// A valid artifact row for `session` (no bytes are uploaded: the store does
/// not look at blobs).
pub fn new_artifact(session: &Session, path: &str, revision: u32) -> NewArtifact {
    let id = ArtifactId::new();
    NewArtifact {
        id,
        incident_id: session.incident_id,
        session_id: session.id,
        kind: ArtifactKind::AgentOutput,
        path: path.into(),
        blob_key: format!("contract/{id}/{path}"),
        content_type: "text/plain".into(),
        size_bytes: 3,
        sha256: "ab".repeat(32),
        revision,
        fence: session.fence,
    }
}

pub(crate) fn settlement(status: SessionStatus, reason: &str) -> Settlement {
    settlement_at(status, reason, 1)
}

/// A settlement presenting `fence` (counters 3 turns, 5 tool calls, 1,000
/// input and 200 output tokens).
pub fn settlement_at(status: SessionStatus, reason: &str, fence: u64) -> Settlement {
    Settlement {
        fence,
        status,
        exit_reason: Some(reason.into()),
        counters: Counters {
            turns: 3,
            tool_calls: 5,
            input_tokens: 1000,
            output_tokens: 200,
        },
    }
}

pub(crate) fn new_report(session: &Session, revision: u32) -> NewReport {
    NewReport {
        session_id: session.id,
        incident_id: session.incident_id,
        revision,
        markdown_key: Some(format!("contract/{}/report-{revision}.md", session.id)),
        manifest_key: Some(format!("contract/{}/manifest-{revision}.json", session.id)),
        markdown_bytes: 42,
        exit_reason: "completed".into(),
        counters: Counters::default(),
        detail: None,
        salvaged_from: None,
        fence: session.fence,
    }
}

/// Asserts that `r` is `NotActive` for the run of `s`.
pub(crate) fn not_active<T: std::fmt::Debug>(r: korvus_store::Result<T>, s: &Session, what: &str) {
    match r {
        Err(korvus_store::StoreError::NotActive { session, fence }) => {
            assert_eq!((session, fence), (s.id, s.fence), "{what}");
        }
        other => panic!("{what}: expected NotActive, got {other:?}"),
    }
}

/// Asserts that `r` is `Fenced`.
pub(crate) fn fenced<T: std::fmt::Debug>(r: korvus_store::Result<T>, what: &str) {
    match r {
        Err(e @ korvus_store::StoreError::Fenced { .. }) => assert!(e.is_fenced_off()),
        other => panic!("{what}: expected Fenced, got {other:?}"),
    }
}
