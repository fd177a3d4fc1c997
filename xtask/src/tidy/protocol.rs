//! `docs/command-runner.md` shows every name of the agent protocol that the
//! code defines.
//!
//! The protocol names are, mechanically:
//!
//! - every string constant with a `pub` visibility of any kind
//!   (`pub const NAME: &str = "VALUE";`, `pub(crate)`, `pub(super)`) in the
//!   command runner's sources (`crates/command/src`, all files) and in
//!   korvus-workspace's path module, which names the files both sides of a
//!   run agree on (`report.md`, the manifests);
//! - every string literal `"KORVUS_…"` in those files: the environment
//!   variables the agent is given, whether or not they are constants.
//!
//! Code after a line `#[cfg(test)]` is not read (test modules close a file),
//! nor are files that are test modules themselves (`tests.rs`, `…_tests.rs`).
//! Each value must appear in the doc as code (an inline code span or a fenced
//! block) as a whole token: not as part of a longer name, so `report` does not
//! match `report.md`. A string constant tidy cannot read (not a plain literal
//! on one line) is a failure too, so no name escapes the check.

/// The protocol's problems, in words. `sources` are `(path, text)` pairs.
pub(crate) fn violations(sources: &[(String, String)], doc: &str) -> Vec<String> {
    let code = code_text(doc);
    let mut out = Vec::new();
    for (path, text) in sources {
        for name in names(text) {
            match name {
                Name::Value { what, value } => {
                    if !contains_token(&code, value.trim()) {
                        out.push(format!(
                            "{path}: {what} {value:?} is not shown in docs/command-runner.md"
                        ));
                    }
                }
                Name::Unreadable { line } => out.push(format!(
                    "{path}: cannot read the string constant in `{line}`; write it as `pub const NAME: &str = \"value\";` on one line"
                )),
            }
        }
    }
    out
}

#[derive(Debug, PartialEq, Eq)]
enum Name {
    /// A protocol name: what declares it, and its value.
    Value { what: String, value: String },
    /// A string constant whose value is not a plain one-line literal.
    Unreadable { line: String },
}

/// The protocol names in one source file.
fn names(source: &str) -> Vec<Name> {
    let mut out = Vec::new();
    for line in source.lines() {
        let line = line.trim();
        if line == "#[cfg(test)]" {
            break;
        }
        if line.starts_with("//") {
            continue;
        }
        if let Some(name) = string_constant(line) {
            out.push(name);
            continue;
        }
        for value in korvus_literals(line) {
            out.push(Name::Value {
                what: "environment variable".to_owned(),
                value,
            });
        }
    }
    out
}

/// `pub… const NAME: &str = "VALUE";` on this line, if it declares one.
fn string_constant(line: &str) -> Option<Name> {
    let rest = line.strip_prefix("pub")?;
    let rest = match rest.strip_prefix('(') {
        Some(r) => r.split_once(')')?.1,
        None => rest,
    };
    let rest = rest.trim_start().strip_prefix("const ")?;
    let (name, rest) = rest.split_once(':')?;
    let rest = rest.trim_start();
    let rest = rest
        .strip_prefix("&str")
        .or_else(|| rest.strip_prefix("&'static str"))?;
    let unreadable = || Name::Unreadable {
        line: line.to_owned(),
    };
    let Some(literal) = rest.trim_start().strip_prefix('=') else {
        return Some(unreadable());
    };
    let value = literal
        .trim()
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix("\";"))
        .filter(|v| !v.contains(['"', '\\']));
    Some(match value {
        Some(v) => Name::Value {
            what: format!("constant {}", name.trim()),
            value: v.to_owned(),
        },
        None => unreadable(),
    })
}

/// Every `"KORVUS_…"` literal on a line.
fn korvus_literals(line: &str) -> Vec<String> {
    line.split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.strip_prefix("KORVUS_").is_some_and(|rest| {
                !rest.is_empty()
                    && rest
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            })
        })
        .map(str::to_owned)
        .collect()
}

/// The doc's code: inline code spans and fenced blocks, one per line.
fn code_text(doc: &str) -> String {
    let mut out = String::new();
    let mut fenced = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        for span in line.split('`').skip(1).step_by(2) {
            out.push_str(span);
            out.push('\n');
        }
    }
    out
}

/// `value` occurs in `text` with no name character right before or after it.
fn contains_token(text: &str, value: &str) -> bool {
    let is_name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    !value.is_empty()
        && text.match_indices(value).any(|(i, _)| {
            let before = text[..i].chars().next_back();
            let after = text[i + value.len()..].chars().next();
            !before.is_some_and(is_name) && !after.is_some_and(is_name)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "# Protocol\n\n| `KORVUS_SESSION_ID` | the id |\n\n\
        The manifest is at `.korvus/run.json`; see `report.md`.\n\n\
        ```json\n{\"type\":\"usage\",\"input_tokens\":1}\n```\n";

    fn source(text: &str) -> Vec<(String, String)> {
        vec![("crates/command/src/lib.rs".to_owned(), text.to_owned())]
    }

    #[test]
    fn shown_names_pass() {
        let src = "pub const MANIFEST_FILE: &str = \".korvus/run.json\";\n\
            pub(crate) const REPORT: &'static str = \"report.md\";\n\
            pub(super) const USAGE: &str = \"usage\";\n\
            cmd.env(\"KORVUS_SESSION_ID\", id);\n\
            const PRIVATE: &str = \"not protocol\";\n\
            pub const CODE: i32 = 75;\n\
            // \"KORVUS_IN_A_COMMENT\"\n\
            #[cfg(test)]\nmod tests { const X: &str = \"KORVUS_TEST_ONLY\"; }\n";
        let found = violations(&source(src), DOC);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn a_constant_the_doc_does_not_show_is_caught() {
        let src = "pub const HARVEST: &str = \".korvus/harvest.json\";\n\
            pub(crate) const REPORT_DIR: &str = \"report\";\n";
        let found = violations(&source(src), DOC);
        // `report` is only part of `report.md` in the doc: not shown.
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("HARVEST"), "{found:?}");
    }

    #[test]
    fn an_environment_variable_the_doc_does_not_show_is_caught() {
        let src = "    .env(\"KORVUS_SECRET_KNOB\", \"1\")\n\
            pub const ENV: &str = \"KORVUS_OTHER\";\n";
        let found = violations(&source(src), DOC);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[1].contains("constant ENV"), "{found:?}");
    }

    #[test]
    fn a_constant_tidy_cannot_read_is_caught() {
        let src = "pub const JOINED: &str = concat!(\".korvus\", \"/run.json\");\n\
            pub const LONG: &str =\n    \"report.md\";\n";
        let found = violations(&source(src), DOC);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("cannot read"), "{found:?}");
    }
}
