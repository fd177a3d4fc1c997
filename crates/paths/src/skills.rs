//! [`SkillCatalog`]: the skills a seeded workspace offers, as a run sees
//! them (korvus-workspace reads them from the scratch dir).

use crate::WorkspacePath;

/// The tree skills are read from.
pub const SKILLS_DIR: &str = "skills";

/// The file in each skill directory that describes it.
pub const SKILL_FILE: &str = "SKILL.md";

/// Largest `SKILL.md` read; a bigger one is skipped.
pub const MAX_SKILL_FILE_BYTES: u64 = 256 * 1024;

/// One skill: a directory `skills/<dir>/` with a `SKILL.md` whose YAML front
/// matter names and describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// `name` from the front matter (trimmed).
    pub name: String,
    /// `description` from the front matter (trimmed).
    pub description: String,
    /// Workspace path of the `SKILL.md`.
    pub path: WorkspacePath,
}

/// A `skills/*` entry that did not become a [`Skill`], and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedSkill {
    /// Workspace path of the entry (the `SKILL.md`, or the directory).
    pub path: String,
    /// Why, in words, for the caller to log.
    pub reason: String,
}

/// The skills of a workspace, read from `skills/*/SKILL.md` front matter.
///
/// ```text
/// ---
/// name: disk-full
/// description: Find what filled a disk and what is safe to delete.
/// ---
/// # Disk full
/// …
/// ```
///
/// `Default` is the empty catalog.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkillCatalog {
    skills: Vec<Skill>,
    skipped: Vec<SkippedSkill>,
}

impl SkillCatalog {
    /// A catalog of these skills (sorted by directory name, names unique)
    /// and these skipped entries: what a loader builds.
    pub fn new(skills: Vec<Skill>, skipped: Vec<SkippedSkill>) -> Self {
        Self { skills, skipped }
    }

    /// The skills, sorted by directory name.
    pub fn skills(&self) -> &[Skill] {
        &self.skills
    }

    /// Entries that were skipped, with the reason.
    pub fn skipped(&self) -> &[SkippedSkill] {
        &self.skipped
    }

    /// `true` when there are no skills.
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// The skill with this name.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }
}
