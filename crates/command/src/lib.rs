//! A korvus [`Runner`](korvus_runner::Runner) that wraps any command-line
//! agent: [`CommandRunner`].
//!
//! # Overview
//!
//! [`CommandRunner`] starts a configured program in the session's scratch
//! dir, in a session (and process group) of its own without a controlling
//! terminal, and speaks a small protocol with it
//! (the full text is `docs/command-runner.md`):
//!
//! | direction | what |
//! |---|---|
//! | stdin | the prompt (first run) or the reopen message (resume), then EOF |
//! | environment | `KORVUS_SESSION_ID`, `KORVUS_INCIDENT_ID`, `KORVUS_REVISION`, `KORVUS_RESUME` (`0`/`1`), `KORVUS_MANIFEST` (a [`RunManifest`] of context files and skills, at [`RUN_MANIFEST`](korvus_workspace::RUN_MANIFEST)), `KORVUS_WORKSPACE` |
//! | stdout | one log event per line: a JSON [`korvus_log::Event`] (`{"type":"turn_start","turn":1}`) is that event; any other line is an assistant message; `{"type":"usage",…}` adds token counts |
//! | stderr | the last lines are kept (bounded) and logged as notes when the program exits |
//! | exit 0 | `completed`; the author phase finished when `report.md` ([`REPORT_FILE`](korvus_workspace::REPORT_FILE)) exists at the scratch root |
//! | exit [`AWAITING_USER_CODE`] (75) | `awaiting_user`: the row stays `running` |
//! | other exit `n` | the run fails with [`CommandError::Exited`] (session `failed` / `exit_code_n`; the code is also in the log's last note and the error) |
//!
//! On cancellation (`ctx.cancel`) and on the runner's own
//! [`timeout`](CommandRunner::timeout), the whole process group gets
//! `SIGTERM`, then `SIGKILL` after a grace period; when the program exits,
//! anything left in its group and in its cgroup is killed too, so no
//! grandchild or daemon outlives a run. [`Limits`] bound each run's memory,
//! tasks, CPU, scratch size and silence.
//!
//! The contract — [`Runner`](korvus_runner::Runner), `RunContext`, exit
//! reasons — is `korvus-runner`; this crate depends on it and on the seams
//! only, never on `korvus-session` (the example below uses the `Manager`
//! as an embedder would).
//!
//! # Code map
//!
//! - `runner.rs`: the [`CommandRunner`] builder and its `Runner` impl. Its
//!   `execute` reads as spawn → pump → drain → classify, each a named
//!   function of the two modules below.
//! - `process.rs`: spawning the program in a session of its own,
//!   waiting for it, stopping the whole group on cancellation or timeout
//!   (`SIGTERM`, then `SIGKILL`), and classifying its exit into an exit
//!   reason or a [`CommandError`].
//! - `output.rs`: the line readers of stdout and stderr, the sink that
//!   turns lines into log events and usage counters, and the bounded
//!   stderr tail.
//! - `env.rs`: the [`EnvPolicy`] (which variables the agent gets).
//! - `sandbox/`: the [`Sandbox`] (Landlock): writes confined to the
//!   scratch dir, reads denied beneath private paths (and korvus's own
//!   [`CREDENTIAL_PATHS`]), signals scoped to the agent's domain; a
//!   short-lived thread restricts itself and spawns the agent, so the
//!   embedding process is never restricted. `rules.rs` builds the rules.
//! - `limits.rs`: the [`Limits`] policy (memory, tasks, CPU, scratch size,
//!   stall); `cgroup/`: a run's own cgroup (v2 or v1: found, limited,
//!   read, emptied, removed); `enforce.rs`: placing a run and its notes;
//!   `watch.rs`: the checks while it runs.
//! - `dialect/`: the [`Dialect`] an agent speaks on stdout — korvus's
//!   own protocol, `codex exec --json` or Claude Code's stream-json — and
//!   the decoders that turn the agents' lines into log events, korvus's
//!   own turn numbers and usage (see `docs/agents.md`).
//! - `preset.rs`: [`Preset`]s — Codex and Claude Code as headless
//!   agents (flags, environment, dialect), pointed at a
//!   [`ModelEndpoint`] when one is given.
//! - `outcome.rs`: the run's summary note and the failure note of an
//!   error.
//! - `user.rs`: the [`AgentUser`] an agent may run as, and handing the
//!   scratch dir over to it.
//! - `spawn.rs`: what the child does between `fork` and `exec` (a new
//!   session, the original open-file limit, see
//!   [`raise_open_file_limit`]): the one module of the workspace allowed
//!   `unsafe` code, audited in its docs.
//! - `manifest.rs`: the [`RunManifest`] the agent reads; `error.rs`:
//!   [`CommandError`].
//!
//! The file names both sides of a run agree on (`report.md`, the run
//! manifest) are defined once, in `korvus-workspace`.
//!
//! # Why it is shaped like this
//!
//! Agents are written in every language; a process boundary with stdin,
//! environment variables and JSON lines is the one interface they all
//! speak. Everything a session knows goes into a file (the manifest) rather
//! than into arguments, so it can grow without breaking agents. The process
//! group is killed while its leader is still an unreaped zombie, so the
//! group id cannot have been reused by an unrelated process.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use korvus_command::CommandRunner;
//! use korvus_session::{CreateSession, Manager};
//! use korvus_store::{MemoryStore, NewIncident, SessionStatus, Store};
//! use korvus_workspace::ScratchRoot;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let agent = CommandRunner::new("sh").arg("-c").arg(
//!     r#"echo '{"type":"turn_start","turn":1}'; read q; echo "looking at: $q"; echo '# Findings' > report.md"#,
//! );
//! let store = Arc::new(MemoryStore::new());
//! let tmp = tempfile::tempdir()?;
//! let manager = Manager::builder(store.clone(), Arc::new(agent))
//!     .scratch_root(ScratchRoot::supplied(tmp.path()))
//!     .build();
//! let incident = store.create_incident(NewIncident { title: "db-1 disk".into(), workspace: None }).await?;
//! let session = manager
//!     .create(CreateSession::new(incident.id, "why is it full?"))
//!     .await?;
//! let row = manager.await_settled(session.id, Duration::from_secs(30)).await?;
//! assert_eq!(row.status, SessionStatus::Completed);
//! assert_eq!(row.counters.turns, 1);
//! manager.stop().await;
//! # Ok(()) }
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(missing_docs)]

