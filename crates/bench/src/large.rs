//! Benchmarks 12 and 13: persisting two 1 GiB files (extra resident memory
//! and time against `cp -r` + `sync`), and the orphan-blob sweeper's
//! throughput on `FsBlobStore` and on S3.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use korvus_blob::{artifact_key, BlobStore, Durability, FsBlobStore, PutOptions};
use korvus_blob_s3::{S3BlobStore, S3Credentials};
use korvus_harvest::{sweep, SweepConfig};
use korvus_store::{
    Counters, MemoryStore, NewIncident, NewSession, SessionId, SessionStatus, Settlement, Store,
};

use crate::files::{clean_up, copy_baseline, persist_tree};
use crate::report::{Goal, Row};
use crate::sql::ms;
use crate::Bench;

/// The S3 endpoint `cargo xtask bench` exports (moto).
const S3_VAR: &str = "KORVUS_TEST_S3_ENDPOINT";

/// Writes `count` files of `size` bytes, 1 MiB at a time.
pub(crate) fn big_tree(dir: &Path, count: usize, size: usize) -> Result<Vec<PathBuf>> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    let mut block = vec![0u8; 1024 * 1024];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut files = Vec::new();
    for i in 0..count {
        let path = dir.join(format!("dump-{i}.bin"));
        let mut file = std::fs::File::create(&path)?;
        files.push(path);
        let mut left = size;
        while left > 0 {
            for chunk in block.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
            }
            let n = left.min(block.len());
            file.write_all(&block[..n])?;
            left -= n;
        }
    }
    Ok(files)
}

/// A `kB` field of `/proc/self/status`, in MiB.
pub(crate) fn status_mib(field: &str) -> Result<f64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .with_context(|| format!("no {field} in /proc/self/status"))?;
    let kb: f64 = line
        .split_whitespace()
        .nth(1)
        .context("no value")?
        .parse()?;
    Ok(kb / 1024.0)
}

/// Resets the process's peak resident set (`VmHWM`) to its current size.
pub(crate) fn reset_peak() -> Result<()> {
    std::fs::write("/proc/self/clear_refs", "5").context("resetting VmHWM")
}

fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

/// Benchmark 12: two 1 GiB files to `FsBlobStore`: the peak resident
/// memory the persist phase adds, and its time against `cp -r` + `sync`.
pub(crate) async fn persist_large(b: &mut Bench) -> Result<Vec<Row>> {
    let (count, size, runs) = if b.quick {
        (2, 64 << 20, 1)
    } else {
        (2, 1 << 30, 2)
    };
    let src = b.work.join("large-src");
    let files = big_tree(&src, count, size)?;
    run(&mut Command::new("sync"))?;
    let (mut times, mut plain, mut memory) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        let ours_dir = b.work.join(format!("large-ours-{i}"));
        let cp_dir = b.work.join(format!("large-cp-{i}"));
        let hash_dir = b.work.join(format!("large-cp-hash-{i}"));
        let cp = copy_baseline(&src, &cp_dir, &files, false)?;
        clean_up(&[&cp_dir])?;
        let cp_hash = copy_baseline(&src, &hash_dir, &files, true)?;
        clean_up(&[&hash_dir])?;
        reset_peak()?;
        let before = status_mib("VmRSS:")?;
        let blobs = Arc::new(FsBlobStore::open(&ours_dir)?);
        let ours = persist_tree(blobs, &src, count).await?;
        let peak = status_mib("VmHWM:")?;
        clean_up(&[&ours_dir])?;
        times.push((cp_hash, ours));
        plain.push((cp, ours));
        memory.push(((count * size) as f64 / f64::from(1 << 20), peak - before));
    }
    let _ = std::fs::remove_dir_all(&src);
    let label = format!("{count} × {} MiB", size >> 20);
    Ok(vec![
        Row::paired(
            format!("12 persist {label} to files: peak RSS growth"),
            "bytes persisted",
            "VmHWM − VmRSS before",
            "MiB",
            &memory,
            Goal::ValueAtMost {
                max: 64.0,
                ratio_max: None,
            },
        )
        .note("peak resident set of the bench process during the persist phase (VmHWM reset through /proc/self/clear_refs) minus its resident set before; files from 4 MiB on are hashed, then streamed in 1 MiB chunks"),
        Row::paired(
            format!("12 persist {label} to files: time"),
            "cp -r + openssl dgst -sha256 + sync",
            "persist → FsBlobStore",
            "ms",
            &times,
            Goal::RatioAtMost { max: 1.3 },
        )
        .note("the same bytes copied, hashed and made durable on both sides; each side's clean-up flushed with sync before the next"),
        Row::paired(
            format!("12 persist {label} to files: time, against cp -r + sync (the baseline before F23)"),
            "cp -r + sync",
            "persist → FsBlobStore",
            "ms",
            &plain,
            Goal::None,
        )
        .note("the same runs; this baseline hashes nothing"),
    ])
}

