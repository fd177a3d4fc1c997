//! One path per item in-tree: korvus-session re-exports the runner seam
//! (`Runner`, `RunContext`, `ExitReason`, …) so an embedder needs one
//! crate, but the workspace's own code names those items where they live,
//! `korvus_runner`, so a reader and a search find one spelling. Doc
//! comments (the embedder's view) may use the re-export.

/// The names korvus-session re-exports from korvus-runner.
pub(crate) const RUNNER_ITEMS: &[&str] = &[
    "exit",
    "DocsClient",
    "DocsLease",
    "DocsSearch",
    "ExitReason",
    "InheritedFile",
    "InvalidExitReason",
    "RunContext",
    "RunError",
    "RunOutcome",
    "Runner",
    "Tools",
    "MockDocsClient",
    "MockDocsSearch",
    "MockRunner",
];

/// Rust files (path, text) that reach a runner item through
/// `korvus_session`, in words. korvus-session's own `src/` (which makes
/// the re-export) and xtask are exempt, and so are doc comments.
pub(crate) fn violations(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in files {
        // xtask's own tests spell the violations they look for.
        if path.starts_with("crates/session/src/") || path.starts_with("xtask/") {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for name in reached(code) {
                out.push(format!(
                    "{path}:{}: `{name}` is korvus-runner's: import it from `korvus_runner`, not through korvus-session's re-export",
                    n + 1
                ));
            }
        }
    }
    out
}

/// The runner items a line names through `korvus_session::`, as a path
/// (`korvus_session::Runner`) or inside a braced import on that line.
fn reached(line: &str) -> Vec<&'static str> {
    let mut found = Vec::new();
    for (at, _) in line.match_indices("korvus_session::") {
        let rest = &line[at + "korvus_session::".len()..];
        let names: Vec<&str> = match rest.strip_prefix('{') {
            Some(inner) => inner
                .split('}')
                .next()
                .unwrap_or("")
                .split(',')
                .map(|n| n.trim().split("::").next().unwrap_or(""))
                .collect(),
            None => vec![rest
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()
                .unwrap_or("")],
        };
        for name in names {
            if let Some(item) = RUNNER_ITEMS.iter().find(|i| **i == name) {
                found.push(*item);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, text: &str) -> Vec<(String, String)> {
        vec![(path.to_owned(), text.to_owned())]
    }

    #[test]
    fn a_runner_item_through_the_session_crate_fails() {
        let found = violations(&file(
            "crates/http/tests/x.rs",
            "use korvus_session::{Manager, RunOutcome};\nfn f() -> korvus_session::ExitReason { todo() }\n",
        ));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("`RunOutcome`"), "{found:?}");
        assert!(found[1].contains("x.rs:2"), "{found:?}");
    }

    #[test]
    fn the_session_crate_doc_comments_and_its_own_items_pass() {
        assert!(violations(&file(
            "crates/cli/src/a.rs",
            "use korvus_session::{CreateSession, Manager};\n//! use korvus_session::Runner;\n/// korvus_session::RunContext\n",
        ))
        .is_empty());
        assert!(violations(&file(
            "crates/session/src/lib.rs",
            "pub use korvus_runner::Runner;\nuse korvus_session::Runner;\n",
        ))
        .is_empty());
    }
}
