//! `korvus sweep`: finds blobs no row references (a failed row batch, a
//! persist cut short, a superseded run's late upload) and, with `--apply`,
//! deletes the ones older than the grace period.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use korvus_harvest::{SweepConfig, SweepReport};

use crate::compose::Backends;
use crate::inspect::human_bytes;
use crate::Global;

/// Orphans listed one by one; the rest are counted.
const LISTED: usize = 50;

/// Runs one sweep and prints what it found (and deleted).
pub(crate) async fn sweep(global: &Global, apply: bool, grace: Duration) -> Result<ExitCode> {
    let backends = Backends::open(global).await?;
    let config = {
        let mut v = SweepConfig::default();
        v.grace = grace;
        v.apply = apply;
        v
    };
    let report = korvus_harvest::sweep(
        &*backends.store,
        &*backends.blobs,
        &config,
        SystemTime::now(),
    )
    .await
    .context(
        "sweep failed; orphans of the pages listed before the failure may have been deleted",
    )?;
    print_report(&report, grace);
    backends.close().await;
    Ok(if report.failed_count == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_report(report: &SweepReport, grace: Duration) {
    let verb = if report.applied {
        "deleted"
    } else {
        "to delete"
    };
    println!(
        "{} orphan blob(s), {} {verb}: unreferenced, older than {}s, no live run",
        report.orphan_count,
        human_bytes(report.orphan_bytes),
        grace.as_secs()
    );
    for orphan in report.orphans.iter().take(LISTED) {
        println!(
            "  {}  {}  {}s old",
            orphan.key,
            human_bytes(orphan.size),
            orphan.age_secs
        );
    }
    if report.orphan_count > LISTED as u64 {
        println!("  … and {} more", report.orphan_count - LISTED as u64);
    }
    println!(
        "kept {} of {} listed: {} referenced, {} younger than the grace period, \
         {} of live runs, {} outside korvus's key layout",
        report.listed - report.orphan_count,
        report.listed,
        report.referenced,
        report.young,
        report.live,
        report.foreign
    );
    for (key, cause) in &report.failed {
        println!("  NOT deleted {key}: {cause}");
    }
    if report.failed_count > report.failed.len() as u64 {
        println!(
            "  … and {} more not deleted",
            report.failed_count - report.failed.len() as u64
        );
    }
    println!(
        "{} page(s) listed, {} batch delete(s)",
        report.pages, report.delete_batches
    );
    if !report.applied {
        println!("dry run: `korvus sweep --apply` deletes the orphans");
    }
}
