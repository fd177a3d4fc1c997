//! Checkpoint rows: [`Store::replace_checkpoints`], the one transition
//! that supersedes a checkpoint and promotes checkpoints when a run lands.

use korvus_store::StoreExt as _;
use korvus_store::{
    Artifact, ArtifactId, ArtifactKind, ContinueFrom, Entity, NewArtifact, Session, SessionId,
    SessionStatus, Store, StoreError,
};

use super::{incident, new_artifact, session, settlement_at};

/// A checkpoint row of `session`'s current revision at `path`.
fn checkpoint(session: &Session, path: &str) -> NewArtifact {
    let mut row = new_artifact(session, path, session.revision);
    row.kind = ArtifactKind::Checkpoint;
    row
}

/// `(kind, path, blob key)` of every row of a session, by path.
async fn rows_of(store: &dyn Store, session: SessionId) -> Vec<(ArtifactKind, String, String)> {
    let mut rows: Vec<_> = store
        .all_session_artifacts(session)
        .await
        .unwrap()
        .into_iter()
        .map(|a: Artifact| (a.kind, a.path, a.blob_key))
        .collect();
    rows.sort_by(|a, b| a.1.cmp(&b.1));
    rows
}

/// A checkpoint supersedes the previous one of its path (insert the new
/// row, delete the old, in one call), the landing promotes it (a final row
/// naming the same blob key in, the checkpoint row out), and checkpoint
/// rows are never among what a reopen restores.
pub async fn a_checkpoint_is_superseded_then_promoted_in_one_step(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let first = checkpoint(&s, "out.log");
    let stored = store
        .replace_checkpoints(s.id, s.fence, vec![first.clone()], Vec::new())
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].kind, ArtifactKind::Checkpoint);
    assert!(
        store
            .latest_session_artifacts(s.id)
            .await
            .unwrap()
            .is_empty(),
        "a checkpoint row is never restored"
    );
    let second = checkpoint(&s, "out.log");
    store
        .replace_checkpoints(s.id, s.fence, vec![second.clone()], vec![first.id])
        .await
        .unwrap();
    assert_eq!(
        rows_of(store, s.id).await,
        [(
            ArtifactKind::Checkpoint,
            "out.log".into(),
            second.blob_key.clone()
        )]
    );
    let mut promoted = new_artifact(&s, "out.log", s.revision);
    promoted.blob_key = second.blob_key.clone();
    let kept = store
        .replace_checkpoints(
            s.id,
            s.fence,
            vec![promoted.clone()],
            vec![second.id, second.id],
        )
        .await
        .unwrap();
    assert_eq!(kept[0].id, promoted.id);
    assert_eq!(
        rows_of(store, s.id).await,
        [(
            ArtifactKind::AgentOutput,
            "out.log".into(),
            second.blob_key.clone()
        )]
    );
    let latest = store.latest_session_artifacts(s.id).await.unwrap();
    assert_eq!(latest.len(), 1);
    assert_eq!(latest[0].id, promoted.id);
    // Both lists empty: the fence is checked, nothing is written.
    assert!(store
        .replace_checkpoints(s.id, s.fence, Vec::new(), Vec::new())
        .await
        .unwrap()
        .is_empty());
}

/// Only checkpoint rows of the session's current revision can be deleted,
/// only rows of the session at the fence inserted, only while the run is
/// active at its fence; a refused call writes nothing.
pub async fn replace_checkpoints_refuses_what_is_not_its_own_and_writes_nothing(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let other = session(store, &inc).await;
    let output = store
        .create_artifacts(vec![new_artifact(&s, "final.txt", 1)])
        .await
        .unwrap();
    let theirs = checkpoint(&other, "theirs.txt");
    store
        .replace_checkpoints(other.id, other.fence, vec![theirs.clone()], Vec::new())
        .await
        .unwrap();
    let mine = checkpoint(&s, "mine.txt");
    store
        .replace_checkpoints(s.id, s.fence, vec![mine.clone()], Vec::new())
        .await
        .unwrap();
    let before = rows_of(store, s.id).await;
    for id in [output[0].id, theirs.id, ArtifactId::new()] {
        let fresh = checkpoint(&s, "fresh.txt");
        match store
            .replace_checkpoints(s.id, s.fence, vec![fresh], vec![mine.id, id])
            .await
        {
            Err(StoreError::NotFound { entity, .. }) => assert_eq!(entity, Entity::Artifact),
            other => panic!("deleting {id}: expected NotFound, got {other:?}"),
        }
    }
    let foreign = checkpoint(&other, "x.txt");
    let refused = store.replace_checkpoints(s.id, s.fence, vec![foreign], vec![mine.id]);
    assert!(matches!(
        refused.await,
        Err(StoreError::InvalidInput {
            field: "session_id",
            ..
        })
    ));
    let mut stale = checkpoint(&s, "x.txt");
    stale.fence += 1;
    let refused = store.replace_checkpoints(s.id, s.fence, vec![stale], vec![mine.id]);
    assert!(matches!(
        refused.await,
        Err(StoreError::InvalidInput { field: "fence", .. })
    ));
    let mut dup = checkpoint(&s, "dup.txt");
    dup.id = output[0].id;
    match store
        .replace_checkpoints(s.id, s.fence, vec![dup], vec![mine.id])
        .await
    {
        Err(StoreError::Conflict { entity, .. }) => assert_eq!(entity, Entity::Artifact),
        other => panic!("expected Conflict, got {other:?}"),
    }
    let unknown = store.replace_checkpoints(SessionId::new(), 1, Vec::new(), Vec::new());
    assert!(matches!(unknown.await, Err(StoreError::NotFound { .. })));
    assert_eq!(rows_of(store, s.id).await, before, "nothing was written");
    assert_eq!(rows_of(store, other.id).await.len(), 1);
}

/// A superseded run writes nothing (`Fenced`), nor does a run that ended
/// (`NotActive`), and the new run cannot delete the old revision's
/// checkpoints.
pub async fn a_stale_or_ended_run_replaces_no_checkpoint(store: &dyn Store) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let old = checkpoint(&s, "a.txt");
    store
        .replace_checkpoints(s.id, s.fence, vec![old.clone()], Vec::new())
        .await
        .unwrap();
    store
        .settle_session(s.id, settlement_at(SessionStatus::Failed, "x", s.fence))
        .await
        .unwrap();
    let ended = store.replace_checkpoints(s.id, s.fence, vec![checkpoint(&s, "b.txt")], vec![]);
    match ended.await {
        Err(StoreError::NotActive { session, fence }) => assert_eq!((session, fence), (s.id, 1)),
        other => panic!("expected NotActive, got {other:?}"),
    }
    let reopened = store
        .continue_session(s.id, ContinueFrom::Terminal, None)
        .await
        .unwrap();
    let late = store.replace_checkpoints(s.id, s.fence, vec![checkpoint(&s, "c.txt")], vec![]);
    assert!(
        matches!(
            late.await,
            Err(StoreError::Fenced {
                presented: 1,
                current: 2,
                ..
            })
        ),
        "a superseded run's checkpoint is fenced off"
    );
    let across = store.replace_checkpoints(reopened.id, reopened.fence, Vec::new(), vec![old.id]);
    assert!(matches!(across.await, Err(StoreError::NotFound { .. })));
    let rows = rows_of(store, s.id).await;
    assert_eq!(
        rows,
        [(ArtifactKind::Checkpoint, "a.txt".into(), old.blob_key)]
    );
}
