//! The operator's view in a real browser, at a desktop's 1280×800 and a
//! phone's 390×844: the session page's summary (prompt, breadcrumb, times,
//! counters, cause), three revisions readable in place, a Markdown table,
//! field errors, keyboard access to the events, live state without a
//! reload, and axe-core's accessibility rules — with a screenshot of each
//! page under `target/browser-screenshots/` (described in `docs/http.md`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::browser::browser;
use crate::serve::{Server, TOKEN};
use crate::support::script;
use crate::webdriver::Driver;

/// An agent of one turn with every kind of event; its report (with a
/// table) names what it was asked. A prompt with `fail` exits 3, with
/// `ask` waits for the user (exit 75), with `slow` takes 8 s, with `pause`
/// 4 s.
const AGENT: &str = r#"prompt=$(cat)
safe=$(printf %s "$prompt" | tr -d '"\\\n' | head -c 80)
echo '{"type":"turn_start","turn":1}'
printf '{"type":"message","role":"assistant","text":"Looking into: %s"}\n' "$safe"
echo '{"type":"tool_call","call_id":"c1","tool":"shell","input":{"cmd":"df -h"}}'
echo '{"type":"tool_result","call_id":"c1","ok":true,"output":"/ 95% used"}'
echo '{"type":"tool_call","call_id":"c2","tool":"shell","input":{"cmd":"du -sh /nope"}}'
echo '{"type":"tool_result","call_id":"c2","ok":false,"output":"du: cannot access /nope"}'
echo '{"type":"usage","input_tokens":120,"output_tokens":45}'
echo 'warning: the disk is nearly full' >&2
case "$prompt" in *slow*) sleep 8;; *pause*) sleep 4;; esac
cat > report.md <<EOF
# Findings

Asked: $safe

| Mount | Used | Free |
|---|---:|---:|
| / | 95% | 2 GiB |
| /var | 40% | 30 GiB |
EOF
echo '{"type":"turn_end","turn":1}'
case "$prompt" in
  *fail*) echo 'cannot reach the model' >&2; exit 3;;
  *ask*) exit 75;;
esac
"#;

/// Where the screenshots go: the workspace's target dir.
fn shots() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    target.join("browser-screenshots")
}

fn post(server: &Server, path: &str, body: Value) -> Value {
    let (status, answer) = server.call("POST", path, Some(&body.to_string()));
    assert!((200..300).contains(&status), "{path}: {status} {answer}");
    answer
}

/// The session's row once it is no longer running (or waits for the user).
fn settle(server: &Server, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, row) = server.call("GET", &format!("/api/sessions/{id}"), None);
        let idle = ["awaiting_user", "budget_reached"].map(serde_json::Value::from);
        if row["status"] != "running" || idle.contains(&row["exit_reason"]) {
            return row;
        }
        assert!(Instant::now() < deadline, "{id} never settled: {row}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn session(server: &Server, incident: &str, prompt: &str) -> String {
    let row = post(
        server,
        &format!("/api/incidents/{incident}/sessions"),
        json!({ "prompt": prompt }),
    );
    row["id"].as_str().unwrap().to_owned()
}

/// axe-core's serious and critical violations on the page shown now.
fn axe(d: &Driver, page: &str) {
    let Ok(path) = std::env::var("KORVUS_AXE_JS") else {
        let why = std::env::var("KORVUS_AXE_UNAVAILABLE")
            .unwrap_or_else(|_| "KORVUS_AXE_JS is not set (`cargo xtask test` sets it)".into());
        if std::env::var("KORVUS_REQUIRE_SERVICES").as_deref() == Ok("1") {
            panic!("the accessibility check needs axe-core: {why}");
        }
        eprintln!("SKIPPED the accessibility check of {page}: {why}");
        return;
    };
    let source = std::fs::read_to_string(&path).expect("axe.min.js");
    d.js(&format!("{source}\n;return typeof window.axe;"));
    let found = d.js_async(
        "const done = arguments[arguments.length - 1]; \
         axe.run(document, { resultTypes: ['violations'] }).then(r => done(r.violations \
           .filter(v => v.impact === 'serious' || v.impact === 'critical') \
           .map(v => ({ id: v.id, impact: v.impact, help: v.help, \
                        nodes: v.nodes.slice(0, 5).map(n => n.target.join(' ')) })))) \
         .catch(e => done('axe failed: ' + e));",
    );
    assert_eq!(
        found,
        json!([]),
        "{page}: serious or critical accessibility violations"
    );
}

