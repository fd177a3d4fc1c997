//! Benchmark 23: reopening a session with a long history — a turn log of
//! 1,000,000 events (`JsonlLog`) and 1,000 artifacts on the 30 ms S3
//! stand-in (10,000 events and 100 artifacts under `--quick`): how long
//! `reopen` takes to return and the run to settle, and the peak resident
//! memory it adds. Twice: first after a run that was never continued (the
//! closers need the whole log, read a page at a time), then again (the
//! log read from the first reopen's repair on).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use korvus_blob::{artifact_key, BlobStore, Sha256Digest};
use korvus_blob_s3::{S3BlobStore, S3Credentials};
use korvus_log::{Event, EventKind, JsonlLog, LogHeader, LogId, TurnLog as _};
use korvus_runner::testing::ScriptRunner;
use korvus_runner::RunOutcome;
use korvus_session::Manager;
use korvus_store::{
    ArtifactId, ArtifactKind, Counters, NewArtifact, NewReport, Session, SessionStatus, Settlement,
    Store,
};
use korvus_store_sql::SqliteStore;
use korvus_workspace::ScratchRoot;

use crate::fixtures::{leased_session, sqlite};
use crate::large::{reset_peak, status_mib};
use crate::report::{Goal, Row};
use crate::s3stub::{LatencyStub, S3_LATENCY};
use crate::sql::ms;
use crate::Bench;

/// The most resident memory a reopen may add, in MiB.
const MAX_GROWTH_MIB: f64 = 64.0;

pub(crate) async fn reopen_at_scale(b: &mut Bench) -> Result<Vec<Row>> {
    let (events, artifacts): (u64, usize) = if b.quick {
        (10_000, 100)
    } else {
        (1_000_000, 1_000)
    };
    let dir = b.work.join("reopen");
    let pool = sqlite(&dir.join("korvus.sqlite")).await?;
    let store = Arc::new(SqliteStore::new(pool.clone()));
    let logs = Arc::new(JsonlLog::open_dir(dir.join("logs"))?);
    let stub = LatencyStub::start(S3_LATENCY).await?;
    let blobs = S3BlobStore::builder("korvus-bench", S3Credentials::fixed("k", "s"))
        .endpoint_url(&stub.endpoint)
        .force_path_style(true)
        .region("us-east-1")
        .build()
        .await?;
    std::fs::create_dir_all(dir.join("scratch"))?;
    let fill = Instant::now();
    let session = history(&store, &logs, events, artifacts).await?;
    let fill_secs = fill.elapsed().as_secs_f64();
    let restored = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&restored);
    let runner = ScriptRunner::new(move |ctx, _| {
        let seen = Arc::clone(&seen);
        async move {
            let scratch = ctx.scratch.expect("a scratch dir");
            let out = std::fs::read_dir(scratch.join("out")).map_or(0, Iterator::count);
            seen.store(out, Ordering::SeqCst);
            std::fs::write(scratch.join("report.md"), "# Again\n").expect("report");
            Ok(RunOutcome::completed(Counters::default()))
        }
    });
    let manager = Manager::builder(store.clone(), Arc::new(runner))
        .blob_store(Arc::new(blobs) as Arc<dyn BlobStore>)
        .turn_log(logs)
        .scratch_root(ScratchRoot::supplied(dir.join("scratch")))
        .build();
    let mut rows = Vec::new();
    for (round, what) in [
        "never continued: the whole log read",
        "again: the log read from its repair on",
    ]
    .iter()
    .enumerate()
    {
        reset_peak()?;
        let before = status_mib("VmRSS:")?;
        let started = Instant::now();
        manager.reopen(session.id, "and now?").await?;
        let returned = ms(started.elapsed());
        let row = manager
            .await_settled(session.id, Duration::from_secs(600))
            .await?;
        let settled = ms(started.elapsed());
        let growth = status_mib("VmHWM:")? - before;
        let revision = u32::try_from(round)? + 2;
        if row.status != SessionStatus::Completed || row.revision != revision {
            let detail = store
                .get_report(session.id, row.revision)
                .await
                .ok()
                .and_then(|r| r.detail);
            bail!(
                "reopen {revision} ended {:?} ({:?}) at revision {}: {detail:?}",
                row.status,
                row.exit_reason,
                row.revision
            );
        }
        let got = restored.load(Ordering::SeqCst);
        if got != artifacts {
            bail!("reopen {revision} restored {got} of {artifacts} files");
        }
        rows.push(
            Row::paired(
                format!("23 reopen of a {events}-event log, {artifacts} artifacts on S3 (stand-in), {what}: peak RSS growth"),
                "events",
                "VmHWM − VmRSS before",
                "MiB",
                &[(events as f64, growth)],
                Goal::ValueAtMost {
                    max: MAX_GROWTH_MIB,
                    ratio_max: None,
                },
            )
            .note(format!(
                "SqliteStore, JsonlLog, S3BlobStore on an in-process stand-in answering after {} ms; \
                 reopen returned in {returned:.0} ms, the run (every artifact restored, 8 at a time) \
                 settled {settled:.0} ms after the call; filling took {fill_secs:.1} s",
                S3_LATENCY.as_millis()
            )),
        );
    }
    manager.stop().await;
    pool.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rows)
}

