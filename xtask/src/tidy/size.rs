//! Library source files stay small enough to read: at most
//! [`MAX_LINES`] lines each. Split a larger file by responsibility.
//!
//! Library crates are every `crates/<name>/src` except the composition
//! roots (`cli`, `bench`, `e2e`), which are binaries or tests. Function
//! length (at most 80 lines) is clippy's `too_many_lines`, run by
//! `cargo xtask lint` on library targets with the threshold in
//! `clippy.toml`.

/// The longest library source file, in lines.
pub(crate) const MAX_LINES: usize = 500;

/// Crate folders under `crates/` that are not libraries.
pub(crate) const NOT_LIBRARIES: &[&str] = &["cli", "bench", "e2e"];

/// Every file of `files` (path, text) longer than [`MAX_LINES`].
pub(crate) fn violations(files: &[(String, String)]) -> Vec<String> {
    files
        .iter()
        .filter_map(|(path, text)| {
            let lines = text.lines().count();
            (lines > MAX_LINES).then(|| {
                format!(
                    "{path} has {lines} lines, more than {MAX_LINES}: split it by responsibility"
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_file_is_caught_and_a_short_one_is_not() {
        let long = "x\n".repeat(MAX_LINES + 1);
        let short = "x\n".repeat(MAX_LINES);
        let found = violations(&[
            ("crates/a/src/long.rs".into(), long),
            ("crates/a/src/short.rs".into(), short),
        ]);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("crates/a/src/long.rs has 501 lines"));
    }
}
