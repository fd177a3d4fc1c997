//! `cargo xtask bench [--quick]`: the ratio benchmarks of `korvus-bench`.
//!
//! Builds `korvus-bench` in release mode first (that takes minutes and needs
//! no services), then starts the same services as `cargo xtask test`, runs
//! `korvus-bench [--quick] --out <target>/bench` with their environment, and
//! stops the services again — on success, failure or Ctrl-C.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::{cargo, run_cmd, services};

pub(crate) fn bench(args: &[String]) -> Result<()> {
    let mut quick = false;
    for arg in args {
        match arg.as_str() {
            "--quick" => quick = true,
            other => bail!("unknown argument {other:?}; usage: cargo xtask bench [--quick]"),
        }
    }
    services::install_interrupt_handler()?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    run_cmd(
        cargo()
            .current_dir(&root)
            .args(["build", "--release", "-p", "korvus-bench"]),
    )?;
    let out = target_dir(&root).join("bench");
    let running = services::start_all()?;
    let mut cmd = cargo();
    cmd.current_dir(&root)
        .args(["run", "--quiet", "--release", "-p", "korvus-bench", "--"]);
    if quick {
        cmd.arg("--quick");
    }
    cmd.arg("--out").arg(&out);
    for (key, value) in running.env() {
        cmd.env(key, value);
    }
    let result = run_cmd(&mut cmd);
    let stopped = running.stop();
    result.and(stopped)
}

fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}
