//! The [`Seeder`] seam and [`GitSeeder`], its implementation with the `git`
//! binary.

use std::fmt::{self, Debug};
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use async_trait::async_trait;
use korvus_store::WorkspaceRef;
use uuid::Uuid;

use crate::error::blocking;
use crate::fsutil::{
    make_dir, make_parents, remove_tree_if_exists, set_dir_modes, DIR_MODE, READ_ONLY_DIR_MODE,
    READ_ONLY_FILE_MODE,
};
use crate::path::minimal_prefixes;
use crate::{default_trees, read_only_prefixes, Result, ScratchDir, WorkspaceError, WorkspacePath};

/// Seeds the read-only trees of a repository, at a session's pinned commit,
/// into its fresh scratch dir.
///
/// One method, object-safe (`Arc<dyn Seeder>`). [`GitSeeder`] is the real
/// implementation; the `mock` feature adds `MockSeeder`.
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
    Skipped(SkipReason),
}

/// Why seeding was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SkipReason {
    /// The session has no pinned commit.
    NotPinned,
    /// Neither the seeder nor the pin names a repository.
    NoRepository,
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SkipReason::NotPinned => "session is not pinned to a commit",
            SkipReason::NoRepository => "no repository is configured",
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
pub struct LeftOut {
    /// The entry's path as git stores it (lossily decoded).
    pub path: String,
    /// Why, in words.
    pub reason: &'static str,
}

/// A [`Seeder`] that runs the real `git` binary against a local repository
/// or bare mirror.
///
/// Only the configured trees ([`DEFAULT_TREES`](crate::DEFAULT_TREES)
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
    async fn seed<'a>(
        &self,
        dir: &ScratchDir,
        pin: Option<&'a WorkspaceRef>,
    ) -> Result<SeedOutcome> {
        let Some(pin) = pin else {
            return Ok(SeedOutcome::Skipped(SkipReason::NotPinned));
        };
        let repo = match &self.repository {
            Some(repo) => repo.clone(),
            None if pin.repo.trim().is_empty() => {
                return Ok(SeedOutcome::Skipped(SkipReason::NoRepository))
            }
            None => PathBuf::from(&pin.repo),
        };
        let job = SeedJob {
            git: self.git.clone(),
            repo_dir: repo.clone(),
            repo,
            commit: pin.commit.clone(),
            trees: self.trees.clone(),
            scratch: dir.path().to_path_buf(),
        };
        blocking(move || {
            let mut job = job;
            job.run().map(SeedOutcome::Seeded)
        })
        .await
    }
}

/// Everything one seeding needs, owned, for the blocking task.
struct SeedJob {
    git: PathBuf,
    /// The repository as configured or pinned (named in errors).
    repo: PathBuf,
    /// `repo` made absolute and canonical (what git runs in).
    repo_dir: PathBuf,
    commit: String,
    trees: Vec<WorkspacePath>,
    scratch: PathBuf,
}

/// A tree entry to write.
struct FileEntry {
    oid: String,
    path: WorkspacePath,
}

