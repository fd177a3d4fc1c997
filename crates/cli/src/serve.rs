//! `korvus serve`: the HTTP API and the live web view of `korvus-http` on
//! the selected backends, behind a token.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use korvus_command::{CommandRunner, Dialect, Inherit};
use korvus_http::Guard;
use korvus_store::NewIncident;

use crate::compose::{shown, Backends};
use crate::confine::ConfineArgs;
use crate::inspect::{demo_dir, pin};
use crate::session::{AgentArgs, Signals};
use crate::webhook::Webhook;
use crate::Global;

/// How long open connections (event streams, downloads) get to finish
/// after the manager stopped.
const DRAIN: Duration = Duration::from_secs(5);

/// `korvus serve`.
#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on. Anything but loopback makes the API reachable
    /// from the network: put TLS in front.
    #[arg(long, default_value = "127.0.0.1:8787")]
    listen: SocketAddr,
    /// The token every request needs (at least 16 bytes). Prefer the
    /// environment variable: a command line is visible to every process on
    /// the machine. Without one, a random token is generated and printed.
    #[arg(long, env = "KORVUS_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Another `Host` the server answers to, e.g. `korvus.internal:8787`
    /// behind a proxy (repeatable). Loopback names are always allowed.
    #[arg(long = "allow-host", value_name = "HOST[:PORT]")]
    allow_hosts: Vec<String>,
    /// The agent sessions run: `codex` or `claude-code` (a preset), or a
    /// program speaking the CommandRunner protocol or `--agent-dialect`.
    /// Default: the bundled demo agent, with a demo incident pinned to a
    /// small repository when there is no incident yet.
    #[arg(long, value_name = "codex|claude-code|PROGRAM")]
    agent: Option<String>,
    /// An argument for the agent (repeat for more).
    #[arg(long = "agent-arg", value_name = "ARG", allow_hyphen_values = true)]
    agent_args: Vec<String>,
    /// Pass korvus's own variable NAME to the agent (repeatable).
    #[arg(long = "agent-env-pass", value_name = "NAME")]
    env_pass: Vec<String>,
    /// The language the agent speaks on stdout (see `korvus run --help`).
    #[arg(
        long = "agent-dialect",
        value_name = "korvus|codex|claude-code",
        requires = "agent"
    )]
    dialect: Option<Dialect>,
    /// With `--agent codex|claude-code`: the agent's binary (see `korvus
    /// run --help`).
    #[arg(long = "agent-program", value_name = "PATH", requires = "agent")]
    agent_program: Option<PathBuf>,
    /// With a preset: the model API's base URL (see `korvus run --help`).
    #[arg(long = "model-endpoint", value_name = "URL", requires = "agent")]
    model_endpoint: Option<String>,
    /// With a preset: the model to ask for.
    #[arg(long, value_name = "NAME", requires = "agent")]
    model: Option<String>,
    /// The variable holding the model API's key, read by korvus's model
    /// gateway only (see `korvus run --help`).
    #[arg(long = "model-key-var", value_name = "NAME", requires = "agent")]
    model_key_var: Option<String>,
    /// With `--model-key-var`: a PEM file of the authorities the gateway
    /// trusts for the endpoint (see `korvus run --help`).
    #[arg(long = "model-ca", value_name = "PEM", requires = "model_key_var")]
    model_ca: Option<PathBuf>,
    /// With a program of your own: the API the endpoint speaks (see
    /// `korvus run --help`).
    #[arg(long = "model-api", value_enum, default_value_t = crate::session::ModelApi::Openai)]
    model_api: crate::session::ModelApi,
    /// Serve everything under this path (e.g. `/korvus`, behind a proxy
    /// that forwards that prefix): the view at `<path>/`, the API at
    /// `<path>/api/…`.
    #[arg(long, value_name = "PATH", value_parser = base_path)]
    base_path: Option<String>,
    /// End a session `failed` / `timeout` after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 3600)]
    timeout: u64,
    /// Serve `/metrics` (Prometheus text) on this address, without the
    /// token, instead of beside the API behind it. For a scraper on an
    /// internal network; anything but loopback makes the numbers public.
    #[arg(long = "metrics-listen", value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
    /// POST a signed event (Standard Webhooks) to this URL whenever a
    /// session ends or waits for the user; retried until it answers 2xx.
    #[arg(long, value_name = "URL")]
    webhook: Option<String>,
    /// The webhooks' signing secret, `whsec_<base64>`. Prefer the
    /// environment variable: a command line is visible to every process.
    #[arg(
        long = "webhook-secret",
        env = "KORVUS_WEBHOOK_SECRET",
        hide_env_values = true,
        value_name = "whsec_…"
    )]
    webhook_secret: Option<String>,
    /// Seconds one webhook attempt may take; a deliverer's claim on an
    /// event lasts three times as long, after which another replica may
    /// send it.
    #[arg(long = "webhook-timeout", value_name = "SECONDS", default_value_t = 10)]
    webhook_timeout: u64,
    /// Close a connection that has not sent a whole request head within
    /// this many seconds (a new one, or a kept-alive one between requests).
    #[arg(
        long = "header-read-timeout",
        value_name = "SECONDS",
        default_value_t = korvus_http::DEFAULT_HEADER_READ_TIMEOUT.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    header_read_timeout: u64,
    /// What a stop (SIGTERM, Ctrl-C) does to the sessions running here:
    /// `cancel` them (their reports land `cancelled`), or `handoff` them —
    /// each agent is stopped, its files stored as a checkpoint, and the
    /// session waits for another `korvus serve` of the pool (or the next
    /// start) to resume it. Queued sessions stay queued either way.
    #[arg(
        long = "on-stop",
        value_enum,
        env = "KORVUS_ON_STOP",
        default_value_t = OnStop::Cancel
    )]
    on_stop: OnStop,
    #[command(flatten)]
    confine: ConfineArgs,
}