/// A store with `sessions` sessions, and `keys_each` orphan keys under
/// each in `blobs` (no row references them).
async fn orphans(
    blobs: &dyn BlobStore,
    sessions: usize,
    keys_each: usize,
) -> Result<Arc<MemoryStore>> {
    let store = Arc::new(MemoryStore::new());
    let incident = store
        .create_incident(NewIncident {
            title: "sweep".into(),
            workspace: None,
        })
        .await?;
    for _ in 0..sessions {
        let s = store
            .create_session(NewSession {
                runner: None,
                admission: Default::default(),
                lease: None,
                id: SessionId::new(),
                incident_id: incident.id,
                prompt: "sweep".into(),
                workspace_ref: None,
            })
            .await?;
        // Settled: a running session would keep its keys as a live run's.
        let settled = Settlement {
            status: SessionStatus::Completed,
            exit_reason: Some("completed".into()),
            counters: Counters::default(),
            fence: s.fence,
        };
        store.settle_session(s.id, settled).await?;
        let puts = (0..keys_each).map(|_| {
            let key = artifact_key(
                incident.id.as_uuid(),
                s.id.as_uuid(),
                uuid::Uuid::now_v7(),
                "out.txt",
            );
            let options =
                PutOptions::for_bytes("text/plain", b"orphan").durability(Durability::AtBarrier);
            async move {
                blobs
                    .put(&key, Bytes::from_static(b"orphan"), options)
                    .await
            }
        });
        for result in futures::future::join_all(puts).await {
            result?;
        }
    }
    blobs.barrier().await?;
    Ok(store)
}

/// One list of everything (the baseline) and one applied sweep that
/// deletes every key (ours), in milliseconds.
async fn sweep_once(
    blobs: &dyn BlobStore,
    sessions: usize,
    keys_each: usize,
) -> Result<(f64, f64)> {
    let store = orphans(blobs, sessions, keys_each).await?;
    let t = Instant::now();
    let listed = blobs.list(None).await?.len();
    let list = ms(t.elapsed());
    let config = {
        let mut v = SweepConfig::default();
        v.apply = true;
        v
    };
    let later = SystemTime::now() + 2 * Duration::from_secs(24 * 60 * 60);
    let t = Instant::now();
    let report = sweep(&*store, blobs, &config, later).await?;
    let swept = ms(t.elapsed());
    let orphans = usize::try_from(report.orphan_count)?;
    if orphans != sessions * keys_each || listed != orphans {
        bail!("swept {orphans} of {listed} keys");
    }
    Ok((list, swept))
}

/// Benchmark 13: sweeper throughput on `FsBlobStore` and on S3 (moto).
pub(crate) async fn sweep_throughput(b: &mut Bench) -> Result<Vec<Row>> {
    let (fs_shape, s3_shape, runs) = if b.quick {
        ((10, 20), (4, 10), 1)
    } else {
        ((100, 100), (20, 50), 3)
    };
    let mut fs_pairs = Vec::new();
    for i in 0..runs {
        let root = b.work.join(format!("sweep-fs-{i}"));
        let blobs = FsBlobStore::open(&root)?;
        fs_pairs.push(sweep_once(&blobs, fs_shape.0, fs_shape.1).await?);
        let _ = std::fs::remove_dir_all(&root);
    }
    let endpoint = std::env::var(S3_VAR).with_context(|| {
        format!(
            "{S3_VAR} is not set: run the benchmarks with `cargo xtask bench`, which starts moto"
        )
    })?;
    let mut s3_pairs = Vec::new();
    for _ in 0..runs {
        let bucket = format!("korvus-sweep-{}", uuid::Uuid::now_v7().simple());
        let store = S3BlobStore::builder(&bucket, S3Credentials::fixed("benchkey", "benchsecret"))
            .endpoint_url(&endpoint)
            .force_path_style(true)
            .region("us-east-1")
            .build()
            .await?;
        store
            .client()
            .create_bucket()
            .bucket(&bucket)
            .send()
            .await?;
        s3_pairs.push(sweep_once(&store, s3_shape.0, s3_shape.1).await?);
    }
    let keys_per_s = |pairs: &[(f64, f64)], keys: usize| {
        let mut rates: Vec<f64> = pairs.iter().map(|p| keys as f64 / (p.1 / 1e3)).collect();
        rates.sort_by(f64::total_cmp);
        rates[rates.len() / 2]
    };
    let fs_keys = fs_shape.0 * fs_shape.1;
    let s3_keys = s3_shape.0 * s3_shape.1;
    Ok(vec![
        Row::paired(
            format!("13 sweep {fs_keys} orphan keys on FsBlobStore"),
            "list only",
            "sweep --apply",
            "ms",
            &fs_pairs,
            Goal::None,
        )
        .note(format!(
            "{} sessions × {} keys, every key an orphan (deleted); median {:.0} keys/s; ours = list a page of 1,000 keys, read its sessions' rows (MemoryStore), delete its orphans in one delete_many",
            fs_shape.0,
            fs_shape.1,
            keys_per_s(&fs_pairs, fs_keys)
        )),
        Row::paired(
            format!("13 sweep {s3_keys} orphan keys on S3 (moto)"),
            "list only",
            "sweep --apply",
            "ms",
            &s3_pairs,
            Goal::None,
        )
        .note(format!(
            "{} sessions × {} keys on moto (one CPU core, so deletes barely overlap); median {:.0} keys/s",
            s3_shape.0,
            s3_shape.1,
            keys_per_s(&s3_pairs, s3_keys)
        )),
    ])
}
