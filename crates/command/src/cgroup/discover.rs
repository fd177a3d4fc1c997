//! Finding the cgroup korvus may make run cgroups beneath: cgroup v2 where
//! a delegated subtree is writable (read from `cgroup.controllers`, not
//! from the mount), cgroup v1 where that is what the host has, or a root
//! the embedder named ([`Limits::cgroup_root`](crate::Limits::cgroup_root)).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::{write, Hierarchy, V1Dirs};

/// `statfs` magic of a cgroup v2 filesystem.
const CGROUP2_MAGIC: u64 = 0x6367_7270;
/// `statfs` magic of a cgroup v1 filesystem.
const CGROUP1_MAGIC: u64 = 0x0027_e0eb;

/// The hierarchy of this process, found once per process (the v2 leaf
/// move happens once too).
pub(crate) fn own() -> Result<Hierarchy, String> {
    static OWN: OnceLock<Result<Hierarchy, String>> = OnceLock::new();
    OWN.get_or_init(|| {
        let cgroups = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
        let found = from_proc(&cgroups, &mounts);
        match found {
            Ok(Hierarchy::V2 { base }) => v2_leaf(&base).map(|()| Hierarchy::V2 { base }),
            other => other,
        }
    })
    .clone()
}

/// The hierarchy at a root the embedder named.
pub(crate) fn at(root: &Path) -> Result<Hierarchy, String> {
    if root.join("cgroup.controllers").is_file() {
        is_cgroupfs(root, CGROUP2_MAGIC)?;
        return v2_usable(root).map(|()| Hierarchy::V2 {
            base: root.to_path_buf(),
        });
    }
    let dir = |name: &str| {
        let d = root.join(name);
        (d.join("cgroup.procs").is_file() && is_cgroupfs(&d, CGROUP1_MAGIC).is_ok()).then_some(d)
    };
    let dirs = V1Dirs {
        memory: dir("memory"),
        pids: dir("pids"),
        cpu: dir("cpu"),
        cpuacct: dir("cpuacct"),
        freezer: dir("freezer"),
    };
    if dirs.memory.is_none() && dirs.pids.is_none() {
        return Err(format!(
            "{} is not a cgroup: no cgroup.controllers (v2) and no memory/ or pids/ \
             hierarchy (v1) in a cgroup filesystem",
            root.display()
        ));
    }
    Ok(Hierarchy::V1(dirs))
}

fn is_cgroupfs(dir: &Path, magic: u64) -> Result<(), String> {
    let stat =
        rustix::fs::statfs(dir).map_err(|e| format!("cannot statfs {}: {e}", dir.display()))?;
    #[allow(clippy::unnecessary_cast)] // `f_type`'s width differs by target.
    let kind = stat.f_type as u64;
    if kind == magic {
        Ok(())
    } else {
        Err(format!("{} is not in a cgroup filesystem", dir.display()))
    }
}

/// The hierarchy described by `/proc/self/cgroup` (`cgroups`) and
/// `/proc/self/mountinfo` (`mounts`): v2 when its cgroup offers the
/// memory and pids controllers, else v1 with what it has.
pub(crate) fn from_proc(cgroups: &str, mounts: &str) -> Result<Hierarchy, String> {
    let mounts = parse_mounts(mounts);
    let mut v2_reason = "no cgroup v2 mount".to_owned();
    if let Some(path) = cgroups.lines().find_map(|l| l.strip_prefix("0::")) {
        if let Some(m) = mounts.iter().find(|m| m.fstype == "cgroup2") {
            let base = m.join(path);
            match v2_usable(&base) {
                Ok(()) => return Ok(Hierarchy::V2 { base }),
                Err(e) => v2_reason = e,
            }
        }
    }
    let mut dirs = V1Dirs::default();
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        for controller in controllers.split(',') {
            let Some(mount) = mounts
                .iter()
                .find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == controller))
            else {
                continue;
            };
            let dir = Some(mount.join(path));
            match controller {
                "memory" => dirs.memory = dir,
                "pids" => dirs.pids = dir,
                "cpu" => dirs.cpu = dir,
                "cpuacct" => dirs.cpuacct = dir,
                "freezer" => dirs.freezer = dir,
                _ => {}
            }
        }
    }
    if dirs.memory.is_none() && dirs.pids.is_none() {
        return Err(format!(
            "no usable cgroup: {v2_reason}, and no cgroup v1 memory or pids hierarchy"
        ));
    }
    Ok(Hierarchy::V1(dirs))
}

/// Whether the v2 cgroup `base` offers the memory and pids controllers.
fn v2_usable(base: &Path) -> Result<(), String> {
    let controllers = std::fs::read_to_string(base.join("cgroup.controllers"))
        .map_err(|e| format!("cannot read {}/cgroup.controllers: {e}", base.display()))?;
    let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
    if has("memory") && has("pids") {
        Ok(())
    } else {
        Err(format!(
            "cgroup v2 at {} does not delegate the memory and pids controllers (it offers: {})",
            base.display(),
            controllers.trim()
        ))
    }
}

/// Moves this process into a leaf of its own beneath `base`
/// (`korvus.<incarnation>/manager`), so `base` holds no process and may enable
/// controllers for its children (cgroup v2 has no internal processes).
fn v2_leaf(base: &Path) -> Result<(), String> {
    let leaf = super::owner::own_dir(base)?.join("manager");
    std::fs::create_dir_all(&leaf)
        .map_err(|e| format!("cannot make the cgroup {}: {e}", leaf.display()))?;
    write(&leaf.join("cgroup.procs"), &std::process::id().to_string())
        .map_err(|e| format!("cannot move korvus into its leaf cgroup: {e}"))
}

