//! Budgets: caps on what a session, or all sessions of an incident,
//! may spend — tokens, cost, wall time — and the [`Budgets`] seam that
//! keeps what was spent against them in the store, so a cap holds across
//! every replica.
//!
//! A budget is set on a [`BudgetScope`] with [`BudgetLimits`]; every
//! metered model call adds its [`Spend`] to the budgets of its session and
//! of its incident in one conditional update per row (a scope without a
//! budget records nothing). A budget past any of its limits is
//! [reached](Budget::reached); what stops the run is the caller's
//! business (the command runner's model gateway).

use std::fmt::{self, Debug};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{IncidentId, Result, SessionId};

/// What a budget covers: one session (all its revisions), or every session
/// of an incident together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "scope", content = "id", rename_all = "snake_case")]
pub enum BudgetScope {
    /// One session, across its revisions (reopens and answers included).
    Session(SessionId),
    /// Every session of an incident, together.
    Incident(IncidentId),
}

impl BudgetScope {
    /// `"session"` or `"incident"`: the scope's name in the store.
    pub fn kind(&self) -> &'static str {
        match self {
            BudgetScope::Session(_) => "session",
            BudgetScope::Incident(_) => "incident",
        }
    }

    /// The id of the session or incident.
    pub fn uuid(&self) -> uuid::Uuid {
        match self {
            BudgetScope::Session(id) => id.as_uuid(),
            BudgetScope::Incident(id) => id.as_uuid(),
        }
    }
}

impl fmt::Display for BudgetScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind(), self.uuid())
    }
}

/// The limits of a budget; `None` (or left out, in JSON) is no limit on
/// that measure; a field it does not know is refused. Cost is in
/// millionths of whatever currency the embedder's price table uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BudgetLimits {
    /// Input (prompt) tokens.
    pub input_tokens: Option<u64>,
    /// Output (completion) tokens.
    pub output_tokens: Option<u64>,
    /// Input and output tokens together.
    pub tokens: Option<u64>,
    /// Cost, in millionths of the price table's currency.
    pub cost_micros: Option<u64>,
    /// Wall time of the runs, in milliseconds.
    pub wall_ms: Option<u64>,
}

impl BudgetLimits {
    /// No limit on anything.
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `n` input and output tokens together.
    pub fn tokens(mut self, n: u64) -> Self {
        self.tokens = Some(n);
        self
    }

    /// At most `n` input tokens.
    pub fn input_tokens(mut self, n: u64) -> Self {
        self.input_tokens = Some(n);
        self
    }

    /// At most `n` output tokens.
    pub fn output_tokens(mut self, n: u64) -> Self {
        self.output_tokens = Some(n);
        self
    }

    /// At most `micros` millionths of the price table's currency.
    pub fn cost_micros(mut self, micros: u64) -> Self {
        self.cost_micros = Some(micros);
        self
    }

