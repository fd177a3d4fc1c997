//! The [`Budgets`] contract: budgets set on a
//! session or an incident, what is spent against them counted exactly —
//! also when replicas spend at once — and only where a budget is set.
//! Every case is a public async function taking `&dyn BudgetStore` (it
//! makes its sessions with the rows of [`Store`]); [`run_all`] runs them in
//! order; the [`budgets_contract_tests!`](crate::budgets_contract_tests)
//! macro makes one test per case.

use futures::future::join_all;
use korvus_store::{
    exit_reason, BudgetLimit, BudgetLimits, BudgetScope, Budgets, Entity, IncidentId, SessionId,
    SessionStatus, Spend, Store, StoreError,
};

use crate::store::{incident, session, settlement_at};

/// A store that keeps budgets: what the budgets suite runs against.
/// Implemented for every type that implements both.
pub trait BudgetStore: Store + Budgets {}

impl<T: Store + Budgets + ?Sized> BudgetStore for T {}

crate::__with_cases!(budgets, [crate::__gen_run_all], (budgets, BudgetStore,));

/// A budget is set, read back, and replaced by a second set that keeps
/// what was spent; a scope without one reads `None`.
pub async fn a_budget_is_set_read_and_replaced_keeping_its_spend(store: &dyn BudgetStore) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let scope = BudgetScope::Session(s.id);
    assert_eq!(store.budget(scope).await.unwrap(), None);
    let set = store
        .set_budget(scope, BudgetLimits::new().tokens(5_000))
        .await
        .unwrap();
    assert_eq!((set.scope, set.limits.tokens), (scope, Some(5_000)));
    assert!(set.spent.is_zero());
    assert_eq!(store.budget(scope).await.unwrap(), Some(set));

    let after = store
        .spend(s.id, inc.id, Spend::tokens(1_500, 500).with_cost_micros(7))
        .await
        .unwrap();
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(
        after[0].spent,
        Spend::tokens(1_500, 500).with_cost_micros(7)
    );
    assert_eq!(after[0].remaining_tokens(), Some(3_000));

    let raised = store
        .set_budget(
            scope,
            BudgetLimits::new()
                .tokens(10_000)
                .cost_micros(1_000)
                .wall(std::time::Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert_eq!(raised.spent, after[0].spent, "raising keeps the spend");
    assert_eq!(raised.limits.tokens, Some(10_000));
    assert_eq!(raised.limits.cost_micros, Some(1_000));
    assert_eq!(raised.limits.wall_ms, Some(60_000));
    assert_eq!(store.budget(scope).await.unwrap(), Some(raised));
}

/// A spend is added to the session's and the incident's budgets (the
/// session's first) and recorded nowhere else: an incident budget adds up
/// every session of the incident; a session without a budget gets none.
pub async fn a_spend_counts_against_the_session_and_its_incident_only(store: &dyn BudgetStore) {
    let inc = incident(store).await;
    let (a, b) = (session(store, &inc).await, session(store, &inc).await);
    let other = incident(store).await;
    let c = session(store, &other).await;
    let nothing = store
        .spend(a.id, inc.id, Spend::tokens(10, 10))
        .await
        .unwrap();
    assert!(
        nothing.is_empty(),
        "no budget, nothing recorded: {nothing:?}"
    );

    let whole = BudgetScope::Incident(inc.id);
    store
        .set_budget(whole, BudgetLimits::new().tokens(5_000))
        .await
        .unwrap();
    store
        .set_budget(
            BudgetScope::Session(a.id),
            BudgetLimits::new().tokens(4_000),
        )
        .await
        .unwrap();
    let first = store
        .spend(a.id, inc.id, Spend::tokens(3_000, 1_000))
        .await
        .unwrap();
    let scopes: Vec<_> = first.iter().map(|b| b.scope).collect();
    assert_eq!(scopes, [BudgetScope::Session(a.id), whole]);
    assert_eq!(first[0].reached(), Some(BudgetLimit::Tokens));
    assert_eq!(first[1].reached(), None);

    let second = store
        .spend(b.id, inc.id, Spend::tokens(500, 500))
        .await
        .unwrap();
    assert_eq!(second.len(), 1, "b has no budget of its own: {second:?}");
    assert_eq!(second[0].spent, Spend::tokens(3_500, 1_500));
    assert_eq!(second[0].reached(), Some(BudgetLimit::Tokens));

    store
        .spend(c.id, other.id, Spend::tokens(1, 1))
        .await
        .unwrap();
    let a_budget = store.budget(BudgetScope::Session(a.id)).await.unwrap();
    assert_eq!(a_budget.unwrap().spent, Spend::tokens(3_000, 1_000));
    assert_eq!(
        store
            .budget(whole)
            .await
            .unwrap()
            .unwrap()
            .spent
            .total_tokens(),
        5_000
    );
    assert_eq!(
        store.budget(BudgetScope::Incident(other.id)).await.unwrap(),
        None
    );
    let read = store.spend(a.id, inc.id, Spend::default()).await.unwrap();
    assert_eq!(read[1].spent.total_tokens(), 5_000, "a zero spend reads");
}

/// Fifty spends at once on one incident budget (as replicas would make):
/// every one is counted, none twice.
pub async fn concurrent_spends_are_all_counted(store: &dyn BudgetStore) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let scope = BudgetScope::Incident(inc.id);
    store.set_budget(scope, BudgetLimits::new()).await.unwrap();
    let spends = (0..50u64).map(|i| {
        let spend = Spend::tokens(i, 2)
            .with_cost_micros(3)
            .with_wall(std::time::Duration::from_millis(4));
        store.spend(s.id, inc.id, spend)
    });
    for result in join_all(spends).await {
        assert_eq!(result.unwrap().len(), 1);
    }
    let spent = store.budget(scope).await.unwrap().unwrap().spent;
    let mut expected = Spend::tokens(49 * 50 / 2, 100).with_cost_micros(150);
    expected.wall_ms = 200;
    assert_eq!(spent, expected);
}

