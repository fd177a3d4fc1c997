//! The comparison itself: each crate's rustdoc JSON built at both ends,
//! one target dir per end, given to cargo-semver-checks pair by pair; its
//! features compared here (see [`super::features`]); and the lints the
//! manifests allow applied to what fails.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{features, BASELINE};
use crate::{cargo, run_cmd};

/// What rustdoc is given to write the JSON cargo-semver-checks reads, as
/// cargo-semver-checks gives it: hidden and private items included (the
/// lints judge what is reachable), lints of the documented code ignored.
const RUSTDOC_JSON_FLAGS: &str = "-Z unstable-options --document-private-items \
     --document-hidden-items --output-format=json --cap-lints=allow";

/// cargo-semver-checks' exit code when lints failed (and nothing else went
/// wrong: an error, a missing witness, is 101).
const LINTS_FAILED: i32 = 100;

/// Builds the rustdoc JSON of `crates` at both ends, the working tree and
/// the baseline unpacked from git, then has cargo-semver-checks compare
/// each pair, and compares their features.
///
/// cargo-semver-checks could build both ends itself (`--baseline-rev`), but
/// it builds each crate's current end in a target dir of its own, every
/// dependency again: with every crate changed that took 818 s and 9 to
/// 14 GB, and a CI run ran out of disk on it. Here each end is one build
/// of all the crates (about 2 minutes and 1 GB each from nothing). The two
/// ends cannot share a target dir: cargo names a path crate's build by its
/// place in the workspace, so one end's build would pass for the other's.
/// Given JSON, cargo-semver-checks reads no manifest: the feature lints
/// find nothing and the manifests' lint tables are not read, so both are
/// done here.
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
    unpack_baseline(root, &source, &dir.join("baseline"))?;
    let baseline = rustdoc_json(&source, &dir.join("baseline"), crates)?;
    let (now, then) = (metadata(root)?, metadata(&source)?);
    let mut failed = Vec::new();
    for name in crates {
        eprintln!("xtask: semver-checks {name}");
        let mut lints = semver_checks(root, name, &current, &baseline)?;
        let (now, then) = (package(&now, name)?, package(&then, name)?);
        for (lint, what) in features::broken(now, then) {
            eprintln!("--- failure {lint}: {what}");
            lints.push(lint.to_owned());
        }
        if lints.is_empty() {
            continue;
        }
        let allows = allowed_lints(now)?;
        if lints.iter().all(|l| allows.contains(l)) {
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
            "the semver check found changes that break users of {} since the \
             baseline {BASELINE} (the report is above); bump the minor version of \
             each and say so in CHANGELOG.md",
            failed.join(", ")
        );
    }
    Ok(())
}

/// cargo-semver-checks on one crate's pair of JSON files: the lints that
/// failed, empty when none did. Anything else it reports (an error, a
/// failure this cannot name) is an error here.
fn semver_checks(root: &Path, name: &str, current: &Path, baseline: &Path) -> Result<Vec<String>> {
    let file = format!("{}.json", name.replace('-', "_"));
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
        return Ok(Vec::new());
    }
    let lints = failed_lints(&report);
    if out.status.code() != Some(LINTS_FAILED) || lints.is_empty() {
        bail!("cargo semver-checks on {name} failed with {}", out.status);
    }
    Ok(lints.into_iter().map(str::to_owned).collect())
}

/// `cargo metadata --no-deps` of the workspace at `workspace`.
fn metadata(workspace: &Path) -> Result<Value> {
    let out = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(workspace)
        .output()
        .context("cargo metadata")?;
    if !out.status.success() {
        bail!(
            "cargo metadata in {} failed: {}",
            workspace.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).context("cargo metadata output")
}

/// The package `name` of a workspace's metadata.
fn package<'a>(meta: &'a Value, name: &str) -> Result<&'a Value> {
    meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == name)
        .with_context(|| format!("no package {name} in cargo metadata"))
}

/// The lints `package`'s manifest allows
/// (`[package.metadata.cargo-semver-checks.lints]`), each as `lint =
/// "allow"` or `lint = { level = "allow" }`. Anything else there — another
/// level, a `required-update`, a `priority` — is refused rather than half
/// applied: cargo-semver-checks reads these tables only when it builds a
/// crate itself. (No workspace table is read: korvus has none.)
fn allowed_lints(package: &Value) -> Result<BTreeSet<String>> {
    let mut allowed = BTreeSet::new();
    let Some(lints) = package["metadata"]["cargo-semver-checks"]["lints"].as_object() else {
        return Ok(allowed);
    };
    for (lint, value) in lints {
        if lint == "workspace" {
            continue;
        }
        let plain = value == "allow"
            || value
                .as_object()
                .is_some_and(|o| o.len() == 1 && o.get("level").is_some_and(|l| l == "allow"));
        if !plain {
            bail!(
                "cargo-semver-checks.lints.{lint} of {} is {value}: xtask applies only \
                 `\"allow\"` (or `{{ level = \"allow\" }}`)",
                package["name"]
            );
        }
        allowed.insert(lint.clone());
    }
    Ok(allowed)
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
/// their build. Unpacked anew, their build in `build` goes too: the files
/// carry their commit's time, and an older baseline's could pass for built.
fn unpack_baseline(root: &Path, dest: &Path, build: &Path) -> Result<()> {
    let stamp = dest.join(".korvus-baseline");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == BASELINE) {
        return Ok(());
    }
    for dir in [dest, build] {
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
        }
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
        .status();
    let untar = match untar {
        Ok(status) => status,
        Err(e) => {
            let _ = archive.kill();
            let _ = archive.wait();
            return Err(e).context("tar -x");
        }
    };
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
    fn only_plain_allows_are_read_and_failures_come_from_the_report() {
        let package = |lints: Value| {
            serde_json::json!({"name": "korvus-x",
                "metadata": {"cargo-semver-checks": {"lints": lints}}})
        };
        let allowed = allowed_lints(&package(
            serde_json::json!({"a": "allow", "b": {"level": "allow"},
                "workspace": true}),
        ))
        .unwrap();
        assert_eq!(allowed.into_iter().collect::<Vec<_>>(), ["a", "b"]);
        assert!(allowed_lints(&serde_json::json!({"name": "korvus-y"}))
            .unwrap()
            .is_empty());
        for refused in [
            serde_json::json!({"c": "deny"}),
            serde_json::json!({"c": {"level": "allow", "priority": -1}}),
            serde_json::json!({"c": {"required-update": "minor"}}),
            serde_json::json!({"c": 3}),
        ] {
            assert!(
                allowed_lints(&package(refused.clone())).is_err(),
                "{refused}"
            );
        }
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
