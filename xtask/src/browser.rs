//! The browser of the browser tests: Debian's Chromium and ChromeDriver,
//! installed with apt when missing.
//!
//! [`ensure`] exports `KORVUS_CHROMIUM` and `KORVUS_CHROMEDRIVER` when both
//! are there (after installing them if needed). Where they cannot be
//! installed (no apt, no root, no package mirror) it says so loudly and
//! exports `KORVUS_BROWSER_UNAVAILABLE` with the reason, which the browser
//! tests print as a skip; every other test still runs. The tests start
//! chromedriver themselves, so there is nothing to stop.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::services::Service;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

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

/// Makes sure Chromium and ChromeDriver are installed; never fails.
pub(crate) fn ensure() -> Browser {
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
    Browser { env }
}
