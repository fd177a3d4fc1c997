//! The [`Seeder`] seam and [`GitSeeder`], its implementation with the `git`
//! binary. Talking to git is in `git`; one seeding (staging, moving into
//! place, cleaning up on error) is in `job`.

mod git;
mod job;

use std::fmt::{self, Debug};
use std::path::PathBuf;

use async_trait::async_trait;
use korvus_store::WorkspaceRef;

use self::job::SeedJob;
use crate::error::blocking;
use crate::{default_trees, read_only_prefixes, Result, ScratchDir, WorkspacePath};
use korvus_paths::minimal_prefixes;

/// Seeds the read-only trees of a repository, at a session's pinned commit,
/// into its fresh scratch dir.
///
/// One method, object-safe (`Arc<dyn Seeder>`). [`GitSeeder`] is the real
/// implementation; the `mock` feature adds `MockSeeder`.
///
/// # Cancel safety
/// A dropped `seed` must leave the scratch dir seeded whole or as it was,
/// never half-seeded, as an error does. [`GitSeeder`] does its work on a
/// blocking task that runs to its end even when the future is dropped.
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Seeder: Send + Sync + Debug + 'static {
    /// Seeds `dir` for a session pinned at `pin` (`None`: not pinned).
    ///
    /// Returns [`SeedOutcome::Skipped`] with the reason, for the caller to
    /// log, when there is nothing to seed from; that is not an error.
    ///
    /// # Errors
    /// Implementation-specific; on error the scratch dir is left as it was
    /// (no half-seeded trees). See [`GitSeeder`] for the real one.
    ///
    /// # Cancel safety
    /// Implementation-specific. [`GitSeeder`] does its work on a blocking
    /// task that runs to completion (seeded, or cleaned up) even if the
    /// future is dropped.
    async fn seed<'a>(
        &self,
        dir: &ScratchDir,
        pin: Option<&'a WorkspaceRef>,
    ) -> Result<SeedOutcome>;
}

/// What [`Seeder::seed`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SeedOutcome {
    /// The trees were seeded.
    Seeded(SeedReport),
    /// Nothing was seeded, and nothing went wrong.
    Skipped(SeedSkipReason),
}

/// Why seeding was skipped. Named apart from `korvus-harvest`'s
/// `SkipReason` (why a file was left out of a harvest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SeedSkipReason {
    /// The session has no pinned commit.
    NotPinned,
    /// Neither the seeder nor the pin names a repository.
    NoRepository,
}

impl fmt::Display for SeedSkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SeedSkipReason::NotPinned => "session is not pinned to a commit",
            SeedSkipReason::NoRepository => "no repository is configured",
        })
    }
}

/// What a successful seeding put into the scratch dir.
///
/// Deliberately not `#[non_exhaustive]`: tests of embedders build one to
/// return from a `MockSeeder`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedReport {
    /// The full object id the pinned commit resolved to.
    pub commit: String,
    /// Configured trees that exist at the commit and were seeded.
    pub trees: Vec<WorkspacePath>,
    /// Configured trees that do not exist at the commit.
    pub absent_trees: Vec<WorkspacePath>,
    /// Every file written, in git's tree order.
    pub files: Vec<WorkspacePath>,
    /// Total bytes written.
    pub bytes: u64,
    /// Tree entries left out (symlinks, submodules, unsafe names), with why.
    pub left_out: Vec<LeftOut>,
}

/// A tree entry [`GitSeeder`] did not write.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeftOut {
    /// The entry's path as git stores it (lossily decoded).
    pub path: String,
    /// Why, in words.
    pub reason: &'static str,
}

