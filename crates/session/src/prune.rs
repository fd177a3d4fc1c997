//! Retention: [`prune`] deletes finished sessions older than a cut-off —
//! rows, then turn log, then blobs.
//!
//! The order is what makes it safe:
//! - **Rows first**, in one conditional step
//!   ([`Store::delete_session`]): only while the session is still terminal
//!   at the fence the walk saw, so a reopen racing the prune either wins
//!   (the session is kept whole) or finds no session (`NotFound`). After
//!   the rows are gone nothing can reopen, read or inherit the session.
//! - **Then the turn log**, which nothing reads without its row.
//! - **Then the blobs** under the session's prefix, a page at a time.
//!   A crash before this step leaves bytes no row references, which
//!   `korvus sweep` removes.
//!
//! A crash between the rows and the log leaves a log with no session; a
//! later prune finds such logs (labelled with a session id, the id older
//! than the cut-off, no row) and deletes them.

use std::time::SystemTime;

use futures::{stream, StreamExt as _};
use tracing::{info, warn};

use korvus_blob::{session_prefix, BlobKey, BlobStore};
use korvus_log::{LogError, LogId, TurnLog};
use korvus_store::{Incident, Page, Session, SessionId, Store, StoreError, MAX_PAGE_SIZE};

/// Sessions pruned at once.
pub const PRUNE_CONCURRENCY: usize = 8;

/// Blob keys listed (and deleted) per page.
const BLOB_PAGE: usize = 1000;

/// Failures a [`PruneReport`] lists one by one; the rest are counted.
pub const MAX_REPORTED_FAILURES: usize = 100;

/// What to prune.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PruneConfig {
    /// Sessions that ended before this are pruned.
    pub finished_before: SystemTime,
    /// Delete (`false`: a dry run that counts what would go, and its bytes).
    pub apply: bool,
}

impl PruneConfig {
    /// Sessions that ended before `finished_before`; `apply` false only
    /// counts them (a dry run).
    pub fn new(finished_before: SystemTime, apply: bool) -> Self {
        Self {
            finished_before,
            apply,
        }
    }
}

/// What a prune found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PruneReport {
    /// Whether anything was deleted (`false`: a dry run).
    pub applied: bool,
    /// Sessions looked at.
    pub examined: u64,
    /// Finished sessions older than the cut-off: deleted, or (dry run)
    /// to delete.
    pub pruned: u64,
    /// Bytes of their blobs: deleted, or (dry run) to delete.
    pub pruned_bytes: u64,
    /// Their blobs, counted the same way.
    pub pruned_blobs: u64,
    /// Finished sessions that ended after the cut-off: kept.
    pub recent: u64,
    /// Running sessions (a run in progress): skipped.
    pub active: u64,
    /// Queued sessions (waiting for a slot): skipped.
    pub queued: u64,
    /// Sessions waiting for the user: skipped.
    pub waiting: u64,
    /// Sessions a racing reopen (or another prune) got first: kept, or
    /// already gone.
    pub raced: u64,
    /// Sessions kept because a session that is kept inherited one of
    /// their artifacts as context.
    pub inherited: u64,
    /// Turn logs of sessions that no longer exist (a prune cut short
    /// between rows and log): deleted, or (dry run) to delete.
    pub orphan_logs: u64,
    /// Logs and blobs whose delete failed, each with its cause (the
    /// first [`MAX_REPORTED_FAILURES`]); their rows are gone, so the
    /// sweeper (blobs) or a later prune (logs) removes them.
    pub failures: Vec<(String, String)>,
    /// All such failures.
    pub failure_count: u64,
}

impl PruneReport {
    fn fail(&mut self, what: String, cause: impl ToString) {
        warn!(what = %what, cause = %cause.to_string(), "prune: not deleted");
        self.failure_count += 1;
        if self.failures.len() < MAX_REPORTED_FAILURES {
            self.failures.push((what, cause.to_string()));
        }
    }
}

/// Why a prune stopped. Sessions handled before it stay deleted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PruneError {
    /// Reading or deleting rows failed.
    #[error("prune stopped: the store failed")]
    Store(#[from] StoreError),
    /// Listing the blobs of a session failed.
    #[error("prune stopped: listing the blobs of session {session} failed")]
    Blobs {
        /// The session.
        session: SessionId,
        /// The cause.
        #[source]
        source: korvus_blob::BlobError,
    },
    /// Listing the turn logs failed.
    #[error("prune stopped: listing the turn logs failed")]
    Logs(#[source] LogError),
}

/// The three seams a prune deletes from.
#[derive(Clone, Copy)]
pub struct PruneTargets<'a> {
    /// Rows.
    pub store: &'a dyn Store,
    /// Turn logs.
    pub logs: &'a dyn TurnLog,
    /// Bytes.
    pub blobs: &'a dyn BlobStore,
}

