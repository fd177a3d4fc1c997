//! Benchmarks 3, 4 and 12: the persist phase to files and to S3, against
//! `cp -r` + `sync` and a sequential aws-sdk-s3 put loop.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use korvus_blob::{BlobStore, FsBlobStore};
use korvus_blob_s3::{S3BlobStore, S3Credentials};
use korvus_harvest::{persist, PersistConfig, PersistOutcome, PersistRequest};
use korvus_store::{IncidentId, MemoryStore, NewIncident, NewSession, SessionId, Store};

use crate::report::{Goal, Row};
use crate::s3stub::{LatencyStub, S3_LATENCY};
use crate::sql::ms;
use crate::Bench;

/// Writes `count` files of `size` bytes (`report.md` first) into a fresh `dir`.
fn make_tree(dir: &Path, count: usize, size: usize) -> Result<Vec<PathBuf>> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let mut files = Vec::new();
    // Cheap pseudo-random bytes, different per file (no two files equal).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..count {
        let name = if i == 0 {
            korvus_workspace::REPORT_FILE.to_owned()
        } else {
            format!("out-{i:03}.bin")
        };
        let mut bytes = Vec::with_capacity(size);
        while bytes.len() < size {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        bytes.truncate(size);
        let path = dir.join(name);
        std::fs::write(&path, bytes)?;
        files.push(path);
    }
    Ok(files)
}

/// A store holding one incident and one running session, for the rows of
/// a persist phase (the artifact rows' foreign keys need both).
pub(crate) struct Target {
    pub(crate) store: Arc<MemoryStore>,
    pub(crate) incident: IncidentId,
    pub(crate) session: SessionId,
}

impl Target {
    /// The persist phase of revision 1 of this target's session, from the
    /// scratch dir `src`, with the default configuration.
    pub(crate) async fn persist(&self, blobs: Arc<dyn BlobStore>, src: &Path) -> PersistOutcome {
        persist(
            self.store.clone(),
            Some(blobs),
            &PersistConfig::default(),
            PersistRequest {
                incident: self.incident,
                session: self.session,
                revision: 1,
                fence: 1,
                scratch: Some(src.to_path_buf()),
                skip_prefixes: Vec::new(),
                restored: Default::default(),
            },
        )
        .await
    }
}

pub(crate) async fn target() -> Result<Target> {
    let store = Arc::new(MemoryStore::new());
    let incident = store
        .create_incident(NewIncident {
            title: "persist".into(),
            workspace: None,
        })
        .await?
        .id;
    let session = store
        .create_session(NewSession {
            runner: None,
            admission: Default::default(),
            lease: None,
            id: SessionId::new(),
            incident_id: incident,
            prompt: "persist".into(),
            workspace_ref: None,
        })
        .await?
        .id;
    Ok(Target {
        store,
        incident,
        session,
    })
}

/// Runs one persist phase of `src` into `blobs`; returns milliseconds.
pub(crate) async fn persist_tree(
    blobs: Arc<dyn BlobStore>,
    src: &Path,
    files: usize,
) -> Result<f64> {
    let target = target().await?;
    let t = Instant::now();
    let outcome = target.persist(blobs, src).await;
    let elapsed = ms(t.elapsed());
    check(&outcome, files)?;
    Ok(elapsed)
}

