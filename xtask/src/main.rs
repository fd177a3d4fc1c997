//! Project automation for korvus, run as `cargo xtask <command>`.
//!
//! - `test [cargo test args…]`: starts the services the tests need, runs
//!   `cargo test --workspace` (or the crates named with `-p`), and stops the
//!   services again, also when tests fail or the run is interrupted.
//! - `lint`: `cargo fmt --check`, `cargo clippy -D warnings` (and, on
//!   library targets, `too_many_lines` at clippy.toml's threshold), rustdoc,
//!   `cargo deny`, the package check, the semver and CHANGELOG check
//!   (`semver.rs`), and `tidy`; each step says how long it took.
//! - `semver`: the semver and CHANGELOG step of `lint` alone.
//! - `tidy`: checks what the docs claim: the crate layering, the code map of
//!   `docs/architecture.md`, the protocol names of `docs/command-runner.md`,
//!   and that no doc refers outside the repository (see `tidy/mod.rs`).
//! - `bench [--quick]`: starts the same services as `test` and runs the
//!   ratio benchmarks of `korvus-bench` in release mode (`docs/bench.md`).

use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};

mod advisories;
mod agents;
mod api_tools;
mod bench;
mod browser;
mod postgres;
mod s3;
mod semver;
mod services;
mod tidy;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    match command.as_str() {
        "test" => test(&rest),
        "lint" => lint(),
        "tidy" => tidy::check(),
        "semver" => semver::check(&workspace_root(), &publishable()?),
        "bench" => bench::bench(&rest),
        _ => bail!(
            "usage: cargo xtask <test [cargo test args…] | lint | tidy | semver | bench [--quick]>"
        ),
    }
}

/// Runs a command to completion, failing on a non-zero exit.
pub(crate) fn run_cmd(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("could not start {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed with {status}");
    }
    Ok(())
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn test(args: &[String]) -> Result<()> {
    // Ctrl-C reaches the whole foreground process group: cargo test stops by
    // itself, and this process must live on to stop the services.
    services::install_interrupt_handler()?;
    let selects_packages = args.iter().any(|a| {
        a == "-p" || a == "--package" || a.starts_with("--package=") || a.starts_with("-p")
    });
    let running = services::start_all()?;
    let mut cmd = cargo();
    // Every test binary runs even after one fails, so one CI run reports
    // every failure.
    cmd.args(["test", "--no-fail-fast"]);
    if !selects_packages {
        cmd.arg("--workspace");
    }
    cmd.args(args);
    // Tests that need a service must fail, never skip, under `cargo xtask test`.
    cmd.env("KORVUS_REQUIRE_SERVICES", "1");
    for (key, value) in running.env() {
        cmd.env(key, value);
    }
    let result = run_cmd(&mut cmd);
    let stopped = running.stop();
    result.and(stopped)
}

fn lint() -> Result<()> {
    step("fmt", || run_cmd(cargo().args(["fmt", "--all", "--check"])))?;
    step("clippy", || {
        run_cmd(cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ]))?;
        // Library functions at most 80 lines (the threshold is clippy.toml's).
        run_cmd(cargo().args([
            "clippy",
            "--workspace",
            "--lib",
            "--all-features",
            "--",
            "-D",
            "warnings",
            "-D",
            "clippy::too_many_lines",
        ]))
    })?;
    step("rustdoc", || {
        run_cmd(
            cargo()
                .args(["doc", "--workspace", "--no-deps"])
                .env("RUSTDOCFLAGS", "-D warnings"),
        )
    })?;
    step("deny", deny)?;
    let publishable = publishable()?;
    step("package", || package(&publishable))?;
    step("semver", || semver::check(&workspace_root(), &publishable))?;
    step("tidy", tidy::check)
}

/// Runs one lint step and says how long it took, so a slow step shows.
fn step(name: &str, run: impl FnOnce() -> Result<()>) -> Result<()> {
    let start = std::time::Instant::now();
    let result = run();
    eprintln!(
        "xtask: lint step {name} took {:.1} s",
        start.elapsed().as_secs_f64()
    );
    result
}

/// The workspace members crates.io would take (no `publish = false`).
fn publishable() -> Result<Vec<String>> {
    let out = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(workspace_root())
        .output()
        .context("cargo metadata")?;
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("cargo metadata output")?;
    Ok(meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        // `publish = false` is `[]`; publishable is `null`.
        .filter(|p| !p["publish"].as_array().is_some_and(Vec::is_empty))
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect())
}

