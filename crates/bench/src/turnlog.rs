//! Benchmark 5: the turn log. `JsonlLog` against writing the same bytes with
//! `BufWriter` + `fsync`; `PgLog` and `SqliteLog` throughput in batches of 100.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use korvus_log::{Event, EventKind, JsonlLog, LogHeader, LogId, Role, TurnLog};
use korvus_store_sql::{migrate, open_sqlite, PgLog, SqliteLog};

use crate::pg::Db;
use crate::report::{Goal, Row};
use crate::sql::ms;
use crate::Bench;

const BATCH: usize = 100;

fn events(n: usize) -> Vec<Event> {
    (0..n)
        .map(|i| {
            let turn = (i / 3) as u64;
            Event::new(match i % 3 {
                0 => EventKind::TurnStart { turn },
                1 => EventKind::Message {
                    role: Role::Assistant,
                    text: format!("looking at step {i}"),
                },
                _ => EventKind::TurnEnd {
                    turn,
                    interrupted: false,
                },
            })
        })
        .collect()
}

fn header() -> LogHeader {
    LogHeader::new(LogId::from_uuid(uuid::Uuid::now_v7()))
}

/// Appends `events` in slices of `batch` through `log`, then flushes;
/// returns milliseconds including the log's creation.
async fn through(log: &dyn TurnLog, events: &[Event], batch: usize) -> Result<f64> {
    let t = Instant::now();
    let handle = log.create(header()).await?;
    for chunk in events.chunks(batch) {
        handle.append(chunk).await?;
    }
    handle.flush().await?;
    let elapsed = ms(t.elapsed());
    handle.close().await?;
    Ok(elapsed)
}

/// The baseline before F23: the same header and event lines, serialised
/// before the clock starts, through a `BufWriter`, then `fsync`
/// (`sync_data`, as `JsonlLog::flush` does).
fn buffered(path: &Path, lines: &[Vec<u8>]) -> Result<f64> {
    let t = Instant::now();
    let file = std::fs::File::create(path)?;
    let mut w = std::io::BufWriter::new(file);
    for line in lines {
        w.write_all(line)?;
    }
    let file = w.into_inner().map_err(|e| e.into_error())?;
    file.sync_data()?;
    Ok(ms(t.elapsed()))
}

/// The fair baseline: the file created as durably as `JsonlLog::create`
/// creates it (the header line written and `fsync`ed, then the directory
/// `fsync`ed), each event serialised inside the clock into a `BufWriter`,
/// then `fsync`.
fn fair(path: &Path, events: &[Event]) -> Result<f64> {
    let t = Instant::now();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .open(path)?;
    let mut line = serde_json::to_vec(&header())?;
    line.push(b'\n');
    file.write_all(&line)?;
    file.sync_data()?;
    std::fs::File::open(path.parent().context("no parent")?)?.sync_all()?;
    let mut w = std::io::BufWriter::new(file);
    for e in events {
        serde_json::to_writer(&mut w, e)?;
        w.write_all(b"\n")?;
    }
    let file = w.into_inner().map_err(|e| e.into_error())?;
    file.sync_data()?;
    Ok(ms(t.elapsed()))
}

