//! `korvus`: runs agent sessions from a terminal.
//!
//! With no configuration everything lives in one data dir (`./.korvus`):
//! a SQLite database (rows and turn logs), a blob directory and the scratch
//! root; migrations are applied automatically. `--database-url postgres://…`
//! and `--s3-bucket …` select PostgreSQL and S3 instead; the commands are the
//! same. `korvus demo` shows the whole lifecycle with a bundled agent.
//!
//! This binary is the composition root of korvus: `compose.rs` is the one
//! place a `Manager` is built from concrete backends.
//!
//! Exit codes: 0 completed (or the command succeeded), 1 error, 2 usage,
//! 3 session failed, 4 session cancelled, 5 session awaiting the user, 141
//! stdout closed by its reader.
#![deny(missing_docs)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

mod budget;
mod compose;
mod confine;
mod demo;
mod inspect;
mod json;
mod limits;
mod metrics;
mod out;
mod place;
mod prune;
mod remember;
mod salvage;
mod serve;
mod session;
mod sweep;
mod webhook;

/// Exit code of a session that failed.
const EXIT_FAILED: u8 = 3;
/// Exit code of a session that was cancelled.
const EXIT_CANCELLED: u8 = 4;
/// Exit code of a session that waits for the user.
const EXIT_AWAITING_USER: u8 = 5;

/// Exit code of a usage error (a malformed argument), as clap uses.
const EXIT_USAGE: u8 = 2;
/// Exit code when stdout or stderr was closed under us (`korvus show | head`):
/// what a shell reports for a process ended by `SIGPIPE`.
const EXIT_BROKEN_PIPE: u8 = 141;

/// A malformed argument the parser could not refuse itself (an id that is
/// not a UUID): the command exits [`EXIT_USAGE`].
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Ends the process quietly with [`EXIT_BROKEN_PIPE`] when a print finds
/// its stdout or stderr closed (the reader went away, as `head` does): the
/// one place that handles it, for every `println!` of every command. Any
/// other panic goes to the default hook.
fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let text = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if text.starts_with("failed printing to std") && text.contains("Broken pipe") {
            std::process::exit(i32::from(EXIT_BROKEN_PIPE));
        }
        default(info);
    }));
}

