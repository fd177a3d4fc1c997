//! `korvus serve` SIGKILLed while a korvus-dialect agent works: another
//! `korvus serve` on the data dir with `--resume-orphans` takes the
//! session over and resumes it — the agent runs again as a resume of the
//! same revision, with its files restored and a message saying what
//! happened — and the revision lands once. A session whose every attempt
//! loses its replica ends `owner_lost` with everything salvaged.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::serve::Server;
use crate::support::{ok, script, unique_sleep};

/// The lease of every replica here, and resumes on (at most `max`).
fn flags(max: &'static str) -> [&'static str; 4] {
    ["--lease-ttl", "2", "--resume-orphans", max]
}

/// Creates one session through `server`; returns its id.
fn create(server: &Server, prompt: &str) -> String {
    let (status, incident) = server.call("POST", "/api/incidents", Some(r#"{"title": "resume"}"#));
    assert_eq!(status, 201, "{incident}");
    let incident = incident["id"].as_str().unwrap().to_owned();
    let body = format!(r#"{{"prompt": "{prompt}"}}"#);
    let (status, s) = server.call(
        "POST",
        &format!("/api/incidents/{incident}/sessions"),
        Some(&body),
    );
    assert_eq!(status, 201, "{s}");
    s["id"].as_str().unwrap().to_owned()
}

/// Waits (60 s at most) until `path` exists.
fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The session row, polled until `done` holds (60 s at most).
fn row_until(server: &Server, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, row) = server.call("GET", &format!("/api/sessions/{id}"), None);
        if done(&row) {
            return row;
        }
        assert!(Instant::now() < deadline, "{id}: {row}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn kill(mut server: Server) {
    server.child.kill().expect("SIGKILL");
    server.child.wait().unwrap();
}

#[test]
fn a_killed_serves_session_is_resumed_by_another_and_lands_once() {
    let data = tempfile::tempdir().unwrap();
    let nap = unique_sleep();
    let agent = script(
        data.path(),
        "agent.sh",
        &format!(
            "read -r told\n\
             if [ \"$KORVUS_ATTEMPT\" = 1 ]; then\n\
               mkdir -p work && echo 'step 3 of 5' > work/progress.txt\n\
               echo '{{\"type\":\"turn_start\",\"turn\":1}}'\n\
               exec sleep {nap}\n\
             fi\n\
             echo \"resume=$KORVUS_RESUME attempt=$KORVUS_ATTEMPT progress=$(cat work/progress.txt)\"\n\
             echo \"told=$told\"\n\
             printf '# resumed\\n' > report.md\n"
        ),
    );
    let first = Server::start_with(data.path(), Some(&agent), "0", &flags("3"));
    let id = create(&first, "find the leak");
    wait_for(
        &data
            .path()
            .join("scratch")
            .join(&id)
            .join("1/work/progress.txt"),
    );
    // Its turn is open in the log before its replica dies.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok(crate::support::korvus(data.path()).args(["export", &id])).contains("turn_start") {
        assert!(Instant::now() < deadline, "the turn never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    kill(first);

    let second = Server::start_with(data.path(), Some(&agent), "0", &flags("3"));
    let row = row_until(&second, &id, |r| r["status"] != "running");
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(
        (row["revision"].as_u64(), row["attempt"].as_u64()),
        (Some(1), Some(2)),
        "{row}"
    );
    let log = ok(crate::support::korvus(data.path()).args(["export", &id]));
    assert!(
        log.contains("resume=1 attempt=2 progress=step 3 of 5"),
        "the resumed agent and its restored file:\n{log}"
    );
    assert!(
        log.contains("told=[korvus] This run was interrupted"),
        "{log}"
    );
    // The lost attempt's turn is closed before the resumed attempt's note.
    let closed = log
        .find(r#""type":"turn_end""#)
        .expect("the lost turn closed");
    let note = log
        .find("attempt 2 of revision 1: resumed after")
        .expect("the attempt's note");
    assert!(closed < note, "{log}");
    let show = ok(crate::support::korvus(data.path()).args(["show", &id]));
    assert!(show.contains("attempt    2\n"), "{show}");
    let reports = show.split("\nartifacts").next().unwrap_or_default();
    assert_eq!(
        reports.matches("  rev ").count(),
        1,
        "one report revision: {show}"
    );
    assert!(show.contains("work/progress.txt"), "{show}");
    let report = ok(crate::support::korvus(data.path()).args(["cat", &id]));
    assert!(report.contains("# resumed"), "{report}");
    drop(second);
}

#[test]
fn a_session_that_loses_every_replica_ends_owner_lost_after_its_attempts() {
    let data = tempfile::tempdir().unwrap();
    let nap = unique_sleep();
    let agent = script(
        data.path(),
        "agent.sh",
        &format!(
            "mkdir -p work && echo \"attempt $KORVUS_ATTEMPT\" > \"work/attempt-$KORVUS_ATTEMPT.txt\"\n\
             exec sleep {nap}\n"
        ),
    );
    let scratch = data.path().join("scratch");
    let first = Server::start_with(data.path(), Some(&agent), "0", &flags("2"));
    let id = create(&first, "poison");
    wait_for(&scratch.join(&id).join("1/work/attempt-1.txt"));
    kill(first);
    // The second attempt loses its replica too.
    let second = Server::start_with(data.path(), Some(&agent), "0", &flags("2"));
    wait_for(&scratch.join(&id).join("1/work/attempt-2.txt"));
    kill(second);
    // No attempt left: settled as before, with both attempts' files.
    let third = Server::start_with(data.path(), Some(&agent), "0", &flags("2"));
    let row = row_until(&third, &id, |r| r["status"] != "running");
    assert_eq!(row["status"], "failed", "{row}");
    assert_eq!(row["exit_reason"], "owner_lost", "{row}");
    assert_eq!(row["attempt"].as_u64(), Some(2), "{row}");
    let show = ok(crate::support::korvus(data.path()).args(["show", &id]));
    for file in ["work/attempt-1.txt", "work/attempt-2.txt"] {
        assert!(show.contains(file), "{file} salvaged: {show}");
    }
    drop(third);
}
