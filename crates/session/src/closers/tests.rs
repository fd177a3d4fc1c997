//! The closers, computed whole and from a log's newest repair on.
use super::*;

fn call(id: usize) -> Event {
    Event::new(EventKind::ToolCall {
        call_id: format!("c{id}"),
        tool: "sh".into(),
        input: Default::default(),
    })
}

fn result(id: usize) -> Event {
    Event::new(EventKind::ToolResult {
        call_id: format!("c{id}"),
        ok: true,
        output: Default::default(),
    })
}

#[test]
fn closers_of_a_long_log_in_one_pass() {
    // 400,000 events: 200,000 calls, every other one answered, inside
    // one open turn. (The earlier quadratic version took minutes here.)
    let mut log = vec![Event::new(EventKind::TurnStart { turn: 1 })];
    for id in 0..200_000 {
        log.push(call(id));
        if id % 2 == 0 {
            log.push(result(id));
        }
    }
    log.extend((0..100_000).map(|_| Event::new(EventKind::Note { text: "n".into() })));
    let closers = interrupted_turn_closers(&log);
    assert_eq!(closers.len(), 100_000 + 1);
    assert!(
        matches!(&closers[0].kind, EventKind::ToolResult { call_id, ok: false, .. } if call_id == "c1")
    );
    assert!(matches!(
        closers.last().map(|e| &e.kind),
        Some(EventKind::TurnEnd {
            turn: 1,
            interrupted: true
        })
    ));
}

#[test]
fn an_end_closes_every_open_entry_with_its_key() {
    let log = vec![
        Event::new(EventKind::TurnStart { turn: 1 }),
        Event::new(EventKind::TurnStart { turn: 2 }),
        Event::new(EventKind::TurnStart { turn: 1 }),
        call(7),
        call(7),
        Event::new(EventKind::TurnEnd {
            turn: 1,
            interrupted: false,
        }),
        result(7),
    ];
    let closers = interrupted_turn_closers(&log);
    assert_eq!(closers.len(), 1);
    assert!(matches!(
        closers[0].kind,
        EventKind::TurnEnd { turn: 2, .. }
    ));
}

/// Closers compared by what they close (their timestamps differ).
fn kinds(events: &[Event]) -> Vec<EventKind> {
    events.iter().map(|e| e.kind.clone()).collect()
}

fn turn(n: u64) -> Event {
    Event::new(EventKind::TurnStart { turn: n })
}

fn user(text: &str) -> Event {
    Event::new(EventKind::Message {
        role: Role::User,
        text: text.into(),
    })
}

/// A log written by successive writers, each claiming its epoch
/// (`None`: a writer from before epochs) and appending its events.
async fn log_of(epochs: &[(Option<u64>, Vec<Event>)]) -> (korvus_log::MemoryLog, LogHandle) {
    use korvus_log::{Access, LogHeader, LogId, TurnLog as _};
    let logs = korvus_log::MemoryLog::new();
    let id = LogId::from_uuid(uuid::Uuid::now_v7());
    logs.create(LogHeader::new(id))
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    for (epoch, events) in epochs {
        let w = logs.open(id, Access::Write).await.unwrap();
        if let Some(e) = epoch {
            w.claim_epoch(*e).await.unwrap();
        }
        w.append(events).await.unwrap();
        w.close().await.unwrap();
    }
    let reader = logs.open(id, Access::Read).await.unwrap();
    (logs, reader)
}

/// A run's events: turn `t` open with calls, one answered.
fn run(t: u64, calls: std::ops::Range<usize>) -> Vec<Event> {
    let mut events = vec![turn(t)];
    for id in calls {
        events.push(call(id));
        if id % 2 == 0 {
            events.push(result(id));
        }
    }
    events
}

/// The repair of a continue after `before`: its closers and a message.
fn repair(before: &[Event]) -> Vec<Event> {
    let mut events = interrupted_turn_closers(before);
    events.push(user("again"));
    events
}

#[tokio::test]
async fn closers_are_read_from_the_newest_repair_on() {
    let first = run(1, 0..500);
    let mut whole = first.clone();
    let fix = repair(&whole);
    whole.extend(fix.clone());
    let second = run(2, 1000..1003);
    whole.extend(second.clone());
    let (_logs, log) = log_of(&[(Some(1), first.clone()), (Some(3), [fix, second].concat())]).await;
    let read = closers_of(&log).await.unwrap();
    assert_eq!(read.from, first.len() as u64, "from the repair on");
    assert_eq!(read.len, whole.len() as u64);
    assert_eq!(
        kinds(&read.closers),
        kinds(&interrupted_turn_closers(&whole))
    );
    assert_eq!(read.closers.len(), 2, "c1001 and turn 2");
}

#[tokio::test]
async fn a_claimer_epoch_sends_the_search_back_to_the_repair() {
    // A queued continue: the repair in epoch 3, its claimer's run in 4.
    let first = run(1, 0..10);
    let fix = repair(&first);
    let claimed = run(2, 20..23);
    let (_logs, log) = log_of(&[
        (Some(1), first.clone()),
        (Some(3), fix.clone()),
        (Some(4), claimed.clone()),
    ])
    .await;
    let read = closers_of(&log).await.unwrap();
    assert_eq!(read.from, first.len() as u64);
    let whole = [first, fix, claimed].concat();
    assert_eq!(
        kinds(&read.closers),
        kinds(&interrupted_turn_closers(&whole))
    );
}

#[tokio::test]
async fn without_a_whole_repair_the_log_is_read_from_its_start() {
    // A repair cut short (closers, no message), then a log from before
    // epochs: both read whole, and both agree with the whole log.
    let first = run(1, 0..10);
    let mut cut = interrupted_turn_closers(&first);
    cut.truncate(2);
    let later = run(2, 30..33);
    let (_logs, log) = log_of(&[
        (Some(1), first.clone()),
        (Some(3), [cut.clone(), later.clone()].concat()),
    ])
    .await;
    let read = closers_of(&log).await.unwrap();
    assert_eq!(read.from, 0);
    let whole = [first.clone(), cut, later].concat();
    assert_eq!(
        kinds(&read.closers),
        kinds(&interrupted_turn_closers(&whole))
    );

    let fix = repair(&first);
    let (_logs, legacy) = log_of(&[(None, first.clone()), (None, fix.clone())]).await;
    let read = closers_of(&legacy).await.unwrap();
    assert_eq!(read.from, 0);
    assert!(read.closers.is_empty());
}

#[tokio::test]
async fn the_last_user_message_is_read_from_the_end() {
    let mut events = vec![user("first")];
    events.extend((0..1000).map(|_| Event::new(EventKind::Note { text: "n".into() })));
    events.push(user("second"));
    // The agent's own user-role output (a tool result) is not the user's.
    events.push(user("from the agent").by(korvus_log::Author::Agent));
    events.extend((0..700).map(|_| Event::new(EventKind::Note { text: "n".into() })));
    let (_logs, log) = log_of(&[(Some(1), events)]).await;
    assert_eq!(
        last_user_message(&log).await.unwrap().as_deref(),
        Some("second")
    );
    let (_logs, none) = log_of(&[(Some(1), run(1, 0..3))]).await;
    assert_eq!(last_user_message(&none).await.unwrap(), None);
}
