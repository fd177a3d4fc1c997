//! The host is protected from its agents: a session of its own, no
//! controlling terminal, no signals to processes outside its own, while
//! pseudo-terminals of its own still work.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use korvus_command::Sandbox;
use korvus_store::SessionStatus;

use crate::support::{harness, sh};

/// The agent's session id (field 6 of `/proc/self/stat`; `sh`'s name has
/// no space), whether it can open `/dev/tty`, and whether `script` can
/// open a pseudo-terminal of its own.
const TERMINAL: &str = r#"
    echo "sid=$(cut -d' ' -f6 /proc/self/stat)"
    if (: < /dev/tty) 2>/dev/null; then echo tty=open; else echo tty=denied; fi
    if script -qc true /dev/null >/dev/null 2>&1; then echo script=ok; else echo script=failed; fi
    echo '# R' > report.md
"#;

#[tokio::test]
async fn the_agent_has_a_session_of_its_own_and_no_terminal_but_ptys_work() {
    let h = harness(sh(TERMINAL)).await;
    let row = h.run("terminal").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let texts = h.texts(row.id).await;
    // From /proc, not getsid(2), which rustix cannot represent when the
    // session leader is outside this pid namespace (the id is then 0).
    let stat = std::fs::read_to_string("/proc/self/stat").expect("our stat");
    let ours: i32 = stat[stat.rfind(')').expect("stat") + 1..]
        .split_whitespace()
        .nth(3)
        .and_then(|f| f.parse().ok())
        .expect("our session id");
    let sid = texts
        .iter()
        .find_map(|t| t.strip_prefix("sid="))
        .and_then(|s| s.parse::<i32>().ok())
        .unwrap_or_else(|| panic!("no sid line: {texts:?}"));
    assert_ne!(sid, ours, "{texts:?}");
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
