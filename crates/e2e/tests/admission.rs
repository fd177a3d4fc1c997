//! Admission across replicas on PostgreSQL and SQLite: a session queued by
//! one replica is claimed and run by another of its pool, never by a
//! replica of another pool, and a queued session cancelled from another
//! replica ends `cancelled` with its report row, its runner never called.

use korvus_store::StoreExt as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use korvus_blob::MemoryBlobStore;
use korvus_log::TurnLog;
use korvus_runner::RunOutcome;
use korvus_session::{CreateOptions, CreateSession, Manager};
use korvus_store::{CoordinatedStore, Counters, NewIncident, SessionStatus};
use korvus_store_sql::testing::{PgDb, SqliteDb};
use korvus_store_sql::{PgLog, PgStore, SqliteLog, SqliteStore};

use crate::support::{settled, ScriptRunner};

/// A runner that records the prompts it was called for; `hold` makes it
/// wait for its cancellation.
fn recording(calls: &Arc<Mutex<Vec<String>>>, hold: bool) -> ScriptRunner {
    let calls = Arc::clone(calls);
    ScriptRunner::new(move |ctx, _| {
        let calls = Arc::clone(&calls);
        async move {
            calls.lock().unwrap().push(ctx.session.prompt.clone());
            if hold {
                ctx.cancel.cancelled().await;
            }
            Ok(RunOutcome::completed(Counters::default()))
        }
    })
}

