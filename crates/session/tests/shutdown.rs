//! Stopping a Manager: creates racing `stop` leave nothing running (but
//! what is queued — past the slots, or caught before its run started), and
//! `wait` joins runs without cancelling them.

use korvus_store::StoreExt as _;
use std::time::Duration;

use korvus_runner::RunOutcome;
use korvus_session::SessionError;
use korvus_store::{Counters, SessionStatus, Store};

use crate::support::{Env, ScriptRunner};

#[tokio::test]
async fn two_hundred_creates_racing_stop_leave_nothing_running() {
    for round in 0..50 {
        let env = Env::new().await;
        let manager = env
            .builder(ScriptRunner::new(|ctx, _| async move {
                ctx.cancel.cancelled().await;
                Ok(RunOutcome::completed(Counters::default()))
            }))
            .build();
        let creates: Vec<_> = (0..200)
            .map(|i| {
                let m = manager.clone();
                let req = env.request(&format!("p{i}"));
                tokio::spawn(async move { m.create(req).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_micros(50 * (round % 10))).await;
        let stops: Vec<_> = (0..3)
            .map(|_| {
                let m = manager.clone();
                tokio::spawn(async move { m.stop().await })
            })
            .collect();
        for s in stops {
            s.await.unwrap();
        }
        // Every stop has returned: everything this manager started is
        // terminal now; what it queued past its 64 slots, and what the
        // stop caught before its run started, is queued (unowned, never
        // started, nothing written for it) for the next manager of the
        // pool.
        let rows = env.store.all_sessions(env.incident.id).await.unwrap();
        for r in &rows {
            assert!(
                r.status.is_terminal() || r.is_queued(),
                "round {round}: {r:?} left running"
            );
            if r.is_queued() {
                let reports = env.store.all_reports(r.id).await.unwrap();
                assert!(reports.is_empty(), "round {round}: {reports:?}");
            }
        }
        let mut ok = 0;
        for c in creates {
            match c.await.unwrap() {
                Ok(_) => ok += 1,
                Err(SessionError::ShuttingDown) => {}
                Err(e) => panic!("round {round}: unexpected {e:?}"),
            }
        }
        assert_eq!(ok, rows.len(), "round {round}");
    }
}

#[tokio::test]
async fn wait_joins_without_cancelling() {
    let env = Env::new().await;
    let manager = env
        .builder(ScriptRunner::new(|ctx, _| async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(!ctx.cancel.is_cancelled());
            Ok(RunOutcome::completed(Counters::default()))
        }))
        .build();
    let s = manager.create(env.request("go")).await.unwrap();
    manager.wait().await;
    let row = env.store.get_session(s.id).await.unwrap();
    assert_eq!(row.status, SessionStatus::Completed);
    manager.stop().await;
}
