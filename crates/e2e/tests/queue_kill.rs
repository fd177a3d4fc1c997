//! The queue across replica processes on PostgreSQL, with one SIGKILLed:
//! two replicas (children of this test binary) with four run slots each
//! share 200 sessions whose agents are real processes. One replica
//! creates them all — most are queued at once — and prepares slowly (its
//! seeder takes 1.5 s), so when it is killed most of its claims have not
//! started yet. Counted from the rows and the turn logs, never from the
//! replicas' own reports:
//!
//! - sampled every 50 ms, never more than 8 sessions started and not
//!   settled;
//! - every session ends with exactly one report row, and no agent ran
//!   twice for one session (its log holds the agent's line at most once);
//! - each claim of the killed replica that had not started goes back to
//!   the queue within ttl + period (plus the survivor's poll) and
//!   completes on the survivor; only the runs it had started end
//!   `owner_lost`.

use korvus_store::StoreExt as _;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use korvus_blob::FsBlobStore;
use korvus_command::CommandRunner;
use korvus_log::{Access, LogId, TurnLog};
use korvus_session::{CreateSession, Manager};
use korvus_store::{
    CoordinatedStore, IncidentId, NewIncident, SessionId, SessionStatus, Store, WorkspaceRef,
};
use korvus_store_sql::testing::PgDb;
use korvus_store_sql::{PgLog, PgStore};
use korvus_workspace::ScratchRoot;

/// Set in a child process: what the replica works on.
const REPLICA: &str = "KORVUS_E2E_QUEUE_REPLICA";
const SESSIONS: usize = 200;
const SLOTS: usize = 4;
const TTL: Duration = Duration::from_secs(2);
const HEARTBEAT: Duration = Duration::from_millis(500);
const POLL: Duration = Duration::from_millis(200);
/// The line every agent prints once per run.
const AGENT_LINE: &str = "agent-ran-once";

/// A replica's configuration, as one environment value:
/// `db;scratch;blobs;incident;seed_ms;creates`.
struct Config {
    db: String,
    scratch: PathBuf,
    blobs: PathBuf,
    incident: IncidentId,
    seed_ms: u64,
    creates: usize,
}

impl Config {
    fn encode(&self) -> String {
        format!(
            "{};{};{};{};{};{}",
            self.db,
            self.scratch.display(),
            self.blobs.display(),
            self.incident,
            self.seed_ms,
            self.creates
        )
    }

    fn decode(text: &str) -> Self {
        let f: Vec<&str> = text.split(';').collect();
        Self {
            db: f[0].to_owned(),
            scratch: f[1].into(),
            blobs: f[2].into(),
            incident: f[3].parse().expect("incident id"),
            seed_ms: f[4].parse().expect("seed ms"),
            creates: f[5].parse().expect("creates"),
        }
    }
}

/// A seeder that only takes its time: the window between a claim and its
/// start.
#[derive(Debug)]
struct Slow(Duration);

#[async_trait::async_trait]
impl korvus_workspace::Seeder for Slow {
    async fn seed<'a>(
        &self,
        _: &korvus_workspace::ScratchDir,
        _: Option<&'a WorkspaceRef>,
    ) -> korvus_workspace::Result<korvus_workspace::SeedOutcome> {
        tokio::time::sleep(self.0).await;
        Ok(korvus_workspace::SeedOutcome::Skipped(
            korvus_workspace::SeedSkipReason::NotPinned,
        ))
    }
}

/// The entry point of a replica process: only does something in a child
/// started by the test (with `REPLICA` set). Prints its owner id, creates
/// its sessions, then stays alive — claiming, renewing its lease and
/// reaping orphans — until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_process() {
    let Ok(config) = std::env::var(REPLICA) else {
        return;
    };
    let config = Config::decode(&config);
    let pool = PgDb::connect(&config.db, 4).await.expect("database");
    let store: Arc<dyn CoordinatedStore> = Arc::new(PgStore::new(pool.clone()));
    let logs: Arc<dyn TurnLog> = Arc::new(PgLog::new(pool));
    let blobs = Arc::new(FsBlobStore::open(&config.blobs).expect("blob dir"));
    let script = format!("echo {AGENT_LINE}; echo '# queued' > report.md; sleep 0.1");
    let runner = CommandRunner::new("sh").args(["-c", script.as_str()]);
    let manager = Manager::builder(store, Arc::new(runner))
        .blob_store(blobs)
        .turn_log(logs)
        .scratch_root(ScratchRoot::supplied(&config.scratch))
        .seeder(
            Arc::new(Slow(Duration::from_millis(config.seed_ms))),
            korvus_workspace::default_trees(),
        )
        .max_running(SLOTS)
        .lease(TTL, HEARTBEAT)
        .cancel_poll(POLL)
        // Killed runs are settled (`owner_lost`), not resumed: the
        // invariants below count them.
        .resume_orphans(0, Duration::ZERO)
        .build();
    println!("owner {}", manager.owner());
    for i in 0..config.creates {
        manager
            .create(CreateSession::new(config.incident, format!("job {i}")))
            .await
            .expect("create");
    }
    println!("created");
    std::future::pending::<()>().await;
}

