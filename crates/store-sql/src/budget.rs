//! The [`Budgets`](korvus_store::Budgets) of both engines, written once by
//! [`sql_budgets!`]: the `budgets` table (migration `…_budgets.sql`), one
//! row per scope, spent figures added by one conditional `UPDATE` per
//! metered call so concurrent spends from any replica are all counted.
//! The table has no foreign key; `delete_session` deletes a session's row
//! with its others (the migration's comment, written before, says a row is
//! left behind). On PostgreSQL a `set_budget` racing that delete can still
//! leave one: harmless, as every read starts from the session.

/// The columns a budget statement returns, in [`BudgetRow`]'s order.
macro_rules! budget_columns {
    () => {
        "scope, scope_id, max_input_tokens, max_output_tokens, max_tokens, max_cost_micros, \
         max_wall_ms, spent_input_tokens, spent_output_tokens, spent_cost_micros, spent_wall_ms"
    };
}

/// Sets a budget's limits where `$2` names a row of `table` (`sessions` or
/// `incidents`), keeping what it spent. Binds `$1` scope, `$2` id,
/// `$3`..`$7` the limits.
macro_rules! set_budget {
    ($table:literal) => {
        concat!(
            "INSERT INTO budgets (scope, scope_id, max_input_tokens, max_output_tokens, \
             max_tokens, max_cost_micros, max_wall_ms) \
             SELECT $1, $2, $3, $4, $5, $6, $7 WHERE EXISTS (SELECT 1 FROM ",
            $table,
            " WHERE id = $2) \
             ON CONFLICT (scope, scope_id) DO UPDATE SET \
             max_input_tokens = excluded.max_input_tokens, \
             max_output_tokens = excluded.max_output_tokens, max_tokens = excluded.max_tokens, \
             max_cost_micros = excluded.max_cost_micros, max_wall_ms = excluded.max_wall_ms \
             RETURNING ",
            budget_columns!()
        )
    };
}

/// Sets a session's budget. Binds as [`set_budget!`].
pub(crate) const SET_SESSION_BUDGET: &str = set_budget!("sessions");
/// Sets an incident's budget. Binds as [`set_budget!`].
pub(crate) const SET_INCIDENT_BUDGET: &str = set_budget!("incidents");
/// A scope's budget. Binds `$1` scope, `$2` id.
pub(crate) const GET_BUDGET: &str = concat!(
    "SELECT ",
    budget_columns!(),
    " FROM budgets WHERE scope = $1 AND scope_id = $2"
);
/// Adds a spend to the budgets of session `$1` and incident `$2`. Binds
/// `$3` input tokens, `$4` output tokens, `$5` cost, `$6` wall ms.
pub(crate) const SPEND: &str = concat!(
    "UPDATE budgets SET spent_input_tokens = spent_input_tokens + $3, \
     spent_output_tokens = spent_output_tokens + $4, \
     spent_cost_micros = spent_cost_micros + $5, spent_wall_ms = spent_wall_ms + $6 \
     WHERE (scope = 'session' AND scope_id = $1) OR (scope = 'incident' AND scope_id = $2) \
     RETURNING ",
    budget_columns!()
);

/// Every statement, by name: what the SQL snapshot renders.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const ALL: [(&str, &str); 4] = [
    ("SET_SESSION_BUDGET", SET_SESSION_BUDGET),
    ("SET_INCIDENT_BUDGET", SET_INCIDENT_BUDGET),
    ("GET_BUDGET", GET_BUDGET),
    ("SPEND", SPEND),
];

/// A budget row: scope, id, five limits, four spent figures.
pub(crate) type BudgetRow = (
    String,
    uuid::Uuid,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    i64,
    i64,
    i64,
    i64,
);

