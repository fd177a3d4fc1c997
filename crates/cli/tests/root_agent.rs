//! `--agent-user root` keeps root, but not what an agent does not need,
//! whatever the network policy: no administration, no tracing, so it
//! cannot read korvus's environment (the embedder's secrets); the run's log
//! says what it keeps. And it sees no other process: not korvus, not
//! another agent, not korvus's init in its own PID namespace.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{korvus, ok, read_until, script, session_id, unique_sleep};

const PROBE: &str = r#"
if cat /proc/$PPID/environ >/dev/null 2>&1; then echo environ=read; else echo environ=denied; fi
echo "bounding=$(awk '/^CapBnd/ {print $2}' /proc/self/status)"
echo '# R' > report.md
"#;

#[test]
fn a_root_agent_loses_the_capabilities_it_does_not_need() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test runs korvus as root (CI does): --agent-user root needs it"
    );
    let data = tempfile::tempdir().expect("temp dir");
    let agent = script(data.path(), "probe.sh", PROBE);
    for network in ["host", "none"] {
        let out = ok(korvus(data.path())
            .env("KORVUS_SECRET_OF_THE_EMBEDDER", "s3cr3t")
            .args(["run", "--agent-user", "root", "--network", network])
            .args(["--agent", "sh", "--agent-arg"])
            .arg(&agent)
            .arg("probe"));
        let log = ok(korvus(data.path()).args(["export", &session_id(&out)]));
        assert!(
            log.contains("environ=denied"),
            "{network}: korvus's environment:\n{log}"
        );
        let bounding = log
            .split('"')
            .find_map(|s| s.strip_prefix("bounding="))
            .expect("the agent's bounding set");
        let caps = u64::from_str_radix(bounding, 16).expect("hex");
        for (name, bit) in [
            ("CAP_SYS_ADMIN", 21),
            ("CAP_SYS_PTRACE", 19),
            ("CAP_DAC_READ_SEARCH", 2),
            ("CAP_SYS_MODULE", 16),
            ("CAP_MKNOD", 27),
            ("CAP_NET_RAW", 13),
        ] {
            assert_eq!(caps & (1 << bit), 0, "{network}: {name} kept: {bounding}");
        }
        assert_ne!(caps & 1, 0, "{network}: CAP_CHOWN kept: {bounding}");
        assert!(
            log.contains("the agent runs as root without ")
                && log.contains("CAP_SYS_ADMIN, ")
                && log.contains("it keeps CAP_CHOWN"),
            "{network}: the note:\n{log}"
        );
    }
}

/// What a root agent can reach of other processes: `$1` is another
/// korvus's pid, `$2` that korvus's agent's (host pids).
const OTHERS: &str = r#"
ptrace() {
    /usr/bin/python3 -c 'import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
print("attached" if libc.ptrace(16, int(sys.argv[1]), 0, 0) == 0 else "denied")' "$1" 2>/dev/null || echo denied
}
for who in korvus:$1 agent:$2 init:1; do
    name=${who%%:*}; pid=${who#*:}
    if cat /proc/$pid/environ >/dev/null 2>&1; then echo "$name-environ=read"; else echo "$name-environ=denied"; fi
    echo "$name-ptrace=$(ptrace $pid)"
done
if kill -0 $1 2>/dev/null; then echo korvus-signal=sent; else echo korvus-signal=denied; fi
echo "processes=$(ls /proc | grep -c '^[0-9]')"
echo "init-cmdline=$(tr '\0' ' ' < /proc/1/cmdline)"
echo '# R' > report.md
"#;

#[test]
fn a_root_agent_sees_no_other_process_and_reads_no_environment() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test runs korvus as root (CI does): --agent-user root needs it"
    );
    let data = tempfile::tempdir().expect("temp dir");
    let sleep = unique_sleep();
    let other = script(
        data.path(),
        "other.sh",
        &format!("echo agent is working\nexec sleep {sleep}\n"),
    );
    // Another korvus (its own data dir) whose agent runs meanwhile.
    let other_data = tempfile::tempdir().expect("temp dir");
    let mut first = korvus(other_data.path())
        .env("KORVUS_SECRET_OF_THE_EMBEDDER", "s3cr3t")
        .args(["run", "--agent-user", "root"])
        .args(["--agent", "sh", "--agent-arg"])
        .arg(&other)
        .arg("sleeper")
        .stdout(Stdio::piped())
        .spawn()
        .expect("korvus starts");
    read_until(&mut first, "agent is working");
    let agent_pid = pid_of(&format!("sleep {sleep}"));
    let probe = script(data.path(), "others.sh", OTHERS);
    let out = ok(korvus(data.path())
        .args(["run", "--agent-user", "root", "--network", "host"])
        .args(["--agent", "sh", "--agent-arg"])
        .arg(&probe)
        .args([
            "--agent-arg",
            &first.id().to_string(),
            "--agent-arg",
            &agent_pid.to_string(),
        ])
        .arg("others"));
    let log = ok(korvus(data.path()).args(["export", &session_id(&out)]));
    let _ = first.kill();
    let _ = first.wait();
    for line in [
        "korvus-environ=denied",
        "korvus-ptrace=denied",
        "agent-environ=denied",
        "agent-ptrace=denied",
        "init-environ=denied",
        "init-ptrace=denied",
        "korvus-signal=denied",
    ] {
        assert!(log.contains(line), "{line}:\n{log}");
    }
    // The init is a copy of korvus: its command line is blanked.
    assert!(log.contains("init-cmdline="), "{log}");
    assert!(!log.contains("--data-dir"), "korvus's command line:\n{log}");
    let processes: u32 = log
        .split('"')
        .find_map(|s| s.strip_prefix("processes="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no process count:\n{log}"));
    // korvus's init, the shell, `ls`, `grep` and the subshell at most.
    assert!(
        processes <= 6,
        "the agent lists {processes} processes:\n{log}"
    );
}

/// The pid of the process whose command line is `line`, waiting for it.
fn pid_of(line: &str) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = std::process::Command::new("pgrep")
            .args(["-x", "-f", line])
            .output()
            .expect("pgrep runs");
        let text = String::from_utf8_lossy(&out.stdout);
        if let Some(pid) = text.lines().next().and_then(|l| l.trim().parse().ok()) {
            return pid;
        }
        assert!(Instant::now() < deadline, "no process {line:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
