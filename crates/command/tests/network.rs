//! The egress policy: an agent under `allow` reaches only what is listed
//! (through korvus's proxy, or a forwarder for a destination on the host's
//! loopback), a refusal is noted, and its namespace routes nothing but
//! loopback; under `none` it has only its own loopback and still lands its
//! report. Every destination here is on 127.0.0.1: nothing leaves the host.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use korvus_command::{CommandRunner, Destination, Network, Sandbox};
use korvus_store::SessionStatus;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::support::{harness, sh};

/// Prints `name=ok:<output>` or `name=failed` for each attempt (the agent
/// runs as root here: `leave` tries to enter korvus's network namespace), then
/// what the namespace has: the lines of its IPv4 main routing table (the
/// header alone: no route), the interface of each IPv6 route, its
/// interfaces, and its proxy variables.
const ATTEMPTS: &str = r#"
    try() { if out=$(sh -c "$2" 2>/dev/null); then echo "$1=ok:$out"; else echo "$1=failed"; fi; }
    try proxied 'curl -sf --max-time 10 http://127.0.0.1:$ALLOWED/'
    try tunnel 'curl -sfp --max-time 10 http://127.0.0.1:$ALLOWED/'
    try direct 'curl -sf --max-time 10 --noproxy "*" http://127.0.0.1:$ALLOWED/'
    try other_proxied 'curl -sf --max-time 10 http://127.0.0.1:$OTHER/'
    try other_direct 'curl -sf --max-time 10 --noproxy "*" http://127.0.0.1:$OTHER/'
    try other_tunnel 'curl -sfp --max-time 10 http://127.0.0.1:$OTHER/'
    try leave 'nsenter -t $HOST_PID -n true'
    echo "routefile=$(wc -l < /proc/net/route)"
    awk '{print "v6route=" $NF}' /proc/net/ipv6_route
    awk -F: 'NR>2 {gsub(/ /, "", $1); print "iface=" $1}' /proc/net/dev
    echo "proxy=${HTTPS_PROXY:-unset}"
    echo '# R' > report.md
"#;

/// A host server on 127.0.0.1 answering every request with `body`; counts
/// the connections it accepts.
async fn server(body: &'static str) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            });
        }
    });
    (port, seen)
}

fn attempts(network: Network, allowed: u16, other: u16) -> CommandRunner {
    sh(ATTEMPTS)
        .env("ALLOWED", allowed.to_string())
        .env("OTHER", other.to_string())
        .env("HOST_PID", std::process::id().to_string())
        .network(network)
}

fn lines_with<'a>(texts: &'a [String], prefix: &str) -> Vec<&'a str> {
    texts
        .iter()
        .filter_map(|t| t.strip_prefix(prefix))
        .collect()
}

#[tokio::test]
async fn under_allow_the_agent_reaches_only_the_listed_destination_and_a_refusal_is_noted() {
    let (allowed, _) = server("hello-allowed").await;
    let (other, other_seen) = server("hello-other").await;
    let policy = Network::allow([Destination::new("127.0.0.1", allowed)]).required();
    let h = harness(attempts(policy, allowed, other)).await;
    let row = h.run("reach").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let texts = h.texts(row.id).await;
    for (attempt, expected) in [
        ("proxied", "ok:hello-allowed"),
        ("tunnel", "ok:hello-allowed"),
        ("direct", "ok:hello-allowed"),
        ("other_proxied", "failed"),
        ("other_direct", "failed"),
        ("other_tunnel", "failed"),
        ("leave", "failed"),
    ] {
        assert!(
            texts.contains(&format!("{attempt}={expected}")),
            "{attempt}: {texts:#?}"
        );
    }
    assert_eq!(
        other_seen.load(Ordering::SeqCst),
        0,
        "nothing reached the other port"
    );
    for method in ["GET", "CONNECT"] {
        let refusal = format!("egress refused: {method} 127.0.0.1:{other} is not allowed");
        assert!(
            texts.iter().any(|t| t.starts_with(&refusal)),
            "{refusal}: {texts:#?}"
        );
    }
    // Two refusals at least: the proxy listens on a port of the
    // namespace's own loopback, which may be `other`'s number too (the
    // host's and the namespace's ports are separate), and then the direct
    // attempt reaches the proxy and is refused a third time.
    let summary =
        format!("egress allow=127.0.0.1:{allowed}: 2 connection(s) admitted by the proxy, ");
    let line = texts
        .iter()
        .find_map(|t| t.strip_prefix(&summary))
        .unwrap_or_else(|| panic!("{summary}: {texts:#?}"));
    let refused: usize = line
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a refusal count: {line}"));
    assert!(
        (2..=3).contains(&refused)
            && line.contains(" refused, 1 forwarded from the namespace's loopback"),
        "{line}"
    );
    // The namespace's routing tables, read (not probed): no IPv4 route in
    // the main table, every IPv6 route on the loopback, no other interface.
    assert!(texts.contains(&"routefile=1".to_owned()), "{texts:#?}");
    let v6 = lines_with(&texts, "v6route=");
    assert!(v6.iter().all(|dev| *dev == "lo"), "{v6:?}");
    assert_eq!(lines_with(&texts, "iface="), ["lo"]);
    let proxy = lines_with(&texts, "proxy=");
    assert!(proxy[0].starts_with("http://127.0.0.1:"), "{proxy:?}");
    h.stop().await;
}

#[tokio::test]
async fn under_none_the_agent_has_only_its_loopback_and_still_lands_its_report() {
    let (port, seen) = server("hello").await;
    // Without the filesystem sandbox (whose ptrace scoping alone already
    // keeps `nsenter` out of korvus's namespaces), so `leave=failed` shows
    // the dropped capabilities.
    let runner = attempts(Network::none().required(), port, port).sandbox(Sandbox::disabled());
    let h = harness(runner).await;
    let row = h.run("offline").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let stored = h.store_artifacts(row.id).await;
    assert!(stored.iter().any(|p| p == "report.md"), "{stored:?}");
    let texts = h.texts(row.id).await;
    for attempt in ["proxied", "tunnel", "direct", "leave"] {
        assert!(
            texts.contains(&format!("{attempt}=failed")),
            "{attempt}: {texts:#?}"
        );
    }
    assert_eq!(seen.load(Ordering::SeqCst), 0);
    assert_eq!(lines_with(&texts, "iface="), ["lo"]);
    assert_eq!(lines_with(&texts, "proxy="), ["unset"]);
    assert!(
        !texts.iter().any(|t| t.starts_with("egress")),
        "no proxy, so no egress notes: {texts:#?}"
    );
    h.stop().await;
}

#[tokio::test]
async fn the_host_policy_adds_no_namespace_and_no_proxy() {
    let (port, seen) = server("hello-host").await;
    let runner = attempts(Network::host(), port, port).sandbox(Sandbox::disabled());
    let h = harness(runner).await;
    let row = h.run("host").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");
    let texts = h.texts(row.id).await;
    assert!(
        texts.contains(&"direct=ok:hello-host".to_owned()),
        "{texts:#?}"
    );
    assert!(seen.load(Ordering::SeqCst) >= 1);
    assert_eq!(lines_with(&texts, "proxy="), ["unset"]);
    // A root agent loses `CAP_SYS_ADMIN` under the host policy too (no
    // sandbox here): it cannot enter another namespace either.
    assert!(
        texts.iter().any(|t| t.starts_with("leave=failed")),
        "{texts:#?}"
    );
    let all = h.all_texts(row.id).await;
    assert!(
        all.iter()
            .any(|t| t.starts_with("the agent runs as root without")),
        "{all:#?}"
    );
    h.stop().await;
}