    /// At most `wall` of run time (milliseconds are kept).
    pub fn wall(mut self, wall: Duration) -> Self {
        self.wall_ms = Some(u64::try_from(wall.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// Whether no limit is set.
    pub fn is_unlimited(&self) -> bool {
        *self == Self::default()
    }
}

/// What was spent: by one model call (what [`Budgets::spend`] adds), or
/// in total against a budget ([`Budget::spent`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Spend {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cost, in millionths of the price table's currency.
    pub cost_micros: u64,
    /// Wall time of runs, in milliseconds.
    pub wall_ms: u64,
}

impl Spend {
    /// `input` and `output` tokens, no cost, no time.
    pub fn tokens(input: u64, output: u64) -> Self {
        Self {
            input_tokens: input,
            output_tokens: output,
            ..Self::default()
        }
    }

    /// This spend with a cost of `micros`.
    pub fn with_cost_micros(mut self, micros: u64) -> Self {
        self.cost_micros = micros;
        self
    }

    /// This spend with `wall` of run time.
    pub fn with_wall(mut self, wall: Duration) -> Self {
        self.wall_ms = u64::try_from(wall.as_millis()).unwrap_or(u64::MAX);
        self
    }

    /// Input and output tokens together.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// Whether nothing is spent.
    pub fn is_zero(&self) -> bool {
        *self == Self::default()
    }

    /// This spend plus `other`, saturating.
    pub fn plus(self, other: Spend) -> Self {
        Self {
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            cost_micros: self.cost_micros.saturating_add(other.cost_micros),
            wall_ms: self.wall_ms.saturating_add(other.wall_ms),
        }
    }
}

/// Which limit of a budget was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BudgetLimit {
    /// [`BudgetLimits::input_tokens`].
    InputTokens,
    /// [`BudgetLimits::output_tokens`].
    OutputTokens,
    /// [`BudgetLimits::tokens`].
    Tokens,
    /// [`BudgetLimits::cost_micros`].
    Cost,
    /// [`BudgetLimits::wall_ms`].
    WallTime,
}

impl BudgetLimit {
    /// The limit's name: `input_tokens`, `output_tokens`, `tokens`,
    /// `cost`, `wall_time`.
    pub fn as_str(&self) -> &'static str {
        match self {
            BudgetLimit::InputTokens => "input_tokens",
            BudgetLimit::OutputTokens => "output_tokens",
            BudgetLimit::Tokens => "tokens",
            BudgetLimit::Cost => "cost",
            BudgetLimit::WallTime => "wall_time",
        }
    }
}

impl fmt::Display for BudgetLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A budget as the store keeps it: its limits and what was spent against
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Budget {
    /// What it covers.
    pub scope: BudgetScope,
    /// Its limits.
    pub limits: BudgetLimits,
    /// What was spent against it so far.
    pub spent: Spend,
}

impl Budget {
    /// A budget of `scope` with `limits` and `spent` — what a backend
    /// returns.
    pub fn new(scope: BudgetScope, limits: BudgetLimits, spent: Spend) -> Self {
        Self {
            scope,
            limits,
            spent,
        }
    }

    /// The first limit the spend has reached (spent ≥ limit), if any. A
    /// limit of 0 is reached at once.
    pub fn reached(&self) -> Option<BudgetLimit> {
        let (l, s) = (&self.limits, &self.spent);
        [
            (l.tokens, s.total_tokens(), BudgetLimit::Tokens),
            (l.input_tokens, s.input_tokens, BudgetLimit::InputTokens),
            (l.output_tokens, s.output_tokens, BudgetLimit::OutputTokens),
            (l.cost_micros, s.cost_micros, BudgetLimit::Cost),
            (l.wall_ms, s.wall_ms, BudgetLimit::WallTime),
        ]
        .into_iter()
        .find_map(|(limit, spent, which)| limit.filter(|l| spent >= *l).map(|_| which))
    }

    /// The first limit that is reached, or that `next` — what the next
    /// call is expected to spend — would pass (spent + next > limit), if
    /// any: what a caller checks before it spends.
    pub fn would_pass(&self, next: Spend) -> Option<BudgetLimit> {
        if let Some(reached) = self.reached() {
            return Some(reached);
        }
        let (l, s) = (&self.limits, &self.spent.plus(next));
        [
            (l.tokens, s.total_tokens(), BudgetLimit::Tokens),
            (l.input_tokens, s.input_tokens, BudgetLimit::InputTokens),
            (l.output_tokens, s.output_tokens, BudgetLimit::OutputTokens),
            (l.cost_micros, s.cost_micros, BudgetLimit::Cost),
        ]
        .into_iter()
        .find_map(|(limit, spent, which)| limit.filter(|l| spent > *l).map(|_| which))
    }

