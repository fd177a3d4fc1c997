//! What a crate's Cargo features promise, compared between the baseline
//! and now: cargo-semver-checks checks this only when it reads the
//! manifests itself, which it does not when given rustdoc JSON. The
//! findings carry the names of its lints, so a manifest allows them the
//! same way.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// Each way `now` (a package of `cargo metadata`) breaks a user of `then`
/// through its features, as (lint, what): a feature removed, one no
/// longer on by default, one that no longer turns on another. Nothing
/// when the version moved by a breaking step (0.1 to 0.2, 1.x to 2.0).
pub(super) fn broken(now: &Value, then: &Value) -> Vec<(&'static str, String)> {
    let mut found = Vec::new();
    if breaking_step(then["version"].as_str(), now["version"].as_str()) {
        return found;
    }
    let empty = Map::new();
    let now = now["features"].as_object().unwrap_or(&empty);
    let then = then["features"].as_object().unwrap_or(&empty);
    for name in then.keys().filter(|n| !now.contains_key(*n)) {
        found.push(("feature_missing", format!("feature `{name}` was removed")));
    }
    let on_now = closure(now, "default");
    for name in closure(then, "default") {
        if name != "default" && now.contains_key(&name) && !on_now.contains(&name) {
            found.push((
                "feature_not_enabled_by_default",
                format!("feature `{name}` is no longer on by default"),
            ));
        }
    }
    for name in then
        .keys()
        .filter(|n| *n != "default" && now.contains_key(*n))
    {
        let enables = closure(now, name);
        for other in closure(then, name) {
            if other != *name && now.contains_key(&other) && !enables.contains(&other) {
                found.push((
                    "feature_no_longer_enables_feature",
                    format!("feature `{name}` no longer enables feature `{other}`"),
                ));
            }
        }
    }
    found
}

/// `start` and every feature of the same package it turns on, directly or
/// through others (`dep:…` and `crate/feature` entries are not its own).
fn closure(features: &Map<String, Value>, start: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![start.to_owned()];
    while let Some(name) = todo.pop() {
        if !features.contains_key(&name) || !seen.insert(name.clone()) {
            continue;
        }
        let entries = features[&name].as_array().into_iter().flatten();
        todo.extend(entries.filter_map(Value::as_str).map(str::to_owned));
    }
    seen
}

/// Whether `now` is a breaking step up from `then`: the major version
/// (the minor one while the major is 0) grew.
fn breaking_step(then: Option<&str>, now: Option<&str>) -> bool {
    let parse = |v: Option<&str>| -> Option<(u64, u64)> {
        let mut parts = v?.split(['.', '-', '+']);
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    };
    match (parse(then), parse(now)) {
        (Some((0, a)), Some((0, b))) => b > a,
        (Some((a, _)), Some((b, _))) => b > a,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn removed_defaults_and_enables_are_found_unless_the_version_broke() {
        let then = json!({"version": "0.1.0", "features": {
            "default": ["sqlite"], "sqlite": ["dep:sqlx", "store"], "store": [],
            "mock": [], "http": ["store"]}});
        let now = json!({"version": "0.1.1", "features": {
            "default": [], "sqlite": ["dep:sqlx"], "store": [], "http": ["store"]}});
        let found = broken(&now, &then);
        let lints: Vec<_> = found.iter().map(|(l, _)| *l).collect();
        assert_eq!(
            lints,
            [
                "feature_missing",
                "feature_not_enabled_by_default",
                "feature_not_enabled_by_default",
                "feature_no_longer_enables_feature",
            ],
            "{found:?}"
        );
        assert!(found[0].1.contains("`mock`"));
        assert!(found[3]
            .1
            .contains("`sqlite` no longer enables feature `store`"));
        assert!(broken(&then, &then).is_empty());
        let bumped = json!({"version": "0.2.0", "features": {}});
        assert!(broken(&bumped, &then).is_empty());
        assert!(breaking_step(Some("1.4.0"), Some("2.0.0-rc.1")));
        assert!(!breaking_step(Some("1.4.0"), Some("1.5.0")));
    }
}
