//! `run`, `reopen`, `cancel`, `reap`: commands that drive sessions, and the
//! live view they share.

use korvus_store::StoreExt as _;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use futures::StreamExt;
use korvus_command::{CommandRunner, Dialect, Inherit, ModelEndpoint, Preset};
use korvus_log::{Access, Author, Event, EventKind, LogId};
use korvus_session::{ContextRequest, CreateSession, Manager, SessionError};
use korvus_store::{IncidentId, NewIncident, Session, SessionId, SessionStatus};
use tokio::signal::unix::{signal, SignalKind};

use crate::compose::Backends;
use crate::confine::ConfineArgs;
use crate::inspect::{harvest_manifest, human_bytes, parse_id};
use crate::out::{say, tell};
use crate::{Global, EXIT_AWAITING_USER, EXIT_CANCELLED, EXIT_FAILED};

/// How long a command waits for the final row after the log stream ended.
const SETTLE_WAIT: Duration = Duration::from_secs(120);

/// After this long without an event, the live view says the run goes on.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// The agent a session runs.
/// The API a model endpoint served through the gateway speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModelApi {
    /// OpenAI's (Responses, Chat Completions): `Authorization: Bearer`.
    Openai,
    /// Anthropic's Messages: `x-api-key`.
    Anthropic,
}

#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// The agent: `codex` or `claude-code` (a preset: the installed agent
    /// started headless, docs/agents.md), or a program — a path (relative
    /// to the current directory) or a name looked up in PATH — speaking
    /// the CommandRunner protocol (docs/command-runner.md) or the dialect
    /// `--agent-dialect` names.
    /// Required by `run`; `reopen` and `reply` default to the agent the
    /// session ran, remembered with it.
    #[arg(long, value_name = "codex|claude-code|PROGRAM")]
    pub(crate) agent: Option<String>,
    /// With a preset: the agent's binary (default: `codex` or `claude` in
    /// PATH).
    #[arg(long = "agent-program", value_name = "PATH")]
    pub(crate) agent_program: Option<PathBuf>,
    /// With a preset: the model API's base URL instead of the provider's
    /// (Codex: the Responses API's, e.g. http://127.0.0.1:8080/v1; Claude
    /// Code: the Messages API's, e.g. http://127.0.0.1:8080).
    #[arg(long = "model-endpoint", value_name = "URL")]
    pub(crate) model_endpoint: Option<String>,
    /// With a preset: the model to ask for.
    #[arg(long, value_name = "NAME")]
    pub(crate) model: Option<String>,
    /// korvus's variable holding the model API's key. korvus reads it and
    /// serves the agent through its model gateway (a per-run token as the
    /// agent's key, every call metered); the agent never sees the key.
    /// With a preset and no `--model-endpoint`, the provider's own API.
    #[arg(long = "model-key-var", value_name = "NAME")]
    pub(crate) model_key_var: Option<String>,
    /// With `--model-key-var`: a PEM file of the authorities the gateway
    /// trusts for the endpoint's certificate, instead of the system's.
    #[arg(long = "model-ca", value_name = "PEM", requires = "model_key_var")]
    pub(crate) model_ca: Option<PathBuf>,
    /// With a program of your own, `--model-endpoint` and
    /// `--model-key-var`: the API the endpoint speaks, which decides how
    /// korvus sends the key (`openai`: `Authorization: Bearer`;
    /// `anthropic`: `x-api-key`).
    #[arg(long = "model-api", value_enum, default_value_t = ModelApi::Openai)]
    pub(crate) model_api: ModelApi,
    /// An argument for the agent (repeat for more).
    #[arg(long = "agent-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub(crate) agent_args: Vec<String>,
    /// The language the agent speaks on stdout: `korvus` (the
    /// CommandRunner protocol), `codex` (`codex exec --json`) or
    /// `claude-code` (`claude -p --output-format stream-json --verbose`).
    /// (A preset sets its own.)
    #[arg(long = "agent-dialect", value_name = "korvus|codex|claude-code")]
    pub(crate) dialect: Option<Dialect>,
    /// End the session `failed` / `timeout` after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    pub(crate) timeout: u64,
    /// Which of korvus's own environment variables the agent starts from:
    /// `core` (PATH, LANG, TZ, USER, SHELL, TERM), `all` or `none`. Names
    /// that look like secrets (`*TOKEN*`, `*KEY*`, `AWS_*`, …) are dropped
    /// either way.
    #[arg(
        long = "agent-env-inherit",
        value_name = "all|core|none",
        default_value = "core"
    )]
    pub(crate) env_inherit: Inherit,
    /// Set a variable for the agent, whatever the excludes say (repeatable).
    #[arg(long = "agent-env", value_name = "KEY=VALUE")]
    pub(crate) env_set: Vec<String>,
    /// Pass korvus's own variable NAME to the agent, whatever the excludes
    /// say — e.g. an API key the agent needs (repeatable).
    #[arg(long = "agent-env-pass", value_name = "NAME")]
    pub(crate) env_pass: Vec<String>,
    #[command(flatten)]
    pub(crate) confine: ConfineArgs,
}

