//! The agent a session ran, remembered with it
//! ([`ManagerBuilder::runner_description`](korvus_session::ManagerBuilder::runner_description)),
//! so `korvus reopen` and `korvus reply` need no `--agent`: the agent
//! options given on the command line that created it, as the arguments
//! [`AgentArgs`] parses again — paths made absolute, and never an
//! `--agent-env KEY=VALUE` (a value may be a secret; `--agent-env-pass`
//! names are kept).

use anyhow::{bail, Context, Result};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, FromArgMatches};

use crate::session::AgentArgs;

/// Agent options never remembered: environment values.
const NOT_REMEMBERED: &[&str] = &["env_set"];

/// The agent options `matches` (a `run` or `serve` command line) holds,
/// as a JSON array of arguments; `None` when no agent was named (the
/// bundled demo agent).
pub(crate) fn describe(matches: &ArgMatches) -> Option<String> {
    let cmd = AgentArgs::augment_args(clap::Command::new("korvus"));
    let given = |id: &str| {
        matches.try_contains_id(id).unwrap_or(false)
            && matches.value_source(id) == Some(ValueSource::CommandLine)
    };
    if !given("agent") {
        return None;
    }
    let mut out: Vec<String> = Vec::new();
    for arg in cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if NOT_REMEMBERED.contains(&id) || !given(id) {
            continue;
        }
        let Some(long) = arg.get_long() else {
            continue;
        };
        if !arg.get_action().takes_values() {
            out.push(format!("--{long}"));
            continue;
        }
        for value in matches.get_raw(id).into_iter().flatten() {
            out.push(format!("--{long}"));
            out.push(absolute(id, &value.to_string_lossy()));
        }
    }
    let described = serde_json::to_string(&out).ok()?;
    // Too long to keep: the sessions are created all the same, and
    // `reopen` / `reply` then need `--agent`.
    if described.len() > korvus_store::validate::MAX_RUNNER_BYTES {
        eprintln!(
            "korvus: warning: the agent options are over {} bytes: sessions will not \
             remember them (`reopen` and `reply` need --agent)",
            korvus_store::validate::MAX_RUNNER_BYTES
        );
        return None;
    }
    Some(described)
}

/// A program path given relative to the working directory, made absolute
/// (a preset name or a name looked up in `PATH` stays as it is).
fn absolute(id: &str, value: &str) -> String {
    let path_like = matches!(id, "agent" | "agent_program") && value.contains('/');
    if !path_like {
        return value.to_owned();
    }
    std::path::absolute(value)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| value.to_owned())
}

/// The agent options a session remembered, parsed again.
///
/// # Errors
/// A description this version cannot read (not one of its own, or an
/// option it no longer has): say so, and `--agent` is needed.
pub(crate) fn agent_args(description: &str) -> Result<AgentArgs> {
    let args: Vec<String> = serde_json::from_str(description)
        .context("the remembered agent is not a list of arguments")?;
    let cmd = AgentArgs::augment_args(clap::Command::new("korvus").no_binary_name(true));
    let matches = cmd
        .try_get_matches_from(&args)
        .map_err(|e| anyhow::anyhow!("the remembered agent options {args:?} do not parse: {e}"))?;
    let parsed = AgentArgs::from_arg_matches(&matches)?;
    if parsed.agent.is_none() {
        bail!("the remembered agent options {args:?} name no agent");
    }
    Ok(parsed)
}
