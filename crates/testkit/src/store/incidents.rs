//! Incident rows: create, read, list and close.

use korvus_store::StoreExt as _;
use korvus_store::{IncidentStatus, Store};

use super::incident;

/// Create, get, list and close an incident; closing twice is fine.
pub async fn incidents_round_trip(store: &dyn Store) {
    let created = incident(store).await;
    assert_eq!(created.status, IncidentStatus::Open);
    let got = store.get_incident(created.id).await.unwrap();
    assert_eq!(got.id, created.id);
    assert_eq!(got.title, created.title);
    assert_eq!(got.workspace, created.workspace);
    let listed = store.all_incidents().await.unwrap();
    assert!(listed.iter().any(|i| i.id == created.id));
    let closed = store.close_incident(created.id).await.unwrap();
    assert_eq!(closed.status, IncidentStatus::Closed);
    let again = store.close_incident(created.id).await.unwrap();
    assert_eq!(again.status, IncidentStatus::Closed);
    assert_eq!(
        store.get_incident(created.id).await.unwrap().status,
        IncidentStatus::Closed
    );
}
