//! `korvus serve` SIGKILLed while three agents run: a new `korvus serve` on
//! the same data dir takes each session over once and salvages what its
//! agent wrote — the report revision holds the agent's markdown, its
//! progress file is stored, `korvus show` says where it came from. The
//! agents, and every process they started, died with the first korvus.

use std::time::{Duration, Instant};

use crate::serve::Server;
use crate::support::{ok, running, script, unique_sleep};

#[test]
fn a_killed_serve_loses_nothing_its_agents_wrote() {
    let data = tempfile::tempdir().unwrap();
    let nap = unique_sleep();
    // Started by each agent in a session of its own: out of its group.
    let left = unique_sleep();
    let agent = script(
        data.path(),
        "agent.sh",
        &format!(
            "read -r prompt\n\
             printf '# Findings on %s\\n' \"$prompt\" > report.md\n\
             mkdir -p work && echo \"progress of $prompt\" > work/progress.txt\n\
             echo '{{\"type\":\"turn_start\",\"turn\":1}}'\n\
             setsid sleep {left} &\n\
             exec sleep {nap}\n"
        ),
    );
    let lease = ["--lease-ttl", "2", "--resume-orphans", "0"];
    let mut first = Server::start_with(data.path(), Some(&agent), "0", &lease);
    let (status, incident) = first.call("POST", "/api/incidents", Some(r#"{"title": "crash"}"#));
    assert_eq!(status, 201, "{incident}");
    let incident = incident["id"].as_str().unwrap().to_owned();
    let ids: Vec<String> = (0..3)
        .map(|i| {
            let body = format!(r#"{{"prompt": "db-{i}"}}"#);
            let (status, s) = first.call(
                "POST",
                &format!("/api/incidents/{incident}/sessions"),
                Some(&body),
            );
            assert_eq!(status, 201, "{s}");
            s["id"].as_str().unwrap().to_owned()
        })
        .collect();
    let scratch = data.path().join("scratch");
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in &ids {
        let progress = scratch.join(id).join("1/work/progress.txt");
        while !progress.exists() {
            assert!(Instant::now() < deadline, "{id}: the agent never wrote");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert!(
        running(&format!("sleep {left}")),
        "the agents started theirs"
    );
    first.child.kill().expect("SIGKILL");
    first.child.wait().unwrap();
    let killed = Instant::now();
    // Within 2 s, with no other korvus running: the agents' init saw its
    // lifeline break and ended their PID namespaces.
    while running(&format!("sleep {nap}")) || running(&format!("sleep {left}")) {
        assert!(
            killed.elapsed() < Duration::from_secs(2),
            "the agents outlived korvus by 2 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // A new korvus on the same data dir: its reaper takes the sessions over
    // once their lease lapsed, salvages each dir, and settles them.
    let second = Server::start_with(data.path(), Some(&agent), "0", &lease);
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in &ids {
        loop {
            let (_, row) = second.call("GET", &format!("/api/sessions/{id}"), None);
            if row["status"] != "running" {
                break;
            }
            assert!(Instant::now() < deadline, "{id} never settled: {row}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    for (i, id) in ids.iter().enumerate() {
        let show = ok(crate::support::korvus(data.path()).args(["show", id]));
        assert!(show.contains("status     failed"), "{show}");
        assert!(show.contains("owner_lost"), "{show}");
        assert!(show.contains("fence      2"), "taken over once: {show}");
        assert!(show.contains("salvaged from"), "{show}");
        assert!(show.contains("over 1 report(s)"), "one report row: {show}");
        let report = ok(crate::support::korvus(data.path()).args(["cat", id]));
        assert!(
            report.contains(&format!("# Findings on db-{i}")),
            "{report}"
        );
        let progress =
            ok(crate::support::korvus(data.path()).args(["cat", id, "work/progress.txt"]));
        assert_eq!(progress.trim(), format!("progress of db-{i}"));
        assert!(
            !scratch.join(id).join("1").exists(),
            "stored whole: removed"
        );
    }
    drop(second);
}
