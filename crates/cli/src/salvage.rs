//! `korvus salvage <id>` and the salvage step of `korvus reap --apply`:
//! storing what runs left kept (their output could not be stored when
//! they ended), and the retention of what stays kept.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use korvus_session::{Manager, Salvage};
use korvus_store::SessionId;
use korvus_workspace::KeptRetention;

use crate::compose::Backends;
use crate::inspect::{human_bytes, parse_id};
use crate::out::{say, tell};
use crate::Global;

/// `korvus salvage <id>`: stores the session's kept dirs under this data
/// dir's scratch root — an orphan is taken over and settled first, its
/// lost run's dir salvaged — and says what was stored and what stays
/// kept. Exit 1 when something stays kept.
pub(crate) async fn salvage(global: &Global, session: &str, discard: bool) -> Result<ExitCode> {
    let id = parse_id::<SessionId>(session, "session")?;
    if discard {
        return discard_kept(global, id).await;
    }
    // The blob store and the database are probed first: a salvage into a
    // store that refuses writes would only fail again.
    let backends = Backends::open_checked(global).await?;
    let manager = backends.tool_manager();
    let done = manager
        .salvage(id)
        .await
        .with_context(|| format!("cannot salvage session {id}"));
    manager.stop().await;
    backends.close().await;
    let done = done?;
    print(&done);
    Ok(if done.still_kept.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `korvus salvage --discard <id>`: the session's kept dirs removed, each
/// named on stderr (output that was never stored is never removed
/// silently).
async fn discard_kept(global: &Global, id: SessionId) -> Result<ExitCode> {
    let backends = Backends::open(global).await?;
    let manager = backends.tool_manager();
    let removed = manager.discard_kept(id).await;
    manager.stop().await;
    backends.close().await;
    let removed = removed.with_context(|| format!("cannot discard the kept dirs of {id}"))?;
    for k in &removed {
        tell!(
            "korvus: discarded {} of session {id} (kept because: {}); its output was never stored",
            k.path.display(),
            k.reason
        );
    }
    say!("discarded {} kept dir(s) of session {id}", removed.len());
    Ok(ExitCode::SUCCESS)
}

/// What a salvage did, for people.
fn print(done: &Salvage) {
    let row = &done.session;
    if done.taken_over {
        say!(
            "session {}: its owner was gone; taken over and settled {} ({})",
            row.id,
            row.status,
            row.exit_reason.as_deref().unwrap_or("-")
        );
    }
    if done.dirs.is_empty() && !done.taken_over {
        say!("session {}: no kept scratch dir here", row.id);
    }
    for d in &done.dirs {
        let report = if d.report { ", report stored" } else { "" };
        let state = if d.complete {
            "stored whole, removed".to_owned()
        } else {
            format!(
                "not stored whole, still kept ({})",
                d.detail.as_deref().unwrap_or("-")
            )
        };
        say!(
            "  revision {}: {} file(s){report} from {}: {state}",
            d.revision,
            d.stored,
            d.dir.display()
        );
    }
    for pgid in &done.agents_stopped {
        say!("  stopped agent process group {pgid}, left running by a dead run");
    }
    for k in &done.still_kept {
        tell!(
            "korvus: {} stays kept: {} (run `korvus salvage {}` again once the cause is gone)",
            k.path.display(),
            k.reason,
            row.id
        );
    }
}

/// `korvus reap --apply`'s salvage step: the kept dirs of `sessions`
/// (settled ones: an active row's run stores its own) are stored if they
/// can be now; a failure is reported and the dir stays kept. Returns how
/// many dirs stay kept.
pub(crate) async fn kept_on_reap(
    manager: &Manager,
    scratch: &std::path::Path,
    sessions: &[SessionId],
) -> usize {
    let mut stays = 0;
    for &id in sessions {
        let root = scratch.to_path_buf();
        let kept = tokio::task::spawn_blocking(move || korvus_workspace::kept_dirs(&root, id))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        if kept.is_empty() {
            continue;
        }
        match manager.salvage(id).await {
            Ok(done) => {
                say!("salvaged session {id}");
                print(&done);
                stays += done.still_kept.len();
            }
            Err(e) => {
                tell!("korvus: session {id}: kept dir(s) not salvaged: {e:#}");
                stays += kept.len();
            }
        }
    }
    stays
}

/// `korvus reap`'s dry run: the kept dirs of `sessions`, each with why it
/// is kept — what `--apply` (or `korvus salvage`) tries to store.
pub(crate) async fn list_kept(scratch: &std::path::Path, sessions: &[SessionId]) {
    let mut all = Vec::new();
    for &id in sessions {
        let root = scratch.to_path_buf();
        let kept = tokio::task::spawn_blocking(move || korvus_workspace::kept_dirs(&root, id))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        all.extend(kept.into_iter().map(|k| (id, k)));
    }
    say!(
        "{} kept scratch dir(s): output that is not stored yet",
        all.len()
    );
    for (id, k) in &all {
        say!("  {id} revision {}: {}", k.revision, k.reason);
    }
}

/// `korvus reap --apply`'s retention step: kept dirs past `retention`
/// are removed, each one named (and logged, and counted) — output that
/// was never stored is never removed silently.
pub(crate) async fn prune_on_reap(manager: &Manager, retention: KeptRetention) -> Result<()> {
    let pruned = manager.prune_kept(retention).await?;
    for p in &pruned {
        tell!(
            "korvus: removed the kept dir {} of session {} ({} {}, kept {} day(s): past the {} bound); \
             its output was never stored",
            p.dir.path.display(),
            p.session,
            human_bytes(p.bytes),
            p.dir.reason,
            p.age.as_secs() / 86_400,
            p.bound
        );
    }
    Ok(())
}

/// `--kept-max-age` in days, as a duration.
pub(crate) fn days(n: u64) -> Duration {
    Duration::from_secs(n.saturating_mul(86_400))
}
