//! Native resume: the agent's own thread, kept with the revision.
//!
//! After a run of an agent dialect, korvus copies the one file the agent
//! resumes from out of the run's private `HOME` into
//! [`AGENT_STATE_DIR`](korvus_workspace::AGENT_STATE_DIR) (`thread.jsonl`),
//! beside `state.json` (dialect, thread id, running usage total). The
//! harvest stores both as `agent_state` artifacts; a reopen restores them
//! into the new scratch dir, and before the resumed run korvus puts the
//! thread file back where the agent looks for it:
//!
//! | dialect | thread file | resumed with |
//! |---|---|---|
//! | Codex | `$HOME/.codex/sessions/Y/M/D/rollout-…-<thread>.jsonl` | `codex exec … resume <thread> -` |
//! | Claude Code | `$HOME/.claude/projects/<cwd, non-alphanumerics as '-'>/<session>.jsonl` | `claude … --resume <session>` |
//!
//! Nothing else of `HOME` is kept: no `auth.json`, no credentials. The
//! same copy is made while the agent runs, before each checkpoint
//! ([`watch`]), so a checkpoint holds the live thread; the last copy, after
//! every process of the run is gone, replaces it. All file access is
//! through [`beneath`](super::beneath): no symbolic link is followed, and
//! only a regular file of one link is taken ([`thread`](super::thread)).

use std::path::Path;
use std::sync::Mutex;

use korvus_runner::CheckpointHook;
use korvus_workspace::AGENT_STATE_DIR;

use super::thread::{self, claude_file, is_id, Kept, STATE_FILE, THREAD_FILE};
use super::{beneath, Decoder, Dialect, Usage};
use crate::sink::Sink;

/// A thread to resume: its id and the usage total it had.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resume {
    pub(crate) thread: String,
    pub(crate) total: Usage,
}

/// Before a resumed run: the restored state of `dialect`'s thread, its
/// file put back under `home` for the agent (run in `scratch`). `Ok(None)`
/// when nothing was kept; `Err` (a reason for the log) when what was kept
/// cannot be used — the run then starts the agent afresh.
pub(crate) fn restore(
    scratch: &Path,
    home: &Path,
    dialect: Dialect,
) -> Result<Option<Resume>, String> {
    let dir = scratch.join(AGENT_STATE_DIR);
    let text = match std::fs::read_to_string(dir.join(STATE_FILE)) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read the kept agent state: {e}")),
    };
    let kept: Kept = serde_json::from_str(&text)
        .map_err(|e| format!("the kept agent state is not valid: {e}"))?;
    if kept.dialect != dialect.name() {
        return Err(format!(
            "the kept agent state is {}'s, this run is {}'s",
            kept.dialect,
            dialect.name()
        ));
    }
    if !is_id(&kept.thread) {
        return Err("the kept thread id is not valid".to_owned());
    }
    let target = match dialect {
        Dialect::Codex => {
            let rel = Path::new(&kept.file);
            let valid = rel.starts_with(".codex/sessions")
                && rel
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
                && rel
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(&format!("-{}.jsonl", kept.thread)));
            if !valid {
                return Err("the kept thread file's path is not valid".to_owned());
            }
            home.join(rel)
        }
        Dialect::ClaudeCode => claude_file(home, scratch, &kept.thread),
        Dialect::Korvus => return Ok(None),
    };
    let parent = target.parent().unwrap_or(home);
    std::fs::create_dir_all(parent)
        .map_err(|e| format!("cannot make {}: {e}", parent.display()))?;
    std::fs::copy(dir.join(THREAD_FILE), &target)
        .map_err(|e| format!("cannot restore the agent's thread file: {e}"))?;
    Ok(Some(Resume {
        thread: kept.thread,
        total: Usage {
            input: kept.input_tokens,
            output: kept.output_tokens,
        },
    }))
}

