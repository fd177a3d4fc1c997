//! Reading a repository with the `git` binary: opening it, resolving the
//! pinned commit, listing the configured trees (`git ls-tree`) and writing
//! their blobs into a staging directory (`git cat-file --batch`).

use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use super::LeftOut;
use crate::fsutil::{make_parents, READ_ONLY_FILE_MODE};
use crate::{Result, WorkspaceError, WorkspacePath};

/// A local repository or bare mirror that git has accepted, and the git
/// program to run in it.
pub(super) struct GitRepo {
    git: PathBuf,
    /// The repository as configured or pinned (named in errors).
    repo: PathBuf,
    /// `repo` made absolute and canonical (what git runs in).
    dir: PathBuf,
}

/// A tree entry to write.
pub(super) struct FileEntry {
    /// The blob's object id.
    pub(super) oid: String,
    /// Where it goes in the workspace.
    pub(super) path: WorkspacePath,
}

impl GitRepo {
    /// Opens `repo` with `git`.
    ///
    /// # Errors
    /// [`WorkspaceError::NotARepository`] for a missing path or a directory
    /// git does not take for a repository; [`WorkspaceError::GitNotFound`]
    /// when git cannot be started.
    pub(super) fn open(git: PathBuf, repo: PathBuf) -> Result<Self> {
        let dir = fs::canonicalize(&repo).map_err(|e| WorkspaceError::NotARepository {
            repo: repo.clone(),
            detail: e.to_string(),
        })?;
        let opened = Self { git, repo, dir };
        opened.check_repository()?;
        Ok(opened)
    }

    /// The full object id of the commit `commit` names.
    ///
    /// # Errors
    /// [`WorkspaceError::UnknownCommit`] when it names no commit (or is not
    /// a single word); [`WorkspaceError::CorruptRepository`] when git fails
    /// otherwise.
    pub(super) fn resolve_commit(&self, commit: &str) -> Result<String> {
        let unknown = || WorkspaceError::UnknownCommit {
            repo: self.repo.clone(),
            commit: commit.to_owned(),
        };
        let commit = commit.trim();
        // Never let a pin become an option or a multi-word argument.
        if commit.is_empty()
            || commit.starts_with('-')
            || commit.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(unknown());
        }
        let out = self.output(self.command().args([
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

    /// The regular files under `trees` at `commit`, in git's tree order, and
    /// the entries left out (symlinks, submodules, unsafe paths) with why.
    ///
    /// # Errors
    /// [`WorkspaceError::CorruptRepository`] when git cannot list the trees
    /// or prints something unexpected.
    pub(super) fn list_files(
        &self,
        commit: &str,
        trees: &[WorkspacePath],
    ) -> Result<(Vec<FileEntry>, Vec<LeftOut>)> {
        let mut cmd = self.command();
        cmd.args(["ls-tree", "-r", "-z", "--full-tree", commit, "--"]);
        cmd.args(trees.iter().map(WorkspacePath::as_str));
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
                Some(p) if trees.iter().any(|t| p.is_under(t)) => p,
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

    /// Writes each of `files` under `staging`, read-only, byte for byte as
    /// its blob is stored; returns the bytes written.
    ///
    /// # Errors
    /// [`WorkspaceError::GitNotFound`] when git cannot be started;
    /// [`WorkspaceError::CorruptRepository`] when a blob cannot be read;
    /// [`WorkspaceError::Io`] when a file cannot be written. Files already
    /// written stay for the caller to remove.
    pub(super) fn write_files(&self, staging: &Path, files: &[FileEntry]) -> Result<u64> {
        if files.is_empty() {
            return Ok(0);
        }
        let mut child = self
            .command()
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

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.git);
        cmd.arg("-C")
            .arg(&self.dir)
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
        if let Some(parent) = self.dir.parent() {
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
        if !self.dir.is_dir() {
            return Err(WorkspaceError::NotARepository {
                repo: self.repo.clone(),
                detail: "no such directory".into(),
            });
        }
        let out = self.output(self.command().args(["rev-parse", "--git-dir"]))?;
        if !out.status.success() {
            return Err(WorkspaceError::NotARepository {
                repo: self.repo.clone(),
                detail: stderr_text(&out.stderr),
            });
        }
        Ok(())
    }

    fn corrupt(&self, detail: impl Into<String>) -> WorkspaceError {
        WorkspaceError::CorruptRepository {
            repo: self.repo.clone(),
            detail: detail.into(),
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
