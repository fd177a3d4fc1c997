//! The harvest walk: which files of a scratch dir are worth storing.

use std::fmt;
use std::path::Path;

use serde::Serialize;

use korvus_workspace::{WorkspacePath, REPORT_FILE};

pub(crate) use self::budget::apply_budget;
use self::tree::Item;
use crate::stat::FileStat;

mod budget;
mod tree;

/// Default cap on stored files per harvest.
pub const DEFAULT_MAX_FILES: usize = 64;

/// A file the walk found worth storing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Workspace-relative path.
    pub path: WorkspacePath,
    /// Size when walked (the file is re-checked when read).
    pub size: u64,
    /// Its `lstat` when walked: how a checkpoint tells a file it stored
    /// from one that changed. `None` where no stat was taken.
    pub stat: Option<FileStat>,
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
    /// Storing it would take the revision past its byte budget
    /// ([`PersistConfig::max_stored_bytes`](crate::PersistConfig::max_stored_bytes)):
    /// what it stores already, this file's logical size included, is over
    /// the limit.
    OverBudget {
        /// Its logical size.
        size: u64,
        /// The revision's budget.
        limit: u64,
    },
    /// Another path of a file already stored (a hard link): its bytes are
    /// stored once, under that path.
    HardLink {
        /// The path stored.
        of: String,
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
            SkipReason::OverBudget { size, limit } => write!(
                f,
                "{size} bytes would take the revision past its {limit}-byte limit"
            ),
            SkipReason::HardLink { of } => write!(f, "a hard link of {of}, stored once"),
        }
    }
}

/// An entry that was not harvested, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct Skipped {
    /// Workspace-relative path as text (lossy for non-UTF-8 names).
    pub path: String,
    /// Why.
    #[serde(flatten)]
    pub reason: SkipReason,
}

/// Skipped entries a harvest lists one by one, with their reasons; past it
/// they are only counted ([`PersistOutcome::skipped_unlisted`](crate::PersistOutcome::skipped_unlisted)),
/// so a scratch dir of millions of entries costs the walk the same memory
/// as one of a thousand.
pub const MAX_LISTED_SKIPS: usize = 1_000;

/// What the walk found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Walk {
    /// Files to store, in walk (lexical) order.
    pub candidates: Vec<Candidate>,
    /// Entries left out, with the reason: the first [`MAX_LISTED_SKIPS`].
    pub skipped: Vec<Skipped>,
    /// Entries left out past [`MAX_LISTED_SKIPS`], counted only.
    pub unlisted: u64,
}

impl Walk {
    /// Records a skipped entry: listed while there is room, else counted.
    pub(crate) fn skip(&mut self, skipped: Skipped) {
        if self.skipped.len() < MAX_LISTED_SKIPS {
            self.skipped.push(skipped);
        } else {
            self.unlisted += 1;
        }
    }
}

/// The bounds a walk applies while it goes, so what it holds stays small
/// whatever the scratch dir holds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WalkLimits {
    /// Files over this size are skipped (not the root `report.md`).
    pub max_bytes: u64,
    /// Files kept besides the root `report.md`; later ones are over the cap.
    pub max_files: usize,
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
/// Blocking: call it from `spawn_blocking` in async code. The phases call
/// [`harvest_candidates_admitting`]; this first-come cap is what its tests
/// pin.
#[cfg(test)]
pub(crate) fn harvest_candidates(
    scratch: &Path,
    skip_prefixes: &[WorkspacePath],
    limits: WalkLimits,
) -> Walk {
    let mut others = 0usize;
    let mut admit = |_: &WorkspacePath| {
        let room = others < limits.max_files;
        others += usize::from(room);
        room
    };
    harvest_candidates_admitting(scratch, skip_prefixes, limits, &mut admit)
}

/// [`harvest_candidates`] with the cap decided by `admit`: a file (other
/// than the root report, within the size limits) is kept when `admit`
/// says so, else skipped as over `limits.max_files`. A checkpoint admits
/// the paths it already holds and new ones while the revision has room.
pub(crate) fn harvest_candidates_admitting(
    scratch: &Path,
    skip_prefixes: &[WorkspacePath],
    limits: WalkLimits,
    admit: &mut dyn FnMut(&WorkspacePath) -> bool,
) -> Walk {
    let mut walk = Walk::default();
    // The listed items of each directory being walked, innermost last.
    let mut stack = vec![tree::list(scratch, None, skip_prefixes).into_iter()];
    while let Some(items) = stack.last_mut() {
        match items.next() {
            None => {
                stack.pop();
            }
            Some(Item::Skip(skipped)) => walk.skip(skipped),
            Some(Item::File(file)) => walk.consider(file, limits, admit),
            Some(Item::Dir(dir)) => {
                stack.push(tree::list(scratch, Some(&dir), skip_prefixes).into_iter());
            }
        }
    }
    walk
}

impl Walk {
    /// Keeps a regular file as a candidate or skips it, applying the size
    /// limits and the cap as the walk goes (as `apply_size_limits` and
    /// `apply_cap` would after it), so the walk never holds more than the
    /// cap's worth of candidates. `admit` decides the cap.
    fn consider(
        &mut self,
        file: Candidate,
        limits: WalkLimits,
        admit: &mut dyn FnMut(&WorkspacePath) -> bool,
    ) {
        let reason = if file.path.as_str() == REPORT_FILE {
            None
        } else if file.size == 0 {
            Some(SkipReason::Empty)
        } else if file.size > limits.max_bytes {
            Some(SkipReason::TooLarge {
                size: file.size,
                limit: limits.max_bytes,
            })
        } else if admit(&file.path) {
            None
        } else {
            Some(SkipReason::OverCap {
                cap: limits.max_files,
            })
        };
        match reason {
            None => self.candidates.push(file),
            Some(reason) => self.skip(Skipped {
                path: file.path.as_str().to_owned(),
                reason,
            }),
        }
    }
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
    let keeps =
        |c: &Candidate| c.path.as_str() == REPORT_FILE || (c.size > 0 && c.size <= max_bytes);
    // After a walk that applied the limits as it went, nothing moves.
    if walk.candidates.iter().all(keeps) {
        return;
    }
    let (keep, drop): (Vec<Candidate>, Vec<Candidate>) = walk.candidates.drain(..).partition(keeps);
    walk.candidates = keep;
    for c in drop {
        walk.skip(Skipped {
            path: c.path.as_str().to_owned(),
            reason: if c.size == 0 {
                SkipReason::Empty
            } else {
                SkipReason::TooLarge {
                    size: c.size,
                    limit: max_bytes,
                }
            },
        });
    }
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
    for c in trimmed {
        walk.skip(Skipped {
            path: c.path.as_str().to_owned(),
            reason: SkipReason::OverCap { cap },
        });
    }
}

#[cfg(test)]
mod tests;
