//! Exit status → exit reason.

use korvus_command::{CommandError, CommandRunner, AWAITING_USER_CODE};
use korvus_runner::exit;
use korvus_store::SessionStatus;

use crate::support::{harness, sh};

#[tokio::test]
async fn exit_zero_with_a_report_completes() {
    let h = harness(sh("echo '# r' > report.md")).await;
    let row = h.run("go").await;
    assert_eq!(row.status, SessionStatus::Completed);
    assert_eq!(row.exit_reason.as_deref(), Some(exit::COMPLETED));
    h.stop().await;
}

#[tokio::test]
async fn exit_zero_without_a_report_is_an_unfinished_author_phase() {
    let h = harness(sh("echo nothing written")).await;
    let row = h.run("go").await;
    assert_eq!(row.status, SessionStatus::Failed);
    assert_eq!(row.exit_reason.as_deref(), Some(exit::REPORT_AUTHOR_FAILED));
    h.stop().await;
}

#[tokio::test]
async fn the_documented_code_means_awaiting_user() {
    let h = harness(sh(&format!(
        "echo '# q' > report.md; exit {AWAITING_USER_CODE}"
    )))
    .await;
    let row = h.run("go").await;
    assert_eq!(row.status, SessionStatus::Running);
    assert_eq!(row.exit_reason.as_deref(), Some(exit::AWAITING_USER));
    h.stop().await;
}

#[tokio::test]
async fn another_code_fails_with_the_code_in_the_log() {
    let h = harness(sh("echo '# r' > report.md; echo boom >&2; exit 3")).await;
    let row = h.run("go").await;
    assert_eq!(row.status, SessionStatus::Failed);
    assert_eq!(row.exit_reason.as_deref(), Some("exit_code_3"));
    let texts = h.texts(row.id).await;
    assert_eq!(texts[texts.len() - 2], "stderr: boom");
    let last = texts.last().expect("a closing note");
    assert!(last.contains("agent exited with code 3"), "{last}");
    assert!(last.contains("exit reason exit_code_3"), "{last}");
    h.stop().await;
}

#[tokio::test]
async fn a_program_that_cannot_start_fails() {
    let h = harness(CommandRunner::new("/nonexistent/korvus-agent")).await;
    let row = h.run("go").await;
    assert_eq!(row.status, SessionStatus::Failed);
    assert_eq!(row.exit_reason.as_deref(), Some(exit::RUNNER_FAILED));
    let texts = h.texts(row.id).await;
    let last = texts.last().expect("a note says why");
    assert!(
        last.starts_with("could not start /nonexistent/korvus-agent: ")
            && last.ends_with("(exit reason runner_failed)"),
        "{last}"
    );
    h.stop().await;
}

#[test]
fn error_reasons_are_documented_names() {
    assert_eq!(CommandError::Exited { code: 3 }.reason(), "exit_code_3");
    assert_eq!(CommandError::Signaled { signal: 9 }.reason(), "signal_9");
    assert_eq!(
        CommandError::TimedOut {
            after: std::time::Duration::from_secs(1)
        }
        .reason(),
        exit::TIMEOUT
    );
    assert_eq!(CommandError::NoScratchDir.reason(), exit::RUNNER_FAILED);
}
