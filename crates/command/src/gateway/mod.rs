//! The model gateway: korvus serves the agent's model API on the agent's
//! own loopback, with a per-run token as the agent's key, and forwards
//! each call to the real upstream over TLS with the real key — which the
//! agent never holds — reading what every call used from its answer.
//!
//! See [`ModelGateway`]; the server is in `serve.rs`, the answer's way
//! back in `body.rs`, the usage reader in `meter.rs`.

mod body;
pub(crate) mod meter;
pub(crate) mod serve;

use std::ffi::{OsStr, OsString};
use std::net::{IpAddr, TcpListener as StdListener};

use crate::network::{Destination, Network};
use crate::CommandError;

/// In an argument or a gateway variable of the agent, replaced by the
/// gateway's base URL (`http://127.0.0.1:PORT`) when the run starts; the
/// agent also finds it in `KORVUS_MODEL_URL`.
pub const MODEL_URL: &str = "${KORVUS_MODEL_URL}";

/// In an argument or a gateway variable of the agent, replaced by the
/// run's gateway token (the key the agent presents to the gateway) when
/// the run starts; the agent also finds it in `KORVUS_MODEL_TOKEN`.
pub const MODEL_TOKEN: &str = "${KORVUS_MODEL_TOKEN}";

/// The first port tried for the gateway inside an agent's own network
/// namespace (any port is free there but the forwarders').
const NAMESPACE_PORT: u16 = 4319;

/// How the upstream wants its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UpstreamAuth {
    /// `Authorization: Bearer KEY` (OpenAI's APIs).
    Bearer,
    /// `x-api-key: KEY` (Anthropic's).
    XApiKey,
}

/// A model API korvus serves to the agent in place of its upstream
/// (`docs/agents.md`, "The model gateway").
///
/// For each run the gateway listens on the agent's loopback — inside its
/// network namespace where it has one — and hands the agent a token of
/// its own to use as its key ([`MODEL_URL`], [`MODEL_TOKEN`]). Each call
/// is forwarded to the upstream over TLS with the real key, read from
/// the embedding process's variable [`key_var`](Self::key_var) (or the
/// runner's [`env_source`](crate::CommandRunner::env_source)) and never
/// given to the agent: that variable is removed from its environment
/// whatever the environment policy says. Every answer's usage is written
/// to the turn log as a measured-usage event, and the run's token
/// counters follow them ([`TokenTally`](korvus_log::TokenTally) says how
/// when a call could not be metered whole).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ModelGateway {
    upstream: String,
    key_var: String,
    auth: UpstreamAuth,
    roots: korvus_tls::Roots,
    env: Vec<(OsString, String)>,
}

impl ModelGateway {
    /// An OpenAI-style upstream (Responses, Chat Completions): calls to
    /// `{gateway}/PATH` go to `{upstream}/PATH` with `Authorization:
    /// Bearer` and the key in `key_var`. `upstream` is the API's base URL
    /// as an agent would use it, e.g. `https://api.openai.com/v1`.
    pub fn openai(upstream: impl Into<String>, key_var: impl Into<String>) -> Self {
        Self::new(upstream.into(), key_var.into(), UpstreamAuth::Bearer)
    }

    /// An Anthropic Messages upstream, e.g. `https://api.anthropic.com`
    /// (calls to `{gateway}/v1/messages` go to `{upstream}/v1/messages`
    /// with `x-api-key`).
    pub fn anthropic(upstream: impl Into<String>, key_var: impl Into<String>) -> Self {
        Self::new(upstream.into(), key_var.into(), UpstreamAuth::XApiKey)
    }

    fn new(upstream: String, key_var: String, auth: UpstreamAuth) -> Self {
        Self {
            upstream: upstream.trim_end_matches('/').to_owned(),
            key_var,
            auth,
            roots: korvus_tls::Roots::native(),
            env: Vec::new(),
        }
    }

    /// Trusts `roots` for the upstream's certificate instead of the
    /// system's roots (a private upstream, a test's authority).
    #[must_use]
    pub fn trusting(mut self, roots: korvus_tls::Roots) -> Self {
        self.roots = roots;
        self
    }

