//! A write korvus reports is a write that happened: when the commit of a
//! write fails — SQLite's on a genuinely full filesystem, PostgreSQL's at a
//! deferred constraint — the call answers an error, and the rows stay as
//! they were. Once the fault is gone, the same writes are made.
//!
//! The bug these pin: SQLite commits an autocommit statement only when it
//! is stepped to its end, and a `RETURNING` statement read for its first
//! row was reset before that, so the commit's `SQLITE_FULL` was dropped
//! and a settle that never landed answered `Ok`.

use std::fmt::Debug;
use std::time::Duration;

use korvus_store::{
    exit_reason, ContinueFrom, Coordination, Counters, Incident, Lease, NewReport, OwnerId, Report,
    Session, SessionStatus, Store, StoreError, StoreExt as _,
};
use korvus_store_sql::{migrate, open_sqlite, PgStore, SqliteStore};
use korvus_testkit::store::{incident, new_artifact, new_session, session, settlement_at};
use korvus_testkit::tmpfs::{fill, Tmpfs};

use crate::support::PgDb;

/// The size of the filesystem the SQLite database is put on: room for the
/// migrated database and its write-ahead log, small enough to fill fast.
const TMPFS_BYTES: u64 = 4 * 1024 * 1024;

/// SQLite's `SQLITE_FULL`, as sqlx reports the code.
const SQLITE_FULL: &str = "13";

/// PostgreSQL's `disk_full`, which the deferred trigger raises at commit
/// as a server out of space would.
const PG_DISK_FULL: &str = "53100";

/// The rows the writes below act on, made while the database takes writes:
/// one of each state a write needs.
struct Rows {
    incident: Incident,
    /// Queued: created without a lease, at fence 1.
    queued: Session,
    /// Settled `failed`: what a reopen takes.
    ended: Session,
    /// Settled `running` / `awaiting_user`: what an idle cancel takes.
    idle: Session,
    /// Owned under an expired lease whose owner has no live lease: an
    /// orphan, what a takeover takes.
    orphan: Session,
}

impl Rows {
    async fn make<S: Store>(store: &S) -> Rows {
        let incident = incident(store).await;
        let queued = session(store, &incident).await;
        let ended = session(store, &incident).await;
        let ended = store
            .settle_session(ended.id, settlement_at(SessionStatus::Failed, "x", 1))
            .await
            .expect("settle failed");
        let idle = session(store, &incident).await;
        let idle = store
            .settle_session(
                idle.id,
                settlement_at(SessionStatus::Running, exit_reason::AWAITING_USER, 1),
            )
            .await
            .expect("settle idle");
        let mut orphan = new_session(&incident, "orphaned");
        orphan.lease = Some(lease(Duration::ZERO));
        let orphan = store.create_session(orphan).await.expect("create orphan");
        Rows {
            incident,
            queued,
            ended,
            idle,
            orphan,
        }
    }

    /// Everything the writes could have touched, as it is now.
    async fn now<S: Store + Coordination>(&self, store: &S) -> State {
        let sessions = store
            .all_sessions(self.incident.id)
            .await
            .expect("sessions");
        let mut reports = Vec::new();
        for s in &sessions {
            reports.extend(store.all_reports(s.id).await.expect("reports"));
        }
        State {
            incident: store
                .get_incident(self.incident.id)
                .await
                .expect("incident"),
            sessions,
            reports,
            artifacts: store
                .all_incident_artifacts(self.incident.id)
                .await
                .expect("artifacts"),
            cancel_requests: store.cancel_requests().await.expect("cancel requests"),
        }
    }
}

/// What [`Rows::now`] reads.
#[derive(Debug, PartialEq)]
struct State {
    incident: Incident,
    sessions: Vec<Session>,
    reports: Vec<Report>,
    artifacts: Vec<korvus_store::Artifact>,
    cancel_requests: Vec<(korvus_store::SessionId, u64)>,
}