/// Whether nothing runs off the right edge of the viewport.
fn fits(d: &Driver, what: &str) {
    let over = d.js(
        "const w = window.innerWidth; \
         return [...document.querySelectorAll('#main *')].filter(e => { \
           const r = e.getBoundingClientRect(); \
           return r.width > 0 && r.right > w + 1 && !e.closest('.table-scroll, #events-box'); }) \
           .map(e => e.tagName + (e.id ? '#' + e.id : '') + ' ' + Math.round(e.getBoundingClientRect().right)) \
           .slice(0, 5);",
    );
    assert_eq!(
        over,
        json!([]),
        "{what}: elements run off a {} px screen",
        d.js("return window.innerWidth")
    );
}

fn wait_text(d: &Driver, what: &str, css: &str, needle: &str) {
    let script = format!(
        "const e = document.querySelector({css:?}); return !!e && e.textContent.includes({needle:?});"
    );
    d.wait_for(what, &script);
}

#[test]
fn the_session_page_lets_a_person_judge_and_steer_a_session_at_desktop_and_phone_sizes() {
    let data = tempfile::tempdir().unwrap();
    let downloads = tempfile::tempdir().unwrap();
    let agent = script(data.path(), "agent.sh", AGENT);
    let server = Server::start_with(data.path(), Some(&agent), "0", &["--max-running", "1"]);
    let incident = post(
        &server,
        "/api/incidents",
        json!({"title": "db-1 disk full"}),
    );
    let inc = incident["id"].as_str().unwrap().to_owned();

    // Three revisions of one session; a failed one; one waiting for the user.
    let three = session(&server, &inc, "Why is the disk full?");
    settle(&server, &three);
    for message in ["What about /var?", "And now?"] {
        post(
            &server,
            &format!("/api/sessions/{three}/reopen"),
            json!({ "message": message }),
        );
        settle(&server, &three);
    }
    let failed = session(&server, &inc, "please fail");
    assert_eq!(settle(&server, &failed)["status"], "failed");
    let asks = session(&server, &inc, "please ask me");
    assert_eq!(settle(&server, &asks)["exit_reason"], "awaiting_user");
    // And one whose budget is spent before it starts (no time at all).
    let capped = post(
        &server,
        &format!("/api/incidents/{inc}/sessions"),
        json!({"prompt": "capped", "budget": {"tokens": 1000, "wall_ms": 0}}),
    )["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(settle(&server, &capped)["exit_reason"], "budget_reached");

    let Some(d) = browser(downloads.path()) else {
        return;
    };
    d.goto(&format!("{}/#token={TOKEN}", server.base));
    d.wait_for(
        "the incident list",
        "return document.querySelector('.incident-link')",
    );
    for (name, width, height, mobile) in [("desktop", 1280, 800, false), ("phone", 390, 844, true)]
    {
        d.viewport(width, height, mobile);
        let shot = |page: &str| d.screenshot(&shots().join(format!("{name}-{page}.png")));
        let at = |what: &str| format!("{what} at {width}×{height}");

        // The incident list.
        d.goto(&format!("{}/#/", server.base));
        d.wait_for(
            "the incident list",
            "return document.querySelector('.incident-link')",
        );
        assert_eq!(d.js("return document.title"), "Incidents · korvus");
        fits(&d, &at("the incident list"));
        shot("incidents");
        axe(&d, &at("the incident list"));

        // The incident: a session created through the API appears within 3 s.
        d.goto(&format!("{}/#/incidents/{inc}", server.base));
        d.wait_for(
            "the incident's sessions",
            "return document.querySelectorAll('.session-link').length >= 3",
        );
        assert_eq!(d.js("return document.title"), "db-1 disk full · korvus");
        fits(&d, &at("the incident page"));
        shot("incident");
        axe(&d, &at("the incident page"));
        let before = d.js("return document.querySelectorAll('.session-link').length");
        let slow = session(&server, &inc, &format!("slow look {name}"));
        let created = Instant::now();
        d.wait_for(
            "the session created through the API",
            &format!("return document.querySelectorAll('.session-link').length > {before}"),
        );
        assert!(
            created.elapsed() < Duration::from_secs(3),
            "{}: it took {:?}",
            at("a new session on the open incident page"),
            created.elapsed()
        );
        // An empty prompt says so beside its field.
        d.click("#create-session");
        wait_text(
            &d,
            "the prompt's error",
            "#new-session-prompt-error",
            "Write a prompt",
        );
        assert_eq!(
            d.js(
                "return document.querySelector('#new-session-prompt').getAttribute('aria-invalid')"
            ),
            "true"
        );

        // A queued session's page turns to running without a reload.
        let queued = session(&server, &inc, &format!("queued pause {name}"));
        // Cancelled while queued: it never ran, so there is nothing to reopen.
        let never = session(&server, &inc, &format!("never run {name}"));
        post(&server, &format!("/api/sessions/{never}/cancel"), json!({}));
        d.goto(&format!("{}/#/sessions/{queued}", server.base));
        d.wait_for("the queued session", &crate::browser::status_is("queued"));
        wait_text(&d, "its place in line", "#queue", "about 1st in line");
        d.js("window.__sameDocument = true; return 1");
        shot("queued");
        d.wait_for(
            "the queued session, running",
            &crate::browser::status_is("running"),
        );
        assert_eq!(
            d.js("return window.__sameDocument === true"),
            true,
            "the page was reloaded"
        );
        settle(&server, &slow);
        settle(&server, &queued);

        // The session of three revisions.
        d.goto(&format!("{}/#/sessions/{three}", server.base));
        d.wait_for(
            "the completed session",
            &crate::browser::status_is("completed"),
        );
        let summary = d.wait_for(
            "the summary",
            "const q = (s) => document.querySelector(s); \
             return q('#report [data-revision]') && document.querySelectorAll('#events li[data-type]').length > 20 && { \
               prompt: q('#prompt').textContent, \
               crumbs: [...document.querySelectorAll('nav.breadcrumb li')].map(l => l.textContent), \
               incidentLink: q('nav.breadcrumb a[href^=\"#/incidents/\"]').getAttribute('href'), \
               times: document.querySelectorAll('#times time').length, \
               duration: q('#duration').textContent, \
               counters: q('#counters').textContent, \
               revision: q('#revision').textContent, \
               title: document.title, \
               revisions: document.querySelectorAll('details.revision').length, \
               conversation: [...document.querySelectorAll('#messages li p')].map(p => p.textContent) };",
        );
        assert_eq!(summary["prompt"], "Why is the disk full?", "{summary}");
        assert_eq!(
            summary["crumbs"],
            json!(["Incidents", "db-1 disk full", "Session #1"]),
            "{summary}"
        );
        assert_eq!(
            summary["incidentLink"],
            format!("#/incidents/{inc}"),
            "{summary}"
        );
        assert_eq!(summary["times"], 3, "created, started, ended: {summary}");
        assert!(
            summary["duration"].as_str().unwrap().ends_with(" s"),
            "{summary}"
        );
        let counters = summary["counters"].as_str().unwrap();
        assert!(
            counters.contains("1 turn ·")
                && counters.contains("2 tool calls")
                && counters.contains("120 input / 45 output"),
            "{summary}"
        );
        assert_eq!(summary["revision"], "revision 3, attempt 1", "{summary}");
        assert_eq!(summary["title"], "Session #1 · db-1 disk full · korvus");
        assert_eq!(summary["revisions"], 3, "{summary}");
        assert_eq!(
            summary["conversation"],
            json!(["Why is the disk full?", "What about /var?", "And now?"]),
            "{summary}"
        );
        // Three revisions readable in place, the newest open.
        wait_text(&d, "the newest report", "#report", "Asked: And now?");
        for (revision, asked) in [(1, "Why is the disk full?"), (2, "What about /var?")] {
            d.click(&format!(
                "details.revision[data-revision='{revision}'] > summary"
            ));
            wait_text(
                &d,
                "an earlier report, in place",
                &format!("#report-{revision}"),
                &format!("Asked: {asked}"),
            );
        }
        // The report's table is a table, its heading under the section's.
        let table = d.js(
            "const t = document.querySelector('#report table'); \
             return t && { head: [...t.querySelectorAll('th')].map(c => c.textContent), \
               first: [...t.querySelectorAll('tbody tr:first-child td')].map(c => c.textContent), \
               heading: document.querySelector('#report h4') && document.querySelector('#report h4').textContent };",
        );
        assert_eq!(table["head"], json!(["Mount", "Used", "Free"]), "{table}");
        assert_eq!(table["first"], json!(["/", "95%", "2 GiB"]), "{table}");
        assert_eq!(table["heading"], "Findings", "{table}");
        // The timeline: times, pairs, failures, korvus apart, a filter.
        let timeline = d.js(
            "const li = [...document.querySelectorAll('#events li[data-type]')]; \
             return { timed: li.filter(l => l.querySelector('time')).length, all: li.length, \
               paired: document.querySelectorAll('#events li.paired').length, \
               failures: document.querySelectorAll('#events li.failure').length, \
               korvus: document.querySelectorAll('#events li.by-korvus').length, \
               separators: [...document.querySelectorAll('#events li.sep')].map(l => l.textContent) };",
        );
        assert!(
            timeline["timed"].as_u64() >= Some(timeline["all"].as_u64().unwrap() - 3),
            "{timeline}"
        );
        assert_eq!(timeline["paired"], 6, "two calls per revision: {timeline}");
        assert!(
            timeline["failures"].as_u64() >= Some(6),
            "a failed call and stderr per revision: {timeline}"
        );
        assert!(timeline["korvus"].as_u64() >= Some(3), "{timeline}");
        assert_eq!(
            timeline["separators"],
            json!(["Revision 1", "Revision 2", "Revision 3"]),
            "{timeline}"
        );
        d.js("const f = document.querySelector('#event-filter'); f.value = 'failures'; f.dispatchEvent(new Event('change')); return 1");
        let shown = d.js(
            "return [...document.querySelectorAll('#events li[data-type]')].filter(l => l.offsetParent !== null) \
             .every(l => l.classList.contains('failure'));",
        );
        assert_eq!(shown, true, "the failures filter");
        d.js("const f = document.querySelector('#event-filter'); f.value = 'all'; f.dispatchEvent(new Event('change')); return 1");
        // The events box is reached with Tab.
        d.js("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); return 1");
        let mut reached = false;
        for _ in 0..80 {
            d.tab();
            if d.js("return document.activeElement && document.activeElement.id") == "events-box" {
                reached = true;
                break;
            }
        }
        assert!(
            reached,
            "{}: the events box is not reachable with Tab",
            at("the session page")
        );
        // An empty follow-up says so beside its field.
        d.click("#reopen");
        wait_text(
            &d,
            "the message's error",
            "#message-error",
            "Write a message first.",
        );
        assert_eq!(
            d.js("return document.querySelector('#message-error').previousElementSibling.contains(document.querySelector('#message'))"),
            true,
            "the error sits beside its field"
        );
        d.js("window.scrollTo(0, 0); return 1");
        fits(&d, &at("the session page"));
        shot("session");
        axe(&d, &at("the session page"));

        d.goto(&format!("{}/#/sessions/{never}", server.base));
        d.wait_for(
            "the session that never ran",
            &crate::browser::status_is("cancelled"),
        );
        d.wait_for(
            "no reopen for it",
            "return document.querySelector('#never-ran') && !document.querySelector('#reopen')",
        );

        // The failed session says why.
        d.goto(&format!("{}/#/sessions/{failed}", server.base));
        d.wait_for("the failed session", &crate::browser::status_is("failed"));
        let cause = d.wait_for(
            "its cause",
            "const c = document.querySelector('#cause'); return c && c.textContent;",
        );
        assert!(!cause.as_str().unwrap().trim().is_empty(), "{cause}");
        shot("failed");

        // The waiting session: reply and cancel fit the screen; an empty
        // reply says so beside its field; cancel asks first.
        d.goto(&format!("{}/#/sessions/{asks}", server.base));
        d.wait_for(
            "the waiting session",
            &crate::browser::status_is("awaiting_user"),
        );
        d.wait_for(
            "its reply form",
            "return document.querySelector('#reply') && document.querySelector('#cancel')",
        );
        d.click("#reply");
        wait_text(
            &d,
            "the reply's error",
            "#message-error",
            "Write a message first.",
        );
        fits(&d, &at("the waiting session"));
        d.click("#cancel");
        d.wait_for(
            "the confirmation",
            "return document.querySelector('#cancel-confirm')",
        );
        shot("waiting");
        d.click("#cancel-keep");
        d.wait_for("the cancel button again", "return document.querySelector('#cancel') && !document.querySelector('#cancel-confirm')");
        axe(&d, &at("the waiting session"));

        // The session paused at its budget: what it spent of what, and a
        // form to raise it that refuses what is not a number.
        d.goto(&format!("{}/#/sessions/{capped}", server.base));
        d.wait_for(
            "the paused session",
            &crate::browser::status_is("budget_reached"),
        );
        wait_text(
            &d,
            "its budget",
            "#budget",
            "session: 0 of 1,000 tokens, 0 of 0 s of runs (reached)",
        );
        d.type_into("#budget-tokens", "lots");
        d.click("#raise");
        wait_text(
            &d,
            "the raise's error",
            "#budget-tokens-error",
            "A whole number of tokens, please.",
        );
        fits(&d, &at("the paused session"));
        shot("budget");
        axe(&d, &at("the paused session"));
    }

    // Close incident: the form goes, its sessions stay readable.
    d.goto(&format!("{}/#/incidents/{inc}", server.base));
    d.wait_for(
        "the close button",
        "return document.querySelector('#close-incident')",
    );
    d.click("#close-incident");
    wait_text(
        &d,
        "the closed incident",
        "#incident-status",
        "Incident closed",
    );
    let after = d.js(
        "return { form: !!document.querySelector('#new-session-prompt'), \
           sessions: document.querySelectorAll('.session-link').length };",
    );
    assert_eq!(after["form"], false, "{after}");
    assert!(after["sessions"].as_u64() >= Some(5), "{after}");
    let (_, row) = server.call("GET", &format!("/api/incidents/{inc}"), None);
    assert_eq!(row["status"], "closed", "{row}");
}
