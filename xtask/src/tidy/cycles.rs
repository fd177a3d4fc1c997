//! No import cycle between the files of one crate's `src/`: the modules a
//! file depends on — by import (`use crate::…` and, at file level, `use
//! super::…`) or by a path in its code (`crate::metrics::kept()`) — form a
//! DAG, so each file can be read knowing only what it names.
//!
//! A file's module is its path below `src/` (`lib.rs` the root,
//! `a/mod.rs` and `a.rs` are `a`, `a/b.rs` is `a::b`). An import of a
//! root re-export (`crate::SessionError`) counts as one of the module it
//! re-exports. Only file-level `use` lines (not indented) count: nested
//! `mod tests` import their parent on purpose.
//!
//! [`KNOWN`] lists the cycles that exist today and are being removed
//! (R2); a cycle not listed fails, and a listed one that is gone fails too
//! until it is taken off the list.

use std::collections::{BTreeMap, BTreeSet};

/// Cycles known when this rule was written, by crate folder and their
/// modules (sorted). R2 removes them; take each off once it is gone. No
/// other cycle may appear, nor may one of these grow.
pub(crate) const KNOWN: &[(&str, &[&str])] = &[
    ("crates/blob-s3/src", &["config", "store"]),
    // Seen once the rule counted paths in code: the namespace probe runs
    // the audited `spawn` step, which brings loopback up through `netns`.
    ("crates/command/src", &["network::netns", "spawn"]),
    ("crates/log/src", &["handle", "seam"]),
    ("crates/runner/src", &["context", "docs", "runner"]),
    ("crates/store-sql/src", &["dialect", "log", "store"]),
    ("crates/store/src", &["lease", "model", "report"]),
];

/// Every crate's import cycles not in [`KNOWN`], and the known ones that
/// no longer exist, in words. `files` are (path from the repository root,
/// text) of `crates/*/src/**/*.rs`.
pub(crate) fn violations(files: &[(String, String)]) -> Vec<String> {
    let mut by_crate: BTreeMap<&str, Vec<(String, &str)>> = BTreeMap::new();
    for (path, text) in files {
        let Some(i) = path.find("/src/") else {
            continue;
        };
        let (root, rel) = (&path[..i + 4], &path[i + 5..]);
        by_crate
            .entry(root)
            .or_default()
            .push((module_of(rel), text.as_str()));
    }
    let mut out = Vec::new();
    for (root, modules) in &by_crate {
        let found = cycles(modules);
        for cycle in &found {
            let known = KNOWN
                .iter()
                .any(|(r, m)| r == root && m.iter().copied().eq(cycle.iter().map(String::as_str)));
            if !known {
                out.push(format!(
                    "{root}: import cycle between the modules {}: move what they share into a module they both import",
                    cycle.join(", ")
                ));
            }
        }
        for (r, m) in KNOWN.iter().filter(|(r, _)| r == root) {
            let still = found
                .iter()
                .any(|c| m.iter().copied().eq(c.iter().map(String::as_str)));
            if !still {
                out.push(format!(
                    "{r}: the known import cycle {} is gone: take it off tidy's KNOWN list",
                    m.join(", ")
                ));
            }
        }
    }
    out
}

/// The module of a file at `rel` below `src/`.
fn module_of(rel: &str) -> String {
    let rel = rel.strip_suffix(".rs").unwrap_or(rel);
    let rel = rel.strip_suffix("/mod").unwrap_or(rel);
    if rel == "lib" || rel == "main" {
        return String::new();
    }
    rel.replace('/', "::")
}