    /// Tokens left under the tightest token limit, `None` when no token
    /// limit is set.
    pub fn remaining_tokens(&self) -> Option<u64> {
        let (l, s) = (&self.limits, &self.spent);
        [
            l.tokens.map(|n| n.saturating_sub(s.total_tokens())),
            l.input_tokens.map(|n| n.saturating_sub(s.input_tokens)),
            l.output_tokens.map(|n| n.saturating_sub(s.output_tokens)),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Wall time left, `None` when no wall-time limit is set.
    pub fn remaining_wall(&self) -> Option<Duration> {
        self.limits
            .wall_ms
            .map(|n| Duration::from_millis(n.saturating_sub(self.spent.wall_ms)))
    }
}

/// What one model's tokens cost, in millionths of the embedder's currency
/// per million tokens (so `Price::per_million(2_500_000, 10_000_000)` is
/// 2.50 per million input tokens and 10.00 per million output tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Price {
    /// Per million input tokens, in millionths of the currency.
    pub input_micros_per_million: u64,
    /// Per million output tokens, in millionths of the currency.
    pub output_micros_per_million: u64,
}

impl Price {
    /// A price per million input and output tokens, in millionths of the
    /// currency.
    pub fn per_million(input_micros: u64, output_micros: u64) -> Self {
        Self {
            input_micros_per_million: input_micros,
            output_micros_per_million: output_micros,
        }
    }

    /// What `input` and `output` tokens cost, rounded up to a millionth.
    pub fn cost_micros(&self, input: u64, output: u64) -> u64 {
        let part =
            |tokens: u64, per: u64| (u128::from(tokens) * u128::from(per)).div_ceil(1_000_000);
        let total = part(input, self.input_micros_per_million)
            + part(output, self.output_micros_per_million);
        u64::try_from(total).unwrap_or(u64::MAX)
    }
}

/// The prices of the models an embedder uses: korvus has none built in. A
/// model answer names its model (`gpt-5-2025-08-07`); it is priced by the
/// longest name in the table it starts with (`gpt-5`). A model the table
/// does not name is priced at the table's highest price — a cost budget is
/// never evaded by picking an unlisted model — and a call without a
/// model name likewise.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriceTable {
    prices: Vec<(String, Price)>,
}

impl PriceTable {
    /// An empty table: every call costs nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// The table with `model` (a name or a name's prefix) at `price`.
    #[must_use]
    pub fn price(mut self, model: impl Into<String>, price: Price) -> Self {
        let model = model.into();
        self.prices.retain(|(m, _)| *m != model);
        self.prices.push((model, price));
        self
    }

    /// Whether the table names no model.
    pub fn is_empty(&self) -> bool {
        self.prices.is_empty()
    }

    /// The price of `model`: the longest listed prefix of its name, else
    /// the highest price listed; `None` for an empty table.
    pub fn for_model(&self, model: Option<&str>) -> Option<Price> {
        let listed = model.and_then(|name| {
            self.prices
                .iter()
                .filter(|(m, _)| name.starts_with(m.as_str()))
                .max_by_key(|(m, _)| m.len())
        });
        listed
            .or_else(|| {
                self.prices
                    .iter()
                    .max_by_key(|(_, p)| (p.input_micros_per_million, p.output_micros_per_million))
            })
            .map(|(_, p)| *p)
    }

    /// What a call of `model` with `input` and `output` tokens cost.
    pub fn cost_micros(&self, model: Option<&str>, input: u64, output: u64) -> u64 {
        self.for_model(model)
            .map_or(0, |p| p.cost_micros(input, output))
    }
}