fn lease(ttl: Duration) -> Lease {
    Lease {
        owner: OwnerId::new(),
        ttl,
    }
}

/// Revision 1's report of `s`'s run.
fn report(s: &Session) -> NewReport {
    NewReport {
        session_id: s.id,
        incident_id: s.incident_id,
        revision: 1,
        markdown_key: Some(format!("faults/{}/report.md", s.id)),
        manifest_key: None,
        markdown_bytes: 42,
        exit_reason: "completed".into(),
        counters: Counters::default(),
        detail: None,
        salvaged_from: None,
        fence: s.fence,
    }
}

/// Asserts that `result` is the failed commit: a transient `Backend` error
/// (a full disk may clear, so callers retry it within their bound) whose
/// database code is `code`.
fn refused<T: Debug>(result: korvus_store::Result<T>, what: &str, code: &str) {
    let e = match result {
        Err(e @ StoreError::Backend { .. }) => e,
        other => panic!("{what}: its commit failed, so the call must fail; got {other:?}"),
    };
    let StoreError::Backend { source, .. } = &e else {
        unreachable!("matched above")
    };
    let found = source
        .downcast_ref::<sqlx::Error>()
        .and_then(|s| s.as_database_error())
        .and_then(|d| d.code())
        .map(|c| c.into_owned());
    assert_eq!(found.as_deref(), Some(code), "{what}: {e:?}");
    assert!(e.is_transient(), "{what}: a full disk may clear: {e:?}");
}

/// Every write korvus makes on these rows, each answering the failed
/// commit `code`, and none of them changing a row.
async fn every_write_is_refused<S: Store + Coordination>(store: &S, rows: &Rows, code: &str) {
    let before = rows.now(store).await;
    let (q, completed) = (&rows.queued, SessionStatus::Completed);
    let settled = settlement_at(completed, "completed", q.fence);
    refused(
        store.settle_session(q.id, settled.clone()).await,
        "settle_session",
        code,
    );
    refused(store.create_report(report(q)).await, "create_report", code);
    let artifacts = vec![new_artifact(q, "report.md", 1)];
    refused(
        store.create_artifacts(artifacts).await,
        "create_artifacts",
        code,
    );
    let follow_up = new_session(&rows.incident, "follow up");
    refused(
        store.create_session(follow_up).await,
        "create_session",
        code,
    );
    refused(
        store.close_incident(rows.incident.id).await,
        "close_incident",
        code,
    );
    let reopen = store.continue_session(rows.ended.id, ContinueFrom::Terminal, None);
    refused(reopen.await, "continue_session (reopen)", code);
    let resume = store.continue_session(rows.idle.id, ContinueFrom::Idle, None);
    refused(resume.await, "continue_session (resume)", code);
    refused(
        store.cancel_idle_session(rows.idle.id).await,
        "cancel_idle_session",
        code,
    );
    refused(store.request_cancel(q.id).await, "request_cancel", code);
    refused(
        store.mark_started(q.id, q.fence).await,
        "mark_started",
        code,
    );
    refused(store.release(q.id, q.fence).await, "release", code);
    let live = lease(Duration::from_secs(600));
    let pool = q.admission.pool.as_str();
    refused(store.claim_next(pool, None, live).await, "claim_next", code);
    // The orphan is the key's one run in progress: a cap of two leaves room.
    refused(
        store.claim_next(pool, Some(2), live).await,
        "claim_next (capped)",
        code,
    );
    let (orphan, fence) = (rows.orphan.id, rows.orphan.fence);
    refused(
        store.take_over(orphan, fence, live).await,
        "take_over",
        code,
    );
    let with_report = store.settle_with_report(q.id, settled, report(q));
    refused(with_report.await, "settle_with_report", code);
    let forced = store.force_cancel(q.id, q.fence, "operator".into());
    refused(forced.await, "force_cancel", code);
    let (ended, fence) = (rows.ended.id, rows.ended.fence);
    refused(
        store.delete_session(ended, fence).await,
        "delete_session",
        code,
    );
    refused(store.heartbeat(live, &[]).await, "heartbeat", code);
    assert_eq!(
        rows.now(store).await,
        before,
        "a refused write changed rows"
    );
}