pub(crate) async fn turn_log(b: &mut Bench) -> Result<Vec<Row>> {
    let (n, runs, sql_runs) = if b.quick {
        (1_000, 2, 1)
    } else {
        (100_000, 5, 3)
    };
    let events = events(n);
    let mut lines = vec![{
        let mut l = serde_json::to_vec(&header())?;
        l.push(b'\n');
        l
    }];
    for e in &events {
        let mut l = serde_json::to_vec(e)?;
        l.push(b'\n');
        lines.push(l);
    }
    let dir = b.work.join("turnlog");
    let _ = std::fs::remove_dir_all(&dir);
    let jsonl = JsonlLog::open_dir(dir.join("jsonl"))?;
    let mut single = Vec::new();
    let mut batched = Vec::new();
    let mut single_old = Vec::new();
    let mut batched_old = Vec::new();
    for i in 0..runs {
        let old_path = dir.join(format!("baseline-{i}.jsonl"));
        let fair_path = dir.join(format!("fair-{i}.jsonl"));
        let (base, old, one, hundred) = if i % 2 == 0 {
            let one = through(&jsonl, &events, 1).await?;
            let hundred = through(&jsonl, &events, BATCH).await?;
            let base = fair(&fair_path, &events)?;
            (base, buffered(&old_path, &lines)?, one, hundred)
        } else {
            let old = buffered(&old_path, &lines)?;
            let base = fair(&fair_path, &events)?;
            let hundred = through(&jsonl, &events, BATCH).await?;
            (base, old, through(&jsonl, &events, 1).await?, hundred)
        };
        single.push((base, one));
        batched.push((base, hundred));
        single_old.push((old, one));
        batched_old.push((old, hundred));
    }
    let per_s = |ms: f64| n as f64 / (ms / 1e3);
    let jsonl_batched_rate: Vec<f64> = batched.iter().map(|p| per_s(p.1)).collect();

    let mut pg_pairs = Vec::new();
    {
        let db = Db::create("log").await?;
        let pool = db.pool(4).await?;
        let log = PgLog::new(pool.clone());
        through(&log, &events[..BATCH.min(n)], BATCH).await?; // prepare statements
        for i in 0..sql_runs {
            let ours = through(&log, &events, BATCH).await?;
            pg_pairs.push((jsonl_batched_rate[i % runs], per_s(ours)));
        }
        pool.close().await;
        db.drop_db().await?;
    }
    let mut sqlite_pairs = Vec::new();
    {
        let pool = open_sqlite(&dir.join("log.db")).await?;
        migrate(&pool).await?;
        let log = SqliteLog::new(pool.clone());
        through(&log, &events[..BATCH.min(n)], BATCH).await?;
        for i in 0..sql_runs {
            let ours = through(&log, &events, BATCH).await?;
            sqlite_pairs.push((jsonl_batched_rate[i % runs], per_s(ours)));
        }
        pool.close().await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(vec![
        Row::paired(
            format!("5 turn log: {n} events, one append each, then flush"),
            "BufWriter + fsync, serialising",
            "JsonlLog",
            "ms",
            &single,
            Goal::RatioAtMost { max: 2.0 },
        )
        .note("same events and bytes; the baseline creates its file as durably as JsonlLog does (header fsync, directory fsync) and serialises each event inside the clock; A/B alternated; includes the final fsync"),
        Row::paired(
            format!("5 turn log: {n} events, appends of {BATCH}, then flush"),
            "BufWriter + fsync, serialising",
            "JsonlLog",
            "ms",
            &batched,
            Goal::RatioAtMost { max: 1.2 },
        ),
        Row::paired(
            format!("5 turn log: {n} events, one append each, against the baseline before F23"),
            "BufWriter + fsync, pre-serialised",
            "JsonlLog",
            "ms",
            &single_old,
            Goal::None,
        )
        .note("the same runs; this baseline got its bytes serialised before the clock and created its file without fsync; its goal was 2×"),
        Row::paired(
            format!("5 turn log: {n} events, appends of {BATCH}, against the baseline before F23"),
            "BufWriter + fsync, pre-serialised",
            "JsonlLog",
            "ms",
            &batched_old,
            Goal::None,
        )
        .note("its goal was 1.2×"),
        Row::paired(
            format!("5 turn log: PgLog, appends of {BATCH}"),
            "JsonlLog appends of 100",
            "PgLog",
            "events/s",
            &pg_pairs,
            Goal::None,
        )
        .note("throughput, higher is better; ratio = PgLog / JsonlLog events/s; the throwaway cluster runs with fsync=off"),
        Row::paired(
            format!("5 turn log: SqliteLog, appends of {BATCH}"),
            "JsonlLog appends of 100",
            "SqliteLog",
            "events/s",
            &sqlite_pairs,
            Goal::None,
        )
        .note("throughput, higher is better; WAL with synchronous=FULL (open_sqlite), one transaction per append"),
    ])
}

/// `korvus-bench profile jsonl-*`: only the `JsonlLog` side, for a profiler.
pub(crate) async fn profile(dir: &Path, n: usize, batch: usize) -> Result<()> {
    let log = JsonlLog::open_dir(dir)?;
    let ms = through(&log, &events(n), batch).await?;
    eprintln!("{n} events in appends of {batch}: {ms:.1} ms");
    Ok(())
}
