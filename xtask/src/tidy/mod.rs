//! Invariants of the code base that its docs claim, checked mechanically.
//!
//! - [`layers`]: each crate depends only on crates of lower layers, from one
//!   table; heavy drivers only where allowed (read from `cargo metadata`).
//! - [`codemap`]: every workspace member has an entry in
//!   `docs/architecture.md`'s code map.
//! - [`codefiles`]: the Rust files `docs/architecture.md` quotes exist,
//!   and an entry that lists its crate's files lists all of them.
//! - [`protocol`]: the agent protocol's names in the code are shown in
//!   `docs/command-runner.md`.
//! - [`outside`]: the docs refer to nothing outside the repository.
//! - [`size`]: no library source file over 500 lines.
//! - [`examples`]: code blocks the docs mark as an example are the
//!   example files CI builds, exactly.
//! - [`cycles`]: no import cycle between the files of a crate's `src/`
//!   (but the known ones R2 removes).
//! - [`audited`]: `unsafe` only in the one audited module.
//! - [`signatures`]: a call the docs quote has as many arguments as the
//!   function takes.
//! - [`paths`]: runner items are imported from `korvus_runner` in-tree,
//!   never through korvus-session's re-export.
//! - [`msrv`]: the declared `rust-version` is at least every locked
//!   dependency's, and clippy.toml's `msrv` is the same.
//! - [`cancel`]: every public async method and every public trait with
//!   async methods of the library crates documents its cancel safety.
//!
//! Each module's rules are pure functions over text, tested with synthetic
//! input; [`check`] feeds them the real repository.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

mod audited;
mod cancel;
mod codefiles;
mod codemap;
mod cycles;
mod examples;
mod layers;
mod msrv;
mod outside;
mod paths;
mod protocol;
mod signatures;
mod size;

