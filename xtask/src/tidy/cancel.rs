//! Every public async method and every public trait with async methods
//! documents its cancel safety: its doc comment has a `# Cancel safety`
//! section saying what holds when the returned future is dropped before it
//! completes (for a trait, what a caller may assume of every
//! implementation and what an implementer must guarantee).
//!
//! The rule reads rustfmt-formatted text, line by line: a `pub async fn`
//! (not `pub(crate)`, `pub(super)` or `pub(in …)`) and a `pub trait` whose
//! body holds an `async fn` need the line `/// # Cancel safety` among the
//! contiguous `///` lines above them (attribute lines between the doc
//! comment and the item are skipped). Items of a `#[cfg(test)]` module are
//! not read, nor are test support files: `testing.rs` and the files of a
//! `testing/` folder, and test modules in files of their own (`tests.rs`,
//! `…_tests.rs`).

/// The heading a cancel-safety section starts with, as a doc-comment line.
pub(crate) const HEADING: &str = "/// # Cancel safety";

/// The library crates (folders under `crates/`) whose `src/` the rule
/// reads.
pub(crate) const CRATES: &[&str] = &[
    "store",
    "log",
    "blob",
    "paths",
    "workspace",
    "runner",
    "harvest",
    "session",
    "command",
    "http",
    "store-sql",
    "blob-s3",
    "agents",
];

/// Whether the file at `path` (relative, `/`-separated) is test support
/// the rule does not read: a `testing.rs` file, a file under a `testing/`
/// folder, or a test module of its own (`tests.rs`, `…_tests.rs`).
pub(crate) fn is_test_support(path: &str) -> bool {
    let mut parts = path.split(['/', '\\']);
    let file = parts.next_back().unwrap_or_default();
    let stem = file.strip_suffix(".rs").unwrap_or(file);
    stem == "testing"
        || stem == "tests"
        || stem.ends_with("_tests")
        || parts.any(|p| p == "testing")
}

/// Every file of `files` (path, text) with a public async item lacking a
/// `# Cancel safety` section, one line per item.
pub(crate) fn violations(files: &[(String, String)]) -> Vec<String> {
    files
        .iter()
        .filter(|(path, _)| !is_test_support(path))
        .flat_map(|(path, text)| {
            missing(text).into_iter().map(move |(line, item)| {
                format!("{path}:{line}: {item} documents no `# Cancel safety` section")
            })
        })
        .collect()
}

/// The public async items of a Rust file's `text` whose doc comment has
/// no [`HEADING`] line: (1-based line, `fn name` or `trait Name`).
pub(crate) fn missing(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if is_test_module(&lines, i) {
            i = block_end(&lines, i);
        } else if let Some(name) = async_fn_name(trimmed) {
            if !documented(&lines, i) {
                found.push((i + 1, format!("fn {name}")));
            }
        } else if let Some(name) = trait_name(trimmed) {
            let end = block_end(&lines, i);
            let has_async = lines
                .get(i + 1..end)
                .unwrap_or_default()
                .iter()
                .any(|l| declares_async_fn(l));
            if has_async && !documented(&lines, i) {
                found.push((i + 1, format!("trait {name}")));
            }
        }
        i += 1;
    }
    found
}

/// The name of the function `line` (trimmed at the start) declares when
/// it is a `pub async fn`, with any qualifiers between `pub` and `fn`.
fn async_fn_name(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("pub ")?;
    let (qualifiers, after) = rest.split_once("fn ")?;
    let words: Vec<&str> = qualifiers.split_whitespace().collect();
    let only_qualifiers = words
        .iter()
        .all(|w| matches!(*w, "async" | "const" | "unsafe" | "extern" | "\"C\""));
    (only_qualifiers && words.contains(&"async")).then(|| item_name(after))
}

/// The name of the trait `line` (trimmed at the start) declares when it
/// is a `pub trait` (or `pub unsafe trait`).
fn trait_name(line: &str) -> Option<&str> {
    let rest = line.strip_prefix("pub ")?;
    let rest = rest.strip_prefix("unsafe ").unwrap_or(rest);
    rest.strip_prefix("trait ").map(item_name)
}

/// The identifier at the start of `rest`.
fn item_name(rest: &str) -> &str {
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    &rest[..end]
}

/// Whether `line` of code declares an `async fn` (of any visibility).
fn declares_async_fn(line: &str) -> bool {
    let code = line.trim_start();
    if code.starts_with("//") {
        return false;
    }
    code.split("//")
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .any(|w| w == ["async", "fn"])
}

/// Whether line `i` opens a module with a body that a `#[cfg(test)]`
/// attribute (among the attribute lines just above it) leaves out of
/// normal builds.
fn is_test_module(lines: &[&str], i: usize) -> bool {
    let code = lines[i].trim_start();
    let code = code.strip_prefix("pub ").unwrap_or(code);
    let opens_module = code.starts_with("mod ") && code.trim_end().ends_with('{');
    opens_module
        && lines[attributes_start(lines, i)..i]
            .iter()
            .any(|a| a.replace(' ', "").starts_with("#[cfg(test)]"))
}

/// The first of the attribute lines directly above line `i` (`i` when
/// there are none); an attribute rustfmt spread over several lines counts
/// from its `#[` line.
fn attributes_start(lines: &[&str], i: usize) -> usize {
    let mut j = i;
    while j > 0 {
        let above = lines[j - 1].trim();
        if above.starts_with("#[") {
            j -= 1;
        } else if above.ends_with(']') || above.ends_with(',') {
            // Perhaps the end or middle of a spread attribute: it is one
            // when a `#[` line comes before anything that is not.
            let start = (0..j - 1).rev().find(|&k| {
                let l = lines[k].trim();
                l.starts_with("#[") || !continues_attribute(l)
            });
            match start {
                Some(k) if lines[k].trim_start().starts_with("#[") => j = k,
                _ => break,
            }
        } else {
            break;
        }
    }
    j
}

