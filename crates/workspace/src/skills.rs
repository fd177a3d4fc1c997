//! Reading the [`SkillCatalog`] of a seeded workspace from its
//! `skills/*/SKILL.md` front matter.

use std::fs::{self, File};
use std::io::Read;
use std::path::Path;

use korvus_paths::{
    Skill, SkillCatalog, SkippedSkill, MAX_SKILL_FILE_BYTES, SKILLS_DIR, SKILL_FILE,
};
use serde::Deserialize;

use crate::error::blocking;
use crate::{Result, SeedOutcome, WorkspaceError, WorkspacePath};

#[derive(Deserialize)]
struct FrontMatter {
    name: Option<String>,
    description: Option<String>,
}

/// Reads a [`SkillCatalog`] from a scratch dir: `SkillCatalog::load(dir)`
/// and `SkillCatalog::after_seeding(dir, seeding)` with this trait in
/// scope (the catalog type lives in korvus-paths, which reads no files).
///
/// # Cancel safety
/// Cancel safe: both methods only read the scratch dir.
#[allow(async_fn_in_trait)]
pub trait LoadSkills: Sized {
    /// See [`load`](SkillCatalog::load) below.
    async fn load(dir: &Path) -> Result<Self>;
    /// See [`after_seeding`](SkillCatalog::after_seeding) below.
    async fn after_seeding(
        dir: &Path,
        seeding: std::result::Result<&SeedOutcome, &WorkspaceError>,
    ) -> Result<Self>;
}

impl LoadSkills for SkillCatalog {
    /// Reads `<dir>/skills/*/SKILL.md`, sorted by directory name.
    ///
    /// A missing `skills/` gives an empty catalog. Entries that are not real
    /// directories (symlinks are never followed), directories without a
    /// regular `SKILL.md`, files over [`MAX_SKILL_FILE_BYTES`], files
    /// without `---` front matter, invalid YAML, a missing or blank `name` or
    /// `description`, and a `name` already taken are skipped and listed in
    /// [`SkillCatalog::skipped`]. Plain files directly in `skills/` are
    /// ignored.
    ///
    /// # Errors
    /// [`WorkspaceError::Io`] when `skills/` exists but cannot be listed.
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    async fn load(dir: &Path) -> Result<Self> {
        let dir = dir.to_path_buf();
        blocking(move || load_blocking(&dir)).await
    }

    /// The catalog of a session after its seeding: loaded only when seeding
    /// succeeded and seeded the `skills` tree; empty when it was skipped,
    /// failed, or did not include skills. A pinned session whose seeding was
    /// skipped or failed therefore gets no skills at all — never a fallback.
    ///
    /// # Errors
    /// As [`SkillCatalog::load`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    async fn after_seeding(
        dir: &Path,
        seeding: std::result::Result<&SeedOutcome, &WorkspaceError>,
    ) -> Result<Self> {
        let skills = WorkspacePath::new(SKILLS_DIR)?;
        match seeding {
            Ok(SeedOutcome::Seeded(report)) if report.trees.iter().any(|t| skills.is_under(t)) => {
                Self::load(dir).await
            }
            _ => Ok(Self::default()),
        }
    }
}

/// A catalog being read.
#[derive(Default)]
struct Building {
    skills: Vec<Skill>,
    skipped: Vec<SkippedSkill>,
}

impl Building {
    fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    fn done(self) -> SkillCatalog {
        SkillCatalog::new(self.skills, self.skipped)
    }
}

