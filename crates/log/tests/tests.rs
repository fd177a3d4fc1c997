//! Integration tests of korvus-log: the `korvus-testkit` TurnLog contract
//! against both backends, byte-identical export across them, and the JSONL
//! file format's torn-tail rules, and the shared handle rules over
//! `MockLogIo`/`MockTurnLog`.

mod buffered;
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
