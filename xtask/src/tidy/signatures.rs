//! The docs quote calls as they are: a call quoted in backticks in a doc,
//! where the name is a function of the workspace, has as many arguments
//! as some definition of `name` takes (receivers not counted). A quoted
//! signature that drifted from the code (a parameter added, say) fails.
//! A quote with `…` in its arguments is an abbreviation and not checked.

use std::collections::{BTreeMap, BTreeSet};

/// The argument counts of every `fn` defined in `files` (path, text), by
/// name (a name defined several times has several counts).
pub(crate) fn arities(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<usize>> {
    let mut out: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for (_, text) in files {
        for (at, _) in text.match_indices("fn ") {
            if at > 0 && text[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &text[at + 3..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                continue;
            }
            let mut after = &rest[name.len()..];
            if after.starts_with('<') {
                let Some(end) = closing(after) else { continue };
                after = &after[end + 1..];
            }
            let Some(params) = after.strip_prefix('(') else {
                continue;
            };
            let Some(end) = closing(after).map(|e| e - 1) else {
                continue;
            };
            let count = top_level(&params[..end])
                .into_iter()
                .filter(|p| !is_receiver(p))
                .count();
            out.entry(name).or_default().insert(count);
        }
    }
    out
}

/// Quoted calls in `docs` (path, text) whose argument count no definition
/// in `arities` has, in words.
pub(crate) fn violations(
    docs: &[(String, String)],
    arities: &BTreeMap<String, BTreeSet<usize>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (doc, text) in docs {
        for quote in text.split('`').skip(1).step_by(2) {
            let Some((name, rest)) = quote.split_once('(') else {
                continue;
            };
            let Some(args) = rest.strip_suffix(')') else {
                continue;
            };
            let plain = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
            if name.is_empty() || !name.chars().all(plain) || args.contains(['(', ')']) {
                continue;
            }
            if args.contains('…') || args.contains("..") {
                continue;
            }
            let Some(known) = arities.get(name) else {
                continue;
            };
            let n = top_level(args).len();
            if !known.contains(&n) {
                out.push(format!(
                    "{doc}: `{quote}` quotes {n} argument(s), but `{name}` takes {}",
                    known
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(" or ")
                ));
            }
        }
    }
    out
}

/// The index of the bracket closing the one `s` starts with.
fn closing(s: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' | '<' | '{' => depth += 1,
            ')' | ']' | '>' | '}' => {
                // `->` inside a closure type is not a bracket.
                if c == '>' && s[..i].ends_with('-') {
                    continue;
                }
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The non-empty parts of `s` between commas outside brackets.
fn top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' | '<' | '{' => depth += 1,
            '>' if s[..i].ends_with('-') => {}
            ')' | ']' | '>' | '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn is_receiver(param: &str) -> bool {
    let head = param.split(':').next().unwrap_or("").trim();
    matches!(head, "self" | "&self" | "&mut self" | "mut self") || head.ends_with(" self")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(text: &str) -> Vec<(String, String)> {
        vec![("crates/a/src/lib.rs".to_owned(), text.to_owned())]
    }

    #[test]
    fn arguments_are_counted_at_the_top_level_without_receivers() {
        let found = arities(&code(
            "pub fn key(a: u32, b: (u8, u8), c: Vec<(u8, u8)>) -> X {}\n\
             async fn beat(\n    &self,\n    lease: Lease,\n    runs: &[(Id, u64)],\n) {}\n\
             fn g<F: Fn(u8) -> u8>(f: F) {}\n",
        ));
        assert_eq!(found["key"], BTreeSet::from([3]));
        assert_eq!(found["beat"], BTreeSet::from([2]));
        assert_eq!(found["g"], BTreeSet::from([1]));
    }

    #[test]
    fn a_quote_with_a_drifted_argument_list_fails() {
        let defs = arities(&code(
            "pub fn report_key(i: u8, s: u8, r: u32, f: u64) {}\n",
        ));
        let doc = |t: &str| vec![("docs/a.md".to_owned(), t.to_owned())];
        let found = violations(&doc("`report_key(incident, session, revision)`"), &defs);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("takes 4"), "{found:?}");
        assert!(violations(&doc("`report_key(i, s, r, fence)`"), &defs).is_empty());
        assert!(violations(&doc("`report_key(…)` and `now()`"), &defs).is_empty());
    }
}