    /// Sets the agent's variable `name` to `template`, in which
    /// [`MODEL_URL`] and [`MODEL_TOKEN`] are replaced when the run starts
    /// (e.g. `ANTHROPIC_BASE_URL` = [`MODEL_URL`]). Set after the key
    /// variable is removed, so it may reuse the key's name.
    #[must_use]
    pub fn agent_env(mut self, name: impl Into<OsString>, template: impl Into<String>) -> Self {
        self.env.push((name.into(), template.into()));
        self
    }

    /// The upstream's base URL.
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// The variable korvus reads the real key from.
    pub fn key_var(&self) -> &str {
        &self.key_var
    }

    /// The real key, from `source` (the runner's environment source) or
    /// the embedding process's environment.
    pub(crate) fn key(
        &self,
        source: Option<&[(OsString, OsString)]>,
    ) -> Result<String, CommandError> {
        let value = crate::env::lookup(source, &self.key_var);
        let missing = || CommandError::Gateway {
            reason: format!(
                "the model key variable {} is not set (korvus reads it; the agent never does)",
                self.key_var
            ),
        };
        let value = value.ok_or_else(missing)?;
        let value = value.into_string().map_err(|_| CommandError::Gateway {
            reason: format!("the model key variable {} is not UTF-8", self.key_var),
        })?;
        if value.trim().is_empty() {
            return Err(missing());
        }
        Ok(value)
    }

    /// Where the gateway of one run will listen, chosen before the agent's
    /// command is built: on the host's loopback (a free port, bound now)
    /// when the agent shares the host's network, else a port of the
    /// agent's own namespace (bound there when it is made).
    pub(crate) fn place(&self, network: &Network) -> Result<Placed, CommandError> {
        self.check_upstream()?;
        let token = token()?;
        if network.is_host() {
            let listener = StdListener::bind((IpAddr::from([127, 0, 0, 1]), 0))
                .map_err(|e| gateway_io("could not listen on the host's loopback", &e))?;
            let port = listener
                .local_addr()
                .map_err(|e| gateway_io("has no address", &e))?
                .port();
            return Ok(Placed {
                token,
                port,
                host_listener: Some(listener),
            });
        }
        Ok(Placed {
            token,
            port: namespace_port(network.destinations()),
            host_listener: None,
        })
    }

    /// The key goes to the upstream over TLS, or in clear only to this
    /// host's loopback (a local model server).
    fn check_upstream(&self) -> Result<(), CommandError> {
        let clear = self
            .upstream
            .get(..7)
            .is_some_and(|s| s.eq_ignore_ascii_case("http://"));
        let local =
            Destination::from_url(&self.upstream).is_ok_and(|d| !d.loopback_addrs().is_empty());
        if clear && !local {
            return Err(CommandError::Gateway {
                reason: format!(
                    "the upstream {} is plain HTTP: the key would cross the network in clear \
                     (use https://, or a server on this host's loopback)",
                    self.upstream
                ),
            });
        }
        Ok(())
    }

    /// The agent's gateway variables, templates filled in.
    pub(crate) fn agent_vars(&self, placed: &Placed) -> Vec<(OsString, OsString)> {
        let mut vars = vec![
            (
                OsString::from("KORVUS_MODEL_URL"),
                OsString::from(placed.url()),
            ),
            (
                OsString::from("KORVUS_MODEL_TOKEN"),
                OsString::from(&placed.token),
            ),
        ];
        vars.extend(
            self.env
                .iter()
                .map(|(k, t)| (k.clone(), OsString::from(placed.fill(t)))),
        );
        vars
    }
}

/// Where one run's gateway listens, and its token.
#[derive(Debug)]
pub(crate) struct Placed {
    pub(crate) token: String,
    pub(crate) port: u16,
    /// Bound already, on the host's loopback.
    pub(crate) host_listener: Option<StdListener>,
}

