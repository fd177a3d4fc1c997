//! The [`Manager`]: creates sessions, runs them in the background, lands
//! their output, settles them, and answers cancel, wait, stop, await and watch.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use korvus_blob::BlobStore;
use korvus_harvest::{persist, PersistConfig, PersistOutcome, PersistRequest, ReportFile};
use korvus_log::{LogHandle, LogHeader, LogId, MemoryLog, TurnLog, Writers};
use korvus_store::{
    Artifact, ArtifactId, ContextRef, Counters, Incident, IncidentId, IncidentStatus, NewReport,
    NewSession, Session, SessionId, SessionKind, SessionStatus, Settlement, Store,
};
use korvus_workspace::{
    default_trees, read_only_prefixes, RestoredFile, ScratchDir, ScratchRoot, Seeder, SkillCatalog,
    WorkspacePath,
};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, info_span, warn, Instrument};

use crate::notify_log::NotifyingIo;
use crate::registry::IncidentRegistry;
use crate::runner::{exit, DocsSearch, InheritedFile, RunContext, RunOutcome, Runner, Tools};
use crate::{Result, SessionError, StreamReopener};

/// A request to create a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSession {
    /// The incident to run in; must exist and be open.
    pub incident_id: IncidentId,
    /// The prompt; must not be blank.
    pub prompt: String,
    /// Inherited artifacts, in the order the run should see them.
    pub context: Vec<ContextRequest>,
}

/// One inherited artifact requested for a new session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextRequest {
    /// The artifact; must belong to the same incident. The nil UUID counts
    /// as an empty id and is refused.
    pub artifact_id: ArtifactId,
    /// Role; blank means "derive from the session kind" ([`default_role`]).
    pub role: String,
}

/// The role given to a context ref requested with a blank role.
pub fn default_role(kind: SessionKind) -> &'static str {
    match kind {
        SessionKind::Initial => "input",
        SessionKind::FollowUp => "prior_output",
    }
}

/// How a run ended, before the manager's own rules are applied.
#[derive(Debug)]
pub enum RunResult {
    /// The runner returned.
    Returned(RunOutcome),
    /// The runner returned an error.
    Failed(crate::RunError),
    /// The run was cancelled; the runner's outcome if it returned in time.
    Cancelled(Option<RunOutcome>),
    /// The run exceeded the run timeout.
    TimedOut,
    /// The runner panicked.
    Panicked,
}

/// The status and exit reason a run result settles with (before the
/// report-related overrides of `land`):
///
/// | run | status | exit reason |
/// |---|---|---|
/// | runner error | `failed` | the error's `exit_reason`, else `runner_failed` |
/// | panicked | `failed` | `panicked` |
/// | timed out | `failed` | `timeout` |
/// | cancelled | `cancelled` | `cancelled` |
/// | returned `awaiting_user` | `running` | `awaiting_user` |
/// | returned anything else | `completed` | as returned |
pub fn status_for(result: &RunResult) -> (SessionStatus, String) {
    match result {
        RunResult::Failed(e) => (
            SessionStatus::Failed,
            e.exit_reason
                .clone()
                .unwrap_or_else(|| exit::RUNNER_FAILED.into()),
        ),
        RunResult::Panicked => (SessionStatus::Failed, exit::PANICKED.into()),
        RunResult::TimedOut => (SessionStatus::Failed, exit::TIMEOUT.into()),
        RunResult::Cancelled(_) => (SessionStatus::Cancelled, exit::CANCELLED.into()),
        RunResult::Returned(o) if o.exit_reason == exit::AWAITING_USER => {
            (SessionStatus::Running, exit::AWAITING_USER.into())
        }
        RunResult::Returned(o) => (SessionStatus::Completed, o.exit_reason.clone()),
    }
}

/// Builds a [`Manager`]. The store and the runner are constructor
/// arguments: a manager without them cannot be expressed.
pub struct ManagerBuilder {
    store: Arc<dyn Store>,
    runner: Arc<dyn Runner>,
    blobs: Option<Arc<dyn BlobStore>>,
    logs: Option<Arc<dyn TurnLog>>,
    scratch_root: Option<ScratchRoot>,
    seeder: Option<Arc<dyn Seeder>>,
    trees: Vec<WorkspacePath>,
    docs: Option<Arc<dyn DocsSearch>>,
    reopener: Option<Arc<dyn StreamReopener>>,
    registry: IncidentRegistry,
    run_timeout: Duration,
    settle_timeout: Duration,
    cancel_grace: Duration,
    persist: PersistConfig,
    archive_on_release: bool,
}

