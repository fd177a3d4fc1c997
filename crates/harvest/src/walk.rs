//! The harvest walk: which files of a scratch dir are worth storing.

use std::fmt;
use std::path::Path;

use serde::Serialize;
use walkdir::WalkDir;

use korvus_workspace::{WorkspacePath, REPORT_FILE};

/// Default cap on stored files per harvest.
pub const DEFAULT_MAX_FILES: usize = 64;

/// A file the walk found worth storing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Workspace-relative path.
    pub path: WorkspacePath,
    /// Size when walked (the file is re-checked when read).
    pub size: u64,
}

/// Why an entry was not harvested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SkipReason {
    /// A dot-prefixed name; directories are not descended into.
    Hidden,
    /// Under a read-only prefix (a seeded tree or `context/`).
    ReadOnly,
    /// Not a regular file (symlink, FIFO, socket, device); never read through.
    NotRegular {
        /// What it is.
        kind: String,
    },
    /// The name cannot be a workspace path (not UTF-8, control character, …).
    InvalidName,
    /// The entry or subtree could not be read; the rest of the walk went on.
    Unreadable {
        /// The error.
        error: String,
    },
    /// The file is empty.
    Empty,
    /// The file is larger than the limit.
    TooLarge {
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// More candidates than the cap; trimmed.
    OverCap {
        /// The cap.
        cap: usize,
    },
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::Hidden => f.write_str("hidden name"),
            SkipReason::ReadOnly => f.write_str("read-only tree"),
            SkipReason::NotRegular { kind } => write!(f, "not a regular file ({kind})"),
            SkipReason::InvalidName => f.write_str("name is not a valid workspace path"),
            SkipReason::Unreadable { error } => write!(f, "unreadable: {error}"),
            SkipReason::Empty => f.write_str("empty file"),
            SkipReason::TooLarge { size, limit } => {
                write!(f, "{size} bytes is over the {limit}-byte limit")
            }
            SkipReason::OverCap { cap } => write!(f, "over the {cap}-file cap"),
        }
    }
}

/// An entry that was not harvested, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// Workspace-relative path as text (lossy for non-UTF-8 names).
    pub path: String,
    /// Why.
    #[serde(flatten)]
    pub reason: SkipReason,
}

/// What the walk found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Walk {
    /// Files to store, in walk (lexical) order.
    pub candidates: Vec<Candidate>,
    /// Everything left out, with the reason.
    pub skipped: Vec<Skipped>,
}

