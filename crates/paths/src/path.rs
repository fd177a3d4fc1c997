//! [`WorkspacePath`], the read-only deny list, the context path rule and the
//! file names every phase shares ([`REPORT_FILE`], [`METADATA_DIR`] and the
//! manifests under it).

use std::fmt;
use std::path::PathBuf;

/// A workspace-relative path that breaks a rule of [`WorkspacePath`]:
/// the refused text (escaped, cut to 200 characters) and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid workspace path {path:?}: {reason}")]
#[non_exhaustive]
pub struct InvalidPath {
    /// The refused path (escaped, cut to 200 characters).
    pub path: String,
    /// The broken rule.
    pub reason: &'static str,
}

/// Longest workspace-relative path accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 1024;

/// Longest single path segment accepted, in bytes (the usual `NAME_MAX`).
pub const MAX_SEGMENT_BYTES: usize = 255;

/// The directory inherited artifacts are written to (read-only).
pub const CONTEXT_DIR: &str = "context";

/// The trees a scratch dir is seeded with unless configured otherwise.
pub(crate) const DEFAULT_TREES: [&str; 3] = ["skills", "docs", "runbooks"];

/// The authored report: the file at the root of a scratch dir that a run
/// lands as its report revision. The harvest stores it at the report key and
/// its cap always keeps it; a runner checks it to tell whether the author
/// phase finished.
pub const REPORT_FILE: &str = "report.md";

/// The directory inside a scratch dir where korvus itself writes files about
/// a run ([`RUN_MANIFEST`], [`HARVEST_MANIFEST`]; a unit test checks both
/// lie under it). The values are plain literals so `cargo xtask tidy` can
/// check that `docs/command-runner.md` shows each.
///
/// It is dot-prefixed, so the harvest walk never stores what is in it and no
/// file a session harvests can collide with these paths. Not to be confused
/// with the CLI's data dir, which by default is also named `.korvus` but
/// sits in the CLI's working directory (`./.korvus`) and holds its database
/// and blobs; the two are unrelated.
pub const METADATA_DIR: &str = ".korvus";

/// The run manifest, relative to the scratch dir: the JSON file a command
/// runner writes for the agent before it starts (named in its environment).
pub const RUN_MANIFEST: &str = ".korvus/run.json";

/// The harvest manifest: the workspace path of the artifact that records
/// what a persist phase did (`korvus-harvest` stores its serialised outcome
/// under this path). The phase uploads it directly, not from the scratch
/// dir; a reopen restores it there like any other artifact, and the next
/// harvest leaves it alone because it lies under [`METADATA_DIR`].
pub const HARVEST_MANIFEST: &str = ".korvus/harvest.json";

/// The report template, when the embedder configured one: copied read-only
/// into each scratch dir before the run, so an agent (sandboxed or not) can
/// read the shape its `report.md` should take.
pub const REPORT_TEMPLATE: &str = ".korvus/report-template.md";

/// Where a command runner keeps a real agent's own state for the next
/// revision (its thread id and the one file it resumes from): harvested as
/// `agent_state` artifacts, restored on reopen, never served to users.
pub const AGENT_STATE_DIR: &str = ".korvus/agent";

/// The agent's private home directory inside its scratch dir (a command
/// runner points `HOME` at it): writable, never harvested, removed with the
/// scratch dir.
pub const AGENT_HOME: &str = ".korvus/home";

/// The agent's private temporary directory inside its scratch dir (a
/// command runner points `TMPDIR` at it), like [`AGENT_HOME`].
pub const AGENT_TMP: &str = ".korvus/tmp";

/// A validated workspace-relative path: where a file sits inside a scratch dir.
///
/// Invariants, checked by [`WorkspacePath::new`]:
///
/// - not empty, at most [`MAX_PATH_BYTES`] bytes, each segment at most
///   [`MAX_SEGMENT_BYTES`];
/// - relative: does not start with `/`;
/// - `/`-separated segments, none empty, `.` or `..` (so it cannot escape
///   the directory it is joined to, and has no trailing `/`);
/// - no backslash and no control character (NUL, newline, DEL, …).
///
/// ```
/// use korvus_paths::WorkspacePath;
///
/// assert!(WorkspacePath::new("out/summary.md").is_ok());
/// for bad in ["", "/etc/passwd", "a//b", "a/./b", "../x", "a/..", "a\\b", "a\0b", "dir/"] {
///     assert!(WorkspacePath::new(bad).is_err(), "{bad:?}");
/// }
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkspacePath(String);

impl WorkspacePath {
    /// Validates `path`.
    ///
    /// # Errors
    /// [`InvalidPath`] naming the broken rule.
    pub fn new(path: impl Into<String>) -> Result<Self, InvalidPath> {
        let path = path.into();
        match check(&path) {
            Ok(()) => Ok(Self(path)),
            Err(reason) => Err(InvalidPath {
                path: path.escape_debug().take(200).collect(),
                reason,
            }),
        }
    }

    /// The path's text, `/`-separated.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The path's segments.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The last segment.
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// `true` when `self` equals `prefix` or lies under it on a segment
    /// boundary: `docs/a.md` is under `docs`, `docs2/a.md` is not.
    ///
    /// ```
    /// use korvus_paths::WorkspacePath;
    ///
    /// let docs = WorkspacePath::new("docs").unwrap();
    /// assert!(WorkspacePath::new("docs/a.md").unwrap().is_under(&docs));
    /// assert!(!WorkspacePath::new("docs2/a.md").unwrap().is_under(&docs));
    /// ```
    pub fn is_under(&self, prefix: &WorkspacePath) -> bool {
        self.0 == prefix.0
            || (self.0.starts_with(&prefix.0)
                && self.0.as_bytes().get(prefix.0.len()) == Some(&b'/'))
    }