/// One line of `/proc/self/mountinfo`, the parts read here.
#[derive(Debug)]
struct Mount {
    root: String,
    point: PathBuf,
    fstype: String,
    options: String,
}

impl Mount {
    /// The directory of cgroup `path` (as `/proc/self/cgroup` names it)
    /// in this mount.
    fn join(&self, path: &str) -> PathBuf {
        let rel = path.strip_prefix(self.root.as_str()).unwrap_or(path);
        self.point.join(rel.trim_start_matches('/'))
    }
}

fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fields: Vec<&str> = left.split(' ').collect();
            let mut right = right.split(' ');
            let fstype = right.next()?.to_owned();
            let _source = right.next()?;
            Some(Mount {
                root: fields.get(3)?.to_string(),
                point: PathBuf::from(fields.get(4)?),
                fstype,
                options: right.next().unwrap_or_default().to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS_V1: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn cgroup_v1_paths_differ_per_controller() {
        let cgroups = "8:pids:/\n6:freezer:/\n4:memory:/api/c5\n1:cpu,cpuacct:/x\n0::/\n";
        let Ok(Hierarchy::V1(dirs)) = from_proc(cgroups, MOUNTS_V1) else {
            panic!("v1 expected");
        };
        assert_eq!(
            dirs.memory.as_deref(),
            Some(Path::new("/sys/fs/cgroup/memory/api/c5"))
        );
        assert_eq!(dirs.pids.as_deref(), Some(Path::new("/sys/fs/cgroup/pids")));
        assert_eq!(
            dirs.cpu.as_deref(),
            Some(Path::new("/sys/fs/cgroup/cpu,cpuacct/x"))
        );
        assert_eq!(dirs.cpu, dirs.cpuacct);
        assert!(dirs.freezer.is_some());
    }

    #[test]
    fn a_mount_of_a_subtree_strips_its_root() {
        let mounts = "40 31 0:36 /docker/abc /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
        let Ok(Hierarchy::V1(dirs)) = from_proc("3:pids:/docker/abc/run\n", mounts) else {
            panic!("v1 expected");
        };
        assert_eq!(
            dirs.pids.as_deref(),
            Some(Path::new("/sys/fs/cgroup/pids/run"))
        );
    }

    #[test]
    fn nothing_usable_says_why() {
        let mounts = "41 31 0:38 / /nonexistent-cgroup2 rw - cgroup2 cgroup2 rw\n";
        let err = from_proc("0::/\n", mounts).unwrap_err();
        assert!(err.contains("no usable cgroup"), "{err}");
        assert!(err.contains("cgroup.controllers"), "{err}");
    }

    /// A cgroup v2 mount at a temp dir (a fake cgroupfs: plain files),
    /// with this process's cgroup `/svc` offering `controllers`.
    fn fake_v2(controllers: &str) -> (tempfile::TempDir, String) {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("svc")).unwrap();
        std::fs::write(root.path().join("svc/cgroup.controllers"), controllers).unwrap();
        let mounts = format!(
            "41 31 0:38 / {} rw - cgroup2 cgroup2 rw\n",
            root.path().display()
        );
        (root, mounts)
    }

    #[test]
    fn v2_is_chosen_where_cgroup_controllers_delegates_memory_and_pids() {
        let (root, mounts) = fake_v2("cpu io memory pids\n");
        let Ok(Hierarchy::V2 { base }) = from_proc("0::/svc\n", &mounts) else {
            panic!("v2 expected");
        };
        assert_eq!(base, root.path().join("svc"));
    }

    #[test]
    fn v2_without_memory_and_pids_falls_back_to_v1_and_says_why() {
        let (_root, v2) = fake_v2("cpu io\n");
        let mounts = format!("{v2}{MOUNTS_V1}");
        let Ok(Hierarchy::V1(dirs)) = from_proc("4:memory:/\n8:pids:/\n0::/svc\n", &mounts) else {
            panic!("v1 expected");
        };
        assert!(dirs.memory.is_some() && dirs.pids.is_some());
        // Neither: the reason names what v2 offered.
        let err = from_proc("0::/svc\n", &fake_v2("cpu io\n").1).unwrap_err();
        assert!(
            err.contains("does not delegate") && err.contains("cpu io"),
            "{err}"
        );
    }

    #[test]
    fn v2_moves_this_process_into_a_leaf_of_its_own() {
        let (root, _) = fake_v2("memory pids\n");
        let base = root.path().join("svc");
        v2_leaf(&base).unwrap();
        let procs = base
            .join(format!("korvus.{}", super::super::owner::incarnation()))
            .join("manager/cgroup.procs");
        assert_eq!(
            std::fs::read_to_string(procs).unwrap().trim(),
            std::process::id().to_string()
        );
    }

    #[test]
    fn a_directory_that_is_not_a_cgroup_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = at(dir.path()).unwrap_err();
        assert!(err.contains("is not a cgroup"), "{err}");
        std::fs::write(dir.path().join("cgroup.controllers"), "memory pids\n").unwrap();
        let err = at(dir.path()).unwrap_err();
        assert!(err.contains("not in a cgroup filesystem"), "{err}");
    }
}
