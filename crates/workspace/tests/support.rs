//! Shared fixtures: a real git repository built in the test, artifacts with
//! their bytes, a blob store that fails on chosen keys.

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use bytes::Bytes;
use korvus_blob::{artifact_key, BlobStore, MemoryBlobStore, PutOptions, Sha256Digest};
use korvus_store::{Artifact, ArtifactId, ArtifactKind, IncidentId, SessionId, WorkspaceRef};
use korvus_testkit::faults::{BlobFault, FaultBlobStore};
use korvus_workspace::{ScratchDir, ScratchRoot};
use tempfile::TempDir;

pub(crate) const SKILL_V1: &str =
    "---\nname: disk-full\ndescription: Find what filled a disk.\n---\n# v1\n";
pub(crate) const SKILL_V2: &str =
    "---\nname: disk-full\ndescription: Find what filled a disk, v2.\n---\n# v2\n";
pub(crate) const NET_SKILL: &str = "---\nname: net\ndescription: >\n  Debug the\n  network.\n---\n";
pub(crate) const GUIDE_V1: &str = "guide, first commit\n";
pub(crate) const GUIDE_V2: &str = "guide, second commit\n";

/// A repository with two commits changing `skills/` and `docs/`, plus files
/// outside the seeded trees and an uncommitted change in the working tree.
pub(crate) struct TestRepo {
    pub(crate) _tmp: TempDir,
    pub(crate) path: PathBuf,
    pub(crate) first: String,
    pub(crate) second: String,
}

pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.invalid",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

impl TestRepo {
    pub(crate) fn new() -> Self {
        let tmp = TempDir::new().unwrap();
        let path = tmp.path().join("repo");
        fs::create_dir(&path).unwrap();
        git(&path, &["init", "-q"]);

        write(&path, "skills/disk/SKILL.md", SKILL_V1);
        write(&path, "docs/guide.md", GUIDE_V1);
        write(&path, "runbooks/restart.md", "restart it\n");
        write(&path, "src/main.rs", "fn main() {}\n");
        write(&path, "README.md", "outside the trees\n");
        write(&path, "docsextra/x.md", "prefix look-alike\n");
        git(&path, &["add", "-A"]);
        git(&path, &["commit", "-q", "-m", "first"]);
        let first = git(&path, &["rev-parse", "HEAD"]);

        write(&path, "skills/disk/SKILL.md", SKILL_V2);
        write(&path, "skills/net/SKILL.md", NET_SKILL);
        write(&path, "docs/guide.md", GUIDE_V2);
        write(&path, "docs/new.md", "added in the second commit\n");
        std::os::unix::fs::symlink("../src/main.rs", path.join("docs/link.rs")).unwrap();
        git(&path, &["add", "-A"]);
        git(&path, &["commit", "-q", "-m", "second"]);
        let second = git(&path, &["rev-parse", "HEAD"]);

        // Neither HEAD nor the working tree is what a pinned seed reads.
        write(&path, "docs/guide.md", "uncommitted edit\n");
        write(&path, "docs/untracked.md", "untracked\n");

        Self {
            _tmp: tmp,
            path,
            first,
            second,
        }
    }

    pub(crate) fn pin(&self, commit: &str) -> WorkspaceRef {
        WorkspaceRef {
            repo: self.path.to_string_lossy().into_owned(),
            commit: commit.to_owned(),
        }
    }

    /// Path of the loose object file of `<commit>:<path>`.
    pub(crate) fn object_file(&self, spec: &str) -> PathBuf {
        let oid = git(&self.path, &["rev-parse", spec]);
        self.path
            .join(".git/objects")
            .join(&oid[..2])
            .join(&oid[2..])
    }
}

/// A fresh owned root and a scratch dir in it.
pub(crate) struct Scratch {
    pub(crate) _tmp: TempDir,
    pub(crate) root: PathBuf,
    pub(crate) dir: ScratchDir,
}

pub(crate) async fn scratch() -> Scratch {
    let tmp = TempDir::new().unwrap();
    let root = tmp.path().join("root");
    fs::create_dir(&root).unwrap();
    let dir = ScratchRoot::supplied(&root)
        .create(SessionId::new())
        .await
        .unwrap();
    Scratch {
        _tmp: tmp,
        root,
        dir,
    }
}

/// Every path below `dir`, relative, `/`-separated, directories with a
/// trailing `/`. Symlinks are listed, never followed.
pub(crate) fn listing(dir: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, rel: &str, out: &mut BTreeSet<String>) {
        let here = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(rel)
        };
        for entry in fs::read_dir(here).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                out.insert(format!("{child}/"));
                walk(root, &child, out);
            } else {
                out.insert(child);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(dir, "", &mut out);
    out
}

pub(crate) fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

/// `true` when this process ignores mode bits: it holds `CAP_DAC_OVERRIDE`
/// in its effective set, as root normally does. (A uid-0 process without it
/// is bound by the bits like anyone, so the uid alone would be the wrong test.)
pub(crate) fn ignores_mode_bits() -> bool {
    const CAP_DAC_OVERRIDE: u32 = 1;
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("CapEff:")).unwrap();
    let caps = u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap();
    caps & (1 << CAP_DAC_OVERRIDE) != 0
}

/// Runs `sh -c script path` as the current user with every capability
/// dropped (so root is bound by mode bits like anyone else); `true` when it
/// succeeded.
pub(crate) fn run_without_capabilities(script: &str, path: &Path) -> bool {
    Command::new("setpriv")
        .args([
            "--bounding-set=-all",
            "--inh-caps=-all",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(path)
        .output()
        .expect("setpriv (util-linux) is needed to test permissions as root")
        .status
        .success()
}

/// An artifact row plus its bytes, stored in `blobs`.
pub(crate) async fn artifact(
    blobs: &dyn BlobStore,
    incident: IncidentId,
    session: SessionId,
    kind: ArtifactKind,
    path: &str,
    revision: u32,
    body: &str,
) -> Artifact {
    let id = ArtifactId::new();
    let key = artifact_key(incident.as_uuid(), session.as_uuid(), id.as_uuid(), path);
    let bytes = Bytes::from(body.to_owned());
    blobs
        .put(
            &key,
            bytes.clone(),
            PutOptions::for_bytes("text/plain", &bytes),
        )
        .await
        .unwrap();
    Artifact {
        id,
        incident_id: incident,
        session_id: session,
        kind,
        path: path.to_owned(),
        blob_key: key.to_string(),
        content_type: "text/plain".into(),
        size_bytes: bytes.len() as u64,
        sha256: Sha256Digest::of(&bytes).to_hex(),
        revision,
        fence: 1,
        created_at: chrono::Utc::now(),
    }
}

/// A memory blob store wrapped in the testkit's fault injector.
pub(crate) fn fault_blobs() -> FaultBlobStore {
    FaultBlobStore::new(std::sync::Arc::new(MemoryBlobStore::new()))
}

/// Makes gets of exactly this key fail (keys embed a unique artifact id).
pub(crate) fn fail_get(blobs: &FaultBlobStore, key: &str) {
    blobs.fault_get(key, BlobFault::Fail);
}
