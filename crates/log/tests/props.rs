//! Property tests: the JSONL log reader and the event parser on arbitrary
//! input never panic; a valid prefix followed by any torn tail reads as the
//! prefix; events round-trip.

use std::io::Write;

use korvus_log::{Access, Event, EventKind, JsonlLog, LogHeader, Role, TurnLog};
use korvus_testkit::log::fresh_id;
use proptest::prelude::*;

/// Bounded in CI: each property runs this many cases.
const CASES: u32 = 64;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn any_line_parses_or_is_refused_without_a_panic(line in any::<Vec<u8>>()) {
        let _ = serde_json::from_slice::<Event>(&line);
    }

    #[test]
    fn events_round_trip(text in any::<String>(), assistant in any::<bool>()) {
        let role = if assistant { Role::Assistant } else { Role::User };
        let event = Event::new(EventKind::Message { role, text });
        let line = serde_json::to_string(&event).unwrap();
        prop_assert!(!line.contains('\n'), "one event is one line");
        prop_assert_eq!(serde_json::from_str::<Event>(&line).unwrap(), event);
    }

    #[test]
    fn a_torn_or_garbled_tail_never_panics_and_keeps_the_prefix(
        texts in prop::collection::vec(any::<String>(), 0..4),
        tail in any::<Vec<u8>>(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let dir = tempfile::tempdir().unwrap();
            let logs = JsonlLog::open_dir(dir.path()).unwrap();
            let id = fresh_id();
            let w = logs.create(LogHeader::new(id)).await.unwrap();
            let events: Vec<Event> = texts
                .into_iter()
                .map(|text| Event::new(EventKind::Note { text }))
                .collect();
            w.append(&events).await.unwrap();
            w.close().await.unwrap();
            let path = dir.path().join(format!("{id}.jsonl"));
            let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
            f.write_all(&tail).unwrap();
            drop(f);
            let r = logs.open(id, Access::Read).await.unwrap();
            match r.read(0, None).await {
                // Without a newline the tail is torn and ignored; with one it
                // may read as more events — the prefix is always there.
                Ok(read) => prop_assert!(read.starts_with(&events)),
                Err(e) => prop_assert!(tail.contains(&b'\n'), "only a complete bad line may fail: {e}"),
            }
            Ok(())
        })?;
    }
}
