//! [`BlobKey`]: validated object keys, and the derived key layout.

use std::fmt;

use uuid::Uuid;

use crate::BlobError;

/// Longest key accepted, in bytes (S3's own limit).
pub const MAX_KEY_BYTES: usize = 1024;

/// Longest sanitised file name in an artifact key, in bytes.
pub const MAX_FILE_NAME_BYTES: usize = 128;

/// A validated object key.
///
/// Invariants, checked by [`BlobKey::new`] before any I/O can happen:
///
/// - not empty, at most [`MAX_KEY_BYTES`] bytes;
/// - relative: does not start with `/`;
/// - `/`-separated segments, none empty, `.` or `..`;
/// - no backslash and no control character (NUL, newline, DEL, …).
///
/// ```
/// use korvus_blob::BlobKey;
///
/// assert!(BlobKey::new("incidents/a/report.md").is_ok());
/// for bad in ["", "/abs", "a//b", "a/./b", "../x", "a\\b", "a\0b", "a\nb"] {
///     assert!(BlobKey::new(bad).is_err(), "{bad:?}");
/// }
/// ```
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlobKey(String);

impl BlobKey {
    /// Validates `key`.
    ///
    /// # Errors
    /// [`BlobError::InvalidKey`] naming the broken rule.
    pub fn new(key: impl Into<String>) -> Result<Self, BlobError> {
        let key = key.into();
        match check(&key) {
            Ok(()) => Ok(Self(key)),
            Err(reason) => Err(BlobError::InvalidKey {
                key: key.escape_debug().take(200).collect(),
                reason,
            }),
        }
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key's `/`-separated segments.
    pub fn segments(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// `true` when `self` equals `prefix` or lies under it on a segment
    /// boundary: `a/b` is under `a` but `a/bc` is not under `a/b`.
    pub fn is_under(&self, prefix: &BlobKey) -> bool {
        self.0 == prefix.0
            || (self.0.starts_with(&prefix.0)
                && self.0.as_bytes().get(prefix.0.len()) == Some(&b'/'))
    }

    /// Appends a segment (or several, `/`-separated), validating the result.
    ///
    /// # Errors
    /// [`BlobError::InvalidKey`] when the result breaks a rule.
    pub fn join(&self, rest: &str) -> Result<Self, BlobError> {
        Self::new(format!("{}/{rest}", self.0))
    }
}

fn check(key: &str) -> Result<(), &'static str> {
    if key.is_empty() {
        return Err("is empty");
    }
    if key.len() > MAX_KEY_BYTES {
        return Err("is longer than 1024 bytes");
    }
    if key.starts_with('/') {
        return Err("is absolute");
    }
    if key.contains('\\') {
        return Err("contains a backslash");
    }
    if key.chars().any(char::is_control) {
        return Err("contains a control character");
    }
    for segment in key.split('/') {
        match segment {
            "" => return Err("has an empty segment"),
            "." | ".." => return Err("has a `.` or `..` segment"),
            _ => {}
        }
    }
    Ok(())
}

impl fmt::Display for BlobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for BlobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlobKey({:?})", self.0)
    }
}

