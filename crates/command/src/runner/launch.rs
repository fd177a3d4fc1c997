//! How a run's agent starts: its command (arguments, environment), and
//! what the run serves it besides the process: the model gateway
//! (placed before the command is built, served once the agent's network
//! exists) and the credential vault (armed before the agent starts, its
//! trust store variables in the command) — and the builder's setters for
//! them and for budgets.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

use korvus_runner::RunContext;
use tokio::process::Command;
use tracing::info;

use super::CommandRunner;
use crate::budget::{BudgetConfig, Guard};
use crate::dialect::resume_args;
use crate::env::PrivateDirs;
use crate::gateway::serve::Serving;
use crate::gateway::{ModelGateway, Placed};
use crate::isolate::{Isolation, Served};
use crate::network::vault::{Armed, Vault};
use crate::process::Agent;
use crate::sink::Sink;
use crate::CommandError;

impl CommandRunner {
    /// Serves the agent its model API through `gateway`: the agent gets a
    /// per-run token and the gateway's URL ([`MODEL_URL`](crate::MODEL_URL)
    /// and [`MODEL_TOKEN`](crate::MODEL_TOKEN) in arguments and gateway
    /// variables), korvus keeps the real key and meters every call. The
    /// gateway listens where the agent's [`Network`](crate::Network) is: inside its
    /// namespace (without root the agent's child opens the socket there
    /// and sends it back), or on the host's loopback for
    /// [`Network::host`](crate::Network::host); where it cannot, the run fails before the agent
    /// starts.
    pub fn model_gateway(mut self, gateway: ModelGateway) -> Self {
        self.gateway = Some(gateway);
        self
    }

    /// Puts `vault`'s credentials on the agent's requests to their
    /// destinations at the egress proxy (an [`allow`](crate::Network::allow)
    /// policy listing each of them is needed; without root it does not
    /// run, see [`Network`](crate::Network)): the agent holds a placeholder at most, and
    /// its TLS clients are pointed at the run's authority
    /// (`docs/operations.md`, "The credential vault").
    pub fn vault(mut self, vault: Vault) -> Self {
        self.vault = vault;
        self
    }

    /// The model gateway, if the runner has one.
    pub fn gateway(&self) -> Option<&ModelGateway> {
        self.gateway.as_ref()
    }

    /// Caps what its runs spend by the budgets kept in `budgets` (the
    /// store: [`korvus_store::Budgets`]) for each run's session and
    /// incident. Every model call the [gateway](Self::model_gateway)
    /// meters is added to them — its tokens, and its cost by `prices`
    /// (korvus has no prices of its own; an empty table counts no cost) —
    /// and so is each run's wall time. Once a budget is reached korvus
    /// stops the run itself (exit reason
    /// [`BUDGET_REACHED`](korvus_runner::exit::BUDGET_REACHED): the
    /// session pauses, everything kept) and refuses further model calls
    /// with an answer the agents' SDKs do not retry; a run whose budget is
    /// already reached does not start its agent. Token and cost limits
    /// need the gateway (nothing else is metered).
    pub fn budgets(
        mut self,
        budgets: Arc<dyn korvus_store::Budgets>,
        prices: korvus_store::PriceTable,
    ) -> Self {
        self.budgets = Some(BudgetConfig { budgets, prices });
        self
    }
}

