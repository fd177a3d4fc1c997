//! `incident`, `show`, `ls`, `cat`, `export`, `migrate`: commands that read
//! (or set up) rows without running an agent.

use korvus_store::StoreExt as _;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;

use anyhow::{bail, Context, Result};
use korvus_blob::BlobKey;
use korvus_log::{Access, Author, EventKind, JsonlExport, LogId, DROPPED_PREFIX};
use korvus_store::{
    Artifact, Cursor, IncidentId, IncidentStatus, NewIncident, Page, Session, SessionId,
    SessionStatus, WorkspaceRef,
};

use crate::compose::Backends;
use crate::{Global, IncidentCommand};

/// Parses an id given on the command line.
pub(crate) fn parse_id<T: FromStr>(text: &str, what: &str) -> Result<T> {
    T::from_str(text.trim()).map_err(|_| {
        anyhow::Error::new(crate::UsageError(format!(
            "{text:?} is not a valid {what} id (a UUID; `korvus ls` lists them)"
        )))
    })
}

/// Reads the session `text` names: a malformed id is a usage error; an
/// unknown one says which store was read, and whether the id is an
/// incident's.
pub(crate) async fn find_session(backends: &Backends, text: &str) -> Result<korvus_store::Session> {
    let id = parse_id::<SessionId>(text, "session")?;
    match backends.store.get_session(id).await {
        Ok(row) => Ok(row),
        Err(korvus_store::StoreError::NotFound { .. }) => {
            let incident = IncidentId::from_uuid(id.as_uuid());
            if backends.store.get_incident(incident).await.is_ok() {
                bail!(
                    "{id} is an incident, not a session: `korvus ls --incident {id}` lists its sessions"
                );
            }
            bail!(
                "no session {id} in {} (`korvus ls` lists the sessions there; \
                 --data-dir or --database-url selects another store)",
                backends.place()
            )
        }
        Err(e) => Err(e).with_context(|| format!("cannot read session {id}")),
    }
}

/// `1234 B`, `1.2 KiB`, `3.4 MiB`.
pub(crate) fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// What the harvest manifest of `report`'s revision says, in one line:
/// `3 stored (…), 2 unchanged, not stored again (…), 4 skipped`. The
/// report row names the manifest; rows written before it did fall back to
/// the manifest's old artifact row.
pub(crate) async fn harvest_manifest(
    backends: &Backends,
    artifacts: &[Artifact],
    report: &korvus_store::Report,
) -> Option<String> {
    let key = match &report.manifest_key {
        Some(key) => key.as_str(),
        None => artifacts
            .iter()
            .find(|a| a.revision == report.revision && a.path == korvus_harvest::HARVEST_MANIFEST)?
            .blob_key
            .as_str(),
    };
    let key = BlobKey::new(key).ok()?;
    let blob = backends.blobs.get(&key).await.ok()?;
    let v: serde_json::Value = serde_json::from_slice(&blob.bytes).ok()?;
    // Sorted: the persist phase stores files concurrently.
    let paths = |field: &str| -> Vec<String> {
        let mut paths: Vec<String> = v[field]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|f| f["path"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        paths.sort();
        paths
    };
    let stored = paths("stored");
    let unchanged = paths("unchanged");
    let skipped = v["skipped"].as_array().map_or(0, Vec::len);
    let failed = paths("failed");
    let mut line = format!("{} stored", stored.len());
    if !stored.is_empty() {
        let _ = write!(line, " ({})", stored.join(", "));
    }
    let _ = write!(line, "; {} unchanged, not stored again", unchanged.len());
    if !unchanged.is_empty() {
        let _ = write!(line, " ({})", unchanged.join(", "));
    }
    let _ = write!(line, "; {skipped} skipped (hidden, read-only, empty, …)");
    if !failed.is_empty() {
        let _ = write!(line, "; {} FAILED ({})", failed.len(), failed.join(", "));
    }
    if v["rows_written"] == false {
        let _ = write!(line, "; artifact rows NOT written");
    }
    Some(line)
}

pub(crate) async fn incident(global: &Global, command: IncidentCommand) -> Result<ExitCode> {
    let backends = Backends::open(global).await?;
    match command {
        IncidentCommand::New {
            title,
            repo,
            commit,
        } => {
            let workspace = match (repo, commit) {
                (Some(repo), Some(commit)) => Some(pin(&repo, &commit).await?),
                _ => None,
            };
            let incident = backends
                .store
                .create_incident(NewIncident {
                    title,
                    workspace: workspace.clone(),
                })
                .await
                .context("cannot create the incident")?;
            match &workspace {
                Some(w) => eprintln!(
                    "created incident {:?}, pinned to {} @ {}",
                    incident.title, w.repo, w.commit
                ),
                None => eprintln!("created incident {:?}", incident.title),
            }
            println!("{}", incident.id);
        }
        IncidentCommand::Ls { json: true } => crate::json::incidents(&backends).await?,
        IncidentCommand::Ls { json: false } => {
            // Page by page: printed as read, never held whole.
            let mut page = Page::first(korvus_store::MAX_PAGE_SIZE);
            loop {
                let paged = backends.store.list_incidents(page).await?;
                for i in &paged.items {
                    println!("{}  {:<6}  {}", i.id, i.status, i.title);
                }
                match paged.next {
                    Some(next) => page = Page::after(next, korvus_store::MAX_PAGE_SIZE),
                    None => break,
                }
            }
        }
        IncidentCommand::Close { incident } => {
            let id = parse_id::<IncidentId>(&incident, "incident")?;
            let i = backends
                .store
                .close_incident(id)
                .await
                .with_context(|| format!("cannot close incident {id}"))?;
            println!("incident {} {}", i.id, i.status);
        }
    }
    backends.close().await;
    Ok(ExitCode::SUCCESS)
}

/// Pins `repo` at `rev`, resolved to a full commit id now, so the pin does
/// not move with the branch.
pub(crate) async fn pin(repo: &Path, rev: &str) -> Result<WorkspaceRef> {
    let repo = std::fs::canonicalize(repo)
        .with_context(|| format!("repository {} not found", repo.display()))?;
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["rev-parse", "--verify", "--quiet"])
        .arg(format!("{rev}^{{commit}}"))
        .output()
        .await
        .context("cannot run git")?;
    if !out.status.success() {
        bail!("{rev:?} is not a commit of {}", repo.display());
    }
    Ok(WorkspaceRef {
        repo: repo.display().to_string(),
        commit: String::from_utf8_lossy(&out.stdout).trim().to_owned(),
    })
}