/// Normal and build dependencies of each workspace member, by package name.
pub(crate) fn workspace_deps(root: &Path) -> Result<BTreeMap<String, Vec<String>>> {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(root);
    let out = cmd.output().context("could not run cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let meta: Value = serde_json::from_slice(&out.stdout).context("cargo metadata output")?;
    let mut deps = BTreeMap::new();
    for package in meta["packages"].as_array().into_iter().flatten() {
        let name = package["name"].as_str().unwrap_or_default().to_owned();
        let normal: Vec<String> = package["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["kind"].is_null() || d["kind"] == "build")
            .filter_map(|d| d["name"].as_str().map(str::to_owned))
            .collect();
        deps.insert(name, normal);
    }
    Ok(deps)
}

/// `cargo metadata` with the lock's resolve, for this platform only (a
/// dependency of another target is never built here).
fn platform_metadata(root: &Path) -> Result<Value> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let rustc = Command::new("rustc")
        .arg("-vV")
        .output()
        .context("rustc -vV")?;
    let host = String::from_utf8_lossy(&rustc.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .context("rustc -vV names no host")?;
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--filter-platform",
            &host,
        ])
        .current_dir(root)
        .output()
        .context("could not run cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).context("cargo metadata output")
}

/// The sources whose string constants are the agent protocol: every Rust
/// file of the command runner and korvus-paths' path module.
fn protocol_sources(root: &Path) -> Result<Vec<(String, String)>> {
    let mut files: Vec<PathBuf> = Vec::new();
    outside::walk(&root.join("crates/command/src"), &mut files)?;
    let path_module = root.join("crates/paths/src/path.rs");
    if path_module.exists() {
        files.push(path_module);
    }
    let path_dir = root.join("crates/paths/src/path");
    if path_dir.is_dir() {
        outside::walk(&path_dir, &mut files)?;
    }
    // A test module in its own file (`tests.rs`, `…_tests.rs`) is read no
    // more than the `#[cfg(test)]` tail of a file.
    let is_test_module = |f: &Path| {
        f.file_stem()
            .and_then(|s| s.to_str())
            .is_some_and(|s| s == "tests" || s.ends_with("_tests"))
    };
    files
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        .filter(|f| !is_test_module(f))
        .map(|f| {
            let text = fs::read_to_string(&f).with_context(|| format!("read {}", f.display()))?;
            let shown = f.strip_prefix(root).unwrap_or(&f).display().to_string();
            Ok((shown, text))
        })
        .collect()
}

/// Every Rust file of the library crates' `src` folders (path, text).
fn library_sources(root: &Path) -> Result<Vec<(String, String)>> {
    let mut files: Vec<PathBuf> = Vec::new();
    for entry in fs::read_dir(root.join("crates")).context("read crates/")? {
        let dir = entry?.path();
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !size::NOT_LIBRARIES.contains(&name) && dir.join("src").is_dir() {
            outside::walk(&dir.join("src"), &mut files)?;
        }
    }
    files
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        .map(|f| {
            let text = fs::read_to_string(&f).with_context(|| format!("read {}", f.display()))?;
            let shown = f.strip_prefix(root).unwrap_or(&f).display().to_string();
            Ok((shown, text))
        })
        .collect()
}

/// Every Rust file of the `src/` folders of the crates the cancel-safety
/// rule reads ([`cancel::CRATES`]), but test support
/// ([`cancel::is_test_support`]): (path, text).
fn cancel_sources(root: &Path) -> Result<Vec<(String, String)>> {
    let mut files: Vec<PathBuf> = Vec::new();
    for name in cancel::CRATES {
        let src = root.join("crates").join(name).join("src");
        if src.is_dir() {
            outside::walk(&src, &mut files)?;
        }
    }
    files
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        .map(|f| {
            let shown = f.strip_prefix(root).unwrap_or(&f).display().to_string();
            (f, shown)
        })
        .filter(|(_, shown)| !cancel::is_test_support(shown))
        .map(|(f, shown)| {
            let text = fs::read_to_string(&f).with_context(|| format!("read {}", f.display()))?;
            Ok((shown, text))
        })
        .collect()
}

/// Every Rust file of the repository's crates and of xtask (path, text).
fn all_rust_sources(root: &Path) -> Result<Vec<(String, String)>> {
    let mut files: Vec<PathBuf> = Vec::new();
    outside::walk(&root.join("crates"), &mut files)?;
    outside::walk(&root.join("xtask/src"), &mut files)?;
    files
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        .filter(|f| !f.components().any(|c| c.as_os_str() == "target"))
        .map(|f| {
            let text = fs::read_to_string(&f).with_context(|| format!("read {}", f.display()))?;
            let shown = f.strip_prefix(root).unwrap_or(&f).display().to_string();
            Ok((shown, text))
        })
        .collect()
}

/// Every rule's failures for the repository at `root`, in words.
pub(crate) fn violations(root: &Path) -> Result<Vec<String>> {
    let deps = workspace_deps(root)?;
    let members: Vec<String> = deps.keys().cloned().collect();
    let read =
        |path: &str| fs::read_to_string(root.join(path)).with_context(|| format!("read {path}"));
    let mut found = layers::violations(&deps);
    found.extend(codemap::violations(
        &members,
        &read("docs/architecture.md")?,
    ));
    found.extend(protocol::violations(
        &protocol_sources(root)?,
        &read("docs/command-runner.md")?,
    ));
    found.extend(outside::violations(&outside::read_docs(root)?));
    let rust_files: Vec<String> = all_rust_sources(root)?
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    found.extend(codefiles::violations(
        &read("docs/architecture.md")?,
        &rust_files,
    ));
    let library = library_sources(root)?;
    found.extend(size::violations(&library));
    found.extend(cycles::violations(&library));
    found.extend(cancel::violations(&cancel_sources(root)?));
    let all = all_rust_sources(root)?;
    found.extend(audited::violations(&all, &read("Cargo.toml")?));
    found.extend(paths::violations(&all));
    let arities = signatures::arities(&library);
    found.extend(signatures::violations(&outside::read_docs(root)?, &arities));
    let docs = ["docs/embedding.md", "docs/http.md", "README.md"]
        .iter()
        .map(|p| Ok(((*p).to_owned(), read(p)?)))
        .collect::<Result<Vec<_>>>()?;
    found.extend(examples::violations(&docs, &|p: &str| {
        fs::read_to_string(root.join(p)).ok()
    }));
    let cargo_toml = read("Cargo.toml")?;
    let clippy = read("clippy.toml")?;
    match msrv::declared(&cargo_toml) {
        Some(declared) => found.extend(msrv::violations(
            declared,
            msrv::clippy_msrv(&clippy),
            &platform_metadata(root)?,
        )),
        None => found.push("Cargo.toml declares no rust-version".into()),
    }
    Ok(found)
}

fn repository_root() -> PathBuf {
    // xtask lives one directory below the repository root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

pub(crate) fn check() -> Result<()> {
    let found = violations(&repository_root())?;
    if !found.is_empty() {
        bail!(
            "tidy found {} problem(s):\n  {}",
            found.len(),
            found.join("\n  ")
        );
    }
    eprintln!(
        "xtask: tidy: layering, code map, quoted calls, protocol names, doc references, file sizes, doc examples, import cycles, the one audited module, one path per runner item, cancel safety and the MSRV hold"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_repository_passes() {
        let found = violations(&repository_root()).unwrap();
        assert!(found.is_empty(), "{found:#?}");
    }

    #[test]
    fn the_real_protocol_sources_are_found() {
        let sources = protocol_sources(&repository_root()).unwrap();
        assert!(
            sources
                .iter()
                .any(|(p, _)| p.starts_with("crates/command/src/")),
            "{sources:?}"
        );
        assert!(
            sources
                .iter()
                .any(|(p, _)| p.starts_with("crates/paths/src/path")),
            "{sources:?}"
        );
    }
}