fn load_blocking(dir: &Path) -> Result<SkillCatalog> {
    let mut catalog = Building::default();
    let root = dir.join(SKILLS_DIR);
    match fs::symlink_metadata(&root) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            catalog.skipped.push(SkippedSkill {
                path: SKILLS_DIR.to_owned(),
                reason: "not a directory".to_owned(),
            });
            return Ok(catalog.done());
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(catalog.done()),
        Err(e) => return Err(WorkspaceError::io("read", &root, e)),
    }
    let mut names = Vec::new();
    for entry in fs::read_dir(&root).map_err(|e| WorkspaceError::io("list", &root, e))? {
        let entry = entry.map_err(|e| WorkspaceError::io("list", &root, e))?;
        names.push(entry.file_name());
    }
    names.sort();
    for name in names {
        let display = format!("{SKILLS_DIR}/{}", name.to_string_lossy());
        let skip = |catalog: &mut Building, path: String, reason: String| {
            catalog.skipped.push(SkippedSkill { path, reason });
        };
        let Some(name) = name.to_str() else {
            skip(&mut catalog, display, "name is not UTF-8".into());
            continue;
        };
        let sub = root.join(name);
        match fs::symlink_metadata(&sub) {
            Ok(m) if m.is_dir() => {}
            Ok(m) if m.is_file() => continue,
            Ok(_) => {
                skip(&mut catalog, display, "not a directory".into());
                continue;
            }
            Err(e) => {
                skip(&mut catalog, display, e.to_string());
                continue;
            }
        }
        let rel = format!("{SKILLS_DIR}/{name}/{SKILL_FILE}");
        let Ok(path) = WorkspacePath::new(rel.as_str()) else {
            skip(
                &mut catalog,
                display,
                "name is not a valid workspace path".into(),
            );
            continue;
        };
        match read_skill(&sub.join(SKILL_FILE)) {
            Ok((name, _)) if catalog.get(&name).is_some() => {
                skip(&mut catalog, rel, format!("duplicate skill name {name:?}"));
            }
            Ok((name, description)) => catalog.skills.push(Skill {
                name,
                description,
                path,
            }),
            Err(reason) => skip(&mut catalog, rel, reason),
        }
    }
    Ok(catalog.done())
}

/// Reads one `SKILL.md`: `(name, description)` or why not.
fn read_skill(path: &Path) -> std::result::Result<(String, String), String> {
    let meta = fs::symlink_metadata(path).map_err(|e| format!("no readable {SKILL_FILE}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{SKILL_FILE} is not a regular file"));
    }
    if meta.len() > MAX_SKILL_FILE_BYTES {
        return Err(format!("larger than {MAX_SKILL_FILE_BYTES} bytes"));
    }
    let mut text = String::new();
    File::open(path)
        .and_then(|f| f.take(MAX_SKILL_FILE_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| format!("unreadable: {e}"))?;
    let yaml = front_matter(&text).ok_or("no `---` front matter")?;
    let fm: FrontMatter =
        serde_norway::from_str(yaml).map_err(|e| format!("front matter is not valid YAML: {e}"))?;
    let name = fm.name.map(|s| s.trim().to_owned()).unwrap_or_default();
    let description = fm
        .description
        .map(|s| s.trim().to_owned())
        .unwrap_or_default();
    if name.is_empty() {
        return Err("front matter has no `name`".into());
    }
    if description.is_empty() {
        return Err("front matter has no `description`".into());
    }
    Ok((name, description))
}

/// The YAML between a leading `---` line and the next `---` (or `...`) line.
fn front_matter(text: &str) -> Option<&str> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next()?;
    if first.trim_end() != "---" {
        return None;
    }
    let start = first.len();
    let mut at = start;
    for line in lines {
        if matches!(line.trim_end(), "---" | "...") {
            return Some(&text[start..at]);
        }
        at += line.len();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_is_found() {
        assert_eq!(front_matter("---\nname: a\n---\nbody"), Some("name: a\n"));
        assert_eq!(
            front_matter("\u{feff}---\r\nname: a\r\n---\r\n"),
            Some("name: a\r\n")
        );
        assert_eq!(front_matter("---\n---\n"), Some(""));
        assert_eq!(front_matter("name: a\n---\n"), None);
        assert_eq!(front_matter("---\nname: a\n"), None);
    }
}
