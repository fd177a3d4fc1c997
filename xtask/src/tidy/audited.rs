//! Unsafe code lives in one audited module: [`ALLOWED`] (a folder). The workspace
//! lint is `unsafe_code = "deny"` (not `forbid`, so that module can allow
//! it); this rule fails on `unsafe` — a block, a function, an impl or an
//! `allow(unsafe_code)` — in any other Rust file of the repository.

/// The keyword, spelled in two halves so this file does not hold it.
const KEYWORD: &str = concat!("un", "safe");
/// The lint's name, likewise.
const LINT_NAME: &str = concat!("un", "safe_code");

/// The one module whose files may contain `unsafe` (korvus-command's
/// pre-exec hook: setsid, joining cgroups, the agent's open-file limit, its
/// namespaces and korvus's minimal init). A folder: every file beneath it.
pub(crate) const ALLOWED: &str = "crates/command/src/spawn/";

/// Every file of `files` (path, text) other than [`ALLOWED`] with a line
/// of code that uses `unsafe`, and the workspace lint when it is missing.
pub(crate) fn violations(files: &[(String, String)], manifest: &str) -> Vec<String> {
    let mut found: Vec<String> = files
        .iter()
        .filter(|(path, _)| !path.starts_with(ALLOWED))
        .flat_map(|(path, text)| {
            text.lines()
                .enumerate()
                .filter(|(_, line)| uses_keyword(line))
                .map(move |(n, _)| {
                    format!(
                        "{path}:{}: `{KEYWORD}` outside {ALLOWED}, the one audited module",
                        n + 1
                    )
                })
        })
        .collect();
    let denied = manifest.lines().any(|l| {
        let l = l.trim();
        l == format!("{LINT_NAME} = \"deny\"") || l == format!("{LINT_NAME} = \"forbid\"")
    });
    if !denied {
        found.push(format!(
            "Cargo.toml: [workspace.lints.rust] must deny {LINT_NAME}"
        ));
    }
    found
}

/// Whether `line`'s code (before any `//` comment, outside string
/// literals as far as a line can tell) uses the `unsafe` keyword or
/// allows the lint.
fn uses_keyword(line: &str) -> bool {
    let code = line.split("//").next().unwrap_or_default();
    let code = strip_strings(code);
    code.contains(LINT_NAME)
        || code
            .split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|word| word == KEYWORD)
}

/// `code` without the text of its `"…"` literals.
fn strip_strings(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in code.chars() {
        if in_string {
            match (escaped, c) {
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => escaped = false,
            }
        } else if c == '"' {
            in_string = true;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lint() -> String {
        format!("[workspace.lints.rust]\n{LINT_NAME} = \"deny\"\n")
    }

    #[test]
    fn the_keyword_outside_the_audited_module_is_caught() {
        let k = KEYWORD;
        let files = vec![
            (
                format!("{ALLOWED}mod.rs"),
                format!("{k} {{ f() }}\n#![allow({LINT_NAME})]\n"),
            ),
            (format!("{ALLOWED}init.rs"), format!("{k} fn f() {{}}\n")),
            (
                "crates/a/src/lib.rs".to_owned(),
                format!("fn f() {{\n    {k} {{ g() }}\n}}\n"),
            ),
            (
                "crates/b/src/lib.rs".to_owned(),
                format!("#[allow({LINT_NAME})]\nmod m;\n"),
            ),
            (
                "crates/c/tests/t.rs".to_owned(),
                format!("{k} fn h() {{}}\n"),
            ),
        ];
        let found = violations(&files, &lint());
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(found[0].starts_with("crates/a/src/lib.rs:2:"), "{found:?}");
        assert!(found[1].starts_with("crates/b/src/lib.rs:1:"), "{found:?}");
        assert!(found[2].starts_with("crates/c/tests/t.rs:1:"), "{found:?}");
    }

    #[test]
    fn comments_strings_and_longer_words_are_not_the_keyword() {
        let k = KEYWORD;
        let text =
            format!("// {k} here is prose\nlet s = \"{k}\";\nlet {k}ly = 1;\n/// `{k}` in docs\n");
        let found = violations(&[("crates/a/src/lib.rs".to_owned(), text)], &lint());
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_workspace_without_the_lint_is_caught() {
        let found = violations(&[], "[workspace.lints.rust]\nmissing_docs = \"warn\"\n");
        assert_eq!(found.len(), 1, "{found:?}");
    }
}
