//! A throwaway PostgreSQL cluster for the tests.
//!
//! `initdb` into a fresh directory under `target/`, `pg_ctl start` listening
//! on 127.0.0.1 (a free port) and on a unix socket inside that directory,
//! trust authentication for the one role `korvus`. The tests read
//! `KORVUS_TEST_DATABASE_URL`. Stopping runs `pg_ctl stop -m fast` (then
//! `-m immediate` if that fails) and removes the directory.
//!
//! PostgreSQL refuses to run as root, so when this process is root the
//! cluster belongs to an unprivileged user (`postgres` if it exists, else
//! `nobody`) and every PostgreSQL program runs through `runuser`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};

use crate::services::{interrupted, Service};

/// The variable the tests read.
const URL_VAR: &str = "KORVUS_TEST_DATABASE_URL";
/// The superuser role `initdb` creates.
const ROLE: &str = "korvus";
/// How long `pg_ctl` waits for start-up and shutdown, in seconds.
const WAIT_SECS: &str = "60";

/// A running cluster.
pub(crate) struct Postgres {
    bin: PathBuf,
    dir: PathBuf,
    run_as: Option<String>,
    port: u16,
    /// The server's pid, read from `postmaster.pid` once it is up.
    postmaster: Option<u32>,
    running: bool,
    removed: bool,
}

/// Starts a fresh cluster and waits until it accepts connections.
pub(crate) fn start() -> Result<Postgres> {
    let bin = find_bin_dir()?;
    let run_as = unprivileged_user()?;
    let dir = fresh_dir(run_as.as_deref())?;
    let mut pg = Postgres {
        bin,
        dir,
        run_as,
        port: 0,
        postmaster: None,
        running: false,
        removed: false,
    };
    // From here on, an error drops `pg`, which stops it and removes the dir.
    pg.init()?;
    let mut last_err = None;
    // A free port can be taken by someone else between our probe and the
    // server's bind; try a few.
    for _ in 0..3 {
        if interrupted() {
            bail!("interrupted while starting PostgreSQL");
        }
        pg.port = free_port()?;
        match pg.start_server() {
            Ok(()) => {
                last_err = None;
                break;
            }
            Err(e) => last_err = Some(e),
        }
    }
    if let Some(e) = last_err {
        return Err(e.context(format!(
            "PostgreSQL did not start; its log is {}",
            pg.log_file().display()
        )));
    }
    if interrupted() {
        bail!("interrupted while starting PostgreSQL");
    }
    eprintln!(
        "xtask: PostgreSQL running on 127.0.0.1:{} (data in {})",
        pg.port,
        pg.dir.display()
    );
    Ok(pg)
}

impl Postgres {
    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn log_file(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    /// A command running PostgreSQL's program `name`, as the cluster's owner.
    fn pg_command(&self, name: &str) -> Command {
        let program = self.bin.join(name);
        match &self.run_as {
            Some(user) => {
                let mut cmd = Command::new("runuser");
                cmd.args(["-u", user, "--"]).arg(program);
                cmd
            }
            None => Command::new(program),
        }
    }

    fn init(&mut self) -> Result<()> {
        let out = self
            .pg_command("initdb")
            .arg("-D")
            .arg(self.data())
            .args([
                "-U",
                ROLE,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                // A throwaway cluster needs no fsync.
                "--no-sync",
            ])
            .output()
            .context("could not run initdb")?;
        if !out.status.success() {
            bail!(
                "initdb failed with {}:\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    fn start_server(&mut self) -> Result<()> {
        // pg_ctl hands these to a shell: the socket directory is quoted.
        let options = format!(
            "-h 127.0.0.1 -p {} -k '{}' -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections=200",
            self.port,
            self.dir.display()
        );
        // Considered running from here on, so that even a start that timed
        // out half-way is stopped.
        self.running = true;
        let status = self
            .pg_command("pg_ctl")
            .arg("start")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.log_file())
            .args(["-w", "-t", WAIT_SECS, "-o", &options])
            .stdout(std::process::Stdio::null())
            .status()
            .context("could not run pg_ctl start")?;
        if !status.success() {
            // Make sure no half-started server keeps the data dir.
            let _ = self.pg_ctl_stop("immediate");
            self.running = false;
            bail!("pg_ctl start failed with {status}");
        }
        self.postmaster = std::fs::read_to_string(self.data().join("postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse().ok());
        Ok(())
    }

    /// Whether `pid` is still this cluster's server (and not a reused pid).
    fn is_ours(&self, pid: u32) -> bool {
        let data = self.data();
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
            cmdline
                .split(|&b| b == 0)
                .any(|arg| arg == data.as_os_str().as_encoded_bytes())
        })
    }

    fn pg_ctl_stop(&self, mode: &str) -> Result<()> {
        let status = self
            .pg_command("pg_ctl")
            .arg("stop")
            .arg("-D")
            .arg(self.data())
            .args(["-m", mode, "-w", "-t", WAIT_SECS])
            .stdout(std::process::Stdio::null())
            .status()
            .context("could not run pg_ctl stop")?;
        if !status.success() {
            bail!("pg_ctl stop -m {mode} failed with {status}");
        }
        Ok(())
    }
}

impl Service for Postgres {
    fn env(&self) -> Vec<(String, String)> {
        vec![(
            URL_VAR.to_owned(),
            format!("postgres://{ROLE}@127.0.0.1:{}/postgres", self.port),
        )]
    }

    fn stop(&mut self) -> Result<()> {
        let mut result = Ok(());
        if self.running {
            if self.data().join("postmaster.pid").exists() {
                if let Err(fast) = self.pg_ctl_stop("fast") {
                    eprintln!("xtask: {fast:#}; stopping PostgreSQL with -m immediate");
                    result = self.pg_ctl_stop("immediate");
                }
            } else if let Some(pid) = self.postmaster.filter(|&pid| self.is_ours(pid)) {
                // The pid file was deleted under the server, so pg_ctl cannot
                // reach it; stop it directly (fast shutdown).
                result = crate::run_cmd(Command::new("kill").args(["-INT", &pid.to_string()]));
            }
            if let Some(pid) = self.postmaster {
                wait_until_reaped(pid);
            }
        }
        self.running = false;
        if !self.removed {
            self.removed = true;
            if let Err(e) = std::fs::remove_dir_all(&self.dir) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    let e = anyhow::Error::new(e)
                        .context(format!("could not remove {}", self.dir.display()));
                    result = result.and(Err(e));
                }
            }
        }
        result
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("xtask: stopping PostgreSQL: {e:#}");
        }
    }
}

