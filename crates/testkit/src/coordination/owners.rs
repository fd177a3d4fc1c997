//! The owner-level lease: a beat renews its owner's lease, not each row.
//! A row is held while its own claim lasts, then for as long as its owner's
//! lease is live and its owner names it; a beat that does not name it
//! releases it, and one that names it again takes it back.

use korvus_store::{CoordinatedStore, OwnerId};

use super::leases::{expired, holds, leased, listed, live};

/// A row whose claim expired is held by its owner's live lease until a
/// beat leaves it out; it is an orphan from then until a beat names it
/// again; once the owner's lease itself expires, every row it holds is
/// an orphan. The lease a row reports follows the same rule.
pub async fn an_owners_lease_holds_its_rows_until_a_beat_leaves_them_out(
    store: &dyn CoordinatedStore,
) {
    let (a, b) = (OwnerId::new(), OwnerId::new());
    // `a`'s lease is live before the row is claimed.
    assert!(store.heartbeat(live(a), &[]).await.unwrap().is_empty());
    let s = leased(store, expired(a)).await;
    let orphans = store.expired_leases().await.unwrap();
    assert!(
        !listed(&orphans, &s),
        "the owner's live lease holds a row whose own claim expired"
    );
    let row = store.get_session(s.id).await.unwrap();
    let reported = row.lease_expires_at.expect("a lease");
    assert_eq!(s.lease_expires_at, Some(reported), "create reports it too");
    assert!(
        reported > row.created_at + chrono::Duration::seconds(60),
        "reports its owner's lease: {reported} for a row of {}",
        row.created_at
    );

    // Named: held, and still no orphan however often the owner beats.
    for _ in 0..3 {
        assert!(holds(
            &store.heartbeat(live(a), &[(s.id, s.fence)]).await.unwrap(),
            &s
        ));
    }
    assert!(!listed(&store.expired_leases().await.unwrap(), &s));

    // Left out: released at once (its claim expired), so an orphan.
    assert!(store.heartbeat(live(a), &[]).await.unwrap().is_empty());
    assert!(holds(&store.expired_leases().await.unwrap(), &s));
    let released = store.get_session(s.id).await.unwrap();
    assert_eq!(released.owner, Some(a), "released, not disowned");
    assert!(
        released.lease_expires_at.expect("a lease")
            < row.created_at + chrono::Duration::seconds(60),
        "reports its own claim's expiry"
    );

    // Named again before anyone took it over: taken back.
    assert!(holds(
        &store.heartbeat(live(a), &[(s.id, s.fence)]).await.unwrap(),
        &s
    ));
    assert!(!listed(&store.expired_leases().await.unwrap(), &s));

    // A row whose own claim is live is held before its owner ever beats,
    // and a beat that leaves it out does not release it yet.
    let fresh = leased(store, live(b)).await;
    assert!(!listed(&store.expired_leases().await.unwrap(), &fresh));
    assert!(store.heartbeat(live(b), &[]).await.unwrap().is_empty());
    assert!(!listed(&store.expired_leases().await.unwrap(), &fresh));
    assert!(holds(
        &store
            .heartbeat(live(b), &[(fresh.id, fresh.fence)])
            .await
            .unwrap(),
        &fresh
    ));

    // The owner's lease expires (a beat of ttl zero): every row it holds
    // whose claim expired is an orphan, named or not, and is taken over.
    assert!(holds(
        &store
            .heartbeat(expired(a), &[(s.id, s.fence)])
            .await
            .unwrap(),
        &s
    ));
    assert!(holds(&store.expired_leases().await.unwrap(), &s));
    let won = store.take_over(s.id, s.fence, live(b)).await.unwrap();
    assert_eq!((won.owner, won.fence), (Some(b), s.fence + 1));
    assert!(!listed(&store.expired_leases().await.unwrap(), &s));
    assert!(store
        .heartbeat(live(a), &[(s.id, s.fence)])
        .await
        .unwrap()
        .is_empty());
}