/// Whether `line` (trimmed) may be the inside of an attribute spread over
/// lines: not empty, no comment, not the end of an item or a block.
fn continues_attribute(line: &str) -> bool {
    !(line.is_empty()
        || line.starts_with("//")
        || line.ends_with('{')
        || line.ends_with('}')
        || line.ends_with(';'))
}

/// Whether the doc comment of the item at line `i` — the contiguous `///`
/// lines above it and its attributes — has a [`HEADING`] line.
fn documented(lines: &[&str], i: usize) -> bool {
    lines[..attributes_start(lines, i)]
        .iter()
        .rev()
        .take_while(|l| l.trim_start().starts_with("///"))
        .any(|l| l.trim() == HEADING)
}

/// The index of the line closing the block the item at line `i` opens:
/// the first later line that is `}` at the item's indentation (rustfmt's
/// layout), or `i` itself when the item has no multi-line body.
fn block_end(lines: &[&str], i: usize) -> usize {
    let indent = &lines[i][..lines[i].len() - lines[i].trim_start().len()];
    // A body-less item (`trait T {}`, `mod m;`) on one line closes at once.
    let head = lines[i].trim_end();
    if head.ends_with("{}") || head.ends_with(';') {
        return i;
    }
    let close = format!("{indent}}}");
    lines
        .iter()
        .enumerate()
        .skip(i + 1)
        .find(|(_, l)| l.trim_end() == close)
        .map_or(lines.len(), |(k, _)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_documented_fn_passes_and_an_undocumented_one_fails() {
        let text = "\
/// Reads a thing.
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub async fn read() {}

/// Writes a thing.
pub async fn write() {}

impl Thing {
    /// Removes it.
    ///
    /// # Errors
    /// When it cannot.
    pub async fn remove(&self) -> Result<()> {
        Ok(())
    }
}
";
        assert_eq!(
            missing(text),
            vec![(8, "fn write".to_owned()), (15, "fn remove".to_owned())]
        );
    }

    #[test]
    fn restricted_and_synchronous_fns_are_ignored() {
        let text = "\
pub(crate) async fn a() {}
pub(super) async fn b() {}
    pub(in crate::x) async fn c() {}
async fn d() {}
pub fn e() -> impl Future<Output = ()> { async {} }
pub const fn f() {}
// pub async fn g() {}
";
        assert!(missing(text).is_empty(), "{:?}", missing(text));
    }

    #[test]
    fn a_fn_in_a_cfg_test_module_is_ignored() {
        let text = "\
/// # Cancel safety
/// Cancel safe.
pub async fn real() {}

#[cfg(test)]
mod tests {
    use super::*;

    pub async fn helper() {}

    mod inner {
        pub async fn deeper() {}
    }
}

pub async fn after() {}
";
        assert_eq!(missing(text), vec![(16, "fn after".to_owned())]);
    }

    #[test]
    fn a_trait_with_async_methods_needs_the_section() {
        let text = "\
/// A seam.
#[async_trait]
pub trait Seam: Send + Sync {
    /// Gets.
    async fn get(&self) -> u8;
}

/// Another.
///
/// # Cancel safety
/// Implementations must be cancel safe.
#[async_trait]
pub trait Documented {
    async fn get(&self) -> u8;
}

/// No async method.
pub trait Plain {
    fn get(&self) -> u8;
    // async fn not_this(&self);
}

pub trait Empty {}

pub(crate) trait Private {
    async fn get(&self) -> u8;
}
";
        assert_eq!(missing(text), vec![(3, "trait Seam".to_owned())]);
    }

    #[test]
    fn attributes_between_doc_and_fn_are_fine() {
        let text = "\
/// Does it.
///
/// # Cancel safety
/// Cancel safe.
#[must_use]
#[allow(
    clippy::too_many_arguments,
    reason = \"a long list\"
)]
#[tracing::instrument(skip(self))]
pub async fn go(&self) {}

/// # Cancel safety
/// Not cancel safe.
#[cfg(feature = \"x\")]
pub async fn gated() {}
";
        assert!(missing(text).is_empty(), "{:?}", missing(text));
    }

    #[test]
    fn the_heading_must_be_its_own_line_in_the_doc_comment() {
        let text = "\
/// Cancel safety: it only reads.
pub async fn a() {}

/// # Cancel safety
// a plain comment breaks the doc comment
pub async fn b() {}

/// # Cancellation
pub async fn c() {}
";
        let names: Vec<String> = missing(text).into_iter().map(|(_, n)| n).collect();
        assert_eq!(names, ["fn a", "fn b", "fn c"]);
    }

    #[test]
    fn test_support_files_are_skipped() {
        let text = "pub async fn fixture() {}\n".to_owned();
        let files = vec![
            ("crates/a/src/testing.rs".to_owned(), text.clone()),
            ("crates/a/src/testing/mod.rs".to_owned(), text.clone()),
            ("crates/a/src/walk/tests.rs".to_owned(), text.clone()),
            (
                "crates/a/src/proxy/socket_tests.rs".to_owned(),
                text.clone(),
            ),
            ("crates/a/src/lib.rs".to_owned(), text),
        ];
        let found = violations(&files);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("crates/a/src/lib.rs:1: fn fixture"));
    }
}
