//! The orphan-blob sweeper: bytes no row references (a failed row batch, a
//! persist cut short, a superseded run's late upload) are found and, once
//! old enough, deleted.
//!
//! The order is what makes it safe: keys are **listed first** and the
//! references **read second**, so a row written while the listing ran is
//! seen; a key no row references is deleted only when it is older than the
//! grace period (which outlasts any persist still on its way to writing
//! its rows) and no live run may still write a row for its session.

use korvus_store::StoreExt as _;
use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use chrono::Utc;
use serde::Serialize;
use tracing::{info, warn};
use uuid::Uuid;

use korvus_blob::{BlobError, BlobKey, BlobMeta, BlobStore};
use korvus_store::{Session, SessionId, SessionStatus, Store, StoreError};

/// The default grace period: 24 hours.
pub const DEFAULT_SWEEP_GRACE: Duration = Duration::from_secs(24 * 60 * 60);

/// The default allowance for clock skew between this host and the blob
/// store's clock (S3 stamps objects with the server's): 5 minutes.
pub const DEFAULT_CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// Keys listed per page, and most orphans deleted per batch: the
/// sweeper's memory is bounded by a page whatever the store holds.
pub const SWEEP_PAGE: usize = 1000;

/// Orphans (and failed deletes) a [`SweepReport`] lists one by one; the
/// rest are counted.
pub const MAX_REPORTED: usize = 1000;

/// How a sweep judges keys.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepConfig {
    /// An unreferenced key younger than this is kept: its rows may still
    /// be on their way.
    pub grace: Duration,
    /// The longest a persist phase may run
    /// ([`PersistConfig::timeout`](crate::PersistConfig::timeout)); the
    /// grace may not be shorter than this plus `clock_skew`.
    pub persist_timeout: Duration,
    /// How far the blob store's clock may be from this host's.
    pub clock_skew: Duration,
    /// Delete the orphans (`false`: a dry run that only reports them).
    pub apply: bool,
}

impl Default for SweepConfig {
    fn default() -> Self {
        Self {
            grace: DEFAULT_SWEEP_GRACE,
            persist_timeout: crate::PersistConfig::default().timeout,
            clock_skew: DEFAULT_CLOCK_SKEW,
            apply: false,
        }
    }
}

/// Why a sweep did not run or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SweepError {
    /// The grace period is shorter than the persist timeout plus the clock
    /// skew: a persist still writing its rows could lose its bytes.
    #[error(
        "grace period {grace:?} is shorter than the persist timeout plus clock skew ({floor:?})"
    )]
    GraceTooShort {
        /// The configured grace.
        grace: Duration,
        /// The least grace allowed.
        floor: Duration,
    },
    /// Listing a page of the blob store failed; orphans of the pages
    /// before it may have been deleted, none after.
    #[error("listing the blob store failed")]
    List(#[source] BlobError),
    /// Reading a session's rows failed; orphans of the pages before it
    /// may have been deleted, none of its page or after.
    #[error("reading the rows of session {session} failed")]
    Store {
        /// The session.
        session: SessionId,
        /// The store's error.
        #[source]
        source: StoreError,
    },
}

/// What a sweep found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SweepReport {
    /// Keys listed under `incidents/`.
    pub listed: u64,
    /// Kept: a report, artifact or manifest row references them.
    pub referenced: u64,
    /// Kept: unreferenced but younger than the grace period (or of unknown
    /// age).
    pub young: u64,
    /// Kept: unreferenced, but their session's run is live and may still
    /// write the rows.
    pub live: u64,
    /// Kept: not in korvus's key layout (`incidents/<id>/sessions/<id>/…`);
    /// the sweeper never touches them.
    pub foreign: u64,
    /// The orphans: unreferenced, older than the grace period, no live
    /// run. Deleted when the sweep applied, else what it would delete.
    pub orphan_count: u64,
    /// The first [`MAX_REPORTED`] orphans, in key order.
    pub orphans: Vec<Orphan>,
    /// Bytes of all the orphans.
    pub orphan_bytes: u64,
    /// Orphans whose delete failed (kept; the next sweep retries them).
    pub failed_count: u64,
    /// The first [`MAX_REPORTED`] failed deletes, with the cause.
    pub failed: Vec<(String, String)>,
    /// Whether the orphans were deleted.
    pub applied: bool,
    /// Pages listed (`list_page` calls of [`SWEEP_PAGE`] keys; the last,
    /// empty one included).
    pub pages: u64,
    /// Batch deletes made (`delete_many` calls, one per page with orphans).
    pub delete_batches: u64,
}

