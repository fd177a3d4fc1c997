//! [`CommandRunner`]: its builder and its [`Runner`] impl. A run reads as
//! spawn ([`Agent::spawn`]) → pump ([`Agent::pump`]) → drain
//! ([`Output::drain`]) → classify ([`process::classify`]).

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use korvus_runner::{RunContext, RunError, RunOutcome, Runner};
use tokio::process::Command;
use tracing::debug;

use crate::budget::{BudgetConfig, Guard};
use crate::dialect::{state, Decoder, Dialect};
use crate::enforce;
use crate::env::{EnvPolicy, Inherit, PrivateDirs};
use crate::gateway::ModelGateway;
use crate::isolate::{Isolation, Served};
use crate::limits::Limits;
use crate::manifest::RunManifest;
use crate::network::vault::Vault;
use crate::network::Network;
use crate::outcome::{
    budget_before_start, cancelled_before_start, conclude, failed, with_agent_failure,
};
use crate::output::{ExitDrain, Output};
use crate::process::{self, Agent, Deadlines, Isolate, Stop};
use crate::sandbox::Sandbox;
use crate::sink::{OutputCaps, Sink};
use crate::spawn::ChildSetup;
use crate::user::{self, AgentUser};
use crate::watch::{Hit, Watch};
use crate::CommandError;

mod launch;
use self::launch::summarise;

/// Default number of stderr lines kept (the last ones) and logged as notes.
pub const DEFAULT_STDERR_LINES: usize = 64;

/// Default longest stdout or stderr line kept; the rest of a longer line is
/// dropped and the event says so.
pub const DEFAULT_MAX_LINE_BYTES: usize = 256 * 1024;

/// Default time between `SIGTERM` and `SIGKILL` when the runner stops a
/// process group.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(3);

/// A [`Runner`] that runs any command-line agent in the session's scratch
/// dir. The protocol (stdin, environment, stdout lines, exit codes) is in
/// `docs/command-runner.md` and in the [crate docs](crate).
///
/// Built with [`CommandRunner::new`] and the `with`-style methods below;
/// cheap to clone.
#[derive(Debug, Clone)]
#[must_use = "a runner does nothing until a manager runs sessions with it"]
pub struct CommandRunner {
    program: OsString,
    args: Vec<OsString>,
    env: EnvPolicy,
    env_source: Option<Vec<(OsString, OsString)>>,
    timeout: Option<Duration>,
    kill_grace: Duration,
    stderr_lines: usize,
    max_line_bytes: usize,
    caps: OutputCaps,
    sandbox: Sandbox,
    user: Option<AgentUser>,
    drain: ExitDrain,
    limits: Limits,
    dialect: Dialect,
    network: Network,
    gateway: Option<ModelGateway>,
    vault: Vault,
    budgets: Option<BudgetConfig>,
}