pub(crate) async fn show(global: &Global, session: &str, json: bool) -> Result<ExitCode> {
    let backends = Backends::open(global).await?;
    let s = find_session(&backends, session).await?;
    let id = s.id;
    if json {
        let cause = if s.status == SessionStatus::Failed {
            let facts = log_facts(&backends, id, s.fence).await;
            failure_cause(&backends, &s, &facts).await
        } else {
            None
        };
        crate::json::show(&backends, &s, cause).await?;
        backends.close().await;
        return Ok(ExitCode::SUCCESS);
    }
    let incident = backends.store.get_incident(s.incident_id).await?;
    println!("session    {}", s.id);
    println!("incident   {} {:?}", incident.id, incident.title);
    println!("status     {}", s.status);
    println!("exit       {}", s.exit_reason.as_deref().unwrap_or("-"));
    // The log is read once: dropped-output notes, the last note, counts so far.
    let facts = log_facts(&backends, id, s.fence).await;
    if s.status == SessionStatus::Failed {
        if let Some(cause) = failure_cause(&backends, &s, &facts).await {
            println!("cause      {cause}");
        }
    }
    println!("kind       {} (#{})", s.kind, s.seq);
    println!(
        "fence      {}{}",
        s.fence,
        if s.cancel_requested && s.status == SessionStatus::Running {
            " (cancel requested)"
        } else {
            ""
        }
    );
    if s.attempt > 1 || s.is_resume_pending() {
        let pending = if s.is_resume_pending() {
            " (resume pending: its owner was lost)"
        } else {
            ""
        };
        println!("attempt    {}{pending}", s.attempt);
    }
    if s.status == SessionStatus::Running && !s.is_idle() {
        let expired = backends
            .store
            .expired_leases()
            .await?
            .iter()
            .any(|(o, _)| *o == s.id);
        println!("owner      {}", crate::session::lease_text(&s, expired));
    }
    println!("prompt     {}", s.prompt.replace('\n', " ⏎ "));
    if let Some(w) = &s.workspace_ref {
        println!("workspace  {} @ {}", w.repo, w.commit);
    }
    println!(
        "created    {}",
        s.created_at.format("%Y-%m-%d %H:%M:%S%.3f UTC")
    );
    if let Some(started) = s.started_at {
        println!("started    {}", started.format("%Y-%m-%d %H:%M:%S%.3f UTC"));
    }
    if let Some(ended) = s.ended_at {
        println!("ended      {ended}");
    }
    let reports = backends.store.all_reports(id).await?;
    // The session's total is the sum of its reports (each carries its
    // run's counters); the row holds the last run's only.
    let total = reports
        .iter()
        .fold(korvus_store::Counters::default(), |t, r| {
            korvus_store::Counters {
                turns: t.turns.saturating_add(r.counters.turns),
                tool_calls: t.tool_calls.saturating_add(r.counters.tool_calls),
                input_tokens: t.input_tokens.saturating_add(r.counters.input_tokens),
                output_tokens: t.output_tokens.saturating_add(r.counters.output_tokens),
            }
        });
    println!(
        "counters   {} in total over {} report(s)",
        counters_text(&total),
        reports.len()
    );
    if s.is_active() {
        println!(
            "running    revision {} so far: {} turn(s), {} tool call(s) (from its log)",
            s.revision, facts.turns, facts.tool_calls
        );
    }
    for b in crate::budget::standing(&backends, &s).await? {
        println!("budget     {}", crate::budget::describe(&b));
    }
    for note in &facts.dropped {
        println!("  ! {note}");
    }
    println!("reports");
    for r in &reports {
        println!(
            "  rev {:<3} {:<22} {:>9}  {}",
            r.revision,
            r.exit_reason,
            human_bytes(r.markdown_bytes),
            r.markdown_key.as_deref().unwrap_or("(no report.md)")
        );
        println!("          {}", counters_text(&r.counters));
        // A revision whose run was lost and whose output another manager
        // landed for it says where that output came from.
        if let Some(from) = &r.salvaged_from {
            println!("          salvaged from {from}");
        }
        // What degraded the persist phase, cause first (at most 4 KiB).
        if let Some(detail) = &r.detail {
            for line in detail.lines() {
                println!("          ! {line}");
            }
        }
    }
    let mut artifacts = backends.store.all_session_artifacts(id).await?;
    artifacts.sort_by(|a, b| (a.revision, &a.path).cmp(&(b.revision, &b.path)));
    println!("artifacts");
    for a in &artifacts {
        println!(
            "  rev {:<3} {:<32} {:>9}  {:<24} {:<12} {}",
            a.revision,
            a.path,
            human_bytes(a.size_bytes),
            a.content_type,
            a.kind,
            a.id
        );
    }
    println!("harvest");
    for r in &reports {
        let line = harvest_manifest(&backends, &artifacts, r)
            .await
            .unwrap_or_else(|| "no manifest".into());
        println!("  rev {:<3} {line}", r.revision);
    }
    backends.close().await;
    Ok(ExitCode::SUCCESS)
}

