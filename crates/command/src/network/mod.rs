//! Where an agent's network traffic may go: the [`Network`] policy, and the
//! namespace and proxy that enforce it.
//!
//! See [`Network`].

pub(crate) mod netns;
pub(crate) mod proxy;
pub(crate) mod vault;
mod vault_ca;

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// What network an agent may reach (`docs/agents.md` has the details).
///
/// - [`Network::host`]: the agent shares the host's network (the default of
///   a plain [`CommandRunner`](crate::CommandRunner)).
/// - [`Network::none`]: the agent runs in a network namespace of its own
///   with nothing but its own loopback.
/// - [`Network::allow`]: the same namespace, whose only way out is an HTTP
///   proxy korvus runs for the run (`HTTP_PROXY`/`HTTPS_PROXY` point at
///   it). It admits `CONNECT` and absolute-form requests to the listed
///   destinations and refuses the rest, each refusal a note in the log. A
///   listed destination on the host's loopback (a local model server) is
///   also reached directly: a forwarder listens at the same address inside
///   the namespace.
///
/// As root a short-lived thread moves itself into a new network namespace
/// (`unshare(CLONE_NEWNET)`, allowed in a multithreaded process), brings up
/// its loopback and opens the listeners there before it starts the agent.
/// Without root a network namespace needs a user namespace, which only a
/// single-threaded process may create: the agent's child process creates
/// both before `exec` (the agent then sees its uid as the overflow uid,
/// usually `nobody`). No proxy can be opened inside a namespace made that
/// way, so `allow` becomes `none` there; where user namespaces are refused
/// too the policy is not in force. A note says either — or, when the
/// policy is [`required`](Network::required), the run fails before the
/// agent starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Network {
    mode: Mode,
    required: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    Host,
    None,
    Allow(Vec<Destination>),
}

impl Default for Network {
    /// [`Network::host`].
    fn default() -> Self {
        Self::host()
    }
}

impl Network {
    /// The host's network: everything the host reaches.
    pub fn host() -> Self {
        Self {
            mode: Mode::Host,
            required: false,
        }
    }

    /// No network but the agent's own loopback.
    pub fn none() -> Self {
        Self {
            mode: Mode::None,
            required: false,
        }
    }

    /// Only `destinations`, through korvus's proxy (and, for destinations
    /// on the host's loopback, a forwarder at the same address).
    pub fn allow(destinations: impl IntoIterator<Item = Destination>) -> Self {
        Self {
            mode: Mode::Allow(destinations.into_iter().collect()),
            required: false,
        }
    }

    /// Fail the run ([`CommandError::Network`](crate::CommandError::Network))
    /// before the agent starts whenever the policy cannot be put in force
    /// exactly: instead of running it on the host's network where no
    /// namespace can be made, and instead of running an `allow` policy
    /// with no network at all where its proxy cannot run (without root).
    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }

    /// Whether a run fails where the policy cannot be enforced.
    pub fn is_required(&self) -> bool {
        self.required
    }

    /// Whether this is [`Network::host`].
    pub fn is_host(&self) -> bool {
        self.mode == Mode::Host
    }

    /// The destinations of an [`allow`](Network::allow) policy (none
    /// otherwise).
    pub fn destinations(&self) -> &[Destination] {
        match &self.mode {
            Mode::Allow(d) => d,
            Mode::Host | Mode::None => &[],
        }
    }

    /// Whether this is an [`allow`](Network::allow) policy.
    pub(crate) fn is_allow(&self) -> bool {
        matches!(self.mode, Mode::Allow(_))
    }
}

impl fmt::Display for Network {
    /// `host`, `none` or `allow=a:1,b:2` (what [`FromStr`] reads).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.mode {
            Mode::Host => f.write_str("host"),
            Mode::None => f.write_str("none"),
            Mode::Allow(d) => {
                f.write_str("allow=")?;
                for (i, dest) in d.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{dest}")?;
                }
                Ok(())
            }
        }
    }
}

impl FromStr for Network {
    type Err = DestinationError;

    /// `host`, `none`, or `allow=HOST:PORT[,HOST:PORT…]` (a destination may
    /// also be a URL, whose scheme gives the default port).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "host" => Ok(Self::host()),
            "none" => Ok(Self::none()),
            _ => match s.strip_prefix("allow=") {
                Some(list) => list
                    .split(',')
                    .map(str::trim)
                    .filter(|d| !d.is_empty())
                    .map(Destination::from_str)
                    .collect::<Result<Vec<_>, _>>()
                    .map(Self::allow),
                None => Err(DestinationError(format!(
                    "unknown network policy {s:?}: expected host, none or allow=HOST:PORT[,…]"
                ))),
            },
        }
    }
}

/// One destination an [`allow`](Network::allow) policy admits: a host name
/// or IP address and a TCP port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Destination {
    host: String,
    port: u16,
}

/// A destination or network policy that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DestinationError(String);

