//! Running one test of this binary again in a child process under a 32 KiB
//! file size limit, for the tests of writes the file system cuts short.

use std::path::Path;
use std::process::Command;

use korvus_log::LogId;

/// Runs test `name` of this binary in a child with `ulimit -f 64` (64
/// blocks of 512 bytes) and SIGXFSZ ignored, so a write past the limit
/// fails with EFBIG instead of killing it; `dir_var` and `id_var` tell
/// the child its log. Its output goes through pipes, which the limit does
/// not stop. Panics unless the child succeeds.
pub(crate) fn run_child(name: &str, dir_var: &str, dir: &Path, id_var: &str, id: LogId) {
    let exe = std::env::current_exe().unwrap();
    let script =
        format!(r#"trap "" XFSZ; ulimit -f 64; exec "$0" --exact {name} --test-threads=1"#);
    let child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(&exe)
        .env(dir_var, dir)
        .env(id_var, id.to_string())
        .output()
        .unwrap();
    assert!(
        child.status.success(),
        "the child failed: {}\n{}\n{}",
        child.status,
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );
}
