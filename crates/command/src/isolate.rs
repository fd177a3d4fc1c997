//! Starting the agent isolated: a short-lived thread of its own enters the
//! run's network namespace (opening the egress listeners there), prepares
//! the [`Sandbox`]'s Landlock ruleset and the agent's containment (both
//! entered by the child before `exec`, see `spawn/`), spawns the agent —
//! which inherits the namespace — and ends. The embedding process's other
//! threads are never touched.

use std::net::{IpAddr, TcpListener as StdListener};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::network::proxy::{self, Egress};
use crate::network::vault::Armed;
use crate::network::{netns, Network};
use crate::sandbox::{self, Confinement, Sandbox};
use crate::spawn::contain::{Contain, MountRules};
use crate::spawn::{self, ChildSetup};
use crate::CommandError;

/// Proxy variables an `allow` namespace's agent gets (both spellings:
/// programs read one or the other).
const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
];

/// A started agent and how it was isolated.
#[derive(Debug)]
pub(crate) struct Started {
    pub(crate) child: Child,
    pub(crate) confinement: Confinement,
    pub(crate) network: Isolation,
    /// The child is the keeper of a contained run (`spawn::contain`):
    /// stop signals go to it alone, which passes them on once.
    pub(crate) contained: bool,
    /// Why the sandbox's containment is not in force, where it is not.
    pub(crate) uncontained: Option<String>,
}

impl Started {
    /// The note a run's log gets when the agent is not contained.
    pub(crate) fn containment_note(&self) -> Option<String> {
        self.uncontained.as_ref().map(|reason| {
            format!(
                "processes not contained ({reason}): the agent may see other processes, reach \
                 terminals that existed before it, and outlive korvus"
            )
        })
    }
}

/// How the agent of one run was put on the network.
#[derive(Debug)]
pub(crate) enum Isolation {
    /// [`Network::host`].
    Host,
    /// In a namespace of its own; with an `allow` policy, its proxy and
    /// forwarders (running until this is dropped).
    Isolated {
        egress: Option<Egress>,
        /// The model gateway's listener, bound inside the namespace.
        gateway: Option<StdListener>,
        /// Without root: korvus's end of the channel the agent's child
        /// sends the gateway's listener over, from the namespace it made.
        gateway_sent: Option<OwnedFd>,
        note: Option<String>,
        /// Less than asked is in force (`allow` became no network at all):
        /// why. A [`required`](Network::required) policy fails the run.
        short: Option<String>,
    },
    /// Not in force: the agent shares the host's network. Says why.
    NotInForce(String, Option<StdListener>),
}

impl Isolation {
    /// The note a run's log gets about its network at the start, if any.
    pub(crate) fn note(&self) -> Option<String> {
        match self {
            Isolation::NotInForce(reason, _) => Some(format!(
                "network policy not in force ({reason}): the agent shares the host's network"
            )),
            Isolation::Isolated { note, .. } => note.clone(),
            Isolation::Host => None,
        }
    }

    /// The model gateway's listener, bound where the agent's network is.
    pub(crate) fn take_gateway(&mut self) -> Option<StdListener> {
        match self {
            Isolation::Isolated {
                gateway,
                gateway_sent,
                ..
            } => gateway.take().or_else(|| {
                let channel = gateway_sent.take()?;
                netns::receive_listener(&channel)
                    .map_err(|e| warn!(error = %e, "the model gateway's listener did not come"))
                    .ok()
            }),
            Isolation::NotInForce(_, gateway) => gateway.take(),
            Isolation::Host => None,
        }
    }

    /// The run's egress, whose summary the log gets at the end.
    pub(crate) fn egress(&self) -> Option<&Egress> {
        match self {
            Isolation::Isolated { egress, .. } => egress.as_ref(),
            _ => None,
        }
    }
}

/// What korvus serves the agent's network besides the egress proxy.
#[derive(Debug, Default)]
pub(crate) struct Served {
    /// The model gateway's port, bound where the agent's network is (not
    /// for [`Network::host`], whose gateway the runner binds itself).
    pub(crate) gateway: Option<u16>,
    /// The run's credentials, for the egress proxy.
    pub(crate) vault: Option<Arc<Armed>>,
}

