//! The version policy, checked: `cargo semver-checks` against a baseline
//! commit, and a `CHANGELOG.md` entry for every crate whose public items
//! changed since it.
//!
//! The policy (README, "Versions"): a breaking change bumps the minor
//! version (0.x) of every crate it breaks, with a CHANGELOG entry in the
//! same change. `cargo semver-checks` finds breaking changes to public
//! items the version does not allow; the CHANGELOG rule is cruder and
//! wider: a line starting `pub ` added or removed under a publishable
//! crate's `src/` since the baseline needs that crate named under
//! `## [Unreleased]`, breaking or not. It reads the working tree against the
//! baseline, so an uncommitted change counts; a new file counts once it is
//! tracked (`git add`).
//!
//! Only crates that changed since the baseline — or whose korvus
//! dependencies did — are compared; when the workspace's `Cargo.toml` or
//! `Cargo.lock` changed, all are. Their rustdoc JSON is built here, one
//! target dir per end, cargo-semver-checks compares the pairs, and their
//! features are compared here (see [`rustdoc::compare`] for why it does
//! not build them itself).
//!
//! The baseline is the last release tag once there is one; until then it is
//! [`BASELINE`], a commit recorded here when the public surface was settled.
//! Its files come from this repository's history (`git archive`), so no
//! network is needed, but a shallow clone lacks it: the check then fails
//! and says so.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

mod features;
mod rustdoc;

/// The baseline commit: the public surface as wave 4 settled it (F28).
/// Move it to the release tag at the first release.
pub(crate) const BASELINE: &str = "2aceac2fd1c359fc8eae5d92218a86e31dd581de";

/// Runs both checks from the workspace root `root`.
pub(crate) fn check(root: &Path, publishable: &[String]) -> Result<()> {
    let known = Command::new("git")
        .args(["cat-file", "-e", &format!("{BASELINE}^{{commit}}")])
        .current_dir(root)
        .status()
        .is_ok_and(|s| s.success());
    if !known {
        bail!(
            "the semver baseline {BASELINE} is not in this clone's history \
             (a shallow clone?); fetch it (`git fetch --unshallow`) and run lint again"
        );
    }
    changelog(root, publishable)?;
    crate::ensure_cargo_tool("semver-checks", "cargo-semver-checks")?;
    let deps = crate::tidy::workspace_deps(root)?;
    // One git call each, not one per crate and dependency.
    let at_baseline = crate_dirs(&git(
        root,
        &["ls-tree", "--name-only", BASELINE, "crates/"],
    )?);
    let changed = crate_dirs(&git(
        root,
        &[
            "diff",
            "--name-only",
            "--no-renames",
            BASELINE,
            "--",
            "crates",
        ],
    )?);
    // A dependency's version (or a workspace-wide setting) changes every
    // crate that uses it, re-exports and public types included.
    let shared = !git(
        root,
        &[
            "diff",
            "--name-only",
            BASELINE,
            "--",
            "Cargo.toml",
            "Cargo.lock",
        ],
    )?
    .trim()
    .is_empty();
    let mut to_check = Vec::new();
    for name in publishable {
        // A crate the baseline does not have has no earlier API to break;
        // the CHANGELOG rule above still wants it named.
        if !at_baseline.contains(dir_of(name)) {
            eprintln!("xtask: {name} is new since the semver baseline; nothing to compare");
        } else if !shared && !changed_with_deps(name, &deps, &changed) {
            // Building a crate's rustdoc is most of this step's time.
            eprintln!(
                "xtask: {name}, its korvus dependencies and the workspace's manifest and \
                 lock file are unchanged since the semver baseline"
            );
        } else {
            to_check.push(name.as_str());
        }
    }
    if to_check.is_empty() {
        return Ok(());
    }
    rustdoc::compare(root, &to_check)
}

/// Whether `name`'s directory, or that of a korvus crate it depends on
/// (normal dependencies, transitively: a re-export changes with its
/// source), is among the `changed` directories.
fn changed_with_deps(
    name: &str,
    deps: &BTreeMap<String, Vec<String>>,
    changed: &BTreeSet<String>,
) -> bool {
    let mut todo = vec![name.to_owned()];
    let mut seen = BTreeSet::new();
    while let Some(next) = todo.pop() {
        if !seen.insert(next.clone()) {
            continue;
        }
        if changed.contains(dir_of(&next)) {
            return true;
        }
        let korvus = deps.get(&next).into_iter().flatten();
        todo.extend(korvus.filter(|d| deps.contains_key(*d)).cloned());
    }
    false
}

/// The directory under `crates/` of the package `name` (`korvus-<dir>`).
fn dir_of(name: &str) -> &str {
    name.strip_prefix("korvus-").unwrap_or(name)
}

/// The first path segment under `crates/` of each line of `paths`.
fn crate_dirs(paths: &str) -> BTreeSet<String> {
    paths
        .lines()
        .filter_map(|p| p.strip_prefix("crates/")?.split('/').next())
        .map(str::to_owned)
        .collect()
}