impl fmt::Debug for ManagerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagerBuilder").finish_non_exhaustive()
    }
}

impl ManagerBuilder {
    /// Blob storage for harvested files. Without it, reports land as rows
    /// without bytes (no markdown key) and nothing is harvested.
    pub fn blob_store(mut self, blobs: Arc<dyn BlobStore>) -> Self {
        self.blobs = Some(blobs);
        self
    }

    /// The turn log service. Without it, each manager keeps logs in memory.
    pub fn turn_log(mut self, logs: Arc<dyn TurnLog>) -> Self {
        self.logs = Some(logs);
        self
    }

    /// Where scratch dirs are made. Without it, runs get no workspace (no
    /// seeding, no context files, no harvest). A supplied root is never
    /// removed; an owned one ([`ScratchRoot::create_owned`]) is removed by
    /// [`Manager::stop`].
    pub fn scratch_root(mut self, root: ScratchRoot) -> Self {
        self.scratch_root = Some(root);
        self
    }

    /// Seeds read-only trees into scratch dirs; `trees` are the trees it is
    /// configured with (the read-only deny list is derived from them).
    pub fn seeder(mut self, seeder: Arc<dyn Seeder>, trees: Vec<WorkspacePath>) -> Self {
        self.seeder = Some(seeder);
        self.trees = trees;
        self
    }

    /// Documentation search handed to runs of pinned sessions.
    pub fn docs_search(mut self, docs: Arc<dyn DocsSearch>) -> Self {
        self.docs = Some(docs);
        self
    }

    /// Lifts an external stream's finished latch on reopen.
    pub fn stream_reopener(mut self, reopener: Arc<dyn StreamReopener>) -> Self {
        self.reopener = Some(reopener);
        self
    }

    /// Share a registry (e.g. with an admin endpoint). Defaults to a fresh one.
    pub fn registry(mut self, registry: IncidentRegistry) -> Self {
        self.registry = registry;
        self
    }

    /// Upper bound of one run; zero (the default) leaves it to the runner.
    pub fn run_timeout(mut self, timeout: Duration) -> Self {
        self.run_timeout = timeout;
        self
    }

    /// Bound of the final status write, retries included (default 30 s).
    pub fn settle_timeout(mut self, timeout: Duration) -> Self {
        self.settle_timeout = timeout;
        self
    }

    /// How long a cancelled runner may take to return before it is dropped
    /// (default 10 s).
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
        self
    }

    /// Limits of the persist phase (cap, size limit, concurrency, timeout).
    pub fn persist_config(mut self, config: PersistConfig) -> Self {
        self.persist = config;
        self
    }

    /// Store every scratch dir as one `workspace.tar.gz` before removing it.
    pub fn archive_on_release(mut self, archive: bool) -> Self {
        self.archive_on_release = archive;
        self
    }

    /// Builds the manager.
    pub fn build(self) -> Manager {
        let (runs, _) = watch::channel(0usize);
        let scratch = self.scratch_root.as_ref().map(|r| r.path().to_path_buf());
        Manager {
            inner: Arc::new(Inner {
                store: self.store,
                runner: self.runner,
                blobs: self.blobs,
                logs: self.logs.unwrap_or_else(|| Arc::new(MemoryLog::new())),
                writers: Writers::new(),
                scratch,
                owned_root: Mutex::new(self.scratch_root.filter(|r| r.is_owned())),
                seeder: self.seeder,
                read_only: read_only_prefixes(&self.trees),
                docs: self.docs,
                reopener: self.reopener,
                registry: self.registry,
                run_timeout: self.run_timeout,
                settle_timeout: self.settle_timeout,
                cancel_grace: self.cancel_grace,
                persist: self.persist,
                archive_on_release: self.archive_on_release,
                shutting_down: AtomicBool::new(false),
                stop_started: AtomicBool::new(false),
                runs,
                signals: Mutex::new(HashMap::new()),
                notifies: Mutex::new(HashMap::new()),
            }),
        }
    }
}

