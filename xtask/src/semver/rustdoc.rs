//! The comparison itself: each crate's rustdoc JSON built at both ends in
//! one target dir, given to cargo-semver-checks pair by pair, and the lints
//! the manifests allow applied to its reports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::BASELINE;
use crate::{cargo, run_cmd};

/// What rustdoc is given to write the JSON cargo-semver-checks reads, as
/// cargo-semver-checks gives it: hidden and private items included (the
/// lints judge what is reachable), lints of the documented code ignored.
const RUSTDOC_JSON_FLAGS: &str = "-Z unstable-options --document-private-items \
     --document-hidden-items --output-format=json --cap-lints=allow";

/// Builds the rustdoc JSON of `crates` at both ends, the working tree and
/// the baseline unpacked from git, then has cargo-semver-checks compare
/// each pair.
///
/// cargo-semver-checks could build both ends itself (`--baseline-rev`), but
/// it builds each crate's current end in a target dir of its own, every
/// dependency again: with every crate changed that took 818 s and 9 to
/// 14 GB, and a CI run ran out of disk on it. Here each end is one build
/// of all the crates (about 2 minutes and 1 GB each from nothing). The two
/// ends cannot share a target dir: cargo names a path crate's build by its
/// place in the workspace, so one end's build would pass for the other's.
pub(super) fn compare(root: &Path, crates: &[&str]) -> Result<()> {
    let dir = root.join("target/semver");
    let earlier = root.join("target/semver-checks");
    if earlier.exists() {
        eprintln!(
            "xtask: removing {} (cargo-semver-checks' own builds, no longer used)",
            earlier.display()
        );
        std::fs::remove_dir_all(&earlier).with_context(|| format!("{}", earlier.display()))?;
    }
    let current = rustdoc_json(root, &dir.join("current"), crates)?;
    let source = dir.join("baseline-src");
    unpack_baseline(root, &source)?;
    let baseline = rustdoc_json(&source, &dir.join("baseline"), crates)?;
    let allowed = allowed_lints(root)?;
    let mut failed = Vec::new();
    for name in crates {
        let file = format!("{}.json", name.replace('-', "_"));
        eprintln!("xtask: semver-checks {name}");
        let out = cargo()
            .args(["semver-checks", "check-release", "--current-rustdoc"])
            .arg(current.join(&file))
            .arg("--baseline-rustdoc")
            .arg(baseline.join(&file))
            .current_dir(root)
            .output()
            .context("cargo semver-checks")?;
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        eprint!("{report}");
        if out.status.success() {
            continue;
        }
        let lints = failed_lints(&report);
        let allows = allowed.get(*name);
        if !lints.is_empty() && lints.iter().all(|l| allows.is_some_and(|a| a.contains(*l))) {
            eprintln!(
                "xtask: {name}: only lints its manifest allows failed ({}); that passes",
                lints.join(", ")
            );
        } else {
            failed.push(*name);
        }
    }
    if !failed.is_empty() {
        bail!(
            "cargo-semver-checks found changes that break users of {} since the \
             baseline {BASELINE} (its report is above); bump the minor version of \
             each and say so in CHANGELOG.md",
            failed.join(", ")
        );
    }
    Ok(())
}

/// The lints each publishable crate's manifest allows: its
/// `[package.metadata.cargo-semver-checks.lints]` over the workspace's
/// `[workspace.metadata.cargo-semver-checks.lints]`. cargo-semver-checks
/// reads these tables only when it builds a crate itself, not when given
/// rustdoc JSON, so [`compare`] applies them to its report.
fn allowed_lints(root: &Path) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let out = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(root)
        .output()
        .context("cargo metadata")?;
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("cargo metadata output")?;
    let workspace = lint_levels(&meta["metadata"])?;
    let mut allowed = BTreeMap::new();
    for package in meta["packages"].as_array().into_iter().flatten() {
        let Some(name) = package["name"].as_str() else {
            continue;
        };
        let mut levels = workspace.clone();
        levels.extend(lint_levels(&package["metadata"])?);
        let allows = levels
            .into_iter()
            .filter(|(_, level)| level == "allow")
            .map(|(lint, _)| lint)
            .collect();
        allowed.insert(name.to_owned(), allows);
    }
    Ok(allowed)
}