/// `korvus run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The incident (default: a new unpinned incident titled after the prompt).
    #[arg(long)]
    pub(crate) incident: Option<String>,
    /// An artifact of the incident to hand to the session (repeatable).
    #[arg(long = "context", value_name = "ARTIFACT_ID")]
    pub(crate) context: Vec<String>,
    #[command(flatten)]
    pub(crate) agent: AgentArgs,
    /// The session's budget: the input and output tokens its runs may
    /// spend, metered by the model gateway (`korvus budget` raises it).
    #[arg(long, value_name = "TOKENS")]
    pub(crate) budget_tokens: Option<u64>,
    /// The prompt; `-` reads it from stdin.
    pub(crate) prompt: String,
}

/// `korvus reopen` and `korvus reply`.
#[derive(Debug, Args)]
pub(crate) struct ReopenArgs {
    /// The session: a finished one (reopen), or one waiting for the user (reply).
    pub(crate) session: String,
    #[command(flatten)]
    pub(crate) agent: AgentArgs,
    /// The follow-up message; `-` reads it from stdin.
    pub(crate) message: String,
}

impl AgentArgs {
    /// The agent's runner, confined as the flags say.
    pub(crate) fn runner(&self, backends: &Backends) -> Result<CommandRunner> {
        let Some(agent) = &self.agent else {
            bail!("no agent: give --agent codex|claude-code|PROGRAM");
        };
        let mut runner = match agent.parse::<Preset>() {
            Ok(preset) => self.preset(preset)?,
            Err(_) => self.own_program(agent)?,
        };
        runner = runner.args(&self.agent_args).env_inherit(self.env_inherit);
        for pair in &self.env_set {
            let Some((key, value)) = pair.split_once('=') else {
                bail!("--agent-env {pair}: expected KEY=VALUE");
            };
            if key.is_empty() {
                bail!("--agent-env {pair}: the name is empty");
            }
            runner = runner.env(key, value);
        }
        for name in &self.env_pass {
            runner = runner.env_pass(name.as_str());
        }
        self.confine.apply(runner, backends)
    }

    /// A program of the user's own; with `--model-endpoint` and
    /// `--model-key-var`, served its model API through korvus's gateway
    /// (`KORVUS_MODEL_URL`, `KORVUS_MODEL_TOKEN`).
    fn own_program(&self, agent: &str) -> Result<CommandRunner> {
        if self.agent_program.is_some() || self.model.is_some() {
            bail!("--agent-program and --model go with --agent codex or claude-code");
        }
        let runner = CommandRunner::new(program(agent)?).dialect(self.dialect.unwrap_or_default());
        let (endpoint, var) = match (&self.model_endpoint, &self.model_key_var) {
            (None, None) => return Ok(runner),
            (Some(endpoint), Some(var)) => (endpoint, var),
            _ => bail!(
                "with a program of your own, --model-endpoint and --model-key-var go together: \
                 korvus serves the endpoint to it through its model gateway"
            ),
        };
        let mut gateway = match self.model_api {
            ModelApi::Openai => korvus_command::ModelGateway::openai(endpoint, var),
            ModelApi::Anthropic => korvus_command::ModelGateway::anthropic(endpoint, var),
        };
        if let Some(roots) = self.model_roots()? {
            gateway = gateway.trusting(roots);
        }
        Ok(runner.model_gateway(gateway))
    }

    /// The authorities of `--model-ca`, if given.
    fn model_roots(&self) -> Result<Option<korvus_command::Roots>> {
        self.model_ca
            .as_ref()
            .map(|pem| {
                korvus_command::Roots::only()
                    .with_pem_file(pem)
                    .with_context(|| format!("--model-ca {}", pem.display()))
            })
            .transpose()
    }

