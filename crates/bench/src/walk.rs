//! Benchmark 21: an agent that leaves 5,000,000 empty files (20,000 under
//! `--quick`) in 1,000 directories beside its `report.md`: the harvest's
//! persist phase, to `FsBlobStore`, must hold a bounded list whatever the
//! count — the peak resident memory it adds — still store the report, and
//! say in its manifest how many skipped entries it only counted.

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use korvus_blob::FsBlobStore;
use korvus_harvest::{ReportFile, MAX_LISTED_SKIPS};

use crate::files::target;
use crate::large::{reset_peak, status_mib};
use crate::report::{Goal, Row};
use crate::sql::ms;
use crate::Bench;

const DIRS: usize = 1_000;

pub(crate) async fn many_empty_files(b: &mut Bench) -> Result<Vec<Row>> {
    let files: usize = if b.quick { 20_000 } else { 5_000_000 };
    let src = b.work.join("empty-src");
    let fill = Instant::now();
    {
        let src = src.clone();
        tokio::task::spawn_blocking(move || -> Result<()> {
            let _ = std::fs::remove_dir_all(&src);
            for d in 0..DIRS {
                let dir = src.join(format!("d{d:04}"));
                std::fs::create_dir_all(&dir)?;
                for f in 0..files / DIRS {
                    std::fs::File::create(dir.join(format!("f{f:05}")))?;
                }
            }
            std::fs::write(src.join("report.md"), "# Found it\n")?;
            Ok(())
        })
        .await??;
    }
    let fill_secs = fill.elapsed().as_secs_f64();
    let blobs = Arc::new(FsBlobStore::open(b.work.join("empty-blobs"))?);
    let t = target().await?;
    reset_peak()?;
    let before = status_mib("VmRSS:")?;
    let started = Instant::now();
    let outcome = t.persist(blobs, &src).await;
    let took = ms(started.elapsed());
    let peak = status_mib("VmHWM:")?;
    let counted = outcome.skipped.len() as u64 + outcome.skipped_unlisted;
    tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&src)).await??;
    let _ = std::fs::remove_dir_all(b.work.join("empty-blobs"));
    if !matches!(outcome.report, ReportFile::Stored { .. }) {
        bail!("the report did not land: {:?}", outcome.report);
    }
    if outcome.skipped.len() != MAX_LISTED_SKIPS || counted != files as u64 {
        bail!(
            "the manifest lists {} and counts {} more skipped entries, for {files} empty files",
            outcome.skipped.len(),
            outcome.skipped_unlisted
        );
    }
    Ok(vec![Row::paired(
        format!("21 harvest of a scratch dir with {files} empty files: peak RSS growth"),
        "MiB (none expected)",
        "VmHWM − VmRSS before",
        "MiB",
        &[(0.0, peak - before)],
        Goal::ValueAtMost {
            max: 256.0,
            ratio_max: None,
        },
    )
    .note(format!(
        "persist phase to FsBlobStore; the report landed; the manifest lists {MAX_LISTED_SKIPS} skipped \
         entries and counts the other {}; the walk took {took:.0} ms (creating the files {fill_secs:.0} s)",
        outcome.skipped_unlisted
    ))])
}
