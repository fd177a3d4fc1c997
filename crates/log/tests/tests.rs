//! Integration tests of korvus-log: the `korvus-testkit` TurnLog contract
//! against both backends, byte-identical export across them, and the JSONL
//! file format's torn-tail rules, fences of a writer in another process,
//! and the shared handle rules over `MockLogIo`/`MockTurnLog`.

mod buffered;
mod epoch_lock;
mod fence_processes;
mod file_limit;
mod hook;
mod mock;
mod props;
mod short_write;
mod writer_lock;

mod memory_contract {
    use std::sync::Arc;

    korvus_testkit::log_contract_tests!(async { Arc::new(korvus_log::MemoryLog::new()) });
}

mod jsonl_contract {
    use std::ops::Deref;

    use korvus_log::JsonlLog;

    /// A JSONL service in its own temporary directory, removed on drop.
    pub(crate) struct Fixture {
        logs: JsonlLog,
        _dir: tempfile::TempDir,
    }

    impl Deref for Fixture {
        type Target = JsonlLog;
        fn deref(&self) -> &JsonlLog {
            &self.logs
        }
    }

    pub(crate) async fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        Fixture {
            logs: JsonlLog::open_dir(dir.path()).unwrap(),
            _dir: dir,
        }
    }

    korvus_testkit::log_contract_tests!(fixture());
}

mod across_backends {
    use korvus_log::{export_jsonl, Access, LogHeader, MemoryLog, TurnLog};
    use korvus_testkit::log::{fresh_id, sample_events};

    #[tokio::test]
    async fn export_is_byte_identical_and_equals_the_jsonl_file() {
        let jsonl = super::jsonl_contract::fixture().await;
        let memory = MemoryLog::new();
        let id = fresh_id();
        let header = LogHeader::new(id).with_label("incident_id", "x");
        let events: Vec<_> = (1..=4).flat_map(sample_events).collect();
        let mut exports = Vec::new();
        for logs in [&*jsonl as &dyn TurnLog, &memory] {
            let w = logs.create(header.clone()).await.unwrap();
            w.append(&events[..10]).await.unwrap();
            w.append(&events[10..]).await.unwrap();
            w.close().await.unwrap();
            let r = logs.open(id, Access::Read).await.unwrap();
            exports.push(export_jsonl(&r).await.unwrap());
        }
        assert_eq!(exports[0], exports[1]);
        let file = std::fs::read(jsonl.dir().join(format!("{id}.jsonl"))).unwrap();
        assert_eq!(file, exports[0], "the JSONL file is the export format");
    }

    /// A streamed export comes a chunk of events at a time — the header,
    /// then at most `EXPORT_CHUNK_EVENTS` lines per chunk — and its chunks
    /// put together are the whole export.
    #[tokio::test]
    async fn a_streamed_export_comes_in_bounded_chunks_and_equals_the_whole() {
        use korvus_log::{JsonlExport, EXPORT_CHUNK_EVENTS};
        let memory = MemoryLog::new();
        let id = fresh_id();
        let w = memory.create(LogHeader::new(id)).await.unwrap();
        let events: Vec<_> = (1..=700).flat_map(sample_events).collect();
        let total = events.len() as u64;
        assert!(total > 2 * EXPORT_CHUNK_EVENTS, "{total}");
        w.append(&events).await.unwrap();
        w.close().await.unwrap();
        let r = memory.open(id, Access::Read).await.unwrap();
        let mut export = JsonlExport::new(&r);
        let mut chunks = Vec::new();
        while let Some(chunk) = export.next_chunk().await.unwrap() {
            chunks.push(chunk);
        }
        assert!(export.next_chunk().await.unwrap().is_none(), "stays ended");
        let lines: Vec<u64> = chunks
            .iter()
            .map(|c| c.iter().filter(|b| **b == b'\n').count() as u64)
            .collect();
        assert_eq!(lines[0], 1, "the header alone first");
        assert!(
            lines[1..].iter().all(|n| *n <= EXPORT_CHUNK_EVENTS),
            "{lines:?}"
        );
        assert_eq!(lines[1..].iter().sum::<u64>(), total);
        assert_eq!(chunks.concat(), export_jsonl(&r).await.unwrap());
    }
}

mod jsonl_format {
    use std::io::Write;

    use korvus_log::{Access, Event, EventKind, LogError, LogHeader, TurnLog};
    use korvus_testkit::log::{fresh_id, sample_events};

    use super::jsonl_contract::fixture;