mod budget;
mod cgroup;
mod dialect;
mod enforce;
mod env;
mod error;
mod gateway;
mod hop;
mod isolate;
mod limits;
mod manifest;
mod network;
mod outcome;
mod output;
mod preset;
mod process;
mod runner;
mod sandbox;
mod sink;
mod spawn;
mod user;
mod watch;

pub use crate::dialect::Dialect;
pub use crate::env::{EnvPolicy, Inherit, CORE_VARS, DEFAULT_EXCLUDES};
pub use crate::error::CommandError;
pub use crate::gateway::{ModelGateway, MODEL_TOKEN, MODEL_URL};
pub use crate::limits::{
    Cpu, Limits, DEFAULT_MEMORY, DEFAULT_POLL, DEFAULT_SCRATCH, DEFAULT_STALL, DEFAULT_TASKS,
};
pub use crate::manifest::{
    ManifestContext, ManifestSkill, ManifestWorkspace, RunManifest, PROTOCOL_VERSION,
};
pub use crate::network::vault::{Credential, Vault, PLACEHOLDER};
pub use crate::network::{Destination, DestinationError, Network};
pub use crate::output::{ExitDrain, DEFAULT_DRAIN_IDLE, DEFAULT_DRAIN_MAX, STDERR_LINE_BYTES};
pub use crate::preset::{ModelEndpoint, Preset};
pub use crate::process::AWAITING_USER_CODE;
pub use crate::runner::{
    CommandRunner, DEFAULT_KILL_GRACE, DEFAULT_MAX_LINE_BYTES, DEFAULT_STDERR_LINES,
};
pub use crate::sandbox::{Sandbox, CREDENTIAL_PATHS, WRITABLE_DEVICES};
pub use crate::sink::OutputCaps;
pub use crate::spawn::{raise_open_file_limit, OpenFileLimit};
pub use crate::user::AgentUser;
pub use korvus_tls::Roots;