/// The strongly connected groups of more than one module, each sorted.
fn cycles(modules: &[(String, &str)]) -> Vec<Vec<String>> {
    let names: BTreeSet<&str> = modules.iter().map(|(m, _)| m.as_str()).collect();
    let reexports = modules
        .iter()
        .find(|(m, _)| m.is_empty())
        .map(|(_, text)| root_reexports(text, &names))
        .unwrap_or_default();
    let mut edges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (module, text) in modules.iter().filter(|(m, _)| !m.is_empty()) {
        for path in imports(text, module)
            .into_iter()
            .chain(inline_paths(text, module))
        {
            let target = resolve(&path, &names, &reexports);
            if let Some(t) = target.filter(|t| t != module && !t.is_empty()) {
                edges.entry(module.as_str()).or_default().insert(t);
            }
        }
    }
    let mut groups = Vec::new();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for start in &names {
        if seen.contains(start) {
            continue;
        }
        let reach = reachable(start, &edges);
        let group: Vec<String> = reach
            .iter()
            .filter(|m| reachable(m, &edges).contains(*start))
            .map(|m| (*m).to_owned())
            .collect();
        for m in &group {
            seen.insert(names.get(m.as_str()).copied().unwrap_or(start));
        }
        if group.len() > 1 {
            groups.push(group);
        }
    }
    groups
}

fn reachable<'a>(start: &'a str, edges: &'a BTreeMap<&str, BTreeSet<String>>) -> BTreeSet<&'a str> {
    let mut out: BTreeSet<&str> = BTreeSet::from([start]);
    let mut pending = vec![start];
    while let Some(m) = pending.pop() {
        for next in edges.get(m).into_iter().flatten() {
            if out.insert(next.as_str()) {
                pending.push(next.as_str());
            }
        }
    }
    out
}

/// The module `path` (segments after `crate`) lives in: the longest prefix
/// that is a module, or the module a root re-export names.
fn resolve(
    path: &[String],
    names: &BTreeSet<&str>,
    reexports: &BTreeMap<String, String>,
) -> Option<String> {
    for n in (1..=path.len()).rev() {
        let prefix = path[..n].join("::");
        if names.contains(prefix.as_str()) {
            return Some(prefix);
        }
    }
    path.first().and_then(|first| reexports.get(first).cloned())
}

/// Names the crate root re-exports from its own modules (`pub use
/// crate::m::{A, B}` maps `A` and `B` to `m`).
fn root_reexports(text: &str, names: &BTreeSet<&str>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for path in imports(text, "") {
        let Some(module) = resolve(
            &path[..path.len().saturating_sub(1)],
            names,
            &BTreeMap::new(),
        ) else {
            continue;
        };
        if let Some(last) = path.last() {
            out.insert(last.clone(), module);
        }
    }
    out
}

/// The paths (below `crate`) the file-level `use` statements of a file of
/// `module` import, braces expanded.
fn imports(text: &str, module: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut statement = String::new();
    for line in text.lines() {
        if statement.is_empty() {
            let Some(rest) = ["use ", "pub use ", "pub(crate) use "]
                .iter()
                .find_map(|p| line.strip_prefix(p))
            else {
                continue;
            };
            statement.push_str(rest);
        } else {
            statement.push_str(line.trim());
        }
        if let Some(done) = statement.strip_suffix(';') {
            let (prefix, rest): (Vec<&str>, Option<&str>) =
                if let Some(rest) = done.strip_prefix("crate::") {
                    (Vec::new(), Some(rest))
                } else if let Some(rest) = done.strip_prefix("super::") {
                    let mut parent: Vec<&str> = module.split("::").collect();
                    parent.pop();
                    (parent, Some(rest))
                } else {
                    (Vec::new(), None)
                };
            for path in rest.map(expand).unwrap_or_default() {
                let segments = prefix
                    .iter()
                    .copied()
                    .chain(path.split("::"))
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect();
                out.push(segments);
            }
            statement.clear();
        }
    }
    out
}

/// The `crate::…` and `super::…` paths a file of `module` names in its
/// code outside `use` statements (`crate::metrics::kept()`,
/// `super::Inner`): a module reached by path is depended on as much as one
/// imported. Comments are skipped, and so is everything from a file-level
/// `#[cfg(test)]` on (tests import their parent on purpose).
fn inline_paths(text: &str, module: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("#[cfg(test)]") {
            break;
        }
        let code = line.trim_start();
        if code.starts_with("//") || code.starts_with("use ") || code.starts_with("pub use ") {
            continue;
        }
        let code = code.split("//").next().unwrap_or(code);
        for (anchor, from_parent) in [("crate::", false), ("super::", true)] {
            let mut rest = code;
            while let Some(at) = rest.find(anchor) {
                let before = rest[..at].chars().next_back();
                rest = &rest[at + anchor.len()..];
                // `$crate::` in a macro, or part of a longer name.
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
                    continue;
                }
                let path: Vec<&str> = rest
                    .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .next()
                    .unwrap_or("")
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .collect();
                let mut segments: Vec<String> = Vec::new();
                if from_parent {
                    segments.extend(module.split("::").map(str::to_owned));
                    segments.pop();
                }
                segments.extend(path.iter().map(|s| (*s).to_owned()));
                if !segments.is_empty() {
                    out.push(segments);
                }
            }
        }
    }
    out
}