impl CommandRunner {
    /// The program, its arguments and its environment, in the scratch dir.
    pub(super) fn command(
        &self,
        ctx: &RunContext,
        scratch: &Path,
        manifest: &Path,
        private: &PrivateDirs,
        launch: Launch<'_>,
    ) -> Command {
        let Launch {
            resume,
            thread,
            gateway,
            vault,
            secrets: launch_secrets,
        } = launch;
        let mut env = match &self.env_source {
            Some(vars) => self.env.resolve(vars.iter().cloned()),
            None => self.env.resolve(std::env::vars_os()),
        };
        let mut args = match thread {
            Some(thread) => resume_args(self.dialect, &self.args, thread),
            None => self.args.clone(),
        };
        if let (Some(config), Some(placed)) = (&self.gateway, gateway) {
            // The real key never reaches the agent, whatever the policy
            // passed; the gateway's own variables come after.
            env.retain(|(k, _)| k.as_os_str() != std::ffi::OsStr::new(config.key_var()));
            env.extend(config.agent_vars(placed));
            args = args.iter().map(|a| placed.fill_arg(a)).collect();
        }
        if let Some(vars) = vault {
            // Credentials are korvus's: their variables never reach the
            // agent; placeholders and the trust store's variables do.
            let secret: Vec<&str> = self.vault.secret_vars().collect();
            env.retain(|(k, _)| {
                !secret
                    .iter()
                    .any(|s| k.as_os_str() == std::ffi::OsStr::new(s))
            });
            env.extend(vars.iter().cloned());
        }
        env.retain(|(_, v)| !holds_secret(v, launch_secrets));
        let names: Vec<String> = env
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        // Names only: values may be secrets the embedder chose to pass.
        info!(?names, "agent environment (plus HOME, TMPDIR and KORVUS_*)");
        let mut cmd = Command::new(&self.program);
        cmd.args(args);
        cmd.current_dir(scratch)
            .env_clear()
            .envs(env)
            .env("HOME", &private.home)
            .env("TMPDIR", &private.tmp)
            .env("KORVUS_SESSION_ID", ctx.session.id.to_string())
            .env("KORVUS_INCIDENT_ID", ctx.incident.id.to_string())
            .env("KORVUS_REVISION", ctx.revision.to_string())
            .env("KORVUS_RESUME", if resume { "1" } else { "0" })
            .env("KORVUS_ATTEMPT", ctx.session.attempt.to_string())
            .env("KORVUS_MANIFEST", manifest)
            .env("KORVUS_WORKSPACE", scratch);
        if let Some(user) = &self.user {
            // The uid and gid are switched to in the child (`ChildSetup::user`).
            cmd.env("USER", user.name()).env("LOGNAME", user.name());
        }
        if let Some(template) = &ctx.report_template {
            cmd.env("KORVUS_REPORT_TEMPLATE", scratch.join(template.as_str()));
        }
        cmd
    }

    /// The real key and where the gateway of this run listens, when the
    /// runner has a gateway.
    pub(super) fn place_gateway(&self) -> Result<Option<(String, Placed)>, CommandError> {
        let Some(gateway) = &self.gateway else {
            return Ok(None);
        };
        let key = gateway.key(self.env_source.as_deref())?;
        Ok(Some((key, gateway.place(&self.network)?)))
    }

    /// The agent's command, its gateway placed and its vault armed.
    #[allow(clippy::type_complexity)]
    pub(super) fn prepare(
        &self,
        ctx: &RunContext,
        (scratch, manifest, private): (&Path, &Path, &PrivateDirs),
        (resume, thread): (bool, Option<&str>),
        notes: tokio::sync::mpsc::Sender<String>,
    ) -> Result<(Command, Option<(String, Placed)>, Option<Arc<Armed>>), CommandError> {
        let gateway = self.place_gateway()?;
        let vault = self.arm_vault(private, notes)?;
        // The values korvus holds for the agent: no variable carrying one
        // reaches it, under whatever name it was passed.
        let mut secrets: Vec<String> = gateway.iter().map(|(key, _)| key.clone()).collect();
        if let Some((armed, _)) = &vault {
            secrets.extend(armed.values());
        }
        let launch = Launch {
            resume,
            thread,
            gateway: gateway.as_ref().map(|(_, placed)| placed),
            vault: vault.as_ref().map(|(_, vars)| vars.as_slice()),
            secrets: &secrets,
        };
        let cmd = self.command(ctx, scratch, manifest, private, launch);
        Ok((cmd, gateway, vault.map(|(armed, _)| armed)))
    }

    /// The run's vault, armed, and the agent's variables for it (its
    /// trust store pointed at the run's authority, placeholders): `None`
    /// without credentials.
    #[allow(clippy::type_complexity)]
    pub(super) fn arm_vault(
        &self,
        private: &PrivateDirs,
        notes: tokio::sync::mpsc::Sender<String>,
    ) -> Result<Option<(Arc<Armed>, Vec<(OsString, OsString)>)>, CommandError> {
        if self.vault.is_empty() {
            return Ok(None);
        }
        let armed = self.vault.arm(
            self.network.destinations(),
            self.env_source.as_deref(),
            notes,
        )?;
        let mut vars = armed
            .trust(&private.tmp.join("korvus-vault"))
            .map_err(|e| CommandError::Vault {
                reason: format!("the run's authority could not be written: {e}"),
            })?;
        vars.extend(self.vault.placeholders());
        Ok(Some((Arc::new(armed), vars)))
    }