/// The level of each lint in a `metadata` table's
/// `cargo-semver-checks.lints`: `lint = "allow"` or `lint = { level =
/// "allow" }`.
fn lint_levels(metadata: &serde_json::Value) -> Result<BTreeMap<String, String>> {
    let mut levels = BTreeMap::new();
    let Some(lints) = metadata["cargo-semver-checks"]["lints"].as_object() else {
        return Ok(levels);
    };
    for (lint, value) in lints {
        let level = value
            .as_str()
            .or_else(|| value["level"].as_str())
            .with_context(|| {
                format!("cargo-semver-checks.lints.{lint} is neither a level nor {{ level = … }}")
            })?;
        levels.insert(lint.clone(), level.to_owned());
    }
    Ok(levels)
}

/// The lints a cargo-semver-checks report says failed (`--- failure
/// <lint>: …`). A failure it words otherwise is found by none, so it
/// stands.
fn failed_lints(report: &str) -> Vec<&str> {
    report
        .lines()
        .filter_map(|l| l.strip_prefix("--- failure ")?.split(':').next())
        .map(str::trim)
        .collect()
}

/// `cargo doc` of `crates` in the workspace at `workspace`, all features on
/// (as cargo-semver-checks does: ours have no unstable ones), as JSON, with
/// the target dir `build`; the directory their JSON files are in.
fn rustdoc_json(workspace: &Path, build: &Path, crates: &[&str]) -> Result<PathBuf> {
    let mut cmd = cargo();
    cmd.args(["doc", "--locked", "--no-deps", "--lib", "--all-features"])
        .arg("--target-dir")
        .arg(build)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("RUSTFLAGS", "--cap-lints=allow")
        .env("RUSTDOCFLAGS", RUSTDOC_JSON_FLAGS)
        .current_dir(workspace);
    for name in crates {
        cmd.args(["--package", name]);
    }
    run_cmd(&mut cmd)?;
    Ok(build.join("doc"))
}

/// The baseline's files (`git archive`) in `dest`, unpacked once: a stamp
/// naming the commit says they are complete, and files unpacked once keep
/// their build.
fn unpack_baseline(root: &Path, dest: &Path) -> Result<()> {
    let stamp = dest.join(".korvus-baseline");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == BASELINE) {
        return Ok(());
    }
    if dest.exists() {
        std::fs::remove_dir_all(dest).with_context(|| format!("{}", dest.display()))?;
    }
    std::fs::create_dir_all(dest).with_context(|| format!("{}", dest.display()))?;
    let mut archive = Command::new("git")
        .args(["archive", "--format=tar", BASELINE])
        .current_dir(root)
        .stdout(Stdio::piped())
        .spawn()
        .context("git archive")?;
    let tar = archive.stdout.take().context("git archive's output")?;
    let untar = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(dest)
        .stdin(tar)
        .status()
        .context("tar -x")?;
    let archived = archive.wait().context("git archive")?;
    if !archived.success() || !untar.success() {
        bail!(
            "could not unpack the baseline {BASELINE} into {} (git archive: {archived}, tar: {untar})",
            dest.display()
        );
    }
    std::fs::write(&stamp, BASELINE).with_context(|| format!("{}", stamp.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_lints_are_read_from_either_form_and_failures_from_the_report() {
        let meta = serde_json::json!({"cargo-semver-checks": {"lints": {
            "a": "allow", "b": {"level": "warn", "required-update": "minor"}}}});
        let levels = lint_levels(&meta).unwrap();
        assert_eq!(levels["a"], "allow");
        assert_eq!(levels["b"], "warn");
        assert!(lint_levels(&serde_json::json!({})).unwrap().is_empty());
        let odd = serde_json::json!({"cargo-semver-checks": {"lints": {"c": 3}}});
        assert!(lint_levels(&odd).is_err());
        let report = "     Checked [   0.035s] 202 checks: 200 pass, 2 fail\n\n\
            --- failure enum_no_repr_variant_discriminant_changed: enum variant had its \
            discriminant change value ---\n\nDescription:\n\
            --- failure function_missing: pub fn removed or renamed ---\n";
        assert_eq!(
            failed_lints(report),
            [
                "enum_no_repr_variant_discriminant_changed",
                "function_missing"
            ]
        );
        assert!(failed_lints("error: could not read the rustdoc JSON").is_empty());
    }
}
