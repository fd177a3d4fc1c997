//! Packing a scratch dir into a `.tar.gz` written to an unnamed temporary
//! file while walking, under a size cap.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use flate2::write::GzEncoder;
use flate2::Compression;
use korvus_blob::Sha256Digest;
use sha2::{Digest, Sha256};
use tar::{EntryType, Header, HeaderMode};

use super::{ArchiveConfig, WorkspaceArchive};
use crate::{Result, WorkspaceError};

/// The compressed stream as it goes to the temporary file: counted against
/// the cap and hashed on the way.
struct CappedFile {
    out: BufWriter<File>,
    written: u64,
    limit: u64,
    hasher: Sha256,
    /// Set when a write would pass the cap; the error that stops the walk
    /// may reach the caller wrapped, so this flag is what says why.
    exceeded: Arc<AtomicBool>,
}

impl Write for CappedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.written + buf.len() as u64 > self.limit {
            self.exceeded.store(true, Ordering::Relaxed);
            return Err(io::Error::other("workspace archive is over its size cap"));
        }
        let n = self.out.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

type Builder = tar::Builder<GzEncoder<CappedFile>>;

struct Packer {
    builder: Builder,
    files: u64,
    dirs: u64,
    symlinks: u64,
    specials: u64,
    unreadable: Vec<(PathBuf, String)>,
    changed: Vec<PathBuf>,
}

/// Packs `dir` as [`archive_with`](super::archive_with) documents; blocking.
pub(super) fn pack(dir: &Path, config: &ArchiveConfig) -> Result<WorkspaceArchive> {
    let meta = fs::symlink_metadata(dir).map_err(|e| WorkspaceError::io("archive", dir, e))?;
    if !meta.is_dir() {
        return Err(WorkspaceError::io(
            "archive",
            dir,
            io::Error::new(io::ErrorKind::InvalidInput, "not a directory"),
        ));
    }
    // Unnamed (O_TMPFILE, or unlinked at once): it never shows up in the
    // walk below, and nothing is left behind whatever happens.
    let file = tempfile::tempfile_in(dir)
        .map_err(|e| WorkspaceError::io("create the archive's temporary file in", dir, e))?;
    let exceeded = Arc::new(AtomicBool::new(false));
    let sink = CappedFile {
        out: BufWriter::new(file),
        written: 0,
        limit: config.max_bytes,
        hasher: Sha256::new(),
        exceeded: Arc::clone(&exceeded),
    };
    let mut builder = tar::Builder::new(GzEncoder::new(sink, Compression::default()));
    builder.mode(HeaderMode::Deterministic);
    builder.follow_symlinks(false);
    let mut packer = Packer {
        builder,
        files: 0,
        dirs: 0,
        symlinks: 0,
        specials: 0,
        unreadable: Vec::new(),
        changed: Vec::new(),
    };
    let too_large = |e: WorkspaceError| {
        if exceeded.load(Ordering::Relaxed) {
            WorkspaceError::ArchiveTooLarge {
                limit: config.max_bytes,
            }
        } else {
            e
        }
    };
    let names = sorted_names(dir).map_err(|e| WorkspaceError::io("archive", dir, e))?;
    for name in names {
        packer.entry(dir, &PathBuf::from(name)).map_err(too_large)?;
    }
    packer.finish(dir).map_err(too_large)
}

fn sorted_names(dir: &Path) -> io::Result<Vec<OsString>> {
    let mut names = fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<Vec<_>>>()?;
    names.sort();
    Ok(names)
}

impl Packer {
    /// Archives `rel` (relative to `root`) and, for a directory, what is below.
    fn entry(&mut self, root: &Path, rel: &Path) -> Result<()> {
        let full = root.join(rel);
        let meta = match fs::symlink_metadata(&full) {
            Ok(m) => m,
            Err(e) => {
                self.unreadable.push((rel.to_path_buf(), e.to_string()));
                return Ok(());
            }
        };
        let kind = meta.file_type();
        if kind.is_symlink() {
            self.symlinks += 1;
        } else if kind.is_dir() {
            let names = match sorted_names(&full) {
                Ok(n) => n,
                Err(e) => {
                    self.unreadable.push((rel.to_path_buf(), e.to_string()));
                    return Ok(());
                }
            };
            let mut header = Header::new_gnu();
            header.set_metadata_in_mode(&meta, HeaderMode::Deterministic);
            header.set_entry_type(EntryType::Directory);
            header.set_size(0);
            self.append(rel, &mut header, io::empty(), root)?;
            self.dirs += 1;
            for name in names {
                self.entry(root, &rel.join(name))?;
            }
        } else if kind.is_file() {
            self.file(root, rel, &meta)?;
        } else {
            self.specials += 1;
        }
        Ok(())
    }