/// Runs agent sessions and never loses what they produce.
///
/// Cheap to clone (an `Arc` inside); every clone is the same manager.
///
/// # Cancellation
///
/// A run's cancellation is its registry entry — [`Manager::cancel`] or
/// [`Manager::stop`] — never the caller's request: dropping the future of
/// `create` after it returned does not stop the run. Persist, report and
/// settle run detached from the run's cancellation, so a cancelled run's
/// files are still stored and its row still settles.
#[derive(Clone)]
pub struct Manager {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for Manager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Manager")
            .field("runs", &*self.inner.runs.borrow())
            .field(
                "shutting_down",
                &self.inner.shutting_down.load(Ordering::SeqCst),
            )
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pub(crate) store: Arc<dyn Store>,
    runner: Arc<dyn Runner>,
    pub(crate) blobs: Option<Arc<dyn BlobStore>>,
    pub(crate) logs: Arc<dyn TurnLog>,
    writers: Writers,
    scratch: Option<PathBuf>,
    owned_root: Mutex<Option<ScratchRoot>>,
    seeder: Option<Arc<dyn Seeder>>,
    pub(crate) read_only: Vec<WorkspacePath>,
    docs: Option<Arc<dyn DocsSearch>>,
    pub(crate) reopener: Option<Arc<dyn StreamReopener>>,
    pub(crate) registry: IncidentRegistry,
    run_timeout: Duration,
    settle_timeout: Duration,
    cancel_grace: Duration,
    persist: PersistConfig,
    archive_on_release: bool,
    pub(crate) shutting_down: AtomicBool,
    stop_started: AtomicBool,
    /// Creates in flight plus runs not yet released: the run group.
    runs: watch::Sender<usize>,
    /// Fired (set to `true`) after a run's settle and deregistration.
    pub(crate) signals: Mutex<HashMap<SessionId, watch::Sender<bool>>>,
    /// Woken on every append to a live run's log (for `watch`).
    pub(crate) notifies: Mutex<HashMap<SessionId, Arc<Notify>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Each guarded map is changed by single calls; a poisoned one is consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Membership in the run group: `wait` and `stop` wait until every guard
/// is dropped. Taken when a create or reopen starts, released last in a run.
pub(crate) struct RunGuard {
    runs: watch::Sender<usize>,
}

impl RunGuard {
    pub(crate) fn new(inner: &Inner) -> Self {
        inner.runs.send_modify(|n| *n += 1);
        Self {
            runs: inner.runs.clone(),
        }
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        self.runs.send_modify(|n| *n -= 1);
    }
}

/// What the second iteration of a reopened session needs, read before the
/// store's transition.
#[derive(Debug)]
pub(crate) struct Resume {
    pub(crate) message: String,
    pub(crate) own: Vec<Artifact>,
}

/// Everything one iteration needs.
pub(crate) struct Plan {
    pub(crate) session: Session,
    pub(crate) incident: Incident,
    pub(crate) inherited: Vec<(Artifact, String)>,
    pub(crate) revision: u32,
    pub(crate) resume: Option<Resume>,
}

impl Manager {
    /// Starts building a manager from the two things it cannot work without.
    pub fn builder(store: Arc<dyn Store>, runner: Arc<dyn Runner>) -> ManagerBuilder {
        ManagerBuilder {
            store,
            runner,
            blobs: None,
            logs: None,
            scratch_root: None,
            seeder: None,
            trees: default_trees(),
            docs: None,
            reopener: None,
            registry: IncidentRegistry::new(),
            run_timeout: Duration::ZERO,
            settle_timeout: Duration::from_secs(30),
            cancel_grace: Duration::from_secs(10),
            persist: PersistConfig::default(),
            archive_on_release: false,
        }
    }

    /// The store this manager writes to.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The turn log service this manager writes to.
    pub fn turn_log(&self) -> &Arc<dyn TurnLog> {
        &self.inner.logs
    }

    /// The blob store, if configured.
    pub fn blob_store(&self) -> Option<&Arc<dyn BlobStore>> {
        self.inner.blobs.as_ref()
    }

    /// The registry of local runs.
    pub fn registry(&self) -> &IncidentRegistry {
        &self.inner.registry
    }

