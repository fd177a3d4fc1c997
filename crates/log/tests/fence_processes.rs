//! A JSONL log fenced while another process holds it open for write: the
//! writer's `flock` stays where it is, but the fence reaches it through
//! the log's epoch lock. The child is this test binary again, running the
//! same test with the log named in its environment: it opens the log at
//! epoch 1, appends numbered notes as fast as it can, and says when an
//! append is refused.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use korvus_log::{Access, Event, EventKind, JsonlLog, LogError, LogHeader, LogId, TurnLog};
use korvus_testkit::log::fresh_id;
use rustix::process::{kill_process, Pid, Signal};

/// Set in the child: the directory of its log, and the log's id.
const CHILD_DIR: &str = "KORVUS_TEST_FENCE_DIR";
const CHILD_ID: &str = "KORVUS_TEST_FENCE_ID";

/// How long the parent waits for a line from the child.
const PATIENCE: Duration = Duration::from_secs(20);

fn note(n: u64) -> Event {
    Event::new(EventKind::Note {
        text: n.to_string(),
    })
}

/// The child: the writer of epoch 1, appending note after note. It says
/// `writing` once its first appends are in the file, and `fenced after
/// <n>` at the first append refused (with `n` appends acknowledged), then
/// waits to be killed.
async fn child(dir: &str, id: &str) {
    let logs = JsonlLog::open_dir(dir).unwrap();
    let id: LogId = id.parse().unwrap();
    let w = logs.open(id, Access::Write).await.unwrap();
    w.claim_epoch(1).await.unwrap();
    let mut n = 0;
    loop {
        match w.append(&[note(n)]).await {
            Ok(()) => n += 1,
            Err(LogError::Fenced {
                epoch: 1,
                newest: 2,
                ..
            }) => {
                println!("fenced after {n}");
                tokio::time::sleep(Duration::from_secs(300)).await;
                return;
            }
            Err(e) => panic!("append {n} failed otherwise: {e:?}"),
        }
        if n == 100 {
            w.flush().await.unwrap();
            println!("writing");
        }
        tokio::task::yield_now().await;
    }
}

/// The child process, killed when dropped (stopped or not).
struct Writer {
    child: Child,
    lines: Receiver<String>,
}

impl Writer {
    /// Runs test `name` of this binary again as the writer of log `id`.
    fn spawn(name: &str, dir: &std::path::Path, id: LogId) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR, dir)
            .env(CHILD_ID, id.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// What follows `word` in the first line of the child's output that
    /// holds it (the test harness may have begun the line).
    fn wait_for(&self, word: &str) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(at) = line.find(word) {
                        return line[at + word.len()..].to_owned();
                    }
                }
                Err(e) => panic!("the child never said {word:?}: {e}"),
            }
        }
    }

    fn signal(&self, signal: Signal) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).unwrap()).unwrap();
        kill_process(pid, signal).unwrap();
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A log with a header only, and a service on its directory.
async fn empty_log() -> (tempfile::TempDir, JsonlLog, LogId) {
    let dir = tempfile::tempdir().unwrap();
    let logs = JsonlLog::open_dir(dir.path()).unwrap();
    let id = fresh_id();
    logs.create(LogHeader::new(id))
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
    (dir, logs, id)
}

/// Fences `id` at epoch 2, trying again while the epoch lock is held —
/// by a child stopped in the middle of a write, when `stopped`: it is let
/// go on for a moment between the tries, as a reaper's next period would
/// find it.
async fn fence(logs: &JsonlLog, id: LogId, writer: &Writer, stopped: bool) {
    for _ in 0..20 {
        match logs.fence(id, 2).await {
            Ok(()) => return,
            Err(e) if e.is_transient() => {
                if stopped {
                    writer.signal(Signal::CONT);
                    std::thread::sleep(Duration::from_millis(2));
                    writer.signal(Signal::STOP);
                }
            }
            Err(e) => panic!("the fence failed: {e:?}"),
        }
    }
    panic!("the epoch lock was never free");
}

