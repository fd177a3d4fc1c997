//! Nothing an agent printed is lost at exit: the drain reads the pipes to
//! the end in batches, and only a process outside the agent's group can
//! cut it short — which the log then says.

use std::sync::Arc;
use std::time::{Duration, Instant};

use korvus_command::{ExitDrain, Limits, OutputCaps, Sandbox};
use korvus_log::{EventKind, JsonlLog};
use korvus_store::SessionStatus;

use crate::support::{harness_with, running, sh, unique_sleep, Harness};

/// An agent that prints `n` numbered lines as fast as it can, then exits 0.
fn printer(n: u64) -> String {
    format!("seq 1 {n}\necho '# R' > report.md\n")
}

async fn assistant_lines(h: &Harness, id: korvus_store::SessionId) -> Vec<String> {
    h.events(id)
        .await
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Message { text, .. } => Some(text),
            _ => None,
        })
        .collect()
}

async fn every_line_lands(lines: u64, caps: OutputCaps) {
    let logs = tempfile::tempdir().expect("temp dir");
    let jsonl = Arc::new(JsonlLog::open_dir(logs.path()).expect("jsonl"));
    let h = harness_with(sh(&printer(lines)).output_caps(caps), |b| b.turn_log(jsonl)).await;
    let row = h.run("print").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let got = assistant_lines(&h, row.id).await;
    assert_eq!(got.len() as u64, lines, "every line is stored");
    assert!(
        got.iter().zip(1..).all(|(text, n)| *text == n.to_string()),
        "in order"
    );
    let dropped = h
        .texts(row.id)
        .await
        .into_iter()
        .filter(|t| t.starts_with(korvus_log::DROPPED_PREFIX))
        .collect::<Vec<_>>();
    assert!(dropped.is_empty(), "{dropped:?}");
    h.stop().await;
}

#[tokio::test]
async fn fifty_thousand_lines_under_the_default_caps_all_land_in_order_on_jsonl() {
    every_line_lands(50_000, OutputCaps::default()).await;
}

#[tokio::test]
async fn two_hundred_thousand_lines_with_the_caps_raised_all_land_on_jsonl() {
    let caps = {
        let mut v = OutputCaps::default();
        v.max_events = 1_000_000;
        v
    };
    every_line_lands(200_000, caps).await;
}

const TIGHT: ExitDrain = ExitDrain::new(Duration::from_millis(300), Duration::from_millis(1500));

/// Runs `script` (which starts an escaped process whose command line holds
/// `marker`) and checks the run ends within the drain's bounds with the
/// cut noted; then kills what escaped.
async fn escaped(script: &str, marker: &str) {
    // Without a cgroup (`Limits::none`) and without the sandbox, which
    // contains the agent in a PID namespace: with either, nothing escapes
    // the run's end (see `limits.rs` and `contained_escape` below), and the
    // drain's bounds are for hosts without both.
    let runner = sh(script)
        .exit_drain(TIGHT)
        .limits(Limits::none())
        .sandbox(Sandbox::disabled());
    let h = harness_with(runner, |b| b).await;
    let started = Instant::now();
    let row = h.run("escape").await;
    let took = started.elapsed();
    let _ = std::process::Command::new("pkill")
        .args(["-f", marker])
        .status();
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    assert!(
        took < Duration::from_secs(20),
        "the run ended within the drain's bounds: {took:?}"
    );
    let texts = h.texts(row.id).await;
    assert!(texts.contains(&"before exit".to_owned()), "{texts:?}");
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("dropped: output cut: the agent's stdout/stderr were")),
        "{texts:?}"
    );
    h.stop().await;
    assert!(!running(marker), "the escaped process was killed");
}

/// Waits until the escaped process has left the group (it touches
/// `escaped` after `setsid`), so the group kill at exit cannot catch it.
const WAIT: &str = "while [ ! -e escaped ]; do sleep 0.01; done\n";

#[tokio::test]
async fn a_silent_escaped_grandchild_cannot_hold_the_run_open() {
    let sleep = unique_sleep();
    let script = format!(
        "setsid sh -c 'touch escaped; exec sleep {sleep}' &\n{WAIT}\
         echo 'before exit'\necho '# R' > report.md\nexit 0\n"
    );
    escaped(&script, &format!("sleep {sleep}")).await;
}

#[tokio::test]
async fn a_chatty_escaped_grandchild_is_cut_at_the_overall_bound() {
    let marker = format!("tick-{}", unique_sleep());
    let script = format!(
        "setsid sh -c 'touch escaped; while :; do echo {marker}; sleep 0.05; done' &\n{WAIT}\
         echo 'before exit'\necho '# R' > report.md\nexit 0\n"
    );
    escaped(&script, &marker).await;
}

/// With the default sandbox, even without a cgroup, a process that left
/// the agent's session still dies with the agent (its PID namespace ends
/// with korvus's init): nothing holds the output open, nothing is cut.
#[tokio::test]
async fn a_contained_escaped_grandchild_dies_with_the_agent() {
    let marker = format!("tick-{}", unique_sleep());
    let script = format!(
        "setsid sh -c 'touch escaped; while :; do echo {marker}; sleep 0.05; done' &\n{WAIT}\
         echo 'before exit'\necho '# R' > report.md\nexit 0\n"
    );
    let h = harness_with(sh(&script).exit_drain(TIGHT).limits(Limits::none()), |b| b).await;
    let row = h.run("escape").await;
    let left = running(&marker);
    let _ = std::process::Command::new("pkill")
        .args(["-f", &marker])
        .status();
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    assert!(!left, "the escaped process outlived the agent");
    let texts = h.texts(row.id).await;
    assert!(texts.contains(&"before exit".to_owned()), "{texts:?}");
    assert!(
        !texts
            .iter()
            .any(|t| t.starts_with(korvus_log::DROPPED_PREFIX)),
        "{texts:?}"
    );
    h.stop().await;
}
