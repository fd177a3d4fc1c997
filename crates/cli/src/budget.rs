//! `korvus budget`: sets a session's (or an incident's) budget in the
//! store, shows where it stands, and continues a session paused at its
//! budget once it is raised — with the agent it ran, followed live.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result};
use clap::Args;
use korvus_store::{Budget, BudgetLimits, BudgetScope, IncidentId, Session, SessionStatus};

use crate::compose::Backends;
use crate::out::say;
use crate::session::{drive, logged_events, Signals};
use crate::Global;

#[derive(Debug, Args)]
pub(crate) struct BudgetArgs {
    /// The session (or with --incident, the incident).
    pub(crate) id: String,
    /// Set the incident's budget, shared by all its sessions.
    #[arg(long)]
    pub(crate) incident: bool,
    /// Input and output tokens together.
    #[arg(long)]
    pub(crate) tokens: Option<u64>,
    /// Input tokens.
    #[arg(long)]
    pub(crate) input_tokens: Option<u64>,
    /// Output tokens.
    #[arg(long)]
    pub(crate) output_tokens: Option<u64>,
    /// Wall time of the runs, in seconds.
    #[arg(long)]
    pub(crate) wall_secs: Option<u64>,
}

impl BudgetArgs {
    fn limits(&self) -> Option<BudgetLimits> {
        let mut limits = BudgetLimits::new();
        limits.tokens = self.tokens;
        limits.input_tokens = self.input_tokens;
        limits.output_tokens = self.output_tokens;
        if let Some(secs) = self.wall_secs {
            limits = limits.wall(Duration::from_secs(secs));
        }
        (!limits.is_unlimited()).then_some(limits)
    }
}

/// One line of where a budget stands.
pub(crate) fn describe(budget: &Budget) -> String {
    let (l, s) = (&budget.limits, &budget.spent);
    let of = |spent: u64, limit: Option<u64>| match limit {
        Some(limit) => format!("{spent} of {limit}"),
        None => spent.to_string(),
    };
    let mut line = format!(
        "{}: tokens {} (input {}, output {}), wall {} s",
        budget.scope,
        of(s.total_tokens(), l.tokens),
        of(s.input_tokens, l.input_tokens),
        of(s.output_tokens, l.output_tokens),
        of(s.wall_ms / 1000, l.wall_ms.map(|ms| ms / 1000)),
    );
    if let Some(left) = budget.remaining_tokens() {
        line.push_str(&format!(", {left} tokens left"));
    }
    if let Some(limit) = budget.reached() {
        line.push_str(&format!(" — its {limit} limit is reached"));
    }
    line
}

/// The budgets of `row`'s session and of its incident, those set.
pub(crate) async fn standing(backends: &Backends, row: &Session) -> Result<Vec<Budget>> {
    let mut found = Vec::new();
    for scope in [
        BudgetScope::Session(row.id),
        BudgetScope::Incident(row.incident_id),
    ] {
        found.extend(backends.budgets.budget(scope).await?);
    }
    Ok(found)
}

/// `korvus budget`.
pub(crate) async fn budget(global: &Global, args: BudgetArgs) -> Result<ExitCode> {
    let backends = Backends::open_checked(global).await?;
    let code = if args.incident {
        incident_budget(&backends, &args).await
    } else {
        session_budget(&backends, &args).await
    };
    backends.close().await;
    code
}

async fn incident_budget(backends: &Backends, args: &BudgetArgs) -> Result<ExitCode> {
    let id: IncidentId = crate::inspect::parse_id(&args.id, "incident")?;
    let scope = BudgetScope::Incident(id);
    let budget = match args.limits() {
        Some(limits) => Some(
            backends
                .budgets
                .set_budget(scope, limits)
                .await
                .with_context(|| format!("cannot set the budget of incident {id}"))?,
        ),
        None => backends.budgets.budget(scope).await?,
    };
    match budget {
        Some(b) => println!("{}", describe(&b)),
        None => println!("incident {id} has no budget"),
    }
    Ok(ExitCode::SUCCESS)
}

async fn session_budget(backends: &Backends, args: &BudgetArgs) -> Result<ExitCode> {
    let row = crate::inspect::find_session(backends, &args.id).await?;
    let id = row.id;
    let Some(limits) = args.limits() else {
        let standing = standing(backends, &row).await?;
        for b in &standing {
            println!("{}", describe(b));
        }
        if standing.is_empty() {
            println!("session {id} has no budget (nor has its incident)");
        }
        return Ok(ExitCode::SUCCESS);
    };
    let paused = row.status == SessionStatus::Running
        && row.exit_reason.as_deref() == Some(korvus_store::exit_reason::BUDGET_REACHED);
    // Paused at its budget, with the agent it ran remembered: raised, it
    // continues with that agent. Otherwise the budget is only set.
    let described = row.runner.as_ref().filter(|_| paused);
    let Some(described) = described else {
        let budget = backends
            .budgets
            .set_budget(BudgetScope::Session(id), limits)
            .await
            .with_context(|| format!("cannot set the budget of session {id}"))?;
        println!("{}", describe(&budget));
        if paused {
            say!(
                "session {id} has no remembered agent: continue it with \
                 `korvus reply {id} --agent … \"continue\"`"
            );
        }
        return Ok(ExitCode::SUCCESS);
    };
    let agent = crate::remember::agent_args(described)
        .with_context(|| format!("session {id}: its agent could not be rebuilt"))?;
    let runner = agent.runner(backends)?;
    let manager = backends.manager(runner, agent.timeout(), None);
    let signals = Signals::install()?;
    let seen = logged_events(backends, id).await;
    let standing = manager
        .set_budget(id, limits)
        .await
        .with_context(|| format!("cannot set the budget of session {id}"))?;
    for b in [standing.session, standing.incident].iter().flatten() {
        say!("{}", describe(b));
    }
    let row = crate::inspect::find_session(backends, &args.id).await?;
    if row.is_idle() {
        say!("session {id} stays paused: a budget of it is still reached");
        manager.stop().await;
        return Ok(crate::session::exit_code(&row));
    }
    let code = drive(backends, &manager, &row, seen, row.revision, signals).await;
    manager.stop().await;
    code
}