/// Starts `cmd` (after `setup` in the child) isolated by `network` and
/// confined by `policy` (writes allowed in `scratch`). Egress refusals are
/// sent to `notes`. Where `served`'s gateway cannot listen, the run fails
/// before the agent starts.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn start(
    cmd: Command,
    mut setup: ChildSetup,
    policy: &Sandbox,
    network: &Network,
    scratch: &Path,
    program: &str,
    notes: mpsc::Sender<String>,
    served: Served,
) -> Result<Started, CommandError> {
    let gateway = served.gateway;
    let spawn_error = |source| CommandError::Spawn {
        program: program.to_owned(),
        source,
    };
    if !policy.is_enabled() && network.is_host() {
        let mut cmd = cmd;
        spawn::install(&mut cmd, setup);
        let child = cmd.spawn().map_err(spawn_error)?;
        return Ok(Started {
            child,
            confinement: Confinement::Off,
            network: Isolation::Host,
            contained: false,
            uncontained: None,
        });
    }
    let policy = policy.clone();
    let network = network.clone();
    let scratch = scratch.to_path_buf();
    // The child and the egress tasks register with this runtime.
    let runtime = tokio::runtime::Handle::current();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("korvus-isolate".to_owned())
        .spawn(move || {
            let _runtime = runtime.enter();
            let mut cmd = cmd;
            let isolation = enter_network(&network, &mut cmd, &mut setup, notes, served);
            let result = match isolation {
                Isolation::NotInForce(reason, _) if network.is_required() => {
                    Err(CommandError::Network { reason })
                }
                Isolation::NotInForce(_, None)
                | Isolation::Isolated {
                    gateway: None,
                    gateway_sent: None,
                    ..
                } if gateway.is_some() => Err(CommandError::Gateway {
                    reason: "it could not listen where the agent's network is (see the \
                                 network note); the agent was not started"
                        .to_owned(),
                }),
                Isolation::Isolated {
                    short: Some(reason),
                    ..
                } if network.is_required() => Err(CommandError::Network { reason }),
                isolation => contain_and_spawn(cmd, setup, &policy, &scratch, isolation),
            };
            // The thread ends here, and its namespace with it (the agent
            // and the listeners keep the namespace alive).
            let _ = tx.send(result);
        })
        .map_err(spawn_error)?;
    match rx.await {
        Ok(Ok(started)) => started.map_err(spawn_error),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(spawn_error(std::io::Error::other(
            "the starting thread ended without starting the program",
        ))),
    }
}

/// Prepares the agent's Landlock ruleset and its containment (both entered
/// in the child) and spawns it; the run fails where a required sandbox
/// cannot be put in force.
fn contain_and_spawn(
    mut cmd: Command,
    mut setup: ChildSetup,
    policy: &Sandbox,
    scratch: &Path,
    network: Isolation,
) -> Result<std::io::Result<Started>, CommandError> {
    let prepared = sandbox::prepare(policy, scratch);
    let confinement = prepared.confinement;
    if let Confinement::NotEnforced(reason) = &confinement {
        if policy.is_required() {
            return Err(CommandError::Sandbox {
                reason: reason.clone(),
            });
        }
    }
    let rules = prepared.ruleset.as_ref().map(|fd| MountRules {
        ruleset: fd.as_raw_fd(),
        devpts: prepared.devpts,
        proc: prepared.proc,
    });
    // Open until the child has entered it (moved into its hook).
    setup.landlock = prepared.ruleset;
    let mut uncontained = None;
    if policy.is_enabled() {
        match spawn::probe_contain() {
            Ok(c) => setup.contain = Some(Contain { rules, ..c }),
            Err(reason) if policy.is_required() => {
                return Err(CommandError::Sandbox {
                    reason: format!("the agent cannot be given namespaces of its own: {reason}"),
                })
            }
            Err(reason) => {
                warn!(%reason, "agents are not contained");
                uncontained = Some(reason);
            }
        }
    }
    let contained = setup.contain.is_some();
    spawn::install(&mut cmd, setup);
    Ok(cmd.spawn().map(|child| Started {
        child,
        confinement,
        network,
        contained,
        uncontained,
    }))
}