    #[tokio::test]
    async fn torn_final_line_is_ignored_then_cut_by_the_next_writer() {
        let logs = fixture().await;
        let id = fresh_id();
        let w = logs.create(LogHeader::new(id)).await.unwrap();
        let events = sample_events(1);
        w.append(&events).await.unwrap();
        w.close().await.unwrap();
        let path = logs.dir().join(format!("{id}.jsonl"));
        // A crash mid-write leaves half an event without its newline.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(br#"{"type":"note","te"#).unwrap();
        drop(f);

        let r = logs.open(id, Access::Read).await.unwrap();
        assert_eq!(
            r.read(0, None).await.unwrap(),
            events,
            "torn tail discarded whole"
        );

        let w = logs.open(id, Access::Write).await.unwrap();
        let next = Event::new(EventKind::Note {
            text: "after".into(),
        });
        w.append(std::slice::from_ref(&next)).await.unwrap();
        w.close().await.unwrap();
        let mut expected = events.clone();
        expected.push(next);
        assert_eq!(
            r.read(0, None).await.unwrap(),
            expected,
            "next append on a clean line"
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(r#""te{"#) && text.ends_with('\n'));
    }

    #[tokio::test]
    async fn stat_reads_only_header_and_metadata() {
        let logs = fixture().await;
        let id = fresh_id();
        let w = logs.create(LogHeader::new(id)).await.unwrap();
        w.append(&sample_events(1)).await.unwrap();
        w.close().await.unwrap();
        let path = logs.dir().join(format!("{id}.jsonl"));
        // Corrupt an event line in place (same length): reading events now
        // fails, but stat never reads them.
        let mut text = std::fs::read_to_string(&path).unwrap();
        let second_line = text.find('\n').unwrap() + 1;
        text.replace_range(second_line..second_line + 1, "#");
        std::fs::write(&path, &text).unwrap();
        let stat = logs.stat(id).await.unwrap();
        assert_eq!(stat.header.id, id);
        assert_eq!(stat.size_bytes, Some(text.len() as u64));
        assert_eq!(stat.event_count, None);
        let r = logs.open(id, Access::Read).await.unwrap();
        assert!(matches!(
            r.read(0, None).await,
            Err(LogError::Corrupt { .. })
        ));
    }

    /// Readers start anywhere in a long log: from every offset around the
    /// index's marks (every 256 events), a new handle reads exactly the
    /// events written there, and a handle opened later sees the lines
    /// appended since (the index is shared, not stale).
    #[tokio::test]
    async fn reads_from_any_offset_of_a_long_log_match_what_was_written() {
        let logs = fixture().await;
        let id = fresh_id();
        let w = logs.create(LogHeader::new(id)).await.unwrap();
        let events: Vec<_> = (0..1_000)
            .map(|i| {
                Event::new(EventKind::Note {
                    text: format!("event {i}"),
                })
            })
            .collect();
        w.append(&events).await.unwrap();
        w.flush().await.unwrap();
        for offset in [0u64, 1, 255, 256, 257, 511, 512, 513, 998, 999, 1000, 1001] {
            let r = logs.open(id, Access::Read).await.unwrap();
            let got = r.read(offset, Some(3)).await.unwrap();
            let from = (offset as usize).min(events.len());
            let to = (from + 3).min(events.len());
            assert_eq!(got, events[from..to], "offset {offset}");
            assert_eq!(r.len().await.unwrap(), 1_000);
        }
        let more: Vec<_> = (0..300)
            .map(|i| {
                Event::new(EventKind::Note {
                    text: format!("later {i}"),
                })
            })
            .collect();
        w.append(&more).await.unwrap();
        w.close().await.unwrap();
        let r = logs.open(id, Access::Read).await.unwrap();
        assert_eq!(r.len().await.unwrap(), 1_300);
        assert_eq!(r.read(1_299, None).await.unwrap(), more[299..]);
        assert_eq!(r.read(1_024, Some(1)).await.unwrap(), more[24..25]);
    }

    #[tokio::test]
    async fn shrinking_file_is_corrupt_not_a_shorter_log() {
        let logs = fixture().await;
        let id = fresh_id();
        let w = logs.create(LogHeader::new(id)).await.unwrap();
        w.append(&sample_events(1)).await.unwrap();
        w.close().await.unwrap();
        let r = logs.open(id, Access::Read).await.unwrap();
        assert_eq!(r.read(0, None).await.unwrap().len(), 6);
        let path = logs.dir().join(format!("{id}.jsonl"));
        let text = std::fs::read_to_string(&path).unwrap();
        let header_end = text.find('\n').unwrap() + 1;
        std::fs::write(&path, &text[..header_end]).unwrap();
        assert!(matches!(
            r.read(0, None).await,
            Err(LogError::Corrupt { .. })
        ));
    }

    #[tokio::test]
    async fn list_ignores_foreign_files() {
        let logs = fixture().await;
        std::fs::write(logs.dir().join("notes.txt"), "x").unwrap();
        std::fs::write(logs.dir().join("not-a-uuid.jsonl"), "x").unwrap();
        let id = fresh_id();
        logs.create(LogHeader::new(id))
            .await
            .unwrap()
            .close()
            .await
            .unwrap();
        assert_eq!(logs.list().await.unwrap(), vec![id]);
    }
}
