//! Files as put bodies: the blocking loops behind
//! [`BlobStore::put_file`](crate::BlobStore::put_file) that hash a file or
//! copy it while hashing, each byte read once.

use std::io::{self, Read, Write};

use sha2::{Digest, Sha256};

use crate::Sha256Digest;

/// Size of the buffer the blocking loops read through: small enough to
/// stay in a core's cache while it is hashed, large enough that a
/// gigabyte is a few thousand reads.
pub(crate) const FILE_CHUNK: usize = 256 * 1024;

/// Reads `file` from its current position, hashing and handing each chunk
/// to `sink`, for at most `len + 1` bytes. `Ok(Some(digest))` when it held
/// exactly `len` bytes, `Ok(None)` when it ended early or went on (it
/// changed since its length was taken). Blocking.
pub(crate) fn read_hashing(
    file: &mut std::fs::File,
    len: u64,
    mut sink: impl FnMut(&[u8]) -> io::Result<()>,
) -> io::Result<Option<Sha256Digest>> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; FILE_CHUNK];
    let mut reader = file.take(len.saturating_add(1));
    let mut seen = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        seen += n as u64;
        if seen > len {
            return Ok(None);
        }
        hasher.update(&buf[..n]);
        sink(&buf[..n])?;
    }
    Ok((seen == len).then(|| Sha256Digest::from_bytes(hasher.finalize().into())))
}

/// The SHA-256 of the `len` bytes of `file` from its current position, or
/// `None` when it does not hold exactly `len` bytes from there (it changed
/// since its length was taken). Reads the file once through a small
/// buffer; blocking, so call it on a blocking thread. The position is left
/// wherever the read ended.
///
/// # Errors
/// When reading fails.
pub fn digest_of_file(file: &mut std::fs::File, len: u64) -> io::Result<Option<Sha256Digest>> {
    read_hashing(file, len, |_| Ok(()))
}

/// Copies the `len` bytes of `file` from its current position into `to`,
/// hashing them on the way (each byte read once), and returns their
/// SHA-256; `None` as [`digest_of_file`]. Blocking.
///
/// # Errors
/// When reading or writing fails.
pub fn copy_and_hash(
    file: &mut std::fs::File,
    to: &mut impl Write,
    len: u64,
) -> io::Result<Option<Sha256Digest>> {
    read_hashing(file, len, |chunk| to.write_all(chunk))
}

/// Copies the `len` bytes of `from` (from its current position) into `to`,
/// hashing them on the way: each byte is read once. `Ok(None)` as
/// [`digest_of_file`]. A failure to write is an error of its own kind,
/// so the caller can tell the source from the target.
pub(crate) fn copy_hashing(
    from: &mut std::fs::File,
    to: &mut impl Write,
    len: u64,
) -> Result<Option<Sha256Digest>, CopyError> {
    let mut write_failed = None;
    let read = read_hashing(from, len, |chunk| {
        to.write_all(chunk).map_err(|e| {
            let kind = e.kind();
            write_failed = Some(e);
            io::Error::from(kind)
        })
    });
    match (read, write_failed) {
        (_, Some(e)) => Err(CopyError::Write(e)),
        (Err(e), None) => Err(CopyError::Read(e)),
        (Ok(digest), None) => Ok(digest),
    }
}

/// Which side of [`copy_hashing`] failed.
#[derive(Debug)]
pub(crate) enum CopyError {
    /// Reading the source.
    Read(io::Error),
    /// Writing the target.
    Write(io::Error),
}

#[cfg(test)]
mod tests {
    use std::io::{Seek, SeekFrom};

    use super::*;

    fn file_of(bytes: &[u8]) -> std::fs::File {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        f
    }

    #[test]
    fn a_file_of_the_declared_length_is_copied_and_hashed_once() {
        let bytes: Vec<u8> = (0..=255u8).cycle().take(FILE_CHUNK * 2 + 7).collect();
        let mut out = Vec::new();
        let digest = copy_hashing(&mut file_of(&bytes), &mut out, bytes.len() as u64).unwrap();
        assert_eq!(digest, Some(Sha256Digest::of(&bytes)));
        assert_eq!(out, bytes);
    }

    #[test]
    fn a_file_longer_or_shorter_than_declared_has_no_digest() {
        let len = 10u64;
        assert_eq!(
            digest_of_file(&mut file_of(b"0123456789x"), len).unwrap(),
            None
        );
        assert_eq!(
            digest_of_file(&mut file_of(b"012345678"), len).unwrap(),
            None
        );
        let mut f = file_of(b"skip0123456789");
        f.seek(SeekFrom::Start(4)).unwrap();
        assert_eq!(
            digest_of_file(&mut f, len).unwrap(),
            Some(Sha256Digest::of(b"0123456789"))
        );
    }

    #[test]
    fn a_failing_target_is_a_write_error() {
        struct Full;
        impl Write for Full {
            fn write(&mut self, _: &[u8]) -> io::Result<usize> {
                Err(io::Error::other("disk full"))
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let err = copy_hashing(&mut file_of(b"abc"), &mut Full, 3).unwrap_err();
        assert!(matches!(err, CopyError::Write(e) if e.to_string() == "disk full"));
    }
}
