//! Benchmark 20: restoring a large artifact on reopen. A 1 GiB file (64 MiB
//! under `--quick`) persisted to `FsBlobStore` by the harvest, then restored
//! into a fresh scratch dir of the session (`restore_own_output`, as a
//! reopen does): the peak resident memory the restore adds, and its time.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use korvus_blob::FsBlobStore;
use korvus_store::StoreExt as _;
use korvus_workspace::{restore_own_output, ScratchRoot};

use crate::files::target;
use crate::large::{big_tree, reset_peak, status_mib};
use crate::report::{Goal, Row};
use crate::sql::ms;
use crate::Bench;

pub(crate) async fn restore_large(b: &mut Bench) -> Result<Vec<Row>> {
    let size: usize = if b.quick { 64 << 20 } else { 1 << 30 };
    let src = b.work.join("restore-src");
    big_tree(&src, 1, size)?;
    let blobs = Arc::new(FsBlobStore::open(b.work.join("restore-blobs"))?);
    let t = target().await?;
    let outcome = t.persist(blobs.clone(), &src).await;
    if outcome.stored.len() != 1 || !outcome.rows_written {
        bail!(
            "persist failed: {}",
            outcome.error_text().unwrap_or_default()
        );
    }
    let _ = std::fs::remove_dir_all(&src);
    let artifacts = t.store.all_session_artifacts(t.session).await?;
    let root = b.work.join("restore-scratch");
    std::fs::create_dir_all(&root)?;
    let dir = ScratchRoot::supplied(&root)
        .create_iteration(t.session, 2)
        .await?;
    reset_peak()?;
    let before = status_mib("VmRSS:")?;
    let started = Instant::now();
    let out = restore_own_output(&dir, &artifacts, &[], &*blobs).await;
    let took = ms(started.elapsed());
    let peak = status_mib("VmHWM:")?;
    if out.restored.len() != 1 || !out.failed.is_empty() {
        bail!("restore failed: {:?}", out.failed);
    }
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_dir_all(b.work.join("restore-blobs"));
    let mib = size as f64 / f64::from(1 << 20);
    Ok(vec![Row::paired(
        format!("20 restore of a {mib:.0} MiB artifact on reopen: peak RSS growth"),
        "MiB restored",
        "VmHWM − VmRSS before",
        "MiB",
        &[(mib, peak - before)],
        Goal::ValueAtMost {
            max: 64.0,
            ratio_max: None,
        },
    )
    .note(format!(
        "FsBlobStore → a fresh scratch dir (restore_own_output): read 1 MiB at a time, written and \
         hashed on a blocking thread, checked against the row's digest; took {took:.0} ms"
    ))])
}
