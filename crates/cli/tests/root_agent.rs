//! `--agent-user root` keeps root, but not what an agent does not need,
//! whatever the network policy: no administration, no tracing, so it
//! cannot read korvus's environment (the embedder's secrets); the run's log
//! says what it keeps.

use crate::support::{korvus, ok, script, session_id};

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
