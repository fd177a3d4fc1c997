//! Benchmark 25: a checkpoint of a scratch dir that did not change since
//! the last one — 10,000 files (1,000 under `--quick`) in 100 directories —
//! must cost about one `stat` walk of the tree: the `Checkpointer` judges
//! every file by its `stat` and stores nothing. Against a bare walk of the
//! same tree that `lstat`s every entry, interleaved.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use korvus_blob::FsBlobStore;
use korvus_harvest::{Checkpointer, PersistConfig, PersistRequest};

use crate::files::target;
use crate::report::{Goal, Row};
use crate::sql::ms;
use crate::Bench;

const DIRS: usize = 100;

pub(crate) async fn unchanged_tree(b: &mut Bench) -> Result<Vec<Row>> {
    let files: usize = if b.quick { 1_000 } else { 10_000 };
    let rounds = if b.quick { 3 } else { 9 };
    let src = b.work.join("checkpoint-src");
    {
        let src = src.clone();
        tokio::task::spawn_blocking(move || -> Result<()> {
            let _ = std::fs::remove_dir_all(&src);
            for d in 0..DIRS {
                let dir = src.join(format!("d{d:03}"));
                std::fs::create_dir_all(&dir)?;
                for f in 0..files / DIRS {
                    std::fs::write(dir.join(format!("f{f:05}.txt")), format!("file {d} {f}\n"))?;
                }
            }
            Ok(())
        })
        .await??;
    }
    let blobs = Arc::new(FsBlobStore::open(b.work.join("checkpoint-blobs"))?);
    let t = target().await?;
    let config = {
        let mut v = PersistConfig::default();
        v.max_files = files;
        v
    };
    let request = PersistRequest {
        incident: t.incident,
        session: t.session,
        revision: 1,
        fence: 1,
        scratch: Some(src.clone()),
        skip_prefixes: Vec::new(),
        restored: Default::default(),
    };
    let mut ck = Checkpointer::new(t.store.clone(), blobs, config, request);
    let first = ck.checkpoint().await;
    if first.stored.len() != files {
        bail!(
            "the first checkpoint stored {} of {files} files",
            first.stored.len()
        );
    }
    // Files written within a second of their read are hashed once more by
    // the next checkpoint (their stat cannot vouch for them yet); that one
    // is not measured.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    ck.checkpoint().await;
    let mut pairs = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let walked = {
            let src = src.clone();
            let started = Instant::now();
            let seen = tokio::task::spawn_blocking(move || stat_walk(&src)).await??;
            if seen != files {
                bail!("the bare walk saw {seen} files");
            }
            ms(started.elapsed())
        };
        let started = Instant::now();
        let outcome = ck.checkpoint().await;
        let took = ms(started.elapsed());
        if !outcome.stored.is_empty() || outcome.unchanged != files as u64 {
            bail!(
                "a checkpoint of an unchanged tree stored {} and judged {} unchanged",
                outcome.stored.len(),
                outcome.unchanged
            );
        }
        pairs.push((walked, took));
    }
    tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&src)).await??;
    let _ = std::fs::remove_dir_all(b.work.join("checkpoint-blobs"));
    Ok(vec![Row::paired(
        format!("25 checkpoint of an unchanged tree of {files} files"),
        "bare stat walk (read_dir + lstat)",
        "Checkpointer::checkpoint",
        "ms",
        &pairs,
        Goal::RatioAtMost { max: 1.5 },
    )
    .note(format!(
        "median of {rounds}, interleaved; nothing stored, every file judged by its stat \
         ({DIRS} directories, memory store, FsBlobStore)"
    ))])
}

/// Walks `dir` recursively, `lstat`ing every entry; returns the regular
/// files seen.
fn stat_walk(dir: &Path) -> std::io::Result<usize> {
    let mut files = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let md = entry.metadata()?;
        if md.is_dir() {
            files += stat_walk(&entry.path())?;
        } else if md.is_file() {
            files += 1;
        }
    }
    Ok(files)
}
