//! `korvus run` on a session that is queued: it says so, waits, and
//! follows the session once a process of its pool starts it.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::{korvus, ok, read_until, running, script, session_id, unique_sleep};

/// Both processes run this agent (one pool, one agent): the prompt `hold`
/// works until killed, any other writes its report.
fn agent(dir: &std::path::Path, nap: &str) -> std::path::PathBuf {
    script(
        dir,
        "agent.sh",
        &format!(
            "case \"$(cat)\" in\n  hold) echo 'agent is working'; exec sleep {nap} ;;\n  \
             *) echo 'queued agent works'; echo '# queued' > report.md ;;\nesac\n"
        ),
    )
}

#[test]
fn korvus_run_on_a_queued_session_waits_and_follows_it_when_it_starts() {
    let data = tempfile::tempdir().expect("temp dir");
    let nap = unique_sleep();
    let agent = agent(data.path(), &nap);
    // One run at a time per incident, across the pool's processes.
    let cap = ["--max-running-per-key", "1"];
    let mut holder = korvus(data.path())
        .args(cap)
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("hold")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("korvus starts");
    let seen = read_until(&mut holder, "agent is working");
    let held = session_id(&seen);
    let incident = seen
        .lines()
        .find_map(|l| {
            l.strip_prefix("incident ")?
                .split_once(' ')
                .map(|(id, _)| id.to_owned())
        })
        .unwrap_or_else(|| panic!("no incident line in {seen}"));

    let mut waiter = korvus(data.path())
        .args(cap)
        .args([
            "run",
            "--incident",
            &incident,
            "--agent",
            "sh",
            "--agent-arg",
        ])
        .arg(&agent)
        .arg("after the holder")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("korvus starts");
    let out = Arc::new(Mutex::new(String::new()));
    let reader = {
        let out = Arc::clone(&out);
        let stdout = waiter.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let mut out = out.lock().unwrap();
                out.push_str(&line.expect("a line"));
                out.push('\n');
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !out.lock().unwrap().contains("queued in pool default") {
        assert!(Instant::now() < deadline, "{}", out.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
    let queued = session_id(&out.lock().unwrap());
    // It waits: still queued a while later, its agent not called.
    std::thread::sleep(Duration::from_secs(1));
    let show = ok(korvus(data.path()).args(["show", &queued]));
    assert!(show.contains("queued in pool default"), "{show}");
    assert!(!out.lock().unwrap().contains("queued agent works"));
    assert!(waiter.try_wait().expect("wait").is_none(), "it waits");

    // The holder's session ends: the key has room, a process of the pool
    // claims the queued one, and the waiter follows it to its end.
    ok(korvus(data.path()).args(["cancel", &held]));
    assert_eq!(holder.wait().expect("holder exits").code(), Some(4));
    let status = waiter.wait().expect("waiter exits");
    reader.join().expect("reader");
    let out = out.lock().unwrap().clone();
    assert_eq!(status.code(), Some(0), "{out}");
    assert!(out.contains("queued agent works"), "{out}");
    let show = ok(korvus(data.path()).args(["show", &queued]));
    assert!(show.contains("status     completed"), "{show}");
    assert!(
        !running(&format!("sleep {nap}")),
        "the holder's agent ended"
    );
}