/// Whether `e` comes from writing to a closed pipe.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Run AI-agent sessions inside incidents and keep everything they produce.
#[derive(Debug, Parser)]
#[command(
    name = "korvus",
    version,
    after_help = "Exit codes: 0 completed / success, 1 error, 2 usage, 3 session failed, \
                  4 session cancelled, 5 session awaiting the user."
)]
struct Cli {
    #[command(flatten, next_help_heading = "Global options")]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// The CLI's default data dir, relative to the working directory. Not to be
/// confused with `korvus_workspace::METADATA_DIR`, the `.korvus` folder inside
/// each scratch dir where korvus writes its run files.
pub(crate) const DEFAULT_DATA_DIR: &str = ".korvus";

/// Where things are stored.
#[derive(Debug, Args)]
struct Global {
    /// Data dir: SQLite database, blobs and scratch dirs (the latter two
    /// also with PostgreSQL / S3 when those are not chosen).
    #[arg(
        long,
        env = "KORVUS_DATA_DIR",
        default_value = DEFAULT_DATA_DIR,
        global = true
    )]
    data_dir: PathBuf,
    /// PostgreSQL instead of SQLite: `postgres://user:pass@host:5432/db`.
    #[arg(
        long,
        env = "KORVUS_DATABASE_URL",
        hide_env_values = true,
        global = true
    )]
    database_url: Option<String>,
    /// S3 bucket instead of the blob directory (credentials from the AWS
    /// default chain: environment, profile, instance metadata).
    #[arg(long, env = "KORVUS_S3_BUCKET", global = true)]
    s3_bucket: Option<String>,
    /// Endpoint of an S3-compatible service, e.g. `http://127.0.0.1:9000`.
    #[arg(long, env = "KORVUS_S3_ENDPOINT", global = true)]
    s3_endpoint: Option<String>,
    /// The bucket's region.
    #[arg(long, env = "KORVUS_S3_REGION", global = true)]
    s3_region: Option<String>,
    /// Path-style addressing (most self-hosted S3-compatible servers need it).
    #[arg(long, env = "KORVUS_S3_PATH_STYLE", global = true)]
    s3_path_style: bool,
    /// Key prefix inside the bucket.
    #[arg(long, env = "KORVUS_S3_PREFIX", global = true)]
    s3_prefix: Option<String>,
    /// Seconds a lease renewal keeps this process's sessions: when this
    /// process stops renewing (it was killed), any other korvus process on
    /// the same database takes its sessions over this long after.
    #[arg(long, env = "KORVUS_LEASE_TTL", value_name = "SECS", global = true,
          default_value_t = 30.0, value_parser = seconds)]
    lease_ttl: f64,
    /// Seconds between two checkpoints of a running agent's scratch dir at
    /// most (one also follows each turn's end): a korvus process that dies
    /// loses at most this much of its agents' output. 0 turns checkpoints
    /// off.
    #[arg(long, env = "KORVUS_CHECKPOINT_INTERVAL", value_name = "SECS", global = true,
          default_value_t = 60.0, value_parser = seconds_or_zero)]
    checkpoint_interval: f64,
    /// Resume a session whose korvus process died, instead of ending it
    /// `owner_lost`: at most N attempts of its revision, each restoring its
    /// files from the last checkpoint and running the agent again as a
    /// resume (`KORVUS_ATTEMPT`). 0 turns it off: such a session ends
    /// `owner_lost`, its output salvaged.
    #[arg(
        long,
        env = "KORVUS_RESUME_ORPHANS",
        value_name = "N",
        global = true,
        default_value_t = korvus_session::DEFAULT_RESUME_ORPHANS
    )]
    pub(crate) resume_orphans: u32,
    /// Seconds between two lease renewals (at most a third of the ttl).
    #[arg(long, env = "KORVUS_HEARTBEAT", value_name = "SECS", global = true,
          default_value_t = 10.0, value_parser = seconds)]
    heartbeat: f64,
    /// Runs this process executes at once; sessions created past it are
    /// queued in the database until a run slot of a korvus process of the
    /// same pool frees up.
    #[arg(long, env = "KORVUS_MAX_RUNNING", value_name = "N", global = true,
          default_value_t = korvus_session::DEFAULT_MAX_RUNNING as u32,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_running: u32,
    /// At most this many runs in progress per queue key (the incident)
    /// across every korvus process of the pool; give them all the same.
    #[arg(long, env = "KORVUS_MAX_RUNNING_PER_KEY", value_name = "N", global = true,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_running_per_key: Option<u32>,
    /// The runner pool of this process: it queues its sessions under it
    /// and runs only sessions queued under it. Give processes that run
    /// different agents different pools.
    #[arg(long, env = "KORVUS_POOL", value_name = "NAME", global = true,
          default_value = korvus_store::DEFAULT_POOL, value_parser = pool_name)]
    pool: String,
}

/// A runner pool name the store accepts (1 to 64 bytes, no NUL).
fn pool_name(text: &str) -> std::result::Result<String, String> {
    let admission = korvus_store::Admission {
        pool: text.to_owned(),
        ..korvus_store::Admission::default()
    };
    korvus_store::validate::admission(&admission)
        .map(|()| text.to_owned())
        .map_err(|e| e.to_string())
}

/// A positive number of seconds, at most a day.
fn seconds(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 86_400.0 => Ok(s),
        _ => Err(format!(
            "{text:?} is not a number of seconds between 0 and 86400"
        )),
    }
}