async fn queue_across_replicas(
    store: Arc<dyn CoordinatedStore>,
    logs: impl Fn() -> Arc<dyn TurnLog>,
) {
    let replica = |runner: ScriptRunner, pool: &str, max: usize| {
        Manager::builder(Arc::clone(&store), Arc::new(runner))
            .blob_store(Arc::new(MemoryBlobStore::new()))
            .turn_log(logs())
            .pool(pool)
            .max_running(max)
            .cancel_poll(Duration::from_millis(50))
            .build()
    };
    let (a_calls, b_calls, c_calls) = (Arc::default(), Arc::default(), Arc::default());
    let a = replica(recording(&a_calls, true), "default", 1);
    let b = replica(recording(&b_calls, false), "other", 4);
    let incident = store
        .create_incident(NewIncident {
            title: "admission".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let request = |prompt: &str| CreateSession::new(incident.id, prompt);
    let held = a.create(request("held")).await.unwrap();
    // Running on A before anything else happens (a create can meet A's
    // own claim probe and be queued for a moment; A then claims it).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while a_calls.lock().unwrap().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "A did not start its run"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut queued = Vec::new();
    for i in 0..3 {
        let s = a.create(request(&format!("queued {i}"))).await.unwrap();
        assert!(s.is_queued(), "{s:?}");
        queued.push(s);
    }

    // Cancelled from a replica that does not run it: at once, with its
    // report row, its runner never called.
    let cancelled = b.cancel(queued[0].id).await.unwrap();
    assert_eq!(cancelled.status, SessionStatus::Cancelled);
    let reports = store.all_reports(queued[0].id).await.unwrap();
    assert_eq!(reports.len(), 1);
    assert!(reports[0]
        .detail
        .as_deref()
        .unwrap_or("")
        .contains("while queued"));

    // A replica of the pool with free slots claims and runs the rest.
    let c = replica(recording(&c_calls, false), "default", 2);
    for s in &queued[1..] {
        assert_eq!(settled(&c, s).await.status, SessionStatus::Completed);
    }
    // Both start at once on c (two slots): in either order.
    let mut ran = c_calls.lock().unwrap().clone();
    ran.sort();
    assert_eq!(ran, ["queued 1", "queued 2"]);
    assert_eq!(*a_calls.lock().unwrap(), ["held"]);
    assert!(
        b_calls.lock().unwrap().is_empty(),
        "another pool never claims"
    );
    a.stop().await;
    assert_eq!(
        store.get_session(held.id).await.unwrap().status,
        SessionStatus::Cancelled
    );
    b.stop().await;
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_queued_on_one_replica_runs_on_another_postgres() {
    let Some(db) = PgDb::create().await else {
        return;
    };
    let pool = db.pool().clone();
    queue_across_replicas(Arc::new(PgStore::new(pool.clone())), || {
        Arc::new(PgLog::new(pool.clone()))
    })
    .await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_queued_on_one_replica_runs_on_another_sqlite() {
    let db = SqliteDb::create().await;
    let pool = db.pool().clone();
    queue_across_replicas(Arc::new(SqliteStore::new(pool.clone())), || {
        Arc::new(SqliteLog::new(pool.clone()))
    })
    .await;
    db.close().await;
}

/// Two replicas of four slots each, a per-key cap of 2: 24 sessions of two
/// tenants (queue keys), created on both replicas alternately. Sampled
/// from the rows every 10 ms, no tenant ever has more than 2 runs in
/// progress, and every session completes once.
async fn per_key_cap_across_replicas(
    store: Arc<dyn CoordinatedStore>,
    logs: impl Fn() -> Arc<dyn TurnLog>,
) {
    let calls: Arc<Mutex<Vec<String>>> = Arc::default();
    let replica = || {
        let calls = Arc::clone(&calls);
        let runner = ScriptRunner::new(move |ctx, _| {
            let calls = Arc::clone(&calls);
            async move {
                calls.lock().unwrap().push(ctx.session.prompt.clone());
                tokio::time::sleep(Duration::from_millis(60)).await;
                Ok(RunOutcome::completed(Counters::default()))
            }
        });
        Manager::builder(Arc::clone(&store), Arc::new(runner))
            .blob_store(Arc::new(MemoryBlobStore::new()))
            .turn_log(logs())
            .max_running(4)
            .max_running_per_key(2)
            .cancel_poll(Duration::from_millis(30))
            .build()
    };
    let (a, b) = (replica(), replica());
    let incident = store
        .create_incident(NewIncident {
            title: "tenants".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let mut created = Vec::new();
    for i in 0..24 {
        let tenant = if i % 2 == 0 { "t1" } else { "t2" };
        let on = if i % 4 < 2 { &a } else { &b };
        let s = on
            .create_with(
                CreateSession::new(incident.id, format!("{tenant} job {i}")),
                {
                    let mut v = CreateOptions::default();
                    v.queue_key = Some(tenant.into());
                    v
                },
            )
            .await
            .unwrap();
        created.push(s);
    }
    let mut peak = std::collections::HashMap::<String, usize>::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let rows = store.all_sessions(incident.id).await.unwrap();
        let mut now = std::collections::HashMap::<String, usize>::new();
        for s in rows.iter().filter(|s| s.is_active() && s.owner.is_some()) {
            *now.entry(s.admission.queue_key.clone().unwrap_or_default())
                .or_default() += 1;
        }
        for (k, n) in now {
            let p = peak.entry(k).or_default();
            *p = (*p).max(n);
        }
        if rows.iter().all(|s| s.status.is_terminal()) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not all ended");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        peak.values().all(|&n| n <= 2),
        "a tenant over its cap: {peak:?}"
    );
    assert_eq!(peak.get("t1"), Some(&2), "the cap was reached: {peak:?}");
    for s in &created {
        let row = store.get_session(s.id).await.unwrap();
        assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    }
    let mut ran = calls.lock().unwrap().clone();
    ran.sort();
    ran.dedup();
    assert_eq!(ran.len(), 24, "each ran once");
    assert_eq!(calls.lock().unwrap().len(), 24);
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_cap_holds_across_two_replicas_postgres() {
    let Some(db) = PgDb::create().await else {
        return;
    };
    let pool = db.pool().clone();
    per_key_cap_across_replicas(Arc::new(PgStore::new(pool.clone())), || {
        Arc::new(PgLog::new(pool.clone()))
    })
    .await;
    db.drop_db().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_key_cap_holds_across_two_replicas_sqlite() {
    let db = SqliteDb::create().await;
    let pool = db.pool().clone();
    per_key_cap_across_replicas(Arc::new(SqliteStore::new(pool.clone())), || {
        Arc::new(SqliteLog::new(pool.clone()))
    })
    .await;
    db.close().await;
}

/// On PostgreSQL a queued session wakes the pool's managers through
/// NOTIFY: a manager whose poll period is a minute claims it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_session_wakes_a_replica_through_notify_postgres() {
    let Some(db) = PgDb::create().await else {
        return;
    };
    let pool = db.pool().clone();
    let store: Arc<dyn CoordinatedStore> = Arc::new(PgStore::new(pool.clone()));
    let calls: Arc<Mutex<Vec<String>>> = Arc::default();
    let worker = Manager::builder(Arc::clone(&store), Arc::new(recording(&calls, false)))
        .blob_store(Arc::new(MemoryBlobStore::new()))
        .turn_log(Arc::new(PgLog::new(pool.clone())))
        .cancel_poll(Duration::from_secs(60))
        .build();
    // Queues every create (a per-key cap) and claims nothing itself.
    let creator = Manager::builder(Arc::clone(&store), Arc::new(recording(&calls, false)))
        .blob_store(Arc::new(MemoryBlobStore::new()))
        .turn_log(Arc::new(PgLog::new(pool.clone())))
        .max_running_per_key(1)
        .claim_queued(false)
        .build();
    let incident = store
        .create_incident(NewIncident {
            title: "notify".into(),
            workspace: None,
        })
        .await
        .unwrap();
    // Past the worker's first poll, and its listener connected.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = std::time::Instant::now();
    let s = creator
        .create(CreateSession::new(incident.id, "pushed"))
        .await
        .unwrap();
    assert!(s.is_queued(), "{s:?}");
    while !store.get_session(s.id).await.unwrap().status.is_terminal() {
        assert!(asked.elapsed() < Duration::from_secs(30), "never claimed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = asked.elapsed();
    assert_eq!(settled(&worker, &s).await.status, SessionStatus::Completed);
    assert!(
        took < Duration::from_secs(5),
        "ended {took:?} after the create: the poll period is 60 s"
    );
    assert_eq!(*calls.lock().unwrap(), ["pushed"]);
    creator.stop().await;
    worker.stop().await;
    db.drop_db().await;
}