    /// The preset's runner: its binary, pointed at the endpoint given.
    fn preset(&self, preset: Preset) -> Result<CommandRunner> {
        if self.dialect.is_some_and(|d| d.name() != preset.name()) {
            bail!("--agent {preset} speaks its own dialect; drop --agent-dialect");
        }
        let program = preset_program(preset, self.agent_program.as_deref())?;
        let roots = self.model_roots()?;
        let endpoint = self.model_endpoint.as_ref().map(|url| {
            let mut endpoint = ModelEndpoint::new(url);
            endpoint.model = self.model.clone();
            endpoint.api_key_var = self.model_key_var.clone();
            endpoint.roots = roots;
            endpoint
        });
        // A key without an endpoint: the provider's own API, through the
        // gateway.
        let endpoint = match (endpoint, &self.model_key_var) {
            (None, Some(var)) => {
                let mut endpoint = ModelEndpoint::new(preset.public_api());
                endpoint.model = self.model.clone();
                endpoint.api_key_var = Some(var.clone());
                endpoint.roots = self.model_roots()?;
                Some(endpoint)
            }
            (endpoint, _) => endpoint,
        };
        if endpoint.is_none() && self.model.is_some() {
            bail!("--model needs --model-endpoint (or set the model in the agent's own configuration)");
        }
        Ok(preset.runner(program, endpoint.as_ref()))
    }

    pub(crate) fn timeout(&self) -> Option<Duration> {
        Some(Duration::from_secs(self.timeout))
    }
}

/// A program named on the command line: a path (made absolute, and it
/// must exist) or a name looked up in PATH when the agent starts.
fn program(name: &str) -> Result<std::ffi::OsString> {
    if !name.contains('/') {
        return Ok(name.into());
    }
    let path = std::path::absolute(name).with_context(|| format!("invalid agent path {name}"))?;
    if !path.is_file() {
        bail!("agent program {} not found", path.display());
    }
    Ok(path.into_os_string())
}

/// The binary a preset starts: `given`, else its default name found in
/// PATH (with how to install it when it is not there).
pub(crate) fn preset_program(preset: Preset, given: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = given {
        let path = std::path::absolute(path)
            .with_context(|| format!("invalid agent path {}", path.display()))?;
        if !path.is_file() {
            bail!("agent program {} not found", path.display());
        }
        return Ok(path);
    }
    let name = preset.default_program();
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .with_context(|| {
            let package = match preset {
                Preset::Codex => "@openai/codex@0.171.0",
                _ => "@anthropic-ai/claude-code@2.1.332",
            };
            format!(
                "{name} is not in PATH: install it with `npm install -g {package}`, \
                 or name the binary with --agent-program"
            )
        })
}

fn text_arg(text: &str) -> Result<String> {
    if text != "-" {
        return Ok(text.to_owned());
    }
    let mut s = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).context("cannot read stdin")?;
    Ok(s)
}

/// `korvus run`; `described` is its agent options as a session remembers
/// them (`remember.rs`).
pub(crate) async fn run(
    global: &Global,
    args: RunArgs,
    described: Option<String>,
) -> Result<ExitCode> {
    if args.agent.agent.is_none() {
        clap::Error::raw(
            clap::error::ErrorKind::MissingRequiredArgument,
            "korvus run needs --agent codex|claude-code|PROGRAM\n",
        )
        .exit();
    }
    let backends = Backends::open_checked(global).await?;
    let runner = args.agent.runner(&backends)?;
    let prompt = text_arg(&args.prompt)?;
    let incident = match &args.incident {
        Some(id) => parse_id::<IncidentId>(id, "incident")?,
        None => {
            let title: String = prompt
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(80)
                .collect();
            let incident = backends
                .store
                .create_incident(NewIncident {
                    title: if title.trim().is_empty() {
                        "untitled".into()
                    } else {
                        title
                    },
                    workspace: None,
                })
                .await
                .context("cannot create an incident")?;
            say!("incident {} created", incident.id);
            incident.id
        }
    };
    let context = args
        .context
        .iter()
        .map(|a| Ok(ContextRequest::new(parse_id(a, "artifact")?)))
        .collect::<Result<Vec<_>>>()?;
    let manager = backends.manager(runner, args.agent.timeout(), described);
    let signals = Signals::install()?;
    let mut request = CreateSession::new(incident, prompt).with_context(context);
    if let Some(tokens) = args.budget_tokens {
        request = request.budget(korvus_store::BudgetLimits::new().tokens(tokens));
    }
    let session = manager
        .create(request)
        .await
        .context("cannot create the session")?;
    let revision = session.revision;
    let code = drive(&backends, &manager, &session, 0, revision, signals).await;
    manager.stop().await;
    backends.close().await;
    code
}

