//! Two replicas on PostgreSQL sharing a blob store but not a scratch root,
//! as on two hosts: one is SIGKILLed mid-run and its scratch dir is gone
//! with its host; the other lands what the dead run's last checkpoint
//! held — every file written a checkpoint before the kill — and the report
//! row names the checkpoint.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{korvus, ok, running, script, session_id, unique_sleep, NO_CGROUP};

/// A data dir of its own whose blob dir is `blobs` (shared by symlink).
fn host(blobs: &Path) -> tempfile::TempDir {
    let data = tempfile::tempdir().expect("temp dir");
    std::os::unix::fs::symlink(blobs, data.path().join("blobs")).unwrap();
    data
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_replica_on_another_host_is_landed_from_its_last_checkpoint() {
    crate::services::with_postgres("korvus_cli_hosts", |url| {
        let blobs = tempfile::tempdir().expect("temp dir");
        let (a, b) = (host(blobs.path()), host(blobs.path()));
        let env = [("KORVUS_DATABASE_URL", url)];
        let lease = [
            "--lease-ttl",
            "2",
            "--heartbeat",
            "0.5",
            "--checkpoint-interval",
            "1",
            "--resume-orphans",
            "0",
        ];
        let nap = unique_sleep();
        let agent = script(
            a.path(),
            "agent.sh",
            &format!(
                "printf '# findings before the crash\\n' > report.md\nmkdir -p work\n\
                 echo 'step 3 of 5' > work/progress.txt\n\
                 echo '{{\"type\":\"turn_start\",\"turn\":1}}'\n\
                 echo '{{\"type\":\"turn_end\",\"turn\":1}}'\n\
                 echo 'agent is working'\nexec sleep {nap}\n"
            ),
        );
        let (mut victim, seen) = crate::support::spawn_until_working(
            korvus(a.path())
                .envs(env)
                .args(lease)
                .args(["run", "--agent", "sh", "--agent-arg"])
                .arg(&agent)
                .args(NO_CGROUP)
                .arg("a long investigation")
                .stderr(Stdio::null()),
        );
        let id = session_id(&seen);
        // Both files are in a checkpoint (hidden rows `korvus show` lists
        // as `checkpoint`) before the kill.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let show = ok(korvus(b.path()).envs(env).args(["show", &id]));
            if show.matches(" checkpoint ").count() >= 2 {
                break;
            }
            assert!(Instant::now() < deadline, "no checkpoint:\n{show}");
            std::thread::sleep(Duration::from_millis(100));
        }
        victim.kill().expect("SIGKILL");
        let _ = victim.wait();
        // Its host is gone: its agent and its scratch dir with it.
        let _ = std::process::Command::new("pkill")
            .args(["-KILL", "-f", &format!("^sleep {nap}")])
            .status();
        std::fs::remove_dir_all(a.path().join("scratch")).unwrap();
        assert!(!running(&format!("sleep {nap}")));

        // The other host, past the lease: takes over and lands the checkpoint.
        std::thread::sleep(Duration::from_millis(2500));
        let reaped = ok(korvus(b.path())
            .envs(env)
            .args(lease)
            .args(["reap", "--apply"]));
        assert!(reaped.contains(&id), "{reaped}");
        let show = ok(korvus(b.path()).envs(env).args(["show", &id]));
        assert!(show.contains("status     failed"), "{show}");
        assert!(show.contains("exit       owner_lost"), "{show}");
        assert!(show.contains("fence      2"), "taken over once: {show}");
        assert!(
            show.contains("salvaged from the checkpoint of the lost run"),
            "{show}"
        );
        let report = ok(korvus(b.path()).envs(env).args(["cat", &id]));
        assert!(report.contains("# findings before the crash"), "{report}");
        let progress = ok(korvus(b.path())
            .envs(env)
            .args(["cat", &id, "work/progress.txt"]));
        assert_eq!(progress.trim(), "step 3 of 5");
    })
    .await;
}
