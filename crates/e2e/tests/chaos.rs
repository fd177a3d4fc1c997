//! Replicas under chaos, on PostgreSQL: three replica processes (children
//! of this test binary) each start 30 sessions whose agents are real
//! processes; every round one random replica is SIGKILLed mid-run and
//! restarted (a new incarnation, 30 new sessions); ten rounds. Then every
//! row must end, and what happened is counted from the rows, the turn logs
//! and the process table — never from the replicas' own reports:
//!
//! - no row left `running`;
//! - every revision has exactly one report row, and the last one was
//!   written under the session's current fence;
//! - no report or artifact row carries a fence newer than its session's,
//!   and no turn-log event was written under an epoch older than one
//!   already in the log (epochs never go down along a log);
//! - no agent process left running.

use korvus_store::StoreExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use korvus_blob::FsBlobStore;
use korvus_command::CommandRunner;
use korvus_log::{Access, LogId, TurnLog};
use korvus_session::{CreateSession, Manager};
use korvus_store::{CoordinatedStore, IncidentId, NewIncident, SessionStatus, Store};
use korvus_store_sql::testing::PgDb;
use korvus_store_sql::{PgLog, PgStore};
use korvus_workspace::ScratchRoot;

/// Set in a child process: what the replica works on.
const REPLICA: &str = "KORVUS_E2E_CHAOS_REPLICA";
const REPLICAS: usize = 3;
const SESSIONS: usize = 30;
const ROUNDS: usize = 10;
const TTL: Duration = Duration::from_secs(2);
const HEARTBEAT: Duration = Duration::from_millis(500);

/// A small deterministic generator (xorshift), so no dependency is needed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A replica's configuration, as one environment value:
/// `db;scratch;blobs;incident;marker`.
struct Config {
    db: String,
    scratch: PathBuf,
    blobs: PathBuf,
    incident: IncidentId,
    marker: String,
}

impl Config {
    fn encode(&self) -> String {
        format!(
            "{};{};{};{};{}",
            self.db,
            self.scratch.display(),
            self.blobs.display(),
            self.incident,
            self.marker
        )
    }

    fn decode(text: &str) -> Self {
        let f: Vec<&str> = text.split(';').collect();
        Self {
            db: f[0].to_owned(),
            scratch: f[1].into(),
            blobs: f[2].into(),
            incident: f[3].parse().expect("incident id"),
            marker: f[4].to_owned(),
        }
    }
}

/// The entry point of a replica process: only does something in a child
/// started by the chaos test (with `REPLICA` set). Starts `SESSIONS`
/// sessions whose agents write a report and sleep 1–4 s, then stays alive
/// — renewing its lease and reaping orphans — until it is killed.
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
    // How long each agent sleeps (1–4 s) comes from its own pid.
    let script = format!(
        "echo '# chaos' > report.md; echo working; exec sleep $(( $$ % 4 + 1 )).{}",
        config.marker
    );
    let runner = CommandRunner::new("sh").args(["-c", script.as_str()]);
    let manager = Manager::builder(store, Arc::new(runner))
        .blob_store(blobs)
        .turn_log(logs)
        .scratch_root(ScratchRoot::supplied(&config.scratch))
        .lease(TTL, HEARTBEAT)
        // Killed runs are settled (`owner_lost`), not resumed: the
        // invariants below count them.
        .resume_orphans(0, Duration::ZERO)
        .build();
    for _ in 0..SESSIONS {
        manager
            .create(CreateSession::new(config.incident, "chaos"))
            .await
            .expect("create");
    }
    println!("created");
    std::future::pending::<()>().await;
}

/// The replica processes of one test; killed when dropped.
struct Fleet {
    children: Vec<Option<Child>>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for child in self.children.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn(config: &Config) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "chaos::replica_process", "--nocapture"])
        .env(REPLICA, config.encode())
        .env("KORVUS_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("replica starts")
}

