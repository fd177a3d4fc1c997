//! [`Manager::create`] and its request types.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use korvus_log::{Event, EventKind, Role};
use korvus_runner::ExitReason;
use korvus_store::validate::{self, MAX_ROLE_BYTES};
use korvus_store::{
    Admission, Artifact, ArtifactId, ArtifactKind, ContextRef, Incident, IncidentId,
    IncidentStatus, NewSession, Priority, Session, SessionId, Store, StoreError,
};
use tracing::{error, info, info_span, Instrument};

use crate::manager::{join_detached, Manager};
use crate::run::{Plan, RunKey};
use crate::{Result, SessionError};

/// A request to create a session.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CreateSession {
    /// The incident to run in; must exist and be open.
    pub incident_id: IncidentId,
    /// The prompt; must not be blank.
    pub prompt: String,
    /// Inherited artifacts, in the order the run should see them.
    pub context: Vec<ContextRequest>,
    /// The session's budget, set before its first run starts (see
    /// [`Manager::set_budget`]); `None`: no budget of its own.
    pub budget: Option<korvus_store::BudgetLimits>,
}

impl CreateSession {
    /// A session in `incident_id` with `prompt` and no inherited context.
    pub fn new(incident_id: IncidentId, prompt: impl Into<String>) -> Self {
        Self {
            incident_id,
            prompt: prompt.into(),
            context: Vec::new(),
            budget: None,
        }
    }

    /// The session's budget, set before its first run starts. Needs a
    /// manager with [`budgets`](crate::ManagerBuilder::budgets).
    #[must_use]
    pub fn budget(mut self, limits: korvus_store::BudgetLimits) -> Self {
        self.budget = Some(limits);
        self
    }

    /// The same request inheriting `context`, in that order.
    #[must_use]
    pub fn with_context(mut self, context: Vec<ContextRequest>) -> Self {
        self.context = context;
        self
    }
}

/// How a new session is admitted, beyond what [`CreateSession`] says:
/// for [`Manager::create_with`]. The default is what
/// [`Manager::create`] uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CreateOptions {
    /// How urgent it is when it has to be queued (the default in the
    /// middle of `1..=9`).
    pub priority: Priority,
    /// The key it is queued under (a tenant, say); `None`: its incident.
    /// Keys take turns in the queue.
    pub queue_key: Option<String>,
    /// Makes the create idempotent: a second create in the incident with
    /// this key and the same prompt answers the first session (one row,
    /// one run, whatever the number of concurrent callers); with another
    /// prompt it is [`SessionError::IdempotencyConflict`].
    pub idempotency_key: Option<String>,
}

/// One inherited artifact requested for a new session.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ContextRequest {
    /// The artifact; must belong to the same incident. The nil UUID counts
    /// as an empty id and is refused.
    pub artifact_id: ArtifactId,
    /// Role; blank means "derive from the artifact's kind"
    /// ([`default_role`]). At most [`MAX_ROLE_BYTES`] bytes, no NUL.
    pub role: String,
}

impl ContextRequest {
    /// Inherit `artifact_id` under the role its kind gives
    /// ([`default_role`]).
    pub fn new(artifact_id: ArtifactId) -> Self {
        Self {
            artifact_id,
            role: String::new(),
        }
    }

    /// The same request under `role`.
    #[must_use]
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.role = role.into();
        self
    }
}

/// The role given to a context ref requested with a blank role, from what
/// the artifact holds:
///
/// | artifact kind | role |
/// |---|---|
/// | `report` | `prior_report` |
/// | `agent_output` | `prior_output` |
/// | `workspace_archive` | `prior_workspace` |
/// | `upload` | `input` |
pub fn default_role(kind: ArtifactKind) -> &'static str {
    match kind {
        ArtifactKind::Report => "prior_report",
        ArtifactKind::AgentOutput => "prior_output",
        ArtifactKind::WorkspaceArchive => "prior_workspace",
        // `ArtifactKind` is non-exhaustive: anything new is plain input.
        _ => "input",
    }
}

