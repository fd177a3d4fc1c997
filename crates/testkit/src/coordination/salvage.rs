//! Kept output attached to a settled session: the only write a settled
//! row accepts, under a new fence, all or nothing.

use korvus_store::StoreExt as _;
use korvus_store::{
    exit_reason, CoordinatedStore, KeptOutput, NewReport, Session, SessionStatus, StoreError,
};

use crate::store::{incident, new_artifact, new_report, session, settlement_at};

/// The salvage's rows for `s` presented at its fence: its report row with
/// a document, `salvaged_from` and `detail`, and `paths` as artifacts, all
/// at the next fence.
fn kept(s: &Session, paths: &[&str]) -> KeptOutput {
    let next = Session {
        fence: s.fence + 1,
        ..s.clone()
    };
    let artifacts = paths
        .iter()
        .map(|p| new_artifact(&next, p, s.revision))
        .collect();
    let report = NewReport {
        markdown_key: Some(format!("salvage/{}/report.md", s.id)),
        manifest_key: Some(format!("salvage/{}/manifest.json", s.id)),
        markdown_bytes: 17,
        exit_reason: "ignored_when_a_row_exists".into(),
        detail: Some("report_upload_failed; later salvaged: 2 file(s) stored".into()),
        salvaged_from: Some("the kept scratch dir /scratch/x/1".into()),
        ..new_report(&next, s.revision)
    };
    KeptOutput::new(artifacts, report)
}

/// How many outbox events of `s` are due now, claimed (by a claimer of
/// this case's own) so the next call counts only newer ones.
async fn outbox_events_of(store: &dyn super::SharedStore, s: &Session) -> usize {
    let claimer = korvus_store::OwnerId::new();
    let mut n = 0;
    loop {
        let batch = store
            .claim_events(claimer, 500, std::time::Duration::from_secs(600))
            .await
            .unwrap();
        if batch.is_empty() {
            return n;
        }
        n += batch.iter().filter(|e| e.key.session_id == s.id).count();
    }
}

/// A failed session whose landing stored neither its document nor its
/// files: the report row has no document.
async fn failed_without_output(store: &dyn CoordinatedStore) -> Session {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let empty = NewReport {
        markdown_key: None,
        manifest_key: None,
        markdown_bytes: 0,
        exit_reason: "report_upload_failed".into(),
        detail: Some("report_upload_failed: the bucket is gone".into()),
        ..new_report(&s, 1)
    };
    store.create_report(empty).await.unwrap();
    let failed = settlement_at(SessionStatus::Failed, "report_upload_failed", s.fence);
    store.settle_session(s.id, failed).await.unwrap()
}