/// After a run: keeps the decoder's thread (its file found under `home`)
/// in [`AGENT_STATE_DIR`], and clears whatever else is there — all of it
/// when no thread could be kept, so an older revision's thread is never
/// resumed in its place. `Ok(false)` when the agent named no thread or
/// left no file for it. Every path is opened through
/// [`beneath`](super::beneath), so a link an agent left (or another run's
/// agent of the same user plants meanwhile) is never followed.
pub(crate) fn keep(scratch: &Path, home: &Path, named: &Named) -> Result<bool, String> {
    let dir = beneath::root(scratch)
        .and_then(|root| beneath::dir(&root, Path::new(AGENT_STATE_DIR), true))
        .map_err(|e| format!("cannot open {AGENT_STATE_DIR}: {e}"))?;
    let kept = match named.thread.as_deref().filter(|t| is_id(t)) {
        Some(thread) => thread::copy(scratch, home, named.dialect, thread, named.total, &mut None),
        None => Ok(false),
    };
    // Whatever the agent put there is not korvus's record.
    let record: &[&str] = match kept {
        Ok(true) => &[THREAD_FILE, STATE_FILE],
        _ => &[],
    };
    beneath::clear_except(&dir, record)
        .map_err(|e| format!("cannot clear {AGENT_STATE_DIR}: {e}"))?;
    kept
}

/// A resumed run of an agent dialect: the agent's kept thread, put back
/// under `home` for it, or a note saying why the agent starts afresh.
pub(crate) fn native_resume(
    dialect: Dialect,
    scratch: &Path,
    home: &Path,
    resuming: bool,
) -> (Option<Resume>, Option<String>) {
    if !resuming || dialect == Dialect::Korvus {
        return (None, None);
    }
    match restore(scratch, home, dialect) {
        Ok(Some(resume)) => {
            let note = format!("resuming {dialect} thread {}", resume.thread);
            (Some(resume), Some(note))
        }
        Ok(None) => (
            None,
            Some(format!(
                "no {dialect} thread was kept for this session: the agent starts afresh"
            )),
        ),
        Err(why) => (None, Some(format!("{why}: the agent starts afresh"))),
    }
}

/// After a run of an agent dialect (its processes all gone; `hook`, the
/// run's checkpoint hook, is cleared first): charges the
/// run with the usage its thread file records but the agent never reported
/// on stdout ([`unreported`]), then keeps the agent's thread for the next
/// revision; a note when it cannot.
pub(crate) async fn keep_thread(
    sink: &mut Sink<'_>,
    scratch: &Path,
    home: &Path,
    hook: &CheckpointHook,
) {
    // No checkpoint copies the thread from here on: this copy is the last.
    let cleared = hook.clone();
    let _ = tokio::task::spawn_blocking(move || cleared.clear()).await;
    let Some(decoder) = sink.decoder() else {
        return;
    };
    // The file work on a blocking thread: the thread file may be 64 MiB.
    let named = Named::of(decoder);
    let (dir, own) = (scratch.to_path_buf(), home.to_path_buf());
    let found = tokio::task::spawn_blocking(move || unreported(&dir, &own, &named)).await;
    if let Ok(Some(total)) = found {
        sink.thread_total(total).await;
    }
    let Some(decoder) = sink.decoder() else {
        return;
    };
    let named = Named::of(decoder);
    tracing::info!(
        dialect = %named.dialect,
        thread = named.thread.as_deref().unwrap_or_default(),
        total_input_tokens = named.total.input,
        total_output_tokens = named.total.output,
        "agent thread after the run"
    );
    let (dir, own) = (scratch.to_path_buf(), home.to_path_buf());
    let kept = tokio::task::spawn_blocking(move || keep(&dir, &own, &named))
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
    if let Err(why) = kept {
        sink.note(format!(
            "the agent's thread was not kept for a reopen: {why}"
        ))
        .await;
    }
}

/// What a run's decoder learnt of its thread, owned, for the file work
/// on a blocking thread.
#[derive(Debug, Clone)]
pub(crate) struct Named {
    dialect: Dialect,
    thread: Option<String>,
    total: Usage,
}

impl Named {
    /// What `decoder` learnt.
    pub(crate) fn of(decoder: &Decoder) -> Self {
        Self {
            dialect: decoder.dialect(),
            thread: decoder.thread().map(str::to_owned),
            total: decoder.total(),
        }
    }
}

/// The running usage total Codex's thread file (its rollout) records
/// under `home`, when it is above what the run's decoder was told on
/// stdout: Codex prints the thread's total only at `turn.completed`, so a
/// run stopped in the middle of a turn (cancelled, timed out, stalled)
/// never reported the model calls that turn made. The rollout records
/// each one as it comes back (an `event_msg` of type `token_count` whose
/// `info.total_token_usage` is the thread's total so far, the figure
/// `turn.completed` reports), so the run is charged what it used and the
/// total it keeps is the thread's, and the next revision counts only its
/// own calls. `None` for Claude Code (its `result` line is not a running
/// total), without a thread file, or when the file records no more.
fn unreported(scratch: &Path, home: &Path, named: &Named) -> Option<Usage> {
    if named.dialect != Dialect::Codex {
        return None;
    }
    let thread = named.thread.as_deref().filter(|t| is_id(t))?;
    let rel = thread::locate(scratch, home, Dialect::Codex, thread)?;
    let bytes = thread::read_whole(scratch, home, &rel).ok()?;
    let recorded = rollout_total(&bytes)?;
    let told = named.total;
    (recorded.input > told.input || recorded.output > told.output).then_some(recorded)
}

