//! `docs/architecture.md` quotes only files that exist, and a code map
//! entry that lists its crate's files lists all of them.
//!
//! - A backticked `*.rs` inside a crate's entry must be a file of that
//!   crate (beneath `src/`, or its path from the crate's folder); one
//!   elsewhere in the document must be the end of some file's path in the
//!   repository.
//! - When an entry quotes at least one `*.rs`, each of its crate's
//!   `src/**/*.rs` but `lib.rs` and `main.rs` must be named: by its path
//!   below `src/`, by its file name, or by a quoted folder (`cgroup/`)
//!   it lies in.

/// The code map entries' and the document's problems, in words. `files`
/// are the repository's Rust files, by path from its root.
pub(crate) fn violations(doc: &str, files: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let (entries, outside) = split(doc);
    for (name, text) in &entries {
        let dir = crate_dir(name);
        let quoted = spans(text);
        let of_crate = |dir: &str| -> Vec<&String> {
            files
                .iter()
                .filter(|f| f.starts_with(&format!("{dir}/")))
                .collect()
        };
        let own = of_crate(&dir);
        let mut rs: Vec<&str> = Vec::new();
        for (owner, q) in owned_spans(text) {
            if !is_rust_file(q) {
                continue;
            }
            let owner_dir = owner.map_or_else(|| dir.clone(), crate_dir);
            if owner.is_none() {
                rs.push(q);
            }
            let exists = of_crate(&owner_dir).iter().any(|f| {
                *f == &format!("{owner_dir}/src/{q}")
                    || *f == &format!("{owner_dir}/{q}")
                    || f.ends_with(&format!("/{q}"))
            });
            if !exists {
                out.push(format!(
                    "docs/architecture.md: the code map entry of {name} quotes `{q}`, which is not a file of {owner_dir}"
                ));
            }
        }
        if rs.is_empty() {
            continue;
        }
        for f in &own {
            let Some(rel) = f.strip_prefix(&format!("{dir}/src/")) else {
                continue;
            };
            if rel == "lib.rs" || rel == "main.rs" {
                continue;
            }
            let file_name = rel.rsplit('/').next().unwrap_or(rel);
            let named = quoted.iter().any(|q| {
                *q == rel
                    || (!rel.contains('/') && *q == file_name)
                    || (rel.contains('/')
                        && (*q == file_name
                            || q.ends_with(&format!("/{file_name}")) && rel.ends_with(q)))
                    || (q.ends_with('/') && rel.starts_with(q))
                    || rel
                        .strip_suffix("/mod.rs")
                        .is_some_and(|m| *q == format!("{m}.rs") || *q == format!("{m}/"))
            });
            if !named {
                out.push(format!(
                    "docs/architecture.md: the code map entry of {name} lists files but not `{rel}` ({f})"
                ));
            }
        }
    }
    for q in spans(&outside).into_iter().filter(|q| is_rust_file(q)) {
        if !files
            .iter()
            .any(|f| f == q || f.ends_with(&format!("/{q}")))
        {
            out.push(format!(
                "docs/architecture.md quotes `{q}`, which is no file of the repository"
            ));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The folder of package `name`: `crates/<name without korvus->`, or
/// `xtask`.
fn crate_dir(name: &str) -> String {
    match name.strip_prefix("korvus-") {
        Some(rest) => format!("crates/{rest}"),
        None => name.to_owned(),
    }
}

/// A quoted Rust file name or path (no placeholder, no space).
fn is_rust_file(q: &str) -> bool {
    q.ends_with(".rs") && !q.contains(['<', '>', '*', ' ', '{'])
}

/// The code spans of `text`, each with the crate it belongs to when the
/// text names one just before it (`` `korvus-session`'s `lease.rs` ``).
fn owned_spans(text: &str) -> Vec<(Option<&str>, &str)> {
    let parts: Vec<&str> = text.split('`').collect();
    let mut out = Vec::new();
    let mut i = 1;
    while i < parts.len() {
        let owner = (i >= 2
            && parts[i - 1].trim() == "'s"
            && (parts[i - 2].starts_with("korvus-") || parts[i - 2] == "xtask"))
            .then(|| parts[i - 2]);
        out.push((owner, parts[i]));
        i += 2;
    }
    out
}

/// The code spans of `text`.
fn spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The code map's entries (package name, text) and the rest of the
/// document.
fn split(doc: &str) -> (Vec<(String, String)>, String) {
    let mut entries: Vec<(String, String)> = Vec::new();
    let mut outside = String::new();
    let mut in_map = false;
    for line in doc.lines() {
        if line.starts_with("## ") {
            in_map = line.trim() == "## Code map";
            outside.push_str(line);
            outside.push('\n');
            continue;
        }
        if in_map {
            if let Some(heading) = line.strip_prefix("### ") {
                let name = heading.split('`').nth(1).unwrap_or(heading).trim();
                entries.push((name.to_owned(), String::new()));
                continue;
            }
            if let Some((_, text)) = entries.last_mut() {
                text.push_str(line);
                text.push('\n');
                continue;
            }
        }
        outside.push_str(line);
        outside.push('\n');
    }
    (entries, outside)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(paths: &[&str]) -> Vec<String> {
        paths.iter().map(|p| (*p).to_owned()).collect()
    }

    const DOC: &str = "# A\n\nSee `run.rs` of the runner.\n\n## Code map\n\n\
        ### `korvus-command`\n\n`runner.rs` runs, `cgroup/` limits (`v1.rs`), `spawn.rs` forks.\n\n\
        ### `korvus-store`\n\nRows, no files named.\n\n## Other\n";

    fn repo() -> Vec<String> {
        files(&[
            "crates/command/src/lib.rs",
            "crates/command/src/runner.rs",
            "crates/command/src/spawn.rs",
            "crates/command/src/cgroup/mod.rs",
            "crates/command/src/cgroup/v1.rs",
            "crates/runner/src/run.rs",
            "crates/store/src/rows.rs",
        ])
    }

    #[test]
    fn a_complete_map_passes() {
        let found = violations(DOC, &repo());
        assert!(found.is_empty(), "{found:#?}");
    }

    #[test]
    fn a_quoted_file_that_is_missing_is_caught() {
        let doc = DOC.replace("`spawn.rs` forks", "`spawn.rs` forks, `gone.rs` went");
        let found = violations(&doc, &repo());
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].contains("`gone.rs`"), "{found:?}");
        let doc = DOC.replace("`run.rs`", "`ran.rs`");
        let found = violations(&doc, &repo());
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].contains("no file of the repository"), "{found:?}");
    }

    #[test]
    fn a_file_of_another_crate_named_as_such_is_checked_there() {
        let doc = DOC.replace(
            "Rows, no files named.",
            "Polled by `korvus-runner`'s `run.rs`.",
        );
        let found = violations(&doc, &repo());
        assert!(found.is_empty(), "{found:#?}");
        let doc = DOC.replace(
            "Rows, no files named.",
            "Polled by `korvus-runner`'s `rows.rs`.",
        );
        let found = violations(&doc, &repo());
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0].contains("not a file of crates/runner"),
            "{found:?}"
        );
    }

    #[test]
    fn an_unmapped_file_of_an_entry_that_lists_files_is_caught() {
        let mut repo = repo();
        repo.push("crates/command/src/watch.rs".to_owned());
        // An entry that lists no files is not held to list them all.
        repo.push("crates/store/src/lease.rs".to_owned());
        let found = violations(DOC, &repo);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(found[0].contains("`watch.rs`"), "{found:?}");
    }
}