impl std::fmt::Debug for PruneTargets<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PruneTargets").finish_non_exhaustive()
    }
}

/// Deletes (or, dry, counts) every finished session that ended before
/// `config.finished_before`, with its turn log and blobs, walking the
/// incidents and their sessions a page at a time; running, queued and
/// waiting sessions are skipped and counted. See the module docs for the
/// order and what a crash leaves.
///
/// # Errors
/// [`PruneError`] when a listing or a row delete fails (sessions pruned
/// before it stay pruned); a failed log or blob delete is counted in the
/// report instead.
///
/// # Cancel safety
/// Not cancel safe, but a dropped prune leaves what a crash leaves (see the
/// module docs): each session's rows go in one step, and a log or blobs left
/// after them are removed by the next prune or by `korvus sweep`.
pub async fn prune(
    targets: PruneTargets<'_>,
    config: &PruneConfig,
) -> Result<PruneReport, PruneError> {
    let mut report = PruneReport {
        applied: config.apply,
        ..PruneReport::default()
    };
    let mut deferred: Vec<Session> = Vec::new();
    let mut page = Page::first(MAX_PAGE_SIZE);
    loop {
        let incidents = targets.store.list_incidents(page).await?;
        for incident in &incidents.items {
            prune_incident(targets, config, incident, &mut report, &mut deferred).await?;
        }
        match incidents.next {
            Some(next) => page = Page::after(next, MAX_PAGE_SIZE),
            None => break,
        }
    }
    retry_inherited(targets, deferred, &mut report).await?;
    orphan_logs(targets, config, &mut report).await?;
    info!(
        pruned = report.pruned,
        bytes = report.pruned_bytes,
        applied = report.applied,
        "prune done"
    );
    Ok(report)
}

async fn prune_incident(
    targets: PruneTargets<'_>,
    config: &PruneConfig,
    incident: &Incident,
    report: &mut PruneReport,
    deferred: &mut Vec<Session>,
) -> Result<(), PruneError> {
    let mut page = Page::first(MAX_PAGE_SIZE);
    loop {
        let sessions = targets.store.list_sessions(incident.id, page).await?;
        let mut due = Vec::new();
        for s in sessions.items {
            report.examined += 1;
            match classify(&s, config.finished_before) {
                Class::Due => due.push(s),
                Class::Recent => report.recent += 1,
                Class::Active => report.active += 1,
                Class::Queued => report.queued += 1,
                Class::Waiting => report.waiting += 1,
            }
        }
        let outcomes: Vec<_> = stream::iter(due)
            .map(|s| prune_one(targets, config.apply, s))
            .buffer_unordered(PRUNE_CONCURRENCY)
            .collect()
            .await;
        for outcome in outcomes {
            outcome?.record(report, deferred);
        }
        match sessions.next {
            Some(next) => page = Page::after(next, MAX_PAGE_SIZE),
            None => return Ok(()),
        }
    }
}

enum Class {
    Due,
    Recent,
    Active,
    Queued,
    Waiting,
}

fn classify(s: &Session, finished_before: SystemTime) -> Class {
    if s.status.is_terminal() {
        match s.ended_at {
            Some(ended) if SystemTime::from(ended) < finished_before => Class::Due,
            _ => Class::Recent,
        }
    } else if s.is_idle() {
        Class::Waiting
    } else if s.is_queued() {
        Class::Queued
    } else {
        Class::Active
    }
}

/// What became of one session due for pruning.
enum Outcome {
    Pruned(Deleted),
    Raced,
    Inherited(Box<Session>),
}

/// What a pruned session's log and blobs came to.
#[derive(Default)]
struct Deleted {
    blobs: u64,
    bytes: u64,
    failures: Vec<(String, String)>,
}

impl Outcome {
    fn record(self, report: &mut PruneReport, deferred: &mut Vec<Session>) {
        match self {
            Outcome::Pruned(d) => {
                report.pruned += 1;
                report.pruned_blobs += d.blobs;
                report.pruned_bytes += d.bytes;
                for (what, cause) in d.failures {
                    report.fail(what, cause);
                }
            }
            Outcome::Raced => report.raced += 1,
            Outcome::Inherited(s) => deferred.push(*s),
        }
    }
}

