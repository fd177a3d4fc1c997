//! The declared minimum Rust version is true: the workspace's
//! `rust-version` is at least the `rust-version` of every package the lock
//! resolves for this platform (dependencies and dev-dependencies: a
//! contributor builds those too), and `clippy.toml`'s `msrv` says the same,
//! so clippy's `incompatible_msrv` catches a newer standard-library API.

use serde_json::Value;

/// A version `1.89` or `1.89.0` as comparable numbers.
fn parse(version: &str) -> Option<(u64, u64, u64)> {
    let mut parts = version.trim().split('.').map(|p| p.parse::<u64>().ok());
    let major = parts.next()??;
    let minor = parts.next().flatten().unwrap_or(0);
    let patch = parts.next().flatten().unwrap_or(0);
    Some((major, minor, patch))
}

/// The packages of `metadata` (`cargo metadata --filter-platform`, with
/// its resolve) that need a newer Rust than `declared`, and whether
/// `clippy_msrv` (clippy.toml's `msrv`) differs from it.
pub(crate) fn violations(
    declared: &str,
    clippy_msrv: Option<&str>,
    metadata: &Value,
) -> Vec<String> {
    let Some(ours) = parse(declared) else {
        return vec![format!(
            "the workspace's rust-version {declared:?} is not a version"
        )];
    };
    let mut found = Vec::new();
    if clippy_msrv.and_then(parse) != Some(ours) {
        found.push(format!(
            "clippy.toml's msrv is {clippy_msrv:?}, the workspace's rust-version {declared}: give both the same"
        ));
    }
    let resolved: std::collections::BTreeSet<&str> = metadata["resolve"]["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["id"].as_str())
        .collect();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let (Some(id), Some(needs)) = (package["id"].as_str(), package["rust_version"].as_str())
        else {
            continue;
        };
        if !resolved.contains(id) || package["source"].is_null() {
            continue;
        }
        if parse(needs).is_some_and(|v| v > ours) {
            found.push(format!(
                "{} {} needs Rust {needs}, more than the declared rust-version {declared}: \
                 raise it (and clippy.toml's msrv), or hold the dependency back",
                package["name"].as_str().unwrap_or("?"),
                package["version"].as_str().unwrap_or("?"),
            ));
        }
    }
    found
}

/// `msrv = "…"` of a clippy.toml.
pub(crate) fn clippy_msrv(text: &str) -> Option<&str> {
    text.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "msrv").then(|| value.trim().trim_matches('"'))
    })
}

/// `rust-version = "…"` of the workspace's `[workspace.package]`.
pub(crate) fn declared(cargo_toml: &str) -> Option<&str> {
    cargo_toml.lines().find_map(|l| {
        let (key, value) = l.split_once('=')?;
        (key.trim() == "rust-version").then(|| value.trim().trim_matches('"'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn metadata(packages: &[(&str, Option<&str>, bool)]) -> Value {
        json!({
            "packages": packages.iter().map(|(name, rv, registry)| json!({
                "id": format!("{name}-id"), "name": name, "version": "1.0.0",
                "rust_version": rv,
                "source": if *registry { json!("registry+https://github.com/rust-lang/crates.io-index") } else { Value::Null },
            })).collect::<Vec<_>>(),
            "resolve": {"nodes": packages.iter().map(|(name, _, _)| json!({"id": format!("{name}-id")})).collect::<Vec<_>>()},
        })
    }

    #[test]
    fn a_dependency_needing_a_newer_rust_is_caught() {
        let meta = metadata(&[
            ("uuid", Some("1.89.0"), true),
            ("old", Some("1.70"), true),
            ("none", None, true),
        ]);
        let found = violations("1.85", Some("1.85"), &meta);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("uuid 1.0.0 needs Rust 1.89.0"),
            "{found:?}"
        );
        assert!(violations("1.89", Some("1.89"), &meta).is_empty());
    }

    #[test]
    fn our_own_crates_and_clippys_msrv_are_checked_apart() {
        let meta = metadata(&[("korvus-x", Some("1.99"), false)]);
        assert!(violations("1.89", Some("1.89.0"), &meta).is_empty());
        let found = violations("1.89", None, &meta);
        assert!(found[0].contains("clippy.toml's msrv"), "{found:?}");
    }

    #[test]
    fn the_files_are_read() {
        assert_eq!(
            declared("[workspace.package]\nrust-version = \"1.89\"\n"),
            Some("1.89")
        );
        assert_eq!(
            clippy_msrv("too-many-lines-threshold = 80\nmsrv = \"1.89\"\n"),
            Some("1.89")
        );
    }
}
