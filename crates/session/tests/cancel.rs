//! Cancelling a session: only the replica running it may end it.

use std::time::Duration;

use korvus_session::SessionError;
use korvus_store::{NewSession, SessionId, SessionKind, Store};

use crate::support::{writing, Env};

#[tokio::test]
async fn a_session_of_another_replica_is_left_unchanged() {
    let env = Env::new().await;
    let manager = env.builder(writing(&[])).build();
    let foreign = env
        .store
        .create_session(NewSession {
            id: SessionId::new(),
            incident_id: env.incident.id,
            kind: SessionKind::Initial,
            prompt: "run elsewhere".into(),
            workspace_ref: None,
        })
        .await
        .unwrap();
    let row = manager.cancel(foreign.id).await.unwrap();
    assert_eq!(row, foreign);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(env.store.get_session(foreign.id).await.unwrap(), foreign);
    assert!(matches!(
        manager.cancel(SessionId::new()).await,
        Err(SessionError::NotFound { .. })
    ));
    manager.stop().await;
}
