//! SkillCatalog from seeded `skills/*/SKILL.md` front matter.

use std::fs;
use std::os::unix::fs::symlink;

use korvus_store::WorkspaceRef;
use korvus_workspace::{
    GitSeeder, LoadSkills, SeedOutcome, SeedSkipReason, Seeder, SkillCatalog, WorkspaceError,
};
use tempfile::TempDir;

use crate::support::{scratch, TestRepo};

#[tokio::test]
async fn the_catalog_of_a_seeded_commit_is_its_skills() {
    let repo = TestRepo::new();
    let first = scratch().await;
    let seeder = GitSeeder::default();
    let outcome = seeder.seed(&first.dir, Some(&repo.pin(&repo.first))).await;
    let catalog = SkillCatalog::after_seeding(first.dir.path(), outcome.as_ref())
        .await
        .unwrap();
    assert_eq!(catalog.skills().len(), 1);
    let disk = catalog.get("disk-full").unwrap();
    assert_eq!(disk.description, "Find what filled a disk.");
    assert_eq!(disk.path.as_str(), "skills/disk/SKILL.md");
    assert!(catalog.skipped().is_empty());

    let second = scratch().await;
    let outcome = seeder
        .seed(&second.dir, Some(&repo.pin(&repo.second)))
        .await;
    let catalog = SkillCatalog::after_seeding(second.dir.path(), outcome.as_ref())
        .await
        .unwrap();
    let names: Vec<&str> = catalog.skills().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["disk-full", "net"]);
    assert_eq!(
        catalog.get("disk-full").unwrap().description,
        "Find what filled a disk, v2."
    );
    // A folded YAML scalar is read as YAML, not as text.
    assert_eq!(
        catalog.get("net").unwrap().description,
        "Debug the network."
    );
}

#[tokio::test]
async fn malformed_skill_files_are_skipped_with_a_reason() {
    let tmp = TempDir::new().unwrap();
    let skills = tmp.path().join("skills");
    let put = |dir: &str, text: &str| {
        fs::create_dir_all(skills.join(dir)).unwrap();
        fs::write(skills.join(dir).join("SKILL.md"), text).unwrap();
    };
    put(
        "a-good",
        "---\nname: good\ndescription: fine\nextra: ignored\n---\nbody\n",
    );
    put("b-no-front-matter", "# just markdown\n");
    put("c-unclosed", "---\nname: x\ndescription: y\n");
    put("d-bad-yaml", "---\nname: [unclosed\ndescription: y\n---\n");
    put("e-no-description", "---\nname: lonely\n---\n");
    put("f-blank-name", "---\nname: '  '\ndescription: y\n---\n");
    put("g-duplicate", "---\nname: good\ndescription: again\n---\n");
    put("h-not-a-map", "---\n- a\n- b\n---\n");
    fs::create_dir_all(skills.join("i-empty-dir")).unwrap();
    fs::write(skills.join("README.md"), "not a skill dir").unwrap();
    let outside = tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(
        outside.join("SKILL.md"),
        "---\nname: planted\ndescription: via symlink\n---\n",
    )
    .unwrap();
    symlink(&outside, skills.join("j-link")).unwrap();

    let catalog = SkillCatalog::load(tmp.path()).await.unwrap();
    let names: Vec<&str> = catalog.skills().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["good"]);
    let skipped: Vec<(&str, &str)> = catalog
        .skipped()
        .iter()
        .map(|s| (s.path.as_str(), s.reason.as_str()))
        .collect();
    let paths: Vec<&str> = skipped.iter().map(|(p, _)| *p).collect();
    assert_eq!(
        paths,
        [
            "skills/b-no-front-matter/SKILL.md",
            "skills/c-unclosed/SKILL.md",
            "skills/d-bad-yaml/SKILL.md",
            "skills/e-no-description/SKILL.md",
            "skills/f-blank-name/SKILL.md",
            "skills/g-duplicate/SKILL.md",
            "skills/h-not-a-map/SKILL.md",
            "skills/i-empty-dir/SKILL.md",
            "skills/j-link",
        ]
    );
    for (path, reason) in &skipped {
        assert!(!reason.is_empty(), "{path}");
    }
    assert!(skipped[0].1.contains("front matter"), "{:?}", skipped[0]);
    assert!(skipped[2].1.contains("YAML"), "{:?}", skipped[2]);
    assert!(skipped[3].1.contains("description"), "{:?}", skipped[3]);
    assert!(skipped[5].1.contains("duplicate"), "{:?}", skipped[5]);
}

#[tokio::test]
async fn a_pinned_session_whose_seeding_was_skipped_or_failed_gets_no_skills() {
    let repo = TestRepo::new();
    let s = scratch().await;
    // Skills exist in the dir (say, planted), but seeding did not put them there.
    fs::create_dir_all(s.dir.path().join("skills/x")).unwrap();
    fs::write(
        s.dir.path().join("skills/x/SKILL.md"),
        "---\nname: planted\ndescription: not seeded\n---\n",
    )
    .unwrap();
    assert_eq!(
        SkillCatalog::load(s.dir.path())
            .await
            .unwrap()
            .skills()
            .len(),
        1
    );

    let skipped = SeedOutcome::Skipped(SeedSkipReason::NoRepository);
    let catalog = SkillCatalog::after_seeding(s.dir.path(), Ok(&skipped))
        .await
        .unwrap();
    assert!(catalog.is_empty());

    let pin = WorkspaceRef {
        repo: repo.path.to_string_lossy().into_owned(),
        commit: "no-such-commit".into(),
    };
    let failed: Result<SeedOutcome, WorkspaceError> = GitSeeder::default()
        .seed(&scratch().await.dir, Some(&pin))
        .await;
    assert!(failed.is_err());
    let catalog = SkillCatalog::after_seeding(s.dir.path(), failed.as_ref())
        .await
        .unwrap();
    assert!(catalog.is_empty());

    // Seeded, but without the skills tree: no skills either.
    let other = scratch().await;
    let docs_only = GitSeeder::default()
        .with_trees(vec![korvus_workspace::tree_prefix("docs").unwrap()])
        .seed(&other.dir, Some(&repo.pin(&repo.first)))
        .await;
    let catalog = SkillCatalog::after_seeding(s.dir.path(), docs_only.as_ref())
        .await
        .unwrap();
    assert!(catalog.is_empty());
}

#[tokio::test]
async fn a_dir_without_skills_has_an_empty_catalog() {
    let tmp = TempDir::new().unwrap();
    let catalog = SkillCatalog::load(tmp.path()).await.unwrap();
    assert!(catalog.is_empty() && catalog.skipped().is_empty());
    assert_eq!(catalog, SkillCatalog::default());
}