/// Why a failed session failed, in one line: its last report's detail,
/// else the last note of its log (a `CommandRunner` notes why its agent
/// could not start or how it exited).
async fn failure_cause(
    backends: &Backends,
    s: &korvus_store::Session,
    facts: &LogFacts,
) -> Option<String> {
    let reports = backends.store.all_reports(s.id).await.ok()?;
    let detail = reports
        .iter()
        .rfind(|r| r.revision == s.revision)
        .and_then(|r| r.detail.clone());
    let cause = match detail {
        Some(detail) => detail,
        None => facts.last_note.clone()?,
    };
    Some(crate::session::clip(&cause.replace('\n', " "), 300))
}

/// What `show` reads from a session's log, page by page.
#[derive(Default)]
struct LogFacts {
    /// Notes about output that was not stored (agent output past a cap,
    /// output cut at exit, events a failing log lost).
    dropped: Vec<String>,
    /// The last note korvus wrote in the log: for a failed run, usually
    /// why (an agent's notes are not korvus's word).
    last_note: Option<String>,
    /// Turns and tool calls the run at `fence` logged so far.
    turns: u64,
    tool_calls: u64,
}

async fn log_facts(backends: &Backends, id: SessionId, fence: u64) -> LogFacts {
    const PAGE: u64 = 4096;
    let mut facts = LogFacts::default();
    let Ok(log) = backends
        .logs
        .open(LogId::from_uuid(id.as_uuid()), Access::Read)
        .await
    else {
        return facts;
    };
    let mut offset = 0;
    while let Ok(page) = log.read(offset, Some(PAGE)).await {
        let last = (page.len() as u64) < PAGE;
        offset += page.len() as u64;
        for e in page {
            let current = e.epoch == Some(fence);
            match e.kind {
                // korvus's own notes: an agent's note may read like one.
                EventKind::Note { text } if e.by != Some(Author::Agent) => {
                    if text.starts_with(DROPPED_PREFIX) {
                        facts.dropped.push(text.clone());
                    }
                    facts.last_note = Some(text);
                }
                EventKind::TurnStart { .. } if current => facts.turns += 1,
                EventKind::ToolCall { .. } if current => facts.tool_calls += 1,
                _ => {}
            }
        }
        if last {
            break;
        }
    }
    facts
}