/// One unreferenced, old key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Orphan {
    /// The key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its age when judged, in whole seconds.
    pub age_secs: u64,
}

/// Walks every key under `incidents/` a page at a time; after listing a
/// page, reads the rows of each session with keys in it and deletes (with
/// `config.apply`, one batch per page) the keys no row references that
/// are older than `config.grace` and whose session has no live run; `now`
/// is this host's clock.
///
/// # Errors
/// [`SweepError::GraceTooShort`] before anything is read;
/// [`SweepError::List`] or [`SweepError::Store`] stop the sweep, with the
/// orphans of the pages before it deleted. A failed delete is reported in
/// [`SweepReport::failed`], not an error.
///
/// # Cancel safety
/// A dropped sweep may have deleted some orphans and not others; every
/// deleted key was an orphan.
pub async fn sweep(
    store: &dyn Store,
    blobs: &dyn BlobStore,
    config: &SweepConfig,
    now: SystemTime,
) -> Result<SweepReport, SweepError> {
    let floor = config.persist_timeout + config.clock_skew;
    if config.grace < floor {
        return Err(SweepError::GraceTooShort {
            grace: config.grace,
            floor,
        });
    }
    let root = BlobKey::new("incidents").expect("a valid key");
    let mut report = SweepReport {
        applied: config.apply,
        ..SweepReport::default()
    };
    let mut after: Option<BlobKey> = None;
    loop {
        // 1. List first …
        let page = blobs
            .list_page(Some(&root), after.as_ref(), SWEEP_PAGE)
            .await
            .map_err(SweepError::List)?;
        report.pages += 1;
        // Only an empty page ends the walk: a backend whose short page is
        // not its last (it dropped keys it could not name) loses nothing.
        let Some(next) = page.last().map(|m| m.key.clone()) else {
            break;
        };
        if after.as_ref().is_some_and(|a| next <= *a) {
            return Err(SweepError::List(BlobError::backend(
                "sweep",
                "a page of the listing did not move past the previous one",
            )));
        }
        after = Some(next);
        // 2. … then read the references of this page's sessions.
        let orphans = judge_page(store, page, config, now, &mut report).await?;
        if config.apply && !orphans.is_empty() {
            report.delete_batches += 1;
            for (key, e) in blobs.delete_many(&orphans).await {
                warn!(%key, error = %e, "orphan blob not deleted");
                report.failed_count += 1;
                if report.failed.len() < MAX_REPORTED {
                    report
                        .failed
                        .push((key.to_string(), crate::outcome::error_chain(&e)));
                }
            }
        }
    }
    info!(
        listed = report.listed,
        orphans = report.orphan_count,
        orphan_bytes = report.orphan_bytes,
        applied = report.applied,
        pages = report.pages,
        "blob sweep done"
    );
    Ok(report)
}

/// Judges one page of keys, reading each session's rows once (a session
/// whose keys span pages is read again for the next page, after it was
/// listed); counts into `report` and returns the page's orphans.
async fn judge_page(
    store: &dyn Store,
    page: Vec<BlobMeta>,
    config: &SweepConfig,
    now: SystemTime,
    report: &mut SweepReport,
) -> Result<Vec<BlobKey>, SweepError> {
    let mut orphans = Vec::new();
    let mut rows: Option<(SessionId, SessionRows)> = None;
    for meta in page {
        report.listed += 1;
        let Some(session) = session_of(&meta.key) else {
            report.foreign += 1;
            continue;
        };
        if rows.as_ref().is_none_or(|(id, _)| *id != session) {
            rows = Some((session, SessionRows::read(store, session).await?));
        }
        let (_, current) = rows.as_ref().expect("read above");
        match current.judge(&meta, config, now) {
            Verdict::Referenced => report.referenced += 1,
            Verdict::Young => report.young += 1,
            Verdict::Live => report.live += 1,
            Verdict::Orphan(age) => {
                report.orphan_count += 1;
                report.orphan_bytes += meta.size;
                if report.orphans.len() < MAX_REPORTED {
                    report.orphans.push(Orphan {
                        key: meta.key.to_string(),
                        size: meta.size,
                        age_secs: age.as_secs(),
                    });
                }
                orphans.push(meta.key);
            }
        }
    }
    Ok(orphans)
}