/// `attach_kept_output` on a settled revision: the fence moves on, the
/// artifacts are inserted at it, the report row takes the document (only
/// when it had none), the manifest, `salvaged_from` and `detail`, and the
/// row's status, exit reason and counters stay. A second attach at the
/// old fence, one while a run is active, one of a revision not reached,
/// and one whose artifact id is taken write nothing at all. Idle rows and
/// revisions without a report row take it too.
pub async fn kept_output_attaches_to_a_settled_revision_under_a_new_fence(
    store: &dyn super::SharedStore,
) {
    let s = failed_without_output(store).await;
    // The run's end is in the outbox once; a salvage sends nothing more.
    let ends = outbox_events_of(store, &s).await;
    assert_eq!(ends, 1, "the settle's own event");
    let rows = kept(&s, &["work/progress.txt", "notes/a.md"]);
    let (row, stands) = store
        .attach_kept_output(s.id, s.fence, rows.clone())
        .await
        .unwrap();
    assert_eq!(row.fence, s.fence + 1);
    assert_eq!(
        (row.status, row.exit_reason.as_deref(), row.counters),
        (s.status, s.exit_reason.as_deref(), s.counters),
        "the settlement stays"
    );
    assert_eq!(stands.markdown_key, rows.report.markdown_key);
    assert_eq!(stands.markdown_bytes, 17);
    assert_eq!(stands.manifest_key, rows.report.manifest_key);
    assert_eq!(stands.salvaged_from, rows.report.salvaged_from);
    assert_eq!(stands.detail, rows.report.detail);
    assert_eq!(
        stands.exit_reason, "report_upload_failed",
        "the exit reason stays"
    );
    assert_eq!(stands.fence, s.fence + 1);
    assert_eq!(store.all_reports(s.id).await.unwrap(), vec![stands.clone()]);
    let mut paths: Vec<_> = store
        .all_session_artifacts(s.id)
        .await
        .unwrap()
        .into_iter()
        .map(|a| (a.path, a.fence))
        .collect();
    paths.sort();
    assert_eq!(
        paths,
        vec![
            ("notes/a.md".to_owned(), s.fence + 1),
            ("work/progress.txt".to_owned(), s.fence + 1)
        ]
    );

    assert_eq!(outbox_events_of(store, &s).await, 0, "no second end event");

    // The same dir salvaged again at the old fence: refused, nothing written.
    let again = kept(&s, &["work/other.txt"]);
    assert!(matches!(
        store.attach_kept_output(s.id, s.fence, again).await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(store.all_session_artifacts(s.id).await.unwrap().len(), 2);
    assert_eq!(store.get_session(s.id).await.unwrap().fence, s.fence + 1);

    // A document the row has is kept; the rest of the salvage is taken.
    let row = store.get_session(s.id).await.unwrap();
    let mut later = kept(&row, &[]);
    later.report.markdown_key = Some("salvage/other.md".into());
    let (_, stands) = store
        .attach_kept_output(s.id, row.fence, later)
        .await
        .unwrap();
    assert_eq!(stands.markdown_key, rows.report.markdown_key);
    assert_eq!(stands.markdown_bytes, 17);

    refusals(store).await;
    settled_rows_of_any_kind(store).await;
}

/// What `attach_kept_output` refuses, each with nothing written.
async fn refusals(store: &dyn CoordinatedStore) {
    let inc = incident(store).await;
    // A run is active: its own landing stores its dir.
    let active = session(store, &inc).await;
    assert!(matches!(
        store
            .attach_kept_output(active.id, active.fence, kept(&active, &["a"]))
            .await,
        Err(StoreError::NotFinished { .. })
    ));
    assert!(store
        .all_session_artifacts(active.id)
        .await
        .unwrap()
        .is_empty());

    let s = failed_without_output(store).await;
    // A revision the session has not reached.
    let mut ahead = kept(&s, &[]);
    ahead.report.revision = s.revision + 1;
    assert!(matches!(
        store.attach_kept_output(s.id, s.fence, ahead).await,
        Err(StoreError::InvalidInput { .. })
    ));
    // Rows at the presented fence, not the next one.
    let mut stale = kept(&s, &["a"]);
    stale.artifacts[0].fence = s.fence;
    assert!(matches!(
        store.attach_kept_output(s.id, s.fence, stale).await,
        Err(StoreError::InvalidInput { .. })
    ));
    // An artifact id already taken: all or nothing, the fence included.
    let taken = kept(&s, &["first"]);
    let t = s.clone();
    store
        .attach_kept_output(t.id, t.fence, taken.clone())
        .await
        .unwrap();
    let moved = store.get_session(s.id).await.unwrap();
    let mut clash = kept(&moved, &["second", "third"]);
    clash.artifacts[1].id = taken.artifacts[0].id;
    assert!(matches!(
        store.attach_kept_output(s.id, moved.fence, clash).await,
        Err(StoreError::Conflict { .. })
    ));
    let after = store.get_session(s.id).await.unwrap();
    assert_eq!(after.fence, moved.fence, "the fence did not move");
    let paths: Vec<_> = store
        .all_session_artifacts(s.id)
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.path)
        .collect();
    assert_eq!(paths, vec!["first".to_owned()]);
    // An unknown session.
    let mut ghost = kept(&s, &[]);
    let gone = korvus_store::SessionId::new();
    ghost.report.session_id = gone;
    assert!(matches!(
        store.attach_kept_output(gone, s.fence, ghost).await,
        Err(StoreError::NotFound { .. })
    ));
}

/// An idle row takes a salvage; a revision without a report row gets the
/// salvage's row.
async fn settled_rows_of_any_kind(store: &dyn CoordinatedStore) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let idle = settlement_at(SessionStatus::Running, exit_reason::AWAITING_USER, s.fence);
    let s = store.settle_session(s.id, idle).await.unwrap();
    let rows = kept(&s, &["w.txt"]);
    let (row, stands) = store
        .attach_kept_output(s.id, s.fence, rows.clone())
        .await
        .unwrap();
    assert!(row.is_idle(), "an idle row stays idle");
    assert_eq!(
        stands.exit_reason, rows.report.exit_reason,
        "inserted whole"
    );
    assert_eq!(stands.markdown_key, rows.report.markdown_key);
    assert_eq!(store.all_reports(s.id).await.unwrap(), vec![stands]);
}