/// The directory holding `initdb` and `pg_ctl`: from `PATH` (following a
/// symlink to the real installation), else the newest
/// `/usr/lib/postgresql/<version>/bin`.
fn find_bin_dir() -> Result<PathBuf> {
    let has_both = |dir: &Path| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file();
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let initdb = dir.join("initdb");
            if initdb.is_file() {
                // Debian links them into PATH by hand at best; the real
                // directory has `postgres` next to them.
                let real = std::fs::canonicalize(&initdb)
                    .ok()
                    .and_then(|p| p.parent().map(Path::to_path_buf))
                    .unwrap_or(dir);
                if has_both(&real) {
                    return Ok(real);
                }
            }
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_both(bin))
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, bin)) => Ok(bin),
        None => bail!(
            "PostgreSQL is not installed: no initdb/pg_ctl on PATH or under \
             /usr/lib/postgresql/*/bin. Install the server, e.g. \
             `apt-get install postgresql` (Debian/Ubuntu), `dnf install postgresql-server` \
             (Fedora) or `brew install postgresql` (macOS), then run `cargo xtask test` again"
        ),
    }
}

/// `None` when this process may run PostgreSQL itself; otherwise (root) the
/// user the cluster runs as.
fn unprivileged_user() -> Result<Option<String>> {
    let out = Command::new("id")
        .arg("-u")
        .output()
        .context("could not run `id -u`")?;
    let uid = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if uid != "0" {
        return Ok(None);
    }
    for user in ["postgres", "nobody"] {
        let exists = Command::new("id")
            .arg("-u")
            .arg(user)
            .output()
            .is_ok_and(|o| o.status.success());
        if exists {
            return Ok(Some(user.to_owned()));
        }
    }
    bail!(
        "running as root, and PostgreSQL refuses to: create an unprivileged user \
         `postgres` (e.g. `useradd --system postgres`) for the test cluster"
    )
}

/// A new, empty directory for the cluster, owned by the user it runs as.
///
/// It lives under `target/korvus-postgres/` so `cargo clean` sweeps up after
/// a run that was killed. That user must be able to reach it; when a parent
/// directory is closed to it (a checkout under `/root`, say) the system's
/// temporary directory is used instead.
fn fresh_dir(run_as: Option<&str>) -> Result<PathBuf> {
    let stamp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let name = format!("pg-{}-{stamp}", std::process::id());
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    let under_target = target.join("korvus-postgres").join(&name);
    std::fs::create_dir_all(&under_target)
        .with_context(|| format!("could not create {}", under_target.display()))?;
    let under_target = std::fs::canonicalize(&under_target)
        .with_context(|| format!("could not resolve {}", under_target.display()))?;
    let Some(user) = run_as else {
        return Ok(under_target);
    };
    if give_to(user, &under_target)? {
        return Ok(under_target);
    }
    let _ = std::fs::remove_dir_all(&under_target);
    let tmp = std::env::temp_dir().join(format!("korvus-{name}"));
    std::fs::create_dir_all(&tmp).with_context(|| format!("could not create {}", tmp.display()))?;
    if give_to(user, &tmp)? {
        return Ok(tmp);
    }
    let _ = std::fs::remove_dir_all(&tmp);
    bail!(
        "user {user} cannot write to {} nor {}; PostgreSQL needs a directory it owns",
        under_target.display(),
        tmp.display()
    )
}

/// Hands `dir` to `user` (mode 0700, as PostgreSQL wants its data's parent
/// private too); `false` when `user` still cannot write there.
fn give_to(user: &str, dir: &Path) -> Result<bool> {
    crate::run_cmd(Command::new("chown").arg(format!("{user}:")).arg(dir))?;
    crate::run_cmd(Command::new("chmod").arg("0700").arg(dir))?;
    Ok(Command::new("runuser")
        .args(["-u", user, "--", "test", "-w"])
        .arg(dir)
        .status()
        .with_context(|| format!("could not run runuser (util-linux) as {user}"))?
        .success())
}

/// Waits (a few seconds at most) until the stopped postmaster, which is not
/// our child, has been reaped by its parent, so nothing named `postgres` —
/// not even a zombie — outlives `cargo xtask test`.
fn wait_until_reaped(pid: u32) {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    for _ in 0..100 {
        if !proc_dir.exists() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("could not find a free port")?;
    Ok(listener.local_addr()?.port())
}