/// `git <args>`'s standard output; an error with git's words otherwise.
fn git(root: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(root)
        .output()
        .with_context(|| format!("git {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Fails when a publishable crate's public lines changed since the
/// baseline and `CHANGELOG.md`'s Unreleased section does not name it.
fn changelog(root: &Path, publishable: &[String]) -> Result<()> {
    // Fixed prefixes, no renames, no external driver: the parsing below
    // must not depend on the user's git configuration, and a file moved
    // between crates counts as removed from one and added to the other.
    let diff = git(
        root,
        &[
            "diff",
            "--unified=0",
            "--no-color",
            "--no-ext-diff",
            "--no-renames",
            "--src-prefix=a/",
            "--dst-prefix=b/",
            BASELINE,
            "--",
            "crates",
        ],
    )?;
    let changed = public_changes(&diff);
    let text = std::fs::read_to_string(root.join("CHANGELOG.md")).context("CHANGELOG.md")?;
    let unreleased = unreleased(&text);
    let missing: Vec<String> = changed
        .iter()
        .filter(|(name, _)| publishable.contains(name) && !names(unreleased, name))
        .map(|(name, line)| format!("{name} (e.g. `{line}`)"))
        .collect();
    if !missing.is_empty() {
        bail!(
            "public items changed since the semver baseline {BASELINE} in crates \
             CHANGELOG.md's `## [Unreleased]` section does not name: {}; say what \
             changed for their users there (and bump the minor version if it breaks them)",
            missing.join(", ")
        );
    }
    Ok(())
}

/// The crates whose `src/` gained or lost a line starting `pub ` in a
/// unified diff, each with one such line.
fn public_changes(diff: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut krate: Option<String> = None;
    for line in diff.lines() {
        if let Some(path) = line
            .strip_prefix("+++ b/")
            .or_else(|| line.strip_prefix("--- a/"))
        {
            krate = crate_of(path);
            continue;
        }
        if line.starts_with("+++ ") || line.starts_with("--- ") {
            continue;
        }
        let Some(body) = line.strip_prefix('+').or_else(|| line.strip_prefix('-')) else {
            continue;
        };
        if let Some(name) = &krate {
            if body.trim_start().starts_with("pub ") {
                out.entry(name.clone())
                    .or_insert_with(|| body.trim().to_owned());
            }
        }
    }
    out
}

/// `korvus-<dir>` for a path `crates/<dir>/src/…`.
fn crate_of(path: &str) -> Option<String> {
    let rest = path.strip_prefix("crates/")?;
    let (dir, inner) = rest.split_once('/')?;
    inner.starts_with("src/").then(|| format!("korvus-{dir}"))
}

/// The text under `## [Unreleased]`, up to the next `## ` heading.
fn unreleased(changelog: &str) -> &str {
    let Some(start) = changelog.find("## [Unreleased]") else {
        return "";
    };
    let body = &changelog[start + "## [Unreleased]".len()..];
    let end = body.find("\n## ").unwrap_or(body.len());
    &body[..end]
}

/// Whether `section` names the crate `name` (`korvus-store`, not as part of
/// `korvus-store-sql`).
fn names(section: &str, name: &str) -> bool {
    section.match_indices(name).any(|(at, _)| {
        let next = section[at + name.len()..].chars().next();
        !next.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIFF: &str = "\
diff --git a/crates/store/src/lib.rs b/crates/store/src/lib.rs
--- a/crates/store/src/lib.rs
+++ b/crates/store/src/lib.rs
@@ -1 +1 @@
-pub fn old() {}
+pub fn new() {}
diff --git a/crates/store-sql/src/x.rs b/crates/store-sql/src/x.rs
--- a/crates/store-sql/src/x.rs
+++ b/crates/store-sql/src/x.rs
@@ -3 +3 @@
-    let a = 1;
+    pub(crate) fn private() {}
diff --git a/crates/paths/src/new.rs b/crates/paths/src/new.rs
--- /dev/null
+++ b/crates/paths/src/new.rs
@@ -0,0 +1 @@
+    pub field: u8,
diff --git a/crates/log/tests/t.rs b/crates/log/tests/t.rs
--- a/crates/log/tests/t.rs
+++ b/crates/log/tests/t.rs
@@ -1 +1 @@
+pub fn helper() {}
diff --git a/crates/blob/src/gone.rs b/crates/blob/src/gone.rs
--- a/crates/blob/src/gone.rs
+++ /dev/null
@@ -1 +0,0 @@
-pub struct Gone;
";

    #[test]
    fn public_lines_under_src_are_found_per_crate() {
        let found = public_changes(DIFF);
        let names: Vec<_> = found.keys().map(String::as_str).collect();
        assert_eq!(names, ["korvus-blob", "korvus-paths", "korvus-store"]);
        assert_eq!(found["korvus-store"], "pub fn old() {}");
        assert_eq!(found["korvus-blob"], "pub struct Gone;");
    }

    #[test]
    fn a_crate_counts_as_changed_through_its_korvus_dependencies() {
        let dirs = crate_dirs("crates/store/src/lib.rs\ncrates/store/Cargo.toml\nREADME.md\n");
        assert_eq!(dirs.into_iter().collect::<Vec<_>>(), ["store"]);
        let deps: BTreeMap<String, Vec<String>> = [
            ("korvus-agents", vec!["korvus-session", "tokio"]),
            ("korvus-session", vec!["korvus-store"]),
            ("korvus-store", vec![]),
            ("korvus-blob", vec![]),
        ]
        .into_iter()
        .map(|(n, d)| (n.to_owned(), d.into_iter().map(str::to_owned).collect()))
        .collect();
        let changed = BTreeSet::from(["store".to_owned()]);
        assert!(changed_with_deps("korvus-agents", &deps, &changed));
        assert!(!changed_with_deps("korvus-blob", &deps, &changed));
    }

    #[test]
    fn only_the_unreleased_section_counts_and_names_are_whole() {
        let log = "# Changelog\n\n## [Unreleased]\n\n- `korvus-store-sql`: x\n\n\
                   ## [0.1.0]\n\n- `korvus-store`: y\n";
        let section = unreleased(log);
        assert!(names(section, "korvus-store-sql"));
        assert!(!names(section, "korvus-store"), "{section}");
        assert_eq!(unreleased("# Changelog\n"), "");
    }
}
