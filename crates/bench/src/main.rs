//! `korvus-bench`: side-by-side ratio benchmarks of korvus, run by
//! `cargo xtask bench [--quick]`.
//!
//! Every figure is a ratio against a baseline measured in the same run on
//! the same machine (which is shared and noisy): medians over repeated runs,
//! with min and max. The benchmarks (`docs/bench.md` explains each):
//!
//! 1. SQL round trips of a whole session lifecycle (counting Store wrapper,
//!    cross-checked by PostgreSQL's own statement log);
//! 2. `Manager::create` latency vs the same SQL through raw sqlx;
//! 3. persist to `FsBlobStore` vs `cp -r` + `openssl dgst -sha256` + `sync`;
//! 4. persist to S3 vs a sequential aws-sdk-s3 put loop;
//! 5. `JsonlLog` vs `BufWriter` + `fsync` serialising in the clock, plus
//!    `PgLog`/`SqliteLog` throughput;
//! 6. resident memory per parked session and the time `stop` takes;
//! 7. the interrupted-turn closers on a long log (linear, not quadratic);
//! 8. an agent's stdout into each turn log vs the same output into a file;
//! 9. a cancel made on another replica, through the store;
//! 10. how long an orphaned session waits to be settled;
//! 11. heartbeat statements, rows and CPU per period at 10,000 runs;
//! 12. persisting two 1 GiB files: extra resident memory and time;
//! 13. the orphan-blob sweeper's throughput;
//! 14. Server-Sent Events fan-out: a thousand subscribers of one session;
//! 15. admission: a burst of creates worked off by 1, 2 and 4 replicas;
//! 16. `create` in an incident with a long history;
//! 17. the first page of each list route over large tables;
//! 18. concurrent turn-log exports: resident memory per download;
//! 19. an SSE reconnect at the end of a long `JsonlLog`;
//! 20. restoring a large artifact on reopen: extra resident memory;
//! 21. an agent that leaves 5,000,000 empty files;
//! 22. the sweeper over 1,000,000 orphan keys (Fs and an S3 stand-in);
//! 23. reopen of a session with a 1,000,000-event log and 1,000 artifacts;
//! 24. a thousand `CommandRunner` sessions of sleeping agents: what each
//!     costs the host (memory, tasks, threads, descriptors);
//! 25. a checkpoint of an unchanged tree of 10,000 files against a bare
//!     `stat` walk of it;
//! 26. checkpoints every 5 s while an agent writes 1,000 files over 60 s,
//!     against the same run without: wall time and CPU;
//! 27. resuming a lost session's run on another replica (see `resume.rs`);
//! 28. a streamed 1 MiB model answer through the model gateway against the
//!     same answer fetched directly: latency to the first and last byte,
//!     CPU per MiB.
//!
//! It writes `report.md` and `report.json` to `--out` (default
//! `target/bench`). PostgreSQL and S3 come from `KORVUS_TEST_DATABASE_URL`
//! and `KORVUS_TEST_S3_ENDPOINT`, which `cargo xtask bench` sets.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use tracing_subscriber::layer::SubscriberExt;

mod admission;
mod cancel;
mod checkpoint;
mod checkpoint_run;
mod closers;
mod command;
mod export;
mod fanout;
mod files;
mod fixtures;
mod gateway;
mod history;
mod large;
mod lease;
mod output;
mod pages;
mod pg;
mod reconnect;
mod reopen;
mod report;
mod restore;
mod resume;
mod runners;
mod s3listing;
mod s3stub;
mod scale;
mod sql;
mod sweep;
mod turnlog;
mod walk;

use crate::pg::StatementCounter;
use crate::report::{Report, Row};

/// What every benchmark gets.
#[derive(Debug)]
pub(crate) struct Bench {
    /// Tiny sizes: checks that everything runs, measures nothing useful.
    pub(crate) quick: bool,
    /// A scratch area for the benchmarks' files (removed at the end).
    pub(crate) work: PathBuf,
    /// Statements PostgreSQL logged back to counted pools.
    pub(crate) statements: StatementCounter,
    /// Free-form details for `report.json`.
    pub(crate) details: serde_json::Map<String, serde_json::Value>,
}