/// A [`Seeder`] that runs the real `git` binary against a local repository
/// or bare mirror.
///
/// Only the configured trees ([`default_trees`](crate::default_trees)
/// unless [`GitSeeder::with_trees`] says otherwise) are seeded, byte for byte
/// as the blobs are stored at the pinned commit — not the working tree, not
/// `HEAD`, and without `.gitattributes` conversions (`git ls-tree` +
/// `git cat-file --batch`, no checkout or archive). Files are written 0444
/// and directories of the trees 0555, executable or not. Symlinks and
/// submodules inside the trees are left out and listed in
/// [`SeedReport::left_out`].
///
/// The repository is the one given by [`GitSeeder::with_repository`] (the
/// pin's `repo` is then only a label), or else the pin's `repo` read as a
/// local path. URLs are not fetched: point the seeder at a mirror.
///
/// Files are first written to a hidden staging directory inside the scratch
/// dir and moved into place at the end; on any error everything written is
/// removed, so the scratch dir is left as it was.
///
/// Git runs with `LC_ALL=C`, no terminal prompt, repository discovery stopped
/// at the repository path (`GIT_CEILING_DIRECTORIES`) and literal pathspecs,
/// and the `GIT_DIR`-style variables of the calling environment removed.
/// Git's `safe.directory` check applies: a repository owned by another user
/// is refused as [`WorkspaceError::NotARepository`].
///
/// [`WorkspaceError::NotARepository`]: crate::WorkspaceError::NotARepository
#[derive(Debug, Clone)]
pub struct GitSeeder {
    git: PathBuf,
    repository: Option<PathBuf>,
    trees: Vec<WorkspacePath>,
}

impl Default for GitSeeder {
    /// `git` from `PATH`, the repository taken from each pin, the default trees.
    fn default() -> Self {
        Self {
            git: PathBuf::from("git"),
            repository: None,
            trees: minimal_prefixes(default_trees()),
        }
    }
}

impl GitSeeder {
    /// Seeds every pinned session from this local repository or bare mirror.
    pub fn with_repository(mut self, path: impl Into<PathBuf>) -> Self {
        self.repository = Some(path.into());
        self
    }

    /// Seeds these trees instead of the defaults (duplicates and trees
    /// nested in another are dropped). Build them with
    /// [`tree_prefix`](crate::tree_prefix).
    pub fn with_trees(mut self, trees: Vec<WorkspacePath>) -> Self {
        self.trees = minimal_prefixes(trees);
        self
    }

    /// Runs this program instead of `git` from `PATH`.
    pub fn with_git_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.git = program.into();
        self
    }

    /// The configured trees.
    pub fn trees(&self) -> &[WorkspacePath] {
        &self.trees
    }

    /// [`read_only_prefixes`] of the configured trees: the deny list every
    /// workspace of this seeder has.
    pub fn read_only_prefixes(&self) -> Vec<WorkspacePath> {
        read_only_prefixes(&self.trees)
    }
}

#[async_trait]
impl Seeder for GitSeeder {
    /// Seeds the configured trees at the pinned commit.
    ///
    /// # Errors
    /// [`WorkspaceError::GitNotFound`] when git cannot be started;
    /// [`WorkspaceError::NotARepository`] for a missing path or non-repository;
    /// [`WorkspaceError::UnknownCommit`] when the pin does not name a commit;
    /// [`WorkspaceError::CorruptRepository`] when a tree or blob cannot be
    /// read; [`WorkspaceError::Io`] when the scratch dir cannot be written.
    /// In every case the scratch dir is left as it was.
    ///
    /// # Cancel safety
    /// The work runs on a blocking task that finishes (seeded, or cleaned up)
    /// even if this future is dropped.
    ///
    /// [`WorkspaceError::GitNotFound`]: crate::WorkspaceError::GitNotFound
    /// [`WorkspaceError::NotARepository`]: crate::WorkspaceError::NotARepository
    /// [`WorkspaceError::UnknownCommit`]: crate::WorkspaceError::UnknownCommit
    /// [`WorkspaceError::CorruptRepository`]: crate::WorkspaceError::CorruptRepository
    /// [`WorkspaceError::Io`]: crate::WorkspaceError::Io
    async fn seed<'a>(
        &self,
        dir: &ScratchDir,
        pin: Option<&'a WorkspaceRef>,
    ) -> Result<SeedOutcome> {
        let Some(pin) = pin else {
            return Ok(SeedOutcome::Skipped(SeedSkipReason::NotPinned));
        };
        let repo = match &self.repository {
            Some(repo) => repo.clone(),
            None if pin.repo.trim().is_empty() => {
                return Ok(SeedOutcome::Skipped(SeedSkipReason::NoRepository))
            }
            None => PathBuf::from(&pin.repo),
        };
        let job = SeedJob {
            git: self.git.clone(),
            repo,
            commit: pin.commit.clone(),
            trees: self.trees.clone(),
            scratch: dir.path().to_path_buf(),
        };
        blocking(move || job.run().map(SeedOutcome::Seeded)).await
    }
}