/// Every publishable crate (a member without `publish = false`) packaged
/// as crates.io would take it and built from its `.crate`: a file its
/// build needs outside the package (a migration, say) fails here, and so
/// does a dependency that is not on crates.io.
fn package(publishable: &[String]) -> Result<()> {
    let mut args = vec![
        "package".to_owned(),
        "--locked".into(),
        "--allow-dirty".into(),
    ];
    for name in publishable {
        args.push("--package".into());
        args.push(name.clone());
    }
    // The unpacked copies below live in the user's cargo home, shared by
    // every checkout on the machine: one package check at a time, or one
    // checkout's clean-up deletes sources another is verifying.
    let _turn = package_lock()?;
    forget_unpacked_packages();
    // Its own target dir, from which korvus's builds are removed first:
    // cargo takes a registry package of an unchanged version for
    // unchanged, and would link a verification against an earlier
    // package's build. Third-party builds stay, so a second run is quick.
    let target = workspace_root().join("target/package-check");
    forget_korvus_builds(&target.join("debug"));
    run_cmd(
        cargo()
            .args(&args)
            .env("CARGO_TARGET_DIR", &target)
            .current_dir(workspace_root()),
    )
}

/// The machine-wide turn of the package check: an exclusive lock on a file
/// in the cargo home, released when the returned file is dropped.
fn package_lock() -> Result<std::fs::File> {
    let home = cargo_home().context("no cargo home (neither CARGO_HOME nor HOME is set)")?;
    std::fs::create_dir_all(&home).with_context(|| format!("{}", home.display()))?;
    let path = home.join(".korvus-package-check.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("{}", path.display()))?;
    if file.try_lock().is_err() {
        eprintln!("xtask: another checkout's package check is running; waiting for it");
        file.lock()
            .with_context(|| format!("lock {}", path.display()))?;
    }
    Ok(file)
}

/// The cargo home: `CARGO_HOME`, else `~/.cargo`.
fn cargo_home() -> Option<std::path::PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo")))
}

/// Removes every build of a korvus crate under `profile` (a target dir's
/// `debug`).
fn forget_korvus_builds(profile: &std::path::Path) {
    for dir in ["deps", ".fingerprint", "build", "incremental"] {
        for entry in std::fs::read_dir(profile.join(dir))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("korvus") || name.starts_with("libkorvus") {
                let path = entry.path();
                let _ = if path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
            }
        }
    }
}

/// Removes cargo's unpacked copies of korvus packages from earlier
/// `cargo package` runs. Verification reads the workspace's packages
/// from a local registry, and cargo unpacks a registry's package once per
/// version: with the version unchanged, a later run would build against
/// the sources of the first (an item added since "does not exist").
fn forget_unpacked_packages() {
    let Some(src) = cargo_home().map(|h| h.join("registry/src")) else {
        return;
    };
    for registry in std::fs::read_dir(&src).into_iter().flatten().flatten() {
        for unpacked in std::fs::read_dir(registry.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if unpacked
                .file_name()
                .to_string_lossy()
                .starts_with("korvus-")
            {
                let _ = std::fs::remove_dir_all(unpacked.path());
            }
        }
    }
}

/// Installs the cargo subcommand `sub` from crates.io (`krate`) unless
/// `cargo <sub> --version` already answers.
pub(crate) fn ensure_cargo_tool(sub: &str, krate: &str) -> Result<()> {
    let installed = cargo()
        .args([sub, "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        eprintln!("xtask: {krate} is missing; installing it (once)");
        run_cmd(cargo().args(["install", "--locked", krate]))?;
    }
    Ok(())
}

fn deny() -> Result<()> {
    ensure_cargo_tool("deny", "cargo-deny")?;
    // `--offline` keeps cargo-deny off the advisory database (no network
    // here); it still needs every crate of every target platform in the
    // local registry, which a build for this platform alone does not fetch.
    run_cmd(cargo().args(["fetch", "--locked"]))?;
    // From the workspace root: `deny.toml`'s `db-path` is relative to it.
    let root = workspace_root();
    let mut checks = vec!["licenses", "bans", "sources"];
    if advisories::prepare(&root)? {
        checks.insert(0, "advisories");
    }
    run_cmd(
        cargo()
            .args(["deny", "--offline", "check"])
            .args(checks)
            .current_dir(&root),
    )
}

/// The workspace's root directory.
fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}