/// `N turn(s), N tool call(s), N input / N output tokens`.
fn counters_text(c: &korvus_store::Counters) -> String {
    format!(
        "{} turn(s), {} tool call(s), {} input / {} output tokens",
        c.turns, c.tool_calls, c.input_tokens, c.output_tokens
    )
}

/// `korvus ls`: one page of incidents, each with its first page of
/// sessions (or, with `--incident`, one page of that incident's sessions):
/// a bounded number of queries, whatever the history.
pub(crate) async fn ls(
    global: &Global,
    only: Option<&str>,
    limit: u32,
    after: Option<&str>,
    json: bool,
) -> Result<ExitCode> {
    let backends = Backends::open(global).await?;
    let cursor = after.map(Cursor::parse).transpose()?;
    let page = |c: Option<Cursor>| match c {
        Some(c) => Page::after(c, limit),
        None => Page::first(limit),
    };
    let orphans = backends.store.expired_leases().await?;
    let (incidents, next_incidents, session_page) = match only {
        Some(id) => {
            let id = parse_id::<IncidentId>(id, "incident")?;
            let incident = backends.store.get_incident(id).await?;
            (vec![incident], None, page(cursor))
        }
        None => {
            let paged = backends.store.list_incidents(page(cursor)).await?;
            (paged.items, paged.next, Page::first(limit))
        }
    };
    if json {
        crate::json::ls(
            &backends,
            &incidents,
            next_incidents.map(|c| c.to_string()),
            &session_page,
        )
        .await?;
        backends.close().await;
        return Ok(ExitCode::SUCCESS);
    }
    if incidents.is_empty() && after.is_none() {
        println!(
            "no incidents yet in {}; `korvus demo` runs a first session, \
             `korvus incident new <title>` starts one",
            backends.place()
        );
    }
    if !incidents.is_empty() {
        println!(
            "{:<46} {:<4} {:<10} {:<36} created (UTC)",
            "incident / session", "seq", "kind", "status (exit reason)"
        );
    }
    for i in &incidents {
        let state = if i.status == IncidentStatus::Closed {
            " (closed)"
        } else {
            ""
        };
        println!("incident {}  {}{state}", i.id, i.title);
        let sessions = backends
            .store
            .list_sessions(i.id, session_page.clone())
            .await?;
        for s in &sessions.items {
            print_session_line(s, &orphans);
        }
        if let Some(next) = sessions.next {
            println!(
                "  … more sessions: korvus ls --incident {} --after {next}",
                i.id
            );
        }
    }
    if let Some(next) = next_incidents {
        println!("… more incidents: korvus ls --after {next}");
    }
    backends.close().await;
    Ok(ExitCode::SUCCESS)
}

/// One session's line in `korvus ls`.
fn print_session_line(s: &Session, orphans: &[(SessionId, u64)]) {
    // A running row whose cancel was asked for but not yet done.
    let pending = if s.cancel_requested && s.status == SessionStatus::Running {
        "  (cancel requested)"
    } else {
        ""
    };
    // Who runs an active session, and whether its lease is live.
    let lease = if s.status == SessionStatus::Running && !s.is_idle() {
        let expired = orphans.iter().any(|(o, _)| *o == s.id);
        format!("  [{}]", crate::session::lease_text(s, expired))
    } else {
        String::new()
    };
    // One status column: the exit reason only where it says more.
    let status = match s.exit_reason.as_deref() {
        Some(reason) if reason != s.status.as_str() => format!("{} ({reason})", s.status),
        _ if s.is_queued() => format!("{} (queued)", s.status),
        _ => s.status.to_string(),
    };
    println!(
        "  session {}  #{:<3} {:<10} {:<36} {}{pending}{lease}",
        s.id,
        s.seq,
        s.kind,
        status,
        s.created_at.format("%Y-%m-%d %H:%M:%S")
    );
}

