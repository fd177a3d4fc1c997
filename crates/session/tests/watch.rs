//! Watching a session: every event in order, ending after the terminal row.

use std::time::Duration;

use futures::StreamExt;
use korvus_log::{Event, EventKind};
use korvus_runner::RunOutcome;
use korvus_store::{Counters, Store};

use crate::support::{Env, ScriptRunner};

fn numbered(n: u64) -> Event {
    Event::new(EventKind::Note {
        text: format!("event {n}"),
    })
}

#[tokio::test]
async fn delivers_every_event_in_order_and_ends_after_the_terminal_row() {
    let env = Env::new().await;
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let runner = ScriptRunner::new(move |ctx, _| {
        let mut go = go_rx.clone();
        async move {
            for i in 0..50 {
                ctx.log.append(&[numbered(i)]).await.unwrap();
                if i == 20 {
                    // Let a watcher join mid-run.
                    let _ = go.wait_for(|g| *g).await;
                }
                tokio::task::yield_now().await;
            }
            Ok(RunOutcome::completed(Counters::default()))
        }
    });
    let manager = env.builder(runner).build();
    let s = manager.create(env.request("stream")).await.unwrap();
    let early = manager.watch(s.id);
    // Wait until the run reached event 20, then join a second watcher.
    loop {
        let stat = manager
            .turn_log()
            .stat(korvus_log::LogId::from_uuid(s.id.as_uuid()))
            .await
            .unwrap();
        if stat.event_count.unwrap_or(0) >= 21 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let late = manager.watch(s.id);
    go_tx.send_replace(true);
    let store = env.store.clone();
    let collect = |stream: futures::stream::BoxStream<'static, korvus_session::Result<Event>>| {
        let store = store.clone();
        async move {
            let events: Vec<Event> = stream.map(|e| e.unwrap()).collect().await;
            // The stream ended: the terminal row must be readable now.
            let row = store.get_session(s.id).await.unwrap();
            assert!(
                row.status.is_terminal(),
                "stream ended before the terminal row"
            );
            events
        }
    };
    let (a, b) = tokio::join!(collect(early.boxed()), collect(late.boxed()));
    // Stored as written by the session's first run: its fence is the epoch.
    // The prompt comes first, logged by create as a user message.
    let mut expected: Vec<Event> = (0..50)
        .map(|n| Event {
            epoch: Some(s.fence),
            ..numbered(n)
        })
        .collect();
    let prompt = a.first().expect("the prompt").clone();
    assert!(
        matches!(&prompt.kind, EventKind::Message { role: korvus_log::Role::User, text } if text == "stream"),
        "{prompt:?}"
    );
    expected.insert(0, prompt);
    assert_eq!(a, expected);
    assert_eq!(b, expected, "prefix + live without gaps or duplicates");
    // Watching a finished session replays the log and ends.
    let replay: Vec<Event> = manager.watch(s.id).map(|e| e.unwrap()).collect().await;
    assert_eq!(replay, expected);
    // `watch_from` skips what the follower already has; past the end of a
    // finished session's log it ends with nothing.
    let tail: Vec<Event> = manager
        .watch_from(s.id, 45)
        .map(|e| e.unwrap())
        .collect()
        .await;
    assert_eq!(tail, expected[45..]);
    let none: Vec<Event> = manager
        .watch_from(s.id, expected.len() as u64)
        .map(|e| e.unwrap())
        .collect()
        .await;
    assert!(none.is_empty());
    manager.stop().await;
}
