//! Where the CLI keeps things, decided once per data dir: the data dir
//! itself (private to its owner) and the scratch root (where agents work,
//! which the agent user must be able to reach).
//!
//! A data dir korvus makes is 0700 whatever the umask; one that exists is
//! left as it is, with a warning when other users can read it. The scratch
//! root is `scratch` in the data dir — unless korvus runs as root and some
//! directory on the way to the data dir is closed to other users (a clone
//! in `/root`, a `mktemp -d` directory): an agent user such as `nobody`
//! could not reach it there, so the scratch root goes to a directory of
//! its own under [`SHARED_BASE`] (root's, 0711, never wiped at reboot, so
//! a salvage after a restart finds what was kept), and `scratch` in the
//! data dir becomes a link to it. The link is the record: every later
//! command of the same data dir follows it, after checking that what it
//! names is still root's and closed to writes by others.

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};

/// Where root's scratch roots for closed data dirs live.
pub(crate) const SHARED_BASE: &str = "/var/lib/korvus";

/// Makes the data dir at `path` when it is missing (0700, parents too),
/// and returns it canonical, with a warning when an existing one is open
/// to other users.
pub(crate) fn data_dir(path: &Path) -> Result<(PathBuf, Option<String>)> {
    let made = !path.exists();
    if made {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
            .with_context(|| format!("cannot create the data dir {}", path.display()))?;
    }
    let canonical = std::fs::canonicalize(path)
        .with_context(|| format!("cannot open the data dir {}", path.display()))?;
    let mode = std::fs::metadata(&canonical)?.permissions().mode() & 0o777;
    let warning = (!made && mode & 0o077 != 0).then(|| {
        format!(
            "the data dir {} is open to other users (mode {mode:o}): they can read its \
             reports and artifacts; `chmod 700 {}` to close it",
            canonical.display(),
            canonical.display()
        )
    });
    Ok((canonical, warning))
}

/// The scratch root of `data_dir` (canonical), made or found as the
/// module docs say.
pub(crate) fn scratch_root(data_dir: &Path) -> Result<PathBuf> {
    let inside = data_dir.join("scratch");
    match std::fs::symlink_metadata(&inside) {
        Ok(m) if m.file_type().is_symlink() => return shared(&inside),
        Ok(m) if m.is_dir() && !(closed_to_others(data_dir) && is_empty(&inside)) => {
            return Ok(inside)
        }
        Ok(m) if !m.is_dir() => bail!("{} is not a directory", inside.display()),
        _ => {}
    }
    if closed_to_others(data_dir) {
        match make_shared(&inside) {
            Ok(root) => return Ok(root),
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "no scratch root under {SHARED_BASE}; using the data dir")
            }
        }
    }
    std::fs::create_dir_all(&inside)
        .with_context(|| format!("cannot create the scratch root {}", inside.display()))?;
    Ok(inside)
}

/// Whether korvus is root and some directory from `/` to `dir` is closed
/// to other users (an agent user could not pass it).
fn closed_to_others(dir: &Path) -> bool {
    nix::unistd::geteuid().is_root()
        && dir
            .ancestors()
            .any(|d| std::fs::metadata(d).is_ok_and(|m| m.mode() & 0o001 == 0))
}

fn is_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_none())
}

/// A new scratch root under [`SHARED_BASE`], with `link` (an empty
/// `scratch` dir, or none) made a link to it.
fn make_shared(link: &Path) -> Result<PathBuf> {
    let base = Path::new(SHARED_BASE);
    match std::fs::DirBuilder::new().mode(0o711).create(base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {SHARED_BASE}")),
    }
    root_owned_dir(base)?;
    let root = base.join(format!("scratch-{}", uuid::Uuid::now_v7()));
    // A new name: made here, never taken over from someone else.
    std::fs::DirBuilder::new()
        .mode(0o711)
        .create(&root)
        .with_context(|| format!("cannot create {}", root.display()))?;
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o711))?;
    if link.is_dir() && !link.is_symlink() {
        // Empty (checked by the caller); another korvus may have taken it
        // away already.
        match std::fs::remove_dir(link) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("cannot replace {}", link.display())),
        }
    }
    match std::os::unix::fs::symlink(&root, link) {
        Ok(()) => Ok(root),
        // Another korvus of the same data dir linked its own first: that
        // one is the record; this one goes.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let _ = std::fs::remove_dir(&root);
            shared(link)
        }
        Err(e) => {
            Err(e).with_context(|| format!("cannot link {} to {}", link.display(), root.display()))
        }
    }
}

