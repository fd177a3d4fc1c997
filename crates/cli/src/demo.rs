//! `korvus demo`: the whole lifecycle on whatever backends are selected
//! (by default the embedded SQLite + files), with the bundled demo agent.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
#[cfg(feature = "demo-model")]
use korvus_command::ModelEndpoint;
use korvus_command::{CommandRunner, Preset};
#[cfg(feature = "demo-model")]
use korvus_model_stub::{Script, StubServer};
use korvus_session::CreateSession;
use korvus_store::{NewIncident, SessionStatus};

use crate::compose::{shown, Backends};
use crate::confine::ConfineArgs;
use crate::inspect::{demo_dir, pin};
use crate::out::say;
use crate::session::{exit_code, follow, logged_events, summary, Signals};
use crate::Global;

/// The scripted model server a real agent of the demo talks to, kept
/// running while the demo runs.
#[cfg(feature = "demo-model")]
type Stub = StubServer;
/// Without the `demo-model` feature there is none.
#[cfg(not(feature = "demo-model"))]
type Stub = std::convert::Infallible;

/// The bundled demo agent (`crates/cli/demo/agent.sh`).
pub(crate) const AGENT: &str = include_str!("../demo/agent.sh");

/// The files of the demo repository; `skills/` and `docs/` are seeded.
const REPO_FILES: &[(&str, &str)] = &[
    (
        "README.md",
        "# db-1 operations\n\nNot seeded: only skills/, docs/ and runbooks/ are.\n",
    ),
    (
        "skills/disk-full/SKILL.md",
        "---\nname: disk-full\ndescription: Find what filled a disk and what is safe to delete.\n---\n# Disk full\n\nStart with `du -x` on the mount, then WAL, logs, temp files.\n",
    ),
    (
        "skills/replication/SKILL.md",
        "---\nname: replication\ndescription: Diagnose replication slots that stopped advancing.\n---\n# Replication\n\nCheck `pg_replication_slots` for inactive slots holding WAL.\n",
    ),
    (
        "docs/runbook.md",
        "# db-1 disk runbook\n\n1. Check whether a replication slot holds WAL (`pg_replication_slots`).\n2. Check log retention under /var/log/postgresql.\n3. Never delete files under base/ by hand.\n",
    ),
    (
        "docs/architecture.md",
        "# db-1\n\nPostgreSQL 16 primary; one logical replication slot (`analytics`).\n",
    ),
];

const PROMPT: &str = "db-1 disk is 95% full since 06:41. Why, and what is safe to free?";
const FOLLOW_UP: &str = "Which files exactly can we delete right now?";

/// Which agent the demo runs.
#[derive(Debug, clap::Args)]
pub(crate) struct DemoAgent {
    /// `codex` or `claude-code`: the real agent (installed, e.g. `npm
    /// install -g @openai/codex`), driven by a scripted model server
    /// korvus starts on 127.0.0.1 — no API key, no internet. Default: the
    /// bundled shell agent.
    #[arg(long, value_name = "codex|claude-code")]
    agent: Option<Preset>,
    /// The agent's binary (default: `codex` or `claude` in PATH).
    #[arg(long = "agent-program", value_name = "PATH", requires = "agent")]
    agent_program: Option<std::path::PathBuf>,
}

pub(crate) async fn demo(
    global: &Global,
    confine: &ConfineArgs,
    which: &DemoAgent,
) -> Result<ExitCode> {
    let backends = Backends::open_checked(global).await?;
    let dir = demo_dir(&backends);
    say!("korvus demo — data dir {}", shown(&backends.data_dir));
    // The agent must be able to run here before anything is written.
    let agent = dir.join("agent.sh");
    let (runner, _stub, shown_agent): (_, Option<Stub>, _) = match which.agent {
        #[cfg(not(feature = "demo-model"))]
        Some(preset) => bail!(
            "this korvus was built without the demo-model feature: \
             `korvus demo --agent {preset}` needs the scripted model server"
        ),
        #[cfg(feature = "demo-model")]
        Some(preset) => {
            let program = crate::session::preset_program(preset, which.agent_program.as_deref())?;
            let stub = StubServer::start(Script::default())
                .await
                .context("cannot start the scripted model server")?;
            let endpoint = ModelEndpoint::new(match preset {
                Preset::Codex => stub.openai_base_url(),
                _ => stub.base_url(),
            });
            say!(
                "running {} ({preset} preset) against a scripted model server at {}",
                program.display(),
                stub.base_url()
            );
            let runner = preset
                .runner(&program, Some(&endpoint))
                // The scripted server takes any key.
                .env("ANTHROPIC_API_KEY", "korvus-demo");
            (runner, Some(stub), program)
        }
        // The script's text, not its file: the agent user may not be able
        // to read the data dir (it is private), and needs nothing of it.
        None => (
            CommandRunner::new("sh")
                .arg("-c")
                .arg(AGENT)
                .arg("korvus-demo-agent")
                .env_pass("KORVUS_DEMO_PAUSE"),
            None,
            agent.clone(),
        ),
    };
    let runner = confine.apply(runner, &backends)?;

    // 1. A git repository with the trees sessions get.
    let repo = dir.join("repo");
    build_repo(&repo).await?;
    let workspace = pin(&repo, "HEAD").await?;
    say!(
        "\n1. Git repository {} @ {}; a session gets these trees read-only:",
        shown(&repo),
        &workspace.commit[..12.min(workspace.commit.len())]
    );
    for (path, _) in REPO_FILES
        .iter()
        .filter(|(p, _)| p.starts_with("skills/") || p.starts_with("docs/"))
    {
        say!("     {path}");
    }

    // 2. The agent and a pinned incident.
    std::fs::write(&agent, AGENT).with_context(|| format!("cannot write {}", agent.display()))?;
    let incident = backends
        .store
        .create_incident(NewIncident {
            title: "db-1: disk 95% full".into(),
            workspace: Some(workspace),
        })
        .await
        .context("cannot create the demo incident")?;
    say!(
        "\n2. Incident {} {:?}, pinned to that commit",
        incident.id,
        incident.title
    );

    // 3. A session with the bundled agent, followed live.
    // (The demo agent's own knob, KORVUS_DEMO_PAUSE, passes the
    // environment policy by name: see the runner above.)
    let manager = backends.manager(runner, Some(Duration::from_secs(300)), None);
    // Whatever happens below, every run is cancelled and joined before the
    // pools close.
    let outcome = lifecycle(&backends, &manager, incident.id, &shown_agent).await;
    manager.stop().await;
    let (session, row) = match outcome {
        Ok(done) => done,
        Err(e) => {
            backends.close().await;
            return Err(e);
        }
    };
    where_stored(global, &backends, &repo, &shown_agent, session);
    let code = exit_code(&row);
    backends.close().await;
    Ok(code)
}

