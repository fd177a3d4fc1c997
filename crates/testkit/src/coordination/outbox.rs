//! The webhook outbox: one event per transition of a row into a terminal
//! status or into waiting for the user — whichever path made it — none
//! for a refused write, and each event claimed by one deliverer at a time
//! until it is delivered. One case: claims are global, so two cases
//! claiming at once on a shared store would take each other's events.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use futures::future::join;
use korvus_store::{
    exit_reason, ContinueFrom, Lease, NewSession, OutboxEvent, OutboxKey, OutboxKind, OwnerId,
    SessionId, SessionStatus,
};

use super::SharedStore;
use crate::store::{incident, new_report, session, settlement_at};

/// Claims until no event is due, keeping those of `mine`.
async fn claim_mine(
    store: &dyn SharedStore,
    claimer: OwnerId,
    ttl: Duration,
    mine: &HashSet<SessionId>,
) -> Vec<OutboxEvent> {
    let mut out = Vec::new();
    loop {
        let batch = store.claim_events(claimer, 500, ttl).await.unwrap();
        if batch.is_empty() {
            return out;
        }
        out.extend(
            batch
                .into_iter()
                .filter(|e| mine.contains(&e.key.session_id)),
        );
    }
}

/// Who holds a claimed event.
struct OutboxClaim {
    holder: OwnerId,
    other: OwnerId,
    attempts: u32,
}

fn key(session_id: SessionId, revision: u32, fence: u64, kind: OutboxKind) -> OutboxKey {
    OutboxKey {
        session_id,
        revision,
        fence,
        kind,
    }
}

