//! Code the docs show is code CI builds: a fenced block right after a line
//! `<!-- example: <path> -->` must be the file at `<path>` exactly (the
//! examples live under `crates/*/examples/`, which `cargo test` builds and
//! the CLI's tests run). Edit the file, then paste it into the doc.

/// The marker that names the file a doc's next fenced block shows.
const MARKER: &str = "<!-- example: ";

/// `(doc path, doc text)` checked against `read(path)` of each example it
/// names; the failures in words.
pub(crate) fn violations(
    docs: &[(String, String)],
    read: &dyn Fn(&str) -> Option<String>,
) -> Vec<String> {
    let mut found = Vec::new();
    for (doc, text) in docs {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(path) = line
                .trim()
                .strip_prefix(MARKER)
                .and_then(|rest| rest.strip_suffix("-->"))
                .map(str::trim)
            else {
                continue;
            };
            let Some(shown) = fenced_after(&lines[i + 1..]) else {
                found.push(format!("{doc}: no fenced block after the marker of {path}"));
                continue;
            };
            match read(path) {
                None => found.push(format!(
                    "{doc}: {path} (an example it shows) does not exist"
                )),
                Some(file) if file.trim_end() != shown.trim_end() => found.push(format!(
                    "{doc}: the block after the marker differs from {path}: paste the file again"
                )),
                Some(_) => {}
            }
        }
    }
    found
}

/// The content of the fenced block that starts at the first line of
/// `lines` (blank lines before it are skipped).
fn fenced_after(lines: &[&str]) -> Option<String> {
    let mut rest = lines.iter().skip_while(|l| l.trim().is_empty());
    if !rest.next()?.starts_with("```") {
        return None;
    }
    let mut body = String::new();
    for line in rest {
        if line.starts_with("```") {
            return Some(body);
        }
        body.push_str(line);
        body.push('\n');
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Vec<(String, String)> {
        vec![("docs/x.md".into(), text.into())]
    }

    #[test]
    fn a_block_equal_to_its_file_passes_and_a_changed_one_is_caught() {
        let read = |p: &str| (p == "ex.rs").then(|| "fn main() {}\n".to_owned());
        let same = "<!-- example: ex.rs -->\n```rust\nfn main() {}\n```\n";
        assert!(violations(&doc(same), &read).is_empty());
        let changed = "<!-- example: ex.rs -->\n\n```rust\nfn main() { 1; }\n```\n";
        assert_eq!(violations(&doc(changed), &read).len(), 1);
        let missing = "<!-- example: gone.rs -->\n```rust\n```\n";
        assert!(violations(&doc(missing), &read)[0].contains("does not exist"));
        let no_block = "<!-- example: ex.rs -->\ntext\n";
        assert!(violations(&doc(no_block), &read)[0].contains("no fenced block"));
    }
}
