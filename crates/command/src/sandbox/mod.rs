//! The agent's filesystem sandbox: a [`Sandbox`] policy, turned into a
//! Landlock ruleset when the program starts.
//!
//! Landlock restricts the calling **thread** and everything it starts
//! afterwards (the domain is inherited across `fork` and `exec`), and a
//! restricted process may no longer mount anything. So the ruleset is
//! built before the fork, where allocating is allowed ([`prepare`]), and
//! the agent's process enters it last in its `pre_exec` hook (`spawn/`,
//! kept to async-signal-safe calls), after the mounts that contain it.
//! The embedding process's threads are never restricted.
//!
//! Landlock can only grant. "Read everything but X" is built by granting
//! reads on every sibling along the path from `/` down to X: the ancestors
//! of X themselves get no rule (a rule on a directory covers everything
//! beneath it), so they stay walkable but not listable.

mod rules;

use std::collections::BTreeSet;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use landlock::{
    Access, AccessFs, CompatLevel, Compatible, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use tracing::{debug, warn};

use self::rules::{resolved, Rules};

/// Device files an agent may open for writing: the null and zero
/// devices and the terminals. `/dev/ptmx` and `/dev/pts` keep their
/// ioctls (programs such as `script`, `expect` or node-pty open
/// pseudo-terminals of their own); `/dev/tty` gets none, and the agent,
/// in a session of its own, has no controlling terminal it could name.
pub const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// Credential files and directories, relative to a user's home, that are
/// private to an agent running as korvus's own uid (unless
/// [`Sandbox::readable`] re-opens one or
/// [`Sandbox::credentials_private`]`(false)` turns it off).
pub const CREDENTIAL_PATHS: &[&str] = &[
    ".pgpass",
    ".aws",
    ".ssh",
    ".netrc",
    ".git-credentials",
    ".docker",
    ".kube",
    ".gnupg",
    ".config/gcloud",
    ".azure",
];

/// The newest Landlock ABI the sandbox uses. ABI 9 adds a right over
/// connecting to UNIX sockets, which would cut agents off name services
/// such as `systemd-resolved`; it is left unhandled until korvus offers a
/// way to grant sockets.
const NEWEST_ABI: u8 = 8;

/// What an agent may touch on the filesystem (Linux Landlock; see
/// `docs/command-runner.md`).
///
/// The default ([`Sandbox::new`]) confines **writes** to the session's
/// scratch dir (its private `HOME` and `TMPDIR` are inside it) and
/// [`WRITABLE_DEVICES`]; reads stay open except beneath the paths declared
/// [`private`](Sandbox::private) and, when the agent runs as korvus's own
/// uid, beneath that user's [`CREDENTIAL_PATHS`] (found from the real home
/// in the user database, not from `$HOME`). Where the kernel has no Landlock the
/// program runs unconfined: a warning once per process and a note in every
/// run's log say so, unless the policy is [`required`](Sandbox::required),
/// which makes such a run fail instead.
#[derive(Debug, Clone)]
pub struct Sandbox {
    enabled: bool,
    required: bool,
    writable: Vec<PathBuf>,
    readable: Vec<PathBuf>,
    private: Vec<PathBuf>,
    credentials_private: bool,
    abi: u8,
}

impl Default for Sandbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Sandbox {
    /// Writes confined to the scratch dir and [`WRITABLE_DEVICES`]; reads
    /// open; degrades with a warning where Landlock is missing.
    pub fn new() -> Self {
        Self {
            enabled: true,
            required: false,
            writable: Vec::new(),
            readable: Vec::new(),
            private: Vec::new(),
            credentials_private: true,
            abi: NEWEST_ABI,
        }
    }

    /// No sandbox: the agent may touch whatever its user may.
    pub fn disabled() -> Self {
        Self {
            enabled: false,
            ..Self::new()
        }
    }

    /// Whether the agent is confined at all.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Whether a run fails where the sandbox cannot be put in force.
    pub fn is_required(&self) -> bool {
        self.required
    }

    /// Fail the run ([`CommandError::Sandbox`](crate::CommandError::Sandbox))
    /// instead of running the agent unconfined where Landlock is missing.
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// Lets the agent write beneath `path` too (e.g. a shared cache).
    pub fn writable(mut self, path: impl Into<PathBuf>) -> Self {
        self.writable.push(path.into());
        self
    }

    /// Lets the agent read beneath `path` even where it lies beneath a
    /// private path.
    pub fn readable(mut self, path: impl Into<PathBuf>) -> Self {
        self.readable.push(path.into());
        self
    }

    /// Denies the agent reading anything beneath `path` (a file or a
    /// directory; it need not exist yet). The scratch dir and the
    /// [`readable`](Sandbox::readable) paths are still granted where they
    /// lie beneath it.
    pub fn private(mut self, path: impl Into<PathBuf>) -> Self {
        self.private.push(path.into());
        self
    }

    /// Whether an agent running as korvus's own uid is denied reading the
    /// [`CREDENTIAL_PATHS`] of that user's home (default `true`). An agent
    /// of another uid ([`CommandRunner::run_as`](crate::CommandRunner::run_as))
    /// is kept out by file modes instead, so nothing is added then.
    pub fn credentials_private(mut self, private: bool) -> Self {
        self.credentials_private = private;
        self
    }

    /// This policy for an agent running as `uid`: with the credential
    /// paths of that user's home private when `uid` is korvus's own.
    pub(crate) fn for_agent(&self, uid: u32) -> Self {
        let mut policy = self.clone();
        let own = rustix::process::geteuid().as_raw();
        if !self.enabled || !self.credentials_private || uid != own {
            return policy;
        }
        match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
            Ok(Some(user)) => {
                for path in CREDENTIAL_PATHS {
                    policy.private.push(user.dir.join(path));
                }
            }
            Ok(None) | Err(_) => {
                debug!(
                    uid,
                    "no home for the agent's uid; no credential path made private"
                );
            }
        }
        policy
    }

    /// The newest Landlock ABI to use (default: the newest this crate
    /// handles). Lower values pin the behaviour of older kernels; `0`
    /// behaves as a kernel without Landlock (how the degraded mode is
    /// tested).
    pub fn landlock_abi(mut self, abi: u8) -> Self {
        self.abi = abi.min(NEWEST_ABI);
        self
    }
}

