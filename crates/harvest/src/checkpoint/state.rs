//! What a run's checkpoints stored, path by path: the memory that lets the
//! next checkpoint judge a file by its `stat` and the landing promote it.

use std::collections::{btree_map, BTreeMap};
use std::iter::Peekable;
use std::ops::Bound;
use std::sync::Arc;

use korvus_blob::Sha256Digest;
use korvus_store::{ArtifactId, ArtifactKind, NewArtifact};
use korvus_workspace::{RestoredFile, WorkspacePath, REPORT_FILE};

use crate::agent_state::is_agent_state;
use crate::config::PersistRequest;
use crate::stat::FileStat;
use crate::walk::Candidate;

/// The checkpoint row and bytes of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Version {
    /// The checkpoint row.
    pub artifact: ArtifactId,
    /// Where its bytes are.
    pub blob_key: String,
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
    /// Their size.
    pub size: u64,
    /// The MIME type they were stored with.
    pub content_type: String,
    /// Only the bytes up to the size seen when its read began (a file that
    /// never stopped changing).
    pub torn: bool,
}

/// What this run knows of one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Known {
    /// The `stat` of the bytes judged.
    pub stat: FileStat,
    /// Whether `stat` cannot vouch for them ([`FileStat::racy`]): the next
    /// judgement hashes the file.
    pub racy: bool,
    /// Its checkpoint; `None` when it equals its restored twin, which is
    /// stored already (an earlier revision's artifact).
    pub version: Option<Version>,
}

impl Known {
    /// The digest the file's bytes had when judged.
    pub(crate) fn digest(&self, twin: Option<&RestoredFile>) -> Option<Sha256Digest> {
        match &self.version {
            Some(v) => v.sha256.parse().ok(),
            None => twin.map(|t| t.sha256),
        }
    }
}

/// Every path a run's checkpoints judged, and how often each file was
/// found changing while it was read. Shared with the blocking walk through
/// an `Arc`, changed only between walks.
#[derive(Debug, Clone, Default)]
pub(crate) struct CheckpointState {
    /// By path.
    pub known: Arc<BTreeMap<WorkspacePath, Known>>,
    /// Consecutive checkpoints that found the file changing while read.
    pub skips: BTreeMap<WorkspacePath, u32>,
}

/// Whether a path counts against the file cap: the root report and an
/// agent's kept state are outside it, as in the landing's walk.
pub(crate) fn counts_for_cap(path: &WorkspacePath) -> bool {
    path.as_str() != REPORT_FILE && !is_agent_state(path.as_str())
}

/// The kind a file's final row has when the run lands (or when a takeover
/// lands its last checkpoint): `report` for the root `report.md`,
/// `agent_state` for the agent's kept thread, else `agent_output`.
pub fn final_kind(path: &str) -> ArtifactKind {
    if path == REPORT_FILE {
        ArtifactKind::Report
    } else if is_agent_state(path) {
        ArtifactKind::AgentState
    } else {
        ArtifactKind::AgentOutput
    }
}

/// The cap decision of a walk that already holds `known`: a known path is
/// admitted (it holds its place), a new one while the revision has room
/// under `max_files`.
pub(crate) fn admission(
    known: &BTreeMap<WorkspacePath, Known>,
    max_files: usize,
) -> impl FnMut(&WorkspacePath) -> bool + '_ {
    let held = known.keys().filter(|p| counts_for_cap(p)).count();
    let mut fresh = 0usize;
    let mut lookup = InOrder::new(known);
    move |path| {
        if lookup.get(path).is_some() {
            return true;
        }
        let room = held + fresh < max_files;
        fresh += usize::from(room);
        room
    }
}

/// How a walked file stands against what the run knows of it.
pub(crate) enum Standing<'a> {
    /// Known at this very stat, and the stat vouches for it.
    Unchanged(&'a Known),
    /// Known at this stat, but racy: hash it to know.
    Verify(&'a Known),
    /// New, or changed since it was judged.
    Changed,
}

/// Where `candidate` stands against what the run knows of its path.
pub(crate) fn standing<'a>(known: Option<&'a Known>, candidate: &Candidate) -> Standing<'a> {
    match known {
        Some(k) if candidate.stat == Some(k.stat) && !k.racy => Standing::Unchanged(k),
        Some(k) if candidate.stat == Some(k.stat) => Standing::Verify(k),
        _ => Standing::Changed,
    }
}