/// A completed session at revision 1 whose log holds `events` events (one
/// turn left open, one tool call in 10,000 unanswered) and which stored
/// `artifacts` empty files (the stand-in answers every read with no bytes).
async fn history(
    store: &SqliteStore,
    logs: &JsonlLog,
    events: u64,
    artifacts: usize,
) -> Result<Session> {
    let incident = store
        .create_incident(korvus_store::NewIncident {
            title: "history".into(),
            workspace: None,
        })
        .await?
        .id;
    let session = leased_session(store, incident, "investigate".into()).await?;
    let log = logs
        .create(LogHeader::new(LogId::from_uuid(session.id.as_uuid())))
        .await?;
    log.claim_epoch(session.fence).await?;
    let mut written = 0u64;
    let mut batch = vec![Event::new(EventKind::TurnStart { turn: 1 })];
    let mut call = 0u64;
    while written < events {
        while batch.len() < 1000 && written + (batch.len() as u64) < events {
            let call_id = format!("c{call}");
            batch.push(Event::new(EventKind::ToolCall {
                call_id: call_id.clone(),
                tool: "sh".into(),
                input: serde_json::json!({ "cmd": "grep -r error /var/log" }),
            }));
            if call % 10_000 != 9_999 && written + (batch.len() as u64) < events {
                batch.push(Event::new(EventKind::ToolResult {
                    call_id,
                    ok: true,
                    output: serde_json::json!("no match"),
                }));
            }
            call += 1;
        }
        log.append(&batch).await?;
        written += batch.len() as u64;
        batch.clear();
    }
    log.close().await?;
    let empty = Sha256Digest::of(b"").to_hex();
    let rows: Vec<NewArtifact> = (0..artifacts)
        .map(|i| {
            let id = ArtifactId::new();
            let path = format!("out/f{i:04}.txt");
            NewArtifact {
                id,
                incident_id: incident,
                session_id: session.id,
                kind: ArtifactKind::AgentOutput,
                blob_key: artifact_key(
                    incident.as_uuid(),
                    session.id.as_uuid(),
                    id.as_uuid(),
                    &path,
                )
                .to_string(),
                path,
                content_type: "text/plain".into(),
                size_bytes: 0,
                sha256: empty.clone(),
                revision: 1,
                fence: session.fence,
            }
        })
        .collect();
    store.create_artifacts(rows).await?;
    store
        .create_report(NewReport {
            session_id: session.id,
            incident_id: incident,
            revision: 1,
            markdown_key: None,
            manifest_key: None,
            markdown_bytes: 0,
            exit_reason: "completed".into(),
            counters: Counters::default(),
            detail: None,
            salvaged_from: None,
            fence: session.fence,
        })
        .await?;
    let settled = Settlement {
        status: SessionStatus::Completed,
        exit_reason: Some("completed".into()),
        counters: Counters::default(),
        fence: session.fence,
    };
    Ok(store.settle_session(session.id, settled).await?)
}
