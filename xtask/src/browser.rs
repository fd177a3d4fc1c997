//! The browser of the browser tests: Debian's Chromium and ChromeDriver,
//! installed with apt when missing, and axe-core, the accessibility
//! checker the tests run in the page, from the npm registry at a pinned
//! version into `target/browser-tools` (once).
//!
//! [`ensure`] exports `KORVUS_CHROMIUM` and `KORVUS_CHROMEDRIVER` when both
//! are there (after installing them if needed), and `KORVUS_AXE_JS` (the
//! path of `axe.min.js`) or `KORVUS_AXE_UNAVAILABLE` with the reason,
//! which fails the accessibility test under `cargo xtask test`. Where they cannot be
//! installed (no apt, no root, no package mirror) it says so loudly and
//! exports `KORVUS_BROWSER_UNAVAILABLE` with the reason, which the browser
//! tests print as a skip; every other test still runs. The tests start
//! chromedriver themselves, so there is nothing to stop.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::services::Service;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The accessibility checker, at the version the tests were written against.
const AXE: &str = "axe-core@4.10.3";

/// The browser, or why there is none.
pub(crate) struct Browser {
    env: Vec<(String, String)>,
}

impl Service for Browser {
    fn env(&self) -> Vec<(String, String)> {
        self.env.clone()
    }

    fn stop(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
}

fn present() -> bool {
    Path::new(CHROMIUM).is_file() && Path::new(CHROMEDRIVER).is_file()
}

/// `axe.min.js` under `target/browser-tools`, installed with npm when the
/// version there is not [`AXE`].
fn axe(target: &Path) -> Result<PathBuf, String> {
    let dir = target.join("browser-tools");
    let script = dir.join("node_modules/axe-core/axe.min.js");
    let marker = dir.join("installed");
    if script.is_file() && std::fs::read_to_string(&marker).is_ok_and(|m| m == AXE) {
        return Ok(script);
    }
    eprintln!("xtask: installing {AXE} from the npm registry (once)");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let status = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--ignore-scripts",
            "--prefix",
        ])
        .arg(&dir)
        .arg(AXE)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run npm: {e}"))?;
    if !status.success() || !script.is_file() {
        return Err(format!("npm install {AXE} failed ({status})"));
    }
    std::fs::write(&marker, AXE).map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
    Ok(script)
}

/// Makes sure Chromium, ChromeDriver and axe-core are installed; never
/// fails.
pub(crate) fn ensure(target: &Path) -> Browser {
    if !present() {
        eprintln!("xtask: installing Debian's chromium and chromium-driver for the browser tests");
        let install = || {
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .args(["chromium", "chromium-driver"])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !install() {
            // The package lists may be stale or absent on a fresh machine.
            let _ = Command::new("apt-get")
                .args(["update", "-q"])
                .stdout(Stdio::null())
                .status();
            install();
        }
    }
    let env = if present() {
        vec![
            ("KORVUS_CHROMIUM".to_owned(), CHROMIUM.to_owned()),
            ("KORVUS_CHROMEDRIVER".to_owned(), CHROMEDRIVER.to_owned()),
        ]
    } else {
        let why = "apt-get could not install chromium and chromium-driver here";
        eprintln!(
            "\nxtask: ************************************************************\n\
             xtask: the browser tests will be SKIPPED: {why}\n\
             xtask: ************************************************************\n"
        );
        vec![("KORVUS_BROWSER_UNAVAILABLE".to_owned(), why.to_owned())]
    };
    let mut env = env;
    match axe(target) {
        Ok(script) => env.push(("KORVUS_AXE_JS".to_owned(), script.display().to_string())),
        Err(why) => {
            eprintln!(
                "\nxtask: ************************************************************\n\
                 xtask: the accessibility test cannot run: {why}\n\
                 xtask: ************************************************************\n"
            );
            env.push(("KORVUS_AXE_UNAVAILABLE".to_owned(), why));
        }
    }
    Browser { env }
}