impl CommandRunner {
    /// Runs `program` (looked up in `PATH` when it has no `/`; a relative
    /// path with a `/` is resolved against the **scratch dir**, so pass an
    /// absolute path).
    pub fn new(program: impl Into<OsString>) -> Self {
        Self {
            program: program.into(),
            args: Vec::new(),
            env: EnvPolicy::default(),
            env_source: None,
            timeout: None,
            kill_grace: DEFAULT_KILL_GRACE,
            stderr_lines: DEFAULT_STDERR_LINES,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            caps: OutputCaps::default(),
            sandbox: Sandbox::new(),
            user: None,
            drain: ExitDrain::default(),
            limits: Limits::default(),
            dialect: Dialect::Korvus,
            network: Network::host(),
            gateway: None,
            vault: Vault::new(),
            budgets: None,
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for the program, whatever the
    /// [`EnvPolicy`] excludes (`HOME`, `TMPDIR` and the `KORVUS_*` session
    /// variables still win).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.set.push((key.into(), value.into()));
        self
    }

    /// Passes the embedding process's variable `name` through, whatever the
    /// [`EnvPolicy`] excludes (an agent may need its own `*_API_KEY`).
    pub fn env_pass(mut self, name: impl Into<String>) -> Self {
        self.env.pass.push(name.into());
        self
    }

    /// Which variables of the embedding process the agent starts from
    /// (default [`Inherit::Core`]).
    pub fn env_inherit(mut self, inherit: Inherit) -> Self {
        self.env.inherit = inherit;
        self
    }

    /// Resolves the [`EnvPolicy`] against `vars` instead of the embedding
    /// process's own environment (e.g. an environment the embedder curated,
    /// or a test's).
    pub fn env_source(mut self, vars: impl IntoIterator<Item = (OsString, OsString)>) -> Self {
        self.env_source = Some(vars.into_iter().collect());
        self
    }

    /// Replaces the whole environment policy (default: [`EnvPolicy::default`],
    /// the core variables without anything that looks like a secret).
    pub fn env_policy(mut self, policy: EnvPolicy) -> Self {
        self.env = policy;
        self
    }

    /// The runner's own ceiling on one run: when it expires, the process
    /// group is stopped and the run fails with [`CommandError::TimedOut`].
    /// Without it (the default) only the manager's run timeout applies,
    /// which ends the session `failed` / `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Time between `SIGTERM` and `SIGKILL` when the group is stopped
    /// (default [`DEFAULT_KILL_GRACE`]). Keep it below the manager's
    /// cancel grace, so the run still returns its outcome.
    pub fn kill_grace(mut self, grace: Duration) -> Self {
        self.kill_grace = grace;
        self
    }

    /// How many of the last stderr lines are kept as notes (default
    /// [`DEFAULT_STDERR_LINES`]).
    pub fn stderr_lines(mut self, lines: usize) -> Self {
        self.stderr_lines = lines;
        self
    }

    /// The longest line kept from stdout or stderr (default
    /// [`DEFAULT_MAX_LINE_BYTES`]).
    pub fn max_line_bytes(mut self, bytes: usize) -> Self {
        self.max_line_bytes = bytes.max(1);
        self
    }

    /// How much of the agent's stdout one run stores (default
    /// [`OutputCaps::default`]: 100,000 events or 64 MiB). Past a cap the
    /// rest is read and dropped, one note says how much, and the run is not
    /// failed for it.
    pub fn output_caps(mut self, caps: OutputCaps) -> Self {
        self.caps = caps;
        self
    }

    /// What the agent may touch on the filesystem (default
    /// [`Sandbox::new`]: writes confined to the scratch dir, reads open).
    /// [`Sandbox::disabled`] turns it off.
    pub fn sandbox(mut self, sandbox: Sandbox) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Runs the agent as `user` (the embedding process must be allowed to
    /// switch to it, i.e. run as root). Before the program starts, the
    /// writable part of the scratch dir is handed over to that user; its
    /// `USER` and `LOGNAME` name it.
    pub fn run_as(mut self, user: AgentUser) -> Self {
        self.user = Some(user);
        self
    }

    /// How long output still in the pipes is read after the program
    /// exited (default [`ExitDrain::default`]: until end of file, with a
    /// 2 s idle bound and a 60 s overall bound for pipes a process outside
    /// the agent's group holds open).
    pub fn exit_drain(mut self, drain: ExitDrain) -> Self {
        self.drain = drain;
        self
    }

    /// The language the agent speaks on stdout (default
    /// [`Dialect::Korvus`], korvus's own protocol). With an agent dialect
    /// korvus numbers the turns, uniquely across the session's iterations.
    pub fn dialect(mut self, dialect: Dialect) -> Self {
        self.dialect = dialect;
        self
    }

    /// What one run may use of the host (default [`Limits::default`]:
    /// memory 4 GiB, 1,024 tasks, scratch dir 10 GiB, stall 15 min, through
    /// a cgroup of the run's own where one can be made).
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Where the agent's network traffic may go (default [`Network::host`];
    /// the [presets](crate::Preset) default to an `allow` policy for their
    /// model endpoint). See [`Network`].
    pub fn network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }

    /// The network policy runs of this runner get.
    pub fn network_policy(&self) -> &Network {
        &self.network
    }

    /// The limits runs of this runner get.
    pub fn run_limits(&self) -> &Limits {
        &self.limits
    }

    /// The program this runner starts.
    pub fn program(&self) -> &OsString {
        &self.program
    }

    /// The program's arguments.
    pub fn arguments(&self) -> &[OsString] {
        &self.args
    }

    async fn execute(
        &self,
        ctx: RunContext,
        message: Option<String>,
    ) -> Result<RunOutcome, CommandError> {
        let scratch = ctx.scratch.clone().ok_or(CommandError::NoScratchDir)?;
        if let Some(outcome) = cancelled_before_start(&ctx, &scratch).await {
            return Ok(outcome);
        }
        let guard = self.guard(&ctx);
        if let Some(done) = budget_before_start(guard.as_deref(), &scratch).await {
            return Ok(done);
        }
        let manifest = RunManifest::for_run(&ctx, message.as_deref())
            .write(&scratch)
            .await?;
        let private = PrivateDirs::make(&scratch).await?;
        let (resume, resume_note) =
            state::native_resume(self.dialect, &scratch, &private.home, message.is_some());
        user::hand_over_to(self.user.clone(), &scratch).await?;
        let (notes_tx, notes_rx) = tokio::sync::mpsc::channel(64);
        let thread = resume.as_ref().map(|r| r.thread.as_str());
        let (cmd, mut gateway, vault) = self.prepare(
            &ctx,
            (&scratch, &manifest, &private),
            (message.is_some(), thread),
            notes_tx.clone(),
        )?;
        let input = message.unwrap_or_else(|| ctx.session.prompt.clone());
        // Before the agent starts: nothing watches it yet.
        let decoder = Decoder::for_run(self.dialect, &ctx.log, resume.as_ref()).await;
        let (mut agent, notes, network, serving) = self
            .start_served(
                &ctx,
                &scratch,
                cmd,
                input,
                notes_tx,
                gateway.as_mut(),
                (vault.clone(), guard.as_ref()),
            )
            .await?;
        let wall = guard.as_ref().map(Guard::watch_wall);
        let (stdout, stderr) = agent.take_pipes();
        let mut output = Output::start(stdout, stderr, self.max_line_bytes, notes_rx);
        let mut sink = Sink::new(&ctx, self.stderr_lines, self.caps, decoder);
        state::watch(
            &ctx.checkpoint,
            self.dialect,
            &scratch,
            &private.home,
            &mut sink,
        );
        for note in resume_note.into_iter().chain(notes) {
            sink.note(note).await;
        }
        let mut watch = Watch::new(&self.limits, &scratch, agent.pgid());
        let mut stop = agent
            .pump(
                &mut output,
                &mut sink,
                stopped(&ctx, guard.as_deref()),
                self.deadlines(),
                &mut watch,
            )
            .await;
        crate::budget::finish(guard.as_deref(), wall).await;
        if stop.is_none() && agent.cgroup().is_some_and(|c| c.oom_kills() > 0) {
            // Killed for memory before a check saw it: the rest ends too.
            stop = Some(Stop::Limit(Hit::Memory));
        }
        let status = agent.reap().await;
        if let Err(e) = korvus_workspace::forget_agent(&scratch) {
            debug!(error = %e, "agent record not removed");
        }
        output.drain(&mut sink, self.drain).await;
        summarise(&mut sink, serving, network, vault.as_deref()).await;
        let peaks = agent.finish_cgroup().await;
        let used = peaks.and_then(|p| enforce::peaks_note(p, &self.limits));
        let program = agent.release().await;
        let status = status?;
        let result = process::classify(stop, status, self.timeout, program);
        let result = with_agent_failure(result, sink.decoder());
        state::keep_thread(&mut sink, &scratch, &private.home, &ctx.checkpoint).await;
        conclude(&scratch, sink, status, result, used).await
    }

    /// Places the run in its cgroup, starts the program confined and
    /// isolated and records its group; returns the agent, the notes its
    /// start left (what of the sandbox, the network policy and the limits
    /// is not in force) and its network (egress refusals go to `notes`).
    async fn start(
        &self,
        ctx: &RunContext,
        scratch: &Path,
        cmd: Command,
        input: String,
        notes: tokio::sync::mpsc::Sender<String>,
        served: Served,
    ) -> Result<(Agent, Vec<String>, Isolation), CommandError> {
        let program = self.program.to_string_lossy().into_owned();
        let (cgroup, limits_note) = enforce::place(&self.limits, ctx).await?;
        let join = match &cgroup {
            Some(c) => c.join_files().map_err(|source| CommandError::Spawn {
                program: program.clone(),
                source,
            })?,
            None => Vec::new(),
        };
        let root = self.agent_uid() == 0;
        let drops = if root {
            crate::spawn::root_agent_drops()
        } else {
            rustix::thread::CapabilitySet::empty()
        };
        let setup = ChildSetup {
            join,
            drop_caps: drops,
            // Switched to in the child after its namespaces and mounts.
            user: self.user.as_ref().map(|u| (u.uid(), u.gid())),
            ..ChildSetup::default()
        };
        let sandbox = self.sandbox.for_agent(self.agent_uid());
        let how = Isolate {
            sandbox: &sandbox,
            network: &self.network,
            scratch,
            notes,
            served,
        };
        let (agent, confinement, network, containment) =
            Agent::spawn(cmd, program, input, how, setup, cgroup).await?;
        // Beside the scratch dir, where the agent cannot write: if this
        // process dies, `korvus_workspace::reap` stops the group from it.
        if let Err(e) = korvus_workspace::record_agent(scratch, agent.pgid()) {
            debug!(error = %e, "agent process group not recorded");
        }
        let notes = confinement
            .note()
            .into_iter()
            .chain(containment)
            .chain(network.note())
            .chain(limits_note)
            .chain(root.then(|| crate::spawn::capabilities_note(drops)))
            .collect();
        Ok((agent, notes, network))
    }

    /// The uid the agent runs as.
    fn agent_uid(&self) -> u32 {
        self.user
            .as_ref()
            .map_or_else(|| rustix::process::geteuid().as_raw(), AgentUser::uid)
    }

    fn deadlines(&self) -> Deadlines {
        Deadlines {
            timeout: self.timeout,
            kill_grace: self.kill_grace,
        }
    }
}

#[async_trait]
impl Runner for CommandRunner {
    /// Runs the program with the session's prompt on stdin.
    ///
    /// # Errors
    /// A [`RunError`] whose source is a [`CommandError`]: no scratch dir,
    /// manifest not written, program not started, a failing exit code, a
    /// signal, or the runner's own timeout.
    ///
    /// # Cancel safety
    /// Dropping the future kills the program's whole process group.
    async fn run(&self, ctx: RunContext) -> Result<RunOutcome, RunError> {
        let log = Arc::clone(&ctx.log);
        let result = self.execute(ctx, None).await;
        failed(&log, result).await
    }

    /// Runs the program again in the reopened session's fresh scratch dir,
    /// with the new message on stdin and `KORVUS_RESUME=1`.
    ///
    /// # Errors
    /// As [`CommandRunner::run`](Runner::run).
    ///
    /// # Cancel safety
    /// Dropping the future kills the program's whole process group.
    async fn resume(&self, ctx: RunContext, message: String) -> Result<RunOutcome, RunError> {
        let log = Arc::clone(&ctx.log);
        let result = self.execute(ctx, Some(message)).await;
        failed(&log, result).await
    }
}

/// Resolves when the runner must stop the run: cancelled, or past its
/// budget.
async fn stopped(ctx: &RunContext, guard: Option<&Guard>) -> Stop {
    let budget = async {
        match guard {
            Some(guard) => guard.reached().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = ctx.cancel.cancelled() => Stop::Cancelled,
        () = budget => Stop::Budget,
    }
}