/// Lookups in a map of paths for paths that mostly come in its order, as
/// a walk's do: each is one comparison with the entry after the last one
/// found, a search of the map only where the walk's order and the map's
/// part (a name that sorts before `/` beside a directory, such as `a.txt`
/// beside `a/`), for a new path, or after a path that is gone.
pub(crate) struct InOrder<'a, V> {
    map: &'a BTreeMap<WorkspacePath, V>,
    next: Peekable<btree_map::Range<'a, WorkspacePath, V>>,
}

impl<'a, V> InOrder<'a, V> {
    /// Lookups in `map`, from its first path.
    pub(crate) fn new(map: &'a BTreeMap<WorkspacePath, V>) -> Self {
        Self {
            map,
            next: map.range::<WorkspacePath, _>(..).peekable(),
        }
    }

    /// What `map` holds for `path`.
    pub(crate) fn get(&mut self, path: &WorkspacePath) -> Option<&'a V> {
        if let Some(&(next, value)) = self.next.peek() {
            if next == path {
                self.next.next();
                return Some(value);
            }
        }
        let (key, value) = self.map.get_key_value(path)?;
        self.next = self
            .map
            .range::<WorkspacePath, _>((Bound::Excluded(key), Bound::Unbounded))
            .peekable();
        Some(value)
    }
}

/// The final row of a file whose checkpoint is promoted: a new id, the
/// final kind, the checkpoint's bytes (same key, digest and size).
pub(crate) fn promoted_row(
    request: &PersistRequest,
    path: &WorkspacePath,
    version: &Version,
) -> NewArtifact {
    NewArtifact {
        id: ArtifactId::new(),
        incident_id: request.incident,
        session_id: request.session,
        kind: final_kind(path.as_str()),
        path: path.as_str().to_owned(),
        blob_key: version.blob_key.clone(),
        content_type: version.content_type.clone(),
        size_bytes: version.size,
        sha256: version.sha256.clone(),
        revision: request.revision,
        fence: request.fence,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Known {
        Known {
            stat: FileStat {
                size: 1,
                mtime: (1, 0),
                ctime: (1, 0),
                ino: 7,
            },
            racy: false,
            version: None,
        }
    }

    #[test]
    fn known_paths_keep_their_place_and_new_ones_fill_the_room() {
        let mut map = BTreeMap::new();
        for p in ["a", "b", REPORT_FILE, ".korvus/agent/state.json"] {
            map.insert(WorkspacePath::new(p).unwrap(), known());
        }
        let mut admit = admission(&map, 3);
        let path = |p: &str| WorkspacePath::new(p).unwrap();
        assert!(admit(&path("b")));
        assert!(admit(&path("c")), "two held, one place left");
        assert!(!admit(&path("d")));
        assert!(admit(&path("a")), "a held path is never over the cap");
        assert_eq!(final_kind(REPORT_FILE), ArtifactKind::Report);
        assert_eq!(
            final_kind(".korvus/agent/thread.jsonl"),
            ArtifactKind::AgentState
        );
        assert_eq!(final_kind("x.txt"), ArtifactKind::AgentOutput);
    }

    #[test]
    fn lookups_in_order_find_what_the_map_holds_in_any_order() {
        let path = |p: &str| WorkspacePath::new(p).unwrap();
        let map: BTreeMap<WorkspacePath, u32> = ["a.txt", "a/x", "b", "c", "d"]
            .iter()
            .zip(1..)
            .map(|(p, n)| (path(p), n))
            .collect();
        let mut lookup = InOrder::new(&map);
        // A walk's order (`a/` before `a.txt`), a path gone (`c`) and a new
        // one (`bb`), then back and forth.
        let walked = ["a/x", "a.txt", "b", "bb", "d", "a/x", "zz", "b", "c"];
        let found: Vec<Option<u32>> = walked
            .iter()
            .map(|p| lookup.get(&path(p)).copied())
            .collect();
        let expected: Vec<Option<u32>> =
            walked.iter().map(|p| map.get(&path(p)).copied()).collect();
        assert_eq!(found, expected);
        assert_eq!(
            InOrder::new(&BTreeMap::<WorkspacePath, u32>::new()).get(&path("a")),
            None
        );
    }
}
