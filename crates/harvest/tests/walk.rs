//! The walk over hostile workspaces: every skip counted with its reason,
//! read-only prefixes pruned, unreadable subtrees passed over, the cap.

use korvus_harvest::{apply_cap, harvest_candidates, SkipReason};
use korvus_testkit::fixtures::HostileWorkspace;

use crate::support::write;

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
    if nix_is_root() {
        // Root ignores mode bits: the subtree is readable, so it is harvested.
        assert!(found.contains(&"locked/inner.txt"));
    } else {
        assert!(walk
            .skipped
            .iter()
            .any(|s| matches!(s.reason, SkipReason::Unreadable { .. })));
    }
}

fn nix_is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}
