//! [`context_path`]: where an inherited artifact lands in a scratch dir.

use korvus_paths::{WorkspacePath, CONTEXT_DIR};

/// The workspace path of the `n`th inherited artifact:
/// `context/<n>-<sanitised name>`.
///
/// This is the single definition: context materialisation writes files here
/// and the first message's manifest names the same paths. `name` is
/// sanitised deterministically by [`korvus_blob::sanitize_file_name`]:
/// characters outside `[A-Za-z0-9._-]` (so `/`, NUL, …) become `_`, leading
/// dots are dropped (no `..`), the result is cut to 128 bytes, and an empty
/// result becomes `file`. The result is therefore always one valid segment
/// under [`CONTEXT_DIR`].
///
/// ```
/// use korvus_workspace::context_path;
///
/// assert_eq!(context_path(1, "notes.md").as_str(), "context/1-notes.md");
/// assert_eq!(context_path(2, "../../etc/passwd").as_str(), "context/2-_.._etc_passwd");
/// assert_eq!(context_path(3, "a\0b").as_str(), "context/3-a_b");
/// assert_eq!(context_path(4, "..").as_str(), "context/4-file");
/// assert_eq!(context_path(5, &"x".repeat(1000)).file_name().len(), "5-".len() + 128);
/// ```
pub fn context_path(n: u32, name: &str) -> WorkspacePath {
    WorkspacePath::new(format!(
        "{CONTEXT_DIR}/{n}-{}",
        korvus_blob::sanitize_file_name(name)
    ))
    .expect("one sanitized segment under the context dir is a valid path")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_paths_are_valid_and_deterministic() {
        for name in ["", ".", "..", "a/b", "\0", "ü", &"y".repeat(5000), "/abs"] {
            let p = context_path(7, name);
            assert_eq!(p, context_path(7, name));
            assert!(WorkspacePath::new(p.as_str()).is_ok(), "{p:?}");
            assert_eq!(p.segments().count(), 2, "{p:?}");
            assert!(p.is_under(&WorkspacePath::new(CONTEXT_DIR).unwrap()));
        }
    }
}