/// `a::{b, c::{d, e}}` as `a::b`, `a::c::d`, `a::c::e` (`self` and
/// renames dropped).
fn expand(tree: &str) -> Vec<String> {
    // A rename (`a as b`) becomes `a@b` before the spaces go, so a name
    // that merely contains "as" (`lease`, `class`) stays whole.
    let tree: String = tree
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace(" as ", "@")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let Some(open) = tree.find('{') else {
        let path = tree
            .split('@')
            .next()
            .unwrap_or(&tree)
            .trim_end_matches("::self");
        return vec![path.trim_end_matches("::").to_owned()];
    };
    let prefix = &tree[..open];
    let inner = tree[open + 1..]
        .strip_suffix('}')
        .unwrap_or(&tree[open + 1..]);
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| {
            if p == "self" {
                vec![prefix.trim_end_matches("::").to_owned()]
            } else {
                expand(p)
                    .into_iter()
                    .map(|e| format!("{prefix}{e}"))
                    .collect()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crate_files(files: &[(&str, &str)]) -> Vec<(String, String)> {
        files
            .iter()
            .map(|(p, t)| (format!("crates/x/src/{p}"), (*t).to_owned()))
            .collect()
    }

    #[test]
    fn braces_expand() {
        assert_eq!(
            expand("a::{b, c::{d, e as f}, self}"),
            vec!["a::b", "a::c::d", "a::c::e", "a"]
        );
    }

    #[test]
    fn a_name_holding_as_is_not_a_rename() {
        assert_eq!(expand("lease::LeaseState"), vec!["lease::LeaseState"]);
        assert_eq!(expand("class as c"), vec!["class"]);
        assert_eq!(expand("m::{base, x as y}"), vec!["m::base", "m::x"]);
    }

    #[test]
    fn a_cycle_between_two_files_is_caught_and_a_dag_passes() {
        let dag = crate_files(&[
            ("lib.rs", "mod a;\nmod b;\npub use crate::b::Thing;\n"),
            ("a.rs", "use crate::Thing;\n"),
            ("b.rs", "use std::fmt;\n"),
        ]);
        assert!(violations(&dag).is_empty());
        let cycle = crate_files(&[
            ("lib.rs", "mod a;\nmod b;\npub use crate::b::Thing;\n"),
            ("a.rs", "use crate::Thing;\n"),
            ("b.rs", "use crate::{\n    a::Other,\n};\n"),
        ]);
        let found = violations(&cycle);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("a, b"), "{found:?}");
    }

    #[test]
    fn super_at_file_level_counts_and_nested_tests_do_not() {
        let files = crate_files(&[
            ("m/mod.rs", "use crate::m::c::X;\n"),
            (
                "m/c.rs",
                "use super::Y;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
            ),
        ]);
        let found = violations(&files);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("m, m::c"), "{found:?}");
    }

    #[test]
    fn a_path_in_code_counts_and_comments_macros_and_tests_do_not() {
        let cycle = crate_files(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", "use crate::b::Thing;\n"),
            ("b.rs", "fn f() {\n    crate::a::g();\n}\n"),
        ]);
        let found = violations(&cycle);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("a, b"), "{found:?}");
        let none = crate_files(&[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", "use crate::b::Thing;\n"),
            (
                "b.rs",
                "/// See [`crate::a::g`].\nfn f() {\n    $crate::a::g(); // crate::a::h()\n}\n\
                 #[cfg(test)]\nmod tests {\n    fn t() { crate::a::g(); }\n}\n",
            ),
        ]);
        assert!(violations(&none).is_empty(), "{:?}", violations(&none));
    }
}