pub(crate) async fn reopen(global: &Global, args: ReopenArgs) -> Result<ExitCode> {
    continue_session(global, args, false).await
}

/// `korvus reply`: answers a session waiting for the user.
pub(crate) async fn reply(global: &Global, args: ReopenArgs) -> Result<ExitCode> {
    continue_session(global, args, true).await
}

/// One more iteration of a session: a reopen of a finished one, or the
/// answer (`reply`) to one waiting for the user; followed to its end.
async fn continue_session(global: &Global, args: ReopenArgs, answer: bool) -> Result<ExitCode> {
    let backends = Backends::open_checked(global).await?;
    let row = crate::inspect::find_session(&backends, &args.session).await?;
    let id = row.id;
    if !answer && row.is_idle() {
        bail!(
            "session {id} is waiting for the user, not finished: answer it with \
             `korvus reply {id} \"…\"` (or end it with `korvus cancel {id}`)"
        );
    }
    if answer && !row.is_idle() {
        bail!(
            "session {id} is not waiting for the user ({}{}); `korvus reopen` continues a \
             finished session",
            row.status,
            row.exit_reason
                .as_deref()
                .map(|r| format!(", {r}"))
                .unwrap_or_default()
        );
    }
    // An explicit --agent wins; else the agent the session ran.
    let agent = match (&args.agent.agent, &row.runner) {
        (Some(_), _) => args.agent,
        (None, Some(described)) => crate::remember::agent_args(described)
            .with_context(|| format!("session {id}: give --agent"))?,
        (None, None) => bail!(
            "session {id} has no remembered agent (it was created before korvus \
             remembered agents, or by an embedder or `serve` without --agent): give --agent"
        ),
    };
    let runner = agent.runner(&backends)?;
    let message = text_arg(&args.message)?;
    let manager = backends.manager(runner, agent.timeout(), None);
    let signals = Signals::install()?;
    let seen = logged_events(&backends, id).await;
    let revision = backends
        .store
        .next_report_revision(id)
        .await
        .with_context(|| format!("cannot read session {id}"))?
        .max(row.revision + 1);
    let session = if answer {
        manager
            .send_message(id, &message)
            .await
            .with_context(|| format!("cannot answer session {id}"))?
    } else {
        manager
            .reopen(id, &message)
            .await
            .with_context(|| format!("cannot reopen session {id}"))?
    };
    let code = drive(&backends, &manager, &session, seen, revision, signals).await;
    manager.stop().await;
    backends.close().await;
    code
}

/// Follows a started session to its end, prints the summary and returns the
/// exit code of its status.
pub(crate) async fn drive(
    backends: &Backends,
    manager: &Manager,
    session: &Session,
    skip: u64,
    revision: u32,
    mut signals: Signals,
) -> Result<ExitCode> {
    say!(
        "session {} started (incident {}, revision {}); Ctrl-C cancels it",
        session.id,
        session.incident_id,
        revision
    );
    if session.is_queued() {
        say!(
            "queued in pool {} (priority {}) until a run slot of the pool frees up",
            session.admission.pool,
            session.admission.priority
        );
    }
    let (row, elapsed) = follow(manager, session.id, skip, &mut signals).await?;
    summary(backends, &row, elapsed).await?;
    if row.is_idle() {
        say!(
            "the agent waits for your answer: `korvus reply {} \"<answer>\"` (its agent is remembered)",
            row.id
        );
    }
    finish_picked_up(manager, &mut signals).await;
    Ok(exit_code(&row))
}

/// How long handing picked-up runs back may take before this process
/// exits anyway.
const HANDBACK: Duration = Duration::from_secs(60);

