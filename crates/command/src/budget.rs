//! A run's budget guard: what the run spends — each metered model call's
//! tokens and their cost, and its wall time — is added to the budgets of
//! its session and incident in the store ([`Budgets`]). Once a budget is
//! reached, a model call is refused with an answer the agents' SDKs do
//! not retry and the run is stopped (exit reason `budget_reached`): the
//! agent wanted more than its budget has. A run that needs no further
//! call finishes as it would have; a wall-time limit stops the run when
//! it is reached.
//!
//! The store is asked before each model call (a spend of the wall time
//! since the last one, which also reads where the budgets stand) and after
//! it (its tokens). What could not be recorded (the store unreachable) is
//! carried to the next spend; a call while the store cannot say is
//! refused as a passing failure (`503`, which SDKs retry), never let
//! through unchecked. Overshoot: calls already in flight when a budget is
//! reached finish and are counted — at most the calls running at once
//! times their size.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use korvus_log::{Event, EventKind, LogHandle};
use korvus_store::{Budget, Budgets, IncidentId, PriceTable, SessionId, Spend};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::warn;

/// The longest the guard waits between two spends of wall time.
const WALL_TICK: Duration = Duration::from_secs(60);

/// Where a run's budgets are kept and what its models cost: what
/// [`CommandRunner::budgets`](crate::CommandRunner::budgets) was given.
#[derive(Debug, Clone)]
pub(crate) struct BudgetConfig {
    pub(crate) budgets: Arc<dyn Budgets>,
    pub(crate) prices: PriceTable,
}

// A runner stays `UnwindSafe` as it was before budgets: the store is only
// reached through its own calls, each committed whole or not, so a panic
// cannot leave the budgets half-written for a caller that catches it.
impl std::panic::UnwindSafe for BudgetConfig {}
impl std::panic::RefUnwindSafe for BudgetConfig {}

/// One run's guard; [`finish`] records its last wall time.
#[derive(Debug)]
pub(crate) struct Guard {
    budgets: Arc<dyn Budgets>,
    prices: PriceTable,
    session: SessionId,
    incident: IncidentId,
    books: Mutex<Books>,
    reached: watch::Sender<Option<String>>,
    log: Arc<LogHandle>,
}

#[derive(Debug)]
struct Books {
    /// When wall time was last counted.
    since: Instant,
    /// Spent but not yet recorded (the store failed).
    pending: Spend,
    /// The least wall time any budget has left, at the last look.
    wall_left: Option<Duration>,
    /// The most one call of this run spent, per measure: what the next
    /// call is expected to spend.
    largest: Spend,
    /// Why further model calls are refused, once they are.
    closed: Option<String>,
    /// The run ended ([`finish`]): a measurement arriving later (a whole
    /// answer read to its end after the agent hung up) adds its tokens,
    /// no wall time, and stops nothing.
    ended: bool,
}

/// A refused model call: why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// A budget is reached.
    Reached(String),
    /// The store could not say where the budgets stand.
    Unknown,
}

impl Guard {
    /// A guard for the run of `session` in `incident`, started now.
    pub(crate) fn new(
        config: &BudgetConfig,
        session: SessionId,
        incident: IncidentId,
        log: Arc<LogHandle>,
    ) -> Arc<Self> {
        Arc::new(Self {
            budgets: Arc::clone(&config.budgets),
            prices: config.prices.clone(),
            session,
            incident,
            books: Mutex::new(Books {
                since: Instant::now(),
                pending: Spend::default(),
                wall_left: None,
                largest: Spend::default(),
                closed: None,
                ended: false,
            }),
            reached: watch::channel(None).0,
            log,
        })
    }

    fn books(&self) -> std::sync::MutexGuard<'_, Books> {
        self.books
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Why the run was stopped for its budget, once it was.
    pub(crate) fn reached_now(&self) -> Option<String> {
        self.reached.borrow().clone()
    }

    /// Resolves once the run is to be stopped for its budget.
    pub(crate) async fn reached(&self) {
        let mut rx = self.reached.subscribe();
        let _ = rx.wait_for(Option::is_some).await;
    }

    /// Before a model call: records the wall time since the last spend
    /// and says whether the call may go. A refused call stops the run:
    /// the agent wanted more than its budget has.
    pub(crate) async fn check(&self) -> Result<(), Refused> {
        if let Some(why) = self.reached_now() {
            return Err(Refused::Reached(why));
        }
        self.account(Spend::default())
            .await
            .map_err(|()| Refused::Unknown)?;
        let closed = self.books().closed.clone();
        match closed {
            Some(why) => {
                self.stop(&why).await;
                Err(Refused::Reached(why))
            }
            None => Ok(()),
        }
    }

