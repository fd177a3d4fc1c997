//! A file's identity by `stat`: what a checkpoint compares to tell a file
//! it already stored from one that changed, without reading it.

use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How close to its read a file's timestamps may be before its `stat`
/// cannot vouch for its bytes: a write in the same tick of the file
/// system's clock as the read leaves size and times as they were
/// (git's "racy clean" problem). The kernel stamps files from a coarse
/// clock (a few milliseconds behind), and some file systems keep seconds
/// only, so one second is the margin.
pub(crate) const RACY_WINDOW: Duration = Duration::from_secs(1);

/// Size, modification and change times (seconds and nanoseconds) and inode
/// of a file, as `lstat`/`fstat` report them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStat {
    /// Size in bytes.
    pub size: u64,
    /// Modification time.
    pub mtime: (i64, i64),
    /// Status change time (moves with every write, rename and chmod).
    pub ctime: (i64, i64),
    /// Inode: a file replaced by another of the same size and times differs.
    pub ino: u64,
}

impl FileStat {
    /// The stat of `md`.
    pub(crate) fn of(md: &std::fs::Metadata) -> Self {
        Self {
            size: md.len(),
            mtime: (md.mtime(), md.mtime_nsec()),
            ctime: (md.ctime(), md.ctime_nsec()),
            ino: md.ino(),
        }
    }

    /// The stat of `st`, as `fstatat` reports it (the same fields as
    /// [`of`](Self::of) reads from a `Metadata`).
    pub(crate) fn of_stat(st: &rustix::fs::Stat) -> Self {
        // The field types differ by platform; the conversions are `std`'s
        // own (`MetadataExt`).
        #[allow(clippy::unnecessary_cast)]
        Self {
            size: st.st_size as u64,
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
            ino: st.st_ino as u64,
        }
    }

    /// Whether a file read at `read_at` with this stat might have changed
    /// since without its stat showing it: its modification or change time
    /// is within [`RACY_WINDOW`] of the read (or after it). Such a file is
    /// hashed, not trusted by its stat, the next time it is judged.
    pub(crate) fn racy(&self, read_at: SystemTime) -> bool {
        let edge = read_at
            .checked_sub(RACY_WINDOW)
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or((0, 0), |d| {
                (
                    i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                    i64::from(d.subsec_nanos()),
                )
            });
        self.mtime >= edge || self.ctime >= edge
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_file_is_racy_and_an_old_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let stat = FileStat::of(&std::fs::metadata(&path).unwrap());
        assert_eq!(stat.size, 1);
        assert!(stat.racy(SystemTime::now()));
        assert!(!stat.racy(SystemTime::now() + RACY_WINDOW * 2));
    }
}