/// The model of a budget row.
pub(crate) fn budget(
    backend: &'static str,
    row: BudgetRow,
) -> Result<korvus_store::Budget, korvus_store::StoreError> {
    use korvus_store::{BudgetLimits, BudgetScope, IncidentId, SessionId, Spend};
    let (scope, id, max_in, max_out, max_tokens, max_cost, max_wall, s_in, s_out, s_cost, s_wall) =
        row;
    let scope = match scope.as_str() {
        "session" => BudgetScope::Session(SessionId::from_uuid(id)),
        "incident" => BudgetScope::Incident(IncidentId::from_uuid(id)),
        other => {
            return Err(crate::error::unexpected(
                backend,
                format!("budget scope {other:?}"),
            ))
        }
    };
    let limit = |n: Option<i64>| n.map(|n| u64::try_from(n).unwrap_or(0));
    let spent = |n: i64| u64::try_from(n).unwrap_or(0);
    let mut limits = BudgetLimits::new();
    limits.input_tokens = limit(max_in);
    limits.output_tokens = limit(max_out);
    limits.tokens = limit(max_tokens);
    limits.cost_micros = limit(max_cost);
    limits.wall_ms = limit(max_wall);
    let mut total = Spend::tokens(spent(s_in), spent(s_out)).with_cost_micros(spent(s_cost));
    total.wall_ms = spent(s_wall);
    Ok(korvus_store::Budget::new(scope, limits, total))
}

/// Writes the [`Budgets`](korvus_store::Budgets) impl of `$store`.
macro_rules! sql_budgets {
    ($store:ident) => {
        const _: () = {
            use korvus_store::{
                Budget, BudgetLimits, BudgetScope, Budgets, Entity, IncidentId, Result, SessionId,
                Spend, StoreError,
            };

            use $crate::budget::{budget, BudgetRow};
            use $crate::completed::Completed as _;
            use $crate::error::backend;
            use $crate::rows::to_i64;

            #[async_trait::async_trait]
            impl Budgets for $store {
                async fn set_budget(
                    &self,
                    scope: BudgetScope,
                    limits: BudgetLimits,
                ) -> Result<Budget> {
                    korvus_store::validate::budget_limits(&limits)?;
                    let (sql, entity) = match scope {
                        BudgetScope::Session(_) => {
                            ($crate::budget::SET_SESSION_BUDGET, Entity::Session)
                        }
                        BudgetScope::Incident(_) => {
                            ($crate::budget::SET_INCIDENT_BUDGET, Entity::Incident)
                        }
                    };
                    let limit = |n: Option<u64>| n.map(to_i64);
                    let row: Option<BudgetRow> = sqlx::query_as(sql)
                        .bind(scope.kind())
                        .bind(scope.uuid())
                        .bind(limit(limits.input_tokens))
                        .bind(limit(limits.output_tokens))
                        .bind(limit(limits.tokens))
                        .bind(limit(limits.cost_micros))
                        .bind(limit(limits.wall_ms))
                        .fetch_optional_completed(self.pool())
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    match row {
                        Some(row) => budget(Self::BACKEND, row),
                        None => Err(StoreError::not_found(entity, scope.uuid())),
                    }
                }

                async fn budget(&self, scope: BudgetScope) -> Result<Option<Budget>> {
                    let row: Option<BudgetRow> = sqlx::query_as($crate::budget::GET_BUDGET)
                        .bind(scope.kind())
                        .bind(scope.uuid())
                        .fetch_optional_completed(self.pool())
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    row.map(|row| budget(Self::BACKEND, row)).transpose()
                }

                async fn spend(
                    &self,
                    session: SessionId,
                    incident: IncidentId,
                    spend: Spend,
                ) -> Result<Vec<Budget>> {
                    let rows: Vec<BudgetRow> = sqlx::query_as($crate::budget::SPEND)
                        .bind(session.as_uuid())
                        .bind(incident.as_uuid())
                        .bind(to_i64(spend.input_tokens))
                        .bind(to_i64(spend.output_tokens))
                        .bind(to_i64(spend.cost_micros))
                        .bind(to_i64(spend.wall_ms))
                        .fetch_all(self.pool())
                        .await
                        .map_err(backend(Self::BACKEND))?;
                    let mut budgets = rows
                        .into_iter()
                        .map(|row| budget(Self::BACKEND, row))
                        .collect::<Result<Vec<_>>>()?;
                    budgets.sort_by_key(|b| matches!(b.scope, BudgetScope::Incident(_)));
                    Ok(budgets)
                }
            }
        };
    };
}

pub(crate) use sql_budgets;
