//! Hostile workspaces: scratch directories planted with everything a session
//! could leave behind to trick the harvest.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What [`HostileWorkspace::build`] planted, for tests to assert against.
#[derive(Debug, Clone)]
pub struct HostileLayout {
    /// The scratch directory.
    pub scratch: PathBuf,
    /// A directory outside the scratch dir that symlinks point into.
    pub outside: PathBuf,
    /// The secret file outside; its bytes must never be read.
    pub secret: PathBuf,
    /// Bytes of the secret file.
    pub secret_bytes: Vec<u8>,
    /// Workspace paths of the plain, harvestable files (UTF-8, non-empty,
    /// not hidden, not over-size), sorted.
    pub regular: Vec<String>,
    /// Path of the empty file.
    pub empty: String,
    /// Path of the over-size file and its size.
    pub oversize: (String, u64),
    /// Paths of the planted symlinks (file, directory, loop).
    pub symlinks: Vec<String>,
    /// Path of the FIFO.
    pub fifo: String,
    /// Hidden directories planted (`.git`, `.cache`).
    pub hidden: Vec<String>,
    /// Path of the deepest file.
    pub deep: String,
}

/// Builder of a hostile workspace.
#[derive(Debug, Clone)]
pub struct HostileWorkspace {
    plain_files: usize,
    many_files: usize,
    oversize_bytes: u64,
    depth: usize,
}

impl Default for HostileWorkspace {
    fn default() -> Self {
        Self {
            plain_files: 70,
            many_files: 0,
            oversize_bytes: 2 * 1024 * 1024,
            depth: 40,
        }
    }
}

impl HostileWorkspace {
    /// The default fixture: 70 plain files plus `report.md` sorting last,
    /// a 2 MiB over-size file, a 40-level deep path, and every hostile entry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also plants `n` small files under `many/` (e.g. 10,000).
    pub fn with_many_files(mut self, n: usize) -> Self {
        self.many_files = n;
        self
    }

    /// Size of the over-size file (set it above the harvest's limit).
    pub fn with_oversize_bytes(mut self, n: u64) -> Self {
        self.oversize_bytes = n;
        self
    }

    /// Plants everything under `scratch` (which must exist), with symlink
    /// targets in `outside` (which must exist and lie outside `scratch`).
    ///
    /// # Panics
    /// When the filesystem refuses; fixtures fail loudly.
    pub fn build(&self, scratch: &Path, outside: &Path) -> HostileLayout {
        let secret = outside.join("secret.txt");
        let secret_bytes = b"outside secret: must never be harvested".to_vec();
        std::fs::write(&secret, &secret_bytes).unwrap();
        std::fs::create_dir_all(outside.join("dir")).unwrap();
        std::fs::write(outside.join("dir/inner.txt"), b"also outside").unwrap();

        let mut regular = Vec::new();
        let write = |rel: &str, bytes: &[u8]| {
            let path = scratch.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
        };
        for i in 0..self.plain_files {
            let rel = format!("a{i:03}.txt");
            write(&rel, format!("file {i}\n").as_bytes());
            regular.push(rel);
        }
        write("report.md", b"# Report\n\nFindings.\n");
        regular.push("report.md".into());
        for i in 0..self.many_files {
            let rel = format!("many/f{i:05}.txt");
            write(&rel, b"x");
            regular.push(rel);
        }
        let deep_dir: Vec<String> = (1..=self.depth).map(|d| format!("d{d}")).collect();
        let deep = format!("deep/{}/leaf.txt", deep_dir.join("/"));
        write(&deep, b"deep\n");
        regular.push(deep.clone());

        write("empty.txt", b"");
        let oversize = "big.bin".to_owned();
        let f = std::fs::File::create(scratch.join(&oversize)).unwrap();
        f.set_len(self.oversize_bytes).unwrap();

        let mut hidden = Vec::new();
        for dir in [".git", ".cache"] {
            write(&format!("{dir}/config"), b"hidden");
            write(&format!("{dir}/sub/object"), b"hidden too");
            hidden.push(dir.to_owned());
        }
        write(".env", b"SECRET=1");

        let symlinks = vec![
            "link-to-secret.txt".to_owned(),
            "link-to-dir".to_owned(),
            "loop/self".to_owned(),
        ];
        std::os::unix::fs::symlink(&secret, scratch.join(&symlinks[0])).unwrap();
        std::os::unix::fs::symlink(outside.join("dir"), scratch.join(&symlinks[1])).unwrap();
        std::fs::create_dir_all(scratch.join("loop")).unwrap();
        std::os::unix::fs::symlink(scratch.join("loop"), scratch.join(&symlinks[2])).unwrap();

        let fifo = "pipe.fifo".to_owned();
        let status = Command::new("mkfifo")
            .arg(scratch.join(&fifo))
            .status()
            .expect("mkfifo runs");
        assert!(status.success(), "mkfifo failed");

        // Names a BlobKey cannot carry: not UTF-8, and with a newline.
        std::fs::write(scratch.join(OsStr::from_bytes(b"bad-\xff-name.txt")), b"x").unwrap();
        std::fs::write(scratch.join("new\nline.txt"), b"x").unwrap();

        regular.sort();
        HostileLayout {
            scratch: scratch.to_path_buf(),
            outside: outside.to_path_buf(),
            secret,
            secret_bytes,
            regular,
            empty: "empty.txt".into(),
            oversize: (oversize, self.oversize_bytes),
            symlinks,
            fifo,
            hidden,
            deep,
        }
    }
}