/// A budget for an unknown session or incident is `NotFound`, a limit no
/// `BIGINT` holds is `InvalidInput`; neither writes a budget.
pub async fn a_budget_of_an_unknown_scope_or_out_of_range_is_refused(store: &dyn BudgetStore) {
    let limits = BudgetLimits::new().tokens(1);
    let unknown_session = SessionId::new();
    match store
        .set_budget(BudgetScope::Session(unknown_session), limits)
        .await
    {
        Err(StoreError::NotFound { entity, .. }) => assert_eq!(entity, Entity::Session),
        other => panic!("unknown session: expected NotFound, got {other:?}"),
    }
    let unknown_incident = IncidentId::new();
    match store
        .set_budget(BudgetScope::Incident(unknown_incident), limits)
        .await
    {
        Err(StoreError::NotFound { entity, .. }) => assert_eq!(entity, Entity::Incident),
        other => panic!("unknown incident: expected NotFound, got {other:?}"),
    }
    let inc = incident(store).await;
    let scope = BudgetScope::Incident(inc.id);
    match store
        .set_budget(scope, BudgetLimits::new().tokens(u64::MAX))
        .await
    {
        Err(StoreError::InvalidInput { field, .. }) => assert_eq!(field, "budget.tokens"),
        other => panic!("out of range: expected InvalidInput, got {other:?}"),
    }
    assert_eq!(store.budget(scope).await.unwrap(), None, "nothing written");
    let unknown = BudgetScope::Session(unknown_session);
    assert_eq!(store.budget(unknown).await.unwrap(), None);
}

/// Deleting a finished session (prune) deletes its budget with its other
/// rows; its incident's budget, and what the session spent against it,
/// stay.
pub async fn a_deleted_session_takes_its_budget_along(store: &dyn BudgetStore) {
    let inc = incident(store).await;
    let s = session(store, &inc).await;
    let own = BudgetScope::Session(s.id);
    let shared = BudgetScope::Incident(inc.id);
    store
        .set_budget(own, BudgetLimits::new().tokens(1_000))
        .await
        .unwrap();
    store
        .set_budget(shared, BudgetLimits::new().tokens(5_000))
        .await
        .unwrap();
    store
        .spend(s.id, inc.id, Spend::tokens(30, 20))
        .await
        .unwrap();
    let s = store
        .settle_session(
            s.id,
            settlement_at(SessionStatus::Completed, exit_reason::COMPLETED, s.fence),
        )
        .await
        .unwrap();
    store.delete_session(s.id, s.fence).await.expect("delete");
    assert_eq!(
        store.budget(own).await.unwrap(),
        None,
        "the session's is gone"
    );
    let kept = store
        .budget(shared)
        .await
        .unwrap()
        .expect("the incident's stays");
    assert_eq!(kept.spent, Spend::tokens(30, 20));
}