    /// [`start`](Self::start)s the agent with its gateway (when it has
    /// one) listening where the agent's network is, and serves it.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn start_served(
        &self,
        ctx: &RunContext,
        scratch: &Path,
        cmd: Command,
        input: String,
        notes: tokio::sync::mpsc::Sender<String>,
        gateway: Option<&mut (String, Placed)>,
        (vault, guard): (Option<Arc<Armed>>, Option<&Arc<Guard>>),
    ) -> Result<(Agent, Vec<String>, Isolation, Option<Serving>), CommandError> {
        let served = Served {
            gateway: gateway
                .as_ref()
                .filter(|(_, placed)| placed.host_listener.is_none())
                .map(|(_, placed)| placed.port),
            vault,
        };
        let (agent, notes, mut network) =
            self.start(ctx, scratch, cmd, input, notes, served).await?;
        let serving = match gateway {
            Some((key, placed)) => {
                Some(self.serve_gateway(key, placed, &mut network, ctx, guard.cloned())?)
            }
            None => None,
        };
        Ok((agent, notes, network, serving))
    }

    /// Starts serving the run's gateway on the listener placed for it.
    pub(super) fn serve_gateway(
        &self,
        key: &str,
        placed: &mut Placed,
        network: &mut Isolation,
        ctx: &RunContext,
        guard: Option<Arc<Guard>>,
    ) -> Result<Serving, CommandError> {
        let (Some(gateway), Some(listener)) = (
            &self.gateway,
            placed
                .host_listener
                .take()
                .or_else(|| network.take_gateway()),
        ) else {
            return Err(CommandError::Gateway {
                reason: "it has no listener".to_owned(),
            });
        };
        Serving::start(
            gateway,
            key,
            placed.token.clone(),
            listener,
            Arc::clone(&ctx.log),
            guard,
        )
    }

    /// The run's budget guard, when the runner has budgets.
    pub(super) fn guard(&self, ctx: &RunContext) -> Option<Arc<Guard>> {
        let config: &BudgetConfig = self.budgets.as_ref()?;
        Some(Guard::new(
            config,
            ctx.session.id,
            ctx.incident.id,
            Arc::clone(&ctx.log),
        ))
    }
}

/// How this run starts: resumed or not, in the agent's own thread, and
/// through which gateway.
pub(super) struct Launch<'a> {
    pub(super) resume: bool,
    pub(super) thread: Option<&'a str>,
    pub(super) gateway: Option<&'a Placed>,
    /// The vault's variables for the agent, when the runner has one.
    pub(super) vault: Option<&'a [(OsString, OsString)]>,
    /// The values korvus holds for the agent (the model key, the vault's).
    pub(super) secrets: &'a [String],
}

/// Whether `value` holds one of `secrets`, or the last word of one (a
/// token without its `Bearer`): such a variable never reaches the agent.
fn holds_secret(value: &std::ffi::OsStr, secrets: &[String]) -> bool {
    let value = value.to_string_lossy();
    secrets.iter().any(|secret| {
        let word = secret.split_whitespace().last().unwrap_or(secret);
        [secret.as_str(), word]
            .iter()
            .any(|s| s.len() >= 8 && value.contains(s))
    })
}

/// The network's last notes of a run (its gateway's measurements, its
/// egress and its vault); the network's listeners end here.
pub(super) async fn summarise(
    sink: &mut Sink<'_>,
    serving: Option<Serving>,
    network: Isolation,
    vault: Option<&Armed>,
) {
    if let Some(serving) = serving {
        sink.gateway(serving.finish().await).await;
    }
    if let Some(egress) = network.egress() {
        sink.note(egress.summary()).await;
    }
    if let Some(vault) = vault {
        sink.note(vault.summary()).await;
    }
}
