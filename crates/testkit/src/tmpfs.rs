//! A full disk for fault tests: a small tmpfs of a test's own ([`Tmpfs`],
//! mounted on a fresh directory and unmounted when dropped) and [`fill`],
//! which writes until it has no byte left. Mounting needs root (CI and
//! `cargo xtask test` run as root); a mount that fails fails the test.

use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of its own, mounted on a fresh directory and unmounted when
/// dropped — also when the test panics.
#[derive(Debug)]
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `bytes` bytes. A mount that fails fails the test:
    /// what it checks happens only on a filesystem that really fills up.
    pub fn mount(bytes: u64) -> Tmpfs {
        let dir = tempfile::tempdir().expect("a directory to mount the tmpfs on");
        let size = format!("size={bytes}");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &size, "tmpfs"])
            .arg(dir.path())
            .output();
        match mounted {
            Ok(out) if out.status.success() => Tmpfs { dir },
            Ok(out) => panic!(
                "cannot mount a {bytes}-byte tmpfs on {}: {} — this test fills a real \
                 filesystem and needs root (CI and `cargo xtask test` run as root)",
                dir.path().display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => panic!("cannot run `mount` for the full-disk test: {e}"),
        }
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // A panic may leave the database open (a pool still connected), and
        // a plain unmount of a busy filesystem fails: detach it lazily then,
        // so no mount outlives the test.
        let path = self.dir.path();
        let plain = Command::new("umount").arg(path).output();
        if !plain.is_ok_and(|out| out.status.success()) {
            let lazy = Command::new("umount").arg("-l").arg(path).status();
            if !lazy.is_ok_and(|s| s.success()) {
                eprintln!("could not unmount the test tmpfs at {}", path.display());
            }
        }
    }
}

/// Writes a file into `dir` until its filesystem has no byte left
/// (`ENOSPC`), and returns its path; more than `limit` bytes written
/// without `ENOSPC` fails the test.
pub fn fill(dir: &Path, limit: u64) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).expect("create the filler");
    let chunk = vec![0xa5_u8; 64 * 1024];
    let mut written = 0_u64;
    loop {
        match file.write_all(&chunk) {
            Ok(()) => written += chunk.len() as u64,
            Err(e) if e.kind() == ErrorKind::StorageFull => return path,
            Err(e) => panic!("filling {}: {e}", path.display()),
        }
        assert!(
            written <= limit,
            "wrote {written} bytes to a {limit}-byte tmpfs without ENOSPC"
        );
    }
}
