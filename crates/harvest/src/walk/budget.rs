//! The byte budget of a revision: what its checkpoints and its landing may
//! store together ([`PersistConfig::max_stored_bytes`](crate::PersistConfig::max_stored_bytes)).
//!
//! Every walk admits its candidates in walk order — the root `report.md`
//! first — while their logical sizes (a sparse file counts what it reads
//! as, not the blocks it holds) stay within the budget; the rest are
//! skipped and listed as over it. A file that is another path of an inode
//! already admitted (a hard link) is skipped and listed too: its bytes are
//! stored once. So a scratch dir whose allocated size is small (sparse
//! files, links, a fast writer the disk poll has not seen yet) can never
//! put more into the blob store than the budget.

use std::collections::HashMap;

use korvus_workspace::REPORT_FILE;

use super::{SkipReason, Skipped, Walk};

/// Keeps the candidates of `walk` that fit `budget` bytes together and
/// are not a second path of an inode already kept; records the others.
pub(crate) fn apply_budget(walk: &mut Walk, budget: u64) {
    let mut used = 0u64;
    let mut inodes: HashMap<u64, usize> = HashMap::new();
    let candidates = std::mem::take(&mut walk.candidates);
    let mut verdicts: Vec<Option<SkipReason>> = vec![None; candidates.len()];
    // The report first: it is what the revision is for. Then walk order.
    let report = candidates
        .iter()
        .position(|c| c.path.as_str() == REPORT_FILE);
    let order = report
        .into_iter()
        .chain((0..candidates.len()).filter(|i| Some(*i) != report));
    for i in order {
        let c = &candidates[i];
        let ino = c.stat.as_ref().map(|s| s.ino).filter(|i| *i != 0);
        if let Some(&first) = ino.and_then(|n| inodes.get(&n)) {
            let of = candidates[first].path.as_str().to_owned();
            verdicts[i] = Some(SkipReason::HardLink { of });
        } else if used.saturating_add(c.size) > budget {
            verdicts[i] = Some(SkipReason::OverBudget {
                size: c.size,
                limit: budget,
            });
        } else {
            used += c.size;
            if let Some(n) = ino {
                inodes.insert(n, i);
            }
        }
    }
    for (c, verdict) in candidates.into_iter().zip(verdicts) {
        match verdict {
            None => walk.candidates.push(c),
            Some(reason) => walk.skip(Skipped {
                path: c.path.as_str().to_owned(),
                reason,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{harvest_candidates_admitting, WalkLimits};
    use super::*;

    /// A scratch dir whose allocated size is tiny: two sparse files of a
    /// GiB each, a 4 MiB file with ten hard links, and a report that sorts
    /// last. Under an 8 MiB budget the report is kept first, the 4 MiB file
    /// once, the links and the sparse files listed, never stored.
    #[test]
    fn sparse_files_and_hard_links_count_what_they_would_store() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for name in ["a-sparse", "b-sparse"] {
            let f = std::fs::File::create(root.join(name)).unwrap();
            f.set_len(1 << 30).unwrap();
        }
        std::fs::write(root.join("data.bin"), vec![7u8; 4 << 20]).unwrap();
        for n in 0..10 {
            std::fs::hard_link(root.join("data.bin"), root.join(format!("link-{n}"))).unwrap();
        }
        std::fs::write(root.join("zz-notes.txt"), vec![b'n'; 3 << 20]).unwrap();
        std::fs::write(root.join(REPORT_FILE), "# found\n").unwrap();
        let limits = WalkLimits {
            max_bytes: u64::MAX,
            max_files: usize::MAX,
        };
        let mut walk = harvest_candidates_admitting(root, &[], limits, &mut |_| true);
        apply_budget(&mut walk, 8 << 20);
        let kept: Vec<&str> = walk.candidates.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(kept, ["data.bin", REPORT_FILE, "zz-notes.txt"]);
        let stored: u64 = walk.candidates.iter().map(|c| c.size).sum();
        assert!(stored <= 8 << 20, "{stored}");
        let reason = |p: &str| {
            walk.skipped
                .iter()
                .find(|s| s.path == p)
                .map(|s| s.reason.clone())
        };
        assert_eq!(
            reason("a-sparse"),
            Some(SkipReason::OverBudget {
                size: 1 << 30,
                limit: 8 << 20
            })
        );
        assert_eq!(
            reason("link-3"),
            Some(SkipReason::HardLink {
                of: "data.bin".into()
            })
        );
        // The report is kept first even when a file before it in walk
        // order would fill the budget; what still fits after is kept.
        let mut walk = harvest_candidates_admitting(root, &[], limits, &mut |_| true);
        apply_budget(&mut walk, 4 << 20);
        let kept: Vec<&str> = walk.candidates.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(kept, [REPORT_FILE, "zz-notes.txt"], "{:?}", walk.skipped);
    }
}
