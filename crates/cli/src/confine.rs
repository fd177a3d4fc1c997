//! How the CLI confines agents: the filesystem sandbox with the data dir's
//! own files private, an unprivileged agent user when korvus runs as
//! root, and the per-run limits.

use anyhow::{bail, Context, Result};
use clap::Args;
use korvus_command::{AgentUser, CommandRunner, Network, Sandbox};

use crate::compose::Backends;
use crate::limits::LimitArgs;

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
    /// Where the agent's network traffic may go: `host` (everything the
    /// host reaches), `none` (only its own loopback) or
    /// `allow=HOST:PORT[,HOST:PORT…]` (only those, through korvus's proxy).
    /// Default: `host` for a program of your own; for `--agent codex` or
    /// `claude-code`, only the model endpoint (or the provider's API).
    #[arg(long, value_name = "POLICY")]
    pub(crate) network: Option<Network>,
    /// Fail a run whose network policy cannot be put in force (e.g. no
    /// network namespace can be made), instead of running the agent on the
    /// host's network.
    #[arg(long)]
    pub(crate) network_required: bool,
    #[command(flatten)]
    pub(crate) limits: LimitArgs,
}

impl ConfineArgs {
    /// `runner` with the sandbox and agent user these flags ask for —
    /// refused, before any row is written, when the agent user could not
    /// reach the scratch root or execute the agent program.
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
        let runner = runner.limits(self.limits.limits());
        let mut network = self
            .network
            .clone()
            .unwrap_or_else(|| runner.network_policy().clone());
        if self.network_required {
            network = network.required();
        }
        let runner = runner.network(network);
        let user = self.agent_user()?;
        let runs_as = user.clone().unwrap_or_else(current_user);
        let program = std::path::Path::new(runner.program());
        if program.components().count() > 1 && !runs_as.may_execute(program) {
            bail!(
                "agent program {} cannot be executed by {} (`chmod +x` it, or run it \
                 through its interpreter: --agent sh --agent-arg {})",
                program.display(),
                describe(user.as_ref()),
                program.display()
            );
        }
        let Some(user) = user else {
            return Ok(runner);
        };
        if let Err(e) = user.check_reach(&backends.scratch) {
            let dir = match &e {
                korvus_command::CommandError::Unreachable { dir, .. } => dir.display().to_string(),
                _ => backends.scratch.display().to_string(),
            };
            return Err(anyhow::Error::new(e)).with_context(|| {
                format!(
                    "agent user {} cannot reach the scratch root {}: give {dir} search \
                     permission for others (`chmod o+x {dir}`), choose a data dir it can \
                     reach (--data-dir), or keep root with --agent-user root",
                    user.name(),
                    backends.scratch.display()
                )
            });
        }
        Ok(runner.run_as(user))
    }

    /// The user agents run as, when it is not korvus's own.
    fn agent_user(&self) -> Result<Option<AgentUser>> {
        let name = match &self.agent_user {
            Some(name) => name.as_str(),
            None if nix::unistd::geteuid().is_root() => DEFAULT_AGENT_USER,
            None => return Ok(None),
        };
        AgentUser::lookup(name)
            .with_context(|| format!("cannot run agents as {name} (choose one with --agent-user)"))
            .map(Some)
    }
}

/// This process's own user, as an agent user.
fn current_user() -> AgentUser {
    AgentUser::new(
        "korvus's own user",
        nix::unistd::geteuid().as_raw(),
        nix::unistd::getegid().as_raw(),
    )
}

fn describe(user: Option<&AgentUser>) -> String {
    match user {
        Some(u) => format!("agent user {}", u.name()),
        None => "korvus's own user".to_owned(),
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