type Expected = BTreeMap<OutboxKey, (SessionStatus, Option<&'static str>)>;

/// Runs that end or wait through the session's own writes: settle (also
/// retried and stale), reopen, idle, idle cancel, paused at a budget and
/// continued.
async fn own_transitions(
    store: &dyn SharedStore,
    inc: &korvus_store::Incident,
    expected: &mut Expected,
) -> Vec<SessionId> {
    let done = |fence| settlement_at(SessionStatus::Completed, "completed", fence);

    // Settled, then the same settlement again, then a stale one: one event.
    let a = session(store, inc).await;
    store.settle_session(a.id, done(1)).await.unwrap();
    store.settle_session(a.id, done(1)).await.unwrap();
    expected.insert(
        key(a.id, 1, 1, OutboxKind::Ended),
        (SessionStatus::Completed, Some("completed")),
    );
    // Reopened (no event), then settled at the new fence; the old fence's
    // settlement is refused and writes nothing.
    store
        .continue_session(a.id, ContinueFrom::Terminal, None)
        .await
        .unwrap();
    assert!(store.settle_session(a.id, done(1)).await.is_err());
    let failed = settlement_at(SessionStatus::Failed, "agent_error", 2);
    store.settle_session(a.id, failed).await.unwrap();
    expected.insert(
        key(a.id, 2, 2, OutboxKind::Ended),
        (SessionStatus::Failed, Some("agent_error")),
    );

    // Waiting, then cancelled while waiting: two events of one run.
    let b = session(store, inc).await;
    let idle = settlement_at(SessionStatus::Running, exit_reason::AWAITING_USER, 1);
    store.settle_session(b.id, idle).await.unwrap();
    store.cancel_idle_session(b.id).await.unwrap();
    expected.insert(
        key(b.id, 1, 1, OutboxKind::Waiting),
        (SessionStatus::Running, Some(exit_reason::AWAITING_USER)),
    );
    expected.insert(
        key(b.id, 1, 1, OutboxKind::Ended),
        (SessionStatus::Cancelled, Some(exit_reason::CANCELLED)),
    );

    // Paused at its budget (waiting too), the budget raised (no event),
    // then completed.
    let c = session(store, inc).await;
    let paused = settlement_at(SessionStatus::Running, exit_reason::BUDGET_REACHED, 1);
    store.settle_session(c.id, paused).await.unwrap();
    store
        .continue_session(c.id, ContinueFrom::Idle, None)
        .await
        .unwrap();
    store.settle_session(c.id, done(2)).await.unwrap();
    expected.insert(
        key(c.id, 1, 1, OutboxKind::Waiting),
        (SessionStatus::Running, Some(exit_reason::BUDGET_REACHED)),
    );
    expected.insert(
        key(c.id, 2, 2, OutboxKind::Ended),
        (SessionStatus::Completed, Some("completed")),
    );

    vec![a.id, b.id, c.id]
}

/// Runs ended from outside: a forced cancel, a takeover's settle.
async fn outside_transitions(
    store: &dyn SharedStore,
    inc: &korvus_store::Incident,
    expected: &mut Expected,
) -> Vec<SessionId> {
    // A forced cancel: the event is at the fence it moved to.
    let d = session(store, inc).await;
    store
        .force_cancel(d.id, 1, "operator".into())
        .await
        .unwrap();
    expected.insert(
        key(d.id, 1, 2, OutboxKind::Ended),
        (SessionStatus::Cancelled, Some(exit_reason::CANCELLED)),
    );

    // A takeover (no event) settled by the reaper with its report.
    let dead = Lease {
        owner: OwnerId::new(),
        ttl: Duration::ZERO,
    };
    let e = store
        .create_session(NewSession {
            runner: None,
            lease: Some(dead),
            ..crate::store::new_session(inc, "orphan")
        })
        .await
        .unwrap();
    let reaper = Lease {
        owner: OwnerId::new(),
        ttl: Duration::from_secs(600),
    };
    let taken = store.take_over(e.id, e.fence, reaper).await.unwrap();
    let lost = settlement_at(SessionStatus::Failed, "owner_lost", taken.fence);
    let report = korvus_store::NewReport {
        exit_reason: "owner_lost".into(),
        salvaged_from: None,
        fence: taken.fence,
        ..new_report(&taken, 1)
    };
    store.settle_with_report(e.id, lost, report).await.unwrap();
    expected.insert(
        key(e.id, 1, taken.fence, OutboxKind::Ended),
        (SessionStatus::Failed, Some("owner_lost")),
    );

    vec![d.id, e.id]
}

/// A failed attempt waits for its delay (and only its claimer may give it
/// back); a delivered event is never claimed again; an expired claim is
/// claimed by the next claimer.
async fn retries_and_expiry(
    store: &dyn SharedStore,
    mine: &HashSet<SessionId>,
    claims: &BTreeMap<OutboxKey, OutboxClaim>,
    expected: usize,
) {
    let long = Duration::from_secs(600);
    // Failed by a claimer that does not hold it: nothing changes. Failed
    // by its claimer with a delay: not due until then.
    let (first, claim) = claims.iter().next().unwrap();
    store
        .mark_failed(*first, claim.other, Duration::ZERO, "not mine")
        .await
        .unwrap();
    assert!(claim_mine(store, claim.other, long, mine).await.is_empty());
    store
        .mark_failed(*first, claim.holder, long, "503")
        .await
        .unwrap();
    assert!(claim_mine(store, claim.other, long, mine).await.is_empty());
    // Delivered (twice: idempotent): never again. The rest fail at once.
    for (k, c) in claims {
        assert_eq!(c.attempts, 1);
        if k == first {
            store.mark_delivered(*k).await.unwrap();
            store.mark_delivered(*k).await.unwrap();
        } else {
            store
                .mark_failed(*k, c.holder, Duration::ZERO, "timeout")
                .await
                .unwrap();
        }
    }
    let short = Duration::from_secs(1);
    let again = claim_mine(store, OwnerId::new(), short, mine).await;
    let again_keys: HashSet<OutboxKey> = again.iter().map(|x| x.key).collect();
    assert_eq!(again_keys.len(), expected - 1, "{again:?}");
    assert!(
        !again_keys.contains(first),
        "a delivered event is not claimed again"
    );
    assert!(again.iter().all(|x| x.attempts == 2));
    // Its claimer died: once the claim expires the next claimer gets
    // them, a third attempt.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let third = claim_mine(store, OwnerId::new(), long, mine).await;
    assert_eq!(third.len(), expected - 1);
    assert!(third.iter().all(|x| x.attempts == 3));
    for x in third {
        store.mark_delivered(x.key).await.unwrap();
    }
    assert!(claim_mine(store, OwnerId::new(), long, mine)
        .await
        .is_empty());
}

/// Every path that ends a run or makes it wait writes exactly one event,
/// keyed by the run (revision, fence) and what became of it; a retried
/// settlement, a stale one and a reopen write none. Each event is claimed
/// by one of two racing claimers, an expired claim is claimed again (its
/// attempts counted), a failed attempt waits for its retry delay, and a
/// delivered event is never claimed again.
pub async fn the_outbox_holds_one_event_per_run_end_or_wait_and_delivers_each_at_least_once(
    store: &dyn SharedStore,
) {
    let inc = incident(store).await;
    let mut expected = Expected::new();
    let mut sessions = own_transitions(store, &inc, &mut expected).await;
    sessions.extend(outside_transitions(store, &inc, &mut expected).await);
    // A running session writes nothing.
    let running = session(store, &inc).await;

    sessions.push(running.id);
    let mine: HashSet<SessionId> = sessions.into_iter().collect();
    let (one, two) = (OwnerId::new(), OwnerId::new());
    let long = Duration::from_secs(600);
    let (first, second) = join(
        claim_mine(store, one, long, &mine),
        claim_mine(store, two, long, &mine),
    )
    .await;
    let mut seen: BTreeMap<OutboxKey, &OutboxEvent> = BTreeMap::new();
    for event in first.iter().chain(&second) {
        assert!(
            seen.insert(event.key, event).is_none(),
            "{:?} claimed twice while its claim was live",
            event.key
        );
    }
    let got: BTreeMap<OutboxKey, (SessionStatus, Option<&str>)> = seen
        .iter()
        .map(|(k, e)| (*k, (e.status, e.exit_reason.as_deref())))
        .collect();
    assert_eq!(got, expected);
    assert!(seen
        .values()
        .all(|e| e.attempts == 1 && e.incident_id == inc.id));
    let any = running.id;
    assert_eq!(
        key(any, 1, 1, OutboxKind::Ended).id(),
        format!("{any}.1.1.ended")
    );

    // Claimed and live: nobody else gets them.
    assert!(claim_mine(store, OwnerId::new(), long, &mine)
        .await
        .is_empty());
    let claims: BTreeMap<OutboxKey, OutboxClaim> = seen
        .iter()
        .map(|(k, e)| {
            let holder = if first.iter().any(|x| x.key == *k) {
                one
            } else {
                two
            };
            (
                *k,
                OutboxClaim {
                    holder,
                    other: if holder == one { two } else { one },
                    attempts: e.attempts,
                },
            )
        })
        .collect();
    retries_and_expiry(store, &mine, &claims, expected.len()).await;
}
