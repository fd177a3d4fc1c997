//! Presets: Codex and Claude Code as headless korvus agents.
//!
//! A preset is a [`CommandRunner`] with the flags, environment and
//! [`Dialect`] one agent needs to run non-interactively, with no telemetry,
//! under korvus's sandbox instead of its own (see `docs/agents.md`). The
//! agent keeps its state (`$HOME/.codex`, `$HOME/.claude`) in the run's
//! private `HOME`, which is never harvested.

use std::ffi::OsString;

use crate::dialect::Dialect;
use crate::gateway::{ModelGateway, MODEL_TOKEN, MODEL_URL};
use crate::network::{Destination, Network};
use crate::runner::CommandRunner;

/// An agent korvus knows how to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Preset {
    /// OpenAI's Codex CLI (`@openai/codex`): `codex exec --json`.
    Codex,
    /// Anthropic's Claude Code (`@anthropic-ai/claude-code`): `claude -p
    /// --output-format stream-json --verbose`.
    ClaudeCode,
}

/// The model endpoint a preset points its agent at, instead of the
/// provider's public API.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelEndpoint {
    /// The API's base URL: for Codex the Responses API's (requests go to
    /// `{base_url}/responses`, e.g. `http://127.0.0.1:8080/v1`); for
    /// Claude Code the Messages API's (`ANTHROPIC_BASE_URL`, e.g.
    /// `http://127.0.0.1:8080`).
    pub base_url: String,
    /// The model to ask for, when not the agent's default.
    pub model: Option<String>,
    /// The variable of the embedding process holding the endpoint's API
    /// key. With one, the agent is served through korvus's
    /// [model gateway](crate::ModelGateway): korvus reads the key and
    /// sends it upstream, the agent gets a per-run token instead and never
    /// the key, and every call is metered. `None`: the agent calls the
    /// endpoint itself, with no key (a keyless local endpoint).
    pub api_key_var: Option<String>,
    /// The authorities the gateway trusts for the endpoint's certificate
    /// (the system's roots when `None`).
    pub roots: Option<korvus_tls::Roots>,
}

impl ModelEndpoint {
    /// The API at `base_url`, the agent's default model, no key.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: None,
            api_key_var: None,
            roots: None,
        }
    }

    /// The same endpoint, its certificate checked against `roots` only
    /// (a private endpoint, a test's authority).
    #[must_use]
    pub fn trusting(mut self, roots: korvus_tls::Roots) -> Self {
        self.roots = Some(roots);
        self
    }

    /// The gateway serving this endpoint to `preset`'s agent, when the
    /// endpoint has a key variable.
    pub fn gateway(&self, preset: Preset) -> Option<ModelGateway> {
        let var = self.api_key_var.as_deref()?;
        let gateway = match preset {
            Preset::Codex => ModelGateway::openai(&self.base_url, var),
            Preset::ClaudeCode => ModelGateway::anthropic(&self.base_url, var)
                .agent_env("ANTHROPIC_BASE_URL", MODEL_URL)
                .agent_env("ANTHROPIC_API_KEY", MODEL_TOKEN),
        };
        Some(match &self.roots {
            Some(roots) => gateway.trusting(roots.clone()),
            None => gateway,
        })
    }

    /// The same endpoint asking for `model`.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The same endpoint, its key in the embedding process's variable
    /// `name`, sent by korvus's gateway (see
    /// [`api_key_var`](Self::api_key_var)).
    #[must_use]
    pub fn with_api_key_var(mut self, name: impl Into<String>) -> Self {
        self.api_key_var = Some(name.into());
        self
    }
}