    /// Creates a session and starts its run in the background; returns the
    /// `running` row at once.
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
        let inner = &self.inner;
        // Join the run group before looking at the flag: either `stop` sees
        // this create in flight and waits for it, or this create sees `stop`.
        let guard = RunGuard::new(inner);
        if inner.shutting_down.load(Ordering::SeqCst) {
            return Err(SessionError::ShuttingDown);
        }
        if request.prompt.trim().is_empty() {
            return Err(SessionError::PromptRequired);
        }
        let incident = inner.store.get_incident(request.incident_id).await?;
        if incident.status == IncidentStatus::Closed {
            return Err(SessionError::IncidentClosed {
                incident: incident.id,
            });
        }
        let kind = if inner.store.list_sessions(incident.id).await?.is_empty() {
            SessionKind::Initial
        } else {
            SessionKind::FollowUp
        };
        let (refs, inherited) =
            resolve_refs(&*inner.store, &incident, kind, &request.context).await?;
        let id = SessionId::new();
        let span = info_span!("session", session_id = %id, incident_id = %incident.id);
        // From the row insert on, the work runs on its own task: dropping the
        // caller's future must not leave a running row without its run.
        let this = self.clone();
        let work = async move {
            let inner = &this.inner;
            let session = inner
                .store
                .create_session(NewSession {
                    id,
                    incident_id: incident.id,
                    kind,
                    prompt: request.prompt,
                    workspace_ref: incident.workspace.clone(),
                })
                .await?;
            if !refs.is_empty() {
                if let Err(e) = inner.store.insert_context_refs(id, &refs).await {
                    error!(error = %e, "context refs not inserted; settling the session failed");
                    inner
                        .settle(id, failed(exit::CONTEXT_REFS_FAILED, Counters::default()))
                        .await;
                    return Err(e.into());
                }
            }
            let header = LogHeader::new(LogId::from_uuid(id.as_uuid()))
                .with_label("incident_id", incident.id.to_string())
                .with_label("session_id", id.to_string());
            let log = match inner.logs.create(header).await {
                Ok(log) => log,
                Err(e) => {
                    error!(error = %e, "turn log not created; settling the session failed");
                    inner
                        .settle(id, failed(exit::TURN_LOG_FAILED, Counters::default()))
                        .await;
                    return Err(e.into());
                }
            };
            info!(seq = session.seq, kind = %kind, "session created");
            let plan = Plan {
                revision: session.revision,
                session: session.clone(),
                incident,
                inherited,
                resume: None,
            };
            this.launch(plan, log, guard);
            Ok(session)
        }
        .instrument(span);
        join_detached(work).await
    }

    /// The one place background work starts. Registers the run (its
    /// cancellation is the registry entry), then spawns the supervisor that
    /// runs, lands, settles, deregisters, fires the settle signal and
    /// releases the run group — in that order.
    pub(crate) fn launch(&self, plan: Plan, log: LogHandle, guard: RunGuard) {
        let inner = Arc::clone(&self.inner);
        let id = plan.session.id;
        let token = CancellationToken::new();
        let (signal, _) = watch::channel(false);
        lock(&inner.signals).insert(id, signal);
        lock(&inner.notifies).insert(id, Arc::new(Notify::new()));
        let cancel = token.clone();
        if let Err(e) = inner.registry.register(
            id,
            plan.session.incident_id,
            Arc::new(move || cancel.cancel()),
        ) {
            // Only possible when the embedder shares a registry and
            // registered this id itself; the run still goes on and settles.
            warn!(session_id = %id, error = %e, "session already registered");
        }
        // Re-check after registering: `stop` sets the flag before cancelling
        // the registry, so either it saw this entry or this sees the flag.
        if inner.shutting_down.load(Ordering::SeqCst) {
            token.cancel();
        }
        let span = info_span!("run", session_id = %id, incident_id = %plan.session.incident_id, revision = plan.revision);
        // Owned by the run group: `wait`/`stop` join it through `guard`.
        tokio::spawn(supervise(inner, plan, log, token, guard).instrument(span));
    }

    /// Cancels a session.
    ///
    /// The row decides: a terminal row is `AlreadyEnded`. A running row
    /// whose run is in this process is cancelled (the run settles
    /// `cancelled` shortly); a running row this process does not run belongs
    /// to another replica — a warning is logged and the row is returned
    /// unchanged.
    ///
    /// # Errors
    /// `AlreadyEnded`, `NotFound`, `Store`.
    pub async fn cancel(&self, id: SessionId) -> Result<Session> {
        let row = self.inner.store.get_session(id).await?;
        if row.status.is_terminal() {
            return Err(SessionError::AlreadyEnded { session: id });
        }
        if !self.inner.registry.cancel(id) {
            warn!(session_id = %id, "cancel: session is running but not in this process; left unchanged");
        }
        Ok(row)
    }