/// How the agent of one run was confined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Confinement {
    /// The policy is [`Sandbox::disabled`].
    Off,
    /// The ruleset is in force (`partial`: only what this kernel offers;
    /// `scoped`: signals and abstract UNIX sockets reach only the agent's
    /// own processes, Landlock ABI 6).
    Enforced { partial: bool, scoped: bool },
    /// Landlock is missing or refused the ruleset; the agent runs
    /// unconfined. The text says why.
    NotEnforced(String),
}

impl Confinement {
    /// The note a run's log gets about what of the sandbox is not in
    /// force, if anything.
    pub(crate) fn note(&self) -> Option<String> {
        match self {
            Confinement::NotEnforced(reason) => Some(format!(
                "sandbox not in force ({reason}): the agent ran without filesystem confinement"
            )),
            Confinement::Enforced { scoped: false, .. } => Some(
                "signals not confined: this kernel's Landlock has no scopes (ABI 6), so the \
                 agent may signal processes of its user outside its own"
                    .to_owned(),
            ),
            _ => None,
        }
    }
}

/// The Landlock ruleset of `policy` (with `scratch` writable) for the
/// agent's process to enter last, before `exec` (a restricted process may
/// not mount, and the agent's mounts come first), and how it will confine
/// the agent. Never fails: an error means no ruleset, and says why.
///
/// What the kernel will enforce is learnt by entering a copy of the
/// ruleset on a short-lived thread of its own, which ends at once (a
/// Landlock domain restricts the thread that enters it, never its
/// siblings).
pub(crate) fn prepare(policy: &Sandbox, scratch: &Path) -> Prepared {
    if !policy.enabled {
        return Prepared {
            confinement: Confinement::Off,
            ruleset: None,
            devpts: 0,
            proc: 0,
        };
    }
    let abi = abi(policy.abi);
    let prepared = ruleset(policy, scratch, abi).and_then(|r| {
        let copy = r
            .try_clone()
            .map_err(|e| format!("the Landlock ruleset could not be copied: {e}"))?;
        let status = std::thread::scope(|s| {
            std::thread::Builder::new()
                .name("korvus-landlock-probe".to_owned())
                .spawn_scoped(s, move || copy.restrict_self())
                .map_err(|e| format!("no thread to enter the ruleset on: {e}"))?
                .join()
                .map_err(|_| "the thread entering the ruleset panicked".to_owned())
        })?
        .map_err(|e| format!("landlock_restrict_self failed: {e}"))?;
        Ok((status, r))
    });
    let (confinement, ruleset) = match prepared {
        Ok((s, r)) => match s.ruleset {
            RulesetStatus::FullyEnforced => (
                Confinement::Enforced {
                    partial: false,
                    scoped: scoped(abi),
                },
                Option::<OwnedFd>::from(r),
            ),
            RulesetStatus::PartiallyEnforced => (
                Confinement::Enforced {
                    partial: true,
                    scoped: scoped(abi),
                },
                Option::<OwnedFd>::from(r),
            ),
            _ => (
                Confinement::NotEnforced("this kernel does not offer Landlock".to_owned()),
                None,
            ),
        },
        Err(e) => (Confinement::NotEnforced(e), None),
    };
    if let Confinement::NotEnforced(why) = &confinement {
        announce_degraded(why);
    }
    // The bits the ruleset handles: those of the older of the policy's ABI
    // and the kernel's (best effort drops the rest).
    let handled = self::abi(policy.abi.min(crate::spawn::landlock_kernel_abi()));
    let proc = Path::new("/proc");
    let proc_private = policy
        .private
        .iter()
        .any(|p| p.starts_with(proc) || proc.starts_with(p));
    Prepared {
        confinement,
        ruleset,
        devpts: AccessFs::from_all(handled).bits(),
        proc: if proc_private {
            0
        } else {
            AccessFs::from_read(handled).bits()
        },
    }
}