/// A replica process; killed when dropped.
struct Replica {
    child: Child,
    owner: String,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a replica and reads its owner id (its stdout is drained on a
/// thread afterwards, so it never blocks on a full pipe).
fn spawn(config: &Config) -> Replica {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "queue_kill::replica_process", "--nocapture"])
        .env(REPLICA, config.encode())
        .env("KORVUS_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("replica starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let owner = loop {
        let line = lines
            .next()
            .expect("the replica prints its owner")
            .expect("a line");
        if let Some(owner) = line.strip_prefix("owner ") {
            break owner.to_owned();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    Replica { child, owner }
}

/// How many times the agent's line is in the session's turn log.
async fn agent_runs(logs: &PgLog, id: SessionId) -> usize {
    let log = logs
        .open(LogId::from_uuid(id.as_uuid()), Access::Read)
        .await
        .expect("every session has its turn log");
    let events = log.read(0, None).await.expect("read");
    events
        .iter()
        .filter(|e| format!("{:?}", e.kind).contains(AGENT_LINE))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replicas_unstarted_claims_run_once_on_the_other_and_the_cap_holds() {
    let Some(db) = PgDb::create().await else {
        return;
    };
    let store = PgStore::new(db.pool().clone());
    let logs = PgLog::new(db.pool().clone());
    let dir = tempfile::tempdir().unwrap();
    let (scratch, blobs) = (dir.path().join("scratch"), dir.path().join("blobs"));
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::create_dir_all(&blobs).unwrap();
    let incident = store
        .create_incident(NewIncident {
            title: "queue".into(),
            workspace: None,
        })
        .await
        .unwrap()
        .id;
    let config = |seed_ms: u64, creates: usize| Config {
        db: db.name().to_owned(),
        scratch: scratch.clone(),
        blobs: blobs.clone(),
        incident,
        seed_ms,
        creates,
    };
    let survivor = spawn(&config(0, 0));
    let mut victim = Some(spawn(&config(1500, SESSIONS)));
    let victim_owner = victim.as_ref().map(|v| v.owner.clone()).unwrap();

    let started = Instant::now();
    let deadline = started + Duration::from_secs(180);
    let mut peak = 0;
    // The killed replica's claims that had not started, and when each
    // was seen owned by someone else (or by nobody).
    let mut unstarted: HashMap<SessionId, Option<Duration>> = HashMap::new();
    let mut started_there = Vec::new();
    let mut killed_at = None;
    let sessions = loop {
        let sessions = store.all_sessions(incident).await.unwrap();
        let running = sessions
            .iter()
            .filter(|s| s.is_active() && s.started_at.is_some())
            .count();
        peak = peak.max(running);
        let ended = sessions.iter().filter(|s| s.status.is_terminal()).count();
        if let Some(at) = killed_at {
            let since: Duration = Instant::now() - at;
            for s in &sessions {
                if let Some(seen @ None) = unstarted.get_mut(&s.id) {
                    if s.owner.map(|o| o.to_string()) != Some(victim_owner.clone()) {
                        *seen = Some(since);
                    }
                }
            }
        } else if ended >= 40 && sessions.len() == SESSIONS {
            drop(victim.take());
            killed_at = Some(Instant::now());
            // The dead replica's rows are frozen until a reaper acts.
            for s in store.all_sessions(incident).await.unwrap() {
                if s.is_active() && s.owner.map(|o| o.to_string()) == Some(victim_owner.clone()) {
                    if s.started_at.is_none() {
                        unstarted.insert(s.id, None);
                    } else {
                        started_there.push(s.id);
                    }
                }
            }
        }
        if (killed_at.is_some() && ended == SESSIONS) || Instant::now() > deadline {
            break sessions;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let elapsed = started.elapsed();
    drop(survivor);

    assert!(killed_at.is_some(), "the victim was never killed");
    assert_eq!(sessions.len(), SESSIONS);
    let left: Vec<_> = sessions
        .iter()
        .filter(|s| !s.status.is_terminal())
        .map(|s| (s.id, s.fence, s.owner, s.started_at))
        .collect();
    assert!(left.is_empty(), "not ended after {elapsed:?}: {left:?}");
    assert!(peak <= 2 * SLOTS, "{peak} started and unsettled at once");
    assert!(
        !unstarted.is_empty(),
        "the killed replica held no unstarted claim (its seeder takes 1.5 s)"
    );
    let mut owner_lost = 0;
    for s in &sessions {
        let reports = store.all_reports(s.id).await.unwrap();
        assert_eq!(reports.len(), 1, "one report row: {s:?} {reports:?}");
        let runs = agent_runs(&logs, s.id).await;
        assert!(runs <= 1, "the agent ran {runs} times for {s:?}");
        if s.exit_reason.as_deref() == Some("owner_lost") {
            owner_lost += 1;
            assert!(started_there.contains(&s.id), "only started runs: {s:?}");
        } else {
            assert_eq!(s.status, SessionStatus::Completed, "{s:?}");
            assert_eq!(runs, 1, "a completed session's agent ran: {s:?}");
        }
    }
    let bound = TTL + HEARTBEAT + POLL;
    let mut latencies = Vec::new();
    for (id, seen) in &unstarted {
        let s = sessions.iter().find(|s| s.id == *id).unwrap();
        assert_eq!(s.status, SessionStatus::Completed, "{s:?}");
        assert!(
            s.fence >= 4,
            "claimed, taken over, given back, claimed: {s:?}"
        );
        let seen = seen.unwrap_or_else(|| panic!("{id} never left the dead replica"));
        latencies.push(seen);
        // The sampling and a loaded 2-core machine add to the bound;
        // the figure itself is printed.
        assert!(seen < bound + Duration::from_secs(3), "{seen:?}");
    }
    eprintln!(
        "queue_kill: {SESSIONS} sessions ended {elapsed:?} after the start; peak {peak} started; \
         {} unstarted claims of the killed replica queued again after {latencies:?} (ttl + period + poll {bound:?}); \
         {owner_lost} of its {} started runs owner_lost",
        unstarted.len(),
        started_there.len()
    );
    drop(store);
    drop(logs);
    db.drop_db().await;
}
