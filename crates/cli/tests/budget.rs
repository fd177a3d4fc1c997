//! The scratch limit bounds what a revision stores, not only the blocks
//! its scratch dir holds: sparse files, hard links and a writer faster
//! than the disk poll each put at most the limit into the blob store, and
//! the manifest lists what was left out.

use crate::support::{korvus, output, script, session_id, stdout};

/// The limit every run here gets.
const LIMIT: u64 = 50 * 1024 * 1024;

/// What `du -sb` says `dir` holds, in bytes.
fn du(dir: &std::path::Path) -> u64 {
    let out = std::process::Command::new("du")
        .arg("-sb")
        .arg(dir)
        .output()
        .expect("du runs");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .expect("du's figure")
}

/// Runs `agent` under `--scratch-limit 50MiB` in a data dir of its own and
/// returns what `blobs/` holds afterwards, the run's export and its
/// harvest manifest's text.
fn stored_by(name: &str, agent: &str) -> (u64, String, String) {
    let data = tempfile::tempdir().expect("temp dir");
    let agent = script(data.path(), &format!("{name}.sh"), agent);
    let before = {
        // The data dir's blobs/ as made, before any run.
        let out = output(korvus(data.path()).arg("ls"));
        assert!(out.status.success());
        du(&data.path().join("blobs"))
    };
    let out = output(
        korvus(data.path())
            .args([
                "run",
                "--scratch-limit",
                "50MiB",
                "--agent",
                "sh",
                "--agent-arg",
            ])
            .arg(&agent)
            .arg(name),
    );
    let said = stdout(&out);
    let id = session_id(&said);
    let blobs = du(&data.path().join("blobs")) - before;
    let export = crate::support::ok(korvus(data.path()).args(["export", &id]));
    let show = crate::support::ok(korvus(data.path()).args(["show", &id]));
    let manifest = find_manifest(&data.path().join("blobs"));
    assert!(!manifest.is_empty(), "{name}: a manifest:\n{said}\n{show}");
    (blobs, export, manifest)
}

/// The text of the one harvest manifest under `blobs`.
fn find_manifest(blobs: &std::path::Path) -> String {
    let mut pending = vec![blobs.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if let Ok(text) = std::fs::read_to_string(&path) {
                if text.contains("\"skipped\"") && text.contains("\"stored\"") {
                    return text;
                }
            }
        }
    }
    String::new()
}

#[test]
fn sparse_files_hard_links_and_a_fast_writer_store_at_most_the_scratch_limit() {
    let cases = [
        (
            "sparse",
            "echo '# sparse' > report.md\n\
             truncate -s 1000M one.bin\n\
             truncate -s 1000M two.bin\n",
            "over_budget",
        ),
        (
            "links",
            "echo '# links' > report.md\n\
             head -c 41943040 /dev/urandom > data.bin\n\
             for n in 0 1 2 3 4 5 6 7 8 9; do ln data.bin link-$n.bin; done\n",
            "hard_link",
        ),
        (
            "dd",
            "echo '# dd' > report.md\n\
             dd if=/dev/urandom of=big.bin bs=1M count=400 2>/dev/null\n\
             sleep 3\n",
            "over_budget",
        ),
    ];
    for (name, agent, reason) in cases {
        let (blobs, export, manifest) = stored_by(name, agent);
        // The report, the manifest and the blob store's own bookkeeping
        // beside what the limit admits.
        assert!(
            blobs <= LIMIT + 1024 * 1024,
            "{name}: {blobs} bytes stored under a {LIMIT}-byte limit\n{manifest}"
        );
        assert!(
            manifest.contains(&format!("\"reason\": \"{reason}\"")),
            "{name}: the manifest lists what was left out:\n{manifest}"
        );
        if name != "dd" {
            assert!(
                export.contains("the harvest manifest lists them"),
                "{name}: a note says so:\n{export}"
            );
        }
    }
}
