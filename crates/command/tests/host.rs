//! The host is protected from its agents: a session of its own, no
//! controlling terminal, no signals to processes outside its own, while
//! pseudo-terminals of its own still work.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use korvus_command::Sandbox;
use korvus_store::SessionStatus;

use crate::support::{harness, sh};

/// Whether the agent can open `/dev/tty`, and whether `script` can open a
/// pseudo-terminal of its own; then it lingers so the test sees its
/// process (the marker in this text is in `sh -c`'s command line).
const TERMINAL: &str = r#"
    # korvus-sid-probe
    if (: < /dev/tty) 2>/dev/null; then echo tty=open; else echo tty=denied; fi
    if script -qc true /dev/null >/dev/null 2>&1; then echo script=ok; else echo script=failed; fi
    echo '# R' > report.md
    sleep 1
"#;

/// Field `n` (0-based, after the command name) of `/proc/<pid>/stat`.
fn stat_field(pid: &str, n: usize) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(n)
        .and_then(|f| f.parse().ok())
}

/// The session ids, as this process sees them, of every process whose
/// command line holds `marker`, sampled until `stop` is set.
fn watch_sessions(
    marker: &'static str,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<i32>> {
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                let pid = entry.file_name().to_string_lossy().into_owned();
                if !pid.bytes().all(|b| b.is_ascii_digit()) {
                    continue;
                }
                let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                    continue;
                };
                if String::from_utf8_lossy(&cmdline).contains(marker) {
                    seen.extend(stat_field(&pid, 3));
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        seen
    })
}

#[tokio::test]
async fn the_agent_has_a_session_of_its_own_and_no_terminal_but_ptys_work() {
    // Read from outside: inside its PID namespace the agent's session
    // leader (korvus's keeper) is not visible, so its own view says 0 —
    // as does ours when this test runs in a namespace of its own.
    let ours = stat_field("self", 3).expect("our session id");
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = watch_sessions("korvus-sid-probe", Arc::clone(&stop));
    let h = harness(sh(TERMINAL)).await;
    let row = h.run("terminal").await;
    stop.store(true, Ordering::SeqCst);
    let sessions = watcher.join().expect("the watcher");
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let texts = h.texts(row.id).await;
    assert!(!sessions.is_empty(), "the agent was never seen: {texts:?}");
    for sid in &sessions {
        assert!(*sid != 0 && *sid != ours, "agent sid {sid}, ours {ours}");
    }
    for expected in ["tty=denied", "script=ok"] {
        assert!(texts.iter().any(|t| t == expected), "{expected}: {texts:?}");
    }
    h.stop().await;
}

/// Sends `SIGUSR2` to the agent's parent, the embedding process (never to
/// its process group: the test harness is in it).
const SIGNAL_PARENT: &str = r#"
    if kill -USR2 $PPID 2>/dev/null; then echo kill=sent; else echo kill=denied; fi
    echo '# R' > report.md
"#;

#[tokio::test]
async fn an_agent_of_the_embedders_uid_cannot_signal_the_embedding_process() {
    let count = Arc::new(AtomicUsize::new(0));
    let mut usr2 = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined2())
        .expect("a SIGUSR2 handler");
    let counted = Arc::clone(&count);
    let counter = tokio::spawn(async move {
        while usr2.recv().await.is_some() {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    let h = harness(sh(SIGNAL_PARENT)).await;
    let row = h.run("signal").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    // A signal in flight would have arrived by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let texts = h.texts(row.id).await;
    assert!(texts.iter().any(|t| t == "kill=denied"), "{texts:?}");
    assert!(
        !texts.iter().any(|t| t.starts_with("signals not confined")),
        "this kernel has Landlock scopes: {texts:?}"
    );
    assert_eq!(
        count.load(Ordering::SeqCst),
        0,
        "SIGUSR2 reached the embedder"
    );
    counter.abort();
    h.stop().await;
}

#[tokio::test]
async fn without_landlock_scopes_the_log_says_signals_are_not_confined() {
    let h = harness(sh("echo '# R' > report.md").sandbox(Sandbox::new().landlock_abi(5))).await;
    let row = h.run("old kernel").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let texts = h.texts(row.id).await;
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("signals not confined") && t.contains("ABI 6")),
        "{texts:?}"
    );
    h.stop().await;
}
