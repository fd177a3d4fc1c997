//! The memory store's [`Budgets`]: one map under the store's lock, so
//! every spend is counted once.

use async_trait::async_trait;

use super::MemoryStore;
use crate::{
    Budget, BudgetLimits, BudgetScope, Budgets, Entity, IncidentId, Result, SessionId, Spend,
    StoreError,
};

#[async_trait]
impl Budgets for MemoryStore {
    async fn set_budget(&self, scope: BudgetScope, limits: BudgetLimits) -> Result<Budget> {
        crate::validate::budget_limits(&limits)?;
        let mut inner = self.lock();
        match scope {
            BudgetScope::Session(id) => {
                inner.session(id)?;
            }
            BudgetScope::Incident(id) if !inner.incidents.contains_key(&id) => {
                return Err(StoreError::not_found(Entity::Incident, id));
            }
            BudgetScope::Incident(_) => {}
        }
        let budget = inner
            .budgets
            .entry(scope)
            .or_insert_with(|| Budget::new(scope, limits, Spend::default()));
        budget.limits = limits;
        Ok(*budget)
    }

    async fn budget(&self, scope: BudgetScope) -> Result<Option<Budget>> {
        Ok(self.lock().budgets.get(&scope).copied())
    }

    async fn spend(
        &self,
        session: SessionId,
        incident: IncidentId,
        spend: Spend,
    ) -> Result<Vec<Budget>> {
        let mut inner = self.lock();
        let scopes = [
            BudgetScope::Session(session),
            BudgetScope::Incident(incident),
        ];
        Ok(scopes
            .into_iter()
            .filter_map(|scope| {
                let budget = inner.budgets.get_mut(&scope)?;
                budget.spent = budget.spent.plus(spend);
                Some(*budget)
            })
            .collect())
    }
}