impl Destination {
    /// `host` (a name, compared without case, or an IP address; IPv6
    /// without brackets) at `port`.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        let host = host.into();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&host)
            .to_ascii_lowercase();
        Self { host, port }
    }

    /// The host and port of `url` (`http://…` defaults to port 80,
    /// `https://…` to 443).
    ///
    /// # Errors
    /// A URL without a scheme, with another scheme and no port, or without
    /// a host.
    pub fn from_url(url: &str) -> Result<Self, DestinationError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| DestinationError(format!("{url:?} is not a URL")))?;
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let authority = authority.rsplit('@').next().unwrap_or_default();
        let default = match scheme.to_ascii_lowercase().as_str() {
            "http" | "ws" => Some(80),
            "https" | "wss" => Some(443),
            _ => None,
        };
        match split_authority(authority)? {
            (host, Some(port)) => Ok(Self::new(host, port)),
            (host, None) => default.map(|p| Self::new(host, p)).ok_or_else(|| {
                DestinationError(format!("{url:?}: no port and no default for its scheme"))
            }),
        }
    }

    /// The host name or address.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The host's loopback addresses this destination names (`localhost`
    /// names both `127.0.0.1` and `::1`); empty for any other host.
    pub(crate) fn loopback_addrs(&self) -> Vec<IpAddr> {
        if self.host == "localhost" {
            return vec![
                IpAddr::from([127, 0, 0, 1]),
                IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
            ];
        }
        match self.host.parse::<IpAddr>() {
            Ok(ip) if ip.is_loopback() => vec![ip],
            _ => Vec::new(),
        }
    }

    /// Whether a request for `host:port` is for this destination (names
    /// compared without case, addresses as addresses).
    pub(crate) fn admits(&self, other: &Destination) -> bool {
        if self.port != other.port {
            return false;
        }
        match (self.host.parse::<IpAddr>(), other.host.parse::<IpAddr>()) {
            (Ok(a), Ok(b)) => a == b,
            _ => self.host == other.host,
        }
    }
}

/// The longest host name a destination may have (DNS's limit).
const MAX_HOST: usize = 253;

/// `host[:port]` or `[v6][:port]`.
fn split_authority(authority: &str) -> Result<(&str, Option<u16>), DestinationError> {
    let shown: String = authority.chars().take(80).collect();
    let bad = || DestinationError(format!("{shown:?} is not HOST:PORT"));
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return Err(bad()),
        }
    } else if authority.matches(':').count() > 1 {
        // A bare IPv6 address: no port.
        (authority, None)
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    // Names and addresses only: nothing an agent sends may carry control
    // characters or bulk into korvus's notes and logs.
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':');
    if host.is_empty() || host.len() > MAX_HOST || !host.chars().all(allowed) {
        return Err(bad());
    }
    let port = port
        .map(|p| p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(bad))
        .transpose()?;
    Ok((host, port))
}

impl FromStr for Destination {
    type Err = DestinationError;

    /// `HOST:PORT`, `[V6]:PORT`, or a URL.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.contains("://") {
            return Self::from_url(s);
        }
        match split_authority(s)? {
            (host, Some(port)) => Ok(Self::new(host, port)),
            (_, None) => Err(DestinationError(format!("{s:?} has no port: HOST:PORT"))),
        }
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(s: &str) -> Destination {
        s.parse().unwrap()
    }

    #[test]
    fn destinations_read_hosts_addresses_and_urls() {
        assert_eq!(
            dest("API.openai.com:443"),
            Destination::new("api.openai.com", 443)
        );
        assert_eq!(dest("[::1]:8080"), Destination::new("::1", 8080));
        assert_eq!(
            dest("http://127.0.0.1:9/v1"),
            Destination::new("127.0.0.1", 9)
        );
        assert_eq!(
            dest("https://user@api.anthropic.com"),
            Destination::new("api.anthropic.com", 443)
        );
        assert_eq!(dest("http://[::1]/x").to_string(), "[::1]:80");
        for bad in [
            "example.com",
            "a b:1",
            ":80",
            "h:0",
            "h:99999",
            "ftp://h",
            "[::1",
        ] {
            assert!(bad.parse::<Destination>().is_err(), "{bad}");
        }
    }

    #[test]
    fn admission_compares_names_without_case_and_addresses_as_addresses() {
        assert!(dest("Model.example:443").admits(&dest("model.example:443")));
        assert!(!dest("model.example:443").admits(&dest("model.example:80")));
        assert!(dest("[::1]:80").admits(&Destination::new("0:0:0:0:0:0:0:1", 80)));
        assert!(!dest("127.0.0.1:80").admits(&dest("127.0.0.2:80")));
        assert!(!dest("localhost:80").admits(&dest("127.0.0.1:80")));
    }

    #[test]
    fn loopback_destinations_get_forwarders() {
        assert_eq!(dest("localhost:1").loopback_addrs().len(), 2);
        assert_eq!(dest("127.0.0.1:1").loopback_addrs().len(), 1);
        assert!(dest("10.0.0.1:1").loopback_addrs().is_empty());
        assert!(dest("api.openai.com:443").loopback_addrs().is_empty());
    }

    #[test]
    fn policies_round_trip_through_text() {
        for text in [
            "host",
            "none",
            "allow=127.0.0.1:9,[::1]:80,api.openai.com:443",
        ] {
            assert_eq!(text.parse::<Network>().unwrap().to_string(), text);
        }
        assert!("open".parse::<Network>().is_err());
        assert!("allow=nohost".parse::<Network>().is_err());
        assert_eq!("allow=".parse::<Network>().unwrap().destinations().len(), 0);
    }
}