/// While it waited, this process was a manager of its pool and may have
/// claimed other queued sessions (or resumes): it claims no more, and lets
/// those runs finish instead of cancelling what others are waiting for;
/// Ctrl-C hands them back to the pool (`Manager::drain`), to be resumed by
/// another manager of it.
async fn finish_picked_up(manager: &Manager, signals: &mut Signals) {
    manager.stop_claiming();
    if tokio::time::timeout(Duration::from_millis(200), manager.wait())
        .await
        .is_ok()
    {
        return;
    }
    tell!(
        "korvus: finishing the runs this process picked up from the pool's queue \
         (Ctrl-C hands them back to the pool)"
    );
    tokio::select! {
        () = manager.wait() => {}
        () = signals.recv() => {
            tell!("korvus: handing the runs picked up from the queue back to the pool");
            if !manager.drain(HANDBACK).await {
                tell!("korvus: hand-backs still unwinding; a reaper resumes them");
            }
        }
    }
}

/// How many events the session's log has now.
pub(crate) async fn logged_events(backends: &Backends, id: SessionId) -> u64 {
    match backends
        .logs
        .open(LogId::from_uuid(id.as_uuid()), Access::Read)
        .await
    {
        Ok(log) => log.len().await.unwrap_or(0),
        Err(_) => 0,
    }
}

/// SIGINT and SIGTERM, caught for the duration of a run so they cancel the
/// session instead of killing this process.
pub(crate) struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn install() -> Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt()).context("cannot catch SIGINT")?,
            term: signal(SignalKind::terminate()).context("cannot catch SIGTERM")?,
        })
    }

    pub(crate) async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}

/// Prints the session's events as they arrive (skipping the first `skip`)
/// until its run settled; a signal cancels the session. Returns the final
/// row and the time it took.
pub(crate) async fn follow(
    manager: &Manager,
    id: SessionId,
    skip: u64,
    signals: &mut Signals,
) -> Result<(Session, Duration)> {
    let start = Instant::now();
    let mut events = pin!(manager.watch(id));
    let mut seen = 0u64;
    let mut cancelling = false;
    let mut quiet_since = tokio::time::Instant::now();
    loop {
        tokio::select! {
            item = events.next() => match item {
                Some(Ok(event)) => {
                    seen += 1;
                    if seen > skip {
                        say!("[{:>6.1}s] {}", start.elapsed().as_secs_f64(), render(&event));
                        quiet_since = tokio::time::Instant::now();
                    }
                }
                Some(Err(e)) => return Err(e).context("cannot follow the session's log"),
                None => break,
            },
            () = tokio::time::sleep_until(quiet_since + HEARTBEAT) => {
                say!("[{:>6.1}s] … still running", start.elapsed().as_secs_f64());
                quiet_since = tokio::time::Instant::now();
            }
            () = signals.recv() => {
                if cancelling {
                    tell!("korvus: still cancelling session {id}; waiting for its report to land");
                    continue;
                }
                cancelling = true;
                tell!("korvus: cancelling session {id}; its files and report still land");
                match manager.cancel(id).await {
                    Ok(_) | Err(SessionError::AlreadyEnded { .. }) => {}
                    Err(e) => tell!("korvus: cancel failed: {e}"),
                }
            }
        }
    }
    let row = manager
        .await_settled(id, SETTLE_WAIT)
        .await
        .with_context(|| format!("session {id} did not settle"))?;
    Ok((row, start.elapsed()))
}

/// One event as one line.
pub(crate) fn render(event: &Event) -> String {
    fn short(v: &serde_json::Value) -> String {
        let text = match v {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => String::new(),
            other => other.to_string(),
        };
        clip(&text, 160)
    }
    match &event.kind {
        EventKind::TurnStart { turn } => format!("── turn {turn} started"),
        EventKind::TurnEnd { turn, interrupted } => {
            let how = if *interrupted { " (interrupted)" } else { "" };
            format!("── turn {turn} ended{how}")
        }
        EventKind::Message { role, text } => {
            let who = serde_json::to_value(role)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| format!("{role:?}"));
            // A user or system message the agent printed is not one.
            let from_agent =
                event.by == Some(Author::Agent) && *role != korvus_log::Role::Assistant;
            let who = if from_agent {
                format!("{who} (the agent's)")
            } else {
                who
            };
            format!("{who}: {}", clip(text, 400))
        }
        EventKind::ToolCall { tool, input, .. } => format!("→ {tool} {}", short(input)),
        EventKind::ToolResult { ok, output, .. } => {
            format!("← {} {}", if *ok { "ok" } else { "failed" }, short(output))
        }
        EventKind::Note { text } => {
            let who = match event.by {
                Some(Author::Korvus) => "korvus",
                Some(Author::Agent) => "agent note",
                None => "note",
            };
            format!("{who}: {}", clip(text, 400))
        }
        EventKind::Usage {
            input_tokens,
            output_tokens,
        } => format!("usage: {input_tokens} input / {output_tokens} output tokens"),
        EventKind::MeteredUsage {
            input_tokens,
            output_tokens,
            model,
            unmetered,
        } => {
            let model = model
                .as_deref()
                .map(|m| format!(" ({})", clip(m, 80)))
                .unwrap_or_default();
            let whole = if *unmetered {
                " at least (not metered whole)"
            } else {
                ""
            };
            format!("metered: {input_tokens} input / {output_tokens} output tokens{whole}{model}")
        }
        other => format!("{other:?}"),
    }
}