impl Preset {
    /// The name on the command line: `codex`, `claude-code`.
    pub fn name(&self) -> &'static str {
        match self {
            Preset::Codex => "codex",
            Preset::ClaudeCode => "claude-code",
        }
    }

    /// The program a preset starts when none is given: `codex`, `claude`
    /// (looked up in `PATH`).
    pub fn default_program(&self) -> &'static str {
        match self {
            Preset::Codex => "codex",
            Preset::ClaudeCode => "claude",
        }
    }

    /// The variables holding the provider's API key, passed to the agent
    /// by name (and nothing else beyond the environment policy).
    pub fn key_vars(&self) -> &'static [&'static str] {
        match self {
            Preset::Codex => &["OPENAI_API_KEY", "CODEX_API_KEY"],
            Preset::ClaudeCode => &["ANTHROPIC_API_KEY"],
        }
    }

    /// The provider's public API host, for an egress policy when no
    /// endpoint is configured.
    pub fn public_host(&self) -> &'static str {
        match self {
            Preset::Codex => "api.openai.com:443",
            Preset::ClaudeCode => "api.anthropic.com:443",
        }
    }

    /// The provider's public API, as a base URL of the kind
    /// [`ModelEndpoint::base_url`] takes: `https://api.openai.com/v1`,
    /// `https://api.anthropic.com` (what a key variable without an
    /// endpoint of its own is served through the gateway against).
    pub fn public_api(&self) -> &'static str {
        match self {
            Preset::Codex => "https://api.openai.com/v1",
            Preset::ClaudeCode => "https://api.anthropic.com",
        }
    }

    /// The egress policy a preset's runner starts with: none at all when
    /// the endpoint is served through the gateway (it listens on the
    /// agent's own loopback); else only the model endpoint (its host and
    /// port), or the provider's
    /// [public host](Self::public_host) when none is given. A base URL
    /// korvus cannot read a destination from gives `none`: the agent then
    /// reaches nothing, rather than everything.
    pub fn network(&self, endpoint: Option<&ModelEndpoint>) -> Network {
        if endpoint.is_some_and(|e| e.api_key_var.is_some()) {
            // Served through the gateway on the agent's own loopback.
            return Network::none();
        }
        let dest = match endpoint {
            Some(e) => Destination::from_url(&e.base_url),
            None => self.public_host().parse::<Destination>(),
        };
        match dest {
            Ok(dest) => Network::allow([dest]),
            Err(_) => Network::none(),
        }
    }

    /// A runner for this agent: `program` (see
    /// [`default_program`](Self::default_program)) with the flags of a
    /// headless run, pointed at `endpoint` when one is given — through
    /// korvus's [model gateway](crate::ModelGateway) when the endpoint
    /// has a key variable — its egress limited to what it needs
    /// ([`network`](Self::network); replace it with
    /// [`CommandRunner::network`]). Without a gateway the provider's key
    /// variables ([`key_vars`](Self::key_vars)) are passed to the agent.
    pub fn runner(
        &self,
        program: impl Into<OsString>,
        endpoint: Option<&ModelEndpoint>,
    ) -> CommandRunner {
        let mut runner = CommandRunner::new(program).network(self.network(endpoint));
        match endpoint.and_then(|e| e.gateway(*self)) {
            Some(gateway) => runner = runner.model_gateway(gateway),
            None => {
                for var in self.key_vars() {
                    runner = runner.env_pass(*var);
                }
            }
        }
        match self {
            Preset::Codex => codex(runner, endpoint),
            Preset::ClaudeCode => claude_code(runner, endpoint),
        }
    }
}

impl std::fmt::Display for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Preset {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "codex" => Ok(Preset::Codex),
            "claude-code" => Ok(Preset::ClaudeCode),
            other => Err(format!(
                "unknown agent preset {other:?}: expected codex or claude-code"
            )),
        }
    }
}

/// `codex exec --json … -`: the prompt on stdin; no plugins (they fetch
/// from GitHub at start), no analytics, a failing endpoint retried a few
/// times rather than for ever; Codex's own sandbox and approvals off in
/// favour of korvus's sandbox.
fn codex(runner: CommandRunner, endpoint: Option<&ModelEndpoint>) -> CommandRunner {
    let mut runner = runner.dialect(Dialect::Codex).args([
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--disable",
        "plugins",
        "--disable",
        "unbounded_connection_retries",
        "-c",
        "analytics.enabled=false",
        "--dangerously-bypass-approvals-and-sandbox",
    ]);
    if let Some(endpoint) = endpoint {
        // Through the gateway: its URL and the run's token, filled in when
        // the run starts.
        let gateway = endpoint.api_key_var.is_some();
        let base_url = if gateway {
            MODEL_URL
        } else {
            endpoint.base_url.as_str()
        };
        runner = runner.args([
            "-c".to_owned(),
            "model_provider=\"korvus\"".to_owned(),
            "-c".to_owned(),
            format!(
                "model_providers.korvus={{name=\"korvus\",base_url={},wire_api=\"responses\"}}",
                toml_string(base_url)
            ),
        ]);
        if let Some(model) = &endpoint.model {
            runner = runner.args(["-c".to_owned(), format!("model={}", toml_string(model))]);
        }
        if gateway {
            runner = runner.args([
                "-c".to_owned(),
                "model_providers.korvus.env_key=\"KORVUS_MODEL_TOKEN\"".to_owned(),
            ]);
        }
    }
    runner.arg("-")
}

