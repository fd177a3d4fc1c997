//! Tests of the harvest walk: what it keeps, skips and bounds.

use super::*;

/// Limits that keep every non-empty file (as the walk did before it
/// bounded itself).
const OPEN: WalkLimits = WalkLimits {
    max_bytes: u64::MAX,
    max_files: usize::MAX,
};

fn cand(p: &str) -> Candidate {
    Candidate {
        path: WorkspacePath::new(p).unwrap(),
        size: 1,
        stat: None,
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
        unlisted: 0,
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
        stat: None,
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
        unlisted: 0,
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
        unlisted: 0,
    };
    apply_cap(&mut walk, 2);
    assert_eq!(walk.candidates.len(), 2);
    apply_cap(&mut walk, 1);
    assert_eq!(walk.candidates[0].path.as_str(), "a");
}

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
        let mut walk = harvest_candidates(scratch.path(), &[], OPEN);
        let found: Vec<&str> = walk.candidates.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(walk.unlisted, 0, "a few skips are all listed");
        // Every non-empty regular file is a candidate (an over-size one too
        // under these limits); an empty one is skipped as it is seen.
        for rel in &layout.regular {
            assert!(found.contains(&rel.as_str()), "{rel} missing");
        }
        assert!(!found.contains(&"empty.txt") && found.contains(&"big.bin"));
        assert_eq!(found.len(), layout.regular.len() + 1);
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
        // The listing is bounded: past MAX_LISTED_SKIPS skips are counted.
        assert_eq!(walk.skipped.len(), MAX_LISTED_SKIPS);
        assert_eq!(
            over as u64 + walk.unlisted,
            (layout.regular.len() + 1 - 64) as u64
        );
    }

    /// With the harvest's own limits the walk never holds more than the
    /// cap's worth of candidates and a bounded list of skips, whatever the
    /// scratch dir holds — and the root report is still found.
    #[test]
    fn a_walk_of_ten_thousand_files_holds_only_the_cap_and_finds_the_report() {
        let scratch = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let layout = HostileWorkspace::new()
            .with_many_files(10_000)
            .build(scratch.path(), outside.path());
        let limits = WalkLimits {
            max_bytes: 1024,
            max_files: 64,
        };
        let walk = harvest_candidates(scratch.path(), &[], limits);
        assert_eq!(walk.candidates.len(), 65, "64 files and the report");
        assert!(walk
            .candidates
            .iter()
            .any(|c| c.path.as_str() == REPORT_FILE));
        assert_eq!(walk.skipped.len(), MAX_LISTED_SKIPS);
        let seen = walk.candidates.len() as u64 + walk.skipped.len() as u64 + walk.unlisted;
        assert!(
            seen >= layout.regular.len() as u64,
            "every file was looked at: {seen} of {}",
            layout.regular.len()
        );
    }

    #[test]
    fn read_only_prefixes_are_pruned() {
        let scratch = tempfile::tempdir().unwrap();
        write(scratch.path(), "skills/a/SKILL.md", b"x");
        write(scratch.path(), "context/1-in.md", b"x");
        write(scratch.path(), "skillsets/kept.md", b"x");
        let prefixes = korvus_workspace::read_only_prefixes(&korvus_workspace::default_trees());
        let walk = harvest_candidates(scratch.path(), &prefixes, OPEN);
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
        let walk = harvest_candidates(scratch.path(), &[], OPEN);
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

mod same_as_walkdir {
    //! The walk reports what the `walkdir` walk it replaced reported (kept
    //! here as the reference): the same candidates, skips and error texts,
    //! in the same order.

    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use korvus_testkit::fixtures::HostileWorkspace;
    use walkdir::WalkDir;

    use super::*;

    /// The walk as it was, on `walkdir` sorted by file name.
    fn reference(
        scratch: &Path,
        skip_prefixes: &[WorkspacePath],
        limits: WalkLimits,
        admit: &mut dyn FnMut(&WorkspacePath) -> bool,
    ) -> Walk {
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
                    let path = err.path().and_then(|p| p.strip_prefix(scratch).ok());
                    walk.skip(Skipped {
                        path: path
                            .map(|p| p.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                        reason: SkipReason::Unreadable {
                            error: err.to_string(),
                        },
                    });
                    continue;
                }
            };
            let rel = entry.path().strip_prefix(scratch).unwrap_or(entry.path());
            let text = rel.to_string_lossy().into_owned();
            let ft = entry.file_type();
            let path = rel.to_str().and_then(|s| WorkspacePath::new(s).ok());
            let reason = if entry.file_name().as_bytes().first() == Some(&b'.') {
                Some(SkipReason::Hidden)
            } else if let Some(path) = &path {
                skip_prefixes
                    .iter()
                    .any(|p| path.is_under(p))
                    .then_some(SkipReason::ReadOnly)
            } else {
                Some(SkipReason::InvalidName)
            };
            if let Some(reason) = reason {
                walk.skip(Skipped { path: text, reason });
                if ft.is_dir() {
                    entries.skip_current_dir();
                }
                continue;
            }
            let path = path.unwrap();
            if ft.is_dir() {
                continue;
            }
            if !ft.is_file() {
                let kind = kind_of(&ft).to_owned();
                walk.skip(Skipped {
                    path: text,
                    reason: SkipReason::NotRegular { kind },
                });
                continue;
            }
            match entry.metadata() {
                Ok(md) => {
                    let stat = FileStat::of(&md);
                    let file = Candidate {
                        path,
                        size: stat.size,
                        stat: Some(stat),
                    };
                    walk.consider(file, limits, admit);
                }
                Err(err) => walk.skip(Skipped {
                    path: text,
                    reason: SkipReason::Unreadable {
                        error: err.to_string(),
                    },
                }),
            }
        }
        walk
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

    fn first(n: usize) -> impl FnMut(&WorkspacePath) -> bool {
        let mut others = 0usize;
        move |_| {
            others += 1;
            others <= n
        }
    }

    #[test]
    fn the_walk_reports_what_walkdir_reported() {
        let scratch = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = scratch.path();
        HostileWorkspace::new()
            .with_many_files(300)
            .build(root, outside.path());
        // Names that sort before `/` beside a directory of the same stem, a
        // read-only tree, a directory that is not UTF-8, one that cannot be
        // listed, and a tree of them nested.
        for rel in ["a/x.txt", "a.txt", "a-b/c.txt", "skills/s.md", "n/o/p.txt"] {
            std::fs::create_dir_all(root.join(rel).parent().unwrap()).unwrap();
            std::fs::write(root.join(rel), b"x").unwrap();
        }
        let bad = root.join(std::ffi::OsStr::from_bytes(b"dir-\xff"));
        std::fs::create_dir_all(&bad).unwrap();
        std::fs::write(bad.join("in.txt"), b"x").unwrap();
        let locked = root.join("n/locked");
        std::fs::create_dir_all(&locked).unwrap();
        std::fs::write(locked.join("in.txt"), b"x").unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).unwrap();
        let prefixes = [WorkspacePath::new("skills").unwrap()];
        let cases = [
            (OPEN, 1000),
            (OPEN, 7),
            (
                WalkLimits {
                    max_bytes: 4,
                    max_files: 64,
                },
                64,
            ),
        ];
        for (limits, cap) in cases {
            for skip in [&prefixes[..], &[]] {
                let ours = harvest_candidates_admitting(root, skip, limits, &mut first(cap));
                let theirs = reference(root, skip, limits, &mut first(cap));
                assert_eq!(ours, theirs, "{limits:?}, cap {cap}");
            }
        }
        for missing in [root.join("nowhere"), root.join("a.txt")] {
            let ours = harvest_candidates(&missing, &[], OPEN);
            assert_eq!(ours, reference(&missing, &[], OPEN, &mut first(usize::MAX)));
        }
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
}
