//! `korvus prune` on the embedded default (SQLite + files): 10,000 finished
//! sessions pruned whole — rows, turn logs, blobs — while an active
//! session and sessions that ended after the cut-off are kept whole, and
//! `korvus sweep` finds nothing left behind.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use korvus_blob::{
    artifact_key, report_key, BlobKey, BlobStore, Durability, FsBlobStore, PutOptions,
};
use korvus_log::{LogHeader, LogId, TurnLog};
use korvus_store::{
    ArtifactId, ArtifactKind, Counters, Incident, Lease, NewArtifact, NewIncident, NewReport,
    NewSession, OwnerId, Session, SessionId, SessionStatus, Settlement, Store, StoreError,
    StoreExt as _,
};
use korvus_store_sql::{SqliteLog, SqliteStore};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use crate::support::{korvus, ok, output, stderr, stdout};

/// The seeded backends: the data dir's database, opened without fsyncs
/// (seeding is not what is tested), its logs and its blob directory.
struct Seed {
    store: SqliteStore,
    logs: SqliteLog,
    blobs: FsBlobStore,
}

impl Seed {
    async fn open(data: &Path) -> Self {
        ok(korvus(data).arg("migrate"));
        let options = SqliteConnectOptions::from_str("sqlite://korvus.db")
            .unwrap()
            .filename(data.join("korvus.db"))
            .foreign_keys(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Off)
            .busy_timeout(Duration::from_secs(30));
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .unwrap();
        Self {
            store: SqliteStore::new(pool.clone()),
            logs: SqliteLog::new(pool),
            blobs: FsBlobStore::open(data.join("blobs")).unwrap(),
        }
    }

    /// A session with a report (row and bytes), an artifact (row and
    /// bytes) and a turn log; settled `completed` unless `finish` is false.
    async fn session(&self, incident: &Incident, finish: bool) -> Session {
        let new = NewSession {
            runner: None,
            admission: Default::default(),
            // Owned (by a manager that is not running): the unfinished one
            // is running, not queued.
            lease: Some(Lease {
                owner: OwnerId::new(),
                ttl: Duration::from_secs(3600),
            }),
            id: SessionId::new(),
            incident_id: incident.id,
            prompt: "old work".into(),
            workspace_ref: None,
        };
        let s = self.store.create_session(new).await.unwrap();
        let (i, id) = (s.incident_id.as_uuid(), s.id.as_uuid());
        let report = report_key(i, id, 1, s.fence);
        self.put(&report, b"# Old report\n").await;
        let artifact = ArtifactId::new();
        let key = artifact_key(i, id, artifact.as_uuid(), "notes.txt");
        self.put(&key, b"notes").await;
        self.store
            .create_artifacts(vec![NewArtifact {
                id: artifact,
                incident_id: s.incident_id,
                session_id: s.id,
                kind: ArtifactKind::AgentOutput,
                path: "notes.txt".into(),
                blob_key: key.to_string(),
                content_type: "text/plain".into(),
                size_bytes: 5,
                sha256: korvus_blob::Sha256Digest::of(b"notes").to_string(),
                revision: 1,
                fence: s.fence,
            }])
            .await
            .unwrap();
        let header = LogHeader::new(LogId::from_uuid(id))
            .with_label("incident_id", s.incident_id.to_string())
            .with_label("session_id", s.id.to_string());
        self.logs.create(header).await.unwrap();
        if !finish {
            return s;
        }
        self.store
            .create_report(NewReport {
                session_id: s.id,
                incident_id: s.incident_id,
                revision: 1,
                markdown_key: Some(report.to_string()),
                manifest_key: None,
                markdown_bytes: 13,
                exit_reason: "completed".into(),
                counters: Counters::default(),
                detail: None,
                salvaged_from: None,
                fence: s.fence,
            })
            .await
            .unwrap();
        self.store
            .settle_session(
                s.id,
                Settlement {
                    fence: s.fence,
                    status: SessionStatus::Completed,
                    exit_reason: Some("completed".into()),
                    counters: Counters::default(),
                },
            )
            .await
            .unwrap()
    }

    async fn put(&self, key: &BlobKey, bytes: &'static [u8]) {
        let mut options = PutOptions::for_bytes("text/plain", bytes);
        options.durability = Durability::AtBarrier;
        self.blobs
            .put(key, Bytes::from_static(bytes), options)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_of_ten_thousand_finished_sessions_leaves_nothing_of_them_and_keeps_the_rest() {
    let data = tempfile::tempdir().unwrap();
    let seed = Seed::open(data.path()).await;
    let incident = seed
        .store
        .create_incident(NewIncident {
            title: "old incident".into(),
            workspace: None,
        })
        .await
        .unwrap();
    let old: Vec<Session> = futures::stream::iter(0..10_000)
        .map(|_| seed.session(&incident, true))
        .buffer_unordered(8)
        .collect()
        .await;
    let active = seed.session(&incident, false).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cutoff = chrono::Utc::now().to_rfc3339();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut recent = Vec::new();
    for _ in 0..5 {
        recent.push(seed.session(&incident, true).await);
    }

    let dry = ok(korvus(data.path()).args(["prune", "--finished-before", &cutoff]));
    assert!(
        dry.contains("10000 session(s) to prune") && dry.contains("20000 blob(s)"),
        "{dry}"
    );
    assert!(dry.contains("5 ended later, 1 running, 0 queued"), "{dry}");
    assert_eq!(seed.store.get_session(old[0].id).await.unwrap(), old[0]);

    let applied = ok(korvus(data.path()).args(["prune", "--finished-before", &cutoff, "--apply"]));
    assert!(applied.contains("10000 session(s) pruned"), "{applied}");
    assert!(applied.contains("5 ended later, 1 running"), "{applied}");

    let swept = ok(korvus(data.path()).args(["sweep"]));
    assert!(swept.starts_with("0 orphan blob(s)"), "{swept}");

    // Nothing of a pruned session reads, through the CLI or the seams.
    for s in [&old[0], &old[4_999], &old[9_999]] {
        let shown = output(korvus(data.path()).args(["show", &s.id.to_string()]));
        assert!(!shown.status.success(), "{}", stdout(&shown));
        assert!(stderr(&shown).contains("no session"), "{}", stderr(&shown));
        let exported = output(korvus(data.path()).args(["export", &s.id.to_string()]));
        assert!(!exported.status.success());
    }
    let left: Vec<SessionId> = seed
        .store
        .all_sessions(incident.id)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    let kept: Vec<SessionId> = [&active].into_iter().chain(&recent).map(|s| s.id).collect();
    assert_eq!(left, kept, "the rows of the kept sessions only");
    assert!(matches!(
        seed.store.get_session(old[1].id).await,
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(
        seed.store
            .all_incident_artifacts(incident.id)
            .await
            .unwrap()
            .len(),
        6
    );
    let logs = seed.logs.list().await.unwrap();
    assert_eq!(logs.len(), 6, "the logs of the kept sessions only");
    let blobs = seed.blobs.list(None).await.unwrap();
    assert_eq!(blobs.len(), 12, "two blobs of each kept session");

    // What was kept reads whole.
    for s in recent.iter().chain([&active]) {
        assert_eq!(seed.store.get_session(s.id).await.unwrap().id, s.id);
        assert!(logs.contains(&LogId::from_uuid(s.id.as_uuid())));
    }
    for s in &recent {
        let cat = ok(korvus(data.path()).args(["cat", &s.id.to_string()]));
        assert_eq!(cat, "# Old report\n");
        ok(korvus(data.path()).args(["cat", &s.id.to_string(), "notes.txt"]));
    }
}
