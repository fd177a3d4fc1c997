//! `--json` output of `show`, `ls` and `incident ls`: the HTTP API's own
//! shapes (the session, incident, report and artifact objects of
//! `GET /api/…`, documented in the OpenAPI document), wrapped in one
//! object per command. Stable: fields are only ever added.

use anyhow::Result;
use korvus_store::{Artifact, ArtifactKind, Incident, Page, Session, StoreExt as _};
use serde_json::{json, Value};

use crate::compose::Backends;

/// Whether the HTTP API lists an artifact: checkpoints and the agent's
/// kept thread are korvus's own, never listed.
fn listed(a: &Artifact) -> bool {
    !matches!(a.kind, ArtifactKind::AgentState | ArtifactKind::Checkpoint)
}

/// `korvus show --json`: `{"session", "incident", "cause", "reports",
/// "artifacts"}` — `cause` is why a failed session failed (its last
/// report's detail, else the log's last korvus note), `null` otherwise.
pub(crate) async fn show(backends: &Backends, s: &Session, cause: Option<String>) -> Result<()> {
    let incident = backends.store.get_incident(s.incident_id).await?;
    let reports = backends.store.all_reports(s.id).await?;
    let mut artifacts: Vec<Artifact> = backends
        .store
        .all_session_artifacts(s.id)
        .await?
        .into_iter()
        .filter(listed)
        .collect();
    artifacts.sort_by(|a, b| (a.revision, &a.path).cmp(&(b.revision, &b.path)));
    print(&json!({
        "session": s,
        "incident": incident,
        "cause": cause,
        "reports": reports,
        "artifacts": artifacts,
    }))
}

/// `korvus ls --json`: one page, `{"incidents": [{"incident",
/// "sessions", "next_sessions"}], "next"}` — the cursors as `--after`
/// takes them, `null` at the end.
pub(crate) async fn ls(
    backends: &Backends,
    incidents: &[Incident],
    next: Option<String>,
    sessions: &Page,
) -> Result<()> {
    let mut out = Vec::with_capacity(incidents.len());
    for i in incidents {
        let page = backends.store.list_sessions(i.id, sessions.clone()).await?;
        out.push(json!({
            "incident": i,
            "sessions": page.items,
            "next_sessions": page.next.map(|c| c.to_string()),
        }));
    }
    print(&json!({ "incidents": out, "next": next }))
}

/// `korvus incident ls --json`: every incident, as one JSON array written
/// a page at a time (never held whole).
pub(crate) async fn incidents(backends: &Backends) -> Result<()> {
    use std::io::Write as _;
    let mut stdout = std::io::stdout().lock();
    write!(stdout, "[")?;
    let mut page = Page::first(korvus_store::MAX_PAGE_SIZE);
    let mut first = true;
    loop {
        let paged = backends.store.list_incidents(page).await?;
        for i in &paged.items {
            if !first {
                write!(stdout, ",")?;
            }
            first = false;
            serde_json::to_writer(&mut stdout, i)?;
        }
        match paged.next {
            Some(next) => page = Page::after(next, korvus_store::MAX_PAGE_SIZE),
            None => break,
        }
    }
    writeln!(stdout, "]")?;
    Ok(())
}

fn print(value: &Value) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}