const USAGE: &str = "usage: korvus-bench [--quick] [--out DIR] [--only 1,2,…]";
const PROFILE_USAGE: &str = "usage: korvus-bench profile jsonl-single|jsonl-batch|persist-fs";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("korvus-bench: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("fanout-child") {
        let kind = args.get(1).context(USAGE)?;
        let events = args.get(2).context(USAGE)?.parse()?;
        return fanout::child(kind, events);
    }
    if args.first().map(String::as_str) == Some("admission-child") {
        let name = args.get(1).context(USAGE)?;
        let max = args.get(2).context(USAGE)?.parse()?;
        let work_ms = args.get(3).context(USAGE)?.parse()?;
        return admission::child(name, max, work_ms);
    }
    if args.first().map(String::as_str) == Some("scale-child") {
        let kind = args.get(1).context(USAGE)?;
        let n = args.get(2).context(USAGE)?.parse()?;
        return scale::child(kind, n);
    }
    if args.first().map(String::as_str) == Some("command-child") {
        let n = args.get(1).context(USAGE)?.parse()?;
        let dir = args.get(2).context(USAGE)?;
        return command::child(n, dir);
    }
    if args.first().map(String::as_str) == Some("profile") {
        // Only "ours" of one benchmark, without services, to run under a
        // profiler (perf, valgrind, strace): see docs/bench.md.
        let what = args.get(1).context(PROFILE_USAGE)?.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        return rt.block_on(async {
            let dir = tempfile::tempdir()?;
            match what.as_str() {
                "jsonl-single" => turnlog::profile(dir.path(), 100_000, 1).await,
                "jsonl-batch" => turnlog::profile(dir.path(), 100_000, 100).await,
                "persist-fs" => files::profile_fs(dir.path(), 64, 1024 * 1024).await,
                _ => bail!("{PROFILE_USAGE}"),
            }
        });
    }
    let mut quick = false;
    let mut out = PathBuf::from("target/bench");
    let mut only: Option<Vec<u32>> = None;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--out" => out = PathBuf::from(it.next().context(USAGE)?),
            "--only" => {
                let list = it.next().context(USAGE)?;
                only = Some(
                    list.split(',')
                        .map(|s| s.trim().parse())
                        .collect::<Result<_, _>>()
                        .context(USAGE)?,
                );
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    let statements = StatementCounter::default();
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(statements.clone()),
    )
    .context("installing the statement counter")?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(all(quick, out, only, statements))
}

async fn all(
    quick: bool,
    out: PathBuf,
    only: Option<Vec<u32>>,
    statements: StatementCounter,
) -> Result<()> {
    let started = Instant::now();
    let work = out.join("work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let mut b = Bench {
        quick,
        work: work.clone(),
        statements,
        details: serde_json::Map::new(),
    };
    let wanted = |n: u32| only.as_ref().is_none_or(|o| o.contains(&n));
    let mut rows: Vec<Row> = Vec::new();
    let mut failures = Vec::new();
    for n in 1..=28u32 {
        if !wanted(n) {
            continue;
        }
        let t = Instant::now();
        eprintln!("korvus-bench: {n} …");
        let result = match n {
            1 => sql::round_trips(&mut b).await,
            2 => sql::create_latency(&mut b).await,
            3 => files::persist_fs(&mut b).await,
            4 => files::persist_s3(&mut b).await,
            5 => turnlog::turn_log(&mut b).await,
            6 => scale::scale(&mut b).await,
            7 => closers::closers(&mut b),
            8 => output::agent_output(&mut b).await,
            9 => cancel::cancel_latency(&mut b).await,
            10 => lease::orphan_latency(&mut b).await,
            11 => lease::heartbeat_cost(&mut b).await,
            12 => large::persist_large(&mut b).await,
            13 => large::sweep_throughput(&mut b).await,
            14 => fanout::fanout(&mut b).await,
            15 => admission::admission(&mut b).await,
            16 => history::create_with_history(&mut b).await,
            17 => pages::first_pages(&mut b).await,
            18 => export::export_download(&mut b).await,
            19 => reconnect::sse_reconnect(&mut b).await,
            20 => restore::restore_large(&mut b).await,
            21 => walk::many_empty_files(&mut b).await,
            22 => sweep::sweep_at_scale(&mut b).await,
            23 => reopen::reopen_at_scale(&mut b).await,
            24 => command::command_sessions(&mut b).await,
            25 => checkpoint::unchanged_tree(&mut b).await,
            26 => checkpoint_run::running_agent(&mut b).await,
            27 => resume::resume_latency(&mut b).await,
            _ => gateway::gateway(&mut b).await,
        };
        match result {
            Ok(r) => {
                eprintln!(
                    "korvus-bench: {n} done in {:.1} s",
                    t.elapsed().as_secs_f64()
                );
                rows.extend(r);
            }
            Err(e) => {
                eprintln!("korvus-bench: benchmark {n} failed: {e:#}");
                failures.push(format!("benchmark {n}: {e:#}"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    if !failures.is_empty() {
        b.details
            .insert("failures".into(), serde_json::json!(failures.clone()));
    }
    let report = Report {
        quick,
        started_at_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default(),
        duration_secs: started.elapsed().as_secs_f64(),
        host: format!(
            "{} CPUs",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        ),
        rows,
        details: b.details,
    };
    report.write(&out)?;
    println!("{}", report.markdown());
    eprintln!(
        "korvus-bench: wrote {}/report.md and report.json",
        out.display()
    );
    if !failures.is_empty() {
        bail!(
            "{} benchmark(s) failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
    Ok(())
}