    /// Stops the run for its budget (once), with a note saying why.
    async fn stop(&self, why: &str) {
        if self.reached_now().is_some() {
            return;
        }
        let note = EventKind::Note {
            text: format!(
                "budget: {why}; korvus stops the run and refuses further model calls \
                 (raise the budget to continue)"
            ),
        };
        if let Err(e) = self.log.append(&[Event::korvus(note)]).await {
            warn!(error = %e, "the budget note was not logged");
        }
        self.reached.send_replace(Some(why.to_owned()));
    }

    /// After a metered model call of `model`: records its tokens and
    /// their cost.
    pub(crate) async fn spent(&self, model: Option<&str>, input: u64, output: u64) {
        let cost = self.prices.cost_micros(model, input, output);
        let call = Spend::tokens(input, output).with_cost_micros(cost);
        {
            let mut books = self.books();
            let l = &mut books.largest;
            l.input_tokens = l.input_tokens.max(call.input_tokens);
            l.output_tokens = l.output_tokens.max(call.output_tokens);
            l.cost_micros = l.cost_micros.max(call.cost_micros);
        }
        let _ = self.account(call).await;
    }

    /// Adds `extra`, the wall time since the last spend and whatever
    /// earlier spends could not record, to the budgets; judges them.
    async fn account(&self, extra: Spend) -> Result<(), ()> {
        let (spend, ended) = {
            let mut books = self.books();
            let now = Instant::now();
            let wall = if books.ended {
                Duration::ZERO
            } else {
                now.duration_since(books.since)
            };
            books.since = now;
            let spend = books
                .pending
                .plus(extra)
                .plus(Spend::default().with_wall(wall));
            books.pending = Spend::default();
            (spend, books.ended)
        };
        match self.budgets.spend(self.session, self.incident, spend).await {
            Ok(budgets) => {
                if !ended {
                    self.judge(&budgets).await;
                }
                Ok(())
            }
            Err(e) => {
                warn!(error = %e, "the run's spend could not be recorded; carried to the next");
                let mut books = self.books();
                books.pending = books.pending.plus(spend);
                Err(())
            }
        }
    }

    /// Notes the least wall time left and whether further calls are
    /// refused (a budget reached, or passed by a call as large as this
    /// run's largest); a wall-time limit reached stops the run at once.
    async fn judge(&self, budgets: &[Budget]) {
        let next = {
            let mut books = self.books();
            books.wall_left = budgets.iter().filter_map(Budget::remaining_wall).min();
            books.largest
        };
        let found = budgets
            .iter()
            .find_map(|b| b.would_pass(next).map(|l| (b, l)));
        let why = found.map(|(budget, limit)| {
            let how = if budget.reached().is_some() {
                "is reached"
            } else {
                "would be passed by the next model call (as large as this run's largest)"
            };
            format!(
                "the {} budget of {} {how} (spent: {} input and {} output tokens, cost {} \
                 micros, {} ms of runs)",
                limit,
                budget.scope,
                budget.spent.input_tokens,
                budget.spent.output_tokens,
                budget.spent.cost_micros,
                budget.spent.wall_ms,
            )
        });
        self.books().closed.clone_from(&why);
        // Wall time passes without calls: reached, it stops the run now.
        let out_of_time = budgets
            .iter()
            .any(|b| b.remaining_wall() == Some(Duration::ZERO));
        if let (true, Some(why)) = (out_of_time, &why) {
            self.stop(why).await;
        }
    }

    /// Counts wall time while the run lasts: wakes when the least wall
    /// time left runs out (at least once a minute) and records it.
    pub(crate) fn watch_wall(self: &Arc<Self>) -> JoinHandle<()> {
        let guard = Arc::clone(self);
        tokio::spawn(async move {
            while guard.reached_now().is_none() {
                let left = guard.books().wall_left.unwrap_or(WALL_TICK);
                tokio::time::sleep(left.clamp(Duration::from_millis(10), WALL_TICK)).await;
                let _ = guard.account(Spend::default()).await;
            }
        })
    }
}

/// The end of a run's pump: stops `guard`'s wall-time watch and records
/// its last wall time; later spends add tokens only.
pub(crate) async fn finish(guard: Option<&Guard>, wall: Option<JoinHandle<()>>) {
    if let Some(wall) = wall {
        wall.abort();
    }
    if let Some(guard) = guard {
        let _ = guard.account(Spend::default()).await;
        guard.books().ended = true;
    }
}