impl Manager {
    /// Creates a session and starts its run in the background; returns the
    /// `running` row at once. With every run slot of this manager taken
    /// ([`ManagerBuilder::max_running`](crate::ManagerBuilder::max_running))
    /// the row is **queued** instead ([`Session::is_queued`]) and the run
    /// starts when a manager of the pool claims it; its turn log exists
    /// from now either way.
    ///
    /// Context refs are resolved before the row exists, so a bad ref leaves
    /// nothing behind. If the refs cannot be inserted after the row was,
    /// the row is settled `failed` / `context_refs_failed` — never left running.
    ///
    /// # Errors
    /// `PromptRequired`, `IncidentClosed`, `ShuttingDown`,
    /// `InvalidContextRef`, `NotFound` (incident), `Store`, `Log`.
    ///
    /// # Cancel safety
    /// Cancel-safe in effect: from the row insert on, the work runs on its
    /// own task, so dropping the future cannot leave a running row without
    /// its run; the session is created (or settled `failed`) all the same.
    pub async fn create(&self, request: CreateSession) -> Result<Session> {
        self.create_with(request, CreateOptions::default()).await
    }

    /// [`create`](Manager::create) with a priority, a queue key and an
    /// idempotency key ([`CreateOptions`]).
    ///
    /// # Errors
    /// As `create`; `IdempotencyConflict` when the key is taken in the
    /// incident by a session with another prompt.
    ///
    /// # Cancel safety
    /// As `create`.
    pub async fn create_with(
        &self,
        request: CreateSession,
        options: CreateOptions,
    ) -> Result<Session> {
        // A retry finds its session before resolving refs and listing the
        // incident again; the insert's unique key decides the races.
        if let Some(row) = self.keyed(&request, &options).await? {
            return Ok(row);
        }
        match self
            .insert_and_launch(request.clone(), options.clone())
            .await
        {
            // A concurrent create with the key won the insert.
            Err(SessionError::Store(StoreError::Conflict { .. }))
                if options.idempotency_key.is_some() =>
            {
                self.keyed(&request, &options).await?.ok_or_else(|| {
                    SessionError::Store(StoreError::Conflict {
                        entity: korvus_store::Entity::Session,
                        detail: "the idempotency key raced and is gone; try again".into(),
                    })
                })
            }
            other => other,
        }
    }

    /// The session that holds `options`' idempotency key in the
    /// request's incident, when it was created with the same prompt;
    /// `IdempotencyConflict` when with another; `None` without a key or
    /// holder.
    async fn keyed(
        &self,
        request: &CreateSession,
        options: &CreateOptions,
    ) -> Result<Option<Session>> {
        let Some(key) = &options.idempotency_key else {
            return Ok(None);
        };
        let held = self
            .inner
            .store
            .session_by_idempotency_key(request.incident_id, key)
            .await?;
        held.map(|row| same_request(row, request, key)).transpose()
    }

    async fn insert_and_launch(
        &self,
        request: CreateSession,
        options: CreateOptions,
    ) -> Result<Session> {
        let inner = &self.inner;
        // Join the run group before looking at the flag: either `stop` sees
        // this create in flight and waits for it, or this create sees `stop`.
        let guard = inner.runs.join();
        self.check_not_stopping()?;
        if request.prompt.trim().is_empty() {
            return Err(SessionError::PromptRequired);
        }
        let incident = inner.store.get_incident(request.incident_id).await?;
        if incident.status == IncidentStatus::Closed {
            return Err(SessionError::IncidentClosed {
                incident: incident.id,
            });
        }
        let (refs, inherited) = resolve_refs(&*inner.store, &incident, &request.context).await?;
        let budget = budget_of(inner, &request)?;
        let id = SessionId::new();
        let span = info_span!("session", session_id = %id, incident_id = %incident.id);
        // From the row insert on, the work runs on its own task: dropping the
        // caller's future must not leave a running row without its run.
        let this = self.clone();
        let work = async move {
            let inner = &this.inner;
            // A free slot, and nothing known to be queued ahead: this
            // manager claims the run now. Otherwise the session is queued
            // for the next slot of any manager of the pool, behind those
            // already waiting.
            let slot = inner.slot_for_new();
            if slot.is_none() {
                check_queue_room(inner, &options, incident.id).await?;
            }
            let session = inner
                .store
                .create_session(NewSession {
                    runner: inner.config.runner.clone(),
                    admission: Admission {
                        pool: inner.config.pool.clone(),
                        priority: options.priority,
                        queue_key: options.queue_key,
                        idempotency_key: options.idempotency_key,
                    },
                    // Owned by this manager even when it will be queued:
                    // no claimer can take it before its refs and its log
                    // exist. It is queued below, once they do.
                    lease: Some(inner.lease()),
                    id,
                    incident_id: incident.id,
                    prompt: request.prompt,
                    workspace_ref: incident.workspace.clone(),
                })
                .await?;
            if !refs.is_empty() {
                if let Err(e) = inner.store.insert_context_refs(id, &refs).await {
                    error!(error = %e, "context refs not inserted; settling the session failed");
                    fail_created(inner, &session, ExitReason::CONTEXT_REFS_FAILED).await;
                    return Err(e.into());
                }
            }
            set_budget(inner, &session, budget).await?;
            let log = match create_log(inner, &session, slot.is_none()).await {
                Ok(log) => log,
                Err(e) => {
                    error!(error = %e, "turn log not created; settling the session failed");
                    fail_created(inner, &session, ExitReason::TURN_LOG_FAILED).await;
                    return Err(e.into());
                }
            };
            let Some(slot) = slot else {
                let session = inner.enqueue(session).await;
                info!(seq = session.seq, kind = %session.kind, queued = session.is_queued(), "session created and queued");
                inner.slots.set_waiting(true);
                inner.slots.nudge();
                return Ok(session);
            };
            info!(seq = session.seq, kind = %session.kind, "session created");
            let plan = Plan::new(session.clone(), session.revision, incident, inherited, None);
            this.launch(plan, log, guard, slot);
            Ok(session)
        }
        .instrument(span);
        join_detached(work).await
    }
}

