//! Admission: at most `max_running` runs of one manager execute at once;
//! the rest of its creates are queued in the store and claimed as slots
//! free up — by this manager or another of its pool; `stop` leaves them
//! queued; a queued session is cancelled without its runner.

use korvus_store::StoreExt as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use korvus_runner::RunOutcome;
use korvus_store::{exit_reason, Session, SessionStatus, Store};
use tokio::sync::Notify;

use crate::support::{counters, settled, write_files, Env, ScriptRunner};

/// Waits (at most 10 s) until `cond` holds. A create may find its
/// manager's own admission loop probing the queue with the one free slot
/// and be queued; the loop then claims it at once. Tests that need a run
/// to have started wait for it instead of assuming it.
async fn until(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what} did not happen"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A runner that counts how many calls run at once (`now`, `peak`) and
/// how many it got (`calls`), holds each for `hold`, and completes with a
/// report.
#[derive(Clone, Default)]
struct Gauge {
    now: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
}

impl Gauge {
    fn runner(&self, hold: Duration) -> ScriptRunner {
        let g = self.clone();
        ScriptRunner::new(move |ctx, _| {
            let g = g.clone();
            async move {
                g.calls.fetch_add(1, Ordering::SeqCst);
                let now = g.now.fetch_add(1, Ordering::SeqCst) + 1;
                g.peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(hold).await;
                write_files(&ctx, &[("report.md", "# done\n")]);
                g.now.fetch_sub(1, Ordering::SeqCst);
                Ok(RunOutcome::completed(counters()))
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_past_max_running_are_queued_and_all_complete_within_the_cap() {
    let env = Env::new().await;
    let gauge = Gauge::default();
    let manager = env
        .builder(gauge.runner(Duration::from_millis(40)))
        .max_running(4)
        .cancel_poll(Duration::from_millis(50))
        .build();
    let mut sessions = Vec::new();
    for i in 0..40 {
        sessions.push(
            manager
                .create(env.request(&format!("job {i}")))
                .await
                .unwrap(),
        );
    }
    // Every create answered at once: most of them are queued, not waiting.
    let queued = sessions.iter().filter(|s| s.is_queued()).count();
    assert!(queued >= 30, "{queued} of 40 queued at create");
    for s in &sessions {
        let row = settled(&manager, s).await;
        assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
        assert_eq!(env.store.all_reports(s.id).await.unwrap().len(), 1);
    }
    assert_eq!(gauge.calls.load(Ordering::SeqCst), 40);
    let peak = gauge.peak.load(Ordering::SeqCst);
    assert!((1..=4).contains(&peak), "{peak} runners at once, cap 4");
    manager.stop().await;
    env.assert_safe().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_leaves_queued_sessions_for_the_next_manager_of_the_pool() {
    let env = Env::new().await;
    let release = Arc::new(Notify::new());
    let held = {
        let release = Arc::clone(&release);
        ScriptRunner::new(move |ctx, _| {
            let release = Arc::clone(&release);
            async move {
                tokio::select! {
                    () = release.notified() => {}
                    () = ctx.cancel.cancelled() => {}
                }
                write_files(&ctx, &[("report.md", "# held\n")]);
                Ok(RunOutcome::completed(counters()))
            }
        })
    };
    let seen = Arc::clone(&held.seen);
    let first = env
        .builder(held)
        .max_running(1)
        .cancel_poll(Duration::from_millis(50))
        .build();
    let running = first.create(env.request("runs")).await.unwrap();
    until("the first run", || seen.lock().unwrap().len() == 1).await;
    let mut queued = Vec::new();
    for i in 0..100 {
        let s = first
            .create(env.request(&format!("waits {i}")))
            .await
            .unwrap();
        assert!(s.is_queued(), "{s:?}");
        queued.push(s);
    }
    first.stop().await;
    assert_eq!(
        env.store.get_session(running.id).await.unwrap().status,
        SessionStatus::Cancelled
    );
    for s in &queued {
        let row = env.store.get_session(s.id).await.unwrap();
        assert!(row.is_queued(), "stop left it queued: {row:?}");
    }

    // Another pool's manager never claims them; the pool's next one runs
    // them all.
    let other_gauge = Gauge::default();
    let other = env
        .builder(other_gauge.runner(Duration::ZERO))
        .pool("elsewhere")
        .cancel_poll(Duration::from_millis(50))
        .build();
    let gauge = Gauge::default();
    let next = env
        .builder(gauge.runner(Duration::ZERO))
        .cancel_poll(Duration::from_millis(50))
        .build();
    for s in &queued {
        assert_eq!(settled(&next, s).await.status, SessionStatus::Completed);
    }
    assert_eq!(gauge.calls.load(Ordering::SeqCst), 100);
    assert_eq!(other_gauge.calls.load(Ordering::SeqCst), 0, "another pool");
    other.stop().await;
    next.stop().await;
    env.assert_safe().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_session_is_cancelled_with_its_report_and_never_runs() {
    let env = Env::new().await;
    let gauge = Gauge::default();
    let manager = env
        .builder(gauge.runner(Duration::from_secs(2)))
        .max_running(1)
        .cancel_poll(Duration::from_millis(50))
        .build();
    let busy = manager.create(env.request("busy")).await.unwrap();
    let waiting = manager.create(env.request("waiting")).await.unwrap();
    assert!(waiting.is_queued());
    let cancelled = manager.cancel(waiting.id).await.unwrap();
    assert_eq!(cancelled.status, SessionStatus::Cancelled);
    assert_eq!(
        cancelled.exit_reason.as_deref(),
        Some(exit_reason::CANCELLED)
    );
    let reports = env.store.all_reports(waiting.id).await.unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert!(
        reports[0]
            .detail
            .as_deref()
            .is_some_and(|d| d.contains("while queued")),
        "{reports:?}"
    );
    assert_eq!(
        settled(&manager, &busy).await.status,
        SessionStatus::Completed
    );
    // The slot freed: nothing of the cancelled one runs.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(gauge.calls.load(Ordering::SeqCst), 1);
    manager.stop().await;
    env.assert_safe().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_creates_with_the_defaults_run_at_most_64_at_once() {
    let env = Env::new().await;
    let gauge = Gauge::default();
    let manager = env
        .builder(gauge.runner(Duration::from_millis(30)))
        .cancel_poll(Duration::from_millis(50))
        .build();
    let mut sessions = Vec::new();
    for i in 0..300 {
        sessions.push(
            manager
                .create(env.request(&format!("job {i}")))
                .await
                .unwrap(),
        );
    }
    for s in &sessions {
        assert_eq!(settled(&manager, s).await.status, SessionStatus::Completed);
    }
    assert_eq!(gauge.calls.load(Ordering::SeqCst), 300);
    let peak = gauge.peak.load(Ordering::SeqCst);
    assert!(
        peak <= korvus_session::DEFAULT_MAX_RUNNING,
        "{peak} at once"
    );
    manager.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_with_one_idempotency_key_get_one_session() {
    let env = Env::new().await;
    let gauge = Gauge::default();
    let manager = env.builder(gauge.runner(Duration::from_millis(10))).build();
    let keyed = || {
        let mut options = korvus_session::CreateOptions::default();
        options.idempotency_key = Some("deploy-42".into());
        options
    };
    let creates = (0..50).map(|_| manager.create_with(env.request("once"), keyed()));
    let rows = futures::future::join_all(creates).await;
    let first = rows[0].as_ref().unwrap().id;
    for r in &rows {
        assert_eq!(r.as_ref().unwrap().id, first, "{r:?}");
    }
    let all = env.store.all_sessions(env.incident.id).await.unwrap();
    assert_eq!(all.len(), 1, "one row");
    match manager
        .create_with(env.request("another prompt"), keyed())
        .await
    {
        Err(korvus_session::SessionError::IdempotencyConflict { session, .. }) => {
            assert_eq!(session, first);
        }
        other => panic!("expected IdempotencyConflict, got {other:?}"),
    }
    settled(&manager, &all[0]).await;
    assert_eq!(gauge.calls.load(Ordering::SeqCst), 1, "one run");
    manager.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_priority_session_starts_before_those_queued_ahead_of_it() {
    let env = Env::new().await;
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    // The first run holds the only slot until everything is queued.
    let gate = Arc::new(Notify::new());
    let runner = {
        let (order, gate) = (Arc::clone(&order), Arc::clone(&gate));
        ScriptRunner::new(move |ctx, _| {
            let (order, gate) = (Arc::clone(&order), Arc::clone(&gate));
            async move {
                order.lock().unwrap().push(ctx.session.prompt.clone());
                if ctx.session.prompt == "first" {
                    gate.notified().await;
                }
                write_files(&ctx, &[("report.md", "# done\n")]);
                Ok(RunOutcome::completed(counters()))
            }
        })
    };
    let manager = env
        .builder(runner)
        .max_running(1)
        .cancel_poll(Duration::from_millis(50))
        .build();
    let mut sessions = vec![manager.create(env.request("first")).await.unwrap()];
    until("the first run", || order.lock().unwrap().len() == 1).await;
    for i in 0..5 {
        sessions.push(
            manager
                .create(env.request(&format!("normal {i}")))
                .await
                .unwrap(),
        );
    }
    let urgent = {
        let mut v = korvus_session::CreateOptions::default();
        v.priority = korvus_store::Priority::HIGHEST;
        v
    };
    sessions.push(
        manager
            .create_with(env.request("urgent"), urgent)
            .await
            .unwrap(),
    );
    assert!(sessions[1..].iter().all(Session::is_queued));
    gate.notify_one();
    for s in &sessions {
        settled(&manager, s).await;
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order[0], "first");
    assert_eq!(order[1], "urgent", "{order:?}");
    manager.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incident_queued_behind_another_s_burst_starts_among_the_next_two() {
    let env = Env::new().await;
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let runner = {
        let (order, gate) = (Arc::clone(&order), Arc::clone(&gate));
        ScriptRunner::new(move |ctx, _| {
            let (order, gate) = (Arc::clone(&order), Arc::clone(&gate));
            async move {
                // The claim wrote the lease: its expiry orders the claims
                // (runners of one batch start in any order).
                let claimed = ctx.session.lease_expires_at;
                order
                    .lock()
                    .unwrap()
                    .push((claimed, ctx.session.prompt.clone()));
                if ctx.session.prompt.starts_with("held") {
                    gate.acquire().await.unwrap().forget();
                }
                write_files(&ctx, &[("report.md", "# done\n")]);
                Ok(RunOutcome::completed(counters()))
            }
        })
    };
    let manager = env
        .builder(runner)
        .max_running(4)
        .cancel_poll(Duration::from_millis(50))
        .build();
    let other = env
        .store
        .create_incident(korvus_store::NewIncident {
            title: "incident B".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let mut sessions = Vec::new();
    for i in 0..4 {
        sessions.push(
            manager
                .create(env.request(&format!("held {i}")))
                .await
                .unwrap(),
        );
    }
    until("the four held runs", || order.lock().unwrap().len() == 4).await;
    for i in 0..200 {
        sessions.push(
            manager
                .create(env.request(&format!("A {i}")))
                .await
                .unwrap(),
        );
    }
    let mut b = env.request("B");
    b.incident_id = other.id;
    sessions.push(manager.create(b).await.unwrap());
    assert!(sessions[4..].iter().all(Session::is_queued));
    gate.add_permits(4);
    for s in &sessions {
        settled(&manager, s).await;
    }
    let mut order = order.lock().unwrap().clone();
    order.retain(|(_, p)| !p.starts_with("held"));
    order.sort();
    let names: Vec<&str> = order.iter().map(|(_, p)| p.as_str()).collect();
    let b_at = names.iter().position(|p| *p == "B").expect("B ran");
    assert!(b_at < 2, "B was claimed {}th: {:?}", b_at + 1, &names[..6]);
    manager.stop().await;
}

/// A queued row whose creator died before its turn log existed (and
/// perhaps before its context refs) is never run half made: the manager
/// that claims it settles it `owner_lost`, its runner never called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_session_its_creator_left_half_made_is_settled_not_run() {
    let env = Env::new().await;
    let row = env
        .store
        .create_session(korvus_store::NewSession {
            runner: None,
            admission: Default::default(),
            lease: None,
            id: korvus_store::SessionId::new(),
            incident_id: env.incident.id,
            prompt: "no log yet".into(),
            workspace_ref: None,
        })
        .await
        .unwrap();
    assert!(row.is_queued());
    let gauge = Gauge::default();
    let manager = env
        .builder(gauge.runner(Duration::ZERO))
        .cancel_poll(Duration::from_millis(50))
        .build();
    let done = settled(&manager, &row).await;
    assert_eq!(done.status, SessionStatus::Failed, "{done:?}");
    assert_eq!(done.exit_reason.as_deref(), Some("owner_lost"));
    assert_eq!(gauge.calls.load(Ordering::SeqCst), 0, "never run");
    assert_eq!(env.store.all_reports(row.id).await.unwrap().len(), 1);
    manager.stop().await;
    env.assert_safe().await;
}

/// A manager built not to claim (a tool that only cancels or inspects)
/// never runs a queued session, nor does one that stopped claiming; a
/// manager of the pool that claims runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managers_that_do_not_claim_leave_queued_sessions_to_those_that_do() {
    let env = Env::new().await;
    let tool_gauge = Gauge::default();
    let tool = env
        .builder(tool_gauge.runner(Duration::ZERO))
        .claim_queued(false)
        .cancel_poll(Duration::from_millis(20))
        .build();
    let stopped_gauge = Gauge::default();
    let stopped = env
        .builder(stopped_gauge.runner(Duration::ZERO))
        .cancel_poll(Duration::from_millis(20))
        .build();
    stopped.stop_claiming();
    // A create on the tool with every slot free still runs at once.
    let direct = tool.create(env.request("direct")).await.unwrap();
    assert_eq!(
        settled(&tool, &direct).await.status,
        SessionStatus::Completed
    );
    // A session queued for the pool (as a capped create queues it).
    let capped = env
        .builder(Gauge::default().runner(Duration::ZERO))
        .max_running_per_key(1)
        .claim_queued(false)
        .build();
    let queued = capped.create(env.request("queued")).await.unwrap();
    assert!(queued.is_queued(), "{queued:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let row = env.store.get_session(queued.id).await.unwrap();
    assert!(row.is_queued(), "nobody claimed it: {row:?}");
    assert_eq!(
        tool_gauge.calls.load(Ordering::SeqCst),
        1,
        "only its own create"
    );
    assert_eq!(stopped_gauge.calls.load(Ordering::SeqCst), 0);

    let worker_gauge = Gauge::default();
    let worker = env
        .builder(worker_gauge.runner(Duration::ZERO))
        .cancel_poll(Duration::from_millis(20))
        .build();
    assert_eq!(
        settled(&worker, &queued).await.status,
        SessionStatus::Completed
    );
    assert_eq!(worker_gauge.calls.load(Ordering::SeqCst), 1);
    for m in [tool, stopped, capped, worker] {
        m.stop().await;
    }
    env.assert_safe().await;
}

/// Past a bound on a key's queue a create is `QueueFull` for that key and
/// writes nothing; other keys still queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_past_a_keys_queue_bound_is_queue_full_and_writes_nothing() {
    let env = Env::new().await;
    let gauge = Gauge::default();
    let manager = env
        .builder(gauge.runner(Duration::from_secs(30)))
        .max_running(1)
        .max_queued_per_key(2)
        .cancel_poll(Duration::from_millis(50))
        .build();
    let keyed = |key: &str, prompt: &str| {
        let (request, key) = (env.request(prompt), key.to_owned());
        let manager = manager.clone();
        async move {
            manager
                .create_with(request, {
                    let mut v = korvus_session::CreateOptions::default();
                    v.queue_key = Some(key);
                    v
                })
                .await
        }
    };
    keyed("t1", "runs").await.unwrap();
    until("the first run", || gauge.calls.load(Ordering::SeqCst) == 1).await;
    for i in 0..2 {
        let s = keyed("t1", &format!("waits {i}")).await.unwrap();
        assert!(s.is_queued(), "{s:?}");
    }
    let before = env.store.all_sessions(env.incident.id).await.unwrap().len();
    match keyed("t1", "one too many").await {
        Err(korvus_session::SessionError::QueueFull { key, limit, .. }) => {
            assert_eq!((key.as_deref(), limit), (Some("t1"), 2));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        env.store.all_sessions(env.incident.id).await.unwrap().len(),
        before,
        "nothing written"
    );
    assert!(keyed("t2", "another tenant").await.unwrap().is_queued());
    manager.stop().await;
}

/// A reopen while every slot is taken is queued with its message in the
/// log; the manager that claims it resumes it with that message and lands
/// the next revision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopen_with_no_free_slot_is_queued_and_resumed_with_its_message() {
    let env = Env::new().await;
    let release = Arc::new(Notify::new());
    let runner = {
        let release = Arc::clone(&release);
        ScriptRunner::new(move |ctx, _| {
            let release = Arc::clone(&release);
            async move {
                if ctx.session.prompt == "hold" {
                    release.notified().await;
                }
                write_files(&ctx, &[("report.md", "# done\n")]);
                Ok(RunOutcome::completed(counters()))
            }
        })
    };
    let seen = Arc::clone(&runner.seen);
    let manager = env
        .builder(runner)
        .max_running(1)
        .cancel_poll(Duration::from_millis(50))
        .build();
    let first = manager.create(env.request("first")).await.unwrap();
    assert_eq!(
        settled(&manager, &first).await.status,
        SessionStatus::Completed
    );
    let hold = manager.create(env.request("hold")).await.unwrap();
    until("the holder runs", || seen.lock().unwrap().len() == 2).await;

    let reopened = manager.reopen(first.id, "second message").await.unwrap();
    assert!(reopened.is_queued(), "{reopened:?}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(seen.lock().unwrap().len(), 2, "it waits for the slot");

    release.notify_one();
    let row = settled(&manager, &reopened).await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    assert_eq!(row.revision, 2);
    let resumed: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(ctx, _)| ctx.session.id == first.id)
        .map(|(ctx, m)| (ctx.revision, m.clone()))
        .collect();
    assert_eq!(resumed, [(1, None), (2, Some("second message".to_owned()))]);
    assert_eq!(env.store.all_reports(first.id).await.unwrap().len(), 2);
    settled(&manager, &hold).await;
    manager.stop().await;
    env.assert_safe().await;
}
