//! Invariants of the code base, checked from `cargo metadata`.
//!
//! Layering (ARCHITECTURE §2):
//! - seam crates (`korvus-store`, `korvus-log`, `korvus-blob`) depend on no
//!   other korvus crate;
//! - `korvus-workspace`, `korvus-harvest`, `korvus-session` and
//!   `korvus-testkit` never depend on a backend crate;
//! - heavy drivers (`sqlx`, `aws-*`) appear only in backend crates — and in
//!   `korvus-bench`, the unpublished benchmark binary, whose baselines are
//!   the raw drivers themselves.
//!
//! Only normal (and build) dependencies count: a crate may use a backend in
//! its own tests.

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::Value;

const SEAMS: &[&str] = &["korvus-store", "korvus-log", "korvus-blob"];
const BACKENDS: &[&str] = &["korvus-store-sql", "korvus-blob-s3"];
const NO_BACKEND: &[&str] = &[
    "korvus-workspace",
    "korvus-harvest",
    "korvus-session",
    "korvus-testkit",
];

/// Unpublished composition roots that measure korvus against the raw
/// drivers, so they may use them directly. Nothing depends on them.
const DRIVER_BASELINES: &[&str] = &["korvus-bench"];

fn is_heavy_driver(name: &str) -> bool {
    name == "sqlx" || name.starts_with("sqlx-") || name.starts_with("aws-")
}

/// Normal dependencies of each workspace member, by package name.
pub(crate) fn workspace_deps(manifest_dir: Option<&str>) -> Result<BTreeMap<String, Vec<String>>> {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.args(["metadata", "--no-deps", "--format-version", "1"]);
    if let Some(dir) = manifest_dir {
        cmd.current_dir(dir);
    }
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

/// Every layering violation, in words.
pub(crate) fn violations(deps: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut out = Vec::new();
    for (name, ds) in deps {
        for d in ds {
            if SEAMS.contains(&name.as_str()) && d.starts_with("korvus-") {
                out.push(format!("{name} is a seam crate but depends on {d}"));
            }
            if NO_BACKEND.contains(&name.as_str()) && BACKENDS.contains(&d.as_str()) {
                out.push(format!("{name} must not depend on backend crate {d}"));
            }
            if DRIVER_BASELINES.contains(&d.as_str()) {
                out.push(format!("{name} depends on {d}, a benchmark binary"));
            }
            if is_heavy_driver(d)
                && !BACKENDS.contains(&name.as_str())
                && !DRIVER_BASELINES.contains(&name.as_str())
            {
                out.push(format!(
                    "{name} depends on heavy driver {d}; only backend crates may"
                ));
            }
        }
    }
    out
}

pub(crate) fn check() -> Result<()> {
    let found = violations(&workspace_deps(None)?);
    if !found.is_empty() {
        bail!("crate layering is broken:\n  {}", found.join("\n  "));
    }
    eprintln!("xtask: tidy: crate layering holds");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deps(pairs: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        pairs
            .iter()
            .map(|(n, ds)| (n.to_string(), ds.iter().map(|d| d.to_string()).collect()))
            .collect()
    }

    #[test]
    fn the_real_workspace_is_layered() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let found = violations(&workspace_deps(Some(dir)).unwrap());
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_seam_depending_on_korvus_is_caught() {
        let found = violations(&deps(&[("korvus-blob", &["korvus-store", "bytes"])]));
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn session_depending_on_a_backend_is_caught() {
        let found = violations(&deps(&[
            ("korvus-session", &["korvus-store-sql"]),
            ("korvus-testkit", &["korvus-blob-s3"]),
            ("korvus-harvest", &["aws-sdk-s3"]),
        ]));
        assert_eq!(found.len(), 3, "{found:?}");
    }

    #[test]
    fn the_bench_may_use_drivers_but_nothing_may_use_the_bench() {
        let found = violations(&deps(&[("korvus-bench", &["korvus-session", "sqlx"])]));
        assert!(found.is_empty(), "{found:?}");
        let found = violations(&deps(&[("korvus-session", &["korvus-bench"])]));
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn backends_may_use_their_driver() {
        let found = violations(&deps(&[
            ("korvus-store-sql", &["korvus-store", "korvus-log", "sqlx"]),
            (
                "korvus-blob-s3",
                &["korvus-blob", "aws-sdk-s3", "aws-config"],
            ),
        ]));
        assert!(found.is_empty(), "{found:?}");
    }
}
