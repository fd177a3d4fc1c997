//! Crate layering: which korvus crate may depend on which.
//!
//! One table, [`LAYERS`], lowest layer first. A crate may depend only on
//! korvus crates of strictly lower layers, so crates that share a layer
//! (`korvus-session` and `korvus-command`) cannot depend on each other.
//! Project tooling ([`Layer::Tool`]) depends on no korvus crate and nothing
//! depends on it. Every workspace member must be in the table; an entry
//! without a member (a crate not written yet) is fine.
//!
//! Heavy drivers (`sqlx`, `sqlx-*`, `aws-*`) may appear only in
//! [`DRIVER_USERS`].
//!
//! Only normal and build dependencies count: a crate may use anything in its
//! own tests.

use std::collections::BTreeMap;

/// Where a crate sits in the layering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Layer {
    /// A layer of the library, 1 being the seams.
    At(u8),
    /// Project tooling outside the library.
    Tool,
}

use Layer::{At, Tool};

/// Every korvus crate and its layer, lowest first.
pub(crate) const LAYERS: &[(Layer, &[&str])] = &[
    // The seams: no korvus dependency at all.
    (
        At(1),
        &[
            "korvus-store",
            "korvus-log",
            "korvus-blob",
            "korvus-paths",
            "korvus-tls",
        ],
    ),
    // What sits on the seams alone: scratch dirs, the contract suites, the
    // scripted model server real agents are tested against (no korvus
    // dependency at all), and the backends, which implement seams and need
    // nothing else ([`BACKENDS`] says who may depend on them).
    (
        At(2),
        &[
            "korvus-workspace",
            "korvus-testkit",
            "korvus-model-stub",
            "korvus-store-sql",
            "korvus-blob-s3",
        ],
    ),
    // The Runner seam and the persist phase.
    (At(3), &["korvus-runner", "korvus-harvest"]),
    // The session layer and an agent adapter, side by side: an adapter
    // needs the Runner seam, never the Manager.
    (At(4), &["korvus-session", "korvus-command"]),
    // The HTTP front: it serves the layers below.
    (At(5), &["korvus-http"]),
    // The entry crate: re-exports what an embedder uses, backends by
    // feature.
    (At(6), &["korvus-agents"]),
    // Composition roots: nothing depends on them.
    (At(7), &["korvus-cli", "korvus-bench", "korvus-e2e"]),
    (Tool, &["xtask"]),
];

/// The backends: implementations of the seams. They sit as low as their
/// dependencies allow, but only the entry crate and the composition roots
/// ([`BACKEND_USERS`]) may depend on one, so no library layer ever needs a
/// particular backend.
pub(crate) const BACKENDS: &[&str] = &["korvus-store-sql", "korvus-blob-s3"];

/// The crates that may depend on a backend: they choose which ones to build.
pub(crate) const BACKEND_USERS: &[&str] =
    &["korvus-agents", "korvus-cli", "korvus-bench", "korvus-e2e"];

/// The crates that may depend on heavy drivers: the backends, and the
/// unpublished benchmark and end-to-end crates, which measure or test
/// against the real drivers directly.
pub(crate) const DRIVER_USERS: &[&str] = &[
    "korvus-store-sql",
    "korvus-blob-s3",
    "korvus-bench",
    "korvus-e2e",
];

/// Dependency edges the table forbids but the code still has, each with the
/// change that removes it. An exception whose edge is gone is itself a
/// failure, so none outlives its reason.
pub(crate) const EXCEPTIONS: &[(&str, &str, &str)] = &[];

fn is_heavy_driver(name: &str) -> bool {
    name == "sqlx" || name.starts_with("sqlx-") || name.starts_with("aws-")
}

/// The layer of `name`, if the table has it.
pub(crate) fn layer_of(name: &str) -> Option<Layer> {
    LAYERS
        .iter()
        .find(|(_, crates)| crates.contains(&name))
        .map(|(layer, _)| *layer)
}

/// Every layering violation of `deps` (normal and build dependencies of each
/// workspace member, by package name), in words.
pub(crate) fn violations(deps: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    violations_with(deps, EXCEPTIONS)
}

pub(crate) fn violations_with(
    deps: &BTreeMap<String, Vec<String>>,
    exceptions: &[(&str, &str, &str)],
) -> Vec<String> {
    let mut out = Vec::new();
    let is_internal =
        |d: &str| deps.contains_key(d) || layer_of(d).is_some() || d.starts_with("korvus-");
    for (name, ds) in deps {
        let Some(own) = layer_of(name) else {
            out.push(format!(
                "{name} is a workspace member on no layer; add it to LAYERS in xtask/src/tidy/layers.rs"
            ));
            continue;
        };
        for d in ds {
            if is_heavy_driver(d) && !DRIVER_USERS.contains(&name.as_str()) {
                out.push(format!(
                    "{name} depends on heavy driver {d}; only {} may",
                    DRIVER_USERS.join(", ")
                ));
            }
            if BACKENDS.contains(&d.as_str()) && !BACKEND_USERS.contains(&name.as_str()) {
                out.push(format!(
                    "{name} depends on backend {d}; only {} may choose a backend",
                    BACKEND_USERS.join(", ")
                ));
            }
            if !is_internal(d) || exceptions.iter().any(|(c, e, _)| c == name && e == d) {
                continue;
            }
            match (own, layer_of(d)) {
                (_, None) => out.push(format!("{name} depends on {d}, which is on no layer")),
                (At(mine), Some(At(theirs))) if theirs < mine => {}
                (_, Some(theirs)) => out.push(format!(
                    "{name} ({}) depends on {d} ({}); a crate may depend only on lower layers",
                    describe(own),
                    describe(theirs)
                )),
            }
        }
    }
    for (name, dep, why) in exceptions {
        let still_there = deps
            .get(*name)
            .is_some_and(|ds| ds.iter().any(|d| d == dep));
        if !still_there {
            out.push(format!(
                "the exception {name} -> {dep} ({why}) is no longer needed; remove it from EXCEPTIONS in xtask/src/tidy/layers.rs"
            ));
        }
    }
    out
}