pub(crate) async fn cat(
    global: &Global,
    session: &str,
    path: Option<&str>,
    revision: Option<u32>,
) -> Result<ExitCode> {
    let backends = Backends::open(global).await?;
    let id = find_session(&backends, session).await?.id;
    let key = match path {
        None => {
            let reports = backends.store.all_reports(id).await?;
            let revisions: Vec<String> = reports.iter().map(|r| r.revision.to_string()).collect();
            let report = match revision {
                Some(rev) => reports.iter().find(|r| r.revision == rev),
                None => reports
                    .iter()
                    .filter(|r| r.markdown_key.is_some())
                    .max_by_key(|r| r.revision),
            }
            .with_context(|| match revision {
                Some(rev) if !revisions.is_empty() => format!(
                    "session {id} has no report revision {rev} (it has {})",
                    revisions.join(", ")
                ),
                _ if revisions.is_empty() => format!("session {id} has no report yet"),
                _ => format!("session {id} has no report.md in any revision"),
            })?;
            report
                .markdown_key
                .clone()
                .with_context(|| format!("report revision {} has no report.md", report.revision))?
        }
        Some(path) => {
            let artifacts = backends.store.all_session_artifacts(id).await?;
            artifacts
                .iter()
                .filter(|a| a.path == path && revision.is_none_or(|r| a.revision == r))
                .max_by_key(|a| a.revision)
                .with_context(|| format!("session {id} has no artifact {path:?}"))?
                .blob_key
                .clone()
        }
    };
    let blob = backends
        .blobs
        .get(&BlobKey::new(key.as_str())?)
        .await
        .with_context(|| format!("cannot read blob {key}"))?;
    use std::io::Write as _;
    std::io::stdout()
        .write_all(&blob.bytes)
        .context("cannot write to stdout")?;
    backends.close().await;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn export(
    global: &Global,
    session: &str,
    output: Option<&Path>,
) -> Result<ExitCode> {
    let backends = Backends::open(global).await?;
    let id = find_session(&backends, session).await?.id;
    let log = backends
        .logs
        .open(LogId::from_uuid(id.as_uuid()), Access::Read)
        .await
        .with_context(|| format!("cannot open the log of session {id}"))?;
    // A chunk of events at a time: memory stays bounded whatever the log's
    // length. A file is written under a name of its own beside it and renamed
    // into place once whole, so a failed export never leaves a short file that looks whole.
    let mut export = JsonlExport::new(&log);
    let (mut sink, partial): (Box<dyn std::io::Write>, Option<PathBuf>) = match output {
        Some(path) => {
            // A name of this export's own beside the target, created new:
            // never another file truncated, never two exports colliding.
            let name = path
                .file_name()
                .map_or_else(|| "export".to_owned(), |n| n.to_string_lossy().into_owned());
            let unique = format!(
                ".{name}.{}.{}.partial",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos())
            );
            let partial = path.with_file_name(unique);
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&partial)
                .with_context(|| format!("cannot write {}", partial.display()))?;
            (Box::new(std::io::BufWriter::new(file)), Some(partial))
        }
        None => (Box::new(std::io::stdout().lock()), None),
    };
    let written = async {
        while let Some(chunk) = export.next_chunk().await.context("cannot export the log")? {
            sink.write_all(&chunk).context("cannot write the export")?;
        }
        sink.flush().context("cannot write the export")
    }
    .await;
    drop(sink);
    if written.is_err() {
        if let Some(partial) = &partial {
            let _ = std::fs::remove_file(partial);
        }
    }
    written?;
    if let (Some(partial), Some(path)) = (partial, output) {
        // Durable before it takes the name.
        std::fs::File::open(&partial)
            .and_then(|f| f.sync_all())
            .and_then(|()| std::fs::rename(&partial, path))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    backends.close().await;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn migrate(global: &Global) -> Result<ExitCode> {
    // Opening applies the migrations.
    let backends = Backends::open(global).await?;
    let db = backends
        .places
        .first()
        .map(|(_, w)| w.clone())
        .unwrap_or_default();
    println!("migrations applied: {db}");
    backends.close().await;
    Ok(ExitCode::SUCCESS)
}

/// Where the data dir's demo material goes.
pub(crate) fn demo_dir(backends: &Backends) -> PathBuf {
    backends.data_dir.join("demo")
}