/// Steps 3 and 4: the first run and the reopen, followed live. Returns the
/// session id and its final row.
async fn lifecycle(
    backends: &Backends,
    manager: &korvus_session::Manager,
    incident: korvus_store::IncidentId,
    agent: &Path,
) -> Result<(korvus_store::SessionId, korvus_store::Session)> {
    let mut signals = Signals::install()?;
    let session = manager
        .create(CreateSession::new(incident, PROMPT))
        .await
        .context("cannot create the demo session")?;
    say!(
        "\n3. Session {} runs {} (in its scratch dir); live events:",
        session.id,
        shown(agent)
    );
    say!("   prompt: {PROMPT}");
    let (row, elapsed) = follow(manager, session.id, 0, &mut signals).await?;
    summary(backends, &row, elapsed).await?;
    if row.status != SessionStatus::Completed {
        return Ok((session.id, row));
    }
    print_report(backends, session.id, 1).await?;

    // 4. Reopen with a follow-up: revision 2, unchanged files not stored again.
    let seen = logged_events(backends, session.id).await;
    manager
        .reopen(session.id, FOLLOW_UP)
        .await
        .context("cannot reopen the demo session")?;
    say!(
        "\n4. Reopened session {} with a follow-up; live events:",
        session.id
    );
    say!("   message: {FOLLOW_UP}");
    let (row, elapsed) = follow(manager, session.id, seen, &mut signals).await?;
    summary(backends, &row, elapsed).await?;
    if row.status == SessionStatus::Completed {
        print_report(backends, session.id, 2).await?;
    }
    Ok((session.id, row))
}

/// Step 5: where everything is.
fn where_stored(
    global: &Global,
    backends: &Backends,
    repo: &Path,
    agent: &Path,
    session: korvus_store::SessionId,
) {
    say!("\n5. Where everything is stored:");
    for (what, place) in &backends.places {
        say!("     {what:<44} {place}");
    }
    say!("     {:<44} {}", "demo repository", shown(repo));
    say!("     {:<44} {}", "demo agent", shown(agent));
    let data = if global.data_dir == Path::new(crate::DEFAULT_DATA_DIR) {
        String::new()
    } else {
        format!(" --data-dir {}", global.data_dir.display())
    };
    say!("\n   Look around:");
    say!("     korvus{data} ls");
    say!("     korvus{data} show {session}");
    say!("     korvus{data} cat {session} --revision 1");
    say!("     korvus{data} export {session}");
}

/// Prints the landed report of `revision`, indented.
async fn print_report(
    backends: &Backends,
    id: korvus_store::SessionId,
    revision: u32,
) -> Result<()> {
    let report = backends
        .store
        .get_report(id, revision)
        .await
        .with_context(|| format!("cannot read report revision {revision}"))?;
    let Some(key) = report.markdown_key else {
        say!("\n   (revision {revision} has no report.md)");
        return Ok(());
    };
    let blob = backends
        .blobs
        .get(&korvus_blob::BlobKey::new(key.as_str())?)
        .await
        .with_context(|| format!("cannot read {key}"))?;
    say!("\n   report.md, revision {revision}:");
    for line in String::from_utf8_lossy(&blob.bytes).lines() {
        say!("   │ {line}");
    }
    Ok(())
}

/// Creates the demo repository once (later demos reuse it).
pub(crate) async fn build_repo(repo: &Path) -> Result<()> {
    if repo.join(".git").is_dir() {
        return Ok(());
    }
    for (path, text) in REPO_FILES {
        let file = repo.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))?;
    }
    git(repo, &["init", "-q"]).await?;
    git(repo, &["add", "-A"]).await?;
    git(repo, &["commit", "-q", "-m", "db-1 skills and docs"]).await
}

async fn git(repo: &Path, args: &[&str]) -> Result<()> {
    let out = tokio::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "user.name=korvus demo",
            "-c",
            "user.email=demo@korvus.invalid",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .await
        .context("cannot run git (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
