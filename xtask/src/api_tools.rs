//! The tools we did not write that check `korvus serve`'s API:
//! `openapi-python-client` (generates the client the API tests drive),
//! `schemathesis` (a property-based API tester) and `standardwebhooks`
//! (verifies the signatures of its webhooks), installed from
//! PyPI at pinned versions into a virtualenv under the target dir (once
//! per version).
//!
//! [`ensure`] exports `KORVUS_API_TOOLS_PYTHON`, the virtualenv's Python
//! (the tools run as `python -m …`, which survives a moved target dir).
//! Where they cannot be installed it says so loudly and exports
//! `KORVUS_API_TOOLS_UNAVAILABLE` with the reason: the OpenAPI tool tests
//! fail on it under `cargo xtask test`. Nothing runs, so nothing stops.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::services::Service;

/// The packages, at the versions the tests were written against.
pub(crate) const PACKAGES: &[(&str, &str)] = &[
    ("openapi-python-client", "0.29.1"),
    ("schemathesis", "4.32.5"),
    ("standardwebhooks", "1.1.0"),
];

/// The tools, or why there are none.
pub(crate) struct ApiTools {
    env: Vec<(String, String)>,
}

impl Service for ApiTools {
    fn env(&self) -> Vec<(String, String)> {
        self.env.clone()
    }

    fn stop(&mut self) -> anyhow::Result<()> {
        Ok(())
    }
}

/// Installs the tools when missing; never fails.
pub(crate) fn ensure(target: &Path) -> ApiTools {
    let venv = target.join("api-tools");
    let env = match install(&venv) {
        Ok(python) => vec![(
            "KORVUS_API_TOOLS_PYTHON".to_owned(),
            python.display().to_string(),
        )],
        Err(why) => {
            eprintln!(
                "\nxtask: ************************************************************\n\
                 xtask: the OpenAPI and webhook tool tests cannot run: {why}\n\
                 xtask: ************************************************************\n"
            );
            vec![("KORVUS_API_TOOLS_UNAVAILABLE".to_owned(), why)]
        }
    };
    ApiTools { env }
}

/// The virtualenv's Python with [`PACKAGES`] installed.
fn install(venv: &Path) -> Result<PathBuf, String> {
    let python = venv.join("bin/python");
    if installed(&python) {
        return Ok(python);
    }
    let specs: Vec<String> = PACKAGES.iter().map(|(p, v)| format!("{p}=={v}")).collect();
    eprintln!(
        "xtask: installing {} from PyPI into {} (once)",
        specs.join(", "),
        venv.display()
    );
    if !python.exists() {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(venv)
            .status()
            .map_err(|e| format!("cannot run python3 -m venv: {e}"))?;
        if !made.success() {
            let _ = std::fs::remove_dir_all(venv);
            return Err(format!(
                "python3 -m venv {} failed ({made}): install Python 3 with venv and pip",
                venv.display()
            ));
        }
    }
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(&specs)
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run pip: {e}"))?;
    if !status.success() || !installed(&python) {
        return Err(format!("pip install {} failed ({status})", specs.join(" ")));
    }
    Ok(python)
}

/// Whether the virtualenv holds every package at its pinned version.
fn installed(python: &Path) -> bool {
    let wanted: Vec<String> = PACKAGES
        .iter()
        .map(|(p, v)| format!("m.version('{p}') == '{v}'"))
        .collect();
    let check = format!(
        "import sys, importlib.metadata as m; sys.exit(0 if {} else 1)",
        wanted.join(" and ")
    );
    python.exists()
        && Command::new(python)
            .args(["-c", &check])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}
