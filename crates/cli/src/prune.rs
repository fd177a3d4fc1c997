//! `korvus prune`: deletes finished sessions older than a cut-off — rows,
//! then turn log, then blobs — and counts what it skipped. Dry run unless
//! `--apply`.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use chrono::{DateTime, NaiveDate, Utc};
use clap::Args;
use korvus_session::{PruneConfig, PruneReport, PruneTargets};

use crate::compose::Backends;
use crate::inspect::human_bytes;
use crate::Global;

/// The arguments of `korvus prune`.
#[derive(Debug, Args)]
pub(crate) struct PruneArgs {
    /// Prune sessions that ended before this: a date (`2026-11-01`, UTC
    /// midnight), a time (`2026-11-01T12:00:00Z`) or an age (`30d`, `12h`,
    /// `90m`, `45s`, `2w`: that long ago).
    #[arg(long, value_name = "DATE|AGE", value_parser = parse_cutoff)]
    finished_before: SystemTime,
    /// Delete them (without it: count them and their bytes).
    #[arg(long)]
    apply: bool,
}

/// Runs one prune and prints what it found (and deleted).
pub(crate) async fn prune(global: &Global, args: PruneArgs) -> Result<ExitCode> {
    let backends = Backends::open(global).await?;
    let config = PruneConfig::new(args.finished_before, args.apply);
    let targets = PruneTargets {
        store: backends.store.as_store(),
        logs: &*backends.logs,
        blobs: &*backends.blobs,
    };
    let report = korvus_session::prune(targets, &config)
        .await
        .context("prune stopped; the sessions pruned before the failure stay pruned")?;
    print_report(&report, args.finished_before);
    backends.close().await;
    Ok(if report.failure_count == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_report(report: &PruneReport, cutoff: SystemTime) {
    let verb = if report.applied { "pruned" } else { "to prune" };
    println!(
        "{} session(s) {verb}, ended before {}: {} blob(s), {}",
        report.pruned,
        DateTime::<Utc>::from(cutoff).format("%Y-%m-%dT%H:%M:%SZ"),
        report.pruned_blobs,
        human_bytes(report.pruned_bytes)
    );
    println!(
        "kept {} of {} examined: {} ended later, {} running, {} queued, \
         {} waiting for the user, {} reopened meanwhile, {} inherited by a kept session",
        report.examined - report.pruned,
        report.examined,
        report.recent,
        report.active,
        report.queued,
        report.waiting,
        report.raced,
        report.inherited
    );
    if report.orphan_logs > 0 {
        let verb = if report.applied {
            "deleted"
        } else {
            "to delete"
        };
        println!(
            "{} turn log(s) of sessions already gone {verb}",
            report.orphan_logs
        );
    }
    for (what, cause) in &report.failures {
        println!("  NOT deleted {what}: {cause}");
    }
    if report.failure_count > report.failures.len() as u64 {
        println!(
            "  … and {} more not deleted",
            report.failure_count - report.failures.len() as u64
        );
    }
    if !report.applied {
        // The same cut-off as a time, so the hint runs as printed (an age
        // would have moved on by then).
        println!(
            "dry run: `korvus prune --finished-before {} --apply` deletes them",
            DateTime::<Utc>::from(cutoff).format("%Y-%m-%dT%H:%M:%SZ")
        );
    }
}

/// A cut-off: an RFC 3339 time, a date (UTC midnight) or an age.
fn parse_cutoff(text: &str) -> Result<SystemTime, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc).into());
    }
    if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        let midnight = d.and_hms_opt(0, 0, 0).expect("midnight exists");
        return Ok(midnight.and_utc().into());
    }
    let age = parse_age(text).ok_or_else(|| {
        format!(
            "{text:?} is not a date (2026-11-01), a time (2026-11-01T12:00:00Z) or an age (30d)"
        )
    })?;
    SystemTime::now()
        .checked_sub(age)
        .ok_or_else(|| format!("{text:?} reaches before the epoch"))
}

/// `30d`, `12h`, `90m`, `45s`, `2w`.
fn parse_age(text: &str) -> Option<Duration> {
    let unit = text.chars().last()?;
    let number = &text[..text.len() - unit.len_utf8()];
    let n: u64 = number.parse().ok()?;
    let secs = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        'w' => 7 * 86_400,
        _ => return None,
    };
    n.checked_mul(secs).map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::{parse_age, parse_cutoff};
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    #[test]
    fn ages_dates_and_times_parse_and_nonsense_does_not() {
        assert_eq!(parse_age("30d"), Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse_age("2w"), Some(Duration::from_secs(14 * 86_400)));
        assert_eq!(parse_age("45s"), Some(Duration::from_secs(45)));
        for bad in [
            "",
            "d",
            "30",
            "30x",
            "-3d",
            "3.5h",
            "99999999999999999999w",
            "30д",
            "д",
        ] {
            assert_eq!(parse_age(bad), None, "{bad}");
            assert!(parse_cutoff(bad).is_err(), "{bad}");
        }
        let day = parse_cutoff("2026-11-01").unwrap();
        assert_eq!(
            day.duration_since(UNIX_EPOCH).unwrap().as_secs(),
            1_793_491_200
        );
        let time = parse_cutoff("2026-11-01T01:00:00+01:00").unwrap();
        assert_eq!(time, day);
        let ago = parse_cutoff("1h").unwrap();
        let expected = SystemTime::now() - Duration::from_secs(3600);
        assert!(expected.duration_since(ago).unwrap_or_default() < Duration::from_secs(5));
    }
}
