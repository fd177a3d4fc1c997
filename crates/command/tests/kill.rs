//! Cancellation and timeouts stop the whole process group: no grandchild
//! (a background `sleep` with a unique argument) survives.

use std::time::Duration;

use korvus_runner::exit;
use korvus_store::SessionStatus;

use crate::support::{eventually, harness, harness_with, running, sh, unique_sleep};

#[tokio::test]
async fn cancel_kills_the_grandchild_and_still_lands_the_files() {
    let arg = unique_sleep();
    let h = harness(sh(&format!(
        "echo '# partial' > report.md; echo notes > notes.txt; sleep {arg} & echo started; wait"
    )))
    .await;
    let s = h.start("go").await;
    let pattern = format!("sleep {arg}");
    eventually("the grandchild runs", || running(&pattern)).await;
    h.manager.cancel(s.id).await.expect("cancel");
    let row = h.settled(s.id).await;
    assert_eq!(row.status, SessionStatus::Cancelled, "{row:?}");
    assert_eq!(row.exit_reason.as_deref(), Some(exit::CANCELLED));
    eventually("the grandchild is gone", || !running(&pattern)).await;
    let artifacts = h.store_artifacts(s.id).await;
    assert!(artifacts.contains(&"report.md".to_owned()), "{artifacts:?}");
    assert!(artifacts.contains(&"notes.txt".to_owned()), "{artifacts:?}");
    h.stop().await;
}

#[tokio::test]
async fn a_group_that_ignores_sigterm_is_killed() {
    let arg = unique_sleep();
    let runner = sh(&format!(
        "trap '' TERM; sh -c \"trap '' TERM; sleep {arg}\" & echo started; wait; wait"
    ))
    .kill_grace(Duration::from_millis(300));
    let h = harness(runner).await;
    let s = h.start("go").await;
    let pattern = format!("sleep {arg}");
    eventually("the grandchild runs", || running(&pattern)).await;
    h.manager.cancel(s.id).await.expect("cancel");
    let row = h.settled(s.id).await;
    assert_eq!(row.status, SessionStatus::Cancelled, "{row:?}");
    eventually("the grandchild is gone", || !running(&pattern)).await;
    h.stop().await;
}

#[tokio::test]
async fn a_background_process_left_at_exit_is_killed() {
    let arg = unique_sleep();
    let h = harness(sh(&format!(
        "echo '# r' > report.md; (trap '' TERM; sleep {arg}) >/dev/null 2>&1 &
         until pgrep -f '^sleep {arg}' >/dev/null; do sleep 0.05; done; echo done"
    )))
    .await;
    let row = h.run("go").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    eventually("the straggler is gone", || {
        !running(&format!("sleep {arg}"))
    })
    .await;
    h.stop().await;
}

#[tokio::test]
async fn the_runner_timeout_kills_the_group_and_fails() {
    let arg = unique_sleep();
    let runner =
        sh(&format!("sleep {arg} & echo started; wait")).timeout(Duration::from_millis(500));
    let h = harness(runner).await;
    let row = h.run("go").await;
    assert_eq!(row.status, SessionStatus::Failed, "{row:?}");
    assert_eq!(row.exit_reason.as_deref(), Some(exit::TIMEOUT));
    let texts = h.texts(row.id).await;
    let last = texts.last().expect("closing note");
    assert!(
        last.contains("timed out") && last.contains("exit reason timeout"),
        "{last}"
    );
    eventually("the grandchild is gone", || {
        !running(&format!("sleep {arg}"))
    })
    .await;
    h.stop().await;
}

#[tokio::test]
async fn the_manager_run_timeout_kills_the_group_with_reason_timeout() {
    let arg = unique_sleep();
    let h = harness_with(sh(&format!("sleep {arg} & echo started; wait")), |b| {
        b.run_timeout(Duration::from_millis(500))
    })
    .await;
    let row = h.run("go").await;
    assert_eq!(row.status, SessionStatus::Failed, "{row:?}");
    assert_eq!(row.exit_reason.as_deref(), Some(exit::TIMEOUT));
    eventually("the grandchild is gone", || {
        !running(&format!("sleep {arg}"))
    })
    .await;
    h.stop().await;
}
