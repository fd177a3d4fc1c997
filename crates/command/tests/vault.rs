//! The credential vault at the egress proxy: an agent calls a bound HTTPS
//! destination (`api.example.test`, a loopback TLS server with a test
//! authority's certificate, which the vault is told to reach at
//! 127.0.0.1) with a placeholder; the server receives the real value. A
//! destination without a binding passes through `CONNECT` untouched, a
//! plain HTTP one gets its header set, and the agent can read the real
//! values nowhere.

use std::ffi::OsString;

use korvus_command::{CommandRunner, Credential, Destination, Network, Roots, Vault};
use korvus_model_stub::{Script, StubServer, TestCa};
use korvus_store::SessionStatus;

use crate::support::{harness, sh};

const REAL: &str = "Bearer real-vault-9d41c07a";
const REAL_FILE: &str = "Bearer real-from-file-52be";
const VAR: &str = "KORVUS_TEST_VAULT_VALUE";

const AGENT: &str = r#"
    env > env.txt
    tr '\0' '\n' < /proc/self/environ > proc-environ.txt
    call() { curl -s --max-time 20 -H 'content-type: application/json' -d '{"input":"hi"}' "$@"; echo " exit=$?"; }
    call -H "Authorization: Bearer $API_TOKEN" "https://api.example.test:$BOUND/v1/responses" > bound.txt
    call --cacert "$OTHER_CA" -H "Authorization: Bearer agents-own" "https://127.0.0.1:$OTHER/v1/responses" > other.txt
    call -H "Authorization: Bearer $API_TOKEN" "http://127.0.0.1:$PLAIN/v1/responses" > plain.txt
    echo '# R' > report.md
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bound_destinations_get_the_real_credential_and_others_pass_untouched() {
    assert!(
        rustix::process::geteuid().is_root(),
        "the egress proxy needs root (cargo xtask test)"
    );
    let bound_ca = TestCa::with_names(&["api.example.test"]).unwrap();
    let bound = StubServer::start_tls(Script::default(), &bound_ca)
        .await
        .unwrap();
    let other_ca = TestCa::new().unwrap();
    let other = StubServer::start_tls(Script::default(), &other_ca)
        .await
        .unwrap();
    let plain = StubServer::start(Script::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let other_pem = dir.path().join("other-ca.pem");
    std::fs::write(&other_pem, other_ca.ca_pem()).unwrap();
    let secret_file = dir.path().join("plain-credential");
    std::fs::write(&secret_file, format!("{REAL_FILE}\n")).unwrap();
    // The agent user (root here) reads the other authority.
    let bound_dest = Destination::new("api.example.test", bound.addr().port());
    let plain_dest = Destination::new("127.0.0.1", plain.addr().port());
    let vault = Vault::new()
        .credential(
            Credential::from_env(bound_dest.clone(), "Authorization", VAR)
                .placeholder_in("API_TOKEN"),
        )
        .credential(
            Credential::from_file(plain_dest.clone(), "authorization", &secret_file)
                .over_plain_http(),
        )
        .trusting(Roots::only().with(bound_ca.ca_der().clone()))
        .resolve("api.example.test", [127, 0, 0, 1].into());
    let source: Vec<(OsString, OsString)> = std::env::vars_os()
        .chain([(VAR.into(), REAL.into())])
        .collect();
    let runner: CommandRunner = sh(AGENT)
        .network(Network::allow([
            bound_dest,
            Destination::new("127.0.0.1", other.addr().port()),
            plain_dest,
        ]))
        .env_source(source)
        .env_pass(VAR)
        .env("BOUND", bound.addr().port().to_string())
        .env("OTHER", other.addr().port().to_string())
        .env("PLAIN", plain.addr().port().to_string())
        .env("OTHER_CA", other_pem.as_os_str())
        .vault(vault);
    let h = harness(runner).await;
    let row = h.run("call out").await;
    assert_eq!(row.status, SessionStatus::Completed, "{row:?}");

    let key = |stub: &StubServer| {
        let requests = stub.requests();
        assert_eq!(requests.len(), 1, "{requests:#?}");
        requests[0].key.clone().unwrap_or_default()
    };
    assert_eq!(
        key(&bound),
        REAL,
        "the bound destination got the real value"
    );
    assert_eq!(
        key(&other),
        "Bearer agents-own",
        "an unbound one is untouched"
    );
    assert_eq!(key(&plain), REAL_FILE, "plain HTTP gets the header set");
    for file in ["bound.txt", "other.txt", "plain.txt"] {
        let text = h.artifact_text(row.id, file).await;
        assert!(
            text.contains("response") && text.ends_with(" exit=0\n"),
            "{file}: {text}"
        );
    }
    for file in [
        "env.txt",
        "proc-environ.txt",
        "bound.txt",
        "other.txt",
        "plain.txt",
    ] {
        let text = h.artifact_text(row.id, file).await;
        for secret in [REAL, REAL_FILE, VAR] {
            assert!(!text.contains(secret), "{file} holds {secret}:\n{text}");
        }
    }
    let env = h.artifact_text(row.id, "env.txt").await;
    assert!(env.contains("API_TOKEN=korvus-vault-placeholder"), "{env}");
    for var in [
        "NODE_EXTRA_CA_CERTS=",
        "SSL_CERT_FILE=",
        "CURL_CA_BUNDLE=",
        "GIT_SSL_CAINFO=",
        "REQUESTS_CA_BUNDLE=",
    ] {
        assert!(env.contains(var), "{var} in {env}");
    }
    let texts = h.texts(row.id).await;
    let port = bound.addr().port();
    assert!(
        texts.iter().any(|t| t
            == &format!("vault: authorization set on a request to api.example.test:{port} (the agent's value, if any, replaced)")),
        "{texts:#?}"
    );
    assert!(
        texts
            .iter()
            .any(|t| t == "vault: 2 credential(s) bound, 2 injection(s)"),
        "{texts:#?}"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credential_for_a_destination_the_policy_does_not_allow_fails_the_run() {
    let vault = Vault::new().credential(Credential::from_env(
        Destination::new("api.example.test", 443),
        "Authorization",
        VAR,
    ));
    let runner = sh("touch started; echo '# R' > report.md")
        .network(Network::none())
        .env_source(std::env::vars_os().chain([(VAR.into(), REAL.into())]))
        .vault(vault);
    let h = harness(runner).await;
    let row = h.run("no").await;
    assert_eq!(row.status, SessionStatus::Failed, "{row:?}");
    let texts = h.all_texts(row.id).await;
    assert!(
        texts
            .iter()
            .any(|t| t.contains("the credential vault could not be set up")),
        "{texts:#?}"
    );
    assert!(h
        .store_artifacts(row.id)
        .await
        .iter()
        .all(|a| a != "started"));
    h.stop().await;
}
