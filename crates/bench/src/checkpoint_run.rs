//! Benchmark 26: checkpoints while an agent works. An agent writes 1,000
//! files of 4 KiB over 60 s (100 over 3 s under `--quick`); the same run
//! with a checkpoint every 5 s (0.5 s) against none: the wall time of the
//! session and this process's CPU (korvus and the in-process agent). The
//! landing after the checkpoints is counted: what it uploaded against
//! what it promoted from the checkpoints.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use korvus_blob::{BlobKey, BlobStore as _, FsBlobStore};
use korvus_harvest::PersistConfig;
use korvus_runner::testing::ScriptRunner;
use korvus_runner::RunOutcome;
use korvus_session::{CreateSession, Manager};
use korvus_store::{Counters, MemoryStore, NewIncident, Store as _};
use korvus_workspace::ScratchRoot;

use crate::report::{Goal, Row};
use crate::Bench;

/// What one run measured.
struct Measured {
    wall_ms: f64,
    cpu_ms: f64,
    /// The landing's files: uploaded, promoted from checkpoints.
    landed: (usize, usize),
}

pub(crate) async fn running_agent(b: &mut Bench) -> Result<Vec<Row>> {
    let (files, span, interval) = if b.quick {
        (100, Duration::from_secs(3), Duration::from_millis(500))
    } else {
        (1_000, Duration::from_secs(60), Duration::from_secs(5))
    };
    let runs = if b.quick { 1 } else { 2 };
    let (mut wall, mut cpu, mut landed) = (Vec::new(), Vec::new(), Vec::new());
    // Not measured: the process's first run pays its one-time costs
    // (threads, allocator arenas, the blob store's directories), which
    // would otherwise fall on whichever side runs first.
    one_run(
        b,
        files.min(100),
        Duration::from_secs(2),
        interval.min(Duration::from_millis(500)),
    )
    .await?;
    for _ in 0..runs {
        let off = one_run(b, files, span, Duration::ZERO).await?;
        let on = one_run(b, files, span, interval).await?;
        wall.push((off.wall_ms, on.wall_ms));
        cpu.push((off.cpu_ms, on.cpu_ms));
        landed.push(on.landed);
    }
    let (uploaded, promoted) = landed[landed.len() - 1];
    let secs = span.as_secs_f64();
    let every = interval.as_secs_f64();
    Ok(vec![
        Row::paired(
            format!("26 checkpoints while an agent writes {files} files of 4 KiB over {secs} s: wall time"),
            "no checkpoints",
            format!("a checkpoint every {every} s"),
            "ms",
            &wall,
            Goal::RatioAtMost { max: 1.05 },
        )
        .note(format!(
            "create to settled; the landing after the checkpoints uploaded {uploaded} file(s) \
             and promoted {promoted} (memory store, FsBlobStore)"
        )),
        Row::paired(
            format!("26 checkpoints while an agent writes {files} files of 4 KiB over {secs} s: CPU"),
            "no checkpoints",
            format!("a checkpoint every {every} s"),
            "ms",
            &cpu,
            Goal::RatioAtMost { max: 1.2 },
        )
        .note("user + system time of this process (korvus and the in-process agent), 10 ms ticks"),
    ])
}

/// One session whose agent writes `files` over `span`, checkpointed every
/// `interval` (zero: never).
async fn one_run(b: &Bench, files: usize, span: Duration, interval: Duration) -> Result<Measured> {
    let root = b
        .work
        .join(format!("checkpoint-run-{}", uuid::Uuid::now_v7()));
    std::fs::create_dir_all(root.join("scratch"))?;
    let store = Arc::new(MemoryStore::new());
    let blobs = Arc::new(FsBlobStore::open(root.join("blobs"))?);
    let pause = span / files as u32;
    let runner = ScriptRunner::new(move |ctx, _| async move {
        let dir = ctx.scratch.clone().expect("a scratch dir");
        let body = vec![0x5a_u8; 4096];
        for i in 0..files {
            let path = dir.join(format!("work/d{:02}/f{i:04}.dat", i / 100));
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&path, &body).expect("write");
            tokio::time::sleep(pause).await;
        }
        std::fs::write(dir.join("report.md"), "# done\n").expect("report");
        Ok(RunOutcome::completed(Counters::default()))
    });
    let manager = Manager::builder(store.clone(), Arc::new(runner))
        .blob_store(blobs.clone())
        .scratch_root(ScratchRoot::supplied(root.join("scratch")))
        .checkpoint_interval(interval)
        .persist_config({
            let mut v = PersistConfig::default();
            v.max_files = files + 16;
            v
        })
        .build();
    let incident = store
        .create_incident(NewIncident {
            title: "checkpoints".into(),
            workspace: None,
        })
        .await?;
    let cpu0 = crate::lease::cpu_of("self", false);
    let started = Instant::now();
    let session = manager
        .create(CreateSession::new(incident.id, "write files"))
        .await?;
    let row = manager.await_settled(session.id, span * 4).await?;
    let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
    let cpu_ms = (crate::lease::cpu_of("self", false) - cpu0) as f64;
    if !row.status.is_terminal() || row.exit_reason.as_deref() != Some("completed") {
        bail!("the run ended {row:?}");
    }
    let report = store.get_report(session.id, 1).await?;
    let manifest = blobs
        .get(&BlobKey::new(report.manifest_key.context("a manifest")?)?)
        .await?;
    let outcome: serde_json::Value = serde_json::from_slice(&manifest.bytes)?;
    let stored = outcome["stored"].as_array().map_or(0, Vec::len);
    let promoted = outcome["promoted"].as_u64().unwrap_or(0) as usize;
    manager.stop().await;
    let _ = std::fs::remove_dir_all(&root);
    Ok(Measured {
        wall_ms,
        cpu_ms,
        landed: (stored - promoted, promoted),
    })
}
