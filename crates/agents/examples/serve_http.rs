//! Serving korvus over HTTP: the router mounted under `/korvus` behind your
//! own authentication, stopped gracefully on SIGTERM or Ctrl-C — the
//! manager first (its sessions are cancelled and their reports land, and
//! every event stream ends), then the server.
//!
//! Dependencies (`Cargo.toml` of your service):
//!
//! ```toml
//! [dependencies]
//! anyhow = "1"
//! axum = "0.8"
//! # Until korvus is released: the path of a clone (then `korvus-agents = "0.1"`).
//! korvus-agents = { path = "../korvus/crates/agents", features = ["http"] }
//! tokio = { version = "1", features = ["macros", "net", "rt-multi-thread", "signal"] }
//! ```
//!
//! Run it from this repository: `cargo run -p korvus-agents --example
//! serve_http -- <data dir> <agent program> [address]`, then call
//! `http://127.0.0.1:3000/korvus/api/incidents` with the header `x-user`.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::Response;
use korvus_agents::{
    migrate, open_sqlite, CommandRunner, FsBlobStore, Manager, ScratchRoot, SqliteLog, SqliteStore,
};
use tokio::signal::unix::{signal, SignalKind};

async fn my_auth(req: Request, next: Next) -> Result<Response, StatusCode> {
    // Your session cookie, OIDC or mTLS check goes here.
    match req.headers().get("x-user") {
        Some(_) => Ok(next.run(req).await),
        None => Err(StatusCode::UNAUTHORIZED),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let data = PathBuf::from(args.next().unwrap_or_else(|| "./korvus-data".into()));
    let agent = args
        .next()
        .unwrap_or_else(|| "crates/cli/demo/agent.sh".into());
    let address = args.next().unwrap_or_else(|| "127.0.0.1:3000".into());

    std::fs::create_dir_all(data.join("scratch"))?;
    let pool = open_sqlite(&data.join("korvus.db")).await?;
    migrate(&pool).await?;
    let manager = Manager::builder(
        Arc::new(SqliteStore::new(pool.clone())),
        Arc::new(CommandRunner::new(agent)),
    )
    .turn_log(Arc::new(SqliteLog::new(pool.clone())))
    .blob_store(Arc::new(FsBlobStore::open(data.join("blobs"))?))
    .scratch_root(ScratchRoot::supplied(data.join("scratch")))
    .build();

    let korvus = korvus_agents::http::router(manager.clone()).layer(middleware::from_fn(my_auth));
    let app = korvus_agents::http::mount(axum::Router::new(), "/korvus", korvus);
    let listener = tokio::net::TcpListener::bind(&address).await?;
    println!("serving on http://{}/korvus/", listener.local_addr()?);

    let (mut term, mut int) = (
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
    );
    let stopping = manager.clone();
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            // The manager before the server: runs are cancelled and land,
            // and every event stream ends, so the drain does not wait on them.
            stopping.stop().await;
        })
        .await?;
    manager.stop().await; // already stopped: returns at once
    pool.close().await;
    println!("stopped");
    Ok(())
}