/// The events of the log: their epochs and note numbers.
async fn stored(logs: &JsonlLog, id: LogId) -> Vec<(Option<u64>, String)> {
    let r = logs.open(id, Access::Read).await.unwrap();
    r.read(0, None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| match e.kind {
            EventKind::Note { text } => (e.epoch, text),
            other => panic!("only notes were appended, found {other:?}"),
        })
        .collect()
}

/// What the child stored before the fence, then what the next writer
/// (epoch 2, once the child is dead) appends: `at_fence` notes of epoch 1
/// numbered from 0, then epoch 2's.
async fn check_and_write_on(logs: &JsonlLog, id: LogId, at_fence: usize, writer: Writer) {
    let said = writer.wait_for("fenced after ");
    let acked: usize = said.trim().parse().unwrap();
    assert!(acked >= at_fence, "{acked} acknowledged, {at_fence} stored");
    // Long past the child's write-behind window (20 ms): nothing came.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let all = stored(logs, id).await;
    assert_eq!(
        all.len(),
        at_fence,
        "events landed after the fence, from {:?}",
        all.get(at_fence)
    );
    first_notes_of_epoch_1(&all, at_fence);
    drop(writer);
    let next = logs.open(id, Access::Write).await.unwrap();
    next.claim_epoch(2).await.unwrap();
    next.append(&[note(0), note(1)]).await.unwrap();
    next.close().await.unwrap();
    let all = stored(logs, id).await;
    first_notes_of_epoch_1(&all, at_fence);
    assert_eq!(
        all[at_fence..],
        [(Some(2), "0".to_owned()), (Some(2), "1".to_owned())]
    );
}

/// The first `n` events are notes 0, 1, … of epoch 1.
fn first_notes_of_epoch_1(events: &[(Option<u64>, String)], n: usize) {
    let wrong = events[..n]
        .iter()
        .enumerate()
        .find(|(i, e)| **e != (Some(1), i.to_string()));
    assert!(wrong.is_none(), "event {wrong:?} is not note i of epoch 1");
}

/// The writer is stopped (SIGSTOP) while it appends, the log is fenced,
/// and the writer goes on (SIGCONT): its appends are refused, and none of
/// its events lands after the fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_writer_in_another_process_is_fenced_off() {
    if let (Ok(dir), Ok(id)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_ID)) {
        child(&dir, &id).await;
        return;
    }
    let (dir, logs, id) = empty_log().await;
    let writer = Writer::spawn(
        "fence_processes::a_paused_writer_in_another_process_is_fenced_off",
        dir.path(),
        id,
    );
    writer.wait_for("writing");
    writer.signal(Signal::STOP);
    fence(&logs, id, &writer, true).await;
    // The child is stopped: this is every event it stored before the fence.
    let at_fence = stored(&logs, id).await.len();
    assert!(at_fence >= 100, "{at_fence}");
    writer.signal(Signal::CONT);
    check_and_write_on(&logs, id, at_fence, writer).await;
}

/// The writer appends flat out while the log is fenced: its events stored
/// before the fence are a prefix of the log, numbered without a gap, and
/// the events of the next writer (epoch 2) follow them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_of_another_process_racing_a_fence_end_before_it() {
    if let (Ok(dir), Ok(id)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_ID)) {
        child(&dir, &id).await;
        return;
    }
    let (dir, logs, id) = empty_log().await;
    let writer = Writer::spawn(
        "fence_processes::appends_of_another_process_racing_a_fence_end_before_it",
        dir.path(),
        id,
    );
    writer.wait_for("writing");
    tokio::time::sleep(Duration::from_millis(30)).await;
    fence(&logs, id, &writer, false).await;
    // Whatever the child writes from here on is refused: counted now, the
    // events it stored before the fence are all there.
    let at_fence = stored(&logs, id).await.len();
    assert!(at_fence >= 100, "{at_fence}");
    check_and_write_on(&logs, id, at_fence, writer).await;
}