fn describe(layer: Layer) -> String {
    match layer {
        At(n) => format!("layer {n}"),
        Tool => "tooling".to_owned(),
    }
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

    fn check(pairs: &[(&str, &[&str])]) -> Vec<String> {
        violations_with(&deps(pairs), &[])
    }

    #[test]
    fn every_crate_is_on_one_layer_only() {
        let mut seen = std::collections::BTreeSet::new();
        for (_, crates) in LAYERS {
            for c in *crates {
                assert!(seen.insert(*c), "{c} is on two layers");
            }
        }
    }

    #[test]
    fn a_seam_depending_on_korvus_is_caught() {
        let found = check(&[("korvus-blob", &["korvus-store", "bytes"])]);
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn a_crate_depending_on_a_higher_layer_is_caught() {
        let found = check(&[
            ("korvus-session", &["korvus-store-sql"]),
            ("korvus-testkit", &["korvus-blob-s3"]),
            ("korvus-runner", &["korvus-session"]),
            ("korvus-workspace", &["korvus-harvest"]),
        ]);
        // The testkit's dependency on a backend breaks two rules: both sit
        // on layer 2, and only backend users may depend on a backend.
        assert_eq!(found.len(), 5, "{found:?}");
        assert!(found[0].contains("lower layers"), "{found:?}");
    }

    #[test]
    fn only_the_entry_crate_and_roots_may_depend_on_a_backend() {
        let found = check(&[
            ("korvus-workspace", &["korvus-blob-s3"]),
            ("korvus-harvest", &["korvus-store-sql"]),
            ("korvus-http", &["korvus-store-sql"]),
        ]);
        // The workspace and the S3 backend also share layer 2.
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(found[1].contains("choose a backend"), "{found:?}");
        let found = check(&[
            ("korvus-agents", &["korvus-store-sql", "korvus-blob-s3"]),
            ("korvus-cli", &["korvus-store-sql", "korvus-agents"]),
        ]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn crates_side_by_side_cannot_depend_on_each_other() {
        let found = check(&[("korvus-command", &["korvus-session", "korvus-runner"])]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("korvus-session (layer 4)"), "{found:?}");
    }

    #[test]
    fn a_member_on_no_layer_is_caught() {
        let found = check(&[("korvus-mystery", &["korvus-store"])]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("on no layer"), "{found:?}");
        let found = check(&[("korvus-cli", &["korvus-mystery"])]);
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn xtask_depends_on_no_korvus_crate_and_nothing_on_xtask() {
        let found = check(&[("xtask", &["korvus-store", "anyhow"])]);
        assert_eq!(found.len(), 1, "{found:?}");
        let found = check(&[("korvus-cli", &["xtask"]), ("xtask", &[])]);
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn heavy_drivers_are_caught_outside_their_users() {
        let found = check(&[
            ("korvus-harvest", &["aws-sdk-s3"]),
            ("korvus-session", &["sqlx-core"]),
            ("korvus-cli", &["sqlx"]),
        ]);
        assert_eq!(found.len(), 3, "{found:?}");
    }

    #[test]
    fn the_bench_and_e2e_may_use_drivers_but_nothing_may_use_them() {
        let found = check(&[
            (
                "korvus-bench",
                &["korvus-session", "korvus-store-sql", "sqlx"],
            ),
            ("korvus-e2e", &["korvus-session", "aws-sdk-s3", "sqlx"]),
        ]);
        assert!(found.is_empty(), "{found:?}");
        let found = check(&[("korvus-session", &["korvus-bench"])]);
        assert_eq!(found.len(), 1, "{found:?}");
        let found = check(&[("korvus-cli", &["korvus-e2e"])]);
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn backends_may_use_their_driver() {
        let found = check(&[
            ("korvus-store-sql", &["korvus-store", "korvus-log", "sqlx"]),
            (
                "korvus-blob-s3",
                &["korvus-blob", "aws-sdk-s3", "aws-config"],
            ),
        ]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn an_exception_allows_its_edge_until_the_edge_is_gone() {
        let exceptions = [("korvus-command", "korvus-session", "pending")];
        let with_edge = deps(&[("korvus-command", &["korvus-session"])]);
        assert!(violations_with(&with_edge, &exceptions).is_empty());
        let without = deps(&[("korvus-command", &["korvus-runner"])]);
        let found = violations_with(&without, &exceptions);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("no longer needed"), "{found:?}");
    }
}