/// Puts the calling thread (as root) or the agent's child (otherwise) in
/// a network namespace of its own, as `network` asks.
fn enter_network(
    network: &Network,
    cmd: &mut Command,
    setup: &mut ChildSetup,
    notes: mpsc::Sender<String>,
    served: Served,
) -> Isolation {
    if network.is_host() {
        return Isolation::Host;
    }
    let gateway = served.gateway;
    let thread_error = match spawn::unshare_thread_network() {
        Ok(()) => return in_thread_namespace(network, cmd, notes, served),
        Err(e) => e,
    };
    debug!(error = %thread_error, "no network namespace for the starting thread");
    match netns::user_namespaces() {
        Ok(()) => {
            setup.own_network = true;
            // The gateway listens inside the namespace the child makes:
            // the child opens the socket there and sends it back.
            let gateway_sent = match gateway.map(|port| (port, netns::listener_channel())) {
                Some((port, Ok((ours, theirs)))) => {
                    setup.gateway = Some((theirs, port));
                    Some(ours)
                }
                Some((_, Err(e))) => {
                    warn!(error = %e, "no channel for the model gateway's listener");
                    None
                }
                None => None,
            };
            let short = network.is_allow().then(|| {
                format!(
                    "network policy {network} needs root (the proxy listens inside the \
                     agent's namespace)"
                )
            });
            let note = short
                .as_ref()
                .map(|why| format!("{why}: the agent ran with no network at all (none) instead"));
            if let Some(note) = &note {
                warn!("{note}");
            }
            proxy_vars_removed(cmd);
            Isolation::Isolated {
                egress: None,
                gateway: None,
                gateway_sent,
                note,
                short,
            }
        }
        Err(userns) => Isolation::NotInForce(
            format!("no network namespace: as this user ({thread_error}), and {userns}"),
            gateway.and_then(|port| bind_gateway(port).ok()),
        ),
    }
}

/// The gateway's listener at `127.0.0.1:port` in the calling thread's
/// namespace.
fn bind_gateway(port: u16) -> std::io::Result<StdListener> {
    StdListener::bind((IpAddr::from([127, 0, 0, 1]), port))
}

/// In the starting thread's new namespace: loopback up and, for `allow`,
/// the proxy and forwarders listening, the agent pointed at the proxy.
fn in_thread_namespace(
    network: &Network,
    cmd: &mut Command,
    notes: mpsc::Sender<String>,
    served: Served,
) -> Isolation {
    let Served { gateway, vault } = served;
    // The namespace is made: a failure from here on leaves the agent with
    // no network at all, never the host's.
    if let Err(e) = netns::loopback_up() {
        let note = format!("the network namespace's loopback could not be brought up ({e})");
        return cut_off(cmd, note, network.is_allow(), None);
    }
    let gateway = match gateway.map(bind_gateway).transpose() {
        Ok(listener) => listener,
        Err(e) => {
            let note = format!("the model gateway could not listen in the namespace ({e})");
            return cut_off(cmd, note, true, None);
        }
    };
    if !network.is_allow() {
        proxy_vars_removed(cmd);
        return Isolation::Isolated {
            egress: None,
            gateway,
            gateway_sent: None,
            note: None,
            short: None,
        };
    }
    let mut skipped = Vec::new();
    let egress = proxy::bind(network.destinations()).and_then(|mut listeners| {
        skipped = std::mem::take(&mut listeners.skipped);
        Egress::start(listeners, network.destinations(), notes, vault)
    });
    match egress {
        Ok(egress) => {
            let note = (!skipped.is_empty()).then(|| {
                format!(
                    "egress: no forwarder inside the namespace for {} (reachable through the \
                     proxy only)",
                    skipped.join(", ")
                )
            });
            for var in PROXY_VARS {
                cmd.env(var, egress.proxy_url());
            }
            cmd.env_remove("NO_PROXY").env_remove("no_proxy");
            // Node reads the proxy variables only when told to.
            cmd.env("NODE_USE_ENV_PROXY", "1");
            // Every destination is still reachable through the proxy, and
            // nothing else: the policy is in force.
            Isolation::Isolated {
                egress: Some(egress),
                gateway,
                gateway_sent: None,
                note,
                short: None,
            }
        }
        Err(e) => {
            let note =
                format!("the egress proxy could not be started ({e}): the agent has no network");
            cut_off(cmd, note, true, gateway)
        }
    }
}

/// The agent left with no network at all but its loopback (and
/// `gateway`), after what `note` says went wrong; with `short`, less than
/// the policy asked is in force.
fn cut_off(
    cmd: &mut Command,
    note: String,
    short: bool,
    gateway: Option<StdListener>,
) -> Isolation {
    warn!("{note}");
    proxy_vars_removed(cmd);
    Isolation::Isolated {
        egress: None,
        gateway,
        gateway_sent: None,
        short: short.then(|| note.clone()),
        note: Some(note),
    }
}

/// No proxy variable reaches an agent that has no proxy.
fn proxy_vars_removed(cmd: &mut Command) {
    for var in PROXY_VARS {
        cmd.env_remove(var);
    }
}