/// Rows, then log, then blobs of one session (dry: only the blobs
/// counted).
async fn prune_one(
    targets: PruneTargets<'_>,
    apply: bool,
    s: Session,
) -> Result<Outcome, PruneError> {
    if apply {
        match targets.store.delete_session(s.id, s.fence).await {
            Ok(()) => {}
            Err(
                StoreError::Fenced { .. }
                | StoreError::NotFinished { .. }
                | StoreError::NotFound { .. },
            ) => return Ok(Outcome::Raced),
            Err(StoreError::Constraint { .. }) => return Ok(Outcome::Inherited(Box::new(s))),
            Err(e) => return Err(e.into()),
        }
    }
    let mut deleted = Deleted::default();
    if apply {
        if let Err(e) = delete_log(targets.logs, LogId::from_uuid(s.id.as_uuid())).await {
            deleted
                .failures
                .push((format!("log of session {}", s.id), e.to_string()));
        }
    }
    blobs_of(targets.blobs, &s, apply, &mut deleted).await?;
    Ok(Outcome::Pruned(deleted))
}

/// How often, and how far apart, a log still held by a writer is tried
/// again: the writer of a run that just settled, or of a reopen that is
/// about to find the session gone, lets go within moments.
const LOG_HELD_TRIES: u32 = 40;
const LOG_HELD_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

async fn delete_log(logs: &dyn TurnLog, id: LogId) -> Result<(), LogError> {
    let mut tries = 1;
    loop {
        match logs.delete(id).await {
            Err(LogError::AlreadyOwned { .. }) if tries < LOG_HELD_TRIES => {
                tries += 1;
                tokio::time::sleep(LOG_HELD_PAUSE).await;
            }
            done => return done,
        }
    }
}

/// Walks the blobs under the session's prefix a page at a time, counting
/// them and (`apply`) deleting each page.
async fn blobs_of(
    blobs: &dyn BlobStore,
    s: &Session,
    apply: bool,
    deleted: &mut Deleted,
) -> Result<(), PruneError> {
    let prefix = session_prefix(s.incident_id.as_uuid(), s.id.as_uuid());
    let mut after: Option<BlobKey> = None;
    loop {
        let page = blobs
            .list_page(Some(&prefix), after.as_ref(), BLOB_PAGE)
            .await
            .map_err(|source| PruneError::Blobs {
                session: s.id,
                source,
            })?;
        let Some(last) = page.last() else {
            return Ok(());
        };
        after = Some(last.key.clone());
        deleted.blobs += page.len() as u64;
        deleted.bytes += page.iter().map(|m| m.size).sum::<u64>();
        if apply {
            let keys: Vec<BlobKey> = page.into_iter().map(|m| m.key).collect();
            for (key, e) in blobs.delete_many(&keys).await {
                deleted
                    .failures
                    .push((format!("blob {key}"), e.to_string()));
            }
        }
    }
}

/// Sessions refused because another session inherited their artifacts:
/// tried again while that frees some (the heir was pruned after them).
async fn retry_inherited(
    targets: PruneTargets<'_>,
    mut deferred: Vec<Session>,
    report: &mut PruneReport,
) -> Result<(), PruneError> {
    loop {
        let before = deferred.len();
        let mut still = Vec::new();
        for s in deferred {
            prune_one(targets, true, s)
                .await?
                .record(report, &mut still);
        }
        deferred = still;
        if deferred.is_empty() || deferred.len() == before {
            report.inherited = deferred.len() as u64;
            return Ok(());
        }
    }
}

/// Turn logs labelled as a session's whose session row is gone and whose
/// id (a UUID v7, minted when the session was created) is older than the
/// cut-off: what a prune cut short between rows and log left.
async fn orphan_logs(
    targets: PruneTargets<'_>,
    config: &PruneConfig,
    report: &mut PruneReport,
) -> Result<(), PruneError> {
    let ids = targets.logs.list().await.map_err(PruneError::Logs)?;
    for id in ids {
        if !minted_before(id, config.finished_before) {
            continue;
        }
        let Ok(stat) = targets.logs.stat(id).await else {
            continue;
        };
        let session = SessionId::from_uuid(id.as_uuid());
        if stat.header.labels.get("session_id") != Some(&session.to_string()) {
            continue;
        }
        match targets.store.get_session(session).await {
            Err(StoreError::NotFound { .. }) => {}
            Ok(_) => continue,
            Err(e) => return Err(e.into()),
        }
        report.orphan_logs += 1;
        if config.apply {
            if let Err(e) = delete_log(targets.logs, id).await {
                report.fail(format!("log of session {session}"), e);
            }
        }
    }
    Ok(())
}

fn minted_before(id: LogId, cutoff: SystemTime) -> bool {
    let Some(ts) = id.as_uuid().get_timestamp() else {
        return false;
    };
    let (secs, nanos) = ts.to_unix();
    SystemTime::UNIX_EPOCH + std::time::Duration::new(secs, nanos) < cutoff
}
