//! `cargo xtask bench [--quick] [--only 1,2,…]`: the ratio benchmarks of
//! `korvus-bench`.
//!
//! Builds `korvus-bench` in release mode first (that takes minutes and needs
//! no services), then starts the same services as `cargo xtask test`, runs
//! `korvus-bench [--quick] [--only …] --out <target>/bench` with their
//! environment, and stops the services again — on success, failure or
//! Ctrl-C.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::{cargo, run_cmd, services};

pub(crate) fn bench(args: &[String]) -> Result<()> {
    const USAGE: &str = "usage: cargo xtask bench [--quick] [--only 1,2,…]";
    let mut passed = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--quick" => passed.push(arg.clone()),
            "--only" => {
                let Some(list) = it.next() else {
                    bail!("--only needs a list of benchmark numbers; {USAGE}")
                };
                passed.extend([arg.clone(), list.clone()]);
            }
            other => bail!("unknown argument {other:?}; {USAGE}"),
        }
    }
    services::install_interrupt_handler()?;
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The workspace root, without a `xtask/..` in every path printed.
    let root = manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf();
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
    cmd.args(&passed);
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
