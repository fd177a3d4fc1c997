//! The S3-compatible server of the tests: moto, from a Python virtualenv
//! under `target/` that is made once and reused.
//!
//! [`start`] makes sure `target/moto-venv` has `moto[server]==5.2.5`
//! (creating the virtualenv and running pip only when needed, under a lock
//! directory so concurrent runs do not race), runs
//! `python -m moto.server -H 127.0.0.1 -p <free port>` (the venv's interpreter), waits until `GET /moto-api/`
//! answers, and exports `KORVUS_TEST_S3_ENDPOINT`. [`Moto::stop`] kills it
//! by PID and waits for it.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};

use crate::services::{interrupted, Service};

/// The moto release the tests are written against.
const MOTO: &str = "moto[server]==5.2.5";
const MOTO_VERSION: &str = "5.2.5";
/// How long moto may take to answer after start (imports take a few seconds
/// on a busy machine).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long to wait for another run that is setting up the virtualenv.
const SETUP_LOCK_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// A running moto server.
pub(crate) struct Moto {
    child: Option<Child>,
    endpoint: String,
    log: PathBuf,
}

/// Starts moto, setting up its virtualenv first if needed.
pub(crate) fn start() -> Result<Moto> {
    let target = target_dir();
    let venv = target.join("moto-venv");
    ensure_installed(&target, &venv)?;
    let mut last_err = None;
    // A port found free can be taken before moto binds it; try a few.
    for _ in 0..3 {
        match launch(&target, &venv) {
            Ok(moto) => return Ok(moto),
            Err(e) if interrupted() => return Err(e),
            Err(e) => {
                eprintln!("xtask: moto did not start: {e:#}");
                last_err = Some(e);
            }
        }
    }
    Err(last_err
        .expect("the loop ran")
        .context("could not start moto (the S3-compatible test server)"))
}

impl Service for Moto {
    fn env(&self) -> Vec<(String, String)> {
        vec![("KORVUS_TEST_S3_ENDPOINT".into(), self.endpoint.clone())]
    }

    fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        // `kill` fails only when the process has already exited; `wait`
        // reaps it either way, so no zombie or server is left behind.
        let _ = child.kill();
        child
            .wait()
            .with_context(|| format!("waiting for moto (pid {}) to exit", child.id()))?;
        let _ = fs::remove_file(&self.log);
        Ok(())
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

pub(crate) fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
    }
}

/// Creates the virtualenv and installs moto unless that is already done.
fn ensure_installed(target: &Path, venv: &Path) -> Result<()> {
    let python = venv.join("bin/python");
    if moto_installed(&python) {
        return Ok(());
    }
    fs::create_dir_all(target).with_context(|| format!("creating {}", target.display()))?;
    let _lock = SetupLock::acquire(&target.join("moto-venv.lock"))?;
    // Another run may have finished the setup while this one waited.
    if moto_installed(&python) {
        return Ok(());
    }
    if !python.exists() {
        let found = Command::new("python3").arg("--version").output();
        if !found.is_ok_and(|o| o.status.success()) {
            bail!(
                "python3 is missing: the S3 tests run against moto, a Python program. \
                 Install Python 3 with its venv module (Debian: apt-get install python3 python3-venv)"
            );
        }
        eprintln!("xtask: creating {} (once)", venv.display());
        let status = Command::new("python3")
            .args(["-m", "venv"])
            .arg(venv)
            .status()
            .context("running python3 -m venv")?;
        if !status.success() || !python.exists() {
            let _ = fs::remove_dir_all(venv);
            bail!(
                "python3 -m venv {} failed ({status}): install the venv module and pip \
                 (Debian: apt-get install python3-venv python3-pip)",
                venv.display()
            );
        }
    }
    let has_pip = Command::new(&python)
        .args(["-m", "pip", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_pip {
        bail!(
            "pip is missing in {}: install pip for Python 3 (Debian: apt-get install python3-pip \
             python3-venv), then delete that directory and run again",
            venv.display()
        );
    }
    eprintln!("xtask: installing {MOTO} into {} (once)", venv.display());
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            MOTO,
        ])
        .status()
        .context("running pip")?;
    if !status.success() || !moto_installed(&python) {
        bail!("pip install '{MOTO}' failed ({status}); see pip's output above");
    }
    Ok(())
}

/// Whether the virtualenv's Python imports moto's server at the pinned version.
fn moto_installed(python: &Path) -> bool {
    let check = format!(
        "import sys, importlib.metadata as m, moto.server; sys.exit(m.version('moto') != '{MOTO_VERSION}')"
    );
    python.exists()
        && Command::new(python)
            .args(["-c", &check])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// Runs moto on a free port and waits until it answers.
fn launch(target: &Path, venv: &Path) -> Result<Moto> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("finding a free port")?
        .port();
    let log = target.join(format!("moto-{port}.log"));
    let log_file = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    // `python -m moto.server`, not the `bin/moto_server` script: the
    // script's shebang names the venv's absolute path, which breaks when
    // the target dir is moved or copied; the interpreter does not care.
    let child = Command::new(venv.join("bin/python"))
        .args([
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .spawn()
        .context("running python -m moto.server")?;
    let mut moto = Moto {
        child: Some(child),
        endpoint: format!("http://127.0.0.1:{port}"),
        log,
    };
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let started = Instant::now();
    loop {
        if moto_api_answers(addr) {
            eprintln!(
                "xtask: moto (pid {}) listens on {}",
                moto.child.as_ref().map_or(0, Child::id),
                moto.endpoint
            );
            return Ok(moto);
        }
        if let Some(status) = moto
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            let tail = log_tail(&moto.log);
            moto.child = None;
            let _ = fs::remove_file(&moto.log);
            bail!("moto_server exited with {status} before answering:\n{tail}");
        }
        if interrupted() {
            bail!("interrupted while waiting for moto");
        }
        if started.elapsed() > READY_TIMEOUT {
            let tail = log_tail(&moto.log);
            bail!(
                "moto did not answer GET /moto-api/ on {} within {}s:\n{tail}",
                moto.endpoint,
                READY_TIMEOUT.as_secs()
            );
        }
        sleep(Duration::from_millis(200));
    }
}

/// `GET /moto-api/` answers 200.
fn moto_api_answers(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    if stream
        .write_all(b"GET /moto-api/ HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[8..12] == b" 200"
}

fn log_tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// A lock directory held while the virtualenv is set up, so that two
/// `cargo xtask test` runs do not both create it. A lock older than the
/// wait limit is taken to be left by a killed run and removed.
struct SetupLock {
    path: PathBuf,
}

impl SetupLock {
    fn acquire(path: &Path) -> Result<Self> {
        let started = Instant::now();
        let mut told = false;
        loop {
            match fs::create_dir(path) {
                Ok(()) => {
                    return Ok(Self {
                        path: path.to_owned(),
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let age = fs::metadata(path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| SystemTime::now().duration_since(t).ok())
                        .unwrap_or_default();
                    if age > SETUP_LOCK_TIMEOUT {
                        eprintln!("xtask: removing stale lock {}", path.display());
                        let _ = fs::remove_dir(path);
                        continue;
                    }
                    if !told {
                        eprintln!(
                            "xtask: waiting for another run to set up moto ({})",
                            path.display()
                        );
                        told = true;
                    }
                    if interrupted() || started.elapsed() > SETUP_LOCK_TIMEOUT {
                        bail!("gave up waiting for {}", path.display());
                    }
                    sleep(Duration::from_millis(500));
                }
                Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
            }
        }
    }
}

impl Drop for SetupLock {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.path);
    }
}
