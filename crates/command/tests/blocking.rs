//! Waiting for an agent holds no thread: long agents cannot starve the
//! runtime's blocking pool, which harvests and fsyncs need.

use std::time::Duration;

use korvus_store::SessionStatus;

use crate::support::{harness, sh, unique_sleep};

#[test]
fn sleeping_agents_leave_the_blocking_pool_to_the_others() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let nap = unique_sleep();
        let sleeper = format!("echo started; exec sleep {nap}");
        let a = harness(sh(&sleeper)).await;
        let b = harness(sh(&sleeper)).await;
        let sa = a.start("sleep").await;
        let sb = b.start("sleep").await;
        // Both agents run (each has printed its first line).
        for (h, s) in [(&a, &sa), (&b, &sb)] {
            while !h.texts(s.id).await.contains(&"started".to_owned()) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let c = harness(sh("echo '# R' > report.md")).await;
        let third = c.start("quick").await;
        let row = tokio::time::timeout(Duration::from_secs(60), c.settled(third.id))
            .await
            .expect("the third session completes while two agents sleep");
        assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
        for h in [a, b, c] {
            h.stop().await;
        }
    });
}
