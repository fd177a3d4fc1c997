//! One seeding, on a blocking thread: read the trees out of git into a
//! hidden staging directory, move them into place, make them read-only, and
//! on any error remove everything written.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use super::git::{FileEntry, GitRepo};
use super::SeedReport;
use crate::fsutil::{make_dir, remove_tree_if_exists, set_dir_modes, DIR_MODE, READ_ONLY_DIR_MODE};
use crate::{Result, WorkspaceError, WorkspacePath};

/// Everything one seeding needs, owned, for the blocking task.
pub(super) struct SeedJob {
    /// The git program.
    pub(super) git: PathBuf,
    /// The repository as configured or pinned.
    pub(super) repo: PathBuf,
    /// The pinned commit, as the pin names it.
    pub(super) commit: String,
    /// The trees to seed.
    pub(super) trees: Vec<WorkspacePath>,
    /// The scratch dir to seed into.
    pub(super) scratch: PathBuf,
}

impl SeedJob {
    /// Seeds the scratch dir, or leaves it as it was.
    ///
    /// # Errors
    /// Those of [`GitRepo`]'s steps, and [`WorkspaceError::Io`] when the
    /// scratch dir cannot be written.
    pub(super) fn run(self) -> Result<SeedReport> {
        let repo = GitRepo::open(self.git.clone(), self.repo.clone())?;
        let commit = repo.resolve_commit(&self.commit)?;
        let (files, left_out) = repo.list_files(&commit, &self.trees)?;

        let mut trees = Vec::new();
        let mut absent_trees = Vec::new();
        for tree in &self.trees {
            if files.iter().any(|f| f.path.is_under(tree)) {
                trees.push(tree.clone());
            } else {
                absent_trees.push(tree.clone());
            }
        }

        let staging = self
            .scratch
            .join(format!(".korvus-seed-{}", Uuid::now_v7()));
        make_dir(&staging, DIR_MODE)
            .map_err(|e| WorkspaceError::io("create staging directory", &staging, e))?;
        let mut moved = Vec::new();
        let result = self.write_and_move(&repo, &staging, &files, &trees, &mut moved);
        // Whatever happened, the staging directory goes; on error, so does
        // everything already moved into place.
        let result = result.and_then(|bytes| remove_tree_if_exists(&staging).map(|()| bytes));
        match result {
            Ok(bytes) => Ok(SeedReport {
                commit,
                trees,
                absent_trees,
                files: files.into_iter().map(|f| f.path).collect(),
                bytes,
                left_out,
            }),
            Err(e) => {
                let _ = remove_tree_if_exists(&staging);
                for path in moved {
                    // The first error is the one worth reporting.
                    let _ = remove_tree_if_exists(&path);
                }
                Err(e)
            }
        }
    }

    /// Writes the files into `staging`, moves the top-level directories of
    /// `trees` into the scratch dir (recording each in `moved`, for the
    /// caller to remove on error) and makes the trees read-only.
    fn write_and_move(
        &self,
        repo: &GitRepo,
        staging: &Path,
        files: &[FileEntry],
        trees: &[WorkspacePath],
        moved: &mut Vec<PathBuf>,
    ) -> Result<u64> {
        let bytes = repo.write_files(staging, files)?;

        let mut tops: Vec<String> = trees
            .iter()
            .filter_map(|t| t.segments().next().map(str::to_owned))
            .collect();
        tops.sort();
        tops.dedup();
        for top in tops {
            let from = staging.join(&top);
            let to = self.scratch.join(&top);
            if fs::symlink_metadata(&to).is_ok() {
                return Err(WorkspaceError::io(
                    "seed into",
                    &to,
                    io::Error::new(io::ErrorKind::AlreadyExists, "path already exists"),
                ));
            }
            fs::rename(&from, &to).map_err(|e| WorkspaceError::io("move seeded tree", &to, e))?;
            moved.push(to);
        }
        for tree in trees {
            let path = self.scratch.join(tree.to_relative_path());
            set_dir_modes(&path, READ_ONLY_DIR_MODE)
                .map_err(|e| WorkspaceError::io("make read-only", &path, e))?;
        }
        Ok(bytes)
    }
}
