//! The project's docs refer to nothing outside the repository.
//!
//! Read: the top-level `README.md`, every Markdown file under `docs/`,
//! `crates/` and `xtask/`, and the doc comments (`///`, `//!`) of every Rust
//! file there. None may name [`OUTSIDE`]: the design notes the
//! project was planned from live next to the repository, not in it, so a
//! reader of a clone could not follow such a reference.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Texts that point outside the repository. Case matters:
/// `docs/architecture.md` is the repository's own map and fine.
pub(crate) const OUTSIDE: &[&str] = &[
    "../shared",
    "shared/design",
    "ARCHITECTURE.md",
    "CONVENTIONS.md",
];

/// What a file contributes: all of a Markdown file, the doc comments of a
/// Rust file.
pub(crate) fn doc_text(path: &Path, text: &str) -> Option<String> {
    match path.extension().and_then(|e| e.to_str()) {
        Some("md") => Some(text.to_owned()),
        Some("rs") => Some(
            text.lines()
                .map(str::trim_start)
                .filter(|l| l.starts_with("///") || l.starts_with("//!"))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

/// Every outside reference in `docs` (`(path, doc text)` pairs), in words.
pub(crate) fn violations(docs: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (path, text) in docs {
        for line in text.lines() {
            for pattern in OUTSIDE.iter().filter(|p| line.contains(*p)) {
                out.push(format!(
                    "{path}: refers to {pattern} outside the repository: {}",
                    line.trim()
                ));
            }
        }
    }
    out
}

/// The files [`violations`] reads, with their doc text, relative to `root`.
pub(crate) fn read_docs(root: &Path) -> Result<Vec<(String, String)>> {
    let mut files = vec![root.join("README.md")];
    for dir in ["docs", "crates", "xtask"] {
        walk(&root.join(dir), &mut files)?;
    }
    let mut out = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).with_context(|| format!("read {}", file.display()))?;
        let Some(doc) = doc_text(&file, &text) else {
            continue;
        };
        let shown = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        out.push((shown, doc));
    }
    Ok(out)
}

/// Every `.md` and `.rs` file under `dir`, skipping build output and hidden
/// directories.
pub(crate) fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = fs::read_dir(dir).with_context(|| format!("list {}", dir.display()))?;
    for entry in entries {
        let entry = entry?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        if entry.file_type()?.is_dir() {
            walk(&path, out)?;
        } else if name.ends_with(".md") || name.ends_with(".rs") {
            out.push(path);
        }
    }
    out.sort();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_doc_mentioning_the_outside_design_is_caught() {
        let docs = vec![
            (
                "docs/a.md".to_owned(),
                "See `../shared/design/notes.md`.\nAnd ARCHITECTURE.md §2.".to_owned(),
            ),
            (
                "README.md".to_owned(),
                "See docs/architecture.md.".to_owned(),
            ),
        ];
        let found = violations(&docs);
        // `../shared/design` matches two patterns on one line.
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found.iter().all(|f| f.starts_with("docs/a.md")),
            "{found:?}"
        );
    }

    #[test]
    fn only_doc_comments_of_rust_files_are_read() {
        let src = "//! Follows CONVENTIONS.md.\nconst X: &str = \"../shared\";\n  /// ok\n";
        let doc = doc_text(Path::new("a.rs"), src).unwrap();
        let found = violations(&[("a.rs".to_owned(), doc)]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("CONVENTIONS.md"), "{found:?}");
        assert_eq!(doc_text(Path::new("Cargo.toml"), "# ../shared"), None);
    }
}