    /// Streams one regular file into the archive. Its size is taken once,
    /// from the opened file, and the entry holds exactly that many bytes
    /// whatever the file does meanwhile, so the archive stays well-formed.
    fn file(&mut self, root: &Path, rel: &Path, inspected: &fs::Metadata) -> Result<()> {
        let (file, size) = match open_same_file(&root.join(rel), inspected) {
            Ok(opened) => opened,
            Err(e) => {
                self.unreadable.push((rel.to_path_buf(), e.to_string()));
                return Ok(());
            }
        };
        let mut header = Header::new_gnu();
        header.set_metadata_in_mode(inspected, HeaderMode::Deterministic);
        header.set_entry_type(EntryType::Regular);
        header.set_size(size);
        let mut data = ExactLen::new(file, size);
        self.append(rel, &mut header, &mut data, root)?;
        if data.changed {
            self.changed.push(rel.to_path_buf());
        }
        self.files += 1;
        Ok(())
    }

    fn append(
        &mut self,
        rel: &Path,
        header: &mut Header,
        data: impl Read,
        root: &Path,
    ) -> Result<()> {
        self.builder
            .append_data(header, rel, data)
            .map_err(|e| WorkspaceError::io("archive", root.join(rel), e))
    }

    /// Ends the tar and gzip streams and hands back the temporary file with
    /// what was counted.
    fn finish(self, dir: &Path) -> Result<WorkspaceArchive> {
        let compress = |e| WorkspaceError::io("compress archive of", dir, e);
        let sink = self
            .builder
            .into_inner()
            .and_then(GzEncoder::finish)
            .map_err(compress)?;
        let CappedFile {
            out,
            written,
            hasher,
            ..
        } = sink;
        let file = out.into_inner().map_err(|e| compress(e.into_error()))?;
        Ok(WorkspaceArchive {
            file,
            size: written,
            sha256: Sha256Digest::from_bytes(hasher.finalize().into()),
            files: self.files,
            dirs: self.dirs,
            symlinks_left_out: self.symlinks,
            specials_left_out: self.specials,
            unreadable: self.unreadable,
            changed: self.changed,
        })
    }
}

/// Opens a file for reading, refusing it if what was opened is not what was
/// inspected (it was swapped for something else, e.g. a symlink, meanwhile).
/// Returns it with its size when opened.
fn open_same_file(path: &Path, inspected: &fs::Metadata) -> io::Result<(File, u64)> {
    let file = File::open(path)?;
    let opened = file.metadata()?;
    if !opened.is_file() || opened.dev() != inspected.dev() || opened.ino() != inspected.ino() {
        return Err(io::Error::other("file was replaced while being archived"));
    }
    Ok((file, opened.len()))
}

/// Exactly `len` bytes of a file: what it has beyond that is cut off, and
/// if it shrank the rest is zeros. `changed` says either happened.
struct ExactLen {
    file: io::Take<File>,
    remaining: u64,
    changed: bool,
}

impl ExactLen {
    fn new(file: File, len: u64) -> Self {
        Self {
            // One byte more than the entry holds, to notice growth.
            file: file.take(len + 1),
            remaining: len,
            changed: false,
        }
    }
}

impl Read for ExactLen {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 {
            // Whatever is still there is growth since the size was taken.
            if !self.changed && self.file.read(&mut [0u8; 1])? > 0 {
                self.changed = true;
            }
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        let n = match self.file.read(&mut buf[..want])? {
            0 => {
                // The file shrank: pad with zeros to the size in the header.
                self.changed = true;
                buf[..want].fill(0);
                want
            }
            n => n,
        };
        self.remaining -= n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_of(bytes: &[u8]) -> File {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(bytes).unwrap();
        std::io::Seek::rewind(&mut file).unwrap();
        file
    }

    fn read_all(mut r: ExactLen) -> (Vec<u8>, bool) {
        let mut out = Vec::new();
        r.read_to_end(&mut out).unwrap();
        (out, r.changed)
    }

    #[test]
    fn exact_len_yields_exactly_the_size_taken_when_opened() {
        assert_eq!(
            read_all(ExactLen::new(file_of(b"0123456789"), 10)),
            (b"0123456789".to_vec(), false)
        );
        // Grown since: cut off, noted.
        assert_eq!(
            read_all(ExactLen::new(file_of(b"0123456789"), 4)),
            (b"0123".to_vec(), true)
        );
        // Shrunk since: padded with zeros, noted.
        let (bytes, changed) = read_all(ExactLen::new(file_of(b"0123"), 6));
        assert_eq!(bytes, b"0123\0\0");
        assert!(changed);
        assert_eq!(
            read_all(ExactLen::new(file_of(b""), 0)),
            (Vec::new(), false)
        );
    }
}
