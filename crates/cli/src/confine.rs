//! How the CLI confines agents: the filesystem sandbox with the data dir's
//! own files private, and an unprivileged agent user when korvus runs as
//! root.

use anyhow::{Context, Result};
use clap::Args;
use korvus_command::{AgentUser, CommandRunner, Sandbox};

use crate::compose::Backends;

/// The user agents run as when korvus runs as root and `--agent-user` is
/// not given.
pub(crate) const DEFAULT_AGENT_USER: &str = "nobody";

/// What confines the agent.
#[derive(Debug, Args)]
pub(crate) struct ConfineArgs {
    /// Run the agent without the filesystem sandbox (by default it may
    /// write only its scratch dir and may not read korvus's database,
    /// blobs, run files or other sessions' scratch dirs).
    #[arg(long)]
    pub(crate) no_sandbox: bool,
    /// Run the agent as this user. When korvus runs as root the default is
    /// `nobody`; give `--agent-user root` to keep root.
    #[arg(long, value_name = "USER")]
    pub(crate) agent_user: Option<String>,
}

impl ConfineArgs {
    /// `runner` with the sandbox and agent user these flags ask for.
    pub(crate) fn apply(
        &self,
        runner: CommandRunner,
        backends: &Backends,
    ) -> Result<CommandRunner> {
        let runner = if self.no_sandbox {
            runner.sandbox(Sandbox::disabled())
        } else {
            runner.sandbox(sandbox(backends))
        };
        let name = match &self.agent_user {
            Some(name) => name.as_str(),
            None if nix::unistd::geteuid().is_root() => DEFAULT_AGENT_USER,
            None => return Ok(runner),
        };
        let user = AgentUser::lookup(name).with_context(|| {
            format!("cannot run agents as {name} (choose one with --agent-user)")
        })?;
        Ok(runner.run_as(user))
    }
}

/// Writes confined to the scratch dir; reads denied beneath everything
/// korvus keeps in the data dir. Other files there (an agent script, the
/// demo's repository) stay readable.
fn sandbox(backends: &Backends) -> Sandbox {
    let data = &backends.data_dir;
    let mut sandbox = Sandbox::new();
    for name in [
        "korvus.db",
        "korvus.db-wal",
        "korvus.db-shm",
        "korvus.db-journal",
        "blobs",
    ] {
        sandbox = sandbox.private(data.join(name));
    }
    sandbox.private(&backends.scratch)
}