fn kind_of(ft: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_symlink() {
        "symlink"
    } else if ft.is_fifo() {
        "fifo"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_block_device() || ft.is_char_device() {
        "device"
    } else {
        "other"
    }
}

/// Walks `scratch` in lexical order and returns the candidates plus every
/// skipped entry with its reason.
///
/// Dot-prefixed names are skipped and never descended into (so nothing
/// under [`METADATA_DIR`](korvus_workspace::METADATA_DIR) is harvested);
/// entries under one of `skip_prefixes` (from
/// [`korvus_workspace::read_only_prefixes`]) are pruned; symlinks are never followed;
/// FIFOs, sockets and devices are skipped without being opened; an
/// unreadable subtree is skipped and the walk goes on. Sizes come from
/// `lstat`; empty and over-size files are left to the persist phase, which
/// re-checks the size of what it actually reads.
///
/// Blocking: call it from `spawn_blocking` in async code.
pub(crate) fn harvest_candidates(scratch: &Path, skip_prefixes: &[WorkspacePath]) -> Walk {
    let mut walk = Walk::default();
    let mut entries = WalkDir::new(scratch)
        .min_depth(1)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter();
    while let Some(next) = entries.next() {
        let entry = match next {
            Ok(entry) => entry,
            Err(err) => {
                let path = err
                    .path()
                    .and_then(|p| p.strip_prefix(scratch).ok())
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                walk.skipped.push(Skipped {
                    path,
                    reason: SkipReason::Unreadable {
                        error: err.to_string(),
                    },
                });
                continue;
            }
        };
        let rel = entry.path().strip_prefix(scratch).unwrap_or(entry.path());
        let text = rel.to_string_lossy().into_owned();
        let is_dir = entry.file_type().is_dir();
        let mut skip = |reason| {
            walk.skipped.push(Skipped {
                path: text.clone(),
                reason,
            })
        };
        if entry.file_name().as_encoded_bytes().first() == Some(&b'.') {
            skip(SkipReason::Hidden);
            if is_dir {
                entries.skip_current_dir();
            }
            continue;
        }
        let Some(path) = rel.to_str().and_then(|s| WorkspacePath::new(s).ok()) else {
            skip(SkipReason::InvalidName);
            if is_dir {
                entries.skip_current_dir();
            }
            continue;
        };
        if skip_prefixes.iter().any(|p| path.is_under(p)) {
            skip(SkipReason::ReadOnly);
            if is_dir {
                entries.skip_current_dir();
            }
            continue;
        }
        let ft = entry.file_type();
        if is_dir {
            continue;
        }
        if !ft.is_file() {
            skip(SkipReason::NotRegular {
                kind: kind_of(&ft).to_owned(),
            });
            continue;
        }
        match entry.metadata() {
            Ok(md) => walk.candidates.push(Candidate {
                path,
                size: md.len(),
            }),
            Err(err) => skip(SkipReason::Unreadable {
                error: err.to_string(),
            }),
        }
    }
    walk
}

/// Moves empty files and files over `max_bytes` (by their walked size) from
/// the candidates to the skipped list, so they do not take places under the
/// cap. The persist phase re-checks the size of what it actually reads.
///
/// The root [`REPORT_FILE`](korvus_workspace::REPORT_FILE) is always kept,
/// whatever its size: it has its own limit
/// ([`PersistConfig::report_max_bytes`](crate::PersistConfig::report_max_bytes)),
/// and an empty or over-size report is an outcome of its own
/// ([`ReportFile`](crate::ReportFile)), decided by the persist phase.
pub(crate) fn apply_size_limits(walk: &mut Walk, max_bytes: u64) {
    let (keep, drop): (Vec<Candidate>, Vec<Candidate>) = walk
        .candidates
        .drain(..)
        .partition(|c| c.path.as_str() == REPORT_FILE || (c.size > 0 && c.size <= max_bytes));
    walk.candidates = keep;
    walk.skipped.extend(drop.into_iter().map(|c| Skipped {
        path: c.path.as_str().to_owned(),
        reason: if c.size == 0 {
            SkipReason::Empty
        } else {
            SkipReason::TooLarge {
                size: c.size,
                limit: max_bytes,
            }
        },
    }));
}

/// Trims `walk` to at most `cap` candidates, keeping walk order, and always
/// keeps the root [`REPORT_FILE`](korvus_workspace::REPORT_FILE) — wherever it sorts — by dropping the last
/// other candidate instead. Trimmed files are recorded as
/// [`SkipReason::OverCap`].
pub(crate) fn apply_cap(walk: &mut Walk, cap: usize) {
    if walk.candidates.len() <= cap {
        return;
    }
    let report = walk
        .candidates
        .iter()
        .position(|c| c.path.as_str() == REPORT_FILE);
    let mut kept = Vec::with_capacity(cap);
    let mut trimmed = Vec::new();
    let others_room = match report {
        Some(_) if cap > 0 => cap - 1,
        _ => cap,
    };
    let mut others = 0;
    for (i, c) in walk.candidates.drain(..).enumerate() {
        if Some(i) == report && cap > 0 {
            kept.push(c);
        } else if others < others_room {
            others += 1;
            kept.push(c);
        } else {
            trimmed.push(c);
        }
    }
    walk.candidates = kept;
    walk.skipped.extend(trimmed.into_iter().map(|c| Skipped {
        path: c.path.as_str().to_owned(),
        reason: SkipReason::OverCap { cap },
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(p: &str) -> Candidate {
        Candidate {
            path: WorkspacePath::new(p).unwrap(),
            size: 1,
        }
    }

    #[test]
    fn cap_keeps_report_wherever_it_sorts() {
        let mut walk = Walk {
            candidates: vec![
                cand("a"),
                cand("b"),
                cand("c"),
                cand(REPORT_FILE),
                cand("z"),
            ],
            skipped: vec![],
        };
        apply_cap(&mut walk, 2);
        let kept: Vec<&str> = walk.candidates.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(kept, ["a", REPORT_FILE]);
        assert_eq!(walk.skipped.len(), 3);
        assert!(walk
            .skipped
            .iter()
            .all(|s| s.reason == SkipReason::OverCap { cap: 2 }));
    }

    #[test]
    fn size_limits_keep_the_root_report_whatever_its_size() {
        let sized = |p: &str, size| Candidate {
            path: WorkspacePath::new(p).unwrap(),
            size,
        };
        let mut walk = Walk {
            candidates: vec![
                sized("empty.txt", 0),
                sized("big.txt", 11),
                sized("ok.txt", 10),
                sized(REPORT_FILE, 0),
                sized("sub/report.md", 11),
            ],
            skipped: vec![],
        };
        apply_size_limits(&mut walk, 10);
        let kept: Vec<&str> = walk.candidates.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(kept, ["ok.txt", REPORT_FILE]);
        let left: Vec<&str> = walk.skipped.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(left, ["empty.txt", "big.txt", "sub/report.md"]);
    }

    #[test]
    fn cap_does_nothing_under_the_limit_and_nested_report_is_not_special() {
        let mut walk = Walk {
            candidates: vec![cand("a"), cand("sub/report.md")],
            skipped: vec![],
        };
        apply_cap(&mut walk, 2);
        assert_eq!(walk.candidates.len(), 2);
        apply_cap(&mut walk, 1);
        assert_eq!(walk.candidates[0].path.as_str(), "a");
    }
}

#[cfg(test)]
mod hostile_workspaces {
    //! The walk over hostile workspaces: every skip counted with its
    //! reason, read-only prefixes pruned, unreadable subtrees passed over,
    //! the cap.

    use std::path::Path;

    use korvus_testkit::fixtures::HostileWorkspace;

    use super::*;

    fn write(root: &Path, rel: &str, bytes: &[u8]) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    #[test]
    fn hostile_workspace_skips_are_counted_with_reasons() {
        let scratch = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let layout = HostileWorkspace::new()
            .with_many_files(10_000)
            .build(scratch.path(), outside.path());
        let mut walk = harvest_candidates(scratch.path(), &[]);
        let found: Vec<&str> = walk.candidates.iter().map(|c| c.path.as_str()).collect();
        // Every regular file is a candidate (empty and over-size ones too:
        // the persist phase skips those after reading).
        for rel in &layout.regular {
            assert!(found.contains(&rel.as_str()), "{rel} missing");
        }
        assert!(found.contains(&"empty.txt") && found.contains(&"big.bin"));
        assert_eq!(found.len(), layout.regular.len() + 2);
        let mut sorted = found.clone();
        sorted.sort();
        assert_eq!(found, sorted, "lexical order");
        let reason_of = |p: &str| {
            walk.skipped
                .iter()
                .find(|s| s.path == p)
                .map(|s| s.reason.clone())
                .unwrap_or_else(|| panic!("{p} not reported as skipped"))
        };
        for link in &layout.symlinks {
            assert_eq!(
                reason_of(link),
                SkipReason::NotRegular {
                    kind: "symlink".into()
                }
            );
        }
        assert_eq!(
            reason_of(&layout.fifo),
            SkipReason::NotRegular {
                kind: "fifo".into()
            }
        );
        for hidden in &layout.hidden {
            assert_eq!(reason_of(hidden), SkipReason::Hidden);
        }
        assert_eq!(reason_of(".env"), SkipReason::Hidden);
        assert!(
            !walk.skipped.iter().any(|s| s.path.starts_with(".git/")),
            "never descended"
        );
        assert_eq!(reason_of("new\nline.txt"), SkipReason::InvalidName);
        assert_eq!(
            walk.skipped
                .iter()
                .filter(|s| s.reason == SkipReason::InvalidName)
                .count(),
            2,
            "the non-UTF-8 name too"
        );
        assert!(found.contains(&layout.deep.as_str()), "40-level deep path");

        apply_cap(&mut walk, 64);
        assert_eq!(walk.candidates.len(), 64);
        assert!(walk
            .candidates
            .iter()
            .any(|c| c.path.as_str() == "report.md"));
        let over = walk
            .skipped
            .iter()
            .filter(|s| s.reason == SkipReason::OverCap { cap: 64 })
            .count();
        assert_eq!(over, layout.regular.len() + 2 - 64);
    }

    #[test]
    fn read_only_prefixes_are_pruned() {
        let scratch = tempfile::tempdir().unwrap();
        write(scratch.path(), "skills/a/SKILL.md", b"x");
        write(scratch.path(), "context/1-in.md", b"x");
        write(scratch.path(), "skillsets/kept.md", b"x");
        let prefixes = korvus_workspace::read_only_prefixes(&korvus_workspace::default_trees());
        let walk = harvest_candidates(scratch.path(), &prefixes);
        let found: Vec<&str> = walk.candidates.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(found, ["skillsets/kept.md"]);
        let ro: Vec<&str> = walk
            .skipped
            .iter()
            .filter(|s| s.reason == SkipReason::ReadOnly)
            .map(|s| s.path.as_str())
            .collect();
        assert_eq!(ro, ["context", "skills"]);
    }

    #[test]
    fn unreadable_subtree_is_skipped_and_the_walk_goes_on() {
        use std::os::unix::fs::PermissionsExt;
        let scratch = tempfile::tempdir().unwrap();
        write(scratch.path(), "locked/inner.txt", b"x");
        write(scratch.path(), "open.txt", b"x");
        let locked = scratch.path().join("locked");
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        let walk = harvest_candidates(scratch.path(), &[]);
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
        let found: Vec<&str> = walk.candidates.iter().map(|c| c.path.as_str()).collect();
        assert!(found.contains(&"open.txt"));
        if is_root() {
            // Root ignores mode bits: the subtree is readable, so it is harvested.
            assert!(found.contains(&"locked/inner.txt"));
        } else {
            assert!(walk
                .skipped
                .iter()
                .any(|s| matches!(s.reason, SkipReason::Unreadable { .. })));
        }
    }

    fn is_root() -> bool {
        std::process::Command::new("id")
            .arg("-u")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
            .unwrap_or(false)
    }
}