impl AsRef<str> for BlobKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for BlobKey {
    type Error = BlobError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl TryFrom<&str> for BlobKey {
    type Error = BlobError;

    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

/// The prefix under which everything of one session is stored:
/// `incidents/<incident>/sessions/<session>`.
pub fn session_prefix(incident: Uuid, session: Uuid) -> BlobKey {
    BlobKey(format!("incidents/{incident}/sessions/{session}"))
}

/// The prefix of the keys a start-up check writes, reads back and deletes
/// to learn whether a blob store accepts writes (`Manager::check` in
/// korvus-session). Outside korvus's key layout (`incidents/…`), so the
/// orphan sweeper never lists it and no row ever points under it.
pub const PROBE_PREFIX: &str = "probes";

/// The key of one start-up probe, under [`PROBE_PREFIX`].
///
/// ```
/// # use korvus_blob::probe_key;
/// let id = uuid::Uuid::nil();
/// assert_eq!(probe_key(id).as_str(), "probes/00000000-0000-0000-0000-000000000000");
/// ```
pub fn probe_key(id: Uuid) -> BlobKey {
    BlobKey::new(format!("{PROBE_PREFIX}/{id}")).expect("a probe key is valid")
}

/// The key of a session's report revision as written by the run at
/// `fence`:
/// `incidents/<incident>/sessions/<session>/reports/<revision, 6 digits>/<fence>/report.md`.
///
/// Deterministic, so a retried upload of the same run overwrites instead
/// of accumulating; the fence in it means a run that was superseded (taken
/// over, or continued elsewhere) can never overwrite the bytes a newer
/// run's row references — its late upload lands beside them.
///
/// ```
/// use korvus_blob::report_key;
/// use uuid::Uuid;
///
/// let (i, s) = (Uuid::nil(), Uuid::max());
/// assert_eq!(report_key(i, s, 2, 1), report_key(i, s, 2, 1));
/// assert_ne!(report_key(i, s, 2, 1), report_key(i, s, 2, 2));
/// assert!(report_key(i, s, 2, 3).as_str().ends_with("/reports/000002/3/report.md"));
/// ```
pub fn report_key(incident: Uuid, session: Uuid, revision: u32, fence: u64) -> BlobKey {
    BlobKey(format!(
        "incidents/{incident}/sessions/{session}/reports/{revision:06}/{fence}/report.md"
    ))
}

/// The key of the harvest manifest of one run's iteration:
/// `incidents/<incident>/sessions/<session>/manifests/<revision, 6 digits>/<fence>/harvest.json`.
///
/// Deterministic per (revision, fence) like [`report_key`]; the report row
/// of the revision references it.
pub fn manifest_key(incident: Uuid, session: Uuid, revision: u32, fence: u64) -> BlobKey {
    BlobKey(format!(
        "incidents/{incident}/sessions/{session}/manifests/{revision:06}/{fence}/harvest.json"
    ))
}

/// The key of the manifest of one salvage of a settled revision:
/// `incidents/<incident>/sessions/<session>/manifests/<revision, 6 digits>/<fence>/salvage-<attempt>.json`.
///
/// A salvage stores its manifest before the transition that attaches its
/// rows at `fence`, and two salvages of the same session (a `reap` and a
/// `korvus salvage` at once) both aim at the same fence: `attempt`, unique
/// per salvage, keeps the loser's manifest from overwriting the one the
/// winner's report row names.
///
/// ```
/// use korvus_blob::{manifest_key, salvage_manifest_key};
/// use uuid::Uuid;
///
/// let (i, s) = (Uuid::nil(), Uuid::nil());
/// let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
/// assert_ne!(salvage_manifest_key(i, s, 2, 3, a), salvage_manifest_key(i, s, 2, 3, b));
/// assert_ne!(salvage_manifest_key(i, s, 2, 3, a), manifest_key(i, s, 2, 3));
/// ```
pub fn salvage_manifest_key(
    incident: Uuid,
    session: Uuid,
    revision: u32,
    fence: u64,
    attempt: Uuid,
) -> BlobKey {
    BlobKey(format!(
        "incidents/{incident}/sessions/{session}/manifests/{revision:06}/{fence}/salvage-{attempt}.json"
    ))
}

/// The key of an artifact:
/// `incidents/<incident>/sessions/<session>/artifacts/<artifact>/<file name>`.
///
/// Unique because the artifact id is. Only the last component of `file_name`
/// is used, sanitised by [`sanitize_file_name`].
///
/// ```
/// use korvus_blob::artifact_key;
/// use uuid::Uuid;
///
/// let key = artifact_key(Uuid::nil(), Uuid::nil(), Uuid::max(), "out/../../etc/passwd");
/// assert!(key.as_str().ends_with("/passwd"));
/// ```
pub fn artifact_key(incident: Uuid, session: Uuid, artifact: Uuid, file_name: &str) -> BlobKey {
    let base = file_name.rsplit(['/', '\\']).next().unwrap_or(file_name);
    BlobKey(format!(
        "incidents/{incident}/sessions/{session}/artifacts/{artifact}/{}",
        sanitize_file_name(base)
    ))
}

/// Maps any text to a safe single key segment, deterministically: characters
/// outside `[A-Za-z0-9._-]` become `_`, leading dots are dropped (no `.`/`..`
/// or hidden names), the result is cut to [`MAX_FILE_NAME_BYTES`], and an
/// empty result becomes `file`.
///
/// ```
/// use korvus_blob::sanitize_file_name;
///
/// assert_eq!(sanitize_file_name("report.md"), "report.md");
/// assert_eq!(sanitize_file_name("../a b\0c"), "_a_b_c");
/// assert_eq!(sanitize_file_name(".."), "file");
/// ```
pub fn sanitize_file_name(name: &str) -> String {
    let mapped: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let trimmed = mapped.trim_start_matches('.');
    let mut out: String = trimmed.chars().take(MAX_FILE_NAME_BYTES).collect();
    if out.is_empty() {
        out = "file".to_owned();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn under_matches_whole_segments_only() {
        let ab = BlobKey::new("a/b").unwrap();
        assert!(BlobKey::new("a/b").unwrap().is_under(&ab));
        assert!(BlobKey::new("a/b/c").unwrap().is_under(&ab));
        assert!(!BlobKey::new("a/bc").unwrap().is_under(&ab));
        assert!(!BlobKey::new("a").unwrap().is_under(&ab));
    }

    #[test]
    fn derived_keys_are_valid() {
        let k = artifact_key(Uuid::nil(), Uuid::nil(), Uuid::nil(), "\u{0}\n");
        assert!(BlobKey::new(k.as_str()).is_ok());
        let long = "x".repeat(10_000);
        let k = artifact_key(Uuid::nil(), Uuid::nil(), Uuid::nil(), &long);
        assert!(BlobKey::new(k.as_str()).is_ok());
        assert!(
            BlobKey::new(report_key(Uuid::nil(), Uuid::nil(), u32::MAX, u64::MAX).as_str()).is_ok()
        );
    }

    #[test]
    fn sanitising_is_deterministic_and_safe() {
        for name in ["", ".", "..", "...", ".hidden", "a/b", "ü.txt", "x\u{7f}"] {
            let s = sanitize_file_name(name);
            assert_eq!(s, sanitize_file_name(name));
            assert!(
                !s.is_empty() && !s.starts_with('.') && !s.contains('/'),
                "{name:?} -> {s:?}"
            );
        }
        assert_eq!(sanitize_file_name(".hidden"), "hidden");
    }
}