/// The session of a key in korvus's layout
/// (`incidents/<uuid>/sessions/<uuid>/…`).
fn session_of(key: &BlobKey) -> Option<SessionId> {
    let mut segments = key.segments();
    let (Some("incidents"), Some(incident), Some("sessions"), Some(session), Some(_)) = (
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
        segments.next(),
    ) else {
        return None;
    };
    Uuid::parse_str(incident).ok()?;
    Uuid::parse_str(session).ok().map(SessionId::from_uuid)
}

/// What the rows of one session say about its keys.
struct SessionRows {
    /// Keys a report, artifact or manifest row references.
    referenced: BTreeSet<String>,
    /// The session row, `None` when there is none (its keys are orphans
    /// once old enough).
    session: Option<Session>,
}

/// What becomes of one key.
enum Verdict {
    Referenced,
    Young,
    Live,
    Orphan(Duration),
}

impl SessionRows {
    /// Reads the session, its reports and its artifacts.
    async fn read(store: &dyn Store, id: SessionId) -> Result<Self, SweepError> {
        let err = |source| SweepError::Store {
            session: id,
            source,
        };
        let session = match store.get_session(id).await {
            Ok(s) => Some(s),
            Err(StoreError::NotFound { .. }) => None,
            Err(e) => return Err(err(e)),
        };
        let mut referenced = BTreeSet::new();
        if session.is_some() {
            for report in store.all_reports(id).await.map_err(err)? {
                referenced.extend(report.markdown_key);
                referenced.extend(report.manifest_key);
            }
            for artifact in store.all_session_artifacts(id).await.map_err(err)? {
                referenced.insert(artifact.blob_key);
            }
        }
        Ok(Self {
            referenced,
            session,
        })
    }

    /// Whether a run of this session may still write rows: it is running
    /// and its lease has not lapsed (a running row without a lease, from
    /// a release before leases, counts as live until it is reaped).
    fn live(&self, config: &SweepConfig) -> bool {
        let Some(s) = &self.session else {
            return false;
        };
        if s.status != SessionStatus::Running {
            return false;
        }
        let skew = chrono::Duration::from_std(config.clock_skew).unwrap_or_default();
        s.lease_expires_at.is_none_or(|at| at + skew > Utc::now())
    }

    fn judge(&self, meta: &BlobMeta, config: &SweepConfig, now: SystemTime) -> Verdict {
        if self.referenced.contains(meta.key.as_str()) {
            return Verdict::Referenced;
        }
        let age = meta
            .last_modified
            .and_then(|t| now.duration_since(t).ok())
            .unwrap_or(Duration::ZERO);
        if age < config.grace {
            return Verdict::Young;
        }
        if self.live(config) {
            return Verdict::Live;
        }
        Verdict::Orphan(age)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keys_in_the_session_layout_have_a_session() {
        let (i, s) = (Uuid::now_v7(), Uuid::now_v7());
        let key = |k: String| BlobKey::new(k).unwrap();
        let inside = key(format!("incidents/{i}/sessions/{s}/artifacts/x/y.txt"));
        assert_eq!(session_of(&inside), Some(SessionId::from_uuid(s)));
        for other in [
            format!("incidents/{i}/sessions/{s}"),
            format!("incidents/{i}/other/{s}/x"),
            format!("incidents/not-a-uuid/sessions/{s}/x"),
            format!("incidents/{i}/sessions/nope/x"),
        ] {
            assert_eq!(session_of(&key(other.clone())), None, "{other}");
        }
    }

    #[test]
    fn a_grace_below_the_floor_is_refused() {
        let config = SweepConfig {
            grace: Duration::from_secs(60),
            ..SweepConfig::default()
        };
        let err = futures::executor::block_on(sweep(
            &korvus_store::MemoryStore::new(),
            &korvus_blob::MemoryBlobStore::new(),
            &config,
            SystemTime::now(),
        ))
        .unwrap_err();
        assert!(matches!(err, SweepError::GraceTooShort { .. }), "{err:?}");
    }
}