pub(crate) fn clip(text: &str, max: usize) -> String {
    let one_line = text.replace('\n', " ⏎ ");
    if one_line.chars().count() <= max {
        return one_line;
    }
    let cut: String = one_line.chars().take(max).collect();
    format!("{cut}…")
}

/// The exit code of a final row.
pub(crate) fn exit_code(row: &Session) -> ExitCode {
    match row.status {
        SessionStatus::Completed => ExitCode::SUCCESS,
        SessionStatus::Failed => ExitCode::from(EXIT_FAILED),
        SessionStatus::Cancelled => ExitCode::from(EXIT_CANCELLED),
        _ => ExitCode::from(EXIT_AWAITING_USER),
    }
}

/// The end-of-run summary: status, counters, the landed report revision,
/// this revision's artifacts and what the harvest did.
pub(crate) async fn summary(backends: &Backends, row: &Session, elapsed: Duration) -> Result<()> {
    let reason = row.exit_reason.as_deref().unwrap_or("-");
    say!();
    say!(
        "session {}: {} (exit reason {reason}) after {:.1}s",
        row.id,
        row.status,
        elapsed.as_secs_f64()
    );
    let c = row.counters;
    say!(
        "  counters: {} turn(s), {} tool call(s), {} input / {} output tokens",
        c.turns,
        c.tool_calls,
        c.input_tokens,
        c.output_tokens
    );
    let reports = backends
        .store
        .all_reports(row.id)
        .await
        .context("cannot list reports")?;
    let Some(report) = reports.iter().max_by_key(|r| r.revision) else {
        say!("  no report row");
        return Ok(());
    };
    match &report.markdown_key {
        Some(key) => say!(
            "  report revision {}: {} ({key})",
            report.revision,
            human_bytes(report.markdown_bytes)
        ),
        None => say!("  report revision {}: no report.md landed", report.revision),
    }
    let artifacts = backends
        .store
        .all_session_artifacts(row.id)
        .await
        .context("cannot list artifacts")?;
    let mut this: Vec<_> = artifacts
        .iter()
        .filter(|a| a.revision == report.revision && a.path != korvus_harvest::HARVEST_MANIFEST)
        .collect();
    this.sort_by(|a, b| a.path.cmp(&b.path));
    if !this.is_empty() {
        say!("  artifacts stored for revision {}:", report.revision);
        for a in this {
            say!(
                "    {:<32} {:>9}  {}",
                a.path,
                human_bytes(a.size_bytes),
                a.content_type
            );
        }
    }
    if let Some(h) = harvest_manifest(backends, &artifacts, report).await {
        say!("  harvest: {h}");
    }
    Ok(())
}

/// A runner for the managers of commands that start no run (`cancel`,
/// `reap`): they only end sessions.
#[derive(Debug)]
pub(crate) struct NoRuns;

#[async_trait::async_trait]
impl korvus_runner::Runner for NoRuns {
    async fn run(
        &self,
        _ctx: korvus_runner::RunContext,
    ) -> Result<korvus_runner::RunOutcome, korvus_runner::RunError> {
        Err(korvus_runner::RunError::msg("this command starts no runs"))
    }

    async fn resume(
        &self,
        _ctx: korvus_runner::RunContext,
        _message: String,
    ) -> Result<korvus_runner::RunOutcome, korvus_runner::RunError> {
        Err(korvus_runner::RunError::msg("this command starts no runs"))
    }
}

/// The owner and lease of a running row, for humans.
pub(crate) fn lease_text(row: &Session, expired: bool) -> String {
    if row.is_queued() {
        return format!(
            "queued in pool {}, priority {}: no manager has claimed it yet",
            row.admission.pool, row.admission.priority
        );
    }
    match (row.owner, row.lease_expires_at) {
        (Some(owner), Some(at)) if !expired => {
            format!("{owner}, lease until {} UTC", at.format("%H:%M:%S%.3f"))
        }
        (Some(owner), _) => format!("{owner}, lease expired"),
        _ => "no owner".to_owned(),
    }
}