    /// The path as a relative [`PathBuf`], to join onto a scratch dir.
    pub fn to_relative_path(&self) -> PathBuf {
        self.segments().collect()
    }
}

fn check(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("is empty");
    }
    if path.len() > MAX_PATH_BYTES {
        return Err("is longer than 1024 bytes");
    }
    if path.starts_with('/') {
        return Err("is absolute");
    }
    if path.contains('\\') {
        return Err("contains a backslash");
    }
    if path.chars().any(char::is_control) {
        return Err("contains a control character");
    }
    for segment in path.split('/') {
        match segment {
            "" => return Err("has an empty segment"),
            "." | ".." => return Err("has a `.` or `..` segment"),
            s if s.len() > MAX_SEGMENT_BYTES => return Err("has a segment over 255 bytes"),
            _ => {}
        }
    }
    Ok(())
}

impl fmt::Display for WorkspacePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for WorkspacePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WorkspacePath({:?})", self.0)
    }
}

impl AsRef<str> for WorkspacePath {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<&str> for WorkspacePath {
    type Error = InvalidPath;

    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl TryFrom<String> for WorkspacePath {
    type Error = InvalidPath;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

/// Parses a tree prefix as configured: like [`WorkspacePath::new`], but one
/// trailing `/` is accepted (`skills/` and `skills` are the same tree).
///
/// # Errors
/// [`InvalidPath`] naming the broken rule.
pub fn tree_prefix(text: &str) -> Result<WorkspacePath, InvalidPath> {
    WorkspacePath::new(text.strip_suffix('/').unwrap_or(text))
}

/// The trees a seeder (korvus-workspace's `GitSeeder`) seeds unless
/// configured otherwise: `skills`, `docs` and `runbooks`.
pub fn default_trees() -> Vec<WorkspacePath> {
    DEFAULT_TREES
        .iter()
        .map(|t| WorkspacePath(String::from(*t)))
        .collect()
}

/// The single deny list of a workspace: the seeded trees plus [`CONTEXT_DIR`].
///
/// Everything that must not write or harvest under a read-only tree (restore
/// here, the harvest walk in `korvus-harvest`) calls this one function with
/// the trees its seeder is configured with (korvus-workspace's `GitSeeder::trees`).
/// The configured trees are denied whether or not a given session was
/// actually seeded, so a session cannot plant files where seeded ones would
/// be. The result is sorted, without duplicates and without prefixes nested
/// inside another.
///
/// ```
/// use korvus_paths::{default_trees, is_read_only, read_only_prefixes, WorkspacePath};
///
/// let deny = read_only_prefixes(&default_trees());
/// let names: Vec<&str> = deny.iter().map(|p| p.as_str()).collect();
/// assert_eq!(names, ["context", "docs", "runbooks", "skills"]);
/// assert!(is_read_only(&WorkspacePath::new("skills/x/SKILL.md").unwrap(), &deny));
/// assert!(!is_read_only(&WorkspacePath::new("notes.md").unwrap(), &deny));
/// ```
pub fn read_only_prefixes(trees: &[WorkspacePath]) -> Vec<WorkspacePath> {
    let mut all: Vec<WorkspacePath> = trees.to_vec();
    all.push(WorkspacePath(String::from(CONTEXT_DIR)));
    minimal_prefixes(all)
}

/// Sorts, dedups and drops prefixes that lie under another one.
pub fn minimal_prefixes(mut all: Vec<WorkspacePath>) -> Vec<WorkspacePath> {
    all.sort();
    all.dedup();
    let mut out: Vec<WorkspacePath> = Vec::with_capacity(all.len());
    for p in all {
        if !out.iter().any(|q| p.is_under(q)) {
            out.push(p);
        }
    }
    out
}

/// `true` when `path` lies under (or is) one of `prefixes`, which should come
/// from [`read_only_prefixes`].
pub fn is_read_only(path: &WorkspacePath, prefixes: &[WorkspacePath]) -> bool {
    prefixes.iter().any(|p| path.is_under(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_and_duplicate_prefixes_collapse() {
        let trees = vec![
            tree_prefix("docs/").unwrap(),
            tree_prefix("docs/runbooks").unwrap(),
            tree_prefix("context").unwrap(),
        ];
        let deny = read_only_prefixes(&trees);
        let names: Vec<&str> = deny.iter().map(WorkspacePath::as_str).collect();
        assert_eq!(names, ["context", "docs"]);
    }

    #[test]
    fn shared_file_names_are_valid_and_the_manifests_are_hidden() {
        let metadata = WorkspacePath::new(METADATA_DIR).unwrap();
        assert!(METADATA_DIR.starts_with('.'));
        for manifest in [
            RUN_MANIFEST,
            HARVEST_MANIFEST,
            REPORT_TEMPLATE,
            AGENT_HOME,
            AGENT_TMP,
        ] {
            let path = WorkspacePath::new(manifest).unwrap();
            assert!(path.is_under(&metadata), "{manifest}");
        }
        assert_eq!(
            WorkspacePath::new(REPORT_FILE).unwrap().segments().count(),
            1
        );
    }

    #[test]
    fn over_long_segments_are_refused() {
        assert!(WorkspacePath::new("a".repeat(255)).is_ok());
        assert!(WorkspacePath::new("a".repeat(256)).is_err());
        assert!(WorkspacePath::new(format!("{}/b", "a/".repeat(600))).is_err());
    }
}