/// `korvus serve --on-stop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OnStop {
    /// Cancel the running sessions.
    Cancel,
    /// Hand the running sessions off to the pool, to be resumed.
    Handoff,
}

/// How long a hand-off may take before `korvus serve` exits anyway: the
/// runs still unwinding are resumed by a reaper once the lease expires.
const HANDOFF_DEADLINE: Duration = Duration::from_secs(120);

pub(crate) async fn serve(
    global: &Global,
    args: ServeArgs,
    described: Option<String>,
) -> Result<ExitCode> {
    let (token, generated) = match args.token.clone().filter(|t| !t.is_empty()) {
        Some(t) => (t, false),
        None => (
            Guard::generate_token().context("cannot generate a token")?,
            true,
        ),
    };
    let mut signals = Signals::install()?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr().context("no local address")?;
    let guard = Guard::new(token.clone(), allowed_hosts(addr, &args.allow_hosts))
        .context("invalid --token / KORVUS_TOKEN")?;
    let prometheus = crate::metrics::install()?;
    // Bound before anything starts, so a bad address stops nothing.
    let metrics_listener = match args.metrics_listen {
        Some(at) => Some(
            tokio::net::TcpListener::bind(at)
                .await
                .with_context(|| format!("cannot listen on {at} for /metrics"))?,
        ),
        None => None,
    };
    let webhook = Webhook::parse(
        args.webhook.as_deref(),
        args.webhook_secret.as_deref(),
        Duration::from_secs(args.webhook_timeout.max(1)),
    )?;
    let backends = Backends::open_checked(global).await?;
    let webhooks = match webhook.map(|w| w.start(&backends)).transpose() {
        Ok(w) => w,
        Err(e) => {
            backends.close().await;
            return Err(e);
        }
    };
    let timeout = Duration::from_secs(args.timeout);
    let http = korvus_http::Server::default()
        .header_read_timeout(Duration::from_secs(args.header_read_timeout));
    let args_base = args.base_path.clone();
    let args_on_stop = args.on_stop;
    let runner = match runner(&backends, args).await {
        Ok(r) => r,
        Err(e) => {
            backends.close().await;
            return Err(e);
        }
    };
    let manager = backends.manager(runner, Some(timeout), described);
    let base = args_base.unwrap_or_default();
    let scrape = crate::metrics::router(manager.clone(), prometheus);
    let api = korvus_http::router(manager.clone());
    // Stopped with the API's listener (below).
    let (metrics_stop, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
    let protected = match metrics_listener {
        None => guard.protect(api.merge(scrape)),
        Some(listener) => {
            if let Ok(bound) = listener.local_addr() {
                println!("korvus serve: metrics on http://{bound}/metrics");
            }
            let scrape = crate::metrics::alone(scrape);
            tokio::spawn(http.clone().run(listener, scrape, async move {
                let _ = metrics_stopped.await;
            }));
            guard.protect(api)
        }
    };
    let app = if base.is_empty() {
        protected
    } else {
        korvus_http::mount(axum::Router::new(), &base, protected)
    };
    for (what, place) in &backends.places {
        println!("korvus serve: {what:<44} {place}");
    }
    let shown_token = if generated {
        token.as_str()
    } else {
        "<your token>"
    };
    println!("korvus serve: listening on http://{addr}{base}");
    println!("korvus serve: open http://{addr}{base}/#token={shown_token}");
    println!("korvus serve: API calls send `Authorization: Bearer <token>`; Ctrl-C stops");

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut server = tokio::spawn(http.run(listener, app, async move {
        let _ = stop_rx.await;
    }));
    let early = tokio::select! {
        () = signals.recv() => None,
        joined = &mut server => Some(joined),
    };
    if let Some(joined) = early {
        manager.stop().await;
        backends.close().await;
        return match joined {
            Ok(()) => bail!("the server stopped by itself"),
            Err(e) => Err(e).context("the server task failed"),
        };
    }
    let on_stop = args_on_stop;
    let stopped = async {
        match on_stop {
            OnStop::Cancel => {
                eprintln!(
                    "korvus serve: stopping (running sessions are cancelled; their reports land)"
                );
                manager.stop().await;
            }
            OnStop::Handoff => {
                eprintln!("korvus serve: stopping (running sessions are handed off to the pool, to be resumed)");
                if !manager.drain(HANDOFF_DEADLINE).await {
                    eprintln!("korvus serve: hand-offs still unwinding after {HANDOFF_DEADLINE:?}; a reaper resumes them");
                }
            }
        }
    };
    // Runs end first, so every event stream sends its `end`; then the
    // listener drains, for at most `DRAIN`. A second signal gives up on
    // the runs (a reaper resumes or settles them once the lease expires).
    tokio::select! {
        () = stopped => {}
        () = signals.recv() => {
            eprintln!("korvus serve: second signal: exiting without waiting for the runs");
            server.abort();
            return Ok(ExitCode::FAILURE);
        }
    }
    if let Some(webhooks) = webhooks {
        webhooks.stop(DRAIN).await;
    }
    let _ = stop_tx.send(());
    let _ = metrics_stop.send(());
    match tokio::time::timeout(DRAIN, &mut server).await {
        Ok(Ok(())) => {}
        Err(_) => server.abort(),
        Ok(Err(e)) => eprintln!("korvus serve: the server task failed: {e}"),
    }
    backends.close().await;
    Ok(ExitCode::SUCCESS)
}

/// The agent: the one given, or the bundled demo agent (and, on an empty
/// store, a demo incident pinned to the demo repository).
async fn runner(backends: &Backends, args: ServeArgs) -> Result<CommandRunner> {
    if let Some(agent) = args.agent {
        let agent = AgentArgs {
            agent: Some(agent),
            agent_args: args.agent_args,
            agent_program: args.agent_program,
            model_endpoint: args.model_endpoint,
            model: args.model,
            model_key_var: args.model_key_var,
            model_ca: args.model_ca,
            model_api: args.model_api,
            dialect: args.dialect,
            timeout: args.timeout,
            env_inherit: Inherit::Core,
            env_set: Vec::new(),
            env_pass: args.env_pass,
            confine: args.confine,
        };
        return agent.runner(backends);
    }
    if !args.agent_args.is_empty() {
        bail!("--agent-arg needs --agent");
    }
    let dir = demo_dir(backends);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", shown(&dir)))?;
    let agent = dir.join("agent.sh");
    let mut runner = CommandRunner::new("sh")
        .arg(&agent)
        .env_pass("KORVUS_DEMO_PAUSE");
    for name in &args.env_pass {
        runner = runner.env_pass(name.as_str());
    }
    // Refused (an agent user that cannot reach the scratch root) before
    // the demo incident is written.
    let runner = args.confine.apply(runner, backends)?;
    std::fs::write(&agent, crate::demo::AGENT)
        .with_context(|| format!("cannot write {}", agent.display()))?;
    let first = backends
        .store
        .list_incidents(korvus_store::Page::first(1))
        .await?;
    if first.items.is_empty() {
        let repo = dir.join("repo");
        crate::demo::build_repo(&repo).await?;
        let incident = backends
            .store
            .create_incident(NewIncident {
                title: "db-1: disk 95% full (demo)".into(),
                workspace: Some(pin(&repo, "HEAD").await?),
            })
            .await
            .context("cannot create the demo incident")?;
        println!("korvus serve: created demo incident {}", incident.id);
    }
    Ok(runner)
}

/// The `Host` values a browser sends for `listen`: the address itself and,
/// on loopback, `localhost`, `127.0.0.1` and `[::1]` with its port; plus
/// the extra ones given.
fn allowed_hosts(listen: SocketAddr, extra: &[String]) -> Vec<String> {
    let port = listen.port();
    let mut hosts = vec![listen.to_string()];
    if listen.ip().is_loopback() || listen.ip().is_unspecified() {
        for name in ["localhost", "127.0.0.1", "[::1]"] {
            hosts.push(format!("{name}:{port}"));
            if port == 80 {
                // Browsers leave the default port out of `Host`.
                hosts.push(name.to_owned());
            }
        }
    }
    hosts.extend(extra.iter().cloned());
    hosts
}

/// A `--base-path`: `/` and segments, no trailing `/` (`/` alone is the root).
fn base_path(text: &str) -> std::result::Result<String, String> {
    let trimmed = text.trim_end_matches('/');
    let valid = text.starts_with('/')
        && trimmed.split('/').skip(1).all(|seg| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && seg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.~".contains(c))
        });
    if valid {
        Ok(trimmed.to_owned())
    } else {
        Err(format!("{text:?} is not a path like /korvus"))
    }
}