/// The answer to a create whose idempotency key `key` is held by `row`:
/// the row itself when it was created with the same prompt.
/// The budget a create asks for, checked before anything is written.
fn budget_of(
    inner: &crate::inner::Inner,
    request: &CreateSession,
) -> Result<Option<(korvus_store::BudgetLimits, Arc<dyn korvus_store::Budgets>)>> {
    match (&request.budget, &inner.budgets) {
        (None, _) => Ok(None),
        (Some(_), None) => Err(SessionError::NoBudgets),
        (Some(limits), Some(budgets)) => {
            validate::budget_limits(limits)?;
            Ok(Some((*limits, Arc::clone(budgets))))
        }
    }
}

/// Sets a created session's budget before its run can start; a failure
/// fails the session.
async fn set_budget(
    inner: &crate::inner::Inner,
    session: &Session,
    budget: Option<(korvus_store::BudgetLimits, Arc<dyn korvus_store::Budgets>)>,
) -> Result<()> {
    let Some((limits, budgets)) = budget else {
        return Ok(());
    };
    let scope = korvus_store::BudgetScope::Session(session.id);
    if let Err(e) = budgets.set_budget(scope, limits).await {
        error!(error = %e, "budget not set; settling the session failed");
        fail_created(inner, session, ExitReason::RUNNER_FAILED).await;
        return Err(e.into());
    }
    Ok(())
}

fn same_request(row: Session, request: &CreateSession, key: &str) -> Result<Session> {
    if row.prompt == request.prompt {
        Ok(row)
    } else {
        Err(SessionError::IdempotencyConflict {
            session: row.id,
            key: key.to_owned(),
        })
    }
}

/// Ends a session whose create failed after its row was written: its
/// report row and a `failed` settlement with `reason` — never left running.
async fn fail_created(inner: &crate::inner::Inner, session: &Session, reason: ExitReason) {
    let ended = inner.fail_early(RunKey::of(session), reason).await;
    inner.settle(session.id, ended).await;
}

/// Refuses a create that would be queued past the manager's bounds on the
/// queue (`max_queued`, `max_queued_per_key`), before anything is written.
/// Concurrent creates each check before they write, so the bound may be
/// passed by as many as race.
async fn check_queue_room(
    inner: &crate::inner::Inner,
    options: &CreateOptions,
    incident: korvus_store::IncidentId,
) -> Result<()> {
    let (pool_bound, key_bound) = (inner.config.max_queued, inner.config.max_queued_per_key);
    if pool_bound.is_none() && key_bound.is_none() {
        return Ok(());
    }
    let depth = inner
        .store
        .queue_depth(&inner.config.pool, options.queue_key.as_deref(), incident)
        .await?;
    let full = |queued: u64, bound: Option<u64>| bound.filter(|&b| queued >= b);
    if let Some(limit) = full(depth.pool, pool_bound) {
        return Err(SessionError::QueueFull {
            pool: inner.config.pool.clone(),
            key: None,
            limit,
        });
    }
    if let Some(limit) = full(depth.key, key_bound) {
        return Err(SessionError::QueueFull {
            pool: inner.config.pool.clone(),
            key: Some(
                options
                    .queue_key
                    .clone()
                    .unwrap_or_else(|| incident.to_string()),
            ),
            limit,
        });
    }
    Ok(())
}