    /// Waits until every run of this process has settled and released.
    /// Cancels nothing.
    pub async fn wait(&self) {
        let mut rx = self.inner.runs.subscribe();
        // The sender lives in `inner`, which `self` keeps alive.
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    /// Shuts down: refuses new creates and reopens, cancels every run of
    /// this process, and waits until each has settled. Safe to call
    /// repeatedly and from many tasks at once; only the first call cancels.
    /// An owned scratch root is removed after the last run released it.
    pub async fn stop(&self) {
        let inner = &self.inner;
        inner.shutting_down.store(true, Ordering::SeqCst);
        let first = !inner.stop_started.swap(true, Ordering::SeqCst);
        if first {
            let n = inner.registry.cancel_all();
            info!(runs = n, "stop: cancelled every local run");
        }
        self.wait().await;
        if first {
            let root = lock(&inner.owned_root).take();
            if let Some(root) = root {
                if let Err(e) = root.release().await {
                    warn!(error = %e, "owned scratch root not removed");
                }
            }
        }
    }

    /// Resolves after the session's run in this process settled (or at
    /// `deadline`), then returns the row as stored. For a session not running
    /// here it returns the row at once.
    ///
    /// # Errors
    /// `NotFound`, `Store`.
    pub async fn await_settled(&self, id: SessionId, deadline: Duration) -> Result<Session> {
        let rx = lock(&self.inner.signals).get(&id).map(|s| s.subscribe());
        if let Some(mut rx) = rx {
            let _ = tokio::time::timeout(deadline, rx.wait_for(|done| *done)).await;
        }
        Ok(self.inner.store.get_session(id).await?)
    }
}

/// Runs `work` on its own task and waits for it: the caller may go away,
/// the work finishes anyway. A panic in it is passed on to the caller.
pub(crate) async fn join_detached<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    match tokio::spawn(work).await {
        Ok(value) => value,
        Err(join) => std::panic::resume_unwind(join.into_panic()),
    }
}

fn failed(reason: &str, counters: Counters) -> Settlement {
    Settlement {
        status: SessionStatus::Failed,
        exit_reason: Some(reason.to_owned()),
        counters,
    }
}