/// The scratch root the link `link` names, checked.
fn shared(link: &Path) -> Result<PathBuf> {
    let root = std::fs::read_link(link)
        .with_context(|| format!("cannot read the link {}", link.display()))?;
    if root.parent() != Some(Path::new(SHARED_BASE)) {
        bail!(
            "{} names {}, which is not a scratch root korvus made under {SHARED_BASE}",
            link.display(),
            root.display()
        );
    }
    root_owned_dir(Path::new(SHARED_BASE))?;
    root_owned_dir(&root)?;
    Ok(root)
}

/// Refuses `dir` unless it is a directory (not a link) of root's that no
/// one else may write to.
fn root_owned_dir(dir: &Path) -> Result<()> {
    let meta =
        std::fs::symlink_metadata(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    if !meta.is_dir() || meta.uid() != 0 || meta.mode() & 0o022 != 0 {
        bail!(
            "{} is not a directory of root's closed to writes by others (owner {}, mode {:o}): \
             refusing to put agents' scratch dirs there",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_data_dir_is_private_and_an_open_one_is_named() {
        let parent = tempfile::tempdir().unwrap();
        let fresh = parent.path().join("a/b");
        let (made, warning) = data_dir(&fresh).unwrap();
        assert_eq!(std::fs::metadata(&made).unwrap().mode() & 0o777, 0o700);
        assert!(warning.is_none());
        let open = parent.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        let (_, warning) = data_dir(&open).unwrap();
        assert!(warning.unwrap().contains("chmod 700"));
        assert_eq!(
            std::fs::metadata(&open).unwrap().mode() & 0o777,
            0o755,
            "left alone"
        );
    }

    #[test]
    fn a_closed_data_dir_gets_a_shared_scratch_root_as_root_and_keeps_it() {
        if !nix::unistd::geteuid().is_root() {
            // As another user the scratch root always stays in the data dir.
            let dir = tempfile::tempdir().unwrap();
            assert_eq!(
                scratch_root(dir.path()).unwrap(),
                dir.path().join("scratch")
            );
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let root = scratch_root(dir.path()).unwrap();
        assert!(root.starts_with(SHARED_BASE), "{}", root.display());
        let meta = std::fs::symlink_metadata(&root).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o711));
        assert_eq!(scratch_root(dir.path()).unwrap(), root, "decided once");
        // A link pointed elsewhere is refused.
        let other = dir.path().join("scratch");
        std::fs::remove_file(&other).unwrap();
        std::os::unix::fs::symlink("/tmp", &other).unwrap();
        assert!(scratch_root(dir.path()).is_err());
        std::fs::remove_dir(&root).unwrap();
        // Two at once on a fresh closed data dir: both end with the one
        // root the link names.
        let race = tempfile::tempdir().unwrap();
        std::fs::set_permissions(race.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let roots: Vec<PathBuf> = std::thread::scope(|s| {
            let a = s.spawn(|| scratch_root(race.path()).unwrap());
            let b = s.spawn(|| scratch_root(race.path()).unwrap());
            vec![a.join().unwrap(), b.join().unwrap()]
        });
        assert_eq!(roots[0], roots[1]);
        assert_eq!(
            std::fs::read_link(race.path().join("scratch")).unwrap(),
            roots[0]
        );
        std::fs::remove_dir(&roots[0]).unwrap();
        // An open data dir keeps its scratch root inside.
        let open = tempfile::tempdir().unwrap();
        std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            scratch_root(open.path()).unwrap(),
            open.path().join("scratch")
        );
    }
}