pub(crate) async fn cancel(global: &Global, session: &str, force: bool) -> Result<ExitCode> {
    let backends = Backends::open(global).await?;
    let id = parse_id::<SessionId>(session, "session")?;
    let row = backends
        .store
        .get_session(id)
        .await
        .with_context(|| format!("cannot read session {id}"))?;
    if row.status.is_terminal() {
        bail!("session {id} already ended ({})", row.status);
    }
    if force && !row.is_idle() {
        // One fenced transition: the run is fenced off (its later writes
        // are refused), the row settled `cancelled` with the revision's
        // report row; its owner stops the agent within a heartbeat period.
        let manager = backends.tool_manager();
        let row = manager
            .force_cancel(id)
            .await
            .with_context(|| format!("cannot force-cancel session {id}"))?;
        say!(
            "session {id} {} (forced; its run at fence {} is fenced off and its owner stops \
             it within one heartbeat period)",
            row.status,
            row.fence - 1
        );
        manager.stop().await;
        backends.close().await;
        return Ok(ExitCode::SUCCESS);
    }
    // The manager's cancel: an idle row or an orphan ends here and now; a
    // run with a live owner gets a request, which its owner answers.
    let manager = backends.tool_manager();
    let first = manager
        .cancel(id)
        .await
        .with_context(|| format!("cannot cancel session {id}"))?;
    let code = if first.status.is_terminal() {
        let how = if row.is_idle() {
            "it was waiting for the user"
        } else {
            "its owner was gone; taken over"
        };
        say!("session {id}: {} ({how})", first.status);
        ExitCode::SUCCESS
    } else {
        say!(
            "asked the process that runs session {id} to cancel it ({}); waiting for it to land",
            lease_text(&first, false)
        );
        match cancelled(&backends, &manager, id).await? {
            Some(row) => {
                say!(
                    "session {id}: {} (exit reason {})",
                    row.status,
                    row.exit_reason.as_deref().unwrap_or("-")
                );
                ExitCode::SUCCESS
            }
            None => bail!(
                "session {id} did not end within {SETTLE_WAIT:?}: its owner keeps renewing \
                 its lease but does not answer; `korvus cancel --force {id}` marks it cancelled"
            ),
        }
    };
    manager.stop().await;
    backends.close().await;
    Ok(code)
}