/// Checks requested context refs against the store before any row exists.
async fn resolve_refs(
    store: &dyn Store,
    incident: &Incident,
    kind: SessionKind,
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
        let role = if r.role.trim().is_empty() {
            default_role(kind).to_owned()
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

/// The supervisor of one run: everything after it returns happens here, in
/// the order ARCHITECTURE §8 fixes.
async fn supervise(
    inner: Arc<Inner>,
    plan: Plan,
    log: LogHandle,
    token: CancellationToken,
    guard: RunGuard,
) {
    let id = plan.session.id;
    let work = tokio::spawn(iterate(Arc::clone(&inner), plan, log, token).in_current_span());
    let settlement = match work.await {
        Ok(settlement) => settlement,
        Err(join) => {
            error!(error = %join, "run panicked outside the runner; settling failed");
            failed(exit::PANICKED, Counters::default())
        }
    };
    // 1. The terminal write (detached, bounded, panic-guarded).
    inner.settle(id, settlement).await;
    // 2. Deregister.
    inner.registry.unregister(id);
    // 3. Fire the settle signal: a watcher released now reads the final row.
    let signal = lock(&inner.signals).remove(&id);
    if let Some(signal) = signal {
        signal.send_replace(true);
    }
    let notify = lock(&inner.notifies).remove(&id);
    if let Some(notify) = notify {
        notify.notify_waiters();
    }
    // 4. Release the run group.
    drop(guard);
}

/// The scratch dir of one iteration and what was put into it.
struct Prepared {
    dir: Option<ScratchDir>,
    inherited: Vec<InheritedFile>,
    skills: SkillCatalog,
    restored: BTreeMap<WorkspacePath, RestoredFile>,
}

impl Inner {
    /// Writes the session's outcome: the last write of every path. Runs on
    /// its own tasks (detached from any cancellation), retries with backoff,
    /// and gives up — loudly — after `settle_timeout`.
    pub(crate) async fn settle(&self, id: SessionId, settlement: Settlement) -> bool {
        let deadline = tokio::time::Instant::now() + self.settle_timeout;
        let mut delay = Duration::from_millis(25);
        loop {
            let store = Arc::clone(&self.store);
            let s = settlement.clone();
            let attempt = tokio::spawn(async move { store.settle_session(id, s).await });
            let abort = attempt.abort_handle();
            match tokio::time::timeout_at(deadline, attempt).await {
                Ok(Ok(Ok(row))) => {
                    info!(status = %row.status, exit_reason = ?row.exit_reason, "session settled");
                    return true;
                }
                Ok(Ok(Err(e))) => warn!(error = %e, "settle failed; retrying"),
                Ok(Err(join)) => warn!(error = %join, "settle panicked; retrying"),
                Err(_) => {
                    abort.abort();
                    error!(session_id = %id, "settle gave up after {:?}; the row may stay running", self.settle_timeout);
                    return false;
                }
            }
            if tokio::time::Instant::now() + delay >= deadline {
                error!(session_id = %id, "settle gave up after {:?}; the row may stay running", self.settle_timeout);
                return false;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }

    async fn prepare(&self, plan: &Plan) -> std::result::Result<Prepared, String> {
        let mut prepared = Prepared {
            dir: None,
            inherited: plan
                .inherited
                .iter()
                .map(|(a, role)| InheritedFile {
                    artifact: a.clone(),
                    role: role.clone(),
                    path: None,
                })
                .collect(),
            skills: SkillCatalog::default(),
            restored: BTreeMap::new(),
        };
        let Some(root) = &self.scratch else {
            info!("no scratch root configured; running without a workspace");
            return Ok(prepared);
        };
        let dir = korvus_workspace::create(root, plan.session.id)
            .await
            .map_err(|e| format!("scratch dir not created: {e}"))?;
        let seeding = match &self.seeder {
            Some(seeder) => Some(seeder.seed(&dir, plan.session.workspace_ref.as_ref()).await),
            None => None,
        };
        match &seeding {
            Some(Ok(korvus_workspace::SeedOutcome::Skipped(reason))) => {
                info!(%reason, "seeding skipped")
            }
            Some(Ok(_)) => info!("workspace seeded"),
            Some(Err(e)) => {
                warn!(error = %e, "seeding failed; the session runs without seeded trees or skills")
            }
            None => info!("no seeder configured; seeding skipped"),
        }
        prepared.skills = match &seeding {
            Some(result) => SkillCatalog::after_seeding(dir.path(), result.as_ref())
                .await
                .unwrap_or_else(|e| {
                    warn!(error = %e, "skills not loaded");
                    SkillCatalog::default()
                }),
            None => SkillCatalog::default(),
        };
        if let Some(blobs) = &self.blobs {
            let artifacts: Vec<Artifact> = plan.inherited.iter().map(|(a, _)| a.clone()).collect();
            match korvus_workspace::materialize_context(
                &dir,
                plan.session.incident_id,
                &artifacts,
                &**blobs,
            )
            .await
            {
                Ok(outcome) => {
                    for f in &outcome.failed {
                        warn!(failure = ?f, "context file left out");
                    }
                    for written in outcome.written {
                        if let Some(i) = prepared
                            .inherited
                            .iter_mut()
                            .find(|i| i.artifact.id == written.artifact)
                        {
                            i.path = Some(written.path);
                        }
                    }
                }
                Err(e) => warn!(error = %e, "context not materialised"),
            }
            if let Some(resume) = &plan.resume {
                let outcome = korvus_workspace::restore_own_output(
                    &dir,
                    &resume.own,
                    &self.read_only,
                    &**blobs,
                )
                .await;
                for f in &outcome.failed {
                    warn!(failure = ?f, "own output not restored");
                }
                for r in &outcome.refused {
                    warn!(refused = ?r, "own output refused");
                }
                prepared.restored = outcome.restored;
            }
        }
        prepared.dir = Some(dir);
        Ok(prepared)
    }

    async fn run_runner(
        &self,
        ctx: RunContext,
        resume: Option<String>,
        token: &CancellationToken,
    ) -> RunResult {
        if token.is_cancelled() {
            return RunResult::Cancelled(None);
        }
        let runner = Arc::clone(&self.runner);
        let run_token = ctx.cancel.clone();
        let mut task = tokio::spawn(
            async move {
                match resume {
                    Some(message) => runner.resume(ctx, message).await,
                    None => runner.run(ctx).await,
                }
            }
            .in_current_span(),
        );
        let timeout = async {
            if self.run_timeout.is_zero() {
                std::future::pending::<()>().await
            } else {
                tokio::time::sleep(self.run_timeout).await
            }
        };
        let joined = |r: std::result::Result<
            std::result::Result<RunOutcome, crate::RunError>,
            tokio::task::JoinError,
        >| match r {
            Ok(Ok(o)) => RunResult::Returned(o),
            Ok(Err(e)) => {
                warn!(error = %e, "runner failed");
                RunResult::Failed(e)
            }
            Err(e) => {
                error!(error = %e, "runner panicked");
                RunResult::Panicked
            }
        };
        tokio::select! {
            r = &mut task => joined(r),
            _ = token.cancelled() => {
                run_token.cancel();
                match tokio::time::timeout(self.cancel_grace, &mut task).await {
                    Ok(Ok(Ok(o))) => RunResult::Cancelled(Some(o)),
                    Ok(_) => RunResult::Cancelled(None),
                    Err(_) => {
                        warn!("runner ignored cancellation past the grace period; aborted");
                        abort_and_join(task).await;
                        RunResult::Cancelled(None)
                    }
                }
            }
            _ = timeout => {
                warn!(timeout = ?self.run_timeout, "run timed out");
                run_token.cancel();
                if tokio::time::timeout(self.cancel_grace, &mut task).await.is_err() {
                    abort_and_join(task).await;
                }
                RunResult::TimedOut
            }
        }
    }
}

/// Aborts a runner task and waits (briefly) until it is gone, so it no
/// longer holds the log or the scratch dir when the run lands. A runner
/// blocking a thread cannot be aborted; that is logged.
async fn abort_and_join<T>(mut task: tokio::task::JoinHandle<T>) {
    task.abort();
    if tokio::time::timeout(Duration::from_secs(2), &mut task)
        .await
        .is_err()
    {
        error!("aborted runner did not stop within 2 s (blocking a thread?)");
    }
}

/// One iteration: prepare, run, land. Returns the settlement for the
/// supervisor to write.
async fn iterate(
    inner: Arc<Inner>,
    plan: Plan,
    log: LogHandle,
    token: CancellationToken,
) -> Settlement {
    let id = plan.session.id;
    let notify = lock(&inner.notifies).get(&id).cloned().unwrap_or_default();
    let log = match wrap_log(&inner.writers, log, notify) {
        Ok(log) => Arc::new(log),
        Err(e) => {
            error!(error = %e, "turn log not usable");
            return failed(exit::TURN_LOG_FAILED, Counters::default());
        }
    };
    // Preparing (seeding, context, restore) and pinning docs obey the run's
    // cancellation too: a hanging seeder must not keep `stop` waiting.
    let prepared = tokio::select! {
        prepared = inner.prepare(&plan) => prepared,
        _ = token.cancelled() => {
            info!("cancelled while preparing the workspace; `reap` removes what is left");
            let _ = log.close().await;
            return Settlement {
                status: SessionStatus::Cancelled,
                exit_reason: Some(exit::CANCELLED.into()),
                counters: Counters::default(),
            };
        }
    };
    let prepared = match prepared {
        Ok(p) => p,
        Err(e) => {
            error!(error = %e, "workspace not prepared");
            let _ = log.close().await;
            return failed(exit::WORKSPACE_FAILED, Counters::default());
        }
    };
    let lease = match (&inner.docs, &plan.session.workspace_ref) {
        (Some(docs), Some(pin)) => tokio::select! {
            pinned = docs.pin(pin) => match pinned {
                Ok(lease) => Some(lease),
                Err(e) => {
                    warn!(error = %e, "docs search not available for this run");
                    None
                }
            },
            _ = token.cancelled() => None,
        },
        _ => None,
    };
    let ctx = RunContext {
        session: plan.session.clone(),
        incident: plan.incident.clone(),
        inherited: prepared.inherited.clone(),
        workspace_ref: plan.session.workspace_ref.clone(),
        scratch: prepared.dir.as_ref().map(|d| d.path().to_path_buf()),
        tools: Tools {
            docs: lease.as_ref().map(|l| Arc::clone(&l.client)),
        },
        skills: prepared.skills.clone(),
        log: Arc::clone(&log),
        revision: plan.revision,
        cancel: token.child_token(),
    };
    let resume = plan.resume.as_ref().map(|r| r.message.clone());
    let result = inner.run_runner(ctx, resume, &token).await;
    let settlement = land(&inner, &plan, &prepared, result).await;
    // Clean-up runs on its own task: a panic in it (an archive, a docs
    // release) must not replace the outcome the report row already carries.
    let cleanup = {
        let inner = Arc::clone(&inner);
        let (session, incident, revision) =
            (plan.session.id, plan.session.incident_id, plan.revision);
        async move {
            if let Some(lease) = lease {
                lease.release.await;
            }
            release(&inner, incident, session, revision, prepared.dir).await;
        }
    };
    if let Err(e) = tokio::spawn(cleanup.in_current_span()).await {
        error!(error = %e, "workspace clean-up panicked; `reap` removes what is left");
    }
    if let Err(e) = log.close().await {
        warn!(error = %e, "turn log close failed");
    }
    settlement
}

fn wrap_log(
    writers: &Writers,
    log: LogHandle,
    notify: Arc<Notify>,
) -> korvus_log::Result<LogHandle> {
    let header = log.header().clone();
    let claim = writers.claim(header.id)?;
    Ok(LogHandle::writer(
        header,
        Arc::new(NotifyingIo::new(log, notify)),
        claim,
    ))
}

/// Persist phase → report row; returns the settlement. The manager's own
/// exit reasons replace the runner's only when the run itself ended
/// normally (a cancelled run stays cancelled, a failed one keeps its reason).
async fn land(inner: &Inner, plan: &Plan, prepared: &Prepared, result: RunResult) -> Settlement {
    let (mut status, mut exit_reason) = status_for(&result);
    let (counters, author_finished) = match &result {
        RunResult::Returned(o) | RunResult::Cancelled(Some(o)) => (o.counters, o.author_finished),
        _ => (Counters::default(), false),
    };
    let ended_normally = matches!(&result, RunResult::Returned(_)) && status.is_terminal();

    let outcome: PersistOutcome = persist(
        Arc::clone(&inner.store),
        inner.blobs.clone(),
        &inner.persist,
        PersistRequest {
            incident: plan.session.incident_id,
            session: plan.session.id,
            revision: plan.revision,
            scratch: prepared.dir.as_ref().map(|d| d.path().to_path_buf()),
            skip_prefixes: inner.read_only.clone(),
            restored: prepared.restored.clone(),
        },
    )
    .await;
    if !outcome.attempted {
        info!(reason = ?outcome.reason, "persist phase skipped");
    } else {
        info!(%outcome, "persist phase done");
        if let Some(text) = outcome.error_text() {
            warn!(errors = %text, "persist phase degraded");
        }
    }

    // Which document this revision adopts.
    let markdown = match (&outcome.report, author_finished) {
        // A restored earlier report is adopted only when this iteration's
        // author phase finished.
        (ReportFile::Unchanged { .. }, false) => None,
        (ReportFile::Stored { .. }, false) if ended_normally => None,
        (report, _) => report.markdown().map(|(k, b)| (k.to_owned(), b)),
    };
    if ended_normally {
        if !author_finished {
            status = SessionStatus::Failed;
            exit_reason = exit::REPORT_AUTHOR_FAILED.into();
        } else if matches!(outcome.report, ReportFile::Failed { .. }) {
            status = SessionStatus::Failed;
            exit_reason = exit::REPORT_UPLOAD_FAILED.into();
        }
    }
    let report = NewReport {
        session_id: plan.session.id,
        incident_id: plan.session.incident_id,
        revision: plan.revision,
        markdown_key: markdown.as_ref().map(|(k, _)| k.clone()),
        markdown_bytes: markdown.as_ref().map_or(0, |(_, b)| *b),
        exit_reason: exit_reason.clone(),
        counters,
    };
    if let Err(e) = inner.store.create_report(report).await {
        error!(error = %e, "report row not written");
        if ended_normally {
            status = SessionStatus::Failed;
            exit_reason = exit::REPORT_PERSIST_FAILED.into();
        }
    }
    Settlement {
        status,
        exit_reason: Some(exit_reason),
        counters,
    }
}

/// Unpins docs, optionally archives the scratch dir, and removes it.
async fn release(
    inner: &Inner,
    incident: IncidentId,
    session: SessionId,
    revision: u32,
    dir: Option<ScratchDir>,
) {
    let Some(dir) = dir else { return };
    if inner.archive_on_release {
        if let Some(blobs) = &inner.blobs {
            match korvus_workspace::archive(dir.path()).await {
                Ok(archive) => {
                    if let Err(e) = korvus_workspace::store_archive(
                        &*inner.store,
                        &**blobs,
                        incident,
                        session,
                        revision,
                        &archive,
                    )
                    .await
                    {
                        warn!(error = %e, "workspace archive not stored");
                    }
                }
                Err(e) => warn!(error = %e, "workspace not archived"),
            }
        }
    }
    if let Err(e) = dir.release().await {
        warn!(error = %e, "scratch dir not removed; `reap` will");
    }
}