impl SeedJob {
    fn run(&mut self) -> Result<SeedReport> {
        self.repo_dir =
            fs::canonicalize(&self.repo).map_err(|e| WorkspaceError::NotARepository {
                repo: self.repo.clone(),
                detail: e.to_string(),
            })?;
        self.check_repository()?;
        let commit = self.resolve_commit()?;
        let (files, left_out) = self.list_files(&commit)?;

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
        let result = self.write_and_move(&staging, &files, &trees, &mut moved);
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

    fn write_and_move(
        &self,
        staging: &Path,
        files: &[FileEntry],
        trees: &[WorkspacePath],
        moved: &mut Vec<PathBuf>,
    ) -> Result<u64> {
        let bytes = self.write_files(staging, files)?;

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

    fn git(&self) -> Command {
        let mut cmd = Command::new(&self.git);
        cmd.arg("-C")
            .arg(&self.repo_dir)
            .arg("--literal-pathspecs")
            .env("LC_ALL", "C")
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(Stdio::null());
        for var in [
            "GIT_DIR",
            "GIT_WORK_TREE",
            "GIT_INDEX_FILE",
            "GIT_OBJECT_DIRECTORY",
            "GIT_ALTERNATE_OBJECT_DIRECTORIES",
            "GIT_NAMESPACE",
            "GIT_COMMON_DIR",
        ] {
            cmd.env_remove(var);
        }
        // Stop discovery at the repository itself, so a plain directory
        // inside some other checkout is not taken for a repository.
        if let Some(parent) = self.repo_dir.parent() {
            cmd.env("GIT_CEILING_DIRECTORIES", parent);
        }
        cmd
    }

    fn output(&self, cmd: &mut Command) -> Result<std::process::Output> {
        cmd.output().map_err(|source| WorkspaceError::GitNotFound {
            program: self.git.clone(),
            source,
        })
    }

    fn check_repository(&self) -> Result<()> {
        if !self.repo_dir.is_dir() {
            return Err(WorkspaceError::NotARepository {
                repo: self.repo.clone(),
                detail: "no such directory".into(),
            });
        }
        let out = self.output(self.git().args(["rev-parse", "--git-dir"]))?;
        if !out.status.success() {
            return Err(WorkspaceError::NotARepository {
                repo: self.repo.clone(),
                detail: stderr_text(&out.stderr),
            });
        }
        Ok(())
    }

    fn resolve_commit(&self) -> Result<String> {
        let commit = self.commit.trim();
        let unknown = || WorkspaceError::UnknownCommit {
            repo: self.repo.clone(),
            commit: self.commit.clone(),
        };
        // Never let a pin become an option or a multi-word argument.
        if commit.is_empty()
            || commit.starts_with('-')
            || commit.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(unknown());
        }
        let out = self.output(self.git().args([
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &format!("{commit}^{{commit}}"),
        ]))?;
        match out.status.code() {
            Some(0) => Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned()),
            Some(1) => Err(unknown()),
            _ => Err(WorkspaceError::CorruptRepository {
                repo: self.repo.clone(),
                detail: stderr_text(&out.stderr),
            }),
        }
    }

    fn corrupt(&self, detail: impl Into<String>) -> WorkspaceError {
        WorkspaceError::CorruptRepository {
            repo: self.repo.clone(),
            detail: detail.into(),
        }
    }

    fn list_files(&self, commit: &str) -> Result<(Vec<FileEntry>, Vec<LeftOut>)> {
        let mut cmd = self.git();
        cmd.args(["ls-tree", "-r", "-z", "--full-tree", commit, "--"]);
        cmd.args(self.trees.iter().map(WorkspacePath::as_str));
        let out = self.output(&mut cmd)?;
        if !out.status.success() {
            return Err(self.corrupt(stderr_text(&out.stderr)));
        }
        let mut files = Vec::new();
        let mut left_out = Vec::new();
        for record in out.stdout.split(|b| *b == 0).filter(|r| !r.is_empty()) {
            // `<mode> SP <type> SP <oid> TAB <path>`
            let text = String::from_utf8_lossy(record);
            let Some((meta, raw_path)) = text.split_once('\t') else {
                return Err(self.corrupt(format!("unexpected ls-tree record {text:?}")));
            };
            let mut parts = meta.split(' ');
            let (Some(mode), Some(kind), Some(oid)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(self.corrupt(format!("unexpected ls-tree record {text:?}")));
            };
            let leave = |reason| LeftOut {
                path: raw_path.to_owned(),
                reason,
            };
            let path = match std::str::from_utf8(record)
                .ok()
                .and_then(|_| WorkspacePath::new(raw_path).ok())
            {
                Some(p) if self.trees.iter().any(|t| p.is_under(t)) => p,
                _ => {
                    left_out.push(leave("path is not a safe workspace path under a tree"));
                    continue;
                }
            };
            match (mode, kind) {
                ("100644" | "100755", "blob") => files.push(FileEntry {
                    oid: oid.to_owned(),
                    path,
                }),
                ("120000", _) => left_out.push(leave("symlink")),
                ("160000", _) => left_out.push(leave("submodule")),
                _ => left_out.push(leave("unsupported tree entry")),
            }
        }
        Ok((files, left_out))
    }