impl Placed {
    /// `http://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `template` with [`MODEL_URL`] and [`MODEL_TOKEN`] replaced.
    pub(crate) fn fill(&self, template: &str) -> String {
        template
            .replace(MODEL_URL, &self.url())
            .replace(MODEL_TOKEN, &self.token)
    }

    /// An argument with the placeholders replaced (a non-UTF-8 argument
    /// has none and is kept as it is).
    pub(crate) fn fill_arg(&self, arg: &OsStr) -> OsString {
        match arg.to_str() {
            Some(s) if s.contains("${KORVUS_MODEL_") => OsString::from(self.fill(s)),
            _ => arg.to_owned(),
        }
    }
}

/// A port no forwarder of `allow` takes on the namespace's loopback.
fn namespace_port(allow: &[Destination]) -> u16 {
    let taken: Vec<u16> = allow
        .iter()
        .filter(|d| !d.loopback_addrs().is_empty())
        .map(Destination::port)
        .collect();
    (NAMESPACE_PORT..u16::MAX)
        .find(|p| !taken.contains(p))
        .unwrap_or(NAMESPACE_PORT)
}

/// 32 random bytes as hex: the agent's key for one run's gateway.
fn token() -> Result<String, CommandError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| CommandError::Gateway {
        reason: format!("no randomness for the run's token: {e}"),
    })?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("korvus-gw-{hex}"))
}

fn gateway_io(what: &str, e: &std::io::Error) -> CommandError {
    CommandError::Gateway {
        reason: format!("the model gateway {what}: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_and_the_key_is_read_from_the_source() {
        let gw = ModelGateway::anthropic("https://api.example/", "REAL_KEY")
            .agent_env("ANTHROPIC_BASE_URL", MODEL_URL)
            .agent_env("REAL_KEY", MODEL_TOKEN);
        assert_eq!(gw.upstream(), "https://api.example");
        let placed = gw.place(&Network::none()).unwrap();
        assert_eq!(placed.port, NAMESPACE_PORT);
        assert!(placed.host_listener.is_none());
        let vars = gw.agent_vars(&placed);
        let get = |name: &str| {
            vars.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(get("ANTHROPIC_BASE_URL").unwrap(), placed.url());
        assert_eq!(get("REAL_KEY").unwrap(), placed.token);
        assert!(placed.token.len() > 64);
        assert_eq!(
            placed.fill_arg(OsStr::new("base_url=\"${KORVUS_MODEL_URL}/v1\"")),
            OsString::from(format!("base_url=\"{}/v1\"", placed.url()))
        );
        let source = vec![(OsString::from("REAL_KEY"), OsString::from("sk-real"))];
        assert_eq!(gw.key(Some(&source)).unwrap(), "sk-real");
        assert!(matches!(
            gw.key(Some(&[])),
            Err(CommandError::Gateway { .. })
        ));
        let tokens: std::collections::HashSet<String> = (0..8).map(|_| token().unwrap()).collect();
        assert_eq!(tokens.len(), 8, "a token per run");
    }

    #[test]
    fn the_key_goes_in_clear_only_to_this_hosts_loopback() {
        let placed = |url: &str| ModelGateway::openai(url, "K").place(&Network::none());
        assert!(placed("http://127.0.0.1:9/v1").is_ok());
        assert!(placed("http://localhost:9").is_ok());
        assert!(placed("https://api.example/v1").is_ok());
        let err = placed("http://api.example/v1").unwrap_err().to_string();
        assert!(err.contains("in clear"), "{err}");
        assert!(placed("HTTP://10.0.0.1:80").is_err());
    }

    #[test]
    fn the_namespace_port_avoids_forwarders() {
        let allow = [
            Destination::new("127.0.0.1", NAMESPACE_PORT),
            Destination::new("api.example", NAMESPACE_PORT + 1),
        ];
        assert_eq!(namespace_port(&allow), NAMESPACE_PORT + 1);
        let host = ModelGateway::openai("https://x/v1", "K")
            .place(&Network::host())
            .unwrap();
        assert!(host.host_listener.is_some());
        assert_ne!(host.port, 0);
    }
}