/// As [`seconds`], zero allowed (it turns something off).
fn seconds_or_zero(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s == 0.0 => Ok(s),
        _ => seconds(text),
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Create, list or close incidents.
    Incident {
        #[command(subcommand)]
        command: IncidentCommand,
    },
    /// Start a session with an agent and follow it live until it ends
    /// (Ctrl-C cancels it; its files and report still land).
    Run(session::RunArgs),
    /// Run one more iteration of a finished session with a new message.
    Reopen(session::ReopenArgs),
    /// Set a session's budget (or with --incident, its incident's) — the
    /// tokens and wall time its runs may spend — and show where it
    /// stands. A session paused at its budget (`budget_reached`)
    /// continues once it is raised, followed live like `reply`.
    Budget(budget::BudgetArgs),
    /// Answer a session waiting for the user (its agent asked a question):
    /// the next iteration runs with the answer, followed live like `run`.
    Reply(session::ReopenArgs),
    /// Show a session: status, counters, reports, artifacts, harvest.
    Show {
        /// Session id.
        session: String,
        /// Print it as JSON: `{"session", "incident", "cause", "reports",
        /// "artifacts"}`, the HTTP API's objects (docs/operations.md).
        #[arg(long)]
        json: bool,
    },
    /// List incidents and their sessions, a page at a time (incidents
    /// oldest first, each with its first sessions).
    Ls {
        /// Only this incident (its sessions paged by --limit and --after).
        #[arg(long)]
        incident: Option<String>,
        /// Rows per page: incidents, or with --incident its sessions.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1000))]
        limit: u32,
        /// Start after this cursor (printed at the end of the page before).
        #[arg(long, value_name = "CURSOR")]
        after: Option<String>,
        /// Print the page as JSON: `{"incidents": [{"incident",
        /// "sessions", "next_sessions"}], "next"}`.
        #[arg(long)]
        json: bool,
    },
    /// Print a session's report, or one of its artifacts.
    Cat {
        /// Session id.
        session: String,
        /// Artifact path (default: the report).
        path: Option<String>,
        /// Revision (default: the newest).
        #[arg(long)]
        revision: Option<u32>,
    },
    /// Write a session's turn log as JSON lines.
    Export {
        /// Session id.
        session: String,
        /// Write to this file instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Cancel a session, wherever it runs: through the database, which the
    /// process that runs it watches. A session whose process is gone is
    /// taken over and cancelled once its lease expired.
    Cancel {
        /// Session id.
        session: String,
        /// Cancel the session now, even while its owner's lease is live:
        /// one fenced transition ends the run's row `cancelled` with a
        /// report row; every later write of the run is refused, and its
        /// owner stops its agent within one heartbeat period.
        #[arg(long)]
        force: bool,
    },
    /// Settle sessions whose process is gone (their lease expired), store
    /// kept scratch dirs, and remove scratch dirs no running session uses.
    /// Dry run unless --apply.
    Reap {
        /// Settle the orphans `owner_lost` (their lost runs' dirs
        /// salvaged), store kept dirs, and remove the dirs.
        #[arg(long)]
        apply: bool,
        /// With `--apply`: send an orphan whose run had started back to
        /// its pool to be resumed by a running `korvus serve` (at most
        /// `--resume-orphans` attempts), instead of settling it.
        #[arg(long, requires = "apply")]
        resume: bool,
        /// Kept dirs (output not stored) older than this many days are
        /// removed, each one named.
        #[arg(long, default_value_t = 30, value_name = "DAYS")]
        kept_max_age: u64,
        /// Kept dirs beyond this many bytes in all are removed, oldest
        /// first, each one named.
        #[arg(long, default_value_t = 10 * 1024 * 1024 * 1024, value_name = "BYTES")]
        kept_max_bytes: u64,
    },
    /// Store what a session's runs left kept (their output could not be
    /// stored when they ended: the blob store refused, the disk was full)
    /// once the cause is gone; an orphan is taken over and settled first.
    Salvage {
        /// Session id.
        session: String,
        /// Give the session's kept dirs up instead: remove them, each named
        /// (for output that can never be stored whole).
        #[arg(long)]
        discard: bool,
    },
    /// Find blobs no report or artifact row references and, with --apply,
    /// delete the ones older than the grace period whose session has no
    /// live run. Dry run unless --apply.
    Sweep {
        /// Delete the orphans.
        #[arg(long)]
        apply: bool,
        /// Seconds an unreferenced blob is kept (its rows may still be on
        /// their way); at least the persist timeout plus 5 minutes.
        #[arg(long, value_name = "SECS", default_value_t = 86_400)]
        grace: u64,
    },
    /// Delete finished sessions that ended before a cut-off (rows, turn
    /// log, blobs); running, queued and waiting ones are skipped and
    /// counted. Dry run unless --apply.
    Prune(prune::PruneArgs),
    /// Apply pending database migrations (every command also does).
    Migrate,
    /// Print a shell completion script: `korvus completions bash >
    /// /etc/bash_completion.d/korvus` (or zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Serve the HTTP API and the live web view (127.0.0.1:8787 by
    /// default), behind a token.
    Serve(serve::ServeArgs),
    /// Show the whole lifecycle on the embedded default with a bundled agent.
    Demo {
        #[command(flatten)]
        agent: demo::DemoAgent,
        #[command(flatten)]
        confine: confine::ConfineArgs,
    },
}

#[derive(Debug, Subcommand)]
enum IncidentCommand {
    /// Create an incident; prints its id.
    New {
        /// Title.
        title: String,
        /// A git repository whose trees (skills/, docs/, runbooks/) each
        /// session gets, read-only.
        #[arg(long, requires = "commit")]
        repo: Option<PathBuf>,
        /// The revision to pin (resolved to a commit now).
        #[arg(long, requires = "repo")]
        commit: Option<String>,
    },
    /// List incidents.
    Ls {
        /// Print them as one JSON array of the HTTP API's incident objects.
        #[arg(long)]
        json: bool,
    },
    /// Close an incident to new sessions.
    Close {
        /// Incident id.
        incident: String,
    },
}

fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        eprintln!("korvus: error: internal error: {info}");
    }));
    // Agents run as children of this process: keep its memory and
    // /proc/<pid>/environ from processes of the same user.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("korvus: warning: cannot make this process non-dumpable ({e}); agents of the same user can read its environment");
    }
    let matches = <Cli as clap::CommandFactory>::command().get_matches();
    // The agent options of a command that creates sessions, remembered
    // with each (`remember.rs`).
    let described = match matches.subcommand() {
        Some(("run" | "serve", sub)) => remember::describe(sub),
        _ => None,
    };
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if password_in_arguments(std::env::args_os()) {
        eprintln!(
            "korvus: warning: --database-url carries a password on the command line, \
             where every process on this machine can read it; set KORVUS_DATABASE_URL \
             (or a ~/.pgpass file) instead"
        );
    }
    if token_in_arguments(std::env::args_os()) {
        eprintln!(
            "korvus: warning: --token is on the command line, where every process on this \
             machine can read it; set KORVUS_TOKEN instead"
        );
    }
    init_tracing();
    quiet_on_broken_pipe();
    // A manager of many agents needs descriptors; agents get the original
    // soft limit back when they start.
    if let Err(e) = korvus_command::raise_open_file_limit() {
        eprintln!("korvus: warning: cannot raise the open-file limit ({e})");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("korvus: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli, described)) {
        // The command went on to its end without its stdout (or stderr):
        // it says so as a process ended by `SIGPIPE` would.
        Ok(_) if out::closed() => ExitCode::from(EXIT_BROKEN_PIPE),
        Ok(code) => code,
        Err(e) if broken_pipe(&e) => ExitCode::from(EXIT_BROKEN_PIPE),
        Err(e) => {
            eprintln!("korvus: error: {}", one_line(&e));
            if e.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Whether a `--database-url` argument holds a password
/// (`scheme://user:password@host`).
fn password_in_arguments(args: impl IntoIterator<Item = std::ffi::OsString>) -> bool {
    let args: Vec<String> = args
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let values = args.iter().enumerate().filter_map(|(i, arg)| {
        if arg == "--database-url" {
            args.get(i + 1).map(String::as_str)
        } else {
            arg.strip_prefix("--database-url=")
        }
    });
    values.into_iter().any(|url| {
        let Some((_, rest)) = url.split_once("://") else {
            return false;
        };
        let userinfo = rest.split(['/', '?']).next().unwrap_or("");
        userinfo
            .rsplit_once('@')
            .is_some_and(|(user, _)| user.split_once(':').is_some_and(|(_, pw)| !pw.is_empty()))
    })
}

/// Whether `--token` (of `korvus serve`) was given as an argument.
fn token_in_arguments(args: impl IntoIterator<Item = std::ffi::OsString>) -> bool {
    args.into_iter().any(|a| {
        let a = a.to_string_lossy();
        a == "--token" || a.starts_with("--token=")
    })
}

/// The error and its causes on one line, outermost first.
fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string().replace('\n', " ");
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    parts.join(": ")
}

/// Library logs go to stderr, filtered by `KORVUS_LOG` (default `error`):
/// a level (`info`), or `RUST_LOG`-style targets and levels
/// (`korvus_session=debug,korvus_store_sql=info`, a bare level the default
/// for the rest). Colours only when stderr is a terminal. A filter that
/// does not parse is said and the default kept.
fn init_tracing() {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let spec = std::env::var("KORVUS_LOG").unwrap_or_default();
    let filter = log_filter(&spec).unwrap_or_else(|e| {
        eprintln!("korvus: KORVUS_LOG={spec:?} is not a log filter ({e}); logging errors only");
        log_filter("").expect("the default filter")
    });
    let targets = spec.contains('=');
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(targets)
        .with_filter(filter);
    let _ = tracing_subscriber::registry().with(layer).try_init();
}

/// The filter `KORVUS_LOG` names (empty: errors only).
fn log_filter(
    spec: &str,
) -> Result<tracing_subscriber::filter::Targets, tracing_subscriber::filter::ParseError> {
    let spec = spec.trim();
    if spec.is_empty() {
        return Ok(tracing_subscriber::filter::Targets::new()
            .with_default(tracing_subscriber::filter::LevelFilter::ERROR));
    }
    spec.parse()
}

async fn dispatch(cli: Cli, described: Option<String>) -> anyhow::Result<ExitCode> {
    let global = cli.global;
    match cli.command {
        Command::Incident { command } => inspect::incident(&global, command).await,
        Command::Run(args) => session::run(&global, args, described).await,
        Command::Reopen(args) => session::reopen(&global, args).await,
        Command::Reply(args) => session::reply(&global, args).await,
        Command::Budget(args) => budget::budget(&global, args).await,
        Command::Show { session, json } => inspect::show(&global, &session, json).await,
        Command::Ls {
            incident,
            limit,
            after,
            json,
        } => inspect::ls(&global, incident.as_deref(), limit, after.as_deref(), json).await,
        Command::Cat {
            session,
            path,
            revision,
        } => inspect::cat(&global, &session, path.as_deref(), revision).await,
        Command::Export { session, output } => {
            inspect::export(&global, &session, output.as_deref()).await
        }
        Command::Cancel { session, force } => session::cancel(&global, &session, force).await,
        Command::Reap {
            apply,
            resume,
            kept_max_age,
            kept_max_bytes,
        } => {
            let retention = {
                let mut v = korvus_workspace::KeptRetention::default();
                v.max_age = salvage::days(kept_max_age);
                v.max_bytes = kept_max_bytes;
                v
            };
            session::reap(&global, apply, resume, retention).await
        }
        Command::Salvage { session, discard } => salvage::salvage(&global, &session, discard).await,
        Command::Sweep { apply, grace } => {
            sweep::sweep(&global, apply, Duration::from_secs(grace)).await
        }
        Command::Prune(args) => prune::prune(&global, args).await,
        Command::Migrate => inspect::migrate(&global).await,
        Command::Demo { agent, confine } => demo::demo(&global, &confine, &agent).await,
        Command::Serve(args) => serve::serve(&global, args, described).await,
        Command::Completions { shell } => {
            let mut cli = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cli, "korvus", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{log_filter, password_in_arguments, token_in_arguments};
    use tracing_subscriber::filter::LevelFilter;

    #[test]
    fn korvus_log_takes_a_level_or_targets() {
        let default = log_filter("").unwrap();
        assert!(default.would_enable("korvus_session", &tracing::Level::ERROR));
        assert!(!default.would_enable("korvus_session", &tracing::Level::WARN));
        let level = log_filter("info").unwrap();
        assert!(level.would_enable("anything", &tracing::Level::INFO));
        let targets = log_filter("korvus_session=debug,warn").unwrap();
        assert!(targets.would_enable("korvus_session::lease", &tracing::Level::DEBUG));
        assert!(!targets.would_enable("korvus_store_sql", &tracing::Level::INFO));
        assert!(targets.would_enable("korvus_store_sql", &tracing::Level::WARN));
        assert_eq!(targets.default_level(), Some(LevelFilter::WARN));
        assert!(log_filter("korvus_session=loud").is_err());
    }

    #[test]
    fn a_token_argument_is_noticed() {
        let args = |l: &[&str]| {
            l.iter()
                .map(|a| a.into())
                .collect::<Vec<std::ffi::OsString>>()
        };
        assert!(token_in_arguments(args(&[
            "korvus", "serve", "--token", "x"
        ])));
        assert!(token_in_arguments(args(&["korvus", "serve", "--token=x"])));
        assert!(!token_in_arguments(args(&["korvus", "serve"])));
    }

    fn args(list: &[&str]) -> Vec<std::ffi::OsString> {
        list.iter().map(|a| a.into()).collect()
    }

    #[test]
    fn a_password_in_a_database_url_argument_is_noticed() {
        assert!(password_in_arguments(args(&[
            "korvus",
            "--database-url",
            "postgres://u:secret@h:5432/db",
            "ls"
        ])));
        assert!(password_in_arguments(args(&[
            "korvus",
            "--database-url=postgres://u:secret@h/db"
        ])));
        assert!(!password_in_arguments(args(&[
            "korvus",
            "--database-url",
            "postgres://u@h/db"
        ])));
        assert!(!password_in_arguments(args(&[
            "korvus",
            "--database-url",
            "postgres://h/db"
        ])));
        assert!(!password_in_arguments(args(&[
            "korvus",
            "run",
            "postgres://u:p@h/db"
        ])));
    }
}
