//! [`CommandError`]: why a command run did not complete. It travels as the
//! `source` of the [`RunError`](korvus_runner::RunError) the runner returns.

use std::path::PathBuf;
use std::time::Duration;

/// Why a [`CommandRunner`](crate::CommandRunner) run failed. Match on
/// variants, never on message text.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// The run has no scratch dir: the manager was built without a scratch
    /// root, and a command needs a working directory of its own.
    #[error("no scratch dir: CommandRunner needs a Manager with a scratch root")]
    NoScratchDir,
    /// The agent's private `HOME` or `TMPDIR` could not be made in the
    /// scratch dir.
    #[error("could not make the agent's private directory {path}")]
    PrivateDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The manifest could not be written into the scratch dir.
    #[error("could not write the run manifest {path}")]
    Manifest {
        /// The manifest path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The program could not be started.
    #[error("could not start {program}")]
    Spawn {
        /// The program.
        program: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The [`Sandbox`](crate::Sandbox) is
    /// [`required`](crate::Sandbox::required) but could not be put in force
    /// (e.g. the kernel has no Landlock); the program was not started.
    #[error("the agent's sandbox is required but not in force: {reason}")]
    Sandbox {
        /// Why it is not in force.
        reason: String,
    },
    /// The [`Network`](crate::Network) policy is
    /// [`required`](crate::Network::required) but could not be put in
    /// force exactly: no network namespace could be made (the agent would
    /// have shared the host's network), or one was made with less than
    /// asked (without root, or when its proxy cannot start, `allow`
    /// becomes no network at all); the program was not started. A policy
    /// that is not required goes ahead with a note in both cases (the
    /// second fails closed).
    #[error("the agent's network policy is required but not in force: {reason}")]
    Network {
        /// Why it is not in force.
        reason: String,
    },
    /// The [`Limits`](crate::Limits) are
    /// [`required`](crate::Limits::required) but the memory, task or CPU
    /// limits could not be put in force (no writable cgroup); the program
    /// was not started.
    #[error("the agent's limits are required but not in force: {reason}")]
    Limits {
        /// Why they are not in force.
        reason: String,
    },
    /// The run's processes went past their memory limit and were ended
    /// together.
    #[error("agent went past its memory limit; every process of the run was killed")]
    MemoryExceeded,
    /// The scratch dir went past its size limit; the run was stopped.
    #[error("agent's scratch dir went past its size limit; every process of the run was killed")]
    DiskQuotaExceeded,
    /// The run printed nothing and used next to no CPU time (under 1% of a
    /// core) for its stall limit.
    #[error("agent stalled (no output and no CPU time for the stall limit); it was stopped")]
    Stalled,
    /// The agent user ([`AgentUser::lookup`](crate::AgentUser::lookup))
    /// does not exist.
    #[error("unknown agent user {name}: {reason}")]
    UnknownUser {
        /// The name looked up.
        name: String,
        /// Why it was not found.
        reason: String,
    },
    /// The agent user cannot walk through `dir` to its scratch dir: give
    /// the directory search permission for others (`chmod o+x`) or put
    /// the scratch root elsewhere.
    #[error("agent user {user} cannot reach its scratch dir: {dir} is not searchable by it")]
    Unreachable {
        /// The agent user.
        user: String,
        /// The first directory on the way it may not search.
        dir: PathBuf,
    },
    /// The scratch dir could not be handed over to the agent user.
    #[error("could not hand {path} over to agent user {user}")]
    HandOver {
        /// The agent user.
        user: String,
        /// The entry.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for the program failed.
    #[error("could not wait for {program}")]
    Wait {
        /// The program.
        program: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The agent reported an error that ended its turn (see
    /// [`exit::AGENT_ERROR`](korvus_runner::exit::AGENT_ERROR)) and exited
    /// with `code`.
    #[error("agent failed: {message} (exit code {code})")]
    AgentFailed {
        /// The exit code.
        code: i32,
        /// What the agent said.
        message: String,
    },
    /// The program exited with a code that means failure.
    #[error("agent exited with code {code}")]
    Exited {
        /// The exit code.
        code: i32,
    },
    /// The program was killed by a signal it was not sent by the runner.
    #[error("agent was killed by signal {signal}")]
    Signaled {
        /// The signal number.
        signal: i32,
    },
    /// The runner's own timeout ([`CommandRunner::timeout`](crate::CommandRunner::timeout))
    /// expired; the process group was killed.
    #[error("agent timed out after {after:?}; its process group was killed")]
    TimedOut {
        /// The configured timeout.
        after: Duration,
    },
    /// The [`ModelGateway`](crate::ModelGateway) could not be set up for
    /// the run (its key variable is unset, or it could not listen); the
    /// program was not started.
    #[error("the model gateway could not be set up: {reason}")]
    Gateway {
        /// What went wrong.
        reason: String,
    },
    /// The credential [`Vault`](crate::Vault) could not be armed for the
    /// run: a credential bound to a destination the network policy does
    /// not allow, a value that could not be read, or no authority; the
    /// program was not started.
    #[error("the credential vault could not be set up: {reason}")]
    Vault {
        /// What went wrong.
        reason: String,
    },
}

impl CommandError {
    /// The exit reason this crate documents for the error (see
    /// `docs/command-runner.md`): `exit_code_<n>`, `signal_<n>`, `timeout`,
    /// `memory_exceeded`, `disk_quota_exceeded`, `stalled`, or
    /// `runner_failed` for the rest. The runner hands it to the session
    /// as the [`RunError`](korvus_runner::RunError)'s exit reason and
    /// writes it into the log's last note.
    pub fn reason(&self) -> String {
        match self {
            CommandError::Exited { code } => format!("exit_code_{code}"),
            CommandError::Signaled { signal } => format!("signal_{signal}"),
            CommandError::TimedOut { .. } => korvus_runner::exit::TIMEOUT.to_owned(),
            CommandError::MemoryExceeded => korvus_runner::exit::MEMORY_EXCEEDED.to_owned(),
            CommandError::DiskQuotaExceeded => korvus_runner::exit::DISK_QUOTA_EXCEEDED.to_owned(),
            CommandError::Stalled => korvus_runner::exit::STALLED.to_owned(),
            CommandError::AgentFailed { .. } => korvus_runner::exit::AGENT_ERROR.to_owned(),
            _ => korvus_runner::exit::RUNNER_FAILED.to_owned(),
        }
    }
}
