//! A rolling restart with `korvus serve --on-stop handoff`: two replicas
//! on one data dir, restarted one at a time (SIGTERM, wait for the exit,
//! start again) while their sessions' agents work. Nothing is cancelled:
//! each stopping replica hands its sessions off — the agent stopped, its
//! files stored as a checkpoint — and the other replica resumes them, so
//! every session completes with exactly one report revision, and the
//! view shows its attempt.

use std::time::{Duration, Instant};

use crate::serve::Server;
use crate::support::{ok, script, unique_sleep};

const SESSIONS: usize = 4;

fn flags() -> [&'static str; 6] {
    [
        "--lease-ttl",
        "2",
        "--on-stop",
        "handoff",
        "--resume-orphans",
        "3",
    ]
}

/// Creates one session in `incident` through `server`; returns its id.
fn create(server: &Server, incident: &str, n: usize) -> String {
    let body = format!(r#"{{"prompt": "task {n}"}}"#);
    let (status, s) = server.call(
        "POST",
        &format!("/api/incidents/{incident}/sessions"),
        Some(&body),
    );
    assert_eq!(status, 201, "{s}");
    s["id"].as_str().unwrap().to_owned()
}

/// The sessions' rows as `server` lists them.
fn rows(server: &Server, ids: &[String]) -> Vec<serde_json::Value> {
    ids.iter()
        .map(|id| server.call("GET", &format!("/api/sessions/{id}"), None).1)
        .collect()
}

/// Waits (60 s at most) until every session's first attempt wrote its
/// progress, wherever it runs.
fn all_working(data: &std::path::Path, ids: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in ids {
        let progress = data.join("scratch").join(id).join("1/work/progress.txt");
        while !progress.exists() {
            assert!(Instant::now() < deadline, "{id} never started working");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The number right after the last `prefix` in `text` (0 when none).
fn attempt_in(text: &str, prefix: &str) -> u64 {
    text.rfind(prefix)
        .map(|i| &text[i + prefix.len()..])
        .and_then(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or(0)
}

fn restart(server: &mut Server, data: &std::path::Path, agent: &std::path::Path) {
    let status = server
        .terminate()
        .expect("the replica exits after its hand-offs");
    assert!(status.success(), "{status:?}");
    *server = Server::start_with(data, Some(agent), "0", &flags());
}

#[test]
fn a_rolling_restart_with_handoff_cancels_nothing_and_lands_each_revision_once() {
    let data = tempfile::tempdir().unwrap();
    let nap = unique_sleep();
    // A first attempt works until it is stopped; a resumed one checks its
    // restored file and finishes.
    let agent = script(
        data.path(),
        "agent.sh",
        &format!(
            "read -r told\n\
             if [ \"$KORVUS_ATTEMPT\" = 1 ]; then\n\
               mkdir -p work && echo 'half done' > work/progress.txt\n\
               exec sleep {nap}\n\
             fi\n\
             echo \"attempt=$KORVUS_ATTEMPT progress=$(cat work/progress.txt)\"\n\
             echo \"manifest=$(tr -d ' \\n\\\"' < \"$KORVUS_MANIFEST\" | grep -o 'attempt:[0-9]*,interrupted_at:[^,]*,restored_from:[^,]*')\"\n\
             printf '# done\\n' > report.md\n"
        ),
    );
    let mut a = Server::start_with(data.path(), Some(&agent), "0", &flags());
    let (status, incident) = a.call("POST", "/api/incidents", Some(r#"{"title": "deploy"}"#));
    assert_eq!(status, 201, "{incident}");
    let incident = incident["id"].as_str().unwrap().to_owned();
    let mut b = Server::start_with(data.path(), Some(&agent), "0", &flags());
    // Half run on each replica (a session runs where it was created).
    let ids: Vec<String> = (0..SESSIONS)
        .map(|n| create(if n % 2 == 0 { &a } else { &b }, &incident, n))
        .collect();
    all_working(data.path(), &ids);

    // A's sessions go to B, which resumes and finishes them; then B's go
    // to the restarted A.
    restart(&mut a, data.path(), &agent);
    restart(&mut b, data.path(), &agent);

    let deadline = Instant::now() + Duration::from_secs(90);
    let rows = loop {
        let rows = rows(&a, &ids);
        if rows.iter().all(|r| r["status"] != "running") {
            break rows;
        }
        assert!(Instant::now() < deadline, "{rows:#?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    for (id, row) in ids.iter().zip(&rows) {
        assert_eq!(row["status"], "completed", "{id}: {row}");
        assert_eq!(row["revision"], 1, "{row}");
        assert!(row["attempt"].as_u64() >= Some(2), "{row}");
        let show = ok(crate::support::korvus(data.path()).args(["show", id]));
        let reports = show.split("\nartifacts").next().unwrap_or_default();
        assert_eq!(reports.matches("  rev ").count(), 1, "{show}");
        assert!(!show.contains("cancelled"), "{show}");
        let log = ok(crate::support::korvus(data.path()).args(["export", id]));
        assert!(log.contains("handed off"), "{log}");
        assert!(log.contains("progress=half done"), "restored:\n{log}");
        // The manifest says which attempt this is (2, or 3 when the
        // resumed attempt was itself handed off by the second restart) and
        // what it continues from (both times are set: the hand-off stored
        // a checkpoint).
        let attempt = attempt_in(&log, "manifest=attempt:");
        assert!(attempt >= 2, "{log}");
        assert!(
            log.contains(&format!("manifest=attempt:{attempt},interrupted_at:20"))
                && log.contains(",restored_from:20"),
            "{log}"
        );
    }
    // The view says which attempt of its revision a session's run is.
    let downloads = tempfile::tempdir().unwrap();
    if let Some(d) = crate::browser::browser(downloads.path()) {
        d.goto(&format!("{}/#token={}", a.base, crate::serve::TOKEN));
        d.wait_for(
            "the incident list",
            "return document.querySelector('.incident-link')",
        );
        d.goto(&format!("{}/#/sessions/{}", a.base, ids[0]));
        let shown = d.wait_for(
            "the attempt",
            "const a = document.querySelector('#revision'); return a && a.textContent;",
        );
        let shown = shown.as_str().unwrap_or_default().to_owned();
        let attempt = attempt_in(&shown, "revision 1, attempt ");
        assert!(attempt >= 2, "{shown}");
        assert_eq!(Some(attempt), rows[0]["attempt"].as_u64(), "{shown}");
    }
    drop(b);
    drop(a);
}

/// `korvus run` is a manager of its pool while it runs its own session: it
/// may pick up another session's resume. Once its own session is done, it
/// lets that run finish — and Ctrl-C hands it back to the pool instead of
/// cancelling it; a `korvus serve` of the pool then resumes it.
#[test]
fn korvus_run_hands_a_picked_up_resume_back_on_ctrl_c() {
    let data = tempfile::tempdir().unwrap();
    let nap = unique_sleep();
    // `mine` (the run's own session) works a while and finishes; any other
    // works until stopped, and finishes on its third attempt.
    let agent = script(
        data.path(),
        "agent.sh",
        &format!(
            "read -r told\n\
             case \"$told\" in\n\
               mine*) sleep 12; printf '# mine\\n' > report.md ;;\n\
               *) if [ \"$KORVUS_ATTEMPT\" = 3 ]; then printf '# long\\n' > report.md; exit 0; fi\n\
                  mkdir -p work && echo \"attempt $KORVUS_ATTEMPT\" > work/progress.txt\n\
                  exec sleep {nap} ;;\n\
             esac\n"
        ),
    );
    let lease = ["--lease-ttl", "2", "--heartbeat", "0.5"];
    // A session whose replica dies mid-run.
    let mut first = Server::start_with(data.path(), Some(&agent), "0", &lease);
    let (status, incident) = first.call("POST", "/api/incidents", Some(r#"{"title": "ctrl-c"}"#));
    assert_eq!(status, 201, "{incident}");
    let incident = incident["id"].as_str().unwrap().to_owned();
    let id = create(&first, &incident, 0);
    let progress = data
        .path()
        .join("scratch")
        .join(&id)
        .join("1/work/progress.txt");
    wait_for_text(&progress, "attempt 1");
    first.child.kill().expect("SIGKILL");
    first.child.wait().unwrap();

    // `korvus run` takes it over and resumes it beside its own session.
    let mut run = crate::support::korvus(data.path())
        .args(lease)
        .args(["run", "--agent", "sh", "--agent-arg"])
        .arg(&agent)
        .arg("mine")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("korvus run starts");
    wait_for_text(&progress, "attempt 2");
    let mut stderr = std::io::BufReader::new(run.stderr.take().expect("stderr"));
    let said = crate::support::lines_until(&mut stderr, "picked up from the pool's queue");
    assert!(said.contains("Ctrl-C hands them back"), "{said}");
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    let pid = nix::unistd::Pid::from_raw(run.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    let status = run.wait().expect("korvus run exits");
    assert_eq!(status.code(), Some(0), "its own session completed");
    let show = ok(crate::support::korvus(data.path()).args(["show", &id]));
    assert!(
        show.contains("resume pending"),
        "handed back, not cancelled: {show}"
    );

    let second = Server::start_with(data.path(), Some(&agent), "0", &lease);
    let deadline = Instant::now() + Duration::from_secs(60);
    let row = loop {
        let (_, row) = second.call("GET", &format!("/api/sessions/{id}"), None);
        if row["status"] != "running" {
            break row;
        }
        assert!(Instant::now() < deadline, "{row}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(row["attempt"], 3, "{row}");
    let log = ok(crate::support::korvus(data.path()).args(["export", &id]));
    assert!(log.contains("handed off"), "{log}");
    drop(second);
}

/// Waits (60 s at most) until the file at `path` holds `text`.
fn wait_for_text(path: &std::path::Path, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(path).is_ok_and(|t| t.contains(text)) {
        assert!(
            Instant::now() < deadline,
            "{} never held {text:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