/// Waits for a requested cancel to land, asking again every second: once
/// the owner's lease expired (it died), that takes the session over.
async fn cancelled(
    backends: &Backends,
    manager: &Manager,
    id: SessionId,
) -> Result<Option<Session>> {
    let deadline = Instant::now() + SETTLE_WAIT;
    let mut asked = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let row = backends.store.get_session(id).await?;
        if row.status.is_terminal() {
            return Ok(Some(row));
        }
        if Instant::now() > deadline {
            return Ok(None);
        }
        if asked.elapsed() >= Duration::from_secs(1) {
            asked = Instant::now();
            match manager.cancel(id).await {
                Ok(row) if row.status.is_terminal() => return Ok(Some(row)),
                Ok(_) => {}
                Err(SessionError::AlreadyEnded { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

pub(crate) async fn reap(
    global: &Global,
    apply: bool,
    resume: bool,
    retention: korvus_workspace::KeptRetention,
) -> Result<ExitCode> {
    if resume && global.resume_orphans == 0 {
        bail!("--resume sends orphans back to be resumed, but --resume-orphans is 0: raise it, or leave --resume out to settle them");
    }
    let backends = Backends::open(global).await?;
    let orphans = backends.store.expired_leases().await?;
    // Dirs first, rows second: a session started in between has a row
    // with a live lease by the time it is read, so its dir is kept.
    let dirs = korvus_workspace::session_dirs(&backends.scratch)
        .await
        .with_context(|| format!("cannot list {}", backends.scratch.display()))?;
    let mut unused = Vec::new();
    for id in dirs {
        let in_use = match backends.store.get_session(id).await {
            Ok(row) => {
                row.status == SessionStatus::Running
                    && !row.is_idle()
                    && !orphans.iter().any(|(o, _)| *o == id)
            }
            Err(korvus_store::StoreError::NotFound { .. }) => false,
            Err(e) => return Err(e.into()),
        };
        if !in_use {
            unused.push(id);
        }
    }
    if !apply {
        say!(
            "{} orphan(s): running sessions whose process stopped renewing its lease",
            orphans.len()
        );
        for (id, _) in &orphans {
            let row = backends.store.get_session(*id).await?;
            say!(
                "  session {id}  fence {}  {}",
                row.fence,
                lease_text(&row, true)
            );
        }
        say!(
            "{} scratch dir(s) under {} no running session uses",
            unused.len(),
            backends.scratch.display()
        );
        for id in &unused {
            say!("  {id}");
        }
        crate::salvage::list_kept(&backends.scratch, &unused).await;
        say!("dry run: `korvus reap --apply` settles the orphans owner_lost (`--apply --resume` sends them back to be resumed), stores kept dirs and removes the dirs");
        backends.close().await;
        return Ok(ExitCode::SUCCESS);
    }
    let manager = backends.tool_manager_resuming(resume);
    let (queued, ended): (Vec<_>, Vec<_>) = manager
        .reap_orphans()
        .await?
        .into_iter()
        .partition(korvus_store::Session::is_queued);
    let (pending, settled): (Vec<_>, Vec<_>) = ended
        .into_iter()
        .partition(korvus_store::Session::is_resume_pending);
    say!("settled {} orphan(s)", settled.len());
    for row in &settled {
        say!(
            "  session {}  {} ({})",
            row.id,
            row.status,
            row.exit_reason.as_deref().unwrap_or("-")
        );
    }
    if !pending.is_empty() {
        say!(
            "sent back {} orphan(s) to be resumed by a `korvus serve` of their pool",
            pending.len()
        );
        for row in &pending {
            say!(
                "  session {}  resume pending (attempt {})",
                row.id,
                row.attempt
            );
        }
    }
    if !queued.is_empty() {
        say!("queued again {} orphan(s) that never started", queued.len());
        for row in &queued {
            say!("  session {}  queued (fence {})", row.id, row.fence);
        }
    }
    // The orphans settled just now have dirs too.
    for row in &settled {
        if !unused.contains(&row.id) {
            unused.push(row.id);
        }
    }
    // Output runs could not store is stored now, if the cause is gone;
    // then the retention of what stays kept.
    let stays = crate::salvage::kept_on_reap(&manager, &backends.scratch, &unused).await;
    crate::salvage::prune_on_reap(&manager, retention).await?;
    // The listing above is minutes old for a slow operator: each session's
    // row is read again right before anything of it is touched, an active
    // one is left alone, and only the revisions up to the one just read are
    // reaped, so a run that starts after that read (a reopen) keeps its
    // agent and its dir.
    let mut reaped = korvus_workspace::Reaped::default();
    let mut kept = Vec::new();
    for id in unused {
        let through = match backends.store.get_session(id).await {
            Ok(row) if row.is_active() => {
                kept.push(id);
                continue;
            }
            Ok(row) => row.revision,
            Err(korvus_store::StoreError::NotFound { .. }) => u32::MAX,
            Err(e) => return Err(e.into()),
        };
        let one = korvus_workspace::reap_session_through(&backends.scratch, id, through)
            .await
            .with_context(|| format!("cannot reap {}", backends.scratch.display()))?;
        reaped.removed.extend(one.removed);
        reaped.failed.extend(one.failed);
        reaped.agents_stopped.extend(one.agents_stopped);
        reaped.kept.extend(one.kept);
    }
    for id in &kept {
        say!("  kept {id}: the session is active again");
    }
    say!(
        "reaped {} scratch dir(s) under {}",
        reaped.removed.len(),
        backends.scratch.display()
    );
    for id in &reaped.removed {
        say!("  removed {id}");
    }
    for pgid in &reaped.agents_stopped {
        say!("  stopped agent process group {pgid}, left running by a dead run");
    }
    for (path, reason) in &reaped.kept {
        say!(
            "  kept {}: the only copy of output that is not stored ({reason})",
            path.display()
        );
    }
    for (path, e) in &reaped.failed {
        tell!("korvus: could not remove {}: {e}", path.display());
    }
    if stays > 0 {
        say!("{stays} kept dir(s) still hold output that is not stored; `korvus salvage <id>` stores them once the cause is gone");
    }
    let failed = !reaped.failed.is_empty();
    manager.stop().await;
    backends.close().await;
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
