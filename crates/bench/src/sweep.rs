//! Benchmark 22: the orphan-blob sweeper over 1,000,000 keys (20,000
//! under `--quick`), every key an orphan, on `FsBlobStore` and on an S3
//! stand-in that serves a synthetic listing after 30 ms a request: the
//! peak resident memory the sweep adds (bounded by its page, whatever the
//! count), the requests it made and its time.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Result};
use korvus_blob::{BlobStore, FsBlobStore};
use korvus_blob_s3::{S3BlobStore, S3Credentials};
use korvus_harvest::{sweep, SweepConfig, SweepReport, SWEEP_PAGE};
use korvus_store::MemoryStore;

use crate::large::{reset_peak, status_mib};
use crate::report::{Goal, Row};
use crate::s3listing::{key_at, ListingStub};
use crate::s3stub::S3_LATENCY;
use crate::Bench;

/// The most resident memory a sweep may add, in MiB: a page of metadata
/// is well under 1 MiB; the rest is allocator slack.
const MAX_GROWTH_MIB: f64 = 32.0;

pub(crate) async fn sweep_at_scale(b: &mut Bench) -> Result<Vec<Row>> {
    let keys: u64 = if b.quick { 20_000 } else { 1_000_000 };
    Ok(vec![fs_case(b, keys).await?, s3_case(keys).await?])
}

/// Sweeps with every key two days old, applied; the peak RSS it adds.
async fn measured(blobs: &dyn BlobStore) -> Result<(SweepReport, f64, f64)> {
    let store = MemoryStore::new();
    let config = {
        let mut v = SweepConfig::default();
        v.apply = true;
        v
    };
    let later = SystemTime::now() + 2 * Duration::from_secs(24 * 60 * 60);
    reset_peak()?;
    let before = status_mib("VmRSS:")?;
    let started = Instant::now();
    let report = sweep(&store, blobs, &config, later).await?;
    let secs = started.elapsed().as_secs_f64();
    Ok((report, status_mib("VmHWM:")? - before, secs))
}

/// The row of one backend's sweep: its peak RSS growth against the goal.
fn growth_row(backend: &str, keys: u64, growth: f64) -> Row {
    Row::paired(
        format!("22 sweep of {keys} orphan keys on {backend}: peak RSS growth"),
        "keys",
        "VmHWM − VmRSS before",
        "MiB",
        &[(keys as f64, growth)],
        Goal::ValueAtMost {
            max: MAX_GROWTH_MIB,
            ratio_max: None,
        },
    )
}

fn check(report: &SweepReport, keys: u64) -> Result<()> {
    if report.orphan_count != keys || report.listed != keys || report.failed_count != 0 {
        bail!(
            "swept {} orphans of {} listed ({} failed), for {keys} keys",
            report.orphan_count,
            report.listed,
            report.failed_count
        );
    }
    Ok(())
}

async fn fs_case(b: &Bench, keys: u64) -> Result<Row> {
    let root = b.work.join("sweep-scale-fs");
    let blobs = FsBlobStore::open(&root)?;
    // Empty files straight into the store's `objects/` tree (no metadata
    // files, which the store treats as unknown content type and digest):
    // a million puts would measure the puts.
    let objects = root.join("objects");
    tokio::task::spawn_blocking(move || -> Result<()> {
        for i in 0..keys {
            let path = objects.join(key_at(i));
            if i % crate::s3listing::KEYS_PER_SESSION == 0 {
                std::fs::create_dir_all(path.parent().expect("a parent"))?;
            }
            std::fs::File::create(path)?;
        }
        Ok(())
    })
    .await??;
    let (report, growth, secs) = measured(&blobs).await?;
    let _ = std::fs::remove_dir_all(&root);
    check(&report, keys)?;
    Ok(growth_row("FsBlobStore", keys, growth).note(format!(
        "1,000 keys a session directory; the sweep walks {SWEEP_PAGE} keys a page (list_page), \
         reads each page's sessions, deletes each page's orphans in one delete_many: {} pages, \
         {} batch deletes, {secs:.1} s ({:.0} keys/s)",
        report.pages,
        report.delete_batches,
        keys as f64 / secs
    )))
}

async fn s3_case(keys: u64) -> Result<Row> {
    let stub = ListingStub::start(keys, S3_LATENCY).await?;
    let store = S3BlobStore::builder("korvus-bench", S3Credentials::fixed("k", "s"))
        .endpoint_url(&stub.endpoint)
        .force_path_style(true)
        .region("us-east-1")
        .build()
        .await?;
    let store: Arc<dyn BlobStore> = Arc::new(store);
    let (report, growth, secs) = measured(&*store).await?;
    check(&report, keys)?;
    let c = &stub.counts;
    let (lists, deletes) = (
        c.lists.load(Ordering::Relaxed),
        c.deletes.load(Ordering::Relaxed),
    );
    let named = c.keys_deleted.load(Ordering::Relaxed);
    if named != keys || c.other.load(Ordering::Relaxed) != 0 {
        bail!("the stand-in was asked to delete {named} keys of {keys}");
    }
    Ok(growth_row("S3 (stand-in)", keys, growth).note(format!(
        "an in-process stand-in serving a synthetic listing (nothing stored), {} ms a request: \
         {lists} ListObjectsV2 and {deletes} DeleteObjects requests ({named} keys named), \
         {secs:.1} s",
        S3_LATENCY.as_millis()
    )))
}