/// The last `token_count` total a Codex rollout records (lines that are
/// not JSON, a torn last line, and counts without `info` are skipped).
fn rollout_total(rollout: &[u8]) -> Option<Usage> {
    let mut total = None;
    for line in rollout.split(|b| *b == b'\n') {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) else {
            continue;
        };
        let payload = &v["payload"];
        if v["type"] != "event_msg" || payload["type"] != "token_count" {
            continue;
        }
        let usage = &payload["info"]["total_token_usage"];
        if usage.is_object() {
            total = Some(Usage {
                input: super::count_of(usage, "input_tokens"),
                output: super::count_of(usage, "output_tokens"),
            });
        }
    }
    total
}

/// Lets the run's checkpoints hold the agent's live thread: for an agent
/// dialect, installs the run's checkpoint `hook`, which copies the thread
/// the decoder (in `sink`) names from `home` into the scratch dir before
/// each checkpoint (what [`thread::copy`] does; a file unchanged since the last
/// copy is not read again). The run clears the hook before its own last
/// copy ([`keep_thread`]).
pub(crate) fn watch(
    hook: &CheckpointHook,
    dialect: Dialect,
    scratch: &Path,
    home: &Path,
    sink: &mut Sink<'_>,
) {
    if dialect == Dialect::Korvus || !hook.is_live() {
        return;
    }
    let published = thread::Published::default();
    sink.publish_to(published.clone());
    let (scratch, home) = (scratch.to_path_buf(), home.to_path_buf());
    let last = Mutex::new(None);
    hook.set(move || {
        let Some((thread, total)) = published.get() else {
            return;
        };
        let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(why) = thread::copy(&scratch, &home, dialect, &thread, total, &mut last) {
            tracing::debug!(%why, "the agent's thread is not in this checkpoint");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::super::Start;
    use super::*;

    fn codex_after_a_run(thread: &str) -> Decoder {
        let mut d = Decoder::new(Dialect::Codex, Start::default()).unwrap();
        d.line(&format!(
            r#"{{"type":"thread.started","thread_id":"{thread}"}}"#
        ));
        d.line(r#"{"type":"turn.completed","usage":{"input_tokens":200,"output_tokens":20}}"#);
        d
    }

    #[test]
    fn a_codex_thread_is_kept_and_put_back_for_the_next_run() {
        let first = tempfile::tempdir().unwrap();
        let home = first.path().join(".korvus/home");
        let rollout =
            home.join(".codex/sessions/2026/12/03/rollout-2026-12-03T09-01-16-th-1.jsonl");
        std::fs::create_dir_all(rollout.parent().unwrap()).unwrap();
        std::fs::write(&rollout, "{\"history\":1}\n").unwrap();
        std::fs::write(home.join(".codex/auth.json"), "secret").unwrap();
        assert!(keep(first.path(), &home, &Named::of(&codex_after_a_run("th-1"))).unwrap());
        let kept = first.path().join(AGENT_STATE_DIR);
        let names: Vec<String> = std::fs::read_dir(&kept)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "only the state and the thread: {names:?}");

        // The next revision's scratch dir gets the kept files restored.
        let second = tempfile::tempdir().unwrap();
        let restored = second.path().join(AGENT_STATE_DIR);
        std::fs::create_dir_all(&restored).unwrap();
        for name in [STATE_FILE, THREAD_FILE] {
            std::fs::copy(kept.join(name), restored.join(name)).unwrap();
        }
        let home2 = second.path().join(".korvus/home");
        let resume = restore(second.path(), &home2, Dialect::Codex)
            .unwrap()
            .unwrap();
        assert_eq!(resume.thread, "th-1");
        assert_eq!(
            resume.total,
            Usage {
                input: 200,
                output: 20
            }
        );
        let back = home2.join(".codex/sessions/2026/12/03/rollout-2026-12-03T09-01-16-th-1.jsonl");
        assert_eq!(std::fs::read_to_string(back).unwrap(), "{\"history\":1}\n");
        assert!(!home2.join(".codex/auth.json").exists());
        // Another dialect's run does not take it.
        assert!(restore(second.path(), &home2, Dialect::ClaudeCode).is_err());
    }

    #[test]
    fn a_symlinked_thread_file_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let link = home.join(".codex/sessions/rollout-x-th-2.jsonl");
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "secret").unwrap();
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        assert!(!keep(dir.path(), &home, &Named::of(&codex_after_a_run("th-2"))).unwrap());
        assert!(!dir.path().join(AGENT_STATE_DIR).join(THREAD_FILE).exists());
    }

    #[test]
    fn corrupt_or_hostile_state_is_refused_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join(AGENT_STATE_DIR);
        std::fs::create_dir_all(&state).unwrap();
        let home = dir.path().join("home");
        assert_eq!(restore(dir.path(), &home, Dialect::Codex), Ok(None));
        std::fs::write(state.join(STATE_FILE), "not json").unwrap();
        assert!(restore(dir.path(), &home, Dialect::Codex)
            .unwrap_err()
            .contains("not valid"));
        let escape = Kept {
            dialect: "codex".into(),
            thread: "th-3".into(),
            file: ".codex/sessions/../../../etc/rollout-th-3.jsonl".into(),
            input_tokens: 0,
            output_tokens: 0,
        };
        std::fs::write(state.join(STATE_FILE), serde_json::to_vec(&escape).unwrap()).unwrap();
        assert!(restore(dir.path(), &home, Dialect::Codex)
            .unwrap_err()
            .contains("path"));
    }

    #[test]
    fn a_rollouts_last_token_count_is_the_threads_total() {
        let rollout = concat!(
            r#"{"timestamp":"t","type":"session_meta","payload":{"id":"th-4"}}"#,
            "\n",
            r#"{"timestamp":"t","type":"event_msg","payload":{"type":"token_count","info":null}}"#,
            "\n",
            r#"{"timestamp":"t","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":100,"cached_input_tokens":40,"output_tokens":10,"total_tokens":110}}}}"#,
            "\n",
            r#"{"timestamp":"t","type":"response_item","payload":{"type":"message"}}"#,
            "\n",
            r#"{"timestamp":"t","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":250,"output_tokens":25}}}}"#,
            "\n",
            r#"{"timestamp":"t","type":"event_msg","payload":{"type":"token_count","info":{"total_tok"#,
        );
        assert_eq!(
            rollout_total(rollout.as_bytes()),
            Some(Usage {
                input: 250,
                output: 25
            })
        );
        assert_eq!(rollout_total(b"{\"type\":\"session_meta\"}\n"), None);

        // A run that reported 100/10 and was stopped after a second call:
        // the thread's total is above it; one that reported all is not.
        let scratch = tempfile::tempdir().unwrap();
        let home = scratch.path().join(".korvus/home");
        let file = home.join(".codex/sessions/2026/12/05/rollout-x-th-4.jsonl");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, rollout).unwrap();
        let mut d = Decoder::new(Dialect::Codex, Start::default()).unwrap();
        d.line(r#"{"type":"thread.started","thread_id":"th-4"}"#);
        d.line(r#"{"type":"turn.completed","usage":{"input_tokens":100,"output_tokens":10}}"#);
        let grown = d.raise_total(unreported(scratch.path(), &home, &Named::of(&d)).unwrap());
        assert_eq!((grown.input, grown.output), (150, 15));
        assert_eq!(unreported(scratch.path(), &home, &Named::of(&d)), None);
    }

    #[test]
    fn a_long_working_directory_is_cut_and_hashed_as_claude_code_does() {
        // Expected from Claude Code 2.1.332's own function, run in node.
        let p = format!(
            "/tmp/{}/data_dir.\u{e9}/{}/scratch/01a2/1",
            "k".repeat(120),
            "x".repeat(80)
        );
        let expected = format!(
            "-tmp-{}-data-dir---{}-c7xnr8",
            "k".repeat(120),
            "x".repeat(63)
        );
        assert_eq!(crate::dialect::thread::claude_folder(&p), expected);
        assert_eq!(expected.len(), 200 + "-c7xnr8".len());
    }

    #[test]
    fn claude_folders_are_named_after_the_working_directory() {
        let f = claude_file(Path::new("/h"), Path::new("/tmp/cl2/a_b.c-d"), "s-1");
        assert_eq!(
            f,
            Path::new("/h/.claude/projects/-tmp-cl2-a-b-c-d/s-1.jsonl")
        );
    }
}