/// A run's Landlock ruleset, before the agent's process enters it.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) confinement: Confinement,
    /// The ruleset, where one is in force.
    pub(crate) ruleset: Option<OwnedFd>,
    /// The access bits the agent gets beneath its own `devpts` (as beneath
    /// the host's: a [`WRITABLE_DEVICES`] entry) and its own `/proc` (read,
    /// unless a private path covers it), granted once they are mounted.
    pub(crate) devpts: u64,
    pub(crate) proc: u64,
}

static DEGRADED_ANNOUNCED: AtomicBool = AtomicBool::new(false);

/// Warns once per process that agents run without a sandbox.
fn announce_degraded(why: &str) {
    if !DEGRADED_ANNOUNCED.swap(true, Ordering::Relaxed) {
        warn!(
            reason = why,
            "agents run WITHOUT a filesystem sandbox: they may write wherever their user may \
             (said once per process; every run's log says it too)"
        );
    }
}

fn abi(n: u8) -> ABI {
    match n {
        0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        7 => ABI::V7,
        _ => ABI::V8,
    }
}

/// The ruleset of `policy`: every filesystem right handled, reads granted
/// outside the private paths, everything granted beneath the writable ones.
fn ruleset(policy: &Sandbox, scratch: &Path, abi: ABI) -> Result<landlock::RulesetCreated, String> {
    let all = AccessFs::from_all(abi);
    let read = AccessFs::from_read(abi);
    let mut rules = Rules::default();
    if policy.private.is_empty() {
        rules.grant(Path::new("/"), read);
    } else {
        let private: BTreeSet<PathBuf> = policy.private.iter().map(|p| resolved(p)).collect();
        rules.grant_outside(&private, read);
    }
    for path in &policy.readable {
        rules.grant(path, read);
    }
    rules.grant(scratch, all);
    for path in &policy.writable {
        rules.grant(path, all);
    }
    for device in WRITABLE_DEVICES {
        let mut access = all;
        if *device == CONTROLLING_TERMINAL {
            access.remove(AccessFs::IoctlDev);
        }
        rules.grant(Path::new(device), access);
    }
    let mut ruleset = Ruleset::default().handle_access(all);
    if scoped(abi) {
        ruleset = ruleset.and_then(|r| r.scope(Scope::from_all(abi)));
    }
    let mut created = ruleset
        .and_then(|r| r.create())
        .map_err(|e| format!("no Landlock ruleset: {e}"))?;
    for (fd, access) in rules.0 {
        let rule = PathBeneath::new(fd, access);
        created = created
            .add_rule(rule)
            .map_err(|e| format!("a Landlock rule was refused: {e}"))?;
    }
    Ok(created)
}

/// The device that names the caller's controlling terminal.
const CONTROLLING_TERMINAL: &str = "/dev/tty";

/// Whether the ruleset of `abi` scopes signals and abstract UNIX sockets
/// to the agent's own domain, and this kernel does (Landlock ABI 6).
fn scoped(abi: ABI) -> bool {
    !Scope::from_all(abi).is_empty() && kernel_scopes()
}

/// Whether this kernel offers Landlock's scopes: a ruleset that requires
/// them is created (and dropped, restricting nothing) once per process.
fn kernel_scopes() -> bool {
    static SCOPES: OnceLock<bool> = OnceLock::new();
    *SCOPES.get_or_init(|| {
        Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .scope(Scope::Signal | Scope::AbstractUnixSocket)
            .and_then(|r| r.create())
            .is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_paths_are_private_only_for_an_agent_of_korvuss_own_uid() {
        let own = rustix::process::geteuid().as_raw();
        let home = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(own))
            .unwrap()
            .expect("this process's user")
            .dir;
        let policy = Sandbox::new().for_agent(own);
        for path in CREDENTIAL_PATHS {
            assert!(policy.private.contains(&home.join(path)), "{path}");
        }
        let other = if own == 0 { 65534 } else { 0 };
        assert!(Sandbox::new().for_agent(other).private.is_empty());
        let off = Sandbox::new().credentials_private(false).for_agent(own);
        assert!(off.private.is_empty());
        assert!(Sandbox::disabled().for_agent(own).private.is_empty());
    }

    #[test]
    fn abi_numbers_past_the_newest_use_the_newest() {
        assert_eq!(abi(0), ABI::Unsupported);
        assert_eq!(abi(200), ABI::V8);
        assert_eq!(Sandbox::new().landlock_abi(99).abi, NEWEST_ABI);
    }
}
