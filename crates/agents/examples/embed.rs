//! Embedding korvus: a `Manager` on SQLite + local files, one session with
//! a command-line agent, waited for to its end.
//!
//! Dependencies (`Cargo.toml` of your service):
//!
//! ```toml
//! [dependencies]
//! anyhow = "1"
//! # Until korvus is released: the path of a clone (then `korvus-agents = "0.1"`).
//! korvus-agents = { path = "../korvus/crates/agents" }
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! Run it from this repository: `cargo run -p korvus-agents --example embed
//! -- <data dir> <agent program>` (e.g. `crates/cli/demo/agent.sh`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use korvus_agents::{
    migrate, open_sqlite, CommandRunner, CreateSession, FsBlobStore, Manager, NewIncident,
    ScratchRoot, SessionStatus, SqliteLog, SqliteStore,
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let data = PathBuf::from(args.next().unwrap_or_else(|| "./korvus-data".into()));
    let agent = args
        .next()
        .unwrap_or_else(|| "crates/cli/demo/agent.sh".into());
    // The agent runs in its session's scratch dir: a relative path is made
    // absolute here, against this process's working directory.
    let agent = std::fs::canonicalize(&agent)
        .map_err(|e| anyhow::anyhow!("agent program {}: {e}", PathBuf::from(&agent).display()))?;

    // The data dir first: SQLite does not create the directory of its file.
    std::fs::create_dir_all(data.join("scratch"))?;
    let pool = open_sqlite(&data.join("korvus.db")).await?;
    migrate(&pool).await?; // idempotent; run at start-up

    let manager = Manager::builder(
        Arc::new(SqliteStore::new(pool.clone())),
        Arc::new(CommandRunner::new(agent)),
    )
    .turn_log(Arc::new(SqliteLog::new(pool.clone())))
    .blob_store(Arc::new(FsBlobStore::open(data.join("blobs"))?))
    .scratch_root(ScratchRoot::supplied(data.join("scratch")))
    .run_timeout(Duration::from_secs(3600)) // exit reason `timeout`
    .build();

    let incident = manager
        .store()
        .create_incident(NewIncident {
            title: "db-1 disk full".into(),
            workspace: None,
        })
        .await?;
    let session = manager
        .create(CreateSession::new(incident.id, "why is db-1's disk full?"))
        .await?; // returns the `running` row at once
    let done = manager
        .await_settled(session.id, Duration::from_secs(3600))
        .await?;
    let reason = done.exit_reason.as_deref().unwrap_or("none");
    println!("session {}: {} ({reason})", done.id, done.status);
    // Why it did not complete: the revision's report row says.
    let report = manager.store().get_report(done.id, done.revision).await?;
    let cause = report.detail.clone();

    manager.stop().await; // cancel and join every run …
    pool.close().await; // … before the pool closes
    if done.status != SessionStatus::Completed {
        anyhow::bail!(
            "the session ended {} ({reason}): {}",
            done.status,
            cause
                .as_deref()
                .unwrap_or("no detail in its report row; see its turn log")
        );
    }
    Ok(())
}