/// Creates the session's turn log and logs the prompt as its first event,
/// a `user` message, as a reopen logs its message. The log records which
/// run wrote each event and refuses a run superseded by a later one: the
/// creator that runs the session claims its fence as the epoch first. A
/// queued session's log exists from create too (watchers open it at once)
/// and is closed here: the manager that claims the run writes the rest.
async fn create_log(
    inner: &crate::inner::Inner,
    session: &Session,
    queued: bool,
) -> korvus_log::Result<korvus_log::LogHandle> {
    let header = crate::manager::log_header(session.incident_id, session.id);
    let log = inner.logs.create(header).await?;
    if !queued {
        log.claim_epoch(session.fence).await?;
    }
    log.append(&[Event::korvus(EventKind::Message {
        role: Role::User,
        text: session.prompt.clone(),
    })])
    .await?;
    if queued {
        log.close().await?;
    }
    Ok(log)
}

/// Checks requested context refs against the store before any row exists.
async fn resolve_refs(
    store: &dyn Store,
    incident: &Incident,
    requests: &[ContextRequest],
) -> Result<(Vec<ContextRef>, Vec<(Artifact, String)>)> {
    if requests.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let mut seen = HashSet::new();
    for (i, r) in requests.iter().enumerate() {
        if r.artifact_id.as_uuid().is_nil() {
            return Err(SessionError::InvalidContextRef {
                reason: format!("context ref {i} has an empty artifact id"),
            });
        }
        if !seen.insert(r.artifact_id) {
            return Err(SessionError::InvalidContextRef {
                reason: format!("artifact {} is referenced twice", r.artifact_id),
            });
        }
        // The store would refuse the role only after the session row exists.
        if let Err(e) = validate::text("role", &r.role, MAX_ROLE_BYTES) {
            return Err(SessionError::InvalidContextRef {
                reason: format!("context ref {i}: {e}"),
            });
        }
    }
    let ids: Vec<ArtifactId> = requests.iter().map(|r| r.artifact_id).collect();
    let found: HashMap<ArtifactId, Artifact> = store
        .get_artifacts(&ids)
        .await?
        .into_iter()
        .map(|a| (a.id, a))
        .collect();
    let mut refs = Vec::with_capacity(requests.len());
    let mut inherited = Vec::with_capacity(requests.len());
    for r in requests {
        let Some(artifact) = found.get(&r.artifact_id) else {
            return Err(SessionError::InvalidContextRef {
                reason: format!("artifact {} does not exist", r.artifact_id),
            });
        };
        if artifact.incident_id != incident.id {
            return Err(SessionError::InvalidContextRef {
                reason: format!("artifact {} belongs to another incident", r.artifact_id),
            });
        }
        if artifact.kind == ArtifactKind::AgentState {
            return Err(SessionError::InvalidContextRef {
                reason: format!(
                    "artifact {} is an agent's kept state, not context",
                    r.artifact_id
                ),
            });
        }
        // A checkpoint row is deleted when its run lands or checkpoints the
        // file again; a context ref would pin it (and refuse that delete).
        if artifact.kind == ArtifactKind::Checkpoint {
            return Err(SessionError::InvalidContextRef {
                reason: format!(
                    "artifact {} is a run's checkpoint, not context",
                    r.artifact_id
                ),
            });
        }
        let role = if r.role.trim().is_empty() {
            default_role(artifact.kind).to_owned()
        } else {
            r.role.clone()
        };
        refs.push(ContextRef {
            artifact_id: r.artifact_id,
            role: role.clone(),
        });
        inherited.push((artifact.clone(), role));
    }
    Ok((refs, inherited))
}