/// `claude -p --output-format stream-json --verbose`: the prompt on
/// stdin; no non-essential traffic, no auto-update; permission prompts off
/// in favour of korvus's sandbox (which Claude Code refuses as root: run
/// it as an agent user).
fn claude_code(runner: CommandRunner, endpoint: Option<&ModelEndpoint>) -> CommandRunner {
    let mut runner = runner
        .dialect(Dialect::ClaudeCode)
        .args([
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
        ])
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_TELEMETRY", "1");
    if let Some(endpoint) = endpoint {
        if endpoint.api_key_var.is_none() {
            // Through the gateway, set by it when the run starts.
            runner = runner.env("ANTHROPIC_BASE_URL", &endpoint.base_url);
        }
        if let Some(model) = &endpoint.model {
            runner = runner.args(["--model", model.as_str()]);
        }
    }
    runner
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in [Preset::Codex, Preset::ClaudeCode] {
            assert_eq!(p.name().parse::<Preset>(), Ok(p));
        }
        assert!("gemini"
            .parse::<Preset>()
            .unwrap_err()
            .contains("claude-code"));
    }

    #[test]
    fn presets_allow_only_their_endpoint_or_their_provider() {
        let endpoint = |url: &str| ModelEndpoint::new(url);
        let local = endpoint("http://127.0.0.1:8080/v1");
        assert_eq!(
            Preset::Codex.runner("codex", Some(&local)).network_policy(),
            &Network::allow([Destination::new("127.0.0.1", 8080)])
        );
        assert_eq!(
            Preset::ClaudeCode.network(None),
            Network::allow([Destination::new("api.anthropic.com", 443)])
        );
        assert_eq!(
            Preset::Codex.network(None),
            Network::allow([Destination::new("api.openai.com", 443)])
        );
        assert_eq!(
            Preset::Codex.network(Some(&endpoint("gateway:8080"))),
            Network::none()
        );
    }

    #[test]
    fn an_endpoint_becomes_a_codex_provider() {
        let endpoint = ModelEndpoint::new("http://127.0.0.1:9/v1").with_model("m\"1");
        let runner = Preset::Codex.runner("codex", Some(&endpoint));
        let args: Vec<String> = runner
            .arguments()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(args.contains(
            &"model_providers.korvus={name=\"korvus\",base_url=\"http://127.0.0.1:9/v1\",wire_api=\"responses\"}".to_owned()
        ), "{args:?}");
        assert!(args.contains(&"model=\"m\\\"1\"".to_owned()), "{args:?}");
        assert!(runner.gateway().is_none(), "no key: no gateway");
        assert_eq!(
            args.last().map(String::as_str),
            Some("-"),
            "the prompt comes on stdin"
        );
    }

    #[test]
    fn an_endpoint_with_a_key_is_served_through_the_gateway() {
        let endpoint = ModelEndpoint::new("https://api.example/v1").with_api_key_var("REAL_KEY");
        let codex = Preset::Codex.runner("codex", Some(&endpoint));
        let gateway = codex.gateway().expect("a key: a gateway");
        assert_eq!(gateway.upstream(), "https://api.example/v1");
        assert_eq!(gateway.key_var(), "REAL_KEY");
        assert_eq!(codex.network_policy(), &Network::none());
        let args: Vec<String> = codex
            .arguments()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(
            args.iter()
                .any(|a| a.contains("base_url=\"${KORVUS_MODEL_URL}\"")),
            "{args:?}"
        );
        assert!(
            args.contains(&"model_providers.korvus.env_key=\"KORVUS_MODEL_TOKEN\"".to_owned()),
            "{args:?}"
        );
        assert!(!args.iter().any(|a| a.contains("REAL_KEY")), "{args:?}");
        let claude = Preset::ClaudeCode.runner("claude", Some(&endpoint));
        assert_eq!(claude.gateway().unwrap().key_var(), "REAL_KEY");
        assert_eq!(claude.network_policy(), &Network::none());
    }
}
