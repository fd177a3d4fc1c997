//! A replica of the release before resumes shares the database with one of
//! this release: a session whose resume is pending must look, to that
//! replica's own statements (kept verbatim in `previous_release/`), neither
//! like an orphan (it would settle it `owner_lost`) nor like a queued row
//! (it would run the revision again from scratch). And on PostgreSQL a
//! release for resume wakes the pool's managers.

use std::time::Duration;

use korvus_store::{Admission, Coordination, Lease, OwnerId, Priority, Session, Store};
use korvus_store_sql::{PgStore, SqliteStore};
use korvus_testkit::store::{incident, new_session};
use uuid::Uuid;

use crate::support::{PgDb, SqliteDb};

/// The statement named `name` in a snapshot file.
fn statement(snapshot: &str, name: &str) -> String {
    let mut lines = snapshot
        .lines()
        .skip_while(|l| !l.starts_with(&format!("-- {name} (")))
        .skip(1);
    let mut out = Vec::new();
    for line in lines.by_ref() {
        if line.trim().is_empty() || line.starts_with("-- ") {
            break;
        }
        out.push(line);
    }
    assert!(!out.is_empty(), "no statement {name}");
    out.join("\n").trim_end_matches(';').to_owned()
}

/// A started run of a pool of its own whose owner died, taken over and
/// released for resume with no backoff.
async fn pending<S: Store + Coordination>(store: &S) -> (Session, String) {
    let (held, pool) = taken_over(store).await;
    let pending = store
        .release_for_resume(held.id, held.fence, Duration::ZERO)
        .await
        .unwrap();
    assert!(pending.is_resume_pending());
    (pending, pool)
}

/// A started run of a pool of its own whose owner died, taken over.
async fn taken_over<S: Store + Coordination>(store: &S) -> (Session, String) {
    let inc = incident(store).await;
    let pool = format!("pool-{}", Uuid::now_v7().simple());
    let mut new = new_session(&inc, "resume me");
    new.admission = Admission {
        pool: pool.clone(),
        priority: Priority::NORMAL,
        queue_key: None,
        idempotency_key: None,
    };
    let s = store.create_session(new).await.unwrap();
    let lease = |ttl| Lease {
        owner: OwnerId::new(),
        ttl,
    };
    let dead = store
        .claim_next(&pool, None, lease(Duration::ZERO))
        .await
        .unwrap()
        .expect("claimed");
    let started = store.mark_started(s.id, dead.fence).await.unwrap();
    let held = store
        .take_over(s.id, started.fence, lease(Duration::from_secs(600)))
        .await
        .unwrap();
    (held, pool)
}

macro_rules! previous_release_case {
    ($store:expr, $pool:expr, $snapshot:literal) => {{
        let store = $store;
        let snapshot = include_str!($snapshot);
        let (row, pool) = pending(&store).await;
        let orphans: Vec<(Uuid, i64)> = sqlx::query_as(&statement(snapshot, "EXPIRED_LEASES"))
            .fetch_all($pool)
            .await
            .unwrap();
        assert!(
            !orphans.iter().any(|(id, _)| *id == row.id.as_uuid()),
            "the previous release sees an orphan"
        );
        let claimed: Option<(Uuid,)> = sqlx::query_as(&format!(
            "{} RETURNING id",
            statement(snapshot, "CLAIM_NEXT")
                .split("RETURNING")
                .next()
                .unwrap()
        ))
        .bind(&pool)
        .bind(Uuid::now_v7())
        .bind(600_000_i64)
        .fetch_optional($pool)
        .await
        .unwrap();
        assert_eq!(
            claimed, None,
            "the previous release claims a pending resume"
        );
        // This release does.
        let now = store.get_session(row.id).await.unwrap();
        assert_eq!(now, row, "untouched");
        let lease = Lease {
            owner: OwnerId::new(),
            ttl: Duration::from_secs(600),
        };
        let resumed = store.claim_next(&pool, None, lease).await.unwrap();
        assert_eq!(resumed.map(|s| s.id), Some(row.id));
    }};
}

#[tokio::test]
async fn postgres_a_pending_resume_is_left_alone_by_the_previous_release() {
    let Some(db) = PgDb::create().await else {
        return;
    };
    previous_release_case!(
        PgStore::new(db.pool().clone()),
        db.pool(),
        "previous_release/postgres.sql"
    );
    db.drop_db().await;
}

#[tokio::test]
async fn sqlite_a_pending_resume_is_left_alone_by_the_previous_release() {
    let db = SqliteDb::create().await;
    previous_release_case!(
        SqliteStore::new(db.pool().clone()),
        db.pool(),
        "previous_release/sqlite.sql"
    );
    db.close().await;
}

/// On PostgreSQL a release for resume wakes the managers of its pool at
/// once (`korvus_queue`), as a queued row does.
#[tokio::test]
async fn postgres_a_release_for_resume_wakes_its_pool() {
    let Some(db) = PgDb::create().await else {
        return;
    };
    let store = PgStore::new(db.pool().clone());
    let signal = store.queue_signal().expect("PostgreSQL pushes");
    let (held, _) = taken_over(&store).await;
    // What the set-up announced (the row queued) is consumed first; the
    // listener connects meanwhile.
    while tokio::time::timeout(Duration::from_millis(700), signal.notified())
        .await
        .is_ok()
    {}
    store
        .release_for_resume(held.id, held.fence, Duration::ZERO)
        .await
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(3), signal.notified())
            .await
            .is_ok(),
        "no notification for the released resume"
    );
    db.drop_db().await;
}