    fn write_files(&self, staging: &Path, files: &[FileEntry]) -> Result<u64> {
        if files.is_empty() {
            return Ok(0);
        }
        let mut child = self
            .git()
            .args(["cat-file", "--batch"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // A missing object is reported on stdout; nothing reads stderr,
            // so it must not be a pipe that could fill up.
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| WorkspaceError::GitNotFound {
                program: self.git.clone(),
                source,
            })?;
        let result = match (child.stdin.take(), child.stdout.take()) {
            (Some(stdin), Some(stdout)) => self.stream_blobs(staging, files, stdin, stdout),
            _ => Err(self.corrupt("git cat-file has no pipes")),
        };
        let status = finish(&mut child);
        let bytes = result?;
        match status {
            Ok(true) => Ok(bytes),
            Ok(false) => Err(self.corrupt("git cat-file --batch failed")),
            Err(e) => Err(self.corrupt(format!("git cat-file --batch: {e}"))),
        }
    }

    fn stream_blobs(
        &self,
        staging: &Path,
        files: &[FileEntry],
        mut stdin: ChildStdin,
        stdout: ChildStdout,
    ) -> Result<u64> {
        let mut reader = BufReader::new(stdout);
        let mut total = 0u64;
        let mut header = String::new();
        for file in files {
            let pipe_err = |e: io::Error| self.corrupt(format!("git cat-file --batch: {e}"));
            writeln!(stdin, "{}", file.oid)
                .and_then(|()| stdin.flush())
                .map_err(pipe_err)?;
            header.clear();
            reader.read_line(&mut header).map_err(pipe_err)?;
            // `<oid> blob <size>` or `<oid> missing`
            let mut parts = header.split_whitespace();
            let (Some(_), Some("blob"), Some(size)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(self.corrupt(format!(
                    "object {} of {} is unreadable: {}",
                    file.oid,
                    file.path,
                    header.trim()
                )));
            };
            let size: u64 = size
                .parse()
                .map_err(|_| self.corrupt(format!("bad cat-file header {header:?}")))?;

            let rel = file.path.to_relative_path();
            let target = staging.join(&rel);
            make_parents(staging, &rel)
                .map_err(|e| WorkspaceError::io("create directory for", &target, e))?;
            let mut out = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(READ_ONLY_FILE_MODE)
                .open(&target)
                .map_err(|e| WorkspaceError::io("create", &target, e))?;
            let copied = io::copy(&mut (&mut reader).take(size), &mut out)
                .map_err(|e| WorkspaceError::io("write", &target, e))?;
            if copied != size {
                return Err(self.corrupt(format!("object {} was cut short", file.oid)));
            }
            let mut newline = [0u8; 1];
            reader.read_exact(&mut newline).map_err(pipe_err)?;
            out.set_permissions(fs::Permissions::from_mode(READ_ONLY_FILE_MODE))
                .map_err(|e| WorkspaceError::io("make read-only", &target, e))?;
            total += size;
        }
        Ok(total)
    }
}

/// Closes the child's pipes and waits for it; `Ok(true)` on success.
fn finish(child: &mut Child) -> io::Result<bool> {
    drop(child.stdin.take());
    drop(child.stdout.take());
    let status = child.wait()?;
    Ok(status.success())
}

fn stderr_text(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    if text.is_empty() {
        "git exited unsuccessfully".to_owned()
    } else {
        text.chars().take(2000).collect()
    }
}
