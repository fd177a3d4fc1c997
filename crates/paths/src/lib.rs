//! The scratch dir's vocabulary in korvus: [`WorkspacePath`] (a validated
//! path relative to a scratch dir), the file names korvus reserves in it
//! ([`REPORT_FILE`], the manifests under [`METADATA_DIR`], the agent's own
//! directories), the read-only tree rule ([`read_only_prefixes`],
//! [`is_read_only`]) and the [`SkillCatalog`] a run sees.
//!
//! It reads and writes no files: `korvus-workspace` makes scratch dirs and
//! reads skills from them, and re-exports everything here. It sits at the
//! bottom of the layers so the `Runner` seam (`korvus-runner`) can name a
//! run's paths and skills without depending on the scratch-dir machinery
//! (git, tar, flate2). Not an API boundary of its own: embedders reach it
//! through `korvus-workspace` or `korvus-agents`.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod path;
mod skills;

pub use crate::path::{
    default_trees, is_read_only, minimal_prefixes, read_only_prefixes, tree_prefix, InvalidPath,
    WorkspacePath, AGENT_HOME, AGENT_STATE_DIR, AGENT_TMP, CONTEXT_DIR, HARVEST_MANIFEST,
    MAX_PATH_BYTES, MAX_SEGMENT_BYTES, METADATA_DIR, REPORT_FILE, REPORT_TEMPLATE, RUN_MANIFEST,
};
pub use crate::skills::{
    Skill, SkillCatalog, SkippedSkill, MAX_SKILL_FILE_BYTES, SKILLS_DIR, SKILL_FILE,
};