/// Where budgets and their spend are kept: the store's seam for caps that
/// hold across replicas. Implemented by every backend that implements
/// [`Store`](crate::Store) (`korvus-store-sql` on both engines, and
/// [`MemoryStore`](crate::MemoryStore)); `korvus-testkit`'s budget cases
/// say what an implementation must honour. Object-safe.
///
/// # Cancel safety
/// As [`Store`](crate::Store)'s: reads are cancel safe; a dropped
/// `set_budget` or `spend` has committed whole or not at all, and the
/// caller does not learn which (a spend dropped after it committed is
/// counted; one dropped before is not).
#[async_trait::async_trait]
pub trait Budgets: Send + Sync + Debug + 'static {
    /// Sets the limits of `scope`'s budget, replacing earlier limits and
    /// keeping what was spent. Limits above `i64::MAX` are refused.
    ///
    /// # Errors
    /// `NotFound` for an unknown session or incident; `InvalidInput` for a
    /// limit out of range; `Backend` on I/O failure.
    async fn set_budget(&self, scope: BudgetScope, limits: BudgetLimits) -> Result<Budget>;

    /// `scope`'s budget, `None` when none was set.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn budget(&self, scope: BudgetScope) -> Result<Option<Budget>>;

    /// Adds `spend` to the budgets of `session` and of `incident` — those
    /// set; nothing is recorded for a scope without a budget — in one
    /// conditional update per budget, so concurrent spends (from any
    /// replica) are all counted. Returns those budgets after the update,
    /// the session's first. A zero spend reads them.
    ///
    /// # Errors
    /// `Backend` on I/O failure.
    async fn spend(
        &self,
        session: SessionId,
        incident: IncidentId,
        spend: Spend,
    ) -> Result<Vec<Budget>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_is_priced_by_its_longest_listed_prefix_else_the_highest_price() {
        let table = PriceTable::new()
            .price("gpt-5", Price::per_million(1_250_000, 10_000_000))
            .price("gpt-5-mini", Price::per_million(250_000, 2_000_000))
            .price("cheap", Price::per_million(1, 1));
        assert_eq!(
            table.cost_micros(Some("gpt-5-2025-08-07"), 1_000, 100),
            2_250
        );
        assert_eq!(table.cost_micros(Some("gpt-5-mini-x"), 1_000, 100), 450);
        assert_eq!(table.cost_micros(Some("unlisted"), 1_000, 100), 2_250);
        assert_eq!(table.cost_micros(None, 1_000, 100), 2_250);
        assert_eq!(table.cost_micros(Some("cheap"), 1, 1), 2, "rounded up");
        assert_eq!(PriceTable::new().cost_micros(Some("gpt-5"), 9, 9), 0);
    }

    #[test]
    fn a_budget_is_reached_at_its_limit() {
        let scope = BudgetScope::Session(SessionId::new());
        let limits = BudgetLimits::new().tokens(5_000);
        let at = |i, o| Budget::new(scope, limits, Spend::tokens(i, o));
        assert_eq!(at(3_000, 1_000).reached(), None);
        assert_eq!(at(3_000, 1_000).remaining_tokens(), Some(1_000));
        assert_eq!(at(4_000, 1_000).reached(), Some(BudgetLimit::Tokens));
        let next = Spend::tokens(1_500, 500);
        assert_eq!(at(3_000, 1_000).would_pass(next), Some(BudgetLimit::Tokens));
        assert_eq!(
            at(2_000, 1_000).would_pass(next),
            None,
            "exactly at the limit fits"
        );
        assert_eq!(
            at(4_000, 1_000).would_pass(Spend::default()),
            Some(BudgetLimit::Tokens)
        );
        assert_eq!(at(4_500, 1_000).remaining_tokens(), Some(0));
        let zero = Budget::new(scope, BudgetLimits::new().cost_micros(0), Spend::default());
        assert_eq!(zero.reached(), Some(BudgetLimit::Cost));
        let none = Budget::new(scope, BudgetLimits::new(), Spend::tokens(9, 9));
        assert_eq!((none.reached(), none.remaining_tokens()), (None, None));
        let wall = Budget::new(
            scope,
            BudgetLimits::new().wall(Duration::from_secs(2)),
            Spend::default().with_wall(Duration::from_millis(500)),
        );
        assert_eq!(wall.remaining_wall(), Some(Duration::from_millis(1_500)));
    }
}