/// With the fault gone, the three writes of a run's end land and read back.
async fn the_writes_are_made<S: Store>(store: &S, rows: &Rows) {
    let q = &rows.queued;
    let settlement = settlement_at(SessionStatus::Completed, "completed", q.fence);
    let report = report(q);
    let stored = store.create_report(report.clone()).await.expect("report");
    let artifacts = vec![new_artifact(q, "report.md", 1)];
    let made = store.create_artifacts(artifacts).await.expect("artifacts");
    let settled = store
        .settle_session(q.id, settlement.clone())
        .await
        .expect("settle");
    assert!(settled.holds(&settlement), "{settled:?}");
    assert_eq!(store.get_session(q.id).await.unwrap(), settled);
    assert_eq!(store.get_report(q.id, 1).await.unwrap(), stored);
    assert_eq!(store.all_session_artifacts(q.id).await.unwrap(), made);
}

/// SQLite on a filesystem with no byte left: the database and its
/// write-ahead log exist, the log was emptied into the database (so the
/// next commit must grow it), and every write's commit fails with
/// `SQLITE_FULL`.
#[tokio::test]
async fn sqlite_on_a_full_filesystem_reports_no_write_it_did_not_make() {
    // Declared first, so it is unmounted last, after the pool let go.
    let tmpfs = Tmpfs::mount(TMPFS_BYTES);
    let pool = open_sqlite(&tmpfs.path().join("korvus.db"))
        .await
        .expect("open sqlite");
    migrate(&pool).await.expect("migrate sqlite");
    let store = SqliteStore::new(pool.clone());
    let rows = Rows::make(&store).await;
    // An emptied log file (TRUNCATE) has no page a commit could reuse:
    // its frames need new space, and there is none.
    let (busy, _, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
        .fetch_one(&pool)
        .await
        .expect("checkpoint");
    assert_eq!(busy, 0, "the checkpoint was blocked by a reader");
    let filler = fill(tmpfs.path(), TMPFS_BYTES);

    every_write_is_refused(&store, &rows, SQLITE_FULL).await;

    std::fs::remove_file(&filler).expect("remove the filler");
    the_writes_are_made(&store, &rows).await;
    pool.close().await;
}

/// A deferred constraint trigger, on each table the writes touch, that
/// raises `disk_full` when the transaction commits.
const REFUSE_AT_COMMIT: [&str; 6] = [
    "CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ \
     BEGIN RAISE EXCEPTION 'the test refuses this commit' USING ERRCODE = 'disk_full'; END $$",
    "CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT OR UPDATE OR DELETE ON sessions \
     DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()",
    "CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT OR UPDATE ON incidents \
     DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()",
    "CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON reports \
     DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()",
    "CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT ON artifacts \
     DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()",
    "CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER INSERT OR UPDATE ON owners \
     DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_at_commit()",
];

/// PostgreSQL whose commits fail: each statement runs, and its transaction
/// is refused only when it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_commit_refused_at_a_deferred_constraint_is_an_error() {
    let Some(db) = PgDb::create().await else {
        return;
    };
    let store = PgStore::new(db.pool().clone());
    let rows = Rows::make(&store).await;
    for statement in REFUSE_AT_COMMIT {
        sqlx::query(statement)
            .execute(db.pool())
            .await
            .expect("create the refusing trigger");
    }

    every_write_is_refused(&store, &rows, PG_DISK_FULL).await;

    sqlx::query("DROP FUNCTION refuse_at_commit() CASCADE")
        .execute(db.pool())
        .await
        .expect("drop the refusing triggers");
    the_writes_are_made(&store, &rows).await;
    drop(store);
    db.drop_db().await;
}