fn agents_running(marker: &str) -> bool {
    Command::new("pgrep")
        .arg("-f")
        .arg(format!("^sleep [0-9]\\.{marker}"))
        .output()
        .expect("pgrep runs")
        .status
        .success()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_killed_and_restarted_for_ten_rounds_lose_nothing() {
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
            title: "chaos".into(),
            workspace: None,
        })
        .await
        .unwrap()
        .id;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let marker = format!("{}{nanos:09}", std::process::id());
    let mut rng = Rng(u64::from(nanos) | 1);
    let config = || Config {
        db: db.name().to_owned(),
        scratch: scratch.clone(),
        blobs: blobs.clone(),
        incident,
        marker: marker.clone(),
    };
    let mut fleet = Fleet {
        children: (0..REPLICAS).map(|_| Some(spawn(&config()))).collect(),
    };
    let started = Instant::now();
    for _ in 0..ROUNDS {
        tokio::time::sleep(Duration::from_millis(1000 + rng.below(1500))).await;
        let victim = rng.below(REPLICAS as u64) as usize;
        if let Some(mut child) = fleet.children[victim].take() {
            child.kill().expect("SIGKILL");
            child.wait().expect("reaped");
        }
        fleet.children[victim] = Some(spawn(&config()));
    }
    // Every row must end: runs finish, orphans are reaped by the live
    // replicas within ttl + period.
    let deadline = Instant::now() + Duration::from_secs(120);
    let sessions = loop {
        let sessions = store.all_sessions(incident).await.unwrap();
        let running = sessions
            .iter()
            .filter(|s| s.status == SessionStatus::Running)
            .count();
        if running == 0 || Instant::now() > deadline {
            break sessions;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let elapsed = started.elapsed();
    drop(fleet);

    let left_running: Vec<_> = sessions
        .iter()
        .filter(|s| s.status == SessionStatus::Running)
        .map(|s| (s.id, s.fence, s.owner, s.exit_reason.clone()))
        .collect();
    assert!(left_running.is_empty(), "left running: {left_running:?}");
    assert!(
        sessions.len() >= REPLICAS * SESSIONS,
        "{} sessions",
        sessions.len()
    );
    let mut owner_lost = 0;
    let mut stale = Vec::new();
    for s in &sessions {
        let reports = store.all_reports(s.id).await.unwrap();
        let revisions: Vec<u32> = reports.iter().map(|r| r.revision).collect();
        assert_eq!(revisions, (1..=s.revision).collect::<Vec<_>>(), "{s:?}");
        let last = reports.last().unwrap();
        // The last report is the current run's, or — when a run landed its
        // report row and was killed before its settle — that dead run's own
        // row, which the takeover keeps (one report row per revision).
        assert!(last.fence <= s.fence, "report from a later fence: {s:?}");
        if last.fence < s.fence {
            assert!(
                matches!(s.exit_reason.as_deref(), Some("owner_lost" | "cancelled")),
                "an older fence's report on a session not taken over: {s:?}"
            );
        }
        owner_lost += usize::from(last.exit_reason == "owner_lost");
        for r in &reports {
            if r.fence > s.fence {
                stale.push(format!("report {}/{} fence {}", s.id, r.revision, r.fence));
            }
        }
        for a in store.all_session_artifacts(s.id).await.unwrap() {
            if a.fence > s.fence {
                stale.push(format!("artifact {} fence {}", a.id, a.fence));
            }
        }
        let events = match logs
            .open(LogId::from_uuid(s.id.as_uuid()), Access::Read)
            .await
        {
            Ok(log) => log.read(0, None).await.unwrap(),
            // Killed between the row and the log: no events.
            Err(korvus_log::LogError::NotFound { .. }) => Vec::new(),
            Err(e) => panic!("{e:?}"),
        };
        let mut newest = 0;
        for e in &events {
            let epoch = e.epoch.unwrap_or(0);
            if epoch < newest || epoch > s.fence {
                stale.push(format!("event of {} at epoch {epoch} after {newest}", s.id));
            }
            newest = newest.max(epoch);
        }
    }
    assert!(stale.is_empty(), "written under a stale fence: {stale:?}");
    assert!(owner_lost > 0, "some runs were killed mid-run and reaped");
    // The reapers stopped every agent the killed replicas left behind.
    let deadline = Instant::now() + Duration::from_secs(10);
    while agents_running(&marker) {
        assert!(Instant::now() < deadline, "agent processes left running");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "chaos: {} sessions, {owner_lost} settled owner_lost, all ended {elapsed:?} after the start",
        sessions.len()
    );
    drop(store);
    drop(logs);
    db.drop_db().await;
}