fn check(outcome: &PersistOutcome, files: usize) -> Result<()> {
    if outcome.stored.len() != files || !outcome.failed.is_empty() || !outcome.rows_written {
        bail!(
            "persist stored {} of {files} files: {}",
            outcome.stored.len(),
            outcome.error_text().unwrap_or_default()
        );
    }
    Ok(())
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

/// `cp -r src dst`, then (with `hash`) `openssl dgst -sha256` of every
/// copied file, then `sync`; returns milliseconds.
pub(crate) fn copy_baseline(src: &Path, dst: &Path, files: &[PathBuf], hash: bool) -> Result<f64> {
    let t = Instant::now();
    run(Command::new("cp").arg("-r").arg(src).arg(dst))?;
    if hash {
        let copies = files
            .iter()
            .filter_map(|f| f.file_name())
            .map(|n| dst.join(n));
        let out = Command::new("openssl")
            .args(["dgst", "-sha256"])
            .args(copies)
            .output()
            .context("running openssl dgst")?;
        if !out.status.success()
            || out.stdout.iter().filter(|b| **b == b'\n').count() != files.len()
        {
            bail!(
                "openssl dgst failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    run(&mut Command::new("sync"))?;
    Ok(ms(t.elapsed()))
}

/// Removes a run's destination and flushes the deletion, so the next
/// measured `sync` (or barrier) does not pay for it.
pub(crate) fn clean_up(dirs: &[&Path]) -> Result<()> {
    for dir in dirs {
        let _ = std::fs::remove_dir_all(dir);
    }
    run(&mut Command::new("sync"))
}

/// Benchmark 3: 64 × 1 MiB to `FsBlobStore` against `cp -r` +
/// `openssl dgst -sha256` + `sync` (the same bytes copied, hashed and made
/// durable) and, for comparison with earlier releases, `cp -r` + `sync`.
pub(crate) async fn persist_fs(b: &mut Bench) -> Result<Vec<Row>> {
    let (count, size, runs) = if b.quick {
        (8, 64 * 1024, 2)
    } else {
        (64, 1024 * 1024, 7)
    };
    let src = b.work.join("fs-src");
    let files = make_tree(&src, count, size)?;
    // Settle the page cache and the disk before the first run.
    run(&mut Command::new("sync"))?;
    let mut hashed = Vec::new();
    let mut plain = Vec::new();
    for i in 0..runs {
        let ours_dir = b.work.join(format!("fs-ours-{i}"));
        let cp_dir = b.work.join(format!("fs-cp-{i}"));
        let hash_dir = b.work.join(format!("fs-cp-hash-{i}"));
        // The three sides in a rotating order, each after a flushed
        // clean-up of the one before.
        let (mut ours, mut cp, mut cp_hash) = (0.0, 0.0, 0.0);
        for side in 0..3 {
            match (side + i) % 3 {
                0 => {
                    let blobs = Arc::new(FsBlobStore::open(&ours_dir)?);
                    ours = persist_tree(blobs, &src, count).await?;
                    clean_up(&[&ours_dir])?;
                }
                1 => {
                    cp = copy_baseline(&src, &cp_dir, &files, false)?;
                    clean_up(&[&cp_dir])?;
                }
                _ => {
                    cp_hash = copy_baseline(&src, &hash_dir, &files, true)?;
                    clean_up(&[&hash_dir])?;
                }
            }
        }
        hashed.push((cp_hash, ours));
        plain.push((cp, ours));
    }
    let _ = std::fs::remove_dir_all(&src);
    let what = format!("{count} × {} KiB", size / 1024);
    Ok(vec![
        Row::paired(
            format!("3 persist {what} to files"),
            "cp -r + openssl dgst -sha256 + sync",
            "persist → FsBlobStore",
            "ms",
            &hashed,
            Goal::RatioAtMost { max: 1.1 },
        )
        .note(format!(
            "the three sides rotate over {runs} runs, fresh destination each run, each clean-up flushed with sync before the next side; ours = whole persist phase (walk, one SHA-256 pass while copying, temp file + rename per object, one syncfs barrier, rows in a MemoryStore, then the manifest)"
        )),
        Row::paired(
            format!("3 persist {what} to files, against cp -r + sync (the goal before F23)"),
            "cp -r + sync",
            "persist → FsBlobStore",
            "ms",
            &plain,
            Goal::None,
        )
        .note("the same runs; the baseline hashes nothing, though every artifact row needs the digest; the goal was 1.2×"),
    ])
}

/// Benchmark 4: 64 × 256 KiB to an S3 stand-in that overlaps requests and
/// answers each after S3's latency, vs a sequential put loop.
pub(crate) async fn persist_s3(b: &mut Bench) -> Result<Vec<Row>> {
    let (count, size, runs) = if b.quick {
        (8, 16 * 1024, 2)
    } else {
        (64, 256 * 1024, 7)
    };
    let stub = LatencyStub::start(S3_LATENCY).await?;
    let bucket = "korvus-bench";
    let store = S3BlobStore::builder(bucket, S3Credentials::fixed("benchkey", "benchsecret"))
        .endpoint_url(&stub.endpoint)
        .force_path_style(true)
        .region("us-east-1")
        .build()
        .await?;
    let client = store.client().clone();
    let store: Arc<dyn BlobStore> = Arc::new(store);
    let src = b.work.join("s3-src");
    let files = make_tree(&src, count, size)?;
    // One warm-up each: connections and the SDK's first-request costs.
    persist_tree(store.clone(), &src, count).await?;
    put_loop(&client, bucket, &files, "warm").await?;
    let mut pairs = Vec::new();
    for i in 0..runs {
        let ours = || persist_tree(store.clone(), &src, count);
        let base = || put_loop(&client, bucket, &files, "run");
        let pair = if i % 2 == 0 {
            let o = ours().await?;
            (base().await?, o)
        } else {
            let l = base().await?;
            (l, ours().await?)
        };
        pairs.push(pair);
    }
    let _ = std::fs::remove_dir_all(&src);
    Ok(vec![Row::paired(
        format!("4 persist {count} × {} KiB to S3", size / 1024),
        "sequential put loop",
        "persist → S3BlobStore",
        "ms",
        &pairs,
        Goal::RatioAtMost { max: 0.3 },
    )
    .note(format!(
        "an in-process S3 stand-in on 127.0.0.1 that serves each connection on its own task and answers every request after {} ms (S3's small-request median is \"tens of milliseconds\", AWS S3 performance whitepaper), doing no work of its own; A/B alternated over {runs} runs after one warm-up each; ours uses PersistConfig::default() (8 uploads in flight, SHA-256 sent, plus the manifest's put); baseline reads each file and puts it with the same aws-sdk-s3 client, one at a time",
        S3_LATENCY.as_millis()
    ))])
}

async fn put_loop(
    client: &korvus_blob_s3::sdk::Client,
    bucket: &str,
    files: &[PathBuf],
    run: &str,
) -> Result<f64> {
    let t = Instant::now();
    for path in files {
        let bytes = tokio::fs::read(path).await?;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .context("file name")?;
        client
            .put_object()
            .bucket(bucket)
            .key(format!("baseline/{run}/{name}"))
            .body(bytes.into())
            .send()
            .await
            .with_context(|| format!("put {name}"))?;
    }
    Ok(ms(t.elapsed()))
}

/// `korvus-bench profile persist-fs`: only the persist side of benchmark 3,
/// for a profiler.
pub(crate) async fn profile_fs(dir: &Path, count: usize, size: usize) -> Result<()> {
    let src = dir.join("src");
    make_tree(&src, count, size)?;
    // As benchmark 3 does: the barrier should not flush the source tree.
    run(&mut Command::new("sync"))?;
    let blobs = Arc::new(FsBlobStore::open(dir.join("blobs"))?);
    let ms = persist_tree(blobs, &src, count).await?;
    eprintln!("persisted {count} × {size} bytes in {ms:.1} ms");
    Ok(())
}
